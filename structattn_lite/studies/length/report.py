"""Length-generalization tables, figure and widget, and the leakage of random splits.

Reads the long table of ``length_study.curves_frame`` (committed as
``data/results/length_generalization.csv``): one row per (run, evaluated length).
"""

from __future__ import annotations

import math

import pandas as pd

from structattn_lite.data.tasks import make_dataset
from structattn_lite.studies.length.experiment import TABLE_LENGTHS

LENGTH_CSV = "length_generalization.csv"
METRICS = {
    "seq_acc": "whole string (label at position L)",
    "unseen_acc": "positions beyond the training length",
    "all_acc": "all L positions (the authors' README metric, we believe)",
}

# Authors' README: trained at T=16, mean over 5 seeds, accuracy at L = 16 / 32 / 64.
AUTHORS = {
    "parity": {"RNN": (1.000, 1.000, 1.000), "complex RNN": (1.000, 0.999, 0.994),
               "CSP-Vanilla": (1.000, 0.922, 0.716), "CSP-Fast": (0.962, 0.790, 0.645),
               "Mamba-neg": (0.967, 0.776, 0.638), "Transformer": (0.976, 0.727, 0.600)},
    "mod3": {"RNN": (1.000, 1.000, 1.000), "complex RNN": (1.000, 0.996, 0.983),
             "CSP-Vanilla": (1.000, 0.980, 0.921), "CSP-Fast": (1.000, 0.974, 0.876),
             "Mamba-neg": (1.000, 0.803, 0.565), "Transformer": (0.999, 0.646, 0.475)},
    "dyck1": {"Transformer": (1.000, 0.995, 0.983), "RNN": (1.000, 0.999, 0.990),
              "complex RNN": (1.000, 1.000, 0.984), "CSP-Vanilla": (0.999, 0.972, 0.857),
              "CSP-Fast": (0.993, 0.966, 0.919), "Mamba-neg": (1.000, 0.981, 0.900)},
}  # fmt: skip
# Our closest counterpart of each authors' model (approximate: their code is not ours).
COUNTERPART = {
    "lstm": "RNN",
    "gru": "RNN",
    "complex_rnn": "complex RNN",
    "csp_upstream": "CSP-Vanilla",
    "diag_rnn_neg": "Mamba-neg",
    "transformer": "Transformer",
}


def length_summary(curves: pd.DataFrame, metric: str = "all_acc") -> pd.DataFrame:
    """Mean and sd over seeds of ``metric`` at the table lengths, per task/protocol/model."""
    sub = curves[curves["length"].isin(TABLE_LENGTHS)]
    keys = ["task", "protocol", "model"]
    stats = sub.groupby([*keys, "length"])[metric].agg(["mean", "std", "count"]).reset_index()
    wide = stats.set_index([*keys, "length"])
    mean, sd = wide["mean"].unstack("length"), wide["std"].unstack("length")  # keeps NaN sd
    seeds = stats.groupby(keys)["count"].max()
    params = curves.groupby(keys)["n_parameters"].first()
    return mean, sd, seeds, params


def length_table(
    curves: pd.DataFrame, metric: str = "all_acc", protocol: str | None = None
) -> pd.DataFrame:
    """Ours at L = 16..256 (mean ± sd) beside the authors' L = 16/32/64 numbers."""
    mean, sd, seeds, params = length_summary(curves, metric)
    rows = []
    for key in mean.index:
        task, proto, model = key
        if protocol is not None and proto != protocol:
            continue
        row = {
            "task": task,
            "protocol": proto,
            "model": model,
            "params": int(params[key]),
            "seeds": int(seeds[key]),
        }
        for length in TABLE_LENGTHS:
            m = mean.loc[key].get(length, math.nan)
            s = sd.loc[key].get(length, math.nan)
            row[f"L={length}"] = (
                "-" if math.isnan(m) else f"{m:.3f} ± {0 if math.isnan(s) else s:.3f}"
            )
        ref = COUNTERPART.get(model)
        published = AUTHORS.get(task, {}).get(ref) if ref else None
        row["authors' model"] = ref if published else "-"
        for length, value in zip((16, 32, 64), published or (math.nan,) * 3, strict=True):
            row[f"authors L={length}"] = "-" if math.isnan(value) else f"{value:.3f}"
        rows.append(row)
    return pd.DataFrame(rows).set_index(["task", "protocol", "model"])


def length_caption(curves: pd.DataFrame) -> str:
    seeds = sorted(curves["seed"].unique().tolist())
    per_cell = curves.groupby(["task", "protocol", "model"])["seed"].nunique()
    spread = (
        f"{per_cell.min()}"
        if per_cell.min() == per_cell.max()
        else f"{per_cell.min()}-{per_cell.max()}"
    )
    epochs = "/".join(str(e) for e in sorted(curves["epochs"].unique().tolist()))
    grid = curves["grid"].iloc[0] if "grid" in curves else "?"
    return (
        f"grid '{grid}': {curves.groupby(['task', 'protocol', 'model', 'seed']).ngroups} runs; "
        f"{spread} seeds per model and task (seeds {seeds}); {epochs} epochs of ~25 steps (batch 64); fixed: train at T=16 on a "
        "disjoint train/test split; variable: fresh strings, lengths 1..40 per batch; "
        "cross-entropy, Adam 1e-3; parity/mod-3 scored at every length 1..256, Dyck-1 on a grid "
        "of even lengths (balanced 50/50 at each)"
    )


def plot_curves(curves: pd.DataFrame, metric: str = "seq_acc", models=None):
    """Accuracy vs evaluation length: one panel per (protocol, task), one line per model."""
    import matplotlib.pyplot as plt

    tasks = [t for t in ("parity", "mod3", "dyck1") if t in set(curves["task"])]
    protocols = [p for p in ("fixed", "variable") if p in set(curves["protocol"])]
    models = models or list(dict.fromkeys(curves["model"]))
    fig, axes = plt.subplots(len(protocols), len(tasks), figsize=(4.2 * len(tasks), 3.2 * len(protocols)),
                             squeeze=False, sharey=True)  # fmt: skip
    colors = plt.get_cmap("tab10")
    for i, proto in enumerate(protocols):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            sub = curves[(curves["task"] == task) & (curves["protocol"] == proto)]
            for k, model in enumerate(models):
                g = sub[sub["model"] == model].groupby("length")[metric]
                m, s = g.mean(), g.std().fillna(0)
                if len(m):
                    ax.plot(m.index, m.values, label=model, color=colors(k), lw=1.3)
                    ax.fill_between(m.index, m - s, m + s, color=colors(k), alpha=0.15, lw=0)
            ax.axvline(16 if proto == "fixed" else 40, color="grey", ls=":", lw=1)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{task}, {proto} protocol", fontsize=9)
            ax.set_xlabel("evaluation length L")
            if j == 0:
                ax.set_ylabel(metric)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors(k), lw=1.5) for k in range(len(models))]
    fig.legend(
        handles, models, loc="lower center", ncol=min(len(models), 8), fontsize=8, frameon=False
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def leakage_table(tasks=("parity", "mod3", "dyck1"), sizes=None, length: int = 16, seeds=(0, 1, 2)):
    """Share of test strings (and prefixes) also in training: random split vs disjoint."""
    from structattn_lite.data.tasks import PAPER_N

    sizes = sizes or {
        "paper sizes": PAPER_N,
        "ablation grid": dict.fromkeys(tasks, 1000),
        "length grid": dict.fromkeys(tasks, 2000),
    }
    rows = []
    for label, ns in sizes.items():
        for task in tasks:
            for split, leaky in (("random (paper)", True), ("disjoint (ours)", False)):
                stats = []
                for seed in seeds:
                    try:
                        stats.append(make_dataset(task, ns[task], length, seed, leaky=leaky).stats)
                    except ValueError:  # too few distinct strings exist for a disjoint split
                        stats.append(None)
                ok = [s for s in stats if s is not None]
                rows.append(
                    {
                        "data": label,
                        "task": task,
                        "n": ns[task],
                        "split": split,
                        "distinct strings": sum(s["n_distinct"] for s in ok) / len(ok)
                        if ok
                        else math.nan,
                        "test strings in train": sum(s["test_in_train"] for s in ok) / len(ok)
                        if ok
                        else math.nan,
                        "test prefixes in train": sum(s["test_prefixes_in_train"] for s in ok)
                        / len(ok)
                        if ok
                        else math.nan,
                    }
                )
    return pd.DataFrame(rows).set_index(["data", "task", "n", "split"])


def length_browser(curves: pd.DataFrame, metric: str = "seq_acc"):
    """Pick task, model, protocol (and metric): the curve per seed and the table row."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    pick = {
        "task": widgets.Dropdown(options=sorted(curves["task"].unique()), description="task"),
        "model": widgets.Dropdown(
            options=list(dict.fromkeys(curves["model"])), description="model"
        ),
        "protocol": widgets.Dropdown(
            options=sorted(curves["protocol"].unique()), description="protocol"
        ),
        "metric": widgets.Dropdown(options=list(METRICS), value=metric, description="metric"),
    }
    table = length_table(curves, metric)

    def show(task, model, protocol, metric):
        sub = curves[
            (curves["task"] == task) & (curves["model"] == model) & (curves["protocol"] == protocol)
        ]
        fig, ax = plt.subplots(figsize=(6, 3))
        for seed, g in sub.groupby("seed"):
            ax.plot(g["length"], g[metric], lw=1, label=f"seed {seed}")
        ax.axvline(16 if protocol == "fixed" else 40, color="grey", ls=":")
        ax.set(xscale="log", xlabel="evaluation length L", ylabel=metric, ylim=(-0.02, 1.02))
        ax.set_title(f"{model} on {task} ({protocol}): {METRICS[metric]}", fontsize=9)
        ax.legend(fontsize=7)
        plt.show()
        key = (task, protocol, model)
        display(length_table(curves, metric).loc[[key]] if key in table.index else "no runs")

    out = widgets.interactive_output(show, pick)
    return widgets.VBox([widgets.HBox(list(pick.values())), out])


def results_path():
    from structattn_lite.config import results_dir

    return results_dir() / LENGTH_CSV


def load_curves() -> pd.DataFrame:
    path = results_path()
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run the committed length grid first")
    return pd.read_csv(path)
