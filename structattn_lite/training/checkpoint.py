"""Checkpoints that let a killed run resume and end exactly as an uninterrupted one.

A checkpoint holds the model, optimizer and scheduler state, the trainer's epoch
counter, history and per-step gradient norms, and every random state the next epochs
draw from: torch's global CPU (and CUDA) generators and the data order generator. It is
written atomically (a temp file in the same folder, then ``os.replace``), so a kill
mid-write leaves the previous checkpoint intact. A checkpoint that cannot be loaded is
set aside (``<name>.corrupt``, with a warning) and the run trains from scratch; one that
cannot be written (a full disk, a read-only store) raises ``StoreError`` naming it.

Where a run checkpoints is set either on the Trainer (``checkpoint_path=``) or, for a
study's ``run(config)`` that builds its own Trainer, by the caller around it::

    with checkpointing(store_dir / f"{key}.ckpt", every=5):
        record = study.run(config)

Seeds trained together (a study's ``run_seeds``) checkpoint the same way through their
``StackedTrainer``, under ``checkpointing(path, every, stacked=True)``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import pickle
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from structattn_lite.config import check_int
from structattn_lite.records import StoreError, set_aside


@dataclass(frozen=True)
class CheckpointPlan:
    path: Path
    every: int  # epochs between checkpoints
    stacked: bool = False  # for a StackedTrainer (seeds trained together), not a Trainer


_ACTIVE: contextvars.ContextVar[CheckpointPlan | None] = contextvars.ContextVar(
    "structattn_checkpoint", default=None
)
_HEARTBEAT: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "structattn_heartbeat", default=None
)


@contextlib.contextmanager
def checkpointing(
    path: str | os.PathLike | None,
    every: int = 1,
    stacked: bool = False,
    heartbeat: Callable[[], None] | None = None,
):
    """Make the Trainers built inside this block checkpoint to ``path`` every ``every`` epochs.

    ``path=None`` or ``every=0`` turns checkpointing off. Meant for one Trainer per run.
    ``stacked=True`` is for a unit of seeds trained together: only a ``StackedTrainer``
    takes the plan, and a plain ``Trainer`` ignores it, so a unit that falls back to one
    Trainer per seed never has every seed resume from one file. ``heartbeat()`` is
    called after each checkpoint is saved (the sweep refreshes the run's lock with it).
    """
    check_int("every", every, minimum=0)
    if not isinstance(stacked, bool):
        raise ValueError(f"stacked must be True or False, got {stacked!r}")
    if heartbeat is not None and not callable(heartbeat):
        raise ValueError(f"heartbeat must be a callable or None, got {heartbeat!r}")
    plan = CheckpointPlan(Path(path), every, stacked) if path is not None and every > 0 else None
    token, beat = _ACTIVE.set(plan), _HEARTBEAT.set(heartbeat)
    try:
        yield plan
    finally:
        _HEARTBEAT.reset(beat)
        _ACTIVE.reset(token)


def active_plan(stacked: bool = False) -> CheckpointPlan | None:
    """The plan set by the innermost :func:`checkpointing` block for this kind of trainer."""
    plan = _ACTIVE.get()
    return plan if plan is not None and plan.stacked == stacked else None


# --- random state ----------------------------------------------------------------------

Generators = torch.Generator | Sequence[torch.Generator]


def rng_state(generator: Generators) -> dict[str, Any]:
    """torch's global states and the data order's: one generator, or one per seed."""
    data = (
        generator.get_state()
        if isinstance(generator, torch.Generator)
        else [g.get_state() for g in generator]
    )
    state = {"torch": torch.get_rng_state(), "data": data}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], generator: Generators) -> None:
    torch.set_rng_state(state["torch"])
    if isinstance(generator, torch.Generator):
        generator.set_state(state["data"])
    else:
        for g, saved in zip(generator, state["data"], strict=True):
            g.set_state(saved)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- files ----------------------------------------------------------------------------


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """``torch.save`` to a temp file beside ``path``, then atomically replace it; then
    the enclosing :func:`checkpointing` block's heartbeat, if any.

    StoreError (naming ``path``) when it cannot be written: torch reports a full disk as
    a RuntimeError ("enforce fail at inline_container.cc").
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise StoreError(f"cannot write the checkpoint {path}: {first}", err) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    heartbeat = _HEARTBEAT.get()
    if heartbeat is not None:
        heartbeat()
    return path


def load_checkpoint(path: str | os.PathLike, device: torch.device | str = "cpu") -> dict | None:
    """The checkpoint at ``path`` (tensors mapped to ``device``), or None when there is none.

    RNG states are byte tensors that must stay on the CPU, so they are mapped back. A
    file that does not load as a checkpoint (truncated, garbage) is set aside as
    ``<name>.corrupt`` with a warning, and None returned: the run trains from scratch.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        if not isinstance(state, dict) or not {"rng", "shapes", "target"} <= state.keys():
            raise ValueError("it holds no run state")
        state["rng"] = {
            k: ([t.cpu() for t in v] if isinstance(v, list) else v.cpu())
            for k, v in state["rng"].items()
        }
    except torch.OutOfMemoryError:
        raise  # the file may be fine; the device is full
    except (
        RuntimeError,  # "PytorchStreamReader failed reading zip archive"
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
    ) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        set_aside(path, path.with_name(f"{path.name}.corrupt"), f"is corrupt ({first})", 4)
        return None
    return state


def model_shapes(model: torch.nn.Module) -> dict[str, list[int]]:
    """Each parameter's and buffer's shape: what a checkpoint must match to be resumed."""
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def load_matching_checkpoint(
    path: str | os.PathLike, device: torch.device | str, model: torch.nn.Module, target: int
) -> dict | None:
    """The checkpoint at ``path`` if it is of this model and epoch count; None when there
    is none, and None with a warning when it belongs to another run (train from scratch)."""
    state = load_checkpoint(path, device)
    if state is None:
        return None
    if state["shapes"] != model_shapes(model) or state["target"] != target:
        warnings.warn(
            f"checkpoint {path} is of another model or epoch count; ignoring it and "
            "training from scratch",
            stacklevel=4,
        )
        return None
    return state


def plain(value: Any) -> Any:
    """numpy scalars as Python numbers, so a history loads with ``weights_only=True``."""
    return value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value
