"""What every study shares when it shows results: the figure file format, mean ± sd,
and the live training plot a notebook can hang on a sweep.
"""

from __future__ import annotations

from pathlib import Path

import ipywidgets as widgets
import matplotlib
import matplotlib.pyplot as plt
from IPython.display import display

from structattn_lite.config import figures_dir
from structattn_lite.training.trainer import Callback

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


class LivePlot(Callback):
    """A trainer callback that redraws loss and test accuracy after every epoch.

    ``display(live.widget)`` in a cell, then pass ``callbacks=[live]`` to a sweep.
    """

    def __init__(self, every: int = 1):
        self.widget = widgets.Output()
        self.every = every
        self.rows: list[dict] = []

    def on_epoch_end(self, trainer, row) -> None:
        if row["epoch"] == 1:
            self.rows = []  # a new run started
        self.rows.append(row)
        if row["epoch"] % self.every:
            return
        fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(9, 2.6))
        epochs = [r["epoch"] for r in self.rows]
        loss_ax.plot(epochs, [r["train_loss"] for r in self.rows])
        loss_ax.set(xlabel="epoch", ylabel="train loss", yscale="log")
        acc_ax.plot(epochs, [r.get("test_acc", float("nan")) for r in self.rows])
        acc_ax.set(xlabel="epoch", ylabel="test accuracy", ylim=(0, 1.02))
        fig.tight_layout()
        with self.widget:
            self.widget.clear_output(wait=True)
            display(fig)
        plt.close(fig)
