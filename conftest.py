"""Test isolation: runs and figures go to a temporary folder, notebooks use the smoke profile.

Set before any test imports the package, and inherited by the notebook kernels that
nbmake starts, so ``make test`` never touches cached runs or committed figures.
"""

import os
import tempfile

import pytest

_scratch = tempfile.mkdtemp(prefix="structattn-test-")
os.environ.setdefault("STRUCTATTN_PROFILE", "smoke")
os.environ.setdefault("STRUCTATTN_RUNS", os.path.join(_scratch, "runs"))
os.environ.setdefault("STRUCTATTN_FIGURES", os.path.join(_scratch, "figures"))
os.environ.setdefault("MPLBACKEND", "Agg")
# pytest -n 2 runs two workers (and their notebook kernels) on two cores: one thread each,
# or OpenMP threads spin against each other and small models run ten times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    """nbmake executes the notebooks with nbclient in the test processes: keep Output
    widgets from stalling them (see ``defer_output_widget_echo``), and fail a notebook
    whose outputs show a reader a code key."""
    from structattn_lite.notebook_runner import defer_output_widget_echo

    defer_output_widget_echo()
    _check_notebook_outputs()


def _check_notebook_outputs():
    """Every notebook nbmake executes fails if a table, Markdown or printed line in its
    outputs shows a code key (``tests/code_keys.py``): names reach readers from names.py."""
    try:
        from nbmake.nb_result import NotebookError
        from nbmake.nb_run import NotebookRun
    except ImportError:  # not collecting notebooks
        return
    if getattr(NotebookRun.execute, "checks_code_keys", False):
        return
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "tests"))
    from code_keys import shown_in_notebook

    execute = NotebookRun.execute

    def checked(self):
        result = execute(self)
        shown = shown_in_notebook(result.nb) if result.error is None else []
        if shown:
            lines = "\n".join(f"  cell {cell}: {line}" for cell, line in shown[:20])
            result.error = NotebookError(
                summary=f"{len(shown)} output line(s) show a code key",
                trace=f"outputs that show a code key (the table's display names come from "
                f"names.py; wrap it in report.in_words):\n{lines}",
                failing_cell_index=shown[0][0],
            )
        return result

    checked.checks_code_keys = True
    NotebookRun.execute = checked


@pytest.fixture
def results_copy(tmp_path, monkeypatch):
    """A copy of data/results that STRUCTATTN_RESULTS points at: a test may damage it."""
    import shutil

    from structattn_lite.config import results_dir

    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    monkeypatch.setenv("STRUCTATTN_RESULTS", str(copy))
    return copy


@pytest.fixture(autouse=True)
def close_figures():
    """Close the figures a test drew, so they do not pile up in the worker (matplotlib
    warns past 20 open figures, and each holds its memory until closed)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
