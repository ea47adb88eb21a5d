import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import tomllib
import yaml

from structattn_lite import __version__
from structattn_lite.cli import main
from structattn_lite.config import pick
from structattn_lite.runs import CorruptRecordWarning, RunRecord, RunStore, config_hash
from structattn_lite.studies.grokking.experiment import grokking_grid
from structattn_lite.training.metrics import f1_score, grokking_gap

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Toy:
    seed: int = 0
    lr: float = 0.1


def toy_run(cfg, calls):
    calls.append(cfg)
    history = pd.DataFrame({"epoch": [1, 2], "test_acc": [0.5, cfg.lr]})
    return RunRecord("toy", config_hash("toy", cfg), {"seed": cfg.seed, "lr": cfg.lr}, history)


def test_store_reuses_finished_runs(tmp_path):
    store, calls = RunStore(tmp_path), []
    first = store.get_or_run("toy", Toy(), lambda c: toy_run(c, calls))
    again = store.get_or_run("toy", Toy(), lambda c: toy_run(c, calls))
    assert len(calls) == 1
    pd.testing.assert_frame_equal(first.history, again.history)
    blob = json.loads(store.path("toy", first.key).read_text())
    assert (
        blob["version"] == __version__
        and blob["seed"] == 0
        and blob["config"] == {"seed": 0, "lr": 0.1}
    )
    store.get_or_run("toy", Toy(lr=0.2), lambda c: toy_run(c, calls))
    assert len(calls) == 2  # a different config is a different run


def test_config_hash_is_stable_and_sensitive():
    assert config_hash("toy", Toy()) == config_hash("toy", Toy())
    assert config_hash("toy", Toy()) != config_hash("toy", Toy(lr=0.2))
    assert config_hash("toy", Toy()) != config_hash("other", Toy())


def test_corrupt_record_is_reported_set_aside_and_recomputed(tmp_path):
    store, calls = RunStore(tmp_path), []
    record = store.get_or_run("toy", Toy(), lambda c: toy_run(c, calls))
    path = store.path("toy", record.key)
    path.write_text(path.read_text()[:40])  # a crash mid-write elsewhere
    with pytest.warns(CorruptRecordWarning, match="corrupt"):
        store.get_or_run("toy", Toy(), lambda c: toy_run(c, calls))
    assert len(calls) == 2
    assert path.with_suffix(".corrupt").exists()
    assert json.loads(path.read_text())["key"] == record.key


def test_bad_profile_is_rejected_before_anything_is_written(tmp_path):
    store = RunStore(tmp_path)
    record = store.get_or_run("toy", Toy(), lambda c: toy_run(c, []))
    before = store.path("toy", record.key).read_bytes()
    with pytest.raises(ValueError, match=r"profile='fast'.*'smoke', 'quick', 'paper'"):
        grokking_grid("fast")
    with pytest.raises(ValueError, match=r"profile='fast'"):
        pick("fast", {})
    assert store.path("toy", record.key).read_bytes() == before


def test_grokking_gap_and_f1():
    assert grokking_gap([0.5, 0.92, 0.97, 1.0, 1.0]) == 2
    assert grokking_gap([0.5, 1.0]) == 0
    assert grokking_gap([0.5, 0.95]) is None
    assert grokking_gap([]) is None
    import torch

    pred, target = torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 1, 0])
    assert f1_score(pred, target) == pytest.approx(0.5)
    assert f1_score(torch.zeros(4, dtype=torch.long), target) == 0.0


def test_cli_help_and_bad_arguments():
    out = subprocess.run(
        [sys.executable, "-m", "structattn_lite", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "run" in out.stdout and "study" in out.stdout
    with pytest.raises(SystemExit) as err:
        main(["run", "csp", "--profile", "fast"])
    assert err.value.code == 2


def test_cli_runs_the_smoke_grid(capsys):
    assert (
        main(["run", "csp", "--task", "parity", "--preset", "upstream", "--profile", "smoke"]) == 0
    )
    out = capsys.readouterr().out
    assert "parity" in out and "upstream" in out and "final_test_acc" in out


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    assert python.removeprefix("python") == project["requires-python"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert pip == ["-e .[dev]"]  # every package comes from pyproject, so the two cannot drift
    assert set(project["optional-dependencies"]) == {"dev"}
    names = {d.split("<")[0].split(">")[0].split("=")[0] for d in project["dependencies"]}
    assert {"torch", "torchvision", "networkx", "papermill", "ipywidgets", "seaborn"} <= names


def test_ci_calls_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert readme.index("make study") < readme.index("make test") < 1500


def test_exported_histories_round_trip(tmp_path):
    records = [toy_run(Toy(seed=s, lr=0.25 * s), []) for s in (0, 1, 2)]
    records[1].status, records[1].reason = "diverged", "non-finite loss at epoch 2, step 9"
    records[2].extra = {"seconds": 1.5, "step_grad_norms": [1.0, 2.0]}
    path = tmp_path / "runs.csv.gz"
    from structattn_lite.runs import export_histories, load_histories

    loaded = load_histories(export_histories(records, path))
    assert [r.key for r in loaded] == [r.key for r in records]
    for a, b in zip(loaded, records, strict=True):
        assert (a.config, a.status, a.reason, a.seed) == (b.config, b.status, b.reason, b.seed)
        assert a.extra == {k: v for k, v in b.extra.items() if k == "seconds"}
        pd.testing.assert_frame_equal(a.history, b.history, check_dtype=False)


def test_length_scores_split_seen_and_unseen_positions():
    import torch

    from structattn_lite.training.metrics import length_scores

    target = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    pred = torch.tensor([[0, 1, 0, 0], [1, 1, 0, 1]])  # right on positions < 2, half right after
    got = length_scores(pred, target, train_length=2)
    assert got == {"seq_acc": 0.5, "unseen_acc": 0.5}
    assert math.isnan(length_scores(pred, target, train_length=4)["unseen_acc"])
