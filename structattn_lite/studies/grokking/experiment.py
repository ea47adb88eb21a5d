"""The grokking study (notebook 03): CSP on parity, mod-3 and Dyck-1 under the paper's protocol.

The paper's own protocol (i.i.d. samples, random split) is used so its numbers are
comparable; the ablation and length studies test what that protocol hides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from structattn_lite import config
from structattn_lite.config import results_dir
from structattn_lite.names import PAPER_TASKS
from structattn_lite.records import RunRecord, config_hash, export_histories, load_histories
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


# Per-profile grid for the grokking notebook: smoke proves the pipeline in seconds,
# quick shows the effects on 2 cores in minutes, paper is the paper's protocol.
GRIDS: dict[str, dict[str, Any]] = {
    "smoke": {
        "tasks": ("parity",),
        "seeds": (0,),
        "epochs": 2,
        "n": 400,
        "presets": ("paper", "upstream"),
    },
    "quick": {
        "tasks": PAPER_TASKS,
        "seeds": (0, 1),
        "epochs": 25,
        "n": 1000,
        "presets": ("paper", "upstream"),
    },
    "paper": {
        "tasks": PAPER_TASKS,
        "seeds": tuple(range(10)),
        "epochs": 300,
        "n": None,
        "presets": ("paper", "upstream"),
    },
    # paper_era: the authors' paper-era model (befce39; their log sits at chance to epoch
    # 120 and jumps between 130 and 190) under the paper-text protocol, 5 seeds, 300
    # epochs, stopping once validation has held 100% for 10 epochs.
    "paper_era": {
        "tasks": ("parity",),
        "seeds": tuple(range(5)),
        "epochs": 300,
        "presets": ("authors_befce39",),
        "protocol": "paper_text",
        "hold_perfect": 10,
    },
    # gap: the grokking gap at the paper's sizes (d 64, 3 layers; 5,000 / 5,000 / 10,000
    # strings), 300 epochs, 10 seeds per task and preset (the paper's count; 5 until issue
    # 43, so that a share of spiking seeds can exclude 1/2), stopping only once
    # *validation* has held 100% for 10 epochs; the gap is read on whole-string test
    # accuracy for both.
    "gap": {
        "tasks": PAPER_TASKS,
        "seeds": tuple(range(10)),
        "epochs": 300,
        "n": None,
        "presets": ("paper", "authors_3bb9f71"),
        "hold_perfect": 10,
    },
    # gap_seeds: 15 more seeds of the authors' model on mod-3, then on parity, in the gap
    # grid's setting, where 5 seeds left the gap's interval far wider than the paper's sd
    # (mod-3: 3 of 5 reached 100%); the ledger reads both grids' runs together (25 seeds).
    # It held seeds 5-24 until the gap grid took seeds 5-9 (issue 43). Those five mod-3
    # runs moved into gap's file unchanged: they were trained in gap_seeds' 10-seed
    # stack, and a 5-seed stack rounds differently in float32, which CSP's chaotic
    # training grows into other histories (seed 9 reaches 100% at epoch 57, not 29).
    "gap_seeds": {
        "tasks": ("mod3", "parity"),
        "seeds": tuple(range(10, 25)),
        "epochs": 300,
        "n": None,
        "presets": ("authors_3bb9f71",),
        "hold_perfect": 10,
    },
}


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


# Paper section 4.2.1: epochs from 90% to 100% test accuracy, mean and sd over 10 seeds.
PAPER_GROKKING_GAP = {"parity": (3.2, 1.2), "mod3": (8.4, 2.1), "dyck1": (12.7, 3.4)}
PAPER_SEEDS = 10


COMMITTED_CSV = {
    "paper_era": "csp_paper_era_parity.csv.gz",
    "gap": "csp_grokking_gap.csv.gz",
    "gap_seeds": "csp_grokking_gap_more_seeds.csv.gz",
}


def committed_records(grid: str = "gap", missing_ok: bool = True) -> list[RunRecord]:
    """A committed grid's records (data/results); [] when they are not there and
    ``missing_ok``, else a FileNotFoundError naming the file (the notebooks' way)."""
    path = results_dir() / COMMITTED_CSV[config.check_choice("grid", grid, COMMITTED_CSV)]
    if not path.exists() and not missing_ok:
        raise config.missing_committed(path)
    return load_histories(path) if path.exists() else []


grid_runs = grid  # for export, whose parameter ``grid`` (a name) shadows the function

# Grids whose committed file is kept across sessions: an export replaces the runs it
# holds and keeps the others (gap_seeds' parity seeds came a session after its mod-3 ones;
# gap's seeds 5-9 came after its first five).
GROWN_ACROSS_SESSIONS = ("gap", "gap_seeds")


def export(records: list[RunRecord], grid: str = "gap") -> list[Path]:
    """Write finished runs of a committed grid to data/results, to commit them."""
    path = results_dir() / COMMITTED_CSV[config.check_choice("grid", grid, COMMITTED_CSV)]
    keep = None
    if grid in GROWN_ACROSS_SESSIONS:
        keep = [config_hash(EXPERIMENT, c) for c in grid_runs(grid)]
    return [export_histories(records, path, keep_order=keep, only_order=True)]
