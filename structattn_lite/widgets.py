"""ipywidgets dashboards over cached run records (no training happens here)."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

from structattn_lite.plots import grokking_figure


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
