"""The studies, one per numbered notebook, each an ``experiment`` (what is run) and a
``report`` (tables, figures and widgets from records). They share the contract that the
run driver (``structattn_lite.runs``) relies on: ``EXPERIMENT``, a frozen, validated config
class, ``grid(name)``, ``export(records, grid)`` with ``COMMITTED_CSV`` (each grid it
exports, and the file it writes), and how a config trains: either a
description of its run for ``training.driver.train_seeds`` (``setup(config)`` and
``record(setup, result, seconds, trained_model, **extra)``, optionally ``eval_chunk(n_seeds)``;
configs equal but for their seed then train together), or ``run(config, progress=,
callbacks=, device=, checkpoint=)`` for a study that trains itself (``checkpoint``: a
``training.checkpoint.CheckpointPlan`` or None, which the driver passes on).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from structattn_lite.config import check_choice

# study -> its experiment module, imported when first asked for (the modules load torch;
# reading a study's committed results, as the ledger does, needs none of them)
STUDIES: dict[str, str] = {
    "attention": "structattn_lite.studies.attention.experiment",
    "grokking": "structattn_lite.studies.grokking.experiment",
    "ablations": "structattn_lite.studies.ablations.experiment",
    "length": "structattn_lite.studies.length.experiment",
}


def get_study(study: str | ModuleType) -> ModuleType:
    """A study's experiment module from its name; a module (or any object that meets
    the contract) is returned as it is."""
    if not isinstance(study, str):
        return study
    return importlib.import_module(STUDIES[check_choice("study", study, STUDIES)])


# (study, table) -> the module that holds a study's GRIDS or COMMITTED_CSV without loading
# torch (the experiment module re-exports both): the command line checks a grid named on it
# in a fraction of a second, before any study loads torch
LIGHT_HOMES = {
    ("attention", "GRIDS"): "structattn_lite.studies.attention.grids",
    ("attention", "COMMITTED_CSV"): "structattn_lite.studies.attention.grids",
    ("grokking", "GRIDS"): "structattn_lite.studies.grokking.grids",
    ("grokking", "COMMITTED_CSV"): "structattn_lite.studies.grokking.grids",
    ("ablations", "GRIDS"): "structattn_lite.studies.ablations.grids",
    ("ablations", "COMMITTED_CSV"): "structattn_lite.studies.ablations.grids",
    ("length", "GRIDS"): "structattn_lite.studies.length.grids",
    ("length", "COMMITTED_CSV"): "structattn_lite.studies.length.grids",
    **{(study, "RUN_FLAGS"): f"structattn_lite.studies.{study}.grids"
       for study in ("attention", "grokking", "ablations", "length")},
}  # fmt: skip


def study_table(study: str, table: str):
    """A study's ``GRIDS`` (every grid it runs), ``COMMITTED_CSV`` (the grids it exports,
    each with its file) or ``RUN_FLAGS`` (the run flags it takes), read without loading
    torch."""
    module = LIGHT_HOMES[(check_choice("study", study, STUDIES), table)]
    return getattr(importlib.import_module(module), table)
