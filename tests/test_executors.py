"""Executors: the Ray executor gives the local executor's records; failures are recorded.

Several processes share one grid: the local executor claims each unit just before it
trains, so the later runs' locks do not exist yet; a run another process holds is
skipped with a warning and returned if it finishes before the sweep ends; one finished
meanwhile is loaded, not retrained; two real processes on one grid train each run once.

Plus the device audit: a training step of the Trainer and every model, with the model on
PyTorch's ``meta`` device, creates no tensor anywhere else and reads back from the device
once (the loss and gradient norm the history needs).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental import _config as fx_config
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from structattn_lite import runs
from structattn_lite.locking import RunLock
from structattn_lite.models import CSP_PRESETS, MODELS, build_model
from structattn_lite.records import RunRecord, RunStore, config_dict, config_hash
from structattn_lite.runs import execute, sweep, train
from structattn_lite.training.losses import LOSSES, get_loss
from structattn_lite.training.state_tracking import EXPERIMENT, CSPRun
from structattn_lite.training.trainer import OptimConfig, Trainer

TINY = dict(task="parity", n=96, length=8, epochs=2, batch_size=32)
GRID = [
    CSPRun(**TINY, seed=0, model_options={"d_model": 8, "n_layers": 1}),
    CSPRun(**TINY, seed=1, model_options={"d_model": 8, "n_layers": 1}),
    CSPRun(**TINY, seed=0, model="gru", preset=None, model_options={"d_model": 8, "n_layers": 1}),
    CSPRun(**TINY, seed=13, model_options={"d_model": 8, "n_layers": 1}),  # made to fail
]


def run_or_fail(cfg: CSPRun, checkpoint=None):
    """A study's run, except that seed 13 raises (module level: Ray pickles it)."""
    if cfg.seed == 13:
        raise RuntimeError("seed 13 is unlucky")
    return train("grokking", cfg, progress=False, checkpoint=checkpoint)


def comparable(record) -> dict:
    """What must match across executors: everything but the wall time."""
    blob = record.to_json()
    blob["extra"] = {k: v for k, v in blob["extra"].items() if k not in ("seconds", "traceback")}
    return blob


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip(
        "ray", reason="Ray is not installed; `pip install -e '.[dev]'` brings it (extra 'cluster')"
    )
    # Workers import run_or_fail from this module, so they need the tests folder on their path.
    tests = str(Path(__file__).resolve().parent)
    for attempt in (1, 2):
        try:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": {"PYTHONPATH": tests}},
            )
            break
        except Exception as err:  # Ray gives its raylet 30 s to start: too few on a loaded box
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(err):
                raise
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local_records():
    return list(execute(run_or_fail, GRID, experiment=EXPERIMENT, progress=False))


def test_local_executor_runs_in_order_and_records_a_failure(local_records):
    assert [c for c, _ in local_records] == GRID
    statuses = [r.status for _, r in local_records]
    assert statuses == ["ok", "ok", "ok", "failed"]
    failed = local_records[-1][1]
    assert failed.reason == "RuntimeError: seed 13 is unlucky"
    assert failed.history.empty and "run_or_fail" in failed.extra["traceback"]
    assert all(len(r.history) == TINY["epochs"] for _, r in local_records[:3])


@pytest.mark.slow
def test_ray_gives_the_local_records(ray_instance, local_records, tmp_path):
    """A local 2-CPU Ray instance; checkpointing on, to show it changes nothing either.
    Ray claims every run before the first task starts (they run at once)."""
    ckpt = functools.partial(lambda root, cfg: root / f"{cfg.seed}-{cfg.model}.ckpt", tmp_path)
    claimed = []
    results = execute(
        run_or_fail,
        GRID,
        experiment=EXPERIMENT,
        executor="ray",
        progress=False,
        checkpoint_for=ckpt,
        checkpoint_every=1,
        claim=lambda cfg: claimed.append(cfg) or cfg,
    )
    first = next(results)
    assert claimed == GRID  # every run claimed before the first result came back
    results = [first, *results]
    assert sorted(GRID.index(c) for c, _ in results) == [0, 1, 2, 3]
    assert all(any(c is g for g in GRID) for c, _ in results)  # the objects passed in
    by_key = {r.key: r for _, r in results}
    for _, local in local_records:
        remote = by_key[local.key]
        assert (remote.status, remote.reason) == (local.status, local.reason)
        pd.testing.assert_frame_equal(remote.history, local.history, check_exact=True)
        assert comparable(remote) == comparable(local)
    assert by_key[local_records[-1][1].key].status == "failed"
    assert not list(tmp_path.glob("*.ckpt"))  # finished runs leave no checkpoint


def run_seeds_or_fail(cfgs: list[CSPRun], checkpoint=None):
    """A unit of seeds trained together (here one after the other)."""
    return [run_or_fail(c) for c in cfgs]


def test_a_unit_of_seeds_fails_as_a_whole(local_records):
    units = [GRID[:2], GRID[2:]]
    results = list(execute(run_seeds_or_fail, units, experiment=EXPERIMENT, progress=False))
    assert [u for u, _ in results] == units
    ok, failed = (records for _, records in results)
    assert [comparable(r) for r in ok] == [comparable(r) for _, r in local_records[:2]]
    assert [r.status for r in failed] == ["failed", "failed"]
    assert [r.key for r in failed] == [r.key for _, r in local_records[2:]]


def test_bad_executor_names_the_parameter_and_choices():
    with pytest.raises(ValueError, match=r"executor='dask'.*\['local', 'ray'\]"):
        execute(run_or_fail, GRID, experiment=EXPERIMENT, executor="dask")
    with pytest.raises(ValueError, match="checkpoint_every"):
        execute(run_or_fail, GRID, experiment=EXPERIMENT, checkpoint_every=-1)


def test_local_executor_claims_each_item_just_before_it_runs():
    events = []

    def claim(item):
        events.append(f"claim {item}")
        return None if item == "held" else item.upper()

    def run_one(item, checkpoint):
        events.append(f"run {item}")
        return f"record {item}"

    results = execute(run_one, ["a", "held", "b"], experiment="x", progress=False, claim=claim)
    assert list(results) == [("A", "record A"), ("B", "record B")]  # what claim returned
    assert events == ["claim a", "run A", "claim held", "claim b", "run B"]
    with pytest.raises(ValueError, match="claim must be a callable"):
        execute(run_one, ["a"], experiment="x", claim="yes")


# --- several processes on one grid ----------------------------------------------------


@dataclass(frozen=True)
class Job:
    seed: int = 0
    lr: float = 0.1


class ScriptedStudy:
    """A study stub that trains nothing: each run notes the lock files it sees, calls
    ``during(cfg)``, appends "pid key" to ``marker`` and sleeps ``seconds``."""

    EXPERIMENT = "scripted"

    def __init__(self, store, during=None, marker=None, seconds=0.0):
        self.store, self.during, self.marker, self.seconds = store, during, marker, seconds
        self.calls: list[tuple[Job, list[str]]] = []

    def run(self, cfg, progress=False, callbacks=(), device="cpu", checkpoint=None):
        locks = (self.store.root / self.EXPERIMENT).glob("*.lock")
        self.calls.append((cfg, sorted(p.stem for p in locks)))
        if self.during is not None:
            self.during(cfg)
        if self.marker is not None:
            with open(self.marker, "a") as fh:
                fh.write(f"{os.getpid()} {job_key(cfg)}\n")
        time.sleep(self.seconds)
        return job_record(cfg)


def job_key(cfg: Job) -> str:
    return config_hash(ScriptedStudy.EXPERIMENT, cfg)


def job_record(cfg: Job, acc: float = 0.5) -> RunRecord:
    history = pd.DataFrame({"epoch": [1], "test_acc": [acc]})
    return RunRecord(ScriptedStudy.EXPERIMENT, job_key(cfg), config_dict(cfg), history)


class StackingScriptedStudy(ScriptedStudy):
    """A scripted study whose seeds train together: it describes its runs (``setup``), so
    the sweep groups them, and the driver it goes to is scripted too (see the test)."""

    def setup(self, cfg):
        return cfg

    record = None


@pytest.mark.parametrize("seed_batching", [False, True])
def test_sweep_locks_a_unit_only_when_it_trains(tmp_path, monkeypatch, seed_batching):
    store = RunStore(tmp_path)
    grid = [Job(seed=s, lr=lr) for lr in (0.1, 0.2) for s in (0, 1)]
    study = StackingScriptedStudy(store)
    scripted_driver = lambda configs, setup, record, **_: [study.run(setup(c)) for c in configs]  # noqa: E731
    monkeypatch.setattr(runs, "train_seeds", scripted_driver)
    records = sweep(study, grid, store=store, progress=False, seed_batching=seed_batching)
    assert [r.key for r in records] == [job_key(c) for c in grid]
    assert [c for c, _ in study.calls] == grid
    for cfg, locks in study.calls:  # each run sees its own unit's locks, never a later one's
        unit = [c for c in grid if c.lr == cfg.lr] if seed_batching else [cfg]
        assert locks == sorted(job_key(c) for c in unit)
    assert not list(tmp_path.rglob("*.lock"))  # all released


def test_a_run_held_elsewhere_is_skipped_and_returned_once_it_finishes(tmp_path):
    store = RunStore(tmp_path)
    grid = [Job(lr=lr) for lr in (0.1, 0.2, 0.3, 0.4)]
    lock_of = {c: store.path("scripted", job_key(c)).with_suffix(".lock") for c in grid}
    elsewhere = [RunLock(lock_of[c]).acquire() for c in grid[1:3]]  # a live holder: us

    def other_finishes_grid_1(cfg):
        if cfg == grid[3]:
            store.save(job_record(grid[1], acc=0.9))
            elsewhere[0].release()

    study = ScriptedStudy(store, during=other_finishes_grid_1)
    with pytest.warns(UserWarning) as caught:
        records = sweep(study, grid, store=store, progress=False)
    messages = [str(w.message) for w in caught]
    for cfg in grid[1:3]:
        assert any(
            f"skipping scripted run {job_key(cfg)}" in m and f"process {os.getpid()}" in m
            for m in messages
        ), messages
    assert [c for c, _ in study.calls] == [grid[0], grid[3]]
    assert [r.key for r in records] == [job_key(c) for c in (grid[0], grid[1], grid[3])]
    assert records[1].history["test_acc"].tolist() == [0.9]  # the other process's record
    assert lock_of[grid[2]].exists()  # a lock held elsewhere is left alone
    elsewhere[1].release()


def test_a_run_finished_elsewhere_meanwhile_is_loaded_not_trained(tmp_path):
    store = RunStore(tmp_path)
    grid = [Job(lr=lr) for lr in (0.1, 0.2, 0.3)]

    def other_finishes_grid_1(cfg):
        if cfg == grid[0]:  # after this sweep looked grid[1] up, before it claims it
            store.save(job_record(grid[1], acc=0.9))

    study = ScriptedStudy(store, during=other_finishes_grid_1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = sweep(study, grid, store=store, progress=False)
    assert [c for c, _ in study.calls] == [grid[0], grid[2]]
    assert [r.history["test_acc"].tolist() for r in records] == [[0.5], [0.9], [0.5]]
    assert not list(tmp_path.rglob("*.lock"))


SHARED_GRID = [Job(lr=round(0.1 * i, 1)) for i in range(1, 7)]


def sweep_shared_grid(root: str, role: str) -> None:
    """One of two processes on one grid: both wait until the other is ready; the second
    then starts once the first has begun its first run (so each joins the other mid-grid)."""
    root, marker = Path(root), Path(root) / "trained.txt"
    store = RunStore(root / "runs")
    study = ScriptedStudy(store, marker=marker, seconds=0.4)
    # an empty sweep first: the modules a sweep imports on its first call load before the
    # barrier, or on a busy machine the first process trains every run while the second
    # is still importing them
    sweep(study, [], store=store, progress=False)
    (root / f"ready-{role}").touch()
    deadline = time.monotonic() + 120
    while len(list(root.glob("ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    while role == "second" and not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the runs the other process holds
        records = sweep(study, SHARED_GRID, store=store, progress=False)
    print(json.dumps([r.key for r in records]))


def test_two_processes_share_one_grid_and_train_each_run_once(tmp_path):
    script = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_executors; "
        f"test_executors.sweep_shared_grid({str(tmp_path)!r}, {{role!r}})"
    )
    procs = {
        role: subprocess.Popen(
            [sys.executable, "-c", script.format(role=role)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("first", "second")
    }
    outputs = {role: proc.communicate(timeout=300) for role, proc in procs.items()}
    for role, proc in procs.items():
        assert proc.returncode == 0, outputs[role][1][-2000:]
    trained = [line.split() for line in (tmp_path / "trained.txt").read_text().splitlines()]
    keys = [job_key(c) for c in SHARED_GRID]
    assert sorted(key for _, key in trained) == sorted(keys)  # each run exactly once
    assert {pid for pid, _ in trained} == {str(p.pid) for p in procs.values()}  # both shared
    returned = {role: json.loads(out.splitlines()[-1]) for role, (out, _) in outputs.items()}
    for got in returned.values():
        assert got == [k for k in keys if k in got]  # in config order
    assert set(returned["first"]) | set(returned["second"]) == set(keys)


# --- device audit ---------------------------------------------------------------------

DATA_DEPENDENT = {torch.ops.aten.nonzero.default, torch.ops.aten.index.Tensor}
HOST_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten._to_copy.default}


class DeviceAudit(TorchDispatchMode):
    """Every aten op under this mode: outputs off ``device`` are strays; reads to the host
    are counted and answered with a finite dummy (meta tensors hold no data)."""

    def __init__(self, device: str = "meta"):
        super().__init__()
        self.device = torch.device(device)
        self.strays: list[str] = []
        self.host_reads: list[str] = []  # where each read to the host happened

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        source = next((a for a in args if isinstance(a, torch.Tensor)), None)
        to_host = func in HOST_READS and source is not None and source.device == self.device
        if func in DATA_DEPENDENT and source.device == self.device:
            # A boolean mask's output size lives on the device: a sync on CUDA.
            if func is torch.ops.aten.nonzero.default or any(
                i is not None and i.dtype == torch.bool for i in args[1]
            ):
                self.host_reads.append(f"{func} at {_caller()}")
            with fx_config.patch(meta_nonzero_assume_all_nonzero=True):
                return func(*args, **kwargs)
        if to_host and func is torch.ops.aten._local_scalar_dense.default:
            self.host_reads.append(f"{func} at {_caller()}")
            return True if source.dtype == torch.bool else 0.5
        if to_host and torch.device(kwargs.get("device") or self.device).type == "cpu":
            self.host_reads.append(f"{func} at {_caller()}")
            return torch.full(source.shape, 0.5, dtype=kwargs.get("dtype") or source.dtype)
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            # 0-dim CPU tensors are scalars passed by value (no copy, no sync); Adam keeps
            # its step count in one on purpose.
            if isinstance(t, torch.Tensor) and t.device != self.device and t.dim() > 0:
                self.strays.append(f"{func} -> {t.device} {tuple(t.shape)} at {_caller()}")
        return out


def _caller() -> str:
    frames = [f for f in traceback.extract_stack() if "structattn_lite" in f.filename]
    return (
        f"{frames[-1].filename.split('structattn_lite')[-1]}:{frames[-1].lineno}" if frames else "?"
    )


MODEL_CASES = [("csp", p) for p in CSP_PRESETS] + [(m, None) for m in MODELS if m != "csp"]


def last_position_ce(model, x, y):
    return F.cross_entropy(model(x)[:, -1], y[:, -1])


@pytest.mark.parametrize(("name", "preset"), MODEL_CASES, ids=[f"{m}-{p}" for m, p in MODEL_CASES])
def test_training_step_is_device_clean(name, preset):
    """Model on ``meta``: any tensor a step makes elsewhere (a factory without a device)
    is a stray, and the step reads one value pair back to the host, no more."""
    torch.manual_seed(0)
    model = build_model(name, preset=preset, n_classes=2, d_model=8, n_layers=1)
    trainer = Trainer(model, last_position_ce, OptimConfig(), progress=False, device="meta")
    assert all(p.device.type == "meta" for p in model.parameters())
    x = torch.randint(0, 2, (4, 6), device="meta")
    audit = DeviceAudit("meta")
    with audit:
        for _ in range(2):
            assert trainer.train_step((x, x)) == (0.5, 0.5)
    assert audit.strays == []
    assert len(audit.host_reads) == 2, audit.host_reads  # per step: loss and norm together


@pytest.mark.parametrize("name", LOSSES)
def test_study_losses_read_nothing_back(name):
    """A loss and its gradient stay on the device: no host sync inside a training step."""
    logits = torch.zeros(4, 6, 2, device="meta", requires_grad=True)
    target = torch.zeros(4, 6, dtype=torch.long, device="meta")
    audit = DeviceAudit("meta")
    with audit:
        get_loss(name)(logits, target).backward()
    assert audit.strays == []
    assert audit.host_reads == []
