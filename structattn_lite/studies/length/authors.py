"""The authors' README table reproduced with their own model and protocol (notebook 05):
ours beside their CSP-Vanilla row with a 95% interval and the ledger's verdict per length,
and as a figure."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from structattn_lite.names import display_name
from structattn_lite.report import (
    BAND,
    NO_ROW,
    figure_size,
    ledger_interval,
    ledger_rows,
    length_panel,
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
    """All-positions accuracy against evaluation length, one panel per task
    (``length_panel``: our mean with its 95% t band over seeds), their README numbers as
    points."""
    tasks = list(dict.fromkeys(curves["task"]))
    fig, axes = plt.subplots(
        1, len(tasks), figsize=figure_size(2, height=2.6), squeeze=False, layout="constrained"
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        at = curves[curves["task"] == task]
        published = AUTHORS.get(AUTHORS_TASK.get(task, task), {}).get("CSP-Vanilla")
        length_panel(ax, at, "all_acc", trained_to=16, ylim=(0.4, 1.02),
                     published={"authors' README": ((16, 32, 64), published)} if published else None)  # fmt: skip
        ax.set_title(display_name(AUTHORS_TASK.get(task, task)))
    axes[0][0].set_ylabel("accuracy, all positions")
    legend = {}  # one entry per label, below the panels and not over a curve
    for ax in axes[0]:
        legend |= dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=2, fontsize=7,
               title=BAND, title_fontsize=7)  # fmt: skip
    return fig
