"""The length study's records as its committed results: one row per run and evaluated
length (``curves_frame``), each cell's last pass (``last_pass``: a refit replaces the
first), and the files in data/results (``export``)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from structattn_lite import files
from structattn_lite.config import check_choice, results_dir
from structattn_lite.records import RunRecord, keep_committed_rows, stack_words
from structattn_lite.studies.length.grids import COMMITTED_CSV


def cell(config) -> tuple[str, str, str]:
    """The (task, protocol, model) cell of a config or of a record's config dict."""
    c = config if isinstance(config, dict) else config.__dict__
    return c["task"], c["protocol"], c["model"]


def unfit_cells(records: list[RunRecord]) -> set[tuple[str, str, str]]:
    """Cells where some seed ended its budget without meeting its own fit rule (read on
    validation, as the rule itself is)."""
    out = set()
    for r in records:
        level = r.config.get("stop_at_fit")
        h = r.history
        final = h["val_seq_acc"].iloc[-1] if "val_seq_acc" in h and len(h) else 0.0
        if level is not None and (r.status == "failed" or final < level):
            out.add(cell(r.config))
    return out


def last_pass(records: list[RunRecord]) -> list[RunRecord]:
    """Each cell's records from its last pass: the refit where a cell has one."""
    epochs = {}
    for r in records:
        key = cell(r.config)
        epochs[key] = max(epochs.get(key, 0), r.config["epochs"])
    return [r for r in records if r.config["epochs"] == epochs[cell(r.config)]]


# The config fields every curve row carries, in the committed files' column order.
RUN_FIELDS = ("task", "model", "protocol", "seed", "train_length", "epochs", "n", "batch_size",
              "loss")  # fmt: skip


def curves_frame(records: list[RunRecord]) -> pd.DataFrame:
    """Long table: one row per (run, evaluated length), with the run's config columns."""
    frames = []
    for r in records:
        c = r.config
        curve = pd.DataFrame(r.extra["curve"])
        for key in RUN_FIELDS:
            curve[key] = c[key]
        for key in ("split", "stop_at_fit"):
            curve[key] = c.get(key)
        curve["lr"], curve["schedule"] = c["optim"]["lr"], c["optim"].get("schedule", "plateau")
        curve["epochs_run"], curve["status"] = len(r.history), r.status
        curve["device"] = r.device
        curve["steps"] = r.extra["steps"]
        curve["n_parameters"] = r.extra["n_parameters"]
        curve["stack"] = stack_words(r.extra)  # what its float32 numbers depend on
        h = r.history
        curve["final_test_acc"] = h["test_acc"].iloc[-1] if len(h) else float("nan")
        curve["final_val_seq_acc"] = (
            h["val_seq_acc"].iloc[-1] if "val_seq_acc" in h else float("nan")
        )
        curve["final_val_acc"] = h["val_acc"].iloc[-1] if "val_acc" in h and len(h) else math.nan
        frames.append(curve)
    return pd.concat(frames, ignore_index=True)


# Lengths kept in the committed curves (every length up to 16, then sparser): compact
# enough to ship, dense enough for the figure and the L = 16..256 table.
KEPT_LENGTHS = [*range(1, 17), *range(18, 33, 2), *range(40, 257, 8)]
# The grazzi grid keeps the lengths its rows read (training, validation, test) and its
# runs' final validation accuracy, which chooses each model's rate (``chosen_rates``).
GRAZZI_KEPT_LENGTHS = [16, 40, 64, 128, 256, 500]


def chosen_rates(curves: pd.DataFrame) -> pd.DataFrame:
    """Each (task, model)'s learning rate, chosen on validation alone (a rule
    written before the grazzi runs were read): the rate with the highest mean, over seeds,
    of the final validation accuracy (lengths 64..128, longer than any training string,
    shorter than any reported test length); a seed that diverged counts as 0; ties go to
    the lower rate. One row per (task, model, lr): mean, seeds, and ``chosen``."""
    runs = curves.drop_duplicates(["task", "model", "lr", "seed"])
    val = runs["final_val_acc"].where(runs["status"] != "diverged").fillna(0.0)
    table = (
        runs.assign(final_val_acc=val)
        .groupby(["task", "model", "lr"], as_index=False)
        .agg(val_acc=("final_val_acc", "mean"), seeds=("seed", "nunique"))
    )
    best = (
        table.sort_values(["val_acc", "lr"], ascending=[False, True])
        .groupby(["task", "model"])["lr"]
        .transform("first")
    )
    table["chosen"] = table["lr"] == best.reindex(table.index)
    return table


def at_chosen_rates(curves: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``curves`` trained at their (task, model)'s chosen rate (``chosen_rates``)."""
    rates = chosen_rates(curves)
    return curves.merge(rates.loc[rates["chosen"], ["task", "model", "lr"]])


# Grids whose committed file grows as runs are exported: an export replaces the rows of the
# runs it holds and keeps the others (the authors grid's mod-3 runs, at the authors'
# vocabulary of 3, trained apart from its other tasks).
GROWN_ACROSS_SESSIONS = ("authors", "authors_fresh")
RUN_ID = ["task", "model", "protocol", "seed"]


def export(records: list[RunRecord], grid: str = "committed", order=None) -> list[Path]:
    """Write the runs' curves at the kept lengths to data/results (one row per run and
    length); ``order`` (the grid's configs) keeps, for a grid exported in parts, the
    committed runs that ``records`` do not hold."""
    curves = curves_frame(last_pass(records)).assign(grid=grid)
    if grid == "grazzi":
        curves = curves[curves["length"].isin(GRAZZI_KEPT_LENGTHS)]
    else:
        curves = curves[curves["length"].isin(KEPT_LENGTHS)].drop(columns="final_val_acc")
    path = results_dir() / COMMITTED_CSV[check_choice("grid", grid, COMMITTED_CSV)]
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics = ["seq_acc", "unseen_acc", "all_acc", "final_test_acc", "final_val_seq_acc",
               "final_val_acc"]  # fmt: skip
    curves = curves.assign(**{m: curves[m].round(4) for m in metrics if m in curves})
    if grid in GROWN_ACROSS_SESSIONS and order is not None:
        ids = [tuple(getattr(c, k) for k in RUN_ID) for c in order]
        curves = keep_committed_rows(path, curves, RUN_ID, ids)
    files.write_csv(curves, path, index=False, compression={"method": "gzip", "mtime": 0})
    return [path]
