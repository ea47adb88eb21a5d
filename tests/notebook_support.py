"""Notebooks a test builds: code cells on the python3 kernel, as papermill runs them."""

from __future__ import annotations

from nbformat.v4 import new_code_cell, new_notebook


def code_notebook(*cells: str):
    """A notebook of the code cells ``cells``, on the kernel the study's notebooks use."""
    nb = new_notebook(cells=[new_code_cell(code) for code in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb
