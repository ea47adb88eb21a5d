"""What a run record and a committed results file must hold before anything reads a
number from it, in one place.

- A run record (``record_problem``): its experiment's columns, every accuracy and F1 in
  [0, 1], and a history as long as the epochs it ran (all of them for a run that
  finished; at most that many for one stopped early or diverged). ``RunStore.load``
  sets a record that fails aside and the run is trained again, as a corrupt one is.
- A committed file in data/results (``check_committed_file``, a ``pandera`` schema per
  kind of file): its required columns, accuracies and F1 in [0, 1], one row per run
  (per run and epoch, or run and length), only finished runs (a failed run is no seed),
  and epochs run matching the epochs asked for. A file that fails is refused in one line
  naming the file, the row (its line in the file) and the column.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

# The statuses of a finished run (records.FINISHED, named here too: records imports this).
FINISHED = ("ok", "early_stop", "diverged")
STOPPED = ("early_stop", "diverged")  # may end before its epochs are all run
# A column or metric that is an accuracy or an F1 score ("test_seq_acc", "val_acc", "f1",
# "final_test_acc"), which lies in [0, 1].
SCORE = re.compile(r"(^|_)(acc|f1)($|_)")
# The history columns every record of an experiment logs and its tables read by name (the
# ablations' records_frame, the grokking gaps); the other experiments' tables read their
# records' extras, checked where they are read.
REQUIRED_HISTORY = {
    "csp": ("epoch", "train_acc", "test_acc", "test_f1", "test_seq_acc", "test_seq_f1"),
}


def is_score(name: str) -> bool:
    return bool(SCORE.search(str(name)))


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def record_problem(record: Any) -> str | None:
    """Why a finished run record (``records.RunRecord``) cannot be read as a result, or
    None: a history that is no table, a column its experiment always logs missing, an
    accuracy or F1 outside [0, 1] (in the history or its final metrics), or a history
    whose length does not match the epochs the run ran."""
    history = record.history
    if not isinstance(history, pd.DataFrame):
        return f"has a history of type {type(history).__name__}, not a table"
    required = REQUIRED_HISTORY.get(record.experiment, ())
    if missing := [c for c in required if c not in history.columns]:
        return f"has no {', '.join(missing)} column in its history"
    for column in [c for c in history.columns if is_score(c)]:
        values = pd.to_numeric(history[column], errors="coerce")
        outside = values[(values < 0) | (values > 1)]
        if len(outside):
            return f"has {column} {outside.iloc[0]} (epoch row {outside.index[0]}), outside [0, 1]"
    final = record.extra.get("final") if isinstance(record.extra, dict) else None
    for name, value in (final or {}).items():
        if is_score(name) and (v := _finite(value)) is not None and not 0 <= v <= 1:
            return f"has a final {name} of {v}, outside [0, 1]"
    epochs = record.config.get("epochs") if isinstance(record.config, dict) else None
    if isinstance(epochs, int) and not isinstance(epochs, bool) and "epoch" in history:
        ran = len(history)
        if ran > epochs:
            return f"has {ran} history rows for its {epochs} epochs"
        if record.status == "ok" and ran < epochs:
            return (
                f"has {ran} history rows for its {epochs} epochs, with status ok and no early stop"
            )
    return None


# --- committed files ---------------------------------------------------------------------

# Each kind of committed file: (file name patterns, required columns, the columns that
# name one row, and where the epochs asked for and run are: "history" (rows per run),
# "columns" (epochs / epochs_run) or None).
KINDS = {
    "histories": (
        ("*histories*.csv.gz", "csp_grokking_*.csv.gz", "csp_paper_era_*.csv.gz"),
        ("experiment", "key", "status", "config", "epoch"),
        ("key", "epoch"),
        "history",
    ),
    "ablations": (
        ("csp_ablations_*.csv",),
        ("rotation", "variant", "loss", "task", "preset", "seed", "status", "epochs",
         "epochs_run", "test_seq_acc", "test_seq_f1"),
        ("table", "rotation", "variant", "loss", "split", "task", "preset", "seed", "grid"),
        "columns",
    ),
    "length": (
        ("length_*.csv.gz",),
        ("length", "seq_acc", "task", "model", "protocol", "seed", "status"),
        ("grid", "task", "model", "protocol", "seed", "train_length", "lr", "length"),
        "columns",
    ),
    "attention runs": (
        ("attention_*runs*.csv",),
        ("variant", "part", "dataset", "seed", "lr", "status"),
        ("variant", "part", "dataset", "kind", "m", "shared_qk", "fraction", "precision",
         "seed", "lr", "tuning", "steps", "d_model"),
        None,
    ),
}  # fmt: skip
# claims.csv is the ledger's own output: findings.check_ledger compares it row for row.
EPOCHS = "epochs run"  # the name of the check of epochs run against epochs asked for


def kind_of(name: str) -> str | None:
    for kind, (patterns, *_) in KINDS.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return kind
    return None


def _epochs_ok_in_columns(frame: pd.DataFrame) -> pd.Series:
    """Per row: epochs_run <= epochs, and == epochs for a run that was not stopped."""
    asked, ran = (pd.to_numeric(frame[c], errors="coerce") for c in ("epochs", "epochs_run"))
    stopped = frame["status"].isin(STOPPED)
    return (ran <= asked) & (stopped | (ran == asked)) | asked.isna()


def _epochs_ok_in_history(frame: pd.DataFrame) -> pd.Series:
    """Per row: its run's rows are at most the epochs its config asks for, and all of
    them for a run that was not stopped."""
    rows = frame.groupby("key", sort=False)["key"].transform("size")

    def asked(config: str) -> float:
        try:
            epochs = json.loads(config).get("epochs")
        except (ValueError, TypeError, AttributeError):
            return math.nan
        return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) else math.nan

    epochs = frame["config"].map(asked)
    stopped = frame["status"].isin(STOPPED)
    return (rows <= epochs) & (stopped | (rows == epochs)) | epochs.isna()


def committed_schema(name: str, frame: pd.DataFrame):
    """The ``pandera`` schema of the committed file ``name`` (its kind's, see ``KINDS``),
    with a [0, 1] check on each accuracy or F1 column ``frame`` has."""
    import pandera.pandas as pa

    kind = kind_of(name)
    patterns, required, unique, epochs = KINDS.get(kind, ((), (), None, None))
    columns = {c: pa.Column(required=True, nullable=True) for c in required}
    for column in [c for c in frame.columns if is_score(c)]:
        columns[column] = pa.Column(
            float, pa.Check.in_range(0, 1), nullable=True, coerce=True, required=False
        )
    if "status" in frame.columns:  # a failed run is no result, nor a seed
        columns["status"] = pa.Column(
            str, pa.Check.isin(FINISHED), coerce=True, required=kind is not None
        )
    checks = []
    if epochs == "columns" and {"epochs", "epochs_run", "status"} <= set(frame.columns):
        checks.append(pa.Check(_epochs_ok_in_columns, name=EPOCHS))
    if epochs == "history" and {"key", "config", "status"} <= set(frame.columns):
        checks.append(pa.Check(_epochs_ok_in_history, name=EPOCHS))
    unique = [c for c in unique or () if c in frame.columns] or None
    return pa.DataFrameSchema(
        columns, checks=checks, unique=unique, report_duplicates="exclude_first", strict=False
    )


def committed_problem(path: str | Path, frame: pd.DataFrame) -> str | None:
    """Why the committed file ``path`` (read as ``frame``) is refused, in one line
    naming the file, the row (its line in the file) and the column; or None."""
    import pandera.pandas as pa

    path = Path(path)
    try:
        committed_schema(path.name, frame).validate(frame, lazy=True)
    except pa.errors.SchemaErrors as err:
        cases = err.failure_cases
        missing = cases[cases["check"] == "column_in_dataframe"]
        if len(missing):
            names = ", ".join(map(str, missing["failure_case"]))
            return f"{path} has no {names} column, which its tables read"
        cases = cases.assign(at=pd.to_numeric(cases["index"], errors="coerce"))
        first = cases.sort_values("at", kind="stable").iloc[0]
        if pd.isna(first["at"]):  # the column as a whole (its type)
            return (
                f"{path}, column {first['column']}: {first['failure_case']} fails {first['check']}"
            )
        row = int(first["at"])
        line = row + 2  # the header is line 1
        check = str(first["check"])
        if check == EPOCHS:
            column = "epochs_run" if "epochs_run" in frame else "epoch"
            what = (
                f"{column}: the run's epochs run do not match the epochs its config asks "
                f"for (status {frame.at[row, 'status']})"
            )
        elif "uniqueness" in check:
            unique = committed_schema(path.name, frame).unique
            values = ", ".join(f"{c}={frame.at[row, c]}" for c in unique)
            what = f"{', '.join(unique)}: a second row for the same run ({values})"
        else:
            value = first["failure_case"]
            shown = repr(value) if isinstance(value, str) else str(value)
            what = f"{first['column']}: {shown} fails {check}"
        more = len(cases["at"].dropna().unique()) - 1
        also = f" (and {more} more row(s))" if more > 0 else ""
        return f"{path}, line {line}, column {what}{also}"
    return None
