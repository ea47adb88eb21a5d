"""Checkpoints that let a killed run resume and end exactly as an uninterrupted one.

A checkpoint holds the model, optimizer and scheduler state, the trainer's counters and
history, and every random state the next epochs draw from. It is written atomically; one
that cannot be loaded is set aside (``<name>.corrupt``, with a warning) and the run trains
from scratch. Where a run checkpoints is a ``CheckpointPlan``, passed explicitly to a
Trainer and to a study's ``run(config, checkpoint=plan)``.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from structattn_lite.config import check_int
from structattn_lite.records import atomic_write, set_aside


@dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often one run (or one unit of seeds trained together) checkpoints."""

    path: Path
    every: int = 1  # epochs (evaluations, for the attention recipe) between checkpoints
    stacked: bool = False  # of several seeds trained together: a stacked model's, no plain one's

    def save(self, state: dict[str, Any]) -> Path:
        """Write ``state`` to the plan's path (atomically)."""
        return save_checkpoint(self.path, state)


def checkpoint_plan(
    path: str | os.PathLike | None,
    every: int = 1,
    stacked: bool = False,
) -> CheckpointPlan | None:
    """The plan to checkpoint to ``path`` every ``every`` epochs; None when ``path`` is
    None or ``every`` is 0. Only a stacked model's Trainer takes a ``stacked`` plan, so a unit
    that falls back to one run per seed never has every seed resume from one file."""
    check_int("every", every, minimum=0)
    if not isinstance(stacked, bool):
        raise ValueError(f"stacked must be True or False, got {stacked!r}")
    if path is None or every == 0:
        return None
    return CheckpointPlan(Path(path), every, stacked)


def trainer_plan(
    plan: CheckpointPlan | None,
    path: str | os.PathLike | None,
    every: int,
    stacked: bool | None,
) -> CheckpointPlan | None:
    """The Trainer's plan from its ``checkpoint_path``/``checkpoint_every`` or ``checkpoint``
    arguments (not both); a plan of the other kind (``stacked``; None: either) is refused."""
    if path is not None:
        if plan is not None:
            raise ValueError("Trainer takes checkpoint_path or checkpoint, not both")
        check_int("checkpoint_every", every, minimum=1)
        return CheckpointPlan(Path(path), every, bool(stacked))
    if plan is not None and not isinstance(plan, CheckpointPlan):
        raise ValueError(f"checkpoint must be a CheckpointPlan or None, got {plan!r}")
    if plan is not None and stacked is not None and plan.stacked != stacked:
        kind = "seeds trained together" if plan.stacked else "a single run"
        raise ValueError(f"Trainer cannot take a checkpoint plan for {kind}")
    return plan


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
    return atomic_write(path, "checkpoint", lambda fh: torch.save(state, fh), binary=True)


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
    path: str | os.PathLike,
    device: torch.device | str,
    model: torch.nn.Module,
    target: int,
    keys: Iterable[str] = (),
) -> dict | None:
    """The checkpoint at ``path`` if it is of this model and epoch count and holds every
    one of ``keys`` (the state the trainer saves: an older trainer's lacks some); None when
    there is none, and None with a one-line warning when it belongs to another run or is
    of an older format (train from scratch: nothing is lost but the time)."""
    state = load_checkpoint(path, device)
    if state is None:
        return None
    missing = sorted(set(keys) - state.keys())
    if not missing and state["shapes"] == model_shapes(model) and state["target"] == target:
        return state
    older = f" (an older trainer's format, without {', '.join(missing)})" if missing else ""
    warnings.warn(
        f"checkpoint {path} is of another model, epoch count or trainer{older}; ignoring it "
        "and training from scratch",
        stacklevel=4,
    )
    return None


def plain(value: Any) -> Any:
    """numpy scalars as Python numbers, so a history loads with ``weights_only=True``."""
    return value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value
