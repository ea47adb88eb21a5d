"""Where the study reads data and writes runs and figures.

Every location can be moved with an environment variable so tests and CI never touch
the user's cached runs or committed figures.
"""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The checkout this package lives in (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def data_root(root: str | os.PathLike | None = None) -> Path:
    """Argument, then ``STRUCTATTN_DATA``, then ``data/`` in the checkout."""
    if root is not None:
        return Path(root)
    env = os.environ.get("STRUCTATTN_DATA")
    return Path(env) if env else repo_root() / "data"


def runs_dir() -> Path:
    """Cached run records: ``STRUCTATTN_RUNS`` or ``data/runs`` (gitignored)."""
    env = os.environ.get("STRUCTATTN_RUNS")
    return Path(env) if env else repo_root() / "data" / "runs"


def figures_dir() -> Path:
    """Rendered figures: ``STRUCTATTN_FIGURES`` or ``figures/``."""
    env = os.environ.get("STRUCTATTN_FIGURES")
    return Path(env) if env else repo_root() / "figures"


def results_dir() -> Path:
    """Committed, compact results of the largest grids run (``data/results``)."""
    return repo_root() / "data" / "results"
