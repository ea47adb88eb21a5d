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
