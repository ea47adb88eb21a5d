"""Figures, tables and the run browser of the grokking study (notebook 03)."""

from __future__ import annotations

import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display
from matplotlib.lines import Line2D

from structattn_lite import names, stats
from structattn_lite.names import display_name
from structattn_lite.records import RunRecord
from structattn_lite.report import (
    NO_ROW,
    PALETTE,
    browser,
    figure_size,
    ledger_interval,
    ledger_rows,
    model_style,
)
from structattn_lite.studies.grokking.grids import PAPER_GROKKING_GAP, PAPER_SEEDS

# The gap and the jump are read on whole-string test accuracy for every preset (the
# paper's metric), so a per-prefix run is not scored on an easier number than a
# one-label-per-string run.
GAP_METRIC = "test_seq_acc"
SPIKE_WINDOW = 2  # a spike "at the jump" falls within this many epochs of it


PLATEAU_ABOVE_CHANCE = 0.1  # an epoch "at chance" scores below chance + this
PLATEAU_EPOCHS = 2  # a grokking phase: at least this many epochs at chance before the jump


def seed_gaps(history: pd.DataFrame, task: str) -> dict:
    """One seed's jump (first epoch at 90%), the gaps to 99% and 100% (None: not reached),
    whether it sat at chance before the jump, and its spike's offset from the jump."""
    acc = history[GAP_METRIC].tolist()
    epochs = history["epoch"].tolist()
    jump = jump_epoch(history)
    before = [a for e, a in zip(epochs, acc, strict=True) if jump is None or e < jump]
    plateau = sum(a < names.chance(task) + PLATEAU_ABOVE_CHANCE for a in before) >= PLATEAU_EPOCHS
    spike = spike_epoch(history)
    return {
        "jump": jump,
        "last": epochs[-1],
        "gap_99": grokking_gap(history, 0.99),
        "gap_100": grokking_gap(history),
        "plateau": plateau,
        "spike_offset": None if jump is None else spike - jump,
    }


def censored_gaps(jumped: pd.DataFrame, column: str) -> tuple[pd.Series, pd.Series]:
    """The gaps ``column`` of the seeds that jumped, a seed that never got there censored
    at its last epoch (for Kaplan-Meier), and whether each got there."""
    reached = jumped[column].notna()
    return jumped[column].where(reached, jumped["last"] - jumped["jump"]).astype(float), reached


def preset_of(record: RunRecord) -> str:
    """A run's CSP preset, or its model where it has none (a baseline)."""
    return record.config["preset"] or record.config["model"]


def summarize(records: list[RunRecord], metric: str = GAP_METRIC) -> pd.DataFrame:
    """One row per run: final test accuracy, F1, grokking gap and jump on ``metric``, and
    the epoch of the largest gradient norm (the spike) relative to the jump."""
    rows = []
    for r in records:
        h = r.history
        scored = h[metric].tolist() if metric in h else []
        jump = jump_epoch(h, metric=metric) if len(h) else None
        spike = spike_epoch(h) if len(h) else None
        rows.append(
            {
                "task": r.config["task"],
                "preset": preset_of(r),
                "seed": r.seed,
                "status": r.status,
                "epochs_run": len(h),
                "final_test_acc": h["test_acc"].iloc[-1] if len(h) else float("nan"),
                "final_test_seq_acc": scored[-1] if scored else float("nan"),
                "final_test_f1": h["test_f1"].iloc[-1] if len(h) else float("nan"),
                "grokking_gap": grokking_gap(h, metric=metric) if len(h) else None,
                "jump_epoch": jump,
                "spike_epoch": spike,
                "spike_minus_jump": spike - jump if None not in (spike, jump) else None,
                "seconds_per_epoch": r.extra.get("seconds", float("nan")) / max(len(h), 1),
            }
        )
    return pd.DataFrame(rows)


def jump_epoch(history, level: float = 0.9, metric: str = GAP_METRIC) -> int | None:
    """First epoch whose ``metric`` reaches ``level`` (the grokking jump)."""
    hit = history.index[history[metric] >= level]
    return int(history.loc[hit[0], "epoch"]) if len(hit) else None


def spike_epoch(history) -> int:
    """The epoch of the largest gradient norm (each epoch's maximum over its steps)."""
    return int(history.loc[history["grad_norm_max"].idxmax(), "epoch"])


def grokking_gap(history, high: float = 1.0, metric: str = GAP_METRIC) -> int | None:
    """The grokking gap, the study's one definition: epochs from the jump (the first
    epoch at 90%) to the first epoch at ``high``; None when either is never reached."""
    jump, first = jump_epoch(history, metric=metric), jump_epoch(history, high, metric)
    return None if jump is None or first is None else first - jump


# The levels the jump and the gap are read at: the jump is the first epoch at 90%, the
# gap runs from there to the first epoch at 99% (or 100%). Each level's line style, and
# the marker and words of each seed's first epoch there (the curves hide 99% vs 100%).
LEVELS = {0.9: ":", 0.99: "--", 1.0: "-"}
CROSSINGS = {0.99: ("v", "first ≥ 99%"), 1.0: ("*", "first at 100%")}


def seed_curves(ax, records, color=None, *, lw: float = 0.8, alpha: float = 1.0,
                metric: str = GAP_METRIC, labels: bool = False) -> None:  # fmt: skip
    """Whole-string test accuracy against epoch on one panel, one line per seed, with the
    levels a gap is read between (90% dotted, 99% dashed, 100% solid): the one way every
    figure draws a seed's curve. ``color``: one colour for all, or {seed: colour};
    ``labels``: a legend label "seed k" per line."""
    for r in records:
        h = r.history
        if not len(h):
            continue
        c = color.get(r.seed) if isinstance(color, dict) else color
        ax.plot(h["epoch"], h[metric], color=c, lw=lw, alpha=alpha,
                label=f"seed {r.seed}" if labels else None)  # fmt: skip
    for level, ls in LEVELS.items():
        ax.axhline(level, color="#555555", ls=ls, lw=0.6)


def grokking_figure(records, task: str, title: str | None = None):
    """Test accuracy per seed (top) with the per-step gradient norm aligned beneath.

    One column per preset; each seed's jump (first epoch >= 90%) is a dashed line, its
    first epochs at 99% and 100% are marked, so the gap can be read off; the legend sits
    below the panels.
    """
    runs = [r for r in records if r.config["task"] == task]
    presets = sorted({preset_of(r) for r in runs})
    fig, axes = plt.subplots(
        2,
        len(presets),
        figsize=figure_size(2 if len(presets) > 1 else 1, height=4.4),
        sharex="col",
        squeeze=False,
        gridspec_kw={"height_ratios": [2, 1]},
        layout="constrained",
    )
    seeds = sorted({r.seed for r in runs})
    # a seed's colour, the same in every panel (the cycle holds no grey: grey is "undecided");
    # black after the palette's nine, so the paper's ten seeds have ten colours
    seed_colors = [*PALETTE, "#000000"]
    colors = {seed: seed_colors[k % len(seed_colors)] for k, seed in enumerate(seeds)}
    for col, preset in enumerate(presets):
        acc_ax, norm_ax = axes[0, col], axes[1, col]
        for r in (x for x in runs if preset_of(x) == preset):
            h, color = r.history, colors[r.seed]
            if not len(h):
                continue
            acc_ax.plot(h["epoch"], h["train_acc"], color=color, alpha=0.35, lw=1)
            norms = r.extra.get("step_grad_norms")
            if norms:  # per step; shipped records keep only the per-epoch max
                steps_per_epoch = max(len(norms) // len(h), 1)
                steps = [(k + 1) / steps_per_epoch for k in range(len(norms))]
                norm_ax.plot(steps, norms, color=color, lw=0.6)
            else:
                norm_ax.plot(h["epoch"], h["grad_norm_max"], color=color, lw=1)
            jump = jump_epoch(h)
            if jump is not None:
                for ax in (acc_ax, norm_ax):
                    ax.axvline(jump, color=color, ls="--", lw=1)
            for level, (marker, _) in CROSSINGS.items():
                first = jump_epoch(h, level)
                if first is not None:
                    acc_ax.plot(first, level, marker=marker, color=color, ms=5, zorder=3)
        seed_curves(acc_ax, [x for x in runs if preset_of(x) == preset], colors, lw=1.2)
        acc_ax.set(
            title=f"{display_name(task)}: {model_style(preset)['name']}",
            ylabel="whole-string test accuracy\n(faint: train, run's labels)",
            ylim=(0, 1.04),
            yticks=(0, 0.2, 0.4, 0.6, 0.8, 0.9, 1),
        )
        norm_ax.set(xlabel="epoch", ylabel="grad norm\nbefore clipping", yscale="log")
    keys = [
        Line2D([], [], color="grey", ls="--", lw=1, label="first ≥ 90% (the jump)"),
        *(Line2D([], [], color="grey", ls="none", marker=m, ms=5, label=words)
          for m, words in CROSSINGS.values()),
        Line2D([], [], color="#555555", lw=0.6, label="levels 90% (dotted), 99%, 100%"),
    ]  # fmt: skip
    seed_lines = [Line2D([], [], color=colors[s], label=f"seed {s}") for s in seeds]
    fig.legend(handles=seed_lines + keys, loc="outside lower center",
               ncols=4 if len(presets) > 1 else 2, fontsize=7)  # fmt: skip
    if title:
        fig.suptitle(title)
    return fig


def grokking_browser(sources: dict[str, list[RunRecord]]) -> widgets.Widget:
    """Pick a source (profile runs or a committed grid), task, preset and seed: the curves
    and the run's summary row. Nothing is retrained."""

    def choices(records):
        table = summarize(records)
        return {k: table[k].tolist() for k in ("task", "preset", "seed")}

    def show(records, task, preset, seed):
        chosen = [r for r in records
                  if (r.config["task"], preset_of(r), r.seed) == (task, preset, seed)]  # fmt: skip
        if not chosen:
            print("no run for this choice in this source")
            return
        fig = grokking_figure(chosen, task)
        display(fig)
        plt.close(fig)
        table = summarize(chosen)
        display(table)

    return browser(sources, choices, show)


NOT_REACHED = "not reached by half the seeds"  # a Kaplan-Meier median that does not exist


def grokking_table(records: list[RunRecord]) -> pd.DataFrame:
    """Per task and preset: seeds reaching 99% and 100% (of those that jumped to 90%), the
    Kaplan-Meier median gaps that count the seeds that never got there, the paper's gap,
    how often the gradient-norm spike sits at the jump; then the committed ledger's row
    ``gap/<preset>/<task>``, read by id and never recomputed: its gap with 95% interval and
    seed count (all the seeds it reads, which may be more than ``records``), verdict and
    reason (``NO_ROW`` where the ledger has no such row)."""
    ledger = ledger_rows()
    per_seed = pd.DataFrame(
        [{"task": r.config["task"], "preset": preset_of(r), **seed_gaps(r.history, r.config["task"])}
         for r in records if len(r.history)]
    )  # fmt: skip
    rows = []
    for (task, preset), seeds in per_seed.groupby(["task", "preset"], sort=False):
        paper = PAPER_GROKKING_GAP.get(task)
        jumped = seeds[seeds["jump"].notna()]
        row = {"task": task, "preset": preset, "seeds": len(seeds), "jumped": len(jumped),
               "at chance first": int(seeds["plateau"].sum())}  # fmt: skip
        for level in ("99", "100"):
            censored, reached = censored_gaps(jumped, f"gap_{level}")
            row[f"reached {level}%"] = int(reached.sum())
            median = stats.km_median(censored, reached)  # inf: fewer than half got there
            row[f"gap to {level}% (KM median)"] = median if math.isfinite(median) else NOT_REACHED
        row["gap, paper"] = f"{paper[0]} ± {paper[1]} ({PAPER_SEEDS} seeds)" if paper else "-"
        at = int((jumped["spike_offset"].abs() <= SPIKE_WINDOW).sum())
        row["spike at jump"] = f"{at} of {len(jumped)}"
        ident = f"gap/{preset}/{task}"
        found = ident in ledger.index
        row["ledger row"] = ident if found else NO_ROW
        row["ledger: gap to 100% [95%]"] = ledger_interval(ledger.loc[ident]) if found else NO_ROW
        for column in ("verdict", "reason"):
            row[column] = ledger.at[ident, column] if found else NO_ROW
        rows.append(row)
    return pd.DataFrame(rows)
