"""A notebook's papermill parameters are checked in the cell right after them: a bad
``PROFILE`` or ``DEVICE`` stops the notebook there, with the package's one line naming the
parameter and its allowed values, not at a sweep cell a minute later (issue 54)."""

from __future__ import annotations

import nbformat
import papermill as pm
import pytest

from structattn_lite.config import check_parameters, repo_root

NOTEBOOKS = repo_root() / "notebooks"
PROFILES = "choose one of ['smoke', 'quick', 'paper']"
DEVICES = "choose one of ['auto', 'cpu', 'cuda', 'cuda:N']"


@pytest.mark.parametrize(
    ("profile", "device", "message"),
    [
        ("huge", None, f"PROFILE='huge' is not allowed; {PROFILES}"),
        ("smoke", 5, f"DEVICE=5 is not allowed; {DEVICES}"),
        ("smoke", "gpu", f"DEVICE='gpu' is not allowed; {DEVICES}"),
        ("smoke", "cpu:1", f"DEVICE='cpu:1' is not allowed; {DEVICES}"),
        ("smoke", "cuda:x", f"DEVICE='cuda:x' is not allowed; {DEVICES}"),
    ],
)
def test_check_parameters_names_the_parameter_and_its_values(profile, device, message):
    with pytest.raises(ValueError) as err:
        check_parameters(profile, device)
    assert str(err.value) == message


def test_check_parameters_passes_good_ones():
    check_parameters("smoke")
    check_parameters("paper", "cpu")
    check_parameters("quick", "auto")


@pytest.mark.parametrize(
    ("notebook", "parameters", "message"),
    [
        ("01_theory", {"PROFILE": "huge"}, f"PROFILE='huge' is not allowed; {PROFILES}"),
        ("02_attention_variants", {"PROFILE": 3}, f"PROFILE=3 is not allowed; {PROFILES}"),
        ("03_csp_state_tracking", {"DEVICE": 5}, f"DEVICE=5 is not allowed; {DEVICES}"),
        ("04_csp_ablations", {"DEVICE": "gpu"}, f"DEVICE='gpu' is not allowed; {DEVICES}"),
        ("05_length_generalization", {"PROFILE": "x"}, f"PROFILE='x' is not allowed; {PROFILES}"),
    ],
)
def test_a_bad_parameter_stops_the_notebook_right_after_the_parameters(
    notebook, parameters, message, tmp_path, monkeypatch
):
    """As ``papermill -p DEVICE 5`` runs it: the error is the check cell's, the cell after
    papermill's injected parameters, and no later cell ran."""
    monkeypatch.setenv("PYTHONPATH", str(repo_root()))
    out = tmp_path / f"{notebook}.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(
            NOTEBOOKS / f"{notebook}.ipynb", out, parameters=parameters, cwd=NOTEBOOKS,
            progress_bar=False, kernel_name="python3",
        )  # fmt: skip
    assert err.value.ename == "ValueError" and err.value.evalue == message
    code = [c for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"]
    tags = [c.metadata.get("tags", []) for c in code[:2]]
    assert tags == [["parameters"], ["injected-parameters"]], tags
    check = code[2]
    assert check.id == "check-parameters"
    assert [o.get("evalue") for o in check.outputs if o.output_type == "error"] == [message]
    assert [c.execution_count for c in code[3:] if c.execution_count] == []  # none ran after
