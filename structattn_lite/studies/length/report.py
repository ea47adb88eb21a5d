"""Length-generalization tables, figure and widget, and the leakage of random splits.

Reads the long table of ``length_study.curves_frame`` (committed as
``data/results/length_generalization.csv.gz``): one row per (run, evaluated length).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display
from matplotlib.lines import Line2D

from structattn_lite import stats
from structattn_lite.config import missing_committed, results_dir
from structattn_lite.names import PAPER_TASKS, display_name, gloss
from structattn_lite.report import (
    BAND,
    browser,
    count_range,
    figure_size,
    length_panel,
    model_handles,
    model_style,
)
from structattn_lite.studies.length.grids import (
    AUTHORS,
    GRAZZI_TEST_LENGTHS,
    GRAZZI_VAL_LENGTHS,
    TABLE_LENGTHS,
)
from structattn_lite.studies.length.results import COMMITTED_CSV, at_chosen_rates, chosen_rates

METRICS = ("seq_acc", "unseen_acc", "all_acc")  # their words: names.py (``gloss``)

# Our closest counterpart of each authors' model (exact for csp_authors; the rest are our
# own implementations of the same kind of model).
COUNTERPART = {
    "lstm": "RNN",
    "gru": "RNN",
    "complex_rnn": "complex RNN",
    "csp_authors": "CSP-Vanilla",  # their README's CSP-Vanilla row
    "diag_rnn_neg": "Mamba-neg",
    "transformer": "Transformer",
}


def length_summary(curves: pd.DataFrame, metric: str = "all_acc") -> pd.DataFrame:
    """Mean and sd over seeds of ``metric`` at the table lengths, per task/protocol/model."""
    sub = curves[curves["length"].isin(TABLE_LENGTHS)]
    keys = ["task", "protocol", "model"]
    cells = sub.groupby([*keys, "length"])[metric].agg(["mean", "std", "count"]).reset_index()
    wide = cells.set_index([*keys, "length"])
    mean, sd = wide["mean"].unstack("length"), wide["std"].unstack("length")  # keeps NaN sd
    seeds = cells.groupby(keys)["count"].max()
    params = curves.groupby(keys)["n_parameters"].first()
    return mean, sd, seeds, params


def fit_seeds(curves: pd.DataFrame) -> pd.Series:
    """Per task/protocol/model: how many seeds fit their training length by the run's own
    stop rule (final validation whole-string accuracy >= ``stop_at_fit``); empty when the
    runs had no such rule."""
    if "stop_at_fit" not in curves or curves["stop_at_fit"].isna().all():
        return pd.Series(dtype=int)
    runs = curves.drop_duplicates(["task", "protocol", "model", "seed"])
    fit = runs["final_val_seq_acc"] >= runs["stop_at_fit"]
    return fit.groupby([runs["task"], runs["protocol"], runs["model"]]).sum().astype(int)


def length_table(
    curves: pd.DataFrame, metric: str = "all_acc", protocol: str | None = None
) -> pd.DataFrame:
    """Ours at L = 16..256 (mean ± sd) beside the authors' L = 16/32/64 numbers."""
    mean, sd, seeds, params = length_summary(curves, metric)
    fitted = fit_seeds(curves)
    rows = []
    for key in mean.index:
        task, proto, model = key
        if protocol is not None and proto != protocol:
            continue
        row = {"task": task, "protocol": proto, "model": model, "params": int(params[key]),
               "seeds": int(seeds[key])}  # fmt: skip
        if key in fitted.index:
            row["fit"] = f"{fitted[key]}/{int(seeds[key])}"
        for length in TABLE_LENGTHS:
            m = mean.loc[key].get(length, math.nan)
            s = sd.loc[key].get(length, math.nan)
            row[f"L={length}"] = (
                "-" if math.isnan(m) else f"{m:.3f} ± {0 if math.isnan(s) else s:.3f}"
            )
        ref = COUNTERPART.get(model)
        published = AUTHORS.get(task, {}).get(ref) if ref else None
        row["their README's row"] = ref if published else "-"
        for length, value in zip((16, 32, 64), published or (math.nan,) * 3, strict=True):
            row[f"authors L={length}"] = "-" if math.isnan(value) else f"{value:.3f}"
        rows.append(row)
    return pd.DataFrame(rows).set_index(["task", "protocol", "model"])


def length_caption(curves: pd.DataFrame) -> str:
    """The grid a table came from, read from the runs' own config columns."""
    seeds = sorted(curves["seed"].unique().tolist())
    spread = count_range(curves.groupby(["task", "protocol", "model"])["seed"].nunique())
    grid = curves["grid"].iloc[0] if "grid" in curves else "?"
    runs = curves.drop_duplicates(["task", "protocol", "model", "seed"])

    def values(column, fmt="{}"):
        if column not in runs:
            return "?"
        return "/".join(fmt.format(v) for v in sorted(runs[column].dropna().unique().tolist()))

    def strings():  # one count, or each count with the tasks that used it
        if runs["n"].nunique() <= 1:
            return values("n")
        tasks_of = runs.drop_duplicates(["n", "task"]).groupby("n")["task"].apply(sorted)
        return ", ".join(f"{int(n)} ({', '.join(map(display_name, tasks))})"
                         for n, tasks in tasks_of.items())  # fmt: skip

    def budget():  # the epoch cap, and the cells a second pass trained longer
        caps = sorted(runs["epochs"].unique().tolist()) if "epochs" in runs else ["?"]
        if len(caps) == 1:
            return f"{caps[0]} epochs"
        longer = runs[runs["epochs"] > caps[0]].drop_duplicates(["task", "model"])
        cells = ", ".join(
            f"{display_name(m)} on {display_name(t)}"
            for t, m in zip(longer["task"], longer["model"], strict=True)
        )
        return (
            f"{caps[0]} epochs ({'/'.join(map(str, caps[1:]))} where some seed had not fit "
            f"after the first pass, on every seed: {cells})"
        )

    losses = sorted(runs["loss"].dropna().unique()) if "loss" in runs else []
    loss = "/".join(map(display_name, losses)) or "? loss"
    stop = values("stop_at_fit")
    stop_text = (
        f"; stopped once validation whole-string accuracy held {stop} (early stops read "
        "validation only)"
        if stop not in ("?", "")
        else ""
    )
    steps = runs["steps"]
    return (
        f"grid '{grid}': {len(runs)} runs; {spread} seeds per model and task (seeds {seeds}); "
        f"trained at T = {values('train_length')} on n = {strings()} strings "
        f"({values('split')} split), batch {values('batch_size')}, {loss}, "
        f"Adam lr {values('lr', '{:g}')} ({values('schedule')}); at most {budget()}, "
        f"{int(steps.min())}-{int(steps.max())} steps (median {int(steps.median())})"
        f"{stop_text}; scored on fresh strings at every length up to "
        f"{int(curves['length'].max())} (Dyck-1 on a grid of even lengths)"
    )


def _in_order(tasks: pd.Series) -> list[str]:
    """The tasks present, the paper's first in its order, then any other in the order met:
    a task the study adds is drawn and tabled, never dropped."""
    present = list(dict.fromkeys(tasks))
    return [t for t in PAPER_TASKS if t in present] + [t for t in present if t not in PAPER_TASKS]


def plot_curves(curves: pd.DataFrame, metric: str = "seq_acc", models=None):
    """Accuracy vs evaluation length: one panel per (protocol, task), one line per model
    in its colour, dash and marker (``names.style``) (so lines that coincide stay
    visible), with its 95% band over seeds (``report.seed_band``); the legend sits below the
    panels."""
    tasks = _in_order(curves["task"])
    protocols = [p for p in ("fixed", "variable") if p in set(curves["protocol"])]
    models = models or list(dict.fromkeys(curves["model"]))
    fig, axes = plt.subplots(
        len(protocols),
        len(tasks),
        figsize=figure_size(2, height=2.3 * len(protocols) + 0.7),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for i, proto in enumerate(protocols):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            sub = curves[(curves["task"] == task) & (curves["protocol"] == proto)]
            length_panel(ax, sub, metric, models=models, trained_to=16 if proto == "fixed" else 40)
            ax.set_title(f"{display_name(task)}, {proto} protocol")
            if j == 0:
                ax.set_ylabel(f"accuracy: {display_name(metric)}")
    fig.legend(handles=model_handles(models), loc="outside lower center", ncols=min(len(models), 4),
               title=BAND, title_fontsize=7)  # fmt: skip
    return fig


def length_browser(sources: dict[str, pd.DataFrame], metric: str = "seq_acc"):
    """Pick a source (committed grid, profile runs), task, model, protocol and metric: the
    curve per seed and the table row."""

    def choices(curves):
        return {k: curves[k].tolist() for k in ("task", "model", "protocol")}

    def show(curves, task, model, protocol, metric):
        sub = curves[
            (curves["task"] == task) & (curves["model"] == model) & (curves["protocol"] == protocol)
        ]
        if sub.empty:
            print("no run for this choice in this source")
            return
        fig, ax = plt.subplots(figsize=(6, 3))
        for seed, g in sub.groupby("seed"):
            ax.plot(g["length"], g[metric], lw=1, label=f"seed {seed}")
        ax.axvline(int(sub["train_length"].iloc[0]), color="grey", ls=":", label="training length")
        ax.set(
            xscale="log",
            xlabel="evaluation length L (symbols)",
            ylim=(-0.02, 1.02),
            ylabel=gloss(metric),
        )
        ax.set_title(f"{display_name(model)} on {display_name(task)} ({protocol})", fontsize=9)
        ax.legend(fontsize=7)
        plt.show()
        table = length_table(curves, metric)
        key = (task, protocol, model)
        display(table.loc[[key]] if key in table.index else "no table row")

    metrics = [metric, *(m for m in METRICS if m != metric)]  # opens on ``metric``
    return browser(sources, choices, show, extra={"metric": metrics})


def load_curves(grid: str = "committed", missing_ok: bool | None = None) -> pd.DataFrame:
    """A committed grid's curves from data/results ("committed", "authors_short", ...);
    an empty frame for a grid whose file is not there when ``missing_ok`` (by default, for
    every grid but "committed"), else a FileNotFoundError naming the file."""
    path = results_dir() / COMMITTED_CSV[grid]
    if not path.exists():
        if not (grid != "committed" if missing_ok is None else missing_ok):
            raise missing_committed(path)
        return pd.DataFrame()
    return pd.read_csv(path)


# --- how far each model holds, read from the curves ------------------------------

FIT = 0.99  # a model "fits" its training length when its whole-string accuracy reaches this
HOLDS = 0.95  # and "holds" a length while its mean whole-string accuracy stays at or above this


def reach(curves: pd.DataFrame, task: str, protocol: str, model: str) -> dict:
    """Whole-string accuracy at the training length, the longest length it holds, and at
    the longest evaluated length (means over seeds)."""
    sub = curves[
        (curves["task"] == task) & (curves["protocol"] == protocol) & (curves["model"] == model)
    ]
    mean = sub.groupby("length")["seq_acc"].mean()
    train = int(sub["train_length"].iloc[0])
    at_train = mean.loc[:train].iloc[-1]
    beyond = mean.loc[train:]
    broken = beyond[beyond < HOLDS]
    holds = int(beyond.index[-1]) if broken.empty else int(mean.loc[: broken.index[0]].index[-2])
    return {
        "train": train,
        "at_train": at_train,
        "holds": holds if at_train >= HOLDS else None,
        "longest": int(mean.index[-1]),
        "at_longest": mean.iloc[-1],
        "seeds": sub["seed"].nunique(),
    }


def reach_table(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per (protocol, task, model): whole-string accuracy at the training length
    T (mean over seeds) and whether it fits (>= ``FIT``), the longest length it holds
    (mean >= ``HOLDS``; empty when it does not hold T), and its accuracy at the longest
    length scored. (How many seeds met the run's own fit rule: ``length_table``'s fit.)"""
    rows = []
    for protocol, task, model in curves[["protocol", "task", "model"]].drop_duplicates().values:
        r = reach(curves, task, protocol, model)
        rows.append({"protocol": protocol, "task": task, "model": model, "T": r["train"],
                     "at T": r["at_train"], "fits": r["at_train"] >= FIT,
                     "holds to L": r["holds"], "longest L": r["longest"],
                     "at longest": r["at_longest"]})  # fmt: skip
    table = pd.DataFrame(rows).astype({"holds to L": "Int64"})
    order = {t: i for i, t in enumerate(_in_order(table["task"]))}
    table = table.sort_values(
        ["protocol", "task"], key=lambda c: c.map(order) if c.name == "task" else c, kind="stable"
    )
    return table.set_index(["protocol", "task", "model"])


# --- Grazzi et al.'s protocol: the rate chosen on validation, then length ----------------


def grazzi_table(curves: pd.DataFrame) -> pd.DataFrame:
    """Per model of the grazzi grid: each rate's mean final validation accuracy (lengths
    64..128, the only number the choice reads), the chosen rate, and at that rate the
    whole-string accuracy at the test lengths, mean [95% t] over seeds."""
    rates, chosen = chosen_rates(curves), at_chosen_rates(curves)
    rows = []
    for (task, model), g in rates.groupby(["task", "model"], sort=False):
        row = {"task": task, "model": model_style(model)["name"]}
        row |= {f"validation at lr {r.lr:g}": round(r.val_acc, 3) for r in g.itertuples()}
        row["chosen lr"] = f"{g.loc[g['chosen'], 'lr'].iloc[0]:g}"
        runs = chosen[(chosen["task"] == task) & (chosen["model"] == model)]
        for length in GRAZZI_TEST_LENGTHS:
            values = runs.loc[runs["length"] == length, "seq_acc"].dropna().tolist()
            mean, low, high, n = stats.mean_interval(values, bounds=stats.UNIT)
            row[f"test L={length}"] = f"{mean:.3f} [{low:.3f}, {high:.3f}] ({n})"
        rows.append(row)
    return pd.DataFrame(rows).set_index(["task", "model"])


def grazzi_figure(curves: pd.DataFrame):
    """Left: each model's validation accuracy (lengths 64..128) against the rate, its
    choice ringed; right: whole-string accuracy against length at the chosen rate
    (``length_panel``: mean over seeds, 95% t band); the training lengths shaded."""
    rates, chosen = chosen_rates(curves), at_chosen_rates(curves)
    models = list(dict.fromkeys(curves["model"]))
    fig, (left, right) = plt.subplots(
        1, 2, figsize=figure_size(2, height=3.2), layout="constrained", width_ratios=(1, 1.6)
    )
    for model in models:
        style = model_style(model)
        g = rates[rates["model"] == model].sort_values("lr")
        left.plot(g["lr"], g["val_acc"], color=style["color"], ls=style["ls"],
                  marker=style["marker"], lw=1)  # fmt: skip
        pick = g[g["chosen"]]
        left.scatter(pick["lr"], pick["val_acc"], s=120, facecolors="none",
                     edgecolors=style["color"], lw=1.2)  # fmt: skip
    left.set(xscale="log", xlabel="learning rate (Adam, constant)", ylim=(0.4, 1.02),
             ylabel="validation accuracy, lengths 64-128",
             title="the rate, chosen on validation")  # fmt: skip
    length_panel(right, chosen, "seq_acc", models=models, ylim=(0.4, 1.02))
    right.axvspan(1, curves["train_length"].max(), color="0.92", lw=0)
    right.text(6, 0.45, "training\nlengths", fontsize=7, ha="center")
    right.axhline(0.5, color="0.5", ls=":", lw=0.8)
    right.set(ylabel="whole-string accuracy at L", title="parity at the chosen rate")
    handles = [*model_handles(models),
               Line2D([], [], ls="", marker="o", ms=9, mfc="none", mec="k", label="chosen")]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6),
               title=BAND, title_fontsize=7)  # fmt: skip
    return fig


def grazzi_caption(curves: pd.DataFrame) -> str:
    """The grid a grazzi table or figure comes from, read off its curves."""
    runs = curves.drop_duplicates(["task", "model", "lr", "seed"])
    seeds = sorted(int(s) for s in runs["seed"].unique())
    first, last = GRAZZI_VAL_LENGTHS
    rates = ", ".join(f"{lr:g}" for lr in sorted(runs["lr"].unique()))
    return (
        f"grid 'grazzi': {len(runs)} runs ({runs['model'].nunique()} models x rates {rates} x "
        f"{len(seeds)} seeds {seeds}); fresh strings of lengths 1-{runs['train_length'].max()} "
        f"every step, batch {runs['batch_size'].iloc[0]}, {runs['steps'].max()} steps of Adam "
        f"at a constant rate; the rate chosen on 512 validation strings scored at lengths "
        f"{first}-{last}; whole-string accuracy on 500 fresh strings per test length"
    )
