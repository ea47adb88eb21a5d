"""ipywidgets dashboards over cached run records (no training happens here)."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

from structattn_lite.plots import grokking_figure
from structattn_lite.training import Callback


def grokking_browser(records) -> widgets.Widget:
    """Pick task, preset and seed from the cached runs; see curves and the summary row."""
    from structattn_lite.csp_study import summarize

    table = summarize(records)
    task = widgets.Dropdown(options=sorted(table["task"].unique()), description="task")
    preset = widgets.Dropdown(options=sorted(table["preset"].unique()), description="preset")
    seed = widgets.Dropdown(options=sorted(table["seed"].unique()), description="seed")
    out = widgets.Output()

    def show(*_):
        chosen = [
            r
            for r in records
            if r.config["task"] == task.value
            and (r.config["preset"] or r.config["model"]) == preset.value
            and r.seed == seed.value
        ]
        out.clear_output(wait=True)
        with out:
            if not chosen:
                print("no cached run for this choice")
                return
            fig = grokking_figure(chosen, task.value)
            display(fig)
            plt.close(fig)
            row = table[
                (table.task == task.value)
                & (table.preset == preset.value)
                & (table.seed == seed.value)
            ]
            display(row)

    for w in (task, preset, seed):
        w.observe(show, names="value")
    show()
    return widgets.VBox([widgets.HBox([task, preset, seed]), out])


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
