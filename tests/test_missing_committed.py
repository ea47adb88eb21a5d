"""A committed file that is not there is named, as notebook 04 names its own: the loaders
the notebooks read committed grids with raise a FileNotFoundError with the file's path,
the figures drawn from them too, and `structattn study` exits nonzero on such a notebook
(before, notebook 03 without its gap file showed "Committed grid 'gap': no runs." and
`make study` exited 0). Each case runs on a copy of data/results with one file removed."""

from __future__ import annotations

import shutil

import nbformat
import pytest

from structattn_lite import cli
from structattn_lite import committed_figures as cf
from structattn_lite import notebook_runner as nr
from structattn_lite.config import repo_root
from structattn_lite.studies.attention import tables as at
from structattn_lite.studies.grokking import experiment as grokking
from structattn_lite.studies.length import report as lt

RESULTS = repo_root() / "data" / "results"


@pytest.fixture
def results_without(tmp_path, monkeypatch):
    """A copy of data/results under STRUCTATTN_RESULTS, less the file given."""

    def copy(name: str):
        folder = tmp_path / "results"
        shutil.copytree(RESULTS, folder)
        (folder / name).unlink()
        monkeypatch.setenv("STRUCTATTN_RESULTS", str(folder))
        return folder / name

    return copy


@pytest.mark.parametrize(
    ("name", "load"),
    [
        ("csp_grokking_gap.csv.gz", lambda: grokking.committed_records("gap", missing_ok=False)),
        ("attention_runs.csv", lambda: at.load_summary(missing_ok=False)),
        ("attention_long_histories.csv.gz",
         lambda: at.load_committed_histories("long", missing_ok=False)),
        ("length_grazzi.csv.gz", lambda: lt.load_curves("grazzi", missing_ok=False)),
        ("length_generalization.csv.gz", lambda: lt.load_curves()),
    ],
)  # fmt: skip
def test_a_strict_loader_names_the_missing_file(name, load, results_without):
    path = results_without(name)
    with pytest.raises(FileNotFoundError) as err:
        load()
    assert str(err.value) == f"{path} is missing; run the committed grid (see the notebook) first"


def test_loaders_still_load_nothing_where_asked_to(results_without):
    results_without("csp_grokking_gap.csv.gz")
    assert grokking.committed_records("gap") == []  # the ledger's and findings' reading


@pytest.mark.parametrize(
    ("figure", "name"),
    [
        ("03_csp_grokking_parity_gap", "csp_grokking_gap.csv.gz"),
        ("02_attention_committed_fraction_sweep", "attention_runs.csv"),
        ("05_length_grazzi", "length_grazzi.csv.gz"),
    ],
)
def test_a_committed_figure_names_its_missing_file(figure, name, results_without):
    path = results_without(name)
    with pytest.raises(FileNotFoundError, match="is missing") as err:
        cf.draw(figure)
    assert str(path) in str(err.value)


def _cells(notebook: str, *needles: str) -> list:
    """The parameters cell, the check after it, and each code cell holding a needle."""
    nb = nbformat.read(repo_root() / "notebooks" / notebook, as_version=4)
    return [
        c for c in nb.cells if c.cell_type == "code" and (
            "parameters" in c.metadata.get("tags", []) or c.id == "check-parameters"
            or any(n in c.source for n in needles))
    ]  # fmt: skip


def test_make_study_fails_naming_the_file_when_notebook_03_cannot_show_its_grid(
    results_without, tmp_path, monkeypatch, capsys
):
    """Notebook 03's own cells that read the committed grids (its imports, then the gap
    grid's cell), run by `structattn study` on results without the gap file."""
    path = results_without("csp_grokking_gap.csv.gz")
    nb = nbformat.v4.new_notebook(
        cells=_cells("03_csp_state_tracking.ipynb", "import experiment as grokking",
                     'committed_records("gap"'),
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}},
    )  # fmt: skip
    assert len(nb.cells) == 4, [c.source[:60] for c in nb.cells]
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(nb, folder / "03_cut.ipynb")
    monkeypatch.setattr(nr, "notebooks", lambda only=None: [folder / "03_cut.ipynb"])
    monkeypatch.setattr(nr, "repo_root", lambda: tmp_path)  # reports/ under tmp_path
    monkeypatch.setenv("PYTHONPATH", str(repo_root()))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["study", "--profile", "smoke"]) == 1
    err = capsys.readouterr().err
    assert f"FileNotFoundError: {path} is missing" in err, err
