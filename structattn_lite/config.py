"""The study's settings in one place: argument checks, profiles and grids, paths, and the
trainers' hook interface (``Callback``).

Every location can be moved with an environment variable so tests and CI never touch
the user's cached runs or committed figures.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# --- argument checks: every bad value names the parameter and what is allowed ------


def lazy_getattr(package: str, homes: dict[str, str]):
    """A package's module ``__getattr__`` that imports ``<package>.<homes[name]>`` when
    ``name`` is first used, so that importing one submodule does not load its siblings."""
    import importlib

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

    return __getattr__


def check_choice(param: str, value: Any, allowed: Iterable[Any]) -> Any:
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{param}={value!r} is not allowed; choose one of {allowed}")
    return value


def check_int(param: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{param} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{param} must be >= {minimum}, got {value}")
    return value


SEED_MAX = 2**32 - 1  # numpy's and every generator's seed range; torch's is wider


def check_seed(param: str, value: Any) -> int:
    """A seed: an integer from 0 to ``SEED_MAX`` (a larger one would fail only when
    training seeds its generators, without naming the seed)."""
    check_int(param, value, minimum=0)
    if value > SEED_MAX:
        raise ValueError(f"{param} must be at most {SEED_MAX} (2**32 - 1), got {value}")
    return value


def check_bool(param: str, value: Any) -> bool:
    """True or False only: 1, 0 or 'yes' would make a config with a new hash for the
    same run."""
    if not isinstance(value, bool):
        raise ValueError(f"{param} must be True or False, got {value!r}")
    return value


def check_bools(config: Any) -> None:
    """``check_bool`` on every field of the dataclass ``config`` declared ``bool``."""
    for f in dataclasses.fields(config):
        if f.type in (bool, "bool"):
            check_bool(f.name, getattr(config, f.name))


def check_fraction_below_one(param: str, value: Any) -> float:
    """A share in [0, 1): a split that must leave something for the other part."""
    check_number(param, value, minimum=0)
    if value >= 1:
        raise ValueError(f"{param} must be below 1 (a share of the data), got {value}")
    return float(value)


def check_threads(param: str, value: Any) -> int:
    """A thread count from 1 to the cores here (torch's OpenMP pool crashed far above)."""
    cores = os.cpu_count() or 1
    check_int(param, value, minimum=1)
    if value > cores:
        raise ValueError(f"{param}={value} is more than the {cores} cores here; use 1 to {cores}")
    return value


def check_number(
    param: str, value: Any, *, minimum: float | None = None, strict: bool = False
) -> float:
    """A finite real number >= minimum (> minimum when ``strict``); NaN and inf refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{param} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{param} must be a finite number, got {value}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{param} must be {op} {minimum}, got {value}")
    return float(value)


# --- profiles and grids --------------------------------------------------------------
#
# A profile says how much a notebook or command runs: smoke (seconds, for tests), quick
# (the whole study in about 20 minutes on a 2-core CPU), paper (the seeds' settings; a GPU
# or a cluster). A grid is the list of runs a study makes for a profile; "committed" names
# the grid whose records ship in data/results/ (the largest one run for the repository).

PROFILES = ("smoke", "quick", "paper")
# The studies, one per notebook 02-05 (``studies.STUDIES`` maps each to its module); named
# here so the command line's parser needs no study, nor torch.
STUDY_NAMES = ("attention", "grokking", "ablations", "length")
GRIDS = (*PROFILES, "committed")


@dataclasses.dataclass(frozen=True)
class SeedStacks:
    """The stacks a grid's protocol trains its seeds in, per task (key None: every task's).
    A seed's float32 numbers depend on the size of its stack and its place in it, so the
    stack is part of the protocol (``runs.sweep`` trains in these, and no other)."""

    by_task: dict[str | None, tuple[tuple[int, ...], ...]]

    def _stacks(self, cfg: Any) -> tuple[tuple[int, ...], ...]:
        return self.by_task.get(getattr(cfg, "task", None), self.by_task.get(None, ()))

    def of(self, cfg: Any) -> tuple[int, ...] | None:
        """The stack ``cfg``'s seed trains in (None: its seed is in none)."""
        return next((stack for stack in self._stacks(cfg) if cfg.seed in stack), None)


def seed_stacks(spec: dict[str, Any]) -> SeedStacks | None:
    """The stacks a grid names (None: it names none): ``stack`` seeds at a time, in the
    order of its ``seeds`` (a tuple, or one per task), or "all" of a task's seeds at once;
    ``stack`` may be one such size per task (a task it leaves out names no stack)."""
    size = spec.get("stack")
    if size is None:
        return None
    tasks = spec.get("tasks", ())
    sizes = size if isinstance(size, dict) else dict.fromkeys(tasks or [None], size)
    for task, each in sizes.items():
        if each != "all":
            check_int(f"stack of {task}" if task else "stack", each, minimum=1)

    def blocks(ordered: tuple[int, ...], each: int | str) -> tuple[tuple[int, ...], ...]:
        step = len(ordered) if each == "all" else each
        return tuple(tuple(ordered[i : i + step]) for i in range(0, len(ordered), step))

    seeds = spec["seeds"]
    return SeedStacks({
        task: blocks(tuple(seeds[task] if isinstance(seeds, dict) else seeds), each)
        for task, each in sizes.items()
    })  # fmt: skip


def check_profile(profile: str) -> str:
    return check_choice("profile", profile, PROFILES)


# --- paths -------------------------------------------------------------------------


def missing_committed(path: Path) -> FileNotFoundError:
    """The error for a committed file that is not there, naming it (as notebook 04 says it):
    a notebook that shows a committed grid fails on it, so ``make study`` fails too."""
    return FileNotFoundError(f"{path} is missing; run the committed grid (see the notebook) first")


def repo_root() -> Path:
    """The checkout this package lives in (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def data_root(root: str | os.PathLike | None = None) -> Path:
    """Argument, then ``STRUCTATTN_DATA``, then ``data/`` in the checkout."""
    if root is not None:
        if not isinstance(root, (str, os.PathLike)):
            raise ValueError(f"root must be a folder path (str or os.PathLike), got {root!r}")
        return Path(root)
    return Path(os.environ.get("STRUCTATTN_DATA") or repo_root() / "data")


def runs_dir() -> Path:
    """Cached run records: ``STRUCTATTN_RUNS`` or ``data/runs`` (gitignored)."""
    return Path(os.environ.get("STRUCTATTN_RUNS") or repo_root() / "data" / "runs")


COMMITTED = "committed"  # the figure "profile" of a render of data/results


def figures_dir(profile: str = COMMITTED) -> Path:
    """Where figures go. Renders of the committed records (``"committed"``, see
    ``structattn_lite.committed_figures``): ``STRUCTATTN_FIGURES``, else ``figures/``, the
    only figures in git. A profile's own runs (smoke, quick, paper) draw scratch figures
    into ``reports/<profile>/`` beside that folder (gitignored), so a study run never
    changes figures/."""
    check_choice("profile", profile, (COMMITTED, *PROFILES))
    env = os.environ.get("STRUCTATTN_FIGURES")
    if env and os.path.exists(env) and not os.path.isdir(env):
        raise ValueError(f"STRUCTATTN_FIGURES={env!r} names a file; it must name a folder")
    committed = Path(env or repo_root() / "figures")
    return committed if profile == COMMITTED else committed.parent / "reports" / profile


def results_dir() -> Path:
    """Committed, compact results of the largest grids run: ``STRUCTATTN_RESULTS`` (a
    copy, for tests), else ``data/results``."""
    return Path(os.environ.get("STRUCTATTN_RESULTS") or repo_root() / "data" / "results")


# --- devices -----------------------------------------------------------------------


PRECISIONS = ("float32", "bfloat16")  # what a run computes its forward pass and loss in
TRAINING_DEVICES = ("cpu", "cuda")  # what a run can train on ("meta" holds no data)


def resolve_device(device: str = "auto", kinds: Iterable[str] = (*TRAINING_DEVICES, "meta")) -> str:
    """ "auto" picks CUDA when present, else the CPU; "cpu", "cuda", "cuda:N" are checked.

    ``kinds``: the device types accepted (``TRAINING_DEVICES`` for a sweep or command).
    """
    import torch

    if not isinstance(device, str):
        raise ValueError(f"device must be a string such as 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind = device.split(":")[0]
    check_choice("device", kind, kinds)
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} asked for, but torch sees no CUDA device here; "
            "use device='cpu' or 'auto'"
        )
    return device


NOTEBOOK_DEVICES = ("auto", "cpu", "cuda", "cuda:N")  # what a notebook's DEVICE may say


def check_parameters(profile: Any, device: Any = None) -> None:
    """A notebook's papermill parameters (``PROFILE``, and ``DEVICE`` where it trains),
    checked in the cell right after them: ``papermill -p DEVICE 5`` stops there with one
    line naming the parameter and its allowed values, not a minute later in the first run."""
    check_choice("PROFILE", profile, PROFILES)
    if device is None:
        return
    kind, _, index = device.partition(":") if isinstance(device, str) else (device, "", "")
    if kind not in ("auto", *TRAINING_DEVICES) or (
        index and not (kind == "cuda" and index.isdigit())
    ):
        raise ValueError(
            f"DEVICE={device!r} is not allowed; choose one of {list(NOTEBOOK_DEVICES)}"
        )
    resolve_device(device, kinds=TRAINING_DEVICES)  # "cuda" where torch sees none


DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")  # the workspace settings cuBLAS repeats with


def training_device(device: str = "auto") -> str:
    """The device a run trains on (``resolve_device`` of a training kind). On CUDA it also
    makes the run repeat: deterministic kernels (``torch.use_deterministic_algorithms``)
    and a cuBLAS workspace that allows them (``CUBLAS_WORKSPACE_CONFIG``, read when cuBLAS
    starts). Without them one config and seed gave 2.156, then 2.072 validation bpc on an
    H200; with them repeated runs were bit-identical."""
    import torch

    device = resolve_device(device, kinds=TRAINING_DEVICES)
    if device.startswith("cuda"):
        if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in DETERMINISTIC_CUBLAS:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = DETERMINISTIC_CUBLAS[0]
        torch.use_deterministic_algorithms(True)
    return device


# --- the training hook -----------------------------------------------------------------


class Callback:
    """Hooks a notebook can hang a live plot on (minGPT style). Here, below the trainers
    that call it and the reports that draw with it (``report.LivePlot``)."""

    def on_batch_end(self, trainer: Any, loss: float, grad_norm: float) -> None: ...

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None: ...
