"""Figures for the notebooks, and the one way they are written to disk."""

from __future__ import annotations

from pathlib import Path

import matplotlib

from structattn_lite.paths import figures_dir

# Fixed metadata so re-rendering the same figure gives the same bytes.
_PNG_META = {"Software": None}
_PDF_META = {"Creator": None, "Producer": None, "CreationDate": None}


def save_figure(fig: matplotlib.figure.Figure, notebook: str, name: str) -> list[Path]:
    """Write ``figures/<notebook>_<name>.png`` and ``.pdf``; returns both paths."""
    out = figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{notebook}_{name}"
    png, pdf = stem.with_suffix(".png"), stem.with_suffix(".pdf")
    fig.savefig(png, dpi=120, bbox_inches="tight", metadata=_PNG_META)
    fig.savefig(pdf, bbox_inches="tight", metadata=_PDF_META)
    return [png, pdf]


def jump_epoch(history, level: float = 0.9) -> int | None:
    """First epoch whose test accuracy reaches ``level`` (the grokking jump)."""
    hit = history.index[history["test_acc"] >= level]
    return int(history.loc[hit[0], "epoch"]) if len(hit) else None


def grokking_figure(records, task: str, title: str | None = None):
    """Test accuracy per seed (top) with the per-step gradient norm aligned beneath.

    One column per preset; a dashed line marks each seed's jump (first epoch >= 90%).
    """
    import matplotlib.pyplot as plt

    runs = [r for r in records if r.config["task"] == task]
    presets = sorted({r.config["preset"] or r.config["model"] for r in runs})
    fig, axes = plt.subplots(
        2,
        len(presets),
        figsize=(5.5 * len(presets), 5.5),
        sharex="col",
        squeeze=False,
        gridspec_kw={"height_ratios": [2, 1]},
    )
    for col, preset in enumerate(presets):
        acc_ax, norm_ax = axes[0, col], axes[1, col]
        for i, r in enumerate(
            x for x in runs if (x.config["preset"] or x.config["model"]) == preset
        ):
            h, color = r.history, f"C{i}"
            if not len(h):
                continue
            acc_ax.plot(h["epoch"], h["test_acc"], color=color, label=f"seed {r.seed}")
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
        acc_ax.set(
            title=f"{task}: {preset} preset",
            ylabel="accuracy (solid: test, faint: train)",
            ylim=(0, 1.02),
        )
        acc_ax.legend(fontsize=8, loc="lower right")
        norm_ax.set(xlabel="epoch", ylabel="grad norm before clipping", yscale="log")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
