"""The card's low-parameter arm (grid ``lowparam``): dot, dense and matroidal attention at
d_model 32 and 64, from its committed records.

``table`` gives one row per size and variant (rate, size, test bpc with its interval, how
runs stopped) and ``low_data_table`` one per fraction of the text at the smallest size;
``figure`` draws test bpc against total and metric-only parameters and against the
training text used, and the validation curves against training characters, with the
n-gram floors the export keeps beside the runs (``attention_ngram_floors.csv``).
"""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from structattn_lite import stats
from structattn_lite.config import results_dir
from structattn_lite.records import RunRecord
from structattn_lite.report import figure_size, model_style
from structattn_lite.studies.attention.grids import FLOORS_CSV, GRIDS, heads_for, variant_configs
from structattn_lite.studies.attention.tables import (
    finished_finals,
    rate_sweep,
    variant_key,
    variant_label,
)

GRID = "lowparam"
FLOORS_DRAWN = ("bigram", "trigram")  # the unigram floor (about 4.4 bpc) is off the axes


TABLE_COLUMNS = ["d_model", "heads", "variant", "tuning runs", "rate", "params",
                 "metric params", "test bpc", "95% low", "95% high", "seeds", "early-stopped",
                 "median steps"]  # fmt: skip


def cells() -> list[tuple[int, str]]:
    """Every (d_model, variant) the grid trains, in its order."""
    return list(dict.fromkeys((c["d_model"], variant_label(c)) for c in _planned()))


def _planned() -> list[dict]:
    """The grid's runs as config fields (the rates not yet chosen), on the text."""
    return variant_configs(GRID, dict, "ptb")


def _test_bpc(g: pd.DataFrame) -> dict:
    """Test bpc of one cell's final runs (mean, 95% t interval, seeds) and how they stopped."""
    mean, low, high, n = stats.mean_interval(g["test_bpc"].tolist())
    return {"test bpc": mean, "95% low": low, "95% high": high, "seeds": n,
            "early-stopped": f"{(g['stop'] == 'early_stop').sum()} of {len(g)}",
            "median steps": g["steps"].median()}  # fmt: skip


def table(runs: pd.DataFrame | None) -> pd.DataFrame:
    """One row per (d_model, variant) of the grid: its tuning runs so far, its chosen
    rate, parameters and test bpc over the final runs (no numbers and 0 seeds where the
    finals are not trained yet)."""
    done = finished_finals(runs)
    tuned = runs[runs["tuning"].astype(bool)] if runs is not None and len(runs) else done
    rows = []
    for d, variant in cells():
        g = done[(done["d_model"] == d) & (done["variant"] == variant)]
        first = g.iloc[0] if len(g) else pd.Series(dtype=object)
        rows.append({
            "d_model": d, "heads": heads_for(d), "variant": variant,
            "tuning runs": int(((tuned["d_model"] == d) & (tuned["variant"] == variant)).sum()),
            "rate": first.get("lr"), "params": first.get("params_total"),
            "metric params": first.get("params_metric"), **_test_bpc(g),
        })  # fmt: skip
    frame = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    counts = ["params", "metric params", "median steps"]
    frame[counts] = frame[counts].astype(float).round().astype("Int64")
    return frame


def low_data_table(runs: pd.DataFrame | None) -> pd.DataFrame:
    """Test bpc per variant and fraction of the text at the smallest size, where the
    low-data half is trained: mean, 95% t interval, seeds, how runs stopped."""
    done = finished_finals(runs, fraction=None)
    parts = dict.fromkeys(
        (c["d_model"], variant_label(c)) for c in _planned() if c.get("data_fraction", 1.0) < 1
    )
    rows = []
    for d, variant in parts:
        for fraction in (*GRIDS[GRID]["fractions"], 1.0):
            g = done[(done["d_model"] == d) & (done["variant"] == variant)
                     & (done["fraction"] == fraction)]  # fmt: skip
            rows.append({"d_model": d, "variant": variant, "fraction": fraction, **_test_bpc(g)})
    return pd.DataFrame(rows)


def tuning(histories: list[RunRecord]) -> pd.DataFrame:
    """The rate sweep exactly as the choice read it (``tables.rate_sweep``): mean best
    validation bpc of the tuning runs and the seeds behind it, by size, variant and peak
    rate; rates past the grid's ``lrs`` are its widening."""
    tuned = [r for r in histories if not r.config["read_test"]]
    if not tuned:
        return pd.DataFrame(columns=["d_model", "variant", "lr", "val bpc", "seeds"])
    names = {variant_key(r.config): (r.config["d_model"], r.extra["variant"]) for r in tuned}
    sweep = rate_sweep(tuned)
    sweep[["d_model", "variant"]] = [names[k] for k in sweep["key"]]
    sweep = sweep.rename(columns={"best": "val bpc"})
    return sweep[["d_model", "variant", "lr", "val bpc", "seeds"]].sort_values(
        ["d_model", "variant", "lr"], ignore_index=True
    )


def tuning_table(histories: list[RunRecord]) -> pd.DataFrame:
    """``tuning`` as a table: a row per size and variant, a column per rate tried."""
    sweep = tuning(histories)
    return sweep.pivot_table(index=["d_model", "variant"], columns="lr",
                             values=["val bpc", "seeds"]).round(3)  # fmt: skip


def caption(runs: pd.DataFrame | None) -> str:
    """The grid a table or figure comes from, read off the spec and the runs."""
    spec, done = GRIDS[GRID], finished_finals(runs)
    recipe = spec["recipe"]
    tuned = runs[runs["tuning"].astype(bool)] if runs is not None and len(runs) else done
    return (
        f"grid {GRID}: 2 layers, context 128, batch 32, character PTB; cosine over at most "
        f"{recipe['max_steps']:,} steps, early stop after {recipe['patience']} evaluations "
        f"({recipe['patience'] * recipe['eval_every']:,} steps) without a better validation "
        f"bpc; rates chosen on validation at this budget over seeds "
        f"{', '.join(map(str, spec['tune_seeds']))} ({len(tuned)} tuning runs), then "
        f"{len(done)} final runs on seeds {', '.join(map(str, spec['seeds']))} and "
        f"{len(finished_finals(runs, fraction=None)) - len(done)} on "
        f"{' and '.join(f'{f:.0%}' for f in spec['fractions'])} of the text (d_model "
        f"{min(size['d_model'] for size in spec['sizes'])}); test bpc, mean and 95% t interval"
    )


def floors() -> dict[str, float]:
    """The committed test-split n-gram floors ({"bigram": bpc, ...}), or {} without them."""
    path = results_dir() / FLOORS_CSV
    if not path.exists():
        return {}
    frame = pd.read_csv(path)
    return dict(frame.loc[frame["split"] == "test", ["model", "bpc"]].values)


def figure(runs: pd.DataFrame | None, histories: list[RunRecord]):
    """Five panels: (a) the rate sweep as the choice read it (``tuning``) against the
    peak rate (rates with all tuning seeds in); (b, c) test bpc of the final runs against
    all parameters and against the metric's own (one point per size); (d) the finals' mean
    validation bpc against training characters with the bigram and trigram floors; (e)
    test bpc against the share of the training text (d_model 32). Solid: d_model 32;
    dashed: 64."""
    summary = table(runs).query("seeds > 0")
    fig, axes = plt.subplots(2, 3, figsize=figure_size(2, 4.6))
    (sweep_ax, params_ax, metric_ax), (curve_ax, data_ax, legend_ax) = axes
    legend_ax.axis("off")
    sizes = sorted(size["d_model"] for size in GRIDS[GRID]["sizes"])
    ls_of = dict(zip(sizes, ("-", "--"), strict=True))
    rates = tuning(histories)  # a rate with some tuning seeds still to come is not drawn
    rates = rates[rates["seeds"] == len(GRIDS[GRID]["tune_seeds"])]
    for (d, variant), g in rates.groupby(["d_model", "variant"]):
        style = model_style(variant)
        sweep_ax.plot(g["lr"], g["val bpc"], ls=ls_of.get(d, ":"), color=style["color"],
                      marker=style["marker"], label=style["name"] if d == sizes[0] else None)  # fmt: skip
    low_data = low_data_table(runs).query("seeds > 0")
    for ax, frame, x in ((params_ax, summary, "params"), (metric_ax, summary, "metric params"),
                         (data_ax, low_data, "fraction")):  # fmt: skip
        for variant, g in frame.groupby("variant", sort=False):  # test bpc, 95% interval
            style = model_style(variant)
            ax.errorbar(g[x], g["test bpc"], yerr=[g["test bpc"] - g["95% low"], g["95% high"] -
                        g["test bpc"]], color=style["color"], marker=style["marker"], capsize=2)  # fmt: skip
    for d, ls in ls_of.items():
        for variant in summary["variant"].unique():
            curves = [r.history.set_index("step")["val_bpc"] for r in histories
                      if r.config["read_test"] and r.config["d_model"] == d
                      and r.extra.get("variant") == variant]  # fmt: skip
            if curves:
                mean = pd.concat(curves, axis=1).mean(axis=1)
                chars = mean.index * 32 * 128  # batch x context per step
                curve_ax.plot(chars, mean.values, ls=ls, color=model_style(variant)["color"])
    known = floors()  # on the curves only: beside the final numbers they flatten the scale
    for name in FLOORS_DRAWN:
        if name in known:
            curve_ax.axhline(known[name], color="0.6", lw=0.8, ls=":")
            curve_ax.annotate(f"{name} floor", (0.98, known[name]), xycoords=("axes fraction",
                              "data"), ha="right", va="bottom", fontsize=6, color="0.4")  # fmt: skip
    sweep_ax.set(xscale="log", xlabel="peak learning rate", ylabel="validation bpc (tuning)")
    if len(rates):  # one labelled tick per rate tried
        sweep_ax.set_xticks(sorted(rates["lr"].unique()), minor=False)
        sweep_ax.set_xticks([], minor=True)
        sweep_ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        sweep_ax.tick_params(axis="x", labelrotation=45)
    params_ax.set(xlabel="parameters (thousands)", ylabel="test bpc")
    params_ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
    params_ax.xaxis.set_major_formatter(
        matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1e3:g}")
    )
    metric_ax.set(xlabel="metric parameters", ylabel="test bpc")
    curve_ax.set(xscale="log", xlabel="training characters", ylabel="validation bpc")
    data_ax.set(xscale="log", xlabel="share of the training text (d_model 32)", ylabel="test bpc")
    data_ax.set_xticks(list(GRIDS[GRID]["fractions"]) + [1.0])
    data_ax.set_xlim(0.006, 1.6)
    data_ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0, decimals=0))
    if "bigram" in known:  # the first evaluations sit far above every floor
        curve_ax.set_ylim(top=known["bigram"] + 0.3)
    if summary.empty:  # the finals come once every variant's rate is chosen
        for ax in (params_ax, metric_ax, curve_ax, data_ax):
            ax.text(0.5, 0.5, "no final runs committed yet", transform=ax.transAxes,
                    ha="center", va="center", fontsize=7, color="0.4")  # fmt: skip
    handles, labels = sweep_ax.get_legend_handles_labels()
    for d, ls in ls_of.items():  # the line style says the width, in the two line panels
        handles.append(matplotlib.lines.Line2D([], [], color="0.3", ls=ls))
        labels.append(f"d_model {d}")
    legend_ax.legend(handles, labels, loc="center", frameon=False)
    fig.tight_layout()
    return fig
