"""The paper's ablation tables (3: focal vs cross-entropy; 4: structural parts) as run grids.

Each table cell is one CSP variant on one task, run over several seeds as
``training.state_tracking`` runs; the summary puts our mean +- sd beside the paper's number and a
verdict. Table 4's rows are read as cumulative (the paper's "+Norm, with rotation" row
equals its full model): Base (no SiLU, skip or norm), +SiLU (a SiLU inside every step),
+Skip (that plus the block skip), +Norm (the full CSP: SiLU at the block boundary, skip,
complex normalization); "LayerNorm" swaps the complex normalization of the full model
for LayerNorm (the text's claim, no table number). Each row with and without rotation.

Every grid uses per-prefix labels (the authors' code) and scores the whole string (the
last position), the way the paper reports; ``GRIDS`` says what each profile runs.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pandas as pd

from structattn_lite import files
from structattn_lite.config import check_choice, results_dir
from structattn_lite.names import PAPER_TASKS
from structattn_lite.records import RunRecord, keep_committed_rows, stack_words
from structattn_lite.training.state_tracking import (
    EXPERIMENT,
    CSPRun,
    eval_chunk,
    paper_setting_run,
)
from structattn_lite.training.state_tracking import csp_record as record
from structattn_lite.training.state_tracking import csp_setup as setup

Config = CSPRun
__all__ = ["EXPERIMENT", "GRIDS", "Config", "setup", "record", "eval_chunk", "export", "grid",
           "records_frame"]  # fmt: skip

TASKS = PAPER_TASKS  # the tables' columns

VARIANTS: dict[str, dict[str, Any]] = {
    "base": {"silu": "none", "skip": False, "norm": "none"},
    "+silu": {"silu": "step", "skip": False, "norm": "none"},
    "+skip": {"silu": "step", "skip": True, "norm": "none"},
    "+norm": {"silu": "boundary", "skip": True, "norm": "complex"},  # the full CSP
    "layernorm": {"silu": "boundary", "skip": True, "norm": "layernorm"},
    # section 3.3.2: the full model with one part taken out or moved (no Table 4 row)
    "-skip": {"silu": "boundary", "skip": False, "norm": "complex"},
    "+stepsilu": {"silu": "step", "skip": True, "norm": "complex"},
}
ROTATIONS = ("with", "without")

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
    "smoke": {"tasks": ("parity",), "presets": ("code_switches",), "seeds": (0,), "epochs": 2,
              "n": 300, "d_model": 8, "n_layers": 1, "hold": None, "variants": ("+norm",)},
    # quick: a live subset beside the committed tables (about a minute on 2 cores).
    "quick": {"tasks": ("parity",), "presets": ("code_switches",), "seeds": (0, 1), "epochs": 8,
              "n": 600, "d_model": 16, "n_layers": 2, "hold": 3, "variants": ("+norm",)},
    # paper_text: Table 3 as the text ran it, at the paper's sizes (d 64, 3 layers;
    # 5,000 / 5,000 / 10,000 strings), one label per string, 300 epochs, 5 seeds, early
    # stop once validation has held 100% for 10 epochs. Its focal row is the grokking
    # study's "gap" grid (the same runs, trained once); the cross-entropy row differs only
    # in its loss. Table 4's other rows at this size (~10 core-hours) are not in it.
    "paper_text": {"tasks": TASKS, "presets": ("paper",), "seeds": tuple(range(10)),
                   "epochs": 300, "n": None, "d_model": 64, "n_layers": 3, "hold": 10,
                   "variants": ("+norm",), "losses": ("focal", "ce"),
                   "seeds_by_loss": {"ce": tuple(range(5))}},
    # paper_table4: Table 4's other eight rows as the text ran them, each run the
    # paper_text protocol of Table 3 with the row's switches (the text's model, d 64,
    # 3 layers, 5,000 / 5,000 / 10,000 strings, one label per string, 300 epochs, 5 seeds,
    # early stop once *validation* has held 100% for 10 epochs). Its full-model row is the
    # grokking "gap" grid's paper runs, so it is not trained here. Rows run in order:
    # the rotated rows first, since the unrotated ones are expected to sit at chance.
    "paper_table4": {"tasks": TASKS, "presets": ("paper",), "seeds": tuple(range(5)),
                     "epochs": 300, "hold": 10, "setting": "paper_text",
                     "rows": (("with", "base"), ("with", "+silu"), ("with", "+skip"),
                              ("with", "layernorm"), ("without", "+norm"),
                              ("without", "base"), ("without", "+silu"),
                              ("without", "+skip"))},
    # paper_332: section 3.3.2's claims about the full model, which Table 4's cumulative
    # rows never test: the full model without its skip, and with SiLU inside every step
    # instead of at the block boundary; the paper_text protocol, 5 seeds. Its other side
    # is the full model's runs (paper_text). Cheap tasks first.
    "paper_332": {"tasks": ("dyck1", "mod3", "parity"), "presets": ("paper",),
                  "seeds": tuple(range(5)), "epochs": 300, "hold": 10, "setting": "paper_text",
                  "rows": (("with", "-skip"), ("with", "+stepsilu"))},
    # paper: the paper's sizes and 300 epochs, 5 seeds (hours; resumable via RunStore).
    "paper": {"tasks": TASKS, "presets": ("paper", "code_switches"), "seeds": tuple(range(5)),
              "epochs": 300, "n": None, "d_model": 64, "n_layers": 3, "hold": 20,
              "variants": tuple(VARIANTS)},
}  # fmt: skip


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


def row_switches(preset: str, rotation: str, variant: str) -> dict[str, Any]:
    """The model options that turn ``preset`` into one Table 4 row: only the fields that
    differ from the preset, so the full rotated model is the preset itself (its runs and
    their config hashes are Table 3's)."""
    from structattn_lite.models.csp import CSP_PRESETS

    base = dataclasses.asdict(CSP_PRESETS[preset])
    wanted = {**VARIANTS[variant], **({"rotation": "none"} if rotation == "without" else {})}
    return {k: v for k, v in wanted.items() if base[k] != v}


def cells(spec: dict[str, Any]) -> list[dict[str, str]]:
    """The table cells a grid runs: Table 4's rows, Table 3's cross-entropy row, the split check."""
    out = [
        {"table": "4", "rotation": rotation, "variant": variant, "loss": "focal", "split": "random"}
        for rotation in ROTATIONS
        for variant in spec["variants"]
        if (rotation, variant) in PAPER_TABLE4
    ]
    if "+norm" in spec["variants"]:
        out.append({"table": "3", "rotation": "with", "variant": "+norm", "loss": "ce",
                    "split": "random"})  # fmt: skip
        out.append({"table": "split", "rotation": "with", "variant": "+norm", "loss": "focal",
                    "split": "disjoint"})  # fmt: skip
    return out


def grid(name: str) -> list[CSPRun]:
    """Every run of a grid, seed-major, so a partial sweep already covers every cell."""
    spec = GRIDS[check_choice("grid", name, GRIDS)]
    if spec.get("setting") == "paper_text":  # Table 4's rows in Table 3's paper setting
        return [
            paper_setting_run(task, preset, seed, epochs=spec["epochs"], hold_perfect=spec["hold"],
                              model_options=row_switches(preset, rotation, variant))
            for rotation, variant in spec["rows"]
            for task in spec["tasks"]
            for preset in spec["presets"]
            for seed in spec["seeds"]
        ]  # fmt: skip
    if "losses" in spec:  # Table 3 in the paper's setting (the grokking "gap" grid's runs)
        return [
            paper_setting_run(task, preset, seed, epochs=spec["epochs"], hold_perfect=spec["hold"], loss=loss)
            for loss in spec["losses"]
            for task in spec["tasks"]
            for preset in spec["presets"]
            for seed in spec.get("seeds_by_loss", {}).get(loss, spec["seeds"])
        ]  # fmt: skip
    return [
        cell_config(
            spec,
            task,
            preset,
            seed,
            variant=cell["variant"],
            rotation=cell["rotation"],
            loss=cell["loss"],
            leaky=cell["split"] == "random",
        )  # fmt: skip
        for seed in spec["seeds"]
        for task in spec["tasks"]
        for preset in spec["presets"]
        for cell in cells(spec)
    ]


def model_options(config: dict[str, Any]) -> dict[str, Any]:
    """A run's model options with its preset's defaults filled in (a run of the grokking
    grids names only its preset)."""
    from structattn_lite.models.csp import CSP_PRESETS

    base = CSP_PRESETS.get(config["preset"])
    return {**(dataclasses.asdict(base) if base else {}), **config["model_options"]}


def cell_of(config: dict[str, Any]) -> dict[str, str]:
    """The table cell a run's config belongs to (read back from the config itself)."""
    options = model_options(config)
    variant = next(
        v for v, switches in VARIANTS.items()
        if all(options.get(k) == val for k, val in switches.items())
    )  # fmt: skip
    rotation = "without" if options.get("rotation") == "none" else "with"
    split = "random" if config["leaky"] else "disjoint"
    table = "split" if split == "disjoint" else ("3" if config["loss"] == "ce" else "4")
    return {"table": table, "rotation": rotation, "variant": variant, "loss": config["loss"],
            "split": split, "task": config["task"], "preset": config["preset"]}  # fmt: skip


def records_frame(records: list[RunRecord], grid: str) -> pd.DataFrame:
    """One row per run: cell labels, config columns, final metrics (the committed CSV)."""
    rows = []
    for rec in records:
        h, c = rec.history, rec.config
        options = model_options(c)
        rows.append(
            {
                **cell_of(c),
                "seed": c["seed"],
                "grid": grid,
                "epochs": c["epochs"],
                "epochs_run": len(h),
                "status": rec.status,
                "device": rec.device,
                "n": c["n"],
                "d_model": options["d_model"],
                "n_layers": options["n_layers"],
                "labels": c["labels"],
                "val_fraction": c.get("val_fraction", 0.0),
                "hold_perfect": c["hold_perfect"],
                "lr": c["optim"]["lr"],
                "n_parameters": rec.extra.get("n_parameters"),
                "test_seq_acc": h["test_seq_acc"].iloc[-1] if len(h) else NAN,
                "test_seq_f1": h["test_seq_f1"].iloc[-1] if len(h) else NAN,
                "test_prefix_acc": h["test_acc"].iloc[-1] if len(h) else NAN,
                "best_epoch_90": next(
                    (i + 1 for i, a in enumerate(h.get("test_seq_acc", [])) if a >= 0.9), None
                ),
                "test_in_train": rec.extra.get("data", {}).get("test_in_train"),
                "seconds": round(rec.extra.get("seconds", NAN), 1),
                "stack": stack_words(rec.extra),  # what its float32 numbers depend on
            }
        )
    return pd.DataFrame(rows)


# grid -> its committed records, as in the other studies (the other grids are not committed)
COMMITTED_CSV = {
    "paper_text": "csp_ablations_paper_text.csv",
    "paper_table4": "csp_ablations_paper_table4.csv",
    "paper_332": "csp_ablations_paper_332.csv",
}


def export(records: list[RunRecord], grid: str = "paper_text") -> list[Path]:
    """Write one row per run (cell, config columns, final metrics) to data/results."""
    if grid not in COMMITTED_CSV:
        raise ValueError(f"grid must be one of {sorted(COMMITTED_CSV)} to export, got {grid!r}")
    path = results_dir() / COMMITTED_CSV[grid]
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = records_frame(records, grid).round(5)
    if grid in GROWN_ACROSS_SESSIONS:
        frame = keep_committed_rows(path, frame, RUN_ID, _grid_ids(grid))
    files.write_csv(frame, path, index=False)
    return [path]


GROWN_ACROSS_SESSIONS = ("paper_table4", "paper_text", "paper_332")
RUN_ID = ["rotation", "variant", "task", "preset", "seed"]


def _grid_ids(name: str) -> list[tuple]:
    """Each run of a grid as its RUN_ID values, in grid order."""
    ids = []
    for cfg in grid(name):
        c = dataclasses.asdict(cfg)
        cell = cell_of(c)
        ids.append(tuple(cell[k] for k in RUN_ID[:-1]) + (c["seed"],))
    return ids
