"""The offline HTML reports' words, without a browser: widget views with controls are
marked as snapshots, MathJax knows mathtools' small matrices, and a report's kernel never
cuts a table cell to "..." (tests/test_browser.py opens a whole report in Chromium)."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output
from notebook_support import code_notebook

from structattn_lite import notebook_runner as nr


def _widget_notebook():
    """Two widget views, as a run saves them: a VBox holding a dropdown, and a progress bar."""
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_pick", "IPY_MODEL_pic"]}},
        "pick": {"model_name": "DropdownModel", "state": {"style": "IPY_MODEL_pick_style"}},
        "pick_style": {"model_name": "DescriptionStyleModel", "state": {}},
        "pic": {"model_name": "ImageModel", "state": {}},
        "bar": {"model_name": "FloatProgressModel", "state": {"style": "IPY_MODEL_bar_style"}},
        "bar_style": {"model_name": "ProgressStyleModel", "state": {}},
    }  # fmt: skip
    nb = new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    for model_id in ("box", "bar"):
        view = {nr.WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0}}
        nb.cells.append(new_code_cell("w", outputs=[new_output("display_data", view)]))
    return nb


def test_only_views_with_controls_are_marked_as_snapshots():
    nb = _widget_notebook()
    assert nr.mark_snapshots(nb) == 1
    box, bar = (cell.outputs for cell in nb.cells)
    assert len(box) == 2 and nr.SNAPSHOT_NOTE in box[0]["data"]["text/html"]
    assert "JupyterLab" in nr.SNAPSHOT_NOTE and nr.WIDGET_VIEW in box[1]["data"]
    assert len(bar) == 1  # a progress bar has nothing to change


def test_mathjax_knows_mathtools_small_matrices():
    for env in ("psmallmatrix", "bsmallmatrix", "vsmallmatrix"):
        assert f"{env}: small(" in nr._MATHJAX_CONFIG
    assert 'small("\\\\vert", "\\\\vert")' in nr._MATHJAX_CONFIG  # \vert once JS reads it


@pytest.mark.slow
def test_report_kernel_never_cuts_a_table_cell(tmp_path):
    """The kernel a report runs on: a 120-character verdict and 30 columns print whole,
    floats at three decimals (pandas' defaults cut at 50 characters and 20 columns)."""
    import papermill as pm

    code = (
        "import pandas as pd\n"
        'pd.DataFrame({"verdict": ["inconclusive " * 10], "acc": [0.123456789],'
        ' **{f"c{i}": [i] for i in range(30)}})'
    )
    nb = code_notebook(code)
    nbformat.write(nb, tmp_path / "in.ipynb")
    pm.execute_notebook(
        tmp_path / "in.ipynb",
        tmp_path / "out.ipynb",
        progress_bar=False,
        extra_arguments=nr.kernel_arguments(),
    )
    (out,) = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs
    html = out["data"]["text/html"]
    assert "inconclusive " * 9 in html and "<th>c29</th>" in html and "..." not in html
    assert "0.123<" in html and "0.1234" not in html


def test_missing_widget_models_finds_views_saved_without_their_state():
    nb = _widget_notebook()
    assert nr.missing_widget_models(nb) == []
    del nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]["bar"]
    assert nr.missing_widget_models(nb) == ["bar"]
    nb.metadata.pop("widgets")  # JupyterLab's default save: views, no state
    assert nr.missing_widget_models(nb) == ["box", "bar"]


@pytest.mark.slow
def test_an_executed_notebook_holds_the_state_of_every_widget_it_shows(tmp_path):
    """Notebook 03's two widgets (the live plot's Output and a run browser's controls), run
    as `make study` runs a notebook: reopened, each view finds its model."""
    import papermill as pm

    code = (
        "import ipywidgets as widgets\n"
        "from IPython.display import display\n"
        "from structattn_lite.report import LivePlot\n"
        "live = LivePlot()\n"
        "display(live.widget)\n"
        "live.on_epoch_end(None, {'epoch': 1, 'train_loss': 1.0, 'test_acc': 0.5})\n"
        "widgets.VBox([widgets.Dropdown(options=['a', 'b']), widgets.Output()])"
    )
    nb = code_notebook(code)
    nbformat.write(nb, tmp_path / "in.ipynb")
    pm.execute_notebook(tmp_path / "in.ipynb", tmp_path / "out.ipynb", progress_bar=False)
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    views = [o for o in out.cells[0].outputs if nr.WIDGET_VIEW in o.get("data", {})]
    assert len(views) == 2
    assert nr.missing_widget_models(out) == []


def test_a_finished_run_bar_in_a_notebook_is_hidden_not_closed(monkeypatch):
    """Notebook 03's training cell, saved in JupyterLab and reopened, showed two "Loading
    widget..." views ("widget model not found"): each run's bar (``leave=False``) closed its
    widget, JupyterLab dropped the closed model and kept the view. Every widget a fit
    displays must stay open (saved with the notebook), the finished bar hidden."""
    import ipywidgets as W
    import torch
    import tqdm.notebook

    from structattn_lite.training import trainer as tr

    shown = []
    monkeypatch.setattr(tr, "tqdm", tqdm.notebook.tqdm)  # as tqdm.auto picks in a notebook
    monkeypatch.setattr(tqdm.notebook, "display", lambda w, *a, **k: shown.append(w))
    trainer = tr.Trainer(torch.nn.Linear(2, 1), lambda m, x: m(x).pow(2).mean())
    trainer.fit(2, lambda g: [(torch.ones(3, 2),)], lambda m: {}, torch.Generator())
    assert shown, "the fit displayed no bar"
    for w in shown:
        assert isinstance(w, W.Widget) and w.comm is not None, f"{w!r} was closed"
        assert w.layout.display == "none", "the finished bar still shows"
