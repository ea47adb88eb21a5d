"""Resumable runs and the per-run lock.

A run killed with SIGKILL after its first checkpoint resumes and ends with the history of
an uninterrupted run, exactly; so does a run interrupted in-process, for each lr schedule
and with dropout drawing on torch's global RNG. The same for seeds trained together (a
stacked model on the ``Trainer``), killed or interrupted, with a seed already stopped by its rule.
Two holders of one run's lock: the second is refused with a clear message; a lock whose
process is gone is taken over.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from structattn_lite.locking import RunLock, RunLockedError
from structattn_lite.runs import run_guarded, train
from structattn_lite.training import checkpoint as ckpt_module
from structattn_lite.training.checkpoint import CheckpointPlan, checkpoint_plan
from structattn_lite.training.state_tracking import EXPERIMENT, CSPRun
from structattn_lite.training.trainer import Callback, OptimConfig, Trainer, few_threads

# ~0.1 s an epoch on one thread: long enough to kill mid-run, short enough to test.
KILLED = CSPRun(
    task="parity", n=512, length=12, epochs=16, seed=3, model_options={"d_model": 16, "n_layers": 2}
)


def train_killed_config(checkpoint: str | None) -> tuple[pd.DataFrame, list[float]]:
    """What the subprocess runs (and the test runs in-process to compare)."""
    with few_threads(1):
        record = train(
            "grokking", KILLED, progress=False, checkpoint=checkpoint_plan(checkpoint, every=1)
        )
    return record.history, record.extra["step_grad_norms"]


def kill_after_first_checkpoint(function: str, path: Path, module: str = "test_resume") -> dict:
    """Run ``<module>.<function>(path)`` (a test module) in a subprocess, SIGKILL it as
    soon as its first checkpoint appears, and return that checkpoint."""
    script = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import {module}; {module}.{function}({str(path)!r})"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    return torch.load(path, weights_only=True)


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_history(tmp_path, monkeypatch):
    """One CSP config trains as a stack of one seed, which takes its run's plan."""
    path = tmp_path / "run.ckpt"
    killed_at = kill_after_first_checkpoint("train_killed_config", path)["epoch"]
    assert 1 <= killed_at < KILLED.epochs

    resumed_from = []
    resume = Trainer.resume

    def spy(self, *args):
        resumed_from.append(resume(self, *args))
        return resumed_from[-1]

    monkeypatch.setattr(Trainer, "resume", spy)
    history, norms = train_killed_config(str(path))
    assert resumed_from == [killed_at]
    assert not path.exists()  # a finished run deletes its checkpoint

    monkeypatch.setattr(Trainer, "resume", resume)
    reference, reference_norms = train_killed_config(None)
    assert len(history) == KILLED.epochs
    pd.testing.assert_frame_equal(history, reference, check_exact=True)
    assert norms == reference_norms


# Two seeds trained together, checkpointed through the run driver's guard as a sweep does.
STACKED_UNIT = [dataclasses.replace(KILLED, seed=s, epochs=12) for s in (3, 4)]


def train_stacked_unit(checkpoint: str | None) -> list[tuple[str, pd.DataFrame, list[float]]]:
    """What the subprocess runs (and the test runs in-process to compare)."""
    records = run_guarded(
        functools.partial(train, "grokking"),
        STACKED_UNIT,
        EXPERIMENT,
        threads=1,
        checkpoint_for=lambda unit: checkpoint,
        checkpoint_every=1,
    )
    assert [r.extra.get("seed_batched") for r in records] == [2, 2], records[0].reason
    return [(r.status, r.history, r.extra["step_grad_norms"]) for r in records]


@pytest.mark.slow
def test_killed_stacked_unit_resumes_to_the_uninterrupted_histories(tmp_path, monkeypatch):
    path = tmp_path / "unit.ckpt"
    killed_at = kill_after_first_checkpoint("train_stacked_unit", path)["epoch"]
    assert 1 <= killed_at < STACKED_UNIT[0].epochs

    resumed_from = []
    resume = Trainer.resume

    def spy(self, *args):
        resumed_from.append(resume(self, *args))
        return resumed_from[-1]

    monkeypatch.setattr(Trainer, "resume", spy)
    resumed = train_stacked_unit(str(path))
    assert resumed_from == [killed_at]
    assert not path.exists()  # a finished unit deletes its checkpoint

    monkeypatch.setattr(Trainer, "resume", resume)
    reference = train_stacked_unit(None)
    for (status, history, norms), (ref_status, ref_history, ref_norms) in zip(
        resumed, reference, strict=True
    ):
        assert status == ref_status == "ok" and len(history) == STACKED_UNIT[0].epochs
        pd.testing.assert_frame_equal(history, ref_history, check_exact=True)
        assert norms == ref_norms
    assert not resumed[0][1].equals(resumed[1][1])  # two seeds, two different runs


# --- in-process interruption: every schedule, and dropout's global RNG ----------------


class Interrupt(Exception):
    pass


class StopAt(Callback):
    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_epoch_end(self, trainer, row):
        if trainer.epoch == self.epoch:
            raise Interrupt


def toy_fit(optim: OptimConfig, checkpoint: Path | None, callbacks=(), epochs: int = 6):
    """A dropout MLP on fixed noise: every epoch draws on both the data and global RNG."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 5, generator=g), torch.randint(0, 2, (64,), generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))

    def batches(gen):
        order = torch.randperm(64, generator=gen)
        for i in range(0, 64, 16):
            yield x[order[i : i + 16]], y[order[i : i + 16]]

    trainer = Trainer(
        model,
        lambda m, a, b: nn.functional.cross_entropy(m(a), b),
        optim,
        callbacks=callbacks,
        progress=False,
        checkpoint_path=checkpoint,
        checkpoint_every=1,
    )
    return trainer.fit(epochs, batches, lambda m: {}, torch.Generator().manual_seed(1))


SCHEDULES = {
    "plateau": OptimConfig(lr=0.05, plateau_patience=0, plateau_factor=0.5),
    "cosine": OptimConfig(lr=0.05, schedule="cosine", eta_min=0.001),
    "constant": OptimConfig(lr=0.05, schedule="constant"),
}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_interrupted_run_resumes_exactly(schedule, tmp_path):
    optim, path = SCHEDULES[schedule], tmp_path / "toy.ckpt"
    reference = toy_fit(optim, None)
    with pytest.raises(Interrupt):
        toy_fit(optim, path, callbacks=[StopAt(3)])
    assert path.exists()
    resumed = toy_fit(optim, path)
    assert resumed.resumed_from == 3 and not path.exists()
    pd.testing.assert_frame_equal(resumed.history, reference.history, check_exact=True)
    assert resumed.step_grad_norms == reference.step_grad_norms
    if schedule != "constant":
        assert reference.history["lr"].nunique() > 1  # the scheduler state mattered


class TwoSeedMLP(nn.Module):
    """The smallest stacked model: a dropout MLP whose parameters have a seed axis of 2."""

    n_seeds = 2

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w1 = nn.Parameter(torch.randn(2, 5, 16, generator=g) / 2)
        self.w2 = nn.Parameter(torch.randn(2, 16, 2, generator=g) / 2)

    def forward(self, x):
        return nn.functional.dropout(torch.relu(x @ self.w1), 0.3, self.training) @ self.w2


def toy_stacked_fit(optim: OptimConfig, checkpoint: Path | None, interrupt_at: int = 0):
    """Seed 0 stops by its rule after epoch 2; seed 1 trains on. ``interrupt_at`` raises
    in that epoch's evaluation, after the previous epoch's checkpoint."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 64, 5, generator=g), torch.randint(0, 2, (2, 64), generator=g)
    torch.manual_seed(0)
    trainer = Trainer(
        TwoSeedMLP(),
        lambda m, a, b: nn.functional.cross_entropy(m(a).transpose(1, 2), b, reduction="none").mean(
            1
        ),
        optim,
        checkpoint_path=checkpoint,
    )

    def batches(generators):
        orders = torch.stack([torch.randperm(64, generator=gen) for gen in generators])
        for i in range(0, 64, 16):
            idx = orders[:, i : i + 16]
            yield x[[[0], [1]], idx], y[[[0], [1]], idx]

    def evaluate(model):
        if trainer.epoch == interrupt_at:
            raise Interrupt
        return [{"seed": 0}, {"seed": 1}]

    generators = [torch.Generator().manual_seed(s) for s in (1, 2)]
    return trainer.fit(
        6, batches, evaluate, generators, lambda rows: rows[-1]["seed"] == 0 and len(rows) == 2
    )


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_interrupted_stacked_run_resumes_exactly(schedule, tmp_path):
    optim, path = SCHEDULES[schedule], tmp_path / "stacked.ckpt"
    reference = toy_stacked_fit(optim, None)
    assert [r.status for r in reference] == ["early_stop", "ok"]
    assert [len(r.history) for r in reference] == [2, 6]
    with pytest.raises(Interrupt):
        toy_stacked_fit(optim, path, interrupt_at=4)
    assert torch.load(path, weights_only=True)["active"] == [False, True]
    resumed = toy_stacked_fit(optim, path)
    assert [r.resumed_from for r in resumed] == [3, 3] and not path.exists()
    for got, want in zip(resumed, reference, strict=True):
        assert (got.status, got.reason) == (want.status, want.reason)
        pd.testing.assert_frame_equal(got.history, want.history, check_exact=True)
        assert got.step_grad_norms == want.step_grad_norms
    if schedule != "constant":
        assert reference[1].history["lr"].nunique() > 1  # the scheduler state mattered


def old_format(state: dict, stacked: bool) -> dict:
    """A checkpoint as the two trainers wrote it before they were one (at 4e93233)."""
    if stacked:
        lrs = [lrs["param_groups"][0]["lr"] for lrs, _ in state["schedules"]]
        old = {"adam": state["optimizer"], "lrs": torch.tensor(lrs, dtype=torch.float64)}
        keep = ("model", "schedules", "active", "status", "reason", "epoch", "target", "rows",
                "step_norms", "rng", "shapes")  # fmt: skip
    else:
        old = {"scheduler": state["schedules"][0][1], "rows": state["rows"][0],
               "step_grad_norms": state["step_norms"][0]}  # fmt: skip
        keep = ("model", "optimizer", "epoch", "steps", "target", "group_grad_norms", "best",
                "elapsed", "stateful", "rng", "shapes")  # fmt: skip
    return old | {k: state[k] for k in keep}


@pytest.mark.parametrize("stacked", [False, True], ids=["plain", "stacked"])
def test_an_old_format_checkpoint_is_refused_in_one_line_and_the_run_retrains(stacked, tmp_path):
    """A checkpoint of the plain or the stacked trainer before they became one Trainer is
    refused with a one-line warning naming what it lacks, and the run trains from scratch
    to the uninterrupted history: nothing lost but the time."""
    optim, path = SCHEDULES["plateau"], tmp_path / "old.ckpt"
    if stacked:
        fit, interrupted = toy_stacked_fit, functools.partial(toy_stacked_fit, interrupt_at=4)
    else:
        fit, interrupted = toy_fit, functools.partial(toy_fit, callbacks=[StopAt(3)])
    reference = fit(optim, None)
    with pytest.raises(Interrupt):
        interrupted(optim, path)
    torch.save(old_format(torch.load(path, weights_only=True), stacked), path)
    with pytest.warns(UserWarning, match="an older trainer's format, without") as caught:
        retrained = fit(optim, path)
    assert len(caught) == 1 and len(str(caught[0].message).splitlines()) == 1
    assert "training from scratch" in str(caught[0].message) and not path.exists()
    pairs = zip(retrained, reference, strict=True) if stacked else [(retrained, reference)]
    for got, want in pairs:
        assert got.resumed_from == 0 and (got.status, got.reason) == (want.status, want.reason)
        pd.testing.assert_frame_equal(got.history, want.history, check_exact=True)
        assert got.step_grad_norms == want.step_grad_norms


def test_a_plain_trainer_refuses_a_stacked_plan(tmp_path):
    """A Trainer takes no plan of seeds trained together (nor a stack of several seeds a
    plan of one run; a stack of one seed is one run): a plan is never silently ignored."""
    stacked = checkpoint_plan(tmp_path / "unit.ckpt", every=1, stacked=True)
    with pytest.raises(ValueError, match="seeds trained together"):
        Trainer(nn.Linear(5, 2), lambda m, a, b: m(a).sum(), checkpoint=stacked)
    single = checkpoint_plan(tmp_path / "run.ckpt", every=1)
    with pytest.raises(ValueError, match="a single run"):
        Trainer(TwoSeedMLP(), lambda m, a, b: m(a).sum((1, 2)), checkpoint=single)
    with pytest.raises(ValueError, match="not both"):
        Trainer(
            nn.Linear(5, 2), lambda m, a, b: 0, checkpoint_path=tmp_path / "x", checkpoint=single
        )


def test_a_unit_without_a_stacked_form_trains_its_seeds_without_the_units_checkpoint(
    tmp_path, monkeypatch
):
    """A unit whose model has no stacked form trains one Trainer per seed: none of them
    may take the unit's checkpoint, or every seed would resume from one file."""
    path = tmp_path / "unit.ckpt"
    with pytest.raises(Interrupt):  # a checkpoint a seed could wrongly resume from
        toy_fit(SCHEDULES["constant"], path, callbacks=[StopAt(3)])
    saved, plans = [], []
    monkeypatch.setattr(CheckpointPlan, "save", lambda self, state: saved.append(self))
    init = Trainer.__post_init__
    monkeypatch.setattr(
        Trainer, "__post_init__", lambda self: (init(self), plans.append(self.plan))
    )
    unit = [
        CSPRun(task="parity", n=64, length=6, epochs=2, seed=s, model="gru", preset=None,
               model_options={"d_model": 8, "n_layers": 1})
        for s in (0, 1)
    ]  # fmt: skip
    records = train("grokking", unit, checkpoint=checkpoint_plan(path, every=1, stacked=True))
    assert [r.status for r in records] == ["ok", "ok"]
    assert [r.extra.get("seed_batched") for r in records] == [None, None]  # one at a time
    assert plans == [None, None] and saved == [] and path.exists()


def test_resume_needs_the_global_rng_state(tmp_path, monkeypatch):
    """Control: with the data order restored but not torch's global RNG (dropout), the
    resumed run differs, so the equality above depends on the RNG state being saved."""
    optim, path = SCHEDULES["constant"], tmp_path / "toy.ckpt"
    reference = toy_fit(optim, None)
    with pytest.raises(Interrupt):
        toy_fit(optim, path, callbacks=[StopAt(3)])
    monkeypatch.setattr(ckpt_module.torch, "set_rng_state", lambda state: None)
    resumed = toy_fit(optim, path)
    assert resumed.resumed_from == 3
    assert not resumed.history["train_loss"].equals(reference.history["train_loss"])


def test_cosine_follows_the_closed_form():
    lr, eta_min, epochs = 0.05, 0.001, 6
    result = toy_fit(OptimConfig(lr=lr, schedule="cosine", eta_min=eta_min), None, epochs=epochs)
    expect = [eta_min + (lr - eta_min) * (1 + math.cos(math.pi * e / epochs)) / 2 for e in range(6)]
    assert result.history["lr"].tolist() == pytest.approx(expect, rel=1e-12)
    constant = toy_fit(OptimConfig(lr=lr, schedule="constant"), None)
    assert set(constant.history["lr"]) == {lr}


def test_optim_config_errors_name_the_parameter():
    with pytest.raises(ValueError, match=r"schedule='linear'.*\['plateau', 'cosine', 'constant'\]"):
        OptimConfig(schedule="linear")
    with pytest.raises(ValueError, match="t_max must be >= 1"):
        OptimConfig(schedule="cosine", t_max=0)
    with pytest.raises(ValueError, match="eta_min must be >= 0"):
        OptimConfig(eta_min=-1.0)
    with pytest.raises(ValueError, match=r"plateau_factor must be in \(0, 1\)"):
        OptimConfig(plateau_factor=1.5)
    assert OptimConfig() == OptimConfig(schedule="plateau", t_max=None, eta_min=0.0)


# --- the per-run lock -------------------------------------------------------------------


def test_second_holder_is_refused_while_the_first_holds(tmp_path):
    path = tmp_path / "abc.lock"
    with RunLock(path):
        owner = json.loads(path.read_text())
        assert (owner["pid"], owner["host"]) == (os.getpid(), socket.gethostname())
        with pytest.raises(RunLockedError, match=rf"process {os.getpid()} on .*abc\.lock"):
            RunLock(path).acquire()
    assert not path.exists()
    with RunLock(path):  # free again once released
        assert path.exists()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def hold_in_a_subprocess(path):
    """A live process on this host holding the lock at ``path``; kill it to end it."""
    code = ("import sys, time; from structattn_lite.locking import RunLock; "
            "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_of_a_live_process_is_refused_and_of_a_dead_one_taken_over(tmp_path):
    path = tmp_path / "abc.lock"
    proc = hold_in_a_subprocess(path)
    try:
        with pytest.raises(RunLockedError, match=rf"process {proc.pid} on {socket.gethostname()}"):
            RunLock(path).acquire()
        assert RunLock(path).held()
    finally:
        proc.kill()  # dies holding it: no release ran, the lock file stays
        proc.wait()
    assert json.loads(path.read_text())["pid"] == proc.pid
    assert not RunLock(path).held()
    with RunLock(path):
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_a_lock_file_naming_a_process_that_holds_no_lock_is_taken(tmp_path):
    path = tmp_path / "abc.lock"
    path.write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname(), "time": "then"}))
    with RunLock(path):
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_a_moments_probe_of_a_free_lock_does_not_make_a_run_skip(tmp_path):
    import threading

    from filelock import FileLock

    path = tmp_path / "abc.lock"
    path.write_text("")
    probe = FileLock(path, timeout=0, thread_local=False)  # as RunLock.held probes
    probe.acquire()
    threading.Timer(0.03, probe.release).start()
    with RunLock(path):  # waits the probe out instead of skipping the run
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_release_leaves_a_lock_file_put_in_its_place(tmp_path):
    path = tmp_path / "abc.lock"
    lock = RunLock(path).acquire()
    path.unlink()  # the file replaced (e.g. by hand) while we held the old one
    path.write_text(json.dumps({"pid": 1, "host": "another-host", "time": "now"}))
    lock.release()
    assert json.loads(path.read_text())["host"] == "another-host"


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A crash while writing leaves the previous checkpoint whole (and no temp file)."""
    path = tmp_path / "run.ckpt"
    ckpt_module.save_checkpoint(path, {"epoch": 1})

    def crash(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt_module.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        ckpt_module.save_checkpoint(path, {"epoch": 2})
    assert torch.load(path, weights_only=True) == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]
