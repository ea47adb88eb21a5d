"""The paper's ablation tables (3: focal vs cross-entropy; 4: structural parts) as run grids.

Each table cell is one CSP variant on one task, run over several seeds through
``csp_study.run_csp``; the summary puts our mean +- sd beside the paper's number and a
verdict. Table 4's rows are read as cumulative (the paper's "+Norm, with rotation" row
equals its full model): Base (no SiLU, skip or norm), +SiLU (a SiLU inside every step),
+Skip (that plus the block skip), +Norm (the full CSP: SiLU at the block boundary, skip,
complex normalization); "LayerNorm" swaps the complex normalization of the full model
for LayerNorm (the text's claim, no table number). Each row with and without rotation.

Every grid uses per-prefix labels (the authors' code) and scores the whole string (the
last position), the way the paper reports; ``GRIDS`` says what each profile runs.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from structattn_lite.config import check_choice
from structattn_lite.training.state_tracking import CSPRun

TASKS = ("parity", "mod3", "dyck1")
METRIC = {"parity": "test_seq_acc", "mod3": "test_seq_acc", "dyck1": "test_seq_f1"}
METRIC_NAME = {"parity": "accuracy", "mod3": "accuracy", "dyck1": "F1"}

VARIANTS: dict[str, dict[str, Any]] = {
    "base": {"silu": "none", "skip": False, "norm": "none"},
    "+silu": {"silu": "step", "skip": False, "norm": "none"},
    "+skip": {"silu": "step", "skip": True, "norm": "none"},
    "+norm": {"silu": "boundary", "skip": True, "norm": "complex"},  # the full CSP
    "layernorm": {"silu": "boundary", "skip": True, "norm": "layernorm"},
}
ROTATIONS = ("with", "without")
LOSS_LABELS = {"focal": "focal loss", "ce": "cross-entropy"}

# Published numbers (STUDY_BRIEF section 3), as fractions; NaN where the paper gives none.
NAN = math.nan
PAPER_TABLE3 = {  # (loss, task) -> number
    ("focal", "parity"): 1.0,
    ("focal", "mod3"): 1.0,
    ("focal", "dyck1"): 1.0,
    ("ce", "parity"): NAN,
    ("ce", "mod3"): 0.67,
    ("ce", "dyck1"): 0.0,
}
PAPER_TABLE4 = {  # (rotation, variant) -> (parity acc, mod-3 acc, parentheses F1)
    ("without", "base"): (0.50, 0.33, 0.0),
    ("without", "+silu"): (0.55, 0.33, 0.0),
    ("without", "+skip"): (0.52, 0.34, 0.0),
    ("without", "+norm"): (0.50, 0.33, 0.0),
    ("with", "base"): (1.00, 0.67, 0.0),
    ("with", "+silu"): (0.85, 0.67, 0.2),
    ("with", "+skip"): (0.94, 0.78, 0.5),
    ("with", "+norm"): (1.00, 1.00, 1.0),
    ("with", "layernorm"): (NAN, NAN, 0.0),  # text: "destroys ... parenthesis (F1 = 0.0)"
}

GRIDS: dict[str, dict[str, Any]] = {
    # smoke: proves the pipeline in seconds; the tables come from the committed CSVs.
    "smoke": {"tasks": ("parity",), "presets": ("upstream",), "seeds": (0,), "epochs": 2,
              "n": 300, "d_model": 8, "n_layers": 1, "hold": None, "variants": ("+norm",)},
    # quick: a live subset beside the committed tables (about a minute on 2 cores).
    "quick": {"tasks": ("parity",), "presets": ("upstream",), "seeds": (0, 1), "epochs": 8,
              "n": 600, "d_model": 16, "n_layers": 2, "hold": 3, "variants": ("+norm",)},
    # committed: the largest grid run on 2 cores; its records ship as data/results/*.csv.
    "committed": {"tasks": TASKS, "presets": ("paper", "upstream"), "seeds": (0, 1, 2),
                  "epochs": 25, "n": 1000, "d_model": 32, "n_layers": 2, "hold": 5,
                  "variants": tuple(VARIANTS)},
    # paper: the paper's sizes and 300 epochs, 5 seeds (hours; resumable via RunStore).
    "paper": {"tasks": TASKS, "presets": ("paper", "upstream"), "seeds": tuple(range(5)),
              "epochs": 300, "n": None, "d_model": 64, "n_layers": 3, "hold": 20,
              "variants": tuple(VARIANTS)},
}  # fmt: skip


def grid_spec(grid: str) -> dict[str, Any]:
    return GRIDS[check_choice("grid", grid, GRIDS)]


def cell_config(
    spec, task, preset, seed, *, variant="+norm", rotation="with", loss="focal", leaky=True
):
    """One run of one table cell; rotation "without" sets ``rotation="none"``."""
    from structattn_lite.data.tasks import PAPER_N

    options = {"d_model": spec["d_model"], "n_layers": spec["n_layers"], **VARIANTS[variant]}
    if rotation == "without":
        options["rotation"] = "none"
    options["scan"] = "loop" if options["silu"] == "step" else "parallel"
    return CSPRun(
        task=task,
        preset=preset,
        model_options=options,
        seed=seed,
        n=spec["n"] or PAPER_N[task],
        labels="prefix",
        leaky=leaky,
        loss=loss,
        epochs=spec["epochs"],
        hold_perfect=spec["hold"],
    )


def table_grid(grid: str) -> list[tuple[dict[str, str], CSPRun]]:
    """(cell labels, config) for Tables 3 and 4 and the split check, seed-major order.

    Seed-major so that a partial sweep already covers every cell with some seeds.
    """
    spec = grid_spec(grid)
    cells = []
    for rotation in ROTATIONS:
        for variant in spec["variants"]:
            if (rotation, variant) in PAPER_TABLE4:
                cells.append(
                    {
                        "table": "4",
                        "rotation": rotation,
                        "variant": variant,
                        "loss": "focal",
                        "split": "random",
                    }
                )
    if "+norm" in spec["variants"]:
        cells.append(
            {"table": "3", "rotation": "with", "variant": "+norm", "loss": "ce", "split": "random"}
        )
        cells.append(
            {
                "table": "split",
                "rotation": "with",
                "variant": "+norm",
                "loss": "focal",
                "split": "disjoint",
            }
        )
    out = []
    for seed in spec["seeds"]:
        for task in spec["tasks"]:
            for preset in spec["presets"]:
                for cell in cells:
                    cfg = cell_config(spec, task, preset, seed, variant=cell["variant"], rotation=cell["rotation"],
                                      loss=cell["loss"], leaky=cell["split"] == "random")  # fmt: skip
                    out.append(({**cell, "task": task, "preset": preset}, cfg))
    return out


def records_frame(cells_and_records, grid: str) -> pd.DataFrame:
    """One row per run: cell labels, config columns, final metrics (the committed CSV)."""
    spec = grid_spec(grid)
    rows = []
    for cell, record in cells_and_records:
        h, c = record.history, record.config
        rows.append(
            {
                **cell,
                "seed": c["seed"],
                "grid": grid,
                "epochs": c["epochs"],
                "epochs_run": len(h),
                "status": record.status,
                "n": c["n"],
                "d_model": spec["d_model"],
                "n_layers": spec["n_layers"],
                "labels": c["labels"],
                "hold_perfect": c["hold_perfect"],
                "lr": c["optim"]["lr"],
                "n_parameters": record.extra.get("n_parameters"),
                "test_seq_acc": h["test_seq_acc"].iloc[-1] if len(h) else NAN,
                "test_seq_f1": h["test_seq_f1"].iloc[-1] if len(h) else NAN,
                "test_prefix_acc": h["test_acc"].iloc[-1] if len(h) else NAN,
                "best_epoch_90": next(
                    (i + 1 for i, a in enumerate(h.get("test_seq_acc", [])) if a >= 0.9), None
                ),
                "test_in_train": record.extra.get("data", {}).get("test_in_train"),
                "seconds": round(record.extra.get("seconds", NAN), 1),
            }
        )
    return pd.DataFrame(rows)


def verdict(ours: float, sd: float, paper: float, tol: float = 0.05) -> str:
    """Does our mean match the paper's number? Tolerance: max(tol, 2 sd) absolute."""
    if paper is None or math.isnan(paper):
        return "no paper number"
    if ours is None or math.isnan(ours):
        return "not run"
    margin = max(tol, 2 * (0.0 if sd is None or math.isnan(sd) else sd))
    if abs(ours - paper) <= margin:
        return "reproduced"
    return f"not reproduced (ours {'higher' if ours > paper else 'lower'})"


def claim_verdict(better: float, worse: float, tol: float = 0.05) -> str:
    """A paper claim "A beats B": supported when our A exceeds our B by more than tol."""
    if any(v is None or math.isnan(v) for v in (better, worse)):
        return "not run"
    diff = better - worse
    if diff > tol:
        return "supported"
    return "contradicted" if diff < -tol else "not supported (no difference)"


def run_tables(
    grid: str, store=None, run_missing: bool = True, progress: bool = True, batched: bool = False
) -> pd.DataFrame:
    """Run (or reload) every run of a grid; ``run_missing=False`` only collects records.

    ``batched=True`` trains the seeds of each cell together (``seed_batching``): it pays
    on a GPU and for tiny models; on a small CPU at d >= 16 it is about even.
    """
    from structattn_lite.runs import RunStore
    from structattn_lite.training.trainer import few_threads

    store = store or RunStore()
    pairs = table_grid(grid)
    with few_threads():
        return _run_pairs(pairs, grid, store, run_missing, progress, batched)


def _run_pairs(pairs, grid, store, run_missing, progress, batched):
    from tqdm.auto import tqdm

    from structattn_lite.training.seed_batching import sweep_batched
    from structattn_lite.training.state_tracking import EXPERIMENT, run_csp

    if run_missing and batched:
        records = sweep_batched([cfg for _, cfg in pairs], store, progress)
        return records_frame([(cell, r) for (cell, _), r in zip(pairs, records, strict=True)], grid)
    got = []
    for cell, cfg in tqdm(pairs, desc=f"ablation grid {grid}", disable=not progress):
        if run_missing:
            record = store.get_or_run(EXPERIMENT, cfg, lambda c: run_csp(c, progress=False))
        else:
            record = store.load(EXPERIMENT, cfg)
        if record is not None:
            got.append((cell, record))
    return records_frame(got, grid)
