"""The authors' README table reproduced with their own model and protocol (notebook 05):
ours beside their CSP-Vanilla row with a 95% interval and a verdict per length, in
words, and as a figure."""

from __future__ import annotations

import math

import pandas as pd

from structattn_lite.studies.length.report import AUTHORS

AUTHORS_TASK = {"parity": "parity", "mod3_authors": "mod3", "dyck1_authors": "dyck1"}
MAX_HALF_WIDTH = 0.10  # wider 95% intervals decide nothing (the rule of notebook 04)
# The README prints three decimals: its 0.999 stands for anything in [0.9985, 0.9995).
README_ROUNDING = 0.0005


def authors_table(curves: pd.DataFrame, lengths=(16, 32, 64)) -> pd.DataFrame:
    """Ours (all positions, the README's metric; and whole string) beside the authors'
    CSP-Vanilla row, with a 95% t-interval over seeds and a verdict per length: theirs
    is "inside" when it lies within our interval widened by the README's rounding."""
    from scipy.stats import t

    rows = []
    for task, g in curves.groupby("task", sort=False):
        published = AUTHORS.get(AUTHORS_TASK.get(task, task), {}).get("CSP-Vanilla")
        for length in lengths:
            at = g[g["length"] == length]
            if at.empty:
                continue
            n = at["seed"].nunique()
            mean, sd = at["all_acc"].mean(), at["all_acc"].std()
            half = float(t.ppf(0.975, n - 1) * sd / math.sqrt(n)) if n > 1 else math.nan
            theirs = published[lengths.index(length)] if published else math.nan
            if math.isnan(theirs) or math.isnan(half):
                verdict = "no interval" if not math.isnan(theirs) else "no published number"
            elif half > MAX_HALF_WIDTH:  # the seeds disagree too much to decide
                verdict = f"inconclusive (95% CI ±{half:.2f})"
            elif abs(mean - theirs) <= half + README_ROUNDING:
                verdict = "theirs inside our 95% CI"
            else:
                verdict = f"ours {'higher' if mean > theirs else 'lower'} (95% CI excludes theirs)"
            rows.append(
                {
                    "task": task,
                    "L": length,
                    "model": g["model"].iloc[0],
                    "seeds": n,
                    "ours, all positions": f"{mean:.3f} ± {half:.3f}",
                    "authors' README": "-" if math.isnan(theirs) else f"{theirs:.3f}",
                    "verdict": verdict,
                    "ours, whole string": f"{at['seq_acc'].mean():.3f}",
                }
            )
    return pd.DataFrame(rows).set_index(["task", "L"])


def authors_findings(table: pd.DataFrame, caption: str) -> str:
    """The authors' table in words, from the table."""
    if table.empty:
        return "No records of this grid yet."
    inside = (table["verdict"] == "theirs inside our 95% CI").sum()
    lower = table["verdict"].str.startswith("ours lower").sum()
    higher = table["verdict"].str.startswith("ours higher").sum()
    unsure = table["verdict"].str.startswith("inconclusive").sum()
    return (
        f"Of {len(table)} (task, length) cells, the authors' number lies inside our 95% "
        f"interval in {inside}; ours is lower in {lower} and higher in {higher}; "
        f"{unsure} are inconclusive (interval wider than ±{MAX_HALF_WIDTH}). "
        f"Grid: {caption}."
    )


def authors_figure(curves: pd.DataFrame):
    """All-positions accuracy against evaluation length, one panel per task: our mean with
    its 95% t band over seeds, their README numbers as points."""
    import matplotlib.pyplot as plt
    from scipy.stats import t

    from structattn_lite.report import figure_size

    tasks = list(dict.fromkeys(curves["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=figure_size(2, height=2.4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        g = curves[curves["task"] == task].groupby("length")["all_acc"]
        mean, sd, n = g.mean(), g.std().fillna(0), g.count()
        half = t.ppf(0.975, (n - 1).clip(lower=1)) * sd / n.pow(0.5)
        ax.plot(mean.index, mean.values, color="C0", lw=1.2, label="ours (mean, 95% band)")
        ax.fill_between(mean.index, mean - half, mean + half, color="C0", alpha=0.2, lw=0)
        published = AUTHORS.get(AUTHORS_TASK.get(task, task), {}).get("CSP-Vanilla")
        if published:
            ax.plot((16, 32, 64), published, "o", color="C3", ms=4, label="authors' README")
        ax.axvline(16, color="grey", ls=":", lw=1)
        ax.set(title=task, xlabel="evaluation length L", xscale="log", ylim=(0.4, 1.02))
        ax.set_xscale("log", base=2)
    axes[0][0].set_ylabel("accuracy, all positions")
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig
