"""Runs that fail loudly and recover (issue 27): corrupt checkpoints and records, locks,
bad arguments, a blocked or full store, and the task and data options at their ends.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from toy_study import Toy, ToyStudy

from structattn_lite import cli, files, locking
from structattn_lite import runs as run_driver
from structattn_lite.data import text
from structattn_lite.data.splits import make_dataset
from structattn_lite.locking import RunLock, RunLockedError
from structattn_lite.records import (
    CorruptRecordWarning,
    RunRecord,
    RunStore,
    StoreError,
    config_dict,
    config_hash,
)
from structattn_lite.runs import checkpoint_path, held_elsewhere, sweep
from structattn_lite.studies.grokking import experiment as grokking
from structattn_lite.training import checkpoint as ckpt_module
from structattn_lite.training.state_tracking import EXPERIMENT, CSPRun

# --- tasks and data ------------------------------------------------------------------


@pytest.mark.parametrize("balanced", [0.0, 1.0])
@pytest.mark.parametrize("leaky", [False, True])
def test_dyck1_works_at_both_ends_of_balanced(balanced, leaky):
    data = make_dataset("dyck1", n=100, length=12, seed=0, balanced=balanced, leaky=leaky)
    labels = data.y_train[:, -1].float()  # the last prefix's label is the sequence label
    assert len(data.x_train) == 70 and labels.eq(balanced).all()


def test_char_ptb_names_the_missing_split_file(tmp_path):
    folder = tmp_path / "ptb"
    folder.mkdir()
    (folder / "ptb.char.train.txt").write_text("a b ")
    (folder / "ptb.char.test.txt").write_text("a b ")
    with pytest.raises(FileNotFoundError) as err:
        text.char_ptb(tmp_path, verify=False)
    message = str(err.value)
    lacks = message.split("lacks", 1)[1].split("(", 1)[0]
    assert "ptb.char.valid.txt" in lacks and "train" not in lacks and "test" not in lacks


def test_char_ptb_rejects_a_root_that_is_not_a_path():
    with pytest.raises(ValueError, match="root"):
        text.char_ptb(123)


def test_char_ptb_names_a_file_that_is_not_utf8(tmp_path):
    folder = tmp_path / "ptb"
    folder.mkdir()
    for name, _, _ in text.PTB_FILES.values():
        (folder / name).write_text("a b ")
    bad = folder / "ptb.char.valid.txt"
    bad.write_bytes(b"a \xff b ")
    with pytest.raises(ValueError, match="ptb.char.valid.txt") as err:
        text.char_ptb(tmp_path, verify=False)
    assert not isinstance(err.value, UnicodeDecodeError)


# --- locks -----------------------------------------------------------------------------


def age(path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_live_holder_keeps_its_lock_whatever_its_age(tmp_path):
    path = tmp_path / "abc.lock"
    with RunLock(path):
        age(path, 3 * 3600)
        before = path.read_text()
        with pytest.raises(RunLockedError):
            RunLock(path).acquire()
        assert path.read_text() == before  # the refused one wrote nothing


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", '{"pid": "x"}'])
def test_an_empty_or_garbage_lock_file_no_process_holds_is_taken_at_once(tmp_path, content):
    path = tmp_path / "abc.lock"
    path.write_text(content)
    assert not RunLock(path).held()
    with RunLock(path):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


def test_a_lock_that_cannot_be_written_is_not_left_behind(tmp_path, monkeypatch):
    path = tmp_path / "abc.lock"
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fd, *args, **kwargs):
            self.fh = real_fdopen(fd, *args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, _):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(locking.os, "fdopen", FullDisk)
    with pytest.raises(OSError):
        RunLock(path).acquire()
    assert not path.exists()


# --- checkpoints -------------------------------------------------------------------------

TINY = CSPRun(
    task="parity", n=256, length=8, epochs=3, seed=0, model_options={"d_model": 8, "n_layers": 1}
)


def test_a_corrupt_checkpoint_is_set_aside_and_the_run_retrains(tmp_path):
    store = RunStore(tmp_path)
    ckpt = checkpoint_path(store.root, EXPERIMENT, TINY)
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"PK\x03\x04 not a whole zip archive")
    with pytest.warns(CorruptRecordWarning, match="corrupt"):
        (record,) = sweep(grokking, [TINY], store=store, progress=False, checkpoint_every=1)
    assert record.status == "ok" and len(record.history) == TINY.epochs
    assert ckpt.with_name(ckpt.name + ".corrupt").exists() and not ckpt.exists()
    assert store.load(EXPERIMENT, TINY) is not None


def test_a_checkpoint_that_cannot_be_written_names_its_path(tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64")

    monkeypatch.setattr(ckpt_module.torch, "save", full_disk)
    path = tmp_path / "abc.ckpt"
    with pytest.raises(StoreError, match="abc.ckpt") as err:
        ckpt_module.save_checkpoint(path, {"epoch": 1})
    assert err.value.store_wide and not list(tmp_path.iterdir())


# --- records -------------------------------------------------------------------------


def edit_record(path, **changes):
    blob = json.loads(path.read_text())
    blob.update(changes)
    path.write_text(json.dumps(blob))


@pytest.mark.parametrize(
    "changes",
    [
        {"history": {}},
        {"history": {"epoch": [1, 2], "test_acc": [0.5, None]}},
        {"history": {"epoch": [1, 2], "test_acc": [0.5, float("nan")]}},
        {"status": "early_stop", "history": {"epoch": [1, 2], "test_acc": [0.5, float("inf")]}},
        {"extra": {"final": {"test_acc": None}}},
    ],
    ids=["empty history", "null metric", "nan metric", "inf metric", "null final metric"],
)
def test_an_incomplete_record_is_set_aside_and_retrained(tmp_path, changes):
    store, study = RunStore(tmp_path), ToyStudy()
    (record,) = sweep(study, [Toy()], store=store, progress=False)
    path = store.path("toy", record.key)
    edit_record(path, **changes)
    with pytest.warns(CorruptRecordWarning, match="incomplete"):
        assert store.load("toy", Toy()) is None
    assert path.with_suffix(".corrupt").exists()
    (again,) = sweep(study, [Toy()], store=store, progress=False)
    assert len(study.calls) == 2 and again.history["test_acc"].iloc[-1] == 0.1


def test_a_diverged_record_with_non_finite_metrics_is_served(tmp_path):
    store, study = RunStore(tmp_path), ToyStudy()
    (record,) = sweep(study, [Toy()], store=store, progress=False)
    history = {"epoch": [1, 2], "test_acc": [0.5, float("nan")]}
    edit_record(store.path("toy", record.key), status="diverged", history=history)
    assert store.load("toy", Toy()).status == "diverged"


def test_the_cli_summary_survives_null_metrics():
    history = pd.DataFrame({"epoch": [1], "test_acc": [None], "train_acc": [0.5]})
    records = [
        RunRecord("toy", config_hash("toy", Toy(lr=lr)), config_dict(Toy(lr=lr)), history)
        for lr in (0.1, 0.2)
    ]
    assert "test_acc" in cli._summary(records)


def test_a_record_path_that_cannot_be_read_skips_that_run_only(tmp_path):
    store, study = RunStore(tmp_path), ToyStudy()
    blocked = store.path("toy", config_hash("toy", Toy(lr=0.2)))
    blocked.mkdir(parents=True)  # a directory where the record should be
    with pytest.warns(UserWarning, match=str(blocked.name)):
        records = sweep(study, [Toy(lr=0.2), Toy()], store=store, progress=False)
    assert [r.config["lr"] for r in records] == [0.1]


def test_a_record_that_cannot_be_saved_at_its_path_does_not_stop_the_sweep(tmp_path, monkeypatch):
    store, study = RunStore(tmp_path), ToyStudy()
    blocked = store.path("toy", config_hash("toy", Toy(lr=0.2)))
    real_load, looked_up = RunStore.load, []

    def load_then_block(self, experiment, config):
        found = real_load(self, experiment, config)
        looked_up.append(config)
        if looked_up.count(Toy(lr=0.2)) == 2:  # claimed, then the path taken before the save
            blocked.mkdir(parents=True, exist_ok=True)
        return found

    monkeypatch.setattr(RunStore, "load", load_then_block)
    with pytest.warns(UserWarning, match="not saved"):
        records = sweep(study, [Toy(lr=0.2), Toy()], store=store, progress=False)
    assert [r.config["lr"] for r in records] == [0.2, 0.1]
    assert store.path("toy", config_hash("toy", Toy())).is_file()


def test_two_sweeps_meeting_one_corrupt_record_both_go_on(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    (record,) = sweep(ToyStudy(), [Toy()], store=store, progress=False)
    path = store.path("toy", record.key)
    path.write_text("[]")  # JSON, but no record
    real_from_json = RunRecord.from_json

    def other_sweep_moves_it_first(blob):
        os.replace(path, path.with_suffix(".corrupt"))  # the other sweep, between our steps
        return real_from_json(blob)

    monkeypatch.setattr(RunRecord, "from_json", other_sweep_moves_it_first)
    assert store.load("toy", Toy()) is None
    assert path.with_suffix(".corrupt").exists() and not path.with_suffix(".corrupt.1").exists()


def test_stale_temp_files_of_interrupted_saves_are_removed(tmp_path):
    store = RunStore(tmp_path)
    folder = tmp_path / "toy"
    folder.mkdir()
    old, fresh = folder / ".abc.ckpt.x1.tmp", folder / ".def.json.x2.tmp"
    old.write_bytes(b"half")
    fresh.write_bytes(b"in progress")
    age(old, 2 * 3600)
    sweep(ToyStudy(), [Toy()], store=store, progress=False)
    assert not old.exists() and fresh.exists()


# --- arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"threads": 0},
        {"threads": -3},
        {"device": "meta"},
        pytest.param(
            {"device": "cuda"},
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here"),
        ),
    ],
)
def test_sweep_rejects_bad_arguments_before_anything_trains(tmp_path, bad):
    study = ToyStudy()
    with pytest.raises(ValueError, match=next(iter(bad))):
        sweep(study, [Toy()], store=RunStore(tmp_path), progress=False, **bad)
    assert study.calls == [] and not list(tmp_path.iterdir())


def test_sweep_rejects_a_config_of_another_study(tmp_path):
    from structattn_lite.studies.length.experiment import LengthRun

    with pytest.raises(ValueError, match="CSPRun"):
        sweep(grokking, [TINY, LengthRun()], store=RunStore(tmp_path), progress=False)
    assert not list(tmp_path.iterdir())


# --- the command line ----------------------------------------------------------------

SMOKE = ["run", "grokking", "--profile", "smoke", "--seed", "0", "--epochs", "1"]


def fake_run(cfg, progress=False, callbacks=(), device="cpu", checkpoint=None):
    # every column a CSP run logs and its tables read (schemas.REQUIRED_HISTORY)
    scores = ("train_acc", "test_acc", "test_f1", "test_seq_acc", "test_seq_f1")
    history = pd.DataFrame({"epoch": [1], **{name: [1.0] for name in scores}})
    return RunRecord(EXPERIMENT, config_hash(EXPERIMENT, cfg), config_dict(cfg), history)


def trained_by(run_one):
    """The run driver's ``train`` with each config of a unit run by ``run_one``."""

    def train(study, unit, **kwargs):
        return [run_one(c) for c in unit] if isinstance(unit, list) else run_one(unit)

    return train


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A fresh run store, and grokking runs that take no time."""
    monkeypatch.setenv("STRUCTATTN_RUNS", str(tmp_path))
    monkeypatch.setattr(run_driver, "train", trained_by(fake_run))
    return tmp_path


def smoke_configs():
    return cli._configs(cli.build_parser().parse_args(SMOKE))


def test_run_waits_for_the_runs_another_process_holds_before_it_stops(runs, monkeypatch):
    configs = smoke_configs()
    store = RunStore(runs)
    lock = RunLock(store.path(EXPERIMENT, config_hash(EXPERIMENT, configs[0])).with_suffix(".lock"))
    lock.acquire()  # a live holder: as if another process trained this run
    assert held_elsewhere(grokking, configs, store) == [config_hash(EXPERIMENT, configs[0])]
    naps, real_sleep = [], time.sleep

    def other_process_finishes(seconds):
        if (
            seconds != run_driver.WAIT_FOR_OTHERS_S
        ):  # (time.sleep is patched for all: a lock's poll)
            return real_sleep(seconds)
        naps.append(seconds)
        store.save(fake_run(configs[0]))
        lock.release()

    monkeypatch.setattr(time, "sleep", other_process_finishes)
    with pytest.warns(UserWarning, match="already being trained by process"):  # said, not silent
        assert cli.main([*SMOKE, "--wait"]) == 0  # its run came in while this command waited
    assert naps == [run_driver.WAIT_FOR_OTHERS_S]
    assert held_elsewhere(grokking, configs, store) == []


@pytest.mark.parametrize(
    "args",
    [
        [*SMOKE, "--threads", "0"],
        [*SMOKE, "--threads", "-3"],
        [*SMOKE, "--device", "meta"],
        ["run", "grokking", "--grid", "bogus"],
        ["export", "grokking", "--grid", "smoke"],
        ["study", "--profile", "smoke", "--device", "meta"],
        pytest.param(
            [*SMOKE, "--device", "cuda"],
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here"),
        ),
    ],
)
def test_bad_arguments_give_one_line_before_anything_trains(runs, capsys, args):
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    named = [a for a in args if a.startswith("--")][-1]
    assert named.lstrip("-") in err
    assert not list(runs.iterdir())  # nothing trained, nothing written


def failing_on(failing):
    """A stand-in for training that raises "boom" on ``failing`` and fakes every other run."""

    def fail_one(cfg, **kwargs):
        if cfg == failing:
            raise RuntimeError("boom")
        return fake_run(cfg, **kwargs)

    return fail_one


def test_run_exits_nonzero_naming_a_failed_run(runs, monkeypatch, capsys):
    failing = smoke_configs()[0]
    monkeypatch.setattr(run_driver, "train", trained_by(failing_on(failing)))
    with pytest.warns(UserWarning, match="boom"):
        assert cli.main(SMOKE) == 1
    err = capsys.readouterr().err
    assert config_hash(EXPERIMENT, failing) in err and "boom" in err
    monkeypatch.setattr(run_driver, "train", trained_by(fake_run))
    assert cli.main(SMOKE) == 0  # rerun: the failed run trains again and all is well


def test_run_keeps_its_unfinished_log_to_itself(runs, monkeypatch, tmp_path_factory):
    """The log of runs left unfinished is the command's own: gone when it ends, and an outer
    ``STRUCTATTN_UNFINISHED`` (a notebook kernel's, say) is back in place."""
    scratch = tmp_path_factory.mktemp("scratch")
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the command keeps its log
    monkeypatch.setenv(run_driver.UNFINISHED_ENV, str(scratch / "outer.jsonl"))
    failing = smoke_configs()[0]
    monkeypatch.setattr(run_driver, "train", trained_by(failing_on(failing)))
    with pytest.warns(UserWarning, match="boom"):
        assert cli.main(SMOKE) == 1  # the failed run was read back from the log
    assert os.environ[run_driver.UNFINISHED_ENV] == str(scratch / "outer.jsonl")
    assert not list(scratch.iterdir())  # no log left behind, nothing written to the outer one


def test_run_exits_nonzero_naming_a_run_held_by_another_process(runs, capsys):
    held = smoke_configs()[1]
    lock = RunStore(runs).path(EXPERIMENT, config_hash(EXPERIMENT, held)).with_suffix(".lock")
    with RunLock(lock), pytest.warns(UserWarning, match="already being trained"):
        assert cli.main(SMOKE) == 1
    assert config_hash(EXPERIMENT, held) in capsys.readouterr().err


def test_a_full_disk_gives_one_line_naming_the_store(runs, monkeypatch, capsys):
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "tempfile", SimpleNamespace(mkstemp=no_space))  # every write
    assert cli.main(SMOKE) == 1
    err = capsys.readouterr().err  # (and the runs' progress bar)
    assert err.count("structattn:") == 1 and str(runs) in err and "Traceback" not in err


def test_export_exits_nonzero_when_a_run_failed(runs, monkeypatch, capsys, tmp_path_factory):
    configs = smoke_configs()
    monkeypatch.setattr(grokking, "grid", lambda name: configs)
    written = tmp_path_factory.mktemp("results") / "out.csv"
    monkeypatch.setattr(grokking, "export", lambda records, grid="committed": [written])
    monkeypatch.setattr(run_driver, "train", trained_by(failing_on(configs[0])))
    grid = list(grokking.COMMITTED_CSV)[0]
    with pytest.warns(UserWarning, match="boom"):
        assert cli.main(["export", "grokking", "--grid", grid]) == 1
    assert config_hash(EXPERIMENT, configs[0]) in capsys.readouterr().err


def test_study_exits_nonzero_when_a_notebooks_sweep_left_a_run_unfinished(runs, monkeypatch):
    from structattn_lite import notebook_runner

    def notebooks_that_sweep(profile, only=None, device="cpu"):
        # what a notebook kernel does: it inherits the command's environment
        with pytest.warns(UserWarning):
            sweep("grokking", smoke_configs(), threads=None, progress=False, checkpoint_every=0)

    held = smoke_configs()[0]
    lock = RunStore(runs).path(EXPERIMENT, config_hash(EXPERIMENT, held)).with_suffix(".lock")
    monkeypatch.setattr(notebook_runner, "run_notebooks", notebooks_that_sweep)
    with RunLock(lock):
        assert cli.main(["study", "--profile", "smoke"]) == 1
    monkeypatch.setattr(notebook_runner, "run_notebooks", lambda *a, **k: None)
    assert cli.main(["study", "--profile", "smoke"]) == 0


def test_runs_dir_sets_where_records_go(runs, tmp_path_factory, capsys):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    assert cli.main([*SMOKE, "--runs-dir", str(elsewhere)]) == 0
    assert len(list((elsewhere / EXPERIMENT).glob("*.json"))) == 2
    assert not list(runs.iterdir())
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "--runs-dir" in help_text and "STRUCTATTN_RUNS" in help_text


# --- progress -------------------------------------------------------------------------


def test_a_local_sweep_shows_each_runs_own_progress(tmp_path):
    study = ToyStudy()
    sweep(study, [Toy()], store=RunStore(tmp_path), progress=True)
    sweep(study, [Toy(lr=0.3)], store=RunStore(tmp_path), progress=False)
    assert study.progress == [True, False]
