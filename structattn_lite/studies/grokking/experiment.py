"""The grokking study (notebook 03): CSP on parity, mod-3 and Dyck-1 under the paper's protocol.

The paper's own protocol (i.i.d. samples, random split) is used so its numbers are
comparable; the ablation and length studies test what that protocol hides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from structattn_lite import config
from structattn_lite.config import results_dir
from structattn_lite.data.tasks import PAPER_N
from structattn_lite.runs import RunRecord, RunStore, export_histories, load_histories
from structattn_lite.training.state_tracking import EXPERIMENT, CSPRun, run_csp
from structattn_lite.training.trainer import few_threads


def sweep(
    configs: list[CSPRun], store: RunStore | None = None, progress: bool = True, callbacks=()
) -> list[RunRecord]:
    """Run (or reload) each config; a diverged run is recorded and the sweep goes on."""
    from tqdm.auto import tqdm

    store = store or RunStore()
    out = []
    with few_threads():
        for cfg in tqdm(configs, desc="runs", disable=not progress):
            train = lambda c: run_csp(c, callbacks=callbacks, progress=progress)  # noqa: E731
            out.append(store.get_or_run(EXPERIMENT, cfg, train))
    return out


# Per-profile grid for the grokking notebook: smoke proves the pipeline in seconds,
# quick shows the effects on 2 cores in minutes, paper is the paper's protocol.
GROKKING_PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {
        "tasks": ("parity",),
        "seeds": (0,),
        "epochs": 2,
        "n": 400,
        "presets": ("paper", "upstream"),
    },
    "quick": {
        "tasks": ("parity", "mod3", "dyck1"),
        "seeds": (0, 1),
        "epochs": 25,
        "n": 1000,
        "presets": ("paper", "upstream"),
    },
    "paper": {
        "tasks": ("parity", "mod3", "dyck1"),
        "seeds": tuple(range(10)),
        "epochs": 300,
        "n": None,
        "presets": ("paper", "upstream"),
    },
}


# The larger grid whose records ship in data/results (too long for the quick profile).
SHIPPED_GROKKING = {
    "tasks": ("parity", "mod3", "dyck1"),
    "seeds": (0, 1, 2),
    "epochs": 100,
    "n": None,
    "presets": ("paper", "upstream"),
    "hold_perfect": 10,
}


def grokking_grid(profile: str) -> list[CSPRun]:
    """The runs behind the grokking figures and table for a profile (or ``"shipped"``).

    The paper's own protocol (i.i.d. samples, random split) is used so its numbers are
    comparable; the ablation and length notebooks test what that protocol hides.
    """
    spec = SHIPPED_GROKKING if profile == "shipped" else config.pick(profile, GROKKING_PROFILES)
    runs = []
    for task in spec["tasks"]:
        for preset in spec["presets"]:
            for seed in spec["seeds"]:
                runs.append(
                    CSPRun(
                        task=task,
                        preset=preset,
                        seed=seed,
                        n=spec["n"] or PAPER_N[task],
                        leaky=True,
                        labels="prefix" if preset == "upstream" else "sequence",
                        epochs=spec["epochs"],
                        hold_perfect=spec.get("hold_perfect"),
                    )
                )
    return runs


# Paper section 4.2.1: epochs from 90% to 100% test accuracy, mean and sd over 10 seeds.
PAPER_GROKKING_GAP = {"parity": (3.2, 1.2), "mod3": (8.4, 2.1), "dyck1": (12.7, 3.4)}


SHIPPED_GROKKING_CSV = "csp_grokking_histories.csv.gz"


def shipped_grokking_records() -> list[RunRecord]:
    """The shipped grid's records (data/results), or [] when they are not there."""
    path = results_dir() / SHIPPED_GROKKING_CSV
    return load_histories(path) if path.exists() else []


def export_shipped_grokking(store: RunStore | None = None) -> Path:
    """Write the finished runs of the shipped grid to data/results (to commit them)."""
    store = store or RunStore()
    done = [r for r in (store.load(EXPERIMENT, c) for c in grokking_grid("shipped")) if r]
    return export_histories(done, results_dir() / SHIPPED_GROKKING_CSV)
