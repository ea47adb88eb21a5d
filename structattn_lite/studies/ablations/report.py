"""Tables 3 and 4 from run records: ours (mean +- sd over seeds) beside the paper.

The committed records are the paper-size grids: ``csp_ablations_paper_text.csv`` (Table 3,
whose focal row is Table 4's full model) and ``csp_ablations_paper_table4.csv`` (Table 4's
other rows). ``load_results`` reads both as one frame, ``table3``/``table4`` summarize,
``claims_rows`` shows the ledger's rows for the paper's "A beats B" claims, ``display_table`` writes each cell
as mean ± sd, and ``grid_caption`` says which grid a table came from. Every verdict is the
claims ledger's (``stats``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from structattn_lite import names
from structattn_lite.config import results_dir
from structattn_lite.report import (
    NO_ROW,
    count_range,
    format_mean_sd,
    ledger_interval,
    ledger_rows,
)
from structattn_lite.studies.ablations.grids import (
    COMMITTED_CSV,
    PAPER_TABLE3,
    PAPER_TABLE4,
    TASKS,
)

PAPER_SIZE = (COMMITTED_CSV["paper_text"], COMMITTED_CSV["paper_table4"])


def load_results(
    names: tuple[str, ...] = PAPER_SIZE, root: Path | None = None, missing_ok: bool = False
) -> pd.DataFrame | None:
    """The committed records ``names`` as one frame; None when all are missing and
    ``missing_ok``."""
    paths = [(root or results_dir()) / name for name in names]
    found = [pd.read_csv(path) for path in paths if path.exists()]
    if not found:
        if missing_ok:
            return None
        raise FileNotFoundError(
            f"{paths[0]} is missing; run the committed grid (see the notebook) first"
        )
    return pd.concat(found, ignore_index=True)


def cell_stats(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean, sd, finite seeds and diverged seeds of each task's metric per cell (``keys`` +
    task), and the ledger's verdict against the paper's number. A diverged run's last
    evaluation is no trained model's, so its metric is left out and counted instead."""
    df = df.assign(
        value=[r[names.metric(r["task"])] if r["status"] != "diverged" else math.nan
               for _, r in df.iterrows()],
        diverged=df["status"] == "diverged",
    )  # fmt: skip
    out = df.groupby([*keys, "task"]).agg(
        mean=("value", "mean"), sd=("value", "std"), seeds=("value", "count"),
        diverged=("diverged", "sum"), values=("value", lambda v: v.dropna().tolist()),
    )  # fmt: skip
    return out.reset_index()


def _wide(cells: pd.DataFrame, keys: list[str], paper_of, ident) -> pd.DataFrame:
    """One row per cell: each task's mean, sd, seeds and diverged seeds from ``cells``, the
    paper's number, and the committed ledger's verdict of the row ``ident(cell, task)``
    (read, never recomputed; ``NO_ROW`` where the ledger has none, e.g. another preset)."""
    ledger = ledger_rows()
    rows = []
    for cell, group in cells.groupby(keys, sort=False):
        cell = cell if isinstance(cell, tuple) else (cell,)
        row = dict(zip(keys, cell, strict=True))
        for task in TASKS:
            hit = group[group["task"] == task]
            paper = paper_of(row, task)
            values = hit["values"].iloc[0] if len(hit) else []
            diverged = int(hit["diverged"].iloc[0]) if len(hit) else 0
            row[(task, "ours")] = hit["mean"].iloc[0] if len(hit) else math.nan
            row[(task, "sd")] = hit["sd"].iloc[0] if len(hit) else math.nan
            row[(task, "seeds")] = len(values)
            row[(task, "diverged")] = diverged
            row[(task, "paper")] = paper
            key = ident(row, task)
            row[(task, "verdict")] = ledger.at[key, "verdict"] if key in ledger.index else NO_ROW
        rows.append(row)
    table = pd.DataFrame(rows).set_index(keys)
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table


def table3(df: pd.DataFrame) -> pd.DataFrame:
    """Focal vs cross-entropy (paper Table 3), full model, random split; per preset."""
    sub = df[(df["variant"] == "+norm") & (df["rotation"] == "with") & (df["split"] == "random")]
    cells = cell_stats(sub, ["preset", "loss"])
    return _wide(
        cells,
        ["preset", "loss"],
        lambda r, t: PAPER_TABLE3.get((r["loss"], t), math.nan),
        lambda r, t: f"table3/{r['loss']}/{t}" if r["preset"] == "paper" else None,
    )


def table4(df: pd.DataFrame) -> pd.DataFrame:
    """Structural ablations (paper Table 4), focal loss, random split; per preset."""
    sub = df[(df["loss"] == "focal") & (df["split"] == "random")]
    cells = cell_stats(sub, ["preset", "rotation", "variant"])
    order = {k: i for i, k in enumerate(PAPER_TABLE4)}
    cells = cells.assign(
        _o=[order.get((r, v), 99) for r, v in zip(cells["rotation"], cells["variant"], strict=True)]
    )
    cells = cells.sort_values(["preset", "_o"]).drop(columns="_o")

    def paper(row, task):
        numbers = PAPER_TABLE4.get((row["rotation"], row["variant"]))
        return numbers[TASKS.index(task)] if numbers else math.nan

    def ident(row, task):  # the ledger's Table 4 rows are the text's model's
        return (
            f"table4/{row['rotation']}/{row['variant']}/{task}"
            if row["preset"] == "paper"
            else None
        )

    return _wide(cells, ["preset", "rotation", "variant"], paper, ident)


def claims_rows() -> pd.DataFrame:
    """The ledger's rows for the paper's "A beats B" sentences (``ablation/*``), as the
    ledger holds them: the difference, its interval, verdict and reason are read by row id,
    never recomputed here."""
    ledger = ledger_rows()
    rows = ledger[ledger.index.str.startswith("ablation/")]
    return pd.DataFrame({  # the ids, cells and reasons are LEDGER.md's, a click away
        "claim": rows["claim"].str.replace(r", A `.*$", "", regex=True),
        "A - B": [ledger_interval(r) for _, r in rows.iterrows()],
        "verdict": rows["verdict"],
    }).reset_index(drop=True)  # fmt: skip


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """Merge ours and sd into one 'mean +- sd' string column per task."""
    out = pd.DataFrame(index=table.index)
    for task in TASKS:
        if (task, "ours") not in table:
            continue
        ours, sd, seeds = table[(task, "ours")], table[(task, "sd")], table[(task, "seeds")]
        diverged = table[(task, "diverged")]
        out[(names.title(task), "ours")] = [
            f"diverged ({d} of {d + k})" if d and not k else format_mean_sd(m, s, k)
            for m, s, k, d in zip(ours, sd, seeds, diverged, strict=True)
        ]
        out[(names.title(task), "paper")] = [
            "-" if math.isnan(p) else f"{p:.2f}" for p in table[(task, "paper")]
        ]
        out[(names.title(task), "verdict")] = table[(task, "verdict")]
    out.columns = pd.MultiIndex.from_tuples(out.columns)
    return out


def grid_caption(df: pd.DataFrame) -> str:
    """The grid a table came from: profile, seeds, epochs, sizes, protocol."""
    seeds = sorted(df["seed"].unique().tolist())
    cells = ["table", "rotation", "variant", "loss", "split", "task", "preset"]
    per_cell = df.groupby([c for c in cells if c in df])["seed"].nunique()
    spread = count_range(per_cell)
    hold = df["hold_perfect"].dropna().unique()
    # Grids made before the validation split stopped on test accuracy: say so.
    validated = "val_fraction" in df and bool((df["val_fraction"] > 0).all())
    read = "validation" if validated else "test (this grid predates the validation split)"
    stop = f", early stop after {int(hold[0])} epochs at 100% {read} accuracy" if len(hold) else ""
    return (
        f"{' + '.join(names.ablation_grid(g) for g in dict.fromkeys(df['grid']))}: {len(df)} runs in "
        f"{len(per_cell)} cells, {spread} seeds per cell "
        f"(seeds {seeds}); up to "
        f"{int(df['epochs'].max())} epochs (mean run {df['epochs_run'].mean():.0f}){stop}; "
        f"n={sorted(df['n'].unique().tolist())}, d_model={int(df['d_model'].iloc[0])}, "
        f"{int(df['n_layers'].iloc[0])} layers, {df['labels'].iloc[0]} labels, lr={df['lr'].iloc[0]}, "
        "scored on the whole string (last position)" + _losses(sorted(df["loss"].unique()))
    )


def _losses(losses: list[str]) -> str:
    """The losses a grid trained with, in words (a table's rows name them by the display
    name; this says what each one is, ``names.gloss``)."""
    words = [names.gloss(loss) for loss in losses]
    return f"; {'losses' if len(words) > 1 else 'loss'}: {', '.join(words)}" if words else ""
