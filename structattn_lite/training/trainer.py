"""The trainer of one run, in every study: an optimizer, an lr schedule, clipping, callbacks.

A run is rounds ("epochs" in its rows): one pass over a state-tracking training set, or
the attention study's ``eval_every`` steps between evaluations; each ends in a row of
history. It records every step's gradient norm before clipping, stops a run whose loss or
gradient turns NaN/Inf, recording why, so a sweep can carry on with the next config, and
can stop early (a rule over the rows, patience on a monitored value, a CPU-time budget).
Given a checkpoint it saves its whole state every few rounds and a later ``fit`` resumes
from it, ending exactly as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from structattn_lite.config import (  # Callback: re-exported, the trainers' hook
    Callback,
    check_choice,
    check_int,
    check_number,
    resolve_device,
)
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
    """Run on ``n`` intra-op threads (None: unchanged), then restore: these models are too
    small to gain from more, and on a shared 2-core machine 2 threads ran ~50x slower."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


SCHEDULES = ("plateau", "cosine", "constant")
PRECISIONS = ("float32", "bfloat16")


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


def adam(model: nn.Module, optim: OptimConfig) -> torch.optim.Optimizer:
    """The default optimizer: Adam with ``optim``'s rate and (L2) weight decay."""
    return torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)


@dataclass
class TrainResult:
    history: pd.DataFrame  # one row per round
    step_grad_norms: list[float]  # per step, before clipping
    status: str = "ok"  # "ok", "diverged" (NaN/Inf guard), "early_stop" or "time_budget"
    reason: str | None = None
    resumed_from: int = 0  # the round a checkpoint resumed this run from (0: from scratch)
    group_grad_norms: dict[str, list[float]] = field(default_factory=dict)  # per grad group
    steps: int = 0  # optimizer steps taken (a diverged step is not taken)
    best_step: int = 0  # the step whose state ``monitor`` rated best (0: none)
    seconds: float = 0.0  # wall and CPU time in training, across resumes
    cpu_seconds: float = 0.0

    @property
    def grad_norms(self) -> dict[str, list[float]]:
        """Every logged gradient norm per step: "total" and each grad group."""
        return {"total": self.step_grad_norms, **self.group_grad_norms}

    def grad_norm_variance(self, after: int) -> dict[str, float]:
        """Variance of each logged gradient norm over steps >= ``after`` (post warmup)."""
        out = {}
        for name, norms in self.grad_norms.items():
            late = np.asarray(norms[after:], dtype=float)
            late = late[np.isfinite(late)]
            out[name] = float(late.var(ddof=1)) if len(late) > 1 else math.nan
        return out


@dataclass
class Trainer:
    """Train ``model`` with ``loss_fn(model, *batch) -> scalar``, round after round.

    The lr follows ``optim``'s per-round schedule (the plateau scheduler watches the
    training loss, never a test metric), or ``lr_at(step)`` at each step. ``grad_groups``
    (name -> parameters) have their gradient norm logged each step too. ``columns``: the
    trainer's numbers each row starts with. ``stateful``: more objects for a checkpoint to
    carry. Keep the data on ``device`` so batches need no copy; each step synchronises
    with the device once, to read the loss and gradient norm the NaN guard needs. A
    checkpoint plan makes ``fit`` save every few rounds, resume from a checkpoint it finds,
    and delete it once the run ends.
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
    make_optimizer: Callable[[nn.Module, OptimConfig], torch.optim.Optimizer] = adam
    lr_at: Callable[[int], float] | None = None
    grad_groups: dict[str, list[nn.Parameter]] = field(default_factory=dict)
    precision: str = "float32"
    columns: Sequence[str] = ("epoch", "train_loss", "grad_norm_mean", "grad_norm_max", "lr")
    stateful: Sequence[Any] = ()

    def __post_init__(self):
        check_choice("precision", self.precision, PRECISIONS)
        if self.device is None:
            first = next(iter(self.model.parameters()), None)
            self.device = first.device if first is not None else torch.device("cpu")
        else:
            self.device = torch.device(resolve_device(str(self.device)))
            self.model.to(self.device)
        self.optimizer = self.make_optimizer(self.model, self.optim)
        self.scheduler = None  # built by fit, which knows the epoch count cosine needs
        self.plan = trainer_plan(
            self.checkpoint, self.checkpoint_path, self.checkpoint_every, False, "Trainer"
        )
        self.step_grad_norms: list[float] = []
        self.group_grad_norms: dict[str, list[float]] = {k: [] for k in self.grad_groups}
        self.rows: list[dict[str, Any]] = []
        self.epoch = self.steps = 0
        self.best = {"value": math.inf, "step": 0, "epoch": 0, "state": None}
        self._started: tuple[float, float] | None = None  # the clocks when the run began

    def to_device(self, batch: tuple) -> tuple:
        """The batch on the model's device (no copy when it is already there)."""
        return tuple(
            t.to(self.device, non_blocking=True) if isinstance(t, torch.Tensor) else t
            for t in batch
        )

    def train_step(self, batch: tuple) -> tuple[float, float]:
        """One step on ``batch``, skipped if its loss or gradient is not finite; logs its
        gradient norms; (loss, gradient norm before clipping)."""
        self.model.train()
        if self.lr_at is not None:
            for g in self.optimizer.param_groups:
                g["lr"] = self.lr_at(self.steps)
        with self.autocast():
            loss = self.loss_fn(self.model, *self.to_device(batch))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for name, params in self.grad_groups.items():
            grads = [p.grad.detach().float().norm() for p in params if p.grad is not None]
            self.group_grad_norms[name].append(float(torch.stack(grads).norm()) if grads else 0.0)
        max_norm = self.optim.clip if self.optim.clip is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        # The one host sync of a step: both numbers in one transfer.
        stats = torch.stack([loss.detach().double(), grad_norm.to(loss.device).double()])
        loss_value, norm_value = stats.tolist()
        self.step_grad_norms.append(norm_value)
        if math.isfinite(loss_value) and math.isfinite(norm_value):
            self.optimizer.step()
            self.steps += 1
        return loss_value, norm_value

    def autocast(self):
        if self.precision == "float32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def elapsed(self) -> tuple[float, float]:
        """Wall and CPU seconds since the run began (across resumes)."""
        wall, cpu = self._started
        return time.perf_counter() - wall, time.process_time() - cpu

    def train_round(
        self, batches: Iterable[tuple], time_budget_s: float | None
    ) -> tuple[list[float], list[float], str, str | None]:
        """A round's steps: (losses, gradient norms, status, reason). The round ends early
        at a step that diverges (not taken) or that spends the CPU-time budget."""
        losses, norms = [], []
        for batch in batches:
            loss, norm = self.train_step(batch)
            losses.append(loss)
            norms.append(norm)
            for cb in self.callbacks:
                cb.on_batch_end(self, loss, norm)
            if not (math.isfinite(loss) and math.isfinite(norm)):
                what = "loss" if not math.isfinite(loss) else "gradient norm"
                where = f"epoch {self.epoch}, step {len(self.step_grad_norms)}"
                return losses, norms, "diverged", f"non-finite {what} at {where}"
            if time_budget_s is not None and self.elapsed()[1] > time_budget_s:
                return losses, norms, "time_budget", f"CPU time over {time_budget_s:g} s"
        return losses, norms, "ok", None

    def round_row(self, losses: list[float], norms: list[float], evaluate) -> dict[str, Any]:
        """A round's row of history: the trainer's ``columns``, then ``evaluate(model)``'s."""
        lr, (wall, cpu) = self.optimizer.param_groups[0]["lr"], self.elapsed()
        numbers = dict(epoch=self.epoch, step=self.steps, lr=lr,
                       train_loss=sum(losses) / len(losses), grad_norm_mean=sum(norms) / len(norms),
                       grad_norm_max=max(norms), seconds=wall, cpu_seconds=cpu)  # fmt: skip
        return {k: numbers[k] for k in self.columns} | evaluate(self.model)

    # --- checkpoints -------------------------------------------------------------------

    def state(self, generator: torch.Generator, target: int) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "epoch": self.epoch,
            "steps": self.steps,
            "target": target,
            "rows": [{k: plain(v) for k, v in row.items()} for row in self.rows],
            "step_grad_norms": list(self.step_grad_norms),
            "group_grad_norms": {k: list(v) for k, v in self.group_grad_norms.items()},
            "best": self.best,
            "elapsed": self.elapsed(),
            "stateful": [s.state_dict() for s in self.stateful],
            "rng": rng_state(generator),
            "shapes": model_shapes(self.model),
        }

    def resume(self, generator: torch.Generator, target: int) -> int:
        """Load the plan's checkpoint if there is one; the round it resumes from."""
        keys = self.state(generator, target).keys()  # an older trainer's lacks some
        state = load_matching_checkpoint(self.plan.path, self.device, self.model, target, keys)
        if state is None:
            return 0
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.steps, self.rows = state["epoch"], state["steps"], state["rows"]
        self.step_grad_norms, self.best = state["step_grad_norms"], state["best"]
        self.group_grad_norms = state["group_grad_norms"]
        for s, saved in zip(self.stateful, state["stateful"], strict=True):
            s.load_state_dict(saved)
        wall, cpu = state["elapsed"]  # the clocks go on from where the checkpoint left them
        self._started = (time.perf_counter() - wall, time.process_time() - cpu)
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
        monitor: str | None = None,
        patience: int | None = None,
        time_budget_s: float | None = None,
    ) -> TrainResult:
        """Train ``epochs`` more rounds on ``batches(generator)``, logging ``evaluate(model)``.

        Stops early once ``stop_when(rows)`` holds, after ``patience`` rounds without a new
        lowest ``monitor`` (whose best state is restored at the end), or once the run's CPU
        time passes ``time_budget_s``.
        """
        if patience is not None and monitor is None:
            raise ValueError("patience counts rounds without a new best monitor value: name it")
        target = self.epoch + epochs
        self.run_name = desc  # callbacks say which run they draw (a live plot's title)
        if self.scheduler is None and self.lr_at is None:  # (None again for a constant lr)
            self.scheduler = make_scheduler(self.optimizer, self.optim, epochs)
        if self._started is None:
            self._started = (time.perf_counter(), time.process_time())
        resumed_from = self.resume(generator, target) if self.plan else 0
        status, reason = "ok", None
        bar = tqdm(
            total=target, initial=self.epoch, desc=desc, disable=not self.progress, leave=False
        )
        while self.epoch < target:
            self.epoch += 1
            losses, norms, status, reason = self.train_round(batches(generator), time_budget_s)
            if status == "diverged":
                break
            row = self.round_row(losses, norms, evaluate)
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                self.scheduler.step(sum(losses) / len(losses))
            elif self.scheduler is not None:
                self.scheduler.step()
            self.rows.append(row)
            if monitor is not None and row[monitor] < self.best["value"]:
                self.best = {"value": row[monitor], "step": self.steps, "epoch": self.epoch,
                             "state": copy.deepcopy(self.model.state_dict())}  # fmt: skip
            if stop_when is not None and stop_when(self.rows):
                status, reason = "early_stop", f"stop rule met at epoch {self.epoch}"
            elif patience is not None and self.epoch - self.best["epoch"] >= patience:
                status, reason = "early_stop", f"no better {monitor} in {patience} epochs"
            if self.plan and status == "ok" and self.epoch < target:
                if self.epoch % self.plan.every == 0:
                    self.plan.save(self.state(generator, target))
            for cb in self.callbacks:
                cb.on_epoch_end(self, row)
            bar.update(1)
            shown = ("train_loss", "test_acc", monitor)
            bar.set_postfix({k: f"{v:.3g}" for k, v in row.items() if k in shown})
            if status != "ok":
                break
        bar.close()
        if self.plan:
            self.plan.path.unlink(missing_ok=True)  # the run is over: its record says the rest
        if self.best["state"] is not None:
            self.model.load_state_dict(self.best["state"])
        wall, cpu = self.elapsed()
        return TrainResult(pd.DataFrame(self.rows), list(self.step_grad_norms), status, reason,
                           resumed_from, {k: list(v) for k, v in self.group_grad_norms.items()},
                           self.steps, self.best["step"], wall, cpu)  # fmt: skip
