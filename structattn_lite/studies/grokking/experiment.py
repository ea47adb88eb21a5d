"""The grokking study (notebook 03): CSP on parity, mod-3 and Dyck-1 under the paper's protocol.

The paper's own protocol (i.i.d. samples, random split) is used so its numbers are
comparable; the ablation and length studies test what that protocol hides.
"""

from __future__ import annotations

from pathlib import Path

from structattn_lite import config
from structattn_lite.config import results_dir
from structattn_lite.records import RunRecord, config_hash, export_histories
from structattn_lite.studies.grokking.grids import (  # noqa: F401 (re-exported)
    COMMITTED_CSV,
    GRIDS,
    PAPER_GROKKING_GAP,
    PAPER_SEEDS,
)
from structattn_lite.studies.grokking.results import committed_records
from structattn_lite.training.protocols import protocol_run
from structattn_lite.training.state_tracking import (
    EXPERIMENT,
    CSPRun,
    eval_chunk,
    paper_setting_run,
)
from structattn_lite.training.state_tracking import csp_record as record
from structattn_lite.training.state_tracking import csp_setup as setup

Config = CSPRun
__all__ = [
    "EXPERIMENT",
    "GRIDS",
    "Config",
    "setup",
    "record",
    "eval_chunk",
    "committed_records",
    "export",
    "grid",
]


def grid(name: str) -> list[CSPRun]:
    """The runs behind the grokking figures and tables for a grid name (a profile, or a
    committed grid: "paper_era", "gap")."""
    spec = GRIDS[config.check_choice("grid", name, GRIDS)]
    fields = dict(epochs=spec["epochs"], hold_perfect=spec.get("hold_perfect"))

    def run(task: str, preset: str, seed: int) -> CSPRun:
        if "protocol" in spec:
            return protocol_run(spec["protocol"], task, preset=preset, seed=seed, **fields)
        return paper_setting_run(task, preset, seed, n=spec["n"], **fields)

    return [run(t, p, s) for t in spec["tasks"] for p in spec["presets"] for s in spec["seeds"]]


grid_runs = grid  # for export, whose parameter ``grid`` (a name) shadows the function

# Grids whose committed file grows as runs are exported: an export replaces the runs it
# holds and keeps the others (a grid's stacks may train apart, e.g. one of fresh_gap's:
# `structattn run grokking --grid fresh_gap --task parity --seed 15 16 17 18 19 --seed-batching`).
GROWN_ACROSS_SESSIONS = ("gap", "gap_seeds", "fresh_gap", "fresh_authors")


def export(records: list[RunRecord], grid: str = "gap") -> list[Path]:
    """Write finished runs of a committed grid to data/results, to commit them."""
    path = results_dir() / COMMITTED_CSV[config.check_choice("grid", grid, COMMITTED_CSV)]
    keep = None
    if grid in GROWN_ACROSS_SESSIONS:
        keep = [config_hash(EXPERIMENT, c) for c in grid_runs(grid)]
    return [export_histories(records, path, keep_order=keep, only_order=True)]
