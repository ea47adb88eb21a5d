"""The authors' README table reproduced with their own model and protocol (notebook 05):
ours beside their CSP-Vanilla row with a 95% interval and the ledger's verdict per length,
and as a figure."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from structattn_lite.names import display_name
from structattn_lite.report import (
    NO_ROW,
    figure_size,
    ledger_interval,
    ledger_rows,
    model_style,
    seed_band,
)
from structattn_lite.studies.length.grids import AUTHORS, AUTHORS_TASK


def authors_table(curves: pd.DataFrame, lengths=(16, 32, 64)) -> pd.DataFrame:
    """Ours (all positions, the README's metric; and whole string; the mean over the seeds
    of ``curves``) beside the authors' CSP-Vanilla row; then the committed ledger's row
    ``authors/<task>/L<length>``, read by id and never recomputed: its mean with 95%
    interval and seed count, verdict and reason (``NO_ROW`` where it has none)."""
    ledger = ledger_rows()
    rows = []
    for task, g in curves.groupby("task", sort=False):
        published = AUTHORS.get(AUTHORS_TASK.get(task, task), {}).get("CSP-Vanilla")
        for length in lengths:
            at = g[g["length"] == length]
            if at.empty:
                continue
            theirs = published[lengths.index(length)] if published else math.nan
            ident = f"authors/{AUTHORS_TASK.get(task, task)}/L{length}"
            found = ident in ledger.index
            rows.append({"task": task, "L": length, "model": g["model"].iloc[0],
                         "seeds": at["all_acc"].count(),
                         "ours, all positions": f"{at['all_acc'].mean():.3f}",
                         "ours, whole string": f"{at['seq_acc'].mean():.3f}",
                         "authors' README": "-" if math.isnan(theirs) else f"{theirs:.3f}",
                         "ledger row": ident if found else NO_ROW,
                         "ledger: all positions [95%]":
                             ledger_interval(ledger.loc[ident]) if found else NO_ROW,
                         "verdict": ledger.at[ident, "verdict"] if found else NO_ROW,
                         "reason": ledger.at[ident, "reason"] if found else NO_ROW})  # fmt: skip
    return pd.DataFrame(rows).set_index(["task", "L"])


def authors_figure(curves: pd.DataFrame):
    """All-positions accuracy against evaluation length, one panel per task: our mean with
    its 95% t band over seeds (in the model's ``report.MODEL_STYLE`` colour), their README
    numbers as points."""
    tasks = list(dict.fromkeys(curves["task"]))
    fig, axes = plt.subplots(
        1, len(tasks), figsize=figure_size(2, height=2.6), squeeze=False, layout="constrained"
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        at = curves[curves["task"] == task]
        style = model_style(at["model"].iloc[0])
        mean, *band = seed_band(at["all_acc"], at["length"])
        label = f"ours (mean, 95% band): {style['name']}"
        ax.plot(mean.index, mean.values, color=style["color"], lw=1.2, label=label)
        ax.fill_between(mean.index, *band, color=style["color"], alpha=0.2, lw=0)
        published = AUTHORS.get(AUTHORS_TASK.get(task, task), {}).get("CSP-Vanilla")
        if published:
            ax.plot((16, 32, 64), published, "o", color="black", ms=3.5, label="authors' README")
        ax.axvline(16, color="grey", ls=":", lw=1)
        ax.set(
            title=display_name(AUTHORS_TASK.get(task, task)),
            xlabel="evaluation length L",
            ylim=(0.4, 1.02),
        )
        ax.set_xscale("log", base=2)
    axes[0][0].set_ylabel("accuracy, all positions")
    legend = {}  # one entry per label, below the panels and not over a curve
    for ax in axes[0]:
        legend |= dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=2, fontsize=7)
    return fig
