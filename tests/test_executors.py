"""Executors: the Ray executor gives the local executor's records; failures are recorded.

Plus the device audit: a training step of the Trainer and every model, with the model on
PyTorch's ``meta`` device, creates no tensor anywhere else and reads back from the device
once (the loss and gradient norm the history needs).
"""

from __future__ import annotations

import functools
import traceback
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental import _config as fx_config
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from structattn_lite.executors import execute
from structattn_lite.models import CSP_PRESETS, MODELS, build_model
from structattn_lite.training.losses import LOSSES, get_loss
from structattn_lite.training.state_tracking import EXPERIMENT, CSPRun, run_csp
from structattn_lite.training.trainer import OptimConfig, Trainer

TINY = dict(task="parity", n=96, length=8, epochs=2, batch_size=32)
GRID = [
    CSPRun(**TINY, seed=0, model_options={"d_model": 8, "n_layers": 1}),
    CSPRun(**TINY, seed=1, model_options={"d_model": 8, "n_layers": 1}),
    CSPRun(**TINY, seed=0, model="gru", preset=None, model_options={"d_model": 8, "n_layers": 1}),
    CSPRun(**TINY, seed=13, model_options={"d_model": 8, "n_layers": 1}),  # made to fail
]


def run_or_fail(cfg: CSPRun):
    """A study's run, except that seed 13 raises (module level: Ray pickles it)."""
    if cfg.seed == 13:
        raise RuntimeError("seed 13 is unlucky")
    return run_csp(cfg, progress=False)


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
    """A local 2-CPU Ray instance; checkpointing on, to show it changes nothing either."""
    ckpt = functools.partial(lambda root, cfg: root / f"{cfg.seed}-{cfg.model}.ckpt", tmp_path)
    results = list(
        execute(
            run_or_fail,
            GRID,
            experiment=EXPERIMENT,
            executor="ray",
            progress=False,
            checkpoint_for=ckpt,
            checkpoint_every=1,
        )
    )
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


def run_seeds_or_fail(cfgs: list[CSPRun]):
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
