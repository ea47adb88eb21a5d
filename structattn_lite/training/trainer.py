"""A small trainer shared by every study: Adam, an lr schedule, clipping, callbacks.

It records the gradient norm of every step before clipping, keeps a per-epoch history,
and stops a run whose loss or gradient turns NaN/Inf, recording why, so a sweep can
carry on with the next config. Given a checkpoint path it saves its whole state every
few epochs and a later ``fit`` resumes from it, ending exactly as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from structattn_lite.config import check_choice, check_int, check_number, resolve_device
from structattn_lite.training.checkpoint import (
    CheckpointPlan,
    load_matching_checkpoint,
    model_shapes,
    plain,
    rng_state,
    set_rng_state,
    trainer_plan,
)


@contextlib.contextmanager
def few_threads(n: int | None = 1):
    """Run tiny-model training on ``n`` intra-op threads (None: unchanged), then restore.

    These models are far too small to gain from intra-op threads; on a shared 2-core
    machine two threads per process oversubscribe it, and a quick-profile run measured
    ~50x slower with 2 threads (52 s) than with 1 (1 s).
    """
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


SCHEDULES = ("plateau", "cosine", "constant")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    clip: float | None = 1.0  # max gradient norm; None = measure but do not clip
    plateau_factor: float = 0.5
    plateau_patience: int = 10  # epochs without train-loss improvement before lr halves
    weight_decay: float = 0.0
    # "plateau": ReduceLROnPlateau on the training loss (the paper's); "cosine":
    # CosineAnnealingLR stepped per epoch; "constant": lr never changes.
    schedule: str = "plateau"
    t_max: int | None = None  # cosine: epochs from lr to eta_min (None: the run's epochs)
    eta_min: float = 0.0  # cosine: the lowest lr

    def __post_init__(self):
        check_number("lr", self.lr, minimum=0, strict=True)
        if self.clip is not None:
            check_number("clip", self.clip, minimum=0, strict=True)
        factor = check_number("plateau_factor", self.plateau_factor, minimum=0, strict=True)
        if factor >= 1:
            raise ValueError(f"plateau_factor must be in (0, 1), got {self.plateau_factor}")
        check_int("plateau_patience", self.plateau_patience, minimum=0)
        check_number("weight_decay", self.weight_decay, minimum=0)
        check_choice("schedule", self.schedule, SCHEDULES)
        if self.t_max is not None:
            check_int("t_max", self.t_max, minimum=1)
        check_number("eta_min", self.eta_min, minimum=0)


def make_scheduler(optimizer: torch.optim.Optimizer, optim: OptimConfig, epochs: int):
    """The per-epoch lr scheduler of ``optim.schedule`` (None for a constant lr)."""
    if optim.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, factor=optim.plateau_factor, patience=optim.plateau_patience
        )
    if optim.schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=optim.t_max or max(epochs, 1), eta_min=optim.eta_min
        )
    return None


class Callback:
    """Hooks a notebook can hang a live plot on (minGPT style)."""

    def on_batch_end(self, trainer: Trainer, loss: float, grad_norm: float) -> None: ...

    def on_epoch_end(self, trainer: Trainer, row: dict[str, Any]) -> None: ...


@dataclass
class TrainResult:
    history: pd.DataFrame
    step_grad_norms: list[float]
    status: str = "ok"  # "ok", "diverged" (NaN/Inf guard) or "early_stop"
    reason: str | None = None
    resumed_from: int = 0  # the epoch a checkpoint resumed this run from (0: from scratch)


@dataclass
class Trainer:
    """Train ``model`` with ``loss_fn(model, *batch) -> scalar`` for some epochs.

    ``batches(generator)`` yields an epoch's batches; ``evaluate(model)`` returns the
    per-epoch metrics to log (e.g. test accuracy). The plateau scheduler watches the
    training loss, never a test metric.

    ``device`` ("auto", "cpu", "cuda", "cuda:1", ...; None: wherever the model is) moves
    the model once; keep the data on the same device so batches need no copy (a batch
    elsewhere is moved, which costs a copy per step). Each step synchronises with the
    device once, to read the loss and gradient norm the history and the NaN guard need.

    ``checkpoint_path`` (or a ``checkpoint`` plan, ``training.checkpoint.CheckpointPlan``)
    makes ``fit`` save every ``checkpoint_every`` (the plan's ``every``) epochs, resume
    from a checkpoint it finds there, and delete it once the run ends.
    """

    model: nn.Module
    loss_fn: Callable[..., torch.Tensor]
    optim: OptimConfig = field(default_factory=OptimConfig)
    callbacks: Sequence[Callback] = ()
    progress: bool = True
    device: str | torch.device | None = None
    checkpoint_path: str | os.PathLike | None = None
    checkpoint_every: int = 1
    checkpoint: CheckpointPlan | None = None

    def __post_init__(self):
        if self.device is None:
            first = next(iter(self.model.parameters()), None)
            self.device = first.device if first is not None else torch.device("cpu")
        else:
            self.device = torch.device(resolve_device(str(self.device)))
            self.model.to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=self.optim.lr, weight_decay=self.optim.weight_decay
        )
        self.scheduler = None  # built by fit, which knows the epoch count cosine needs
        self._scheduler_built = False
        self.plan = trainer_plan(
            self.checkpoint, self.checkpoint_path, self.checkpoint_every, False, "Trainer"
        )
        self.step_grad_norms: list[float] = []
        self.rows: list[dict[str, Any]] = []
        self.epoch = 0

    def to_device(self, batch: tuple) -> tuple:
        """The batch on the model's device (no copy when it is already there)."""
        return tuple(
            t.to(self.device, non_blocking=True) if isinstance(t, torch.Tensor) else t
            for t in batch
        )

    def train_step(self, batch: tuple) -> tuple[float, float]:
        self.model.train()
        loss = self.loss_fn(self.model, *self.to_device(batch))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = self.optim.clip if self.optim.clip is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        # The one host sync of a step: both numbers in one transfer.
        stats = torch.stack([loss.detach().double(), grad_norm.to(loss.device).double()])
        loss_value, norm_value = stats.tolist()
        if math.isfinite(loss_value) and math.isfinite(norm_value):
            self.optimizer.step()
        return loss_value, norm_value

    # --- checkpoints -------------------------------------------------------------------

    def state(self, generator: torch.Generator, target: int) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "epoch": self.epoch,
            "target": target,
            "rows": [{k: plain(v) for k, v in row.items()} for row in self.rows],
            "step_grad_norms": list(self.step_grad_norms),
            "rng": rng_state(generator),
            "shapes": model_shapes(self.model),
        }

    def resume(self, generator: torch.Generator, target: int) -> int:
        """Load the plan's checkpoint if there is one; the epoch it resumes from."""
        state = load_matching_checkpoint(self.plan.path, self.device, self.model, target)
        if state is None:
            return 0
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.epoch = state["epoch"]
        self.rows = state["rows"]
        self.step_grad_norms = state["step_grad_norms"]
        set_rng_state(state["rng"], generator)
        return self.epoch

    # --- training ----------------------------------------------------------------------

    def fit(
        self,
        epochs: int,
        batches: Callable[[torch.Generator], Iterable[tuple]],
        evaluate: Callable[[nn.Module], dict[str, float]],
        generator: torch.Generator,
        stop_when: Callable[[list[dict[str, Any]]], bool] | None = None,
        desc: str = "train",
    ) -> TrainResult:
        target = self.epoch + epochs
        self.run_name = desc  # callbacks say which run they draw (a live plot's title)
        if not self._scheduler_built:
            self.scheduler = make_scheduler(self.optimizer, self.optim, epochs)
            self._scheduler_built = True
        resumed_from = self.resume(generator, target) if self.plan else 0
        status, reason = "ok", None
        bar = tqdm(
            total=target, initial=self.epoch, desc=desc, disable=not self.progress, leave=False
        )
        while self.epoch < target:
            self.epoch += 1
            losses, norms = [], []
            for batch in batches(generator):
                loss, norm = self.train_step(batch)
                losses.append(loss)
                norms.append(norm)
                self.step_grad_norms.append(norm)
                for cb in self.callbacks:
                    cb.on_batch_end(self, loss, norm)
                if not (math.isfinite(loss) and math.isfinite(norm)):
                    status = "diverged"
                    reason = f"non-finite {'loss' if not math.isfinite(loss) else 'gradient norm'} at epoch {self.epoch}, step {len(self.step_grad_norms)}"
                    break
            if status == "diverged":
                break
            train_loss = sum(losses) / len(losses)
            row = {
                "epoch": self.epoch,
                "train_loss": train_loss,
                "grad_norm_mean": sum(norms) / len(norms),
                "grad_norm_max": max(norms),
                "lr": self.optimizer.param_groups[0]["lr"],
                **evaluate(self.model),
            }
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                self.scheduler.step(train_loss)
            elif self.scheduler is not None:
                self.scheduler.step()
            self.rows.append(row)
            stop = stop_when is not None and stop_when(self.rows)
            if self.plan and not stop and self.epoch < target and self.epoch % self.plan.every == 0:
                self.plan.save(self.state(generator, target))
            for cb in self.callbacks:
                cb.on_epoch_end(self, row)
            bar.update(1)
            bar.set_postfix(
                {k: f"{v:.3g}" for k, v in row.items() if k in ("train_loss", "test_acc")}
            )
            if stop:
                status, reason = "early_stop", f"stop rule met at epoch {self.epoch}"
                break
        bar.close()
        if self.plan:
            self.plan.path.unlink(missing_ok=True)  # the run is over: its record says the rest
        history = pd.DataFrame(self.rows)
        return TrainResult(history, list(self.step_grad_norms), status, reason, resumed_from)
