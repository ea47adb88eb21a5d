"""The claims dashboard: pick a claim, see the paper's number, ours seed by seed, the
interval, the verdict and its rule, and the runs' curves where the records keep them.

Every number, verdict, reason and command it prints is the committed ledger's
(``claims.committed()``, ``data/results/claims.csv``), read by row id; only the per-seed
dots come from the records. A source is any value of the ledger's ``source`` column."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from structattn_lite import names
from structattn_lite.claims import committed, ledger
from structattn_lite.claims.csp import GAP_COMMAND
from structattn_lite.claims.rows import diverged_seeds
from structattn_lite.report import VERDICT_COLOR, figure_size, plot_ours
from structattn_lite.studies.grokking.report import seed_curves
from structattn_lite.studies.grokking.results import committed_records


def _number(x, digits: int = 3) -> str:
    return "–" if pd.isna(x) else f"{x:.{digits}f}"


def describe(row: pd.Series) -> str:
    """One claim's row as a short Markdown block."""
    interval = "" if pd.isna(row["low"]) else f" [{_number(row['low'])}, {_number(row['high'])}]"
    return "\n".join([
        f"**{row['claim']}** ({row['source']})",
        "",
        f"- published: {_number(row['published'], 2)}; ours: {_number(row['ours'])}{interval} "
        f"over {row['seeds']} seed(s)",
        f"- verdict: **{row['verdict']}**: {row['reason']}",
        f"- rule: {row['rule']}",
        f"- protocol: {row['protocol']} (grid `{row['grid']}`)",
        f"- reproduce: `{runnable(row['command'])}`; notebook {row['notebook']}",
        *_curves_line(row),
    ])  # fmt: skip


def runnable(command: str) -> str:
    """A ledger command as it runs from the repository after ``make study``: each
    ``structattn`` call through the project's environment (``.venv/bin/structattn``)."""
    return " && ".join(
        f".venv/bin/{part.strip()}" if part.strip().startswith("structattn ") else part.strip()
        for part in str(command).split("&&")
    )


CURVES_GRID = "gap"  # the grid whose records keep every epoch, the curves' source


def curve_source(ident: str) -> tuple[str, str] | None:
    """(preset, task) of the gap grid's runs a claim's curves show, or None: the grokking
    claims' own runs, and the text's full model for Table 3's focal rows and Table 4's
    rotated +Norm rows (their numbers come from their own grids, not from these runs)."""
    kind, *rest = ident.split("/")
    if kind in ("gap", "spike"):
        return rest[0], rest[1]
    if kind == "table3" and rest[0] == "focal" or ident.startswith("table4/with/+norm/"):
        return "paper", rest[-1]
    return None


def _curves_line(row: pd.Series) -> list[str]:
    """Where the curves come from, when that is not the grid of the row's numbers."""
    if curve_source(row["id"]) is None or row["grid"] == CURVES_GRID:
        return []
    return [f"- the curves (right) are separate runs of the same model and protocol, from "
            f"grid `{CURVES_GRID}`; reproduce them: `{runnable(GAP_COMMAND)}`"]  # fmt: skip


def _curves(ax, ident: str) -> bool:
    """Whole-string test accuracy per seed for the claims the gap grid's records carry."""
    source = curve_source(ident)
    if source is None:
        return False
    preset, task = source
    runs = [r for r in committed_records(CURVES_GRID)
            if r.config["preset"] == preset and r.config["task"] == task]  # fmt: skip
    seed_curves(ax, runs, labels=True)
    ax.set(xlabel="epoch", ylabel="whole-string test accuracy",
           title=f"the runs (grid '{CURVES_GRID}')")  # fmt: skip
    ax.legend(fontsize=6, loc="lower right")
    return True


def claim_figure(row: pd.Series):
    """Per-seed values (one column per side of a comparison), the published number and our
    interval; beside it, the runs' curves where the records keep them. A row whose seeds
    all diverged has no value to plot: the figure says so instead of showing empty axes."""
    finite = [v for values in row["values"].values() for v in values
              if v is not None and np.isfinite(v)]  # fmt: skip
    diverged = diverged_seeds(row["reason"])
    if diverged and not finite:
        fig, ax = plt.subplots(figsize=figure_size(2, height=1.0))
        ax.axis("off")
        k, n = diverged
        ax.text(0.5, 0.5, f"{k} of {n} seeds diverged (non-finite loss): no trained model to "
                "plot", ha="center", va="center", fontsize=9,
                color=VERDICT_COLOR.get(row["verdict"], VERDICT_COLOR["undecided"]))  # fmt: skip
        return fig
    fig, axes = plt.subplots(1, 2, figsize=figure_size(2, height=2.4))
    ax = axes[0]
    color = VERDICT_COLOR.get(row["verdict"], VERDICT_COLOR["undecided"])
    for i, values in enumerate(row["values"].values()):
        y = np.asarray([v for v in values if v is not None], dtype=float)
        ax.scatter(np.full(len(y), i) + np.linspace(-0.12, 0.12, len(y)), y, s=14,
                   color=color if i == 0 else "#4d4d4d", zorder=3)  # fmt: skip
    sides = [_side(key) for key in row["values"]]
    ax.set_xticks(range(len(sides)), sides, fontsize=6)
    ax.set_ylabel("each seed's number" if sides == ["ours"] else "each seed's number (per side)")
    if not pd.isna(row["published"]):
        ax.axhline(row["published"], color="#2166ac", lw=1, label="published")
    if len(row["values"]) == 1 and not pd.isna(row["low"]):
        plot_ours(ax, 0.3, row, vertical=True, ms=None, lw=None, capsize=3,
                  label="ours, 95% interval")  # fmt: skip
    ax.set(title=f"seed by seed: {row['verdict']}", xlim=(-0.6, max(len(row["values"]), 2) - 0.4))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="best")
    if not _curves(axes[1], row["id"]):
        axes[1].axis("off")
        axes[1].text(0.5, 0.5, "no curves in the committed\nrecords for this claim",
                     ha="center", va="center", fontsize=7, color="#555555")  # fmt: skip
    fig.tight_layout()
    return fig


def _side(key: str) -> str:
    """A side of a comparison as the seed panel labels it: a model or variant by its
    display name, anything else ("ours", "gap to 100%") as the ledger words it."""
    return names.display_name(key) if key in names.ENTRIES else key


def rows() -> pd.DataFrame:
    """The committed ledger's rows (``claims.csv``, as written), each with the per-seed
    values behind it from the records (an empty dict where the records hold none)."""
    values = ledger(values=True).set_index("id")["values"]
    table = committed()
    return table.assign(values=[values.get(i, {}) for i in table["id"]])


def sources(table: pd.DataFrame) -> list[str]:
    """The ledger's sources of claims, in the ledger's order: every one, none hidden."""
    return list(dict.fromkeys(table["source"]))


def claims_browser(table: pd.DataFrame | None = None) -> widgets.Widget:
    """Two dropdowns, source then claim; the row, its seeds and its curves beneath."""
    table = rows() if table is None else table
    source = widgets.Dropdown(options=sources(table), description="source")
    claim = widgets.Dropdown(description="claim", layout=widgets.Layout(width="60%"))
    out = widgets.Output(layout=widgets.Layout(overflow="auto"))

    def pick_source(*_):
        picked = table[table["source"] == source.value]
        claim.options = list(zip(picked["claim"], picked["id"], strict=True))
        claim.value = picked["id"].iloc[0]  # a new source opens on its first claim

    def redraw(*_):
        out.clear_output(wait=True)
        if claim.value is None:
            return
        row = table[table["id"] == claim.value].iloc[0]
        with out, plt.ioff():
            display(Markdown(describe(row)))
            fig = claim_figure(row)
            display(fig)
            plt.close(fig)

    source.observe(pick_source, names="value")
    claim.observe(redraw, names="value")
    pick_source()
    redraw()
    return widgets.VBox([widgets.HBox([source, claim]), out])


def what_to_show(table: pd.DataFrame | None = None) -> str:
    """The guide's "What to show", each sentence about a row written from that row of the
    committed ledger: the grokking gap of the text's model on parity, then a Table 4 row
    whose seeds all diverged (left out when the ledger has none)."""
    table = committed() if table is None else table
    by_id = table.set_index("id")
    lines = ["**What to show.**"]
    if "gap/paper/parity" in by_id.index:
        gap = by_id.loc["gap/paper/parity"]
        lines.append(
            f"Open the grokking gap of {names.display_name('paper')} on "
            f"{names.display_name('parity')} (row gap/paper/parity): the ledger says "
            f"*{gap['verdict']}* over {gap['seeds']} seeds: {gap['reason']}. Ask what a gap "
            '"to 100%" measures when the seeds do not get there.'
        )
    diverged = [
        (i, r) for i, r in by_id.iterrows()
        if i.startswith("table4/") and (d := diverged_seeds(r["reason"])) and d[0] == d[1]
    ]  # fmt: skip
    if diverged:
        ident, r = diverged[0]
        lines.append(
            f"Then open {r['claim']} (row {ident}): {r['reason']}. Ask what a table cell means "
            "when the model it names does not train."
        )
    return "\n".join(lines)
