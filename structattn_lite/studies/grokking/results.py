"""The grokking study's committed records (``data/results``), read without torch: the
ledger, the findings and the notebooks load them from here."""

from __future__ import annotations

from structattn_lite import config
from structattn_lite.config import results_dir
from structattn_lite.records import RunRecord, load_histories
from structattn_lite.studies.grokking.grids import COMMITTED_CSV


def committed_records(grid: str = "gap", missing_ok: bool = True) -> list[RunRecord]:
    """A committed grid's records (data/results); [] when they are not there and
    ``missing_ok``, else a FileNotFoundError naming the file (the notebooks' way)."""
    path = results_dir() / COMMITTED_CSV[config.check_choice("grid", grid, COMMITTED_CSV)]
    if not path.exists() and not missing_ok:
        raise config.missing_committed(path)
    return load_histories(path) if path.exists() else []
