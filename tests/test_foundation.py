import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import tomllib
import torch
import yaml
from toy_study import Toy, ToyStudy

from structattn_lite import __version__
from structattn_lite.cli import main
from structattn_lite.config import check_profile
from structattn_lite.records import CorruptRecordWarning, RunStore, config_hash
from structattn_lite.runs import sweep
from structattn_lite.studies.grokking import experiment as grokking
from structattn_lite.training.metrics import f1_score

ROOT = Path(__file__).resolve().parents[1]


def test_sweep_reuses_finished_runs(tmp_path, capsys):
    store, study = RunStore(tmp_path), ToyStudy()
    (first,) = sweep(study, [Toy()], store=store, progress=False)
    (again,) = sweep(study, [Toy()], store=store, progress=True)
    assert len(study.calls) == 1
    assert "reused 1 cached run" in capsys.readouterr().out
    pd.testing.assert_frame_equal(first.history, again.history)
    blob = json.loads(store.path("toy", first.key).read_text())
    assert blob["version"] == __version__ and blob["seed"] == 0
    assert blob["config"] == {"seed": 0, "lr": 0.1}
    assert blob["device"] == "cpu" and blob["torch_version"] == torch.__version__
    sweep(study, [Toy(lr=0.2)], store=store, progress=False)
    assert len(study.calls) == 2  # a different config is a different run
    cached = sweep(ToyStudy(), [Toy(), Toy(lr=0.3)], store=store, only_cached=True)
    assert [r.config["lr"] for r in cached] == [0.1]  # only_cached trains nothing


def test_config_hash_is_stable_and_sensitive():
    assert config_hash("toy", Toy()) == config_hash("toy", Toy())
    assert config_hash("toy", Toy()) != config_hash("toy", Toy(lr=0.2))
    assert config_hash("toy", Toy()) != config_hash("other", Toy())


def test_corrupt_records_are_set_aside_without_overwriting_each_other(tmp_path):
    store, study = RunStore(tmp_path), ToyStudy()
    (record,) = sweep(study, [Toy()], store=store, progress=False)
    path = store.path("toy", record.key)
    for _ in range(2):
        path.write_text(path.read_text()[:40])  # a crash mid-write elsewhere
        with pytest.warns(CorruptRecordWarning, match="corrupt"):
            sweep(study, [Toy()], store=store, progress=False)
    assert len(study.calls) == 3
    assert (
        path.with_suffix(".corrupt").exists()
        and path.with_name(path.name[:-5] + ".corrupt.1").exists()
    )
    assert json.loads(path.read_text())["key"] == record.key


def test_a_failed_run_is_recorded_never_served_and_rerun(tmp_path):
    store, study = RunStore(tmp_path), ToyStudy(fail_on={0.2})
    with pytest.warns(UserWarning, match="boom at lr=0.2"):
        records = sweep(study, [Toy(lr=0.2), Toy()], store=store, progress=False)
    assert [r.status for r in records] == ["failed", "ok"]  # the sweep went on
    assert "RuntimeError: boom" in records[0].reason
    assert store.load("toy", Toy(lr=0.2)) is None  # unfinished: never a cached result
    (rerun,) = sweep(ToyStudy(), [Toy(lr=0.2)], store=store, progress=False)
    assert rerun.status == "ok"


def test_bad_grid_and_executor_are_rejected_before_anything_is_written(tmp_path):
    store = RunStore(tmp_path)
    (record,) = sweep(ToyStudy(), [Toy()], store=store, progress=False)
    before = store.path("toy", record.key).read_bytes()
    with pytest.raises(
        ValueError, match=r"grid='fast'.*'smoke', 'quick', 'paper', 'paper_era', 'gap'"
    ):
        grokking.grid("fast")
    with pytest.raises(ValueError, match=r"profile='fast'"):
        check_profile("fast")
    with pytest.raises(ValueError, match=r"executor='dask'.*'local', 'ray'"):
        sweep(ToyStudy(), [Toy(lr=0.5)], store=store, executor="dask")
    with pytest.raises(ValueError, match=r"study='csp'.*'grokking'"):
        sweep("csp", [Toy()], store=store)
    assert store.path("toy", record.key).read_bytes() == before


def test_grokking_gap_and_f1():
    """The gap counts epochs by the history's epoch column (one definition, the report's),
    so a history that starts later or skips an epoch still counts epochs, not rows."""
    from structattn_lite.studies.grokking.report import GAP_METRIC, grokking_gap

    def history(acc, epochs=None):
        return pd.DataFrame({"epoch": epochs or list(range(1, len(acc) + 1)), GAP_METRIC: acc})

    assert grokking_gap(history([0.5, 0.92, 0.97, 1.0, 1.0])) == 2
    assert grokking_gap(history([0.5, 0.92, 0.97, 1.0]), high=0.99) == 2
    assert grokking_gap(history([0.5, 1.0])) == 0
    assert grokking_gap(history([0.5, 0.95])) is None
    assert grokking_gap(history([])) is None
    assert grokking_gap(history([0.92, 0.97, 1.0], epochs=[10, 20, 30])) == 20

    pred, target = torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 1, 0])
    assert f1_score(pred, target) == pytest.approx(0.5)
    assert f1_score(torch.zeros(4, dtype=torch.long), target) == 0.0


def test_cli_help_and_bad_arguments():
    out = subprocess.run(
        [sys.executable, "-m", "structattn_lite", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "run" in out.stdout and "study" in out.stdout
    for bad in (["run", "grokking", "--profile", "fast"], ["run", "csp"]):
        with pytest.raises(SystemExit) as err:
            main(bad)
        assert err.value.code == 2
    from structattn_lite.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    for name in ("run", "export"):  # every option of these commands has help text
        actions = [a for a in commands[name]._actions if a.option_strings and a.dest != "help"]
        assert actions and all(a.help for a in actions), name


def test_cli_runs_the_smoke_grid_then_reuses_it(capsys):
    args = ["run", "grokking", "--profile", "smoke", "--seed", "0", "--epochs", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "paper" in out and "upstream" in out and "test_acc" in out and "status" in out
    assert main(args) == 0
    assert "reused 2 cached run(s)" in capsys.readouterr().out


def test_one_cli_run_goes_through_every_stage_of_a_staged_grid(capsys, monkeypatch, tmp_path):
    from structattn_lite.records import RunStore
    from structattn_lite.studies.length import experiment as ls

    # two epochs on 300 strings never fit parity to 0.999, so every cell is refit
    spec = {**ls.GRIDS["smoke"], "run": {"stop_at_fit": 0.999}, "refit": {"epochs": 3}}
    monkeypatch.setitem(ls.GRIDS, "two_pass", spec)
    monkeypatch.setenv("STRUCTATTN_RUNS", str(tmp_path))
    assert main(["run", "length", "--grid", "two_pass"]) == 0
    store = RunStore(tmp_path)
    configs = ls.grid("two_pass", store=store)
    assert sorted(c.epochs for c in configs) == [2, 2, 3, 3]
    assert all(store.load("length", c) is not None for c in configs)


def test_cli_study_only_that_matches_nothing_lists_the_notebooks(capsys):
    assert main(["study", "--profile", "smoke", "--only", "99"]) == 2
    err = capsys.readouterr().err
    assert "matches no notebook" in err and "03_csp_state_tracking.ipynb" in err


def test_cli_fetch_without_a_network_explains_what_to_do(tmp_path, capsys, monkeypatch):
    from structattn_lite.data import text

    # the discard port on loopback: refused at once, as an offline machine refuses
    monkeypatch.setattr(text, "PTB_URL", "http://127.0.0.1:9/simple-examples.tgz")
    code = main(["data", "fetch", "ptb", "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "ptb.char.train.txt" in err and "STRUCTATTN_DATA" in err


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    assert python.removeprefix("python") == project["requires-python"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert pip == ["-e .[dev]"]  # every package comes from pyproject, so the two cannot drift
    assert set(project["optional-dependencies"]) == {"dev", "cluster"}
    names = {d.split("<")[0].split(">")[0].split("=")[0] for d in project["dependencies"]}
    assert {"torch", "torchvision", "networkx", "papermill", "ipywidgets", "seaborn"} <= names


def test_ci_calls_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert readme.index("make study") < readme.index("make test") < 1500


def test_exported_histories_round_trip(tmp_path):
    records = [ToyStudy().run(Toy(seed=s, lr=0.25 * s)) for s in (0, 1, 2)]
    records[1].status, records[1].reason = "diverged", "non-finite loss at epoch 2, step 9"
    records[2].extra = {"seconds": 1.5, "step_grad_norms": [1.0, 2.0], "stack": [2, 3, 4]}
    path = tmp_path / "runs.csv.gz"
    from structattn_lite.records import export_histories, load_histories

    loaded = load_histories(export_histories(records, path))
    assert [r.key for r in loaded] == [r.key for r in records]
    for a, b in zip(loaded, records, strict=True):
        assert (a.config, a.status, a.reason, a.seed) == (b.config, b.status, b.reason, b.seed)
        # scalars and the stack's seeds (what float32 numbers depend on), not per-step lists
        assert a.extra == {k: v for k, v in b.extra.items() if k in ("seconds", "stack")}
        pd.testing.assert_frame_equal(a.history, b.history, check_dtype=False)


def test_an_export_that_keeps_earlier_runs_replaces_only_the_runs_it_holds(tmp_path):
    from structattn_lite.records import export_histories, load_histories

    records = [ToyStudy().run(Toy(seed=s)) for s in (0, 1, 2)]
    order = [r.key for r in records]
    path = tmp_path / "runs.csv.gz"
    export_histories([records[2], records[0]], path, keep_order=order)
    before = path.read_bytes()
    export_histories([records[1]], path, keep_order=order)  # a later session's run
    assert [r.key for r in load_histories(path)] == order  # all three, in grid order
    export_histories([records[2], records[0]], path, keep_order=order)  # again: replaced
    assert len(load_histories(path)) == 3
    export_histories([records[0], records[2]], path)  # without keep_order: what it holds
    assert path.read_bytes() == before  # the first export was already in grid order
    # a grid that gave seed 1 to another grid: only_order drops its committed row
    export_histories([records[1]], path, keep_order=order)
    export_histories([records[0]], path, keep_order=[order[0], order[2]], only_order=True)
    assert [r.key for r in load_histories(path)] == [order[0], order[2]]


def test_length_scores_split_seen_and_unseen_positions():
    import torch

    from structattn_lite.training.metrics import length_scores

    target = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    pred = torch.tensor([[0, 1, 0, 0], [1, 1, 0, 1]])  # right on positions < 2, half right after
    got = length_scores(pred, target, train_length=2)
    assert got == {"seq_acc": 0.5, "unseen_acc": 0.5}
    assert math.isnan(length_scores(pred, target, train_length=4)["unseen_acc"])


def test_output_widget_echo_waits_for_the_cell_and_still_reaches_the_kernel():
    from types import SimpleNamespace

    from nbclient import NotebookClient
    from nbclient.output_widget import OutputWidget
    from nbformat.v4 import new_output
    from notebook_support import code_notebook

    from structattn_lite.notebook_runner import defer_output_widget_echo

    defer_output_widget_echo()
    sent = []
    client = SimpleNamespace(
        session=SimpleNamespace(msg=lambda *a, **k: {}),
        shell_channel=SimpleNamespace(send=sent.append),
    )
    executor = SimpleNamespace(widget_state={"w": {"outputs": []}})
    widget = OutputWidget("w", {"outputs": []}, client, executor)
    message = {"header": {"msg_type": "display_data"}, "parent_header": {},
               "content": {"data": {"text/plain": "a figure"}, "metadata": {}}}  # fmt: skip
    widget.output([], message, None, 0)
    assert sent == []  # nothing on the shell socket while the cell's reply is awaited
    saved = executor.widget_state["w"]["outputs"]  # what the HTML reports render
    assert saved == [new_output("display_data", data={"text/plain": "a figure"})]

    # In a real kernel the echo arrives once the cell is done: the kernel's widget has it.
    cells = ["import ipywidgets as W\nout = W.Output()\nwith out:\n    print('drawn')\nout",
             "print(len(out.outputs))"]  # fmt: skip
    nb = code_notebook(*cells)
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    assert nb.cells[1].outputs[0]["text"].strip() == "1"
    assert "drawn" in str(nb.metadata["widgets"])  # the saved state the reports render
