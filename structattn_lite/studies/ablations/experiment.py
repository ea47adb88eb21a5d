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
from pathlib import Path
from typing import Any

import pandas as pd

from structattn_lite import files
from structattn_lite.config import check_choice, results_dir
from structattn_lite.records import RunRecord, keep_committed_rows, stack_words
from structattn_lite.studies.ablations.grids import (  # noqa: F401 (the study's names, re-exported)
    COMMITTED_CSV,
    GRIDS,
    GROWN_ACROSS_SESSIONS,
    NAN,
    PAPER_TABLE3,
    PAPER_TABLE4,
    ROTATION_SWITCH,
    ROTATIONS,
    TASKS,
    VARIANTS,
)
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


def cell_config(
    spec, task, preset, seed, *, variant="+norm", rotation="with", loss="focal", leaky=True
):
    """One run of one table cell; rotation "without" sets ``rotation="none"``."""
    from structattn_lite.data.tasks import PAPER_N

    options = {"d_model": spec["d_model"], "n_layers": spec["n_layers"], **VARIANTS[variant],
               **ROTATION_SWITCH.get(rotation, {})}  # fmt: skip
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
    wanted = {**VARIANTS[variant], **ROTATION_SWITCH.get(rotation, {})}
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
    rotation = next((label for label, switch in ROTATION_SWITCH.items()
                     if options.get("rotation") == switch["rotation"]), "with")  # fmt: skip
    split = "random" if config["leaky"] else "disjoint"
    table = "split" if split == "disjoint" else ("3" if config["loss"] == "ce" else "4")
    table = "2.3" if rotation == "pairwise" else table  # section 2.3's contrast: no table
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


RUN_ID = ["rotation", "variant", "task", "preset", "seed"]


def _grid_ids(name: str) -> list[tuple]:
    """Each run of a grid as its RUN_ID values, in grid order."""
    ids = []
    for cfg in grid(name):
        c = dataclasses.asdict(cfg)
        cell = cell_of(c)
        ids.append(tuple(cell[k] for k in RUN_ID[:-1]) + (c["seed"],))
    return ids
