"""The studies, one per numbered notebook, each an ``experiment`` (what is run) and a
``report`` (tables, figures and widgets from records). They share the contract that
``structattn_lite.runs.sweep`` relies on: ``EXPERIMENT``, a frozen, validated config
class, ``grid(name)``, ``run(config)`` and ``export(records)``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from structattn_lite.config import check_choice

STUDIES = ("attention", "grokking", "ablations", "length")
NOTEBOOKS = {"attention": "02", "grokking": "03", "ablations": "04", "length": "05"}


def get_study(study: str | ModuleType) -> ModuleType:
    """A study's experiment module from its name; a module (or any object that meets
    the contract) is returned as it is."""
    if not isinstance(study, str):
        return study
    check_choice("study", study, STUDIES)
    return importlib.import_module(f"structattn_lite.studies.{study}.experiment")
