"""The one trainer, in every study: an optimizer, an lr schedule, clipping, callbacks, for a
plain model or for S seeds of one stacked in one module (each trained as if alone).

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
import ctypes
import functools
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from structattn_lite.config import (  # Callback: re-exported, the trainers' hook
    PRECISIONS,
    Callback,
    check_choice,
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
from structattn_lite.training.options import (  # noqa: F401 (re-exported: their home)
    SCHEDULES,
    OptimConfig,
    TrainResult,
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


# glibc's mallopt parameters, and what they are set to: the largest block served from the
# heap rather than its own mapping, and how much free heap stays with the process
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEEP_FREED = {_M_MMAP_THRESHOLD: 1 << 30, _M_TRIM_THRESHOLD: (1 << 31) - 1}


@functools.cache
def keep_freed_memory() -> bool:
    """Have glibc keep the memory a training step frees, for the next step to reuse. By
    default glibc gives each block above its mmap threshold (128 KiB, rising to at most
    32 MiB) a mapping of its own and returns it to the OS when freed, so each step of a
    stacked model at long T faulted its activations in afresh: at S = 10, T = 256, about
    1.8 M page faults and 3 s of system time a step beside 2.7 s of arithmetic. The
    numbers a step computes do not change. True when set (glibc), False where there is no
    such allocator to tell (macOS, Windows, musl: a no-op)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return all(libc.mallopt(param, value) == 1 for param, value in KEEP_FREED.items())
    except (OSError, AttributeError):  # not glibc: macOS, Windows, musl
        return False


def run_bar(**kwargs) -> tqdm:
    """A run's bar of epochs, gone once the run ends (``leave=False``).

    In a notebook the bar is a widget, and tqdm closes a finished one. JupyterLab then drops
    the closed model but keeps its view in the cell's output, so the saved notebook holds a
    view without a model: reopened, it shows "Loading widget..." for good and the console
    logs "widget model not found" (notebook 03's training cell, once per run). The finished
    bar is hidden instead (``display: none``), its model kept, so it is saved with the rest.
    """
    bar = tqdm(leave=False, **kwargs)
    box = getattr(bar, "container", None)  # only a notebook's (widget) bar has one
    if box is not None:

        def hide():
            box.layout.display = "none"

        box.close = hide
    return bar


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


# --- a stacked model's step: per-seed gradient norms and Adam ---------------------------


def per_seed_grad_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """clip_grad_norm_'s total 2-norm, once per seed (leading axis): [S]."""
    norms = [torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms), dim=0)


def _per_seed(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.view(-1, *([1] * (like.dim() - 1)))


def unit_adam(params: Sequence[torch.Tensor], weight_decay: float) -> torch.optim.Adam:
    """torch's Adam at rate 1: its step is each element's unit step, which ``step_seeds``
    scales by each seed's own rate (Adam's rate only scales its step). ``fused``: one
    kernel for the whole update, as fast as a hand-written stacked Adam."""
    return torch.optim.Adam(params, lr=1.0, weight_decay=weight_decay, fused=True)


@torch.no_grad()
def step_seeds(adam: torch.optim.Adam, lrs: torch.Tensor, update: torch.Tensor) -> None:
    """One Adam step of every seed at its own rate ``lrs`` [S], from the parameters'
    ``.grad``. A seed where ``update`` is False keeps its parameters: its gradient is
    zeroed (a diverged seed's NaN stays out of the moments) and its rate is 0."""
    params = adam.param_groups[0]["params"]
    if not bool(update.all()):
        for p in params:
            p.grad = torch.where(_per_seed(update, p.grad), p.grad, 0.0)
    before = [p.clone() for p in params]
    adam.step()
    rate = torch.where(update, lrs, 0.0).to(params[0].dtype)
    torch._foreach_lerp_(before, params, [_per_seed(rate, p).expand_as(p) for p in params])
    torch._foreach_copy_(params, before)


@dataclass
class Trainer:
    """Train ``model`` with ``loss_fn(model, *batch)``, round after round, S seeds at once.

    A plain model is one seed (S = 1): ``loss_fn`` returns a scalar, ``batches(generator)``
    gives a round's batches, ``evaluate(model)`` a metrics dict, and ``fit`` one
    ``TrainResult``. A stacked model (``model.n_seeds`` = S, its parameters with a leading
    seed axis) gets one generator per seed: ``loss_fn`` returns the per-seed losses [S],
    whose *sum* gives seed s's parameters exactly seed s's gradient, ``evaluate`` one dict
    per seed, and ``fit`` one result per seed. Either way each seed keeps its own batch
    order, lr schedule, clipping, NaN/Inf guard (a diverged seed stops updating, the
    others go on), stop rule, history and callbacks' calls (``run_name`` names the seed).

    The plain step is ``make_optimizer``'s optimizer with ``clip_grad_norm_``; the lr
    follows ``optim``'s per-round schedule (the plateau scheduler watches the training
    loss, never a test metric), or ``lr_at(step)`` at each step. ``grad_groups`` (name ->
    parameters) have their gradient norm logged each step too. The stacked step clips each
    seed alone and takes one fused Adam step at each seed's rate (``step_seeds``).
    ``columns``: the trainer's numbers each row starts with. ``stateful``: more objects
    for a checkpoint to carry. Keep the data on ``device`` so batches need no copy; each
    step synchronises with the device once, to read the losses and gradient norms the
    NaN guard needs. A checkpoint plan makes ``fit`` save every few rounds, resume from a
    checkpoint it finds, and delete it once the run ends.
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
        keep_freed_memory()  # once per process: a step reuses what the last one freed
        if self.device is None:
            first = next(iter(self.model.parameters()), None)
            self.device = first.device if first is not None else torch.device("cpu")
        else:
            self.device = torch.device(resolve_device(str(self.device)))
            self.model.to(self.device)
        self.stacked = hasattr(self.model, "n_seeds")
        self.n_seeds = self.model.n_seeds if self.stacked else 1
        if self.stacked:
            plain_only = self.make_optimizer is not adam or self.lr_at or self.grad_groups
            if plain_only or self.precision != "float32":
                raise ValueError("a stacked model trains in float32 on the per-seed Adam: "
                                 "make_optimizer, lr_at, grad_groups and precision are a plain model's")  # fmt: skip
            self.params = [p for p in self.model.parameters() if p.requires_grad]
            self.optimizer = unit_adam(self.params, self.optim.weight_decay)
            self.lrs = torch.full((self.n_seeds,), float(self.optim.lr), dtype=torch.float64,
                                  device=self.device)  # fmt: skip
        else:
            self.optimizer = self.make_optimizer(self.model, self.optim)
        kind = (True if self.n_seeds > 1 else None) if self.stacked else False  # None: either
        self.plan = trainer_plan(self.checkpoint, self.checkpoint_path, self.checkpoint_every, kind)
        self.schedules: list[tuple] = []  # (optimizer whose lr is the seed's, scheduler)
        self.group_grad_norms: dict[str, list[float]] = {k: [] for k in self.grad_groups}
        self.rows: list[list[dict[str, Any]]] = [[] for _ in range(self.n_seeds)]
        self.step_norms: list[list[float]] = [[] for _ in range(self.n_seeds)]
        self.epoch = self.steps = 0
        self._restart()
        self.best = {"value": math.inf, "step": 0, "epoch": 0, "state": None}
        self._started: tuple[float, float] | None = None  # the clocks when the run began

    def train_step(self, batch: tuple) -> tuple[Any, Any]:
        """One step on ``batch``; (loss, gradient norm before clipping), per seed (lists)
        for a stacked model. A seed whose loss or gradient is not finite is not stepped."""
        if self.stacked:
            return self._stacked_step(batch)
        self.model.train()
        if self.lr_at is not None:
            for g in self.optimizer.param_groups:
                g["lr"] = self.lr_at(self.steps)
        batch = (t.to(self.device, non_blocking=True) if torch.is_tensor(t) else t for t in batch)
        with self.autocast():
            loss = self.loss_fn(self.model, *batch)
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
        if math.isfinite(loss_value) and math.isfinite(norm_value):
            self.optimizer.step()
            self.steps += 1
        return loss_value, norm_value

    def _stacked_step(self, batch: tuple) -> tuple[list[float], list[float]]:
        self.model.train()
        losses = self.loss_fn(self.model, *batch)
        for p in self.params:
            p.grad = None
        losses.sum().backward()
        grads = [p.grad for p in self.params]
        norms = per_seed_grad_norm(grads)
        max_norm = self.optim.clip if self.optim.clip is not None else math.inf
        coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, [_per_seed(coef, g) for g in grads])
        stats = torch.stack([losses.detach().double(), norms.detach().double()]).cpu()
        update = (self.active & stats.isfinite().all(0)).to(norms.device)
        if bool(update.any()):
            step_seeds(self.optimizer, self.lrs, update)
            self.steps += 1
        return stats.tolist()  # [losses, norms]

    def autocast(self):
        if self.precision == "float32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def elapsed(self) -> tuple[float, float]:
        """Wall and CPU seconds since the run began (across resumes)."""
        wall, cpu = self._started
        return time.perf_counter() - wall, time.process_time() - cpu

    def _schedule(self, epochs: int) -> tuple:
        """A seed's (optimizer whose lr it reads, scheduler): the plain model's own; for a
        stacked model, a dummy optimizer per seed whose lr ``step_seeds`` is given."""
        if not self.stacked:
            scheduler = None if self.lr_at else make_scheduler(self.optimizer, self.optim, epochs)
            return self.optimizer, scheduler
        dummy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=self.optim.lr)
        scheduler = make_scheduler(dummy, self.optim, epochs)
        dummy.step()  # a no-op (no gradient) that tells the scheduler the optimizer steps
        return dummy, scheduler

    def _restart(self) -> None:
        """Every seed active again: a ``fit`` trains each seed on from where it stopped."""
        self.active = torch.ones(self.n_seeds, dtype=torch.bool)
        self.status, self.reason = ["ok"] * self.n_seeds, [None] * self.n_seeds

    def _stop(self, seed: int, status: str, reason: str) -> None:
        self.status[seed], self.reason[seed] = status, reason
        self.active[seed] = False

    def _callback(self, hook: str, seed: int, *args) -> None:
        self.run_name = self.names[seed]
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    # --- checkpoints -------------------------------------------------------------------

    def state(self, generator, target: int) -> dict[str, Any]:
        """Everything the next rounds depend on, for every seed."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedules": [
                (
                    None if lrs is self.optimizer else lrs.state_dict(),
                    None if sched is None else sched.state_dict(),
                )
                for lrs, sched in self.schedules
            ],  # fmt: skip
            "active": self.active.tolist(),
            "status": list(self.status),
            "reason": list(self.reason),
            "epoch": self.epoch,
            "steps": self.steps,
            "target": target,
            "rows": [[{k: plain(v) for k, v in row.items()} for row in r] for r in self.rows],
            "step_norms": [list(n) for n in self.step_norms],
            "group_grad_norms": {k: list(v) for k, v in self.group_grad_norms.items()},
            "best": self.best,
            "elapsed": self.elapsed(),
            "stateful": [s.state_dict() for s in self.stateful],
            "rng": rng_state(generator),
            "shapes": model_shapes(self.model),
        }

    def resume(self, generator, target: int) -> int:
        """Load the plan's checkpoint if there is one; the round it resumes from. One of
        another format (an older trainer's) lacks some keys: it is ignored, with a warning."""
        keys = self.state(generator, target).keys()
        state = load_matching_checkpoint(self.plan.path, self.device, self.model, target, keys)
        if state is None:
            return 0
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for (lrs, sched), (lrs_state, sched_state) in zip(
            self.schedules, state["schedules"], strict=True
        ):
            if lrs_state is not None:
                lrs.load_state_dict(lrs_state)
            if sched is not None:
                sched.load_state_dict(sched_state)
        if self.stacked:  # each seed's rate is its schedule's
            self.lrs.copy_(torch.tensor([lrs.param_groups[0]["lr"] for lrs, _ in self.schedules]))
        self.active = torch.tensor(state["active"], dtype=torch.bool)
        self.status, self.reason = state["status"], state["reason"]
        self.epoch, self.steps, self.rows = state["epoch"], state["steps"], state["rows"]
        self.step_norms, self.best = state["step_norms"], state["best"]
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
        batches: Callable[[Any], Iterable[tuple]],
        evaluate: Callable[[nn.Module], Any],
        generator: torch.Generator | Sequence[torch.Generator],
        stop_when: Callable[[list[dict[str, Any]]], bool] | None = None,
        desc: str | Sequence[str] = "train",
        monitor: str | None = None,
        patience: int | None = None,
        time_budget_s: float | None = None,
    ) -> TrainResult | list[TrainResult]:
        """Train ``epochs`` more rounds on ``batches(generator)``, logging ``evaluate(model)``;
        a stacked model takes one generator per seed and ``desc`` per seed (run names).

        A seed stops early once ``stop_when(its rows)`` holds; a plain model also after
        ``patience`` rounds without a new lowest ``monitor`` (whose best state is restored
        at the end), or once the run's CPU time passes ``time_budget_s``.
        """
        if patience is not None and monitor is None:
            raise ValueError("patience counts rounds without a new best monitor value: name it")
        if self.stacked and (monitor or time_budget_s is not None):
            raise ValueError("monitor, patience and time_budget_s stop a plain model only")
        k, target = self.n_seeds, self.epoch + epochs
        if isinstance(desc, str):
            desc = [desc] if k == 1 else [f"{desc} seed {i}" for i in range(k)]
        self.names = list(desc)
        self.run_name = self.names[0]  # callbacks say which run they draw (a live plot's title)
        if not self.schedules:
            self.schedules = [self._schedule(epochs) for _ in range(k)]
        self._restart()
        if self._started is None:
            self._started = (time.perf_counter(), time.process_time())
        resumed_from = self.resume(generator, target) if self.plan else 0
        label = self.names[0] if k == 1 else f"{self.names[0]} +{k - 1} seeds"
        bar = run_bar(total=target, initial=self.epoch, desc=label, disable=not self.progress)
        while self.epoch < target and self.active.any():
            self.epoch += 1
            rules = (stop_when, monitor, patience, time_budget_s)
            logged = self._epoch(batches, evaluate, generator, *rules)
            plan = self.plan
            if plan and self.active.any() and self.epoch < target and self.epoch % plan.every == 0:
                plan.save(self.state(generator, target))
            for i in logged:
                self._callback("on_epoch_end", i, self.rows[i][-1])
            bar.update(1)
            shown = [self.rows[i][-1] for i in logged]
            bar.set_postfix({c: f"{sum(r[c] for r in shown) / len(shown):.3g}"
                             for c in ("train_loss", "test_acc", monitor) if shown and c in shown[0]})  # fmt: skip
        bar.close()
        if self.plan:
            self.plan.path.unlink(missing_ok=True)  # the run is over: its record says the rest
        if self.best["state"] is not None:
            self.model.load_state_dict(self.best["state"])
        wall, cpu = self.elapsed()
        results = [
            TrainResult(
                pd.DataFrame(self.rows[i]),
                list(self.step_norms[i]),
                self.status[i],
                self.reason[i],
                resumed_from,
                {k: list(v) for k, v in self.group_grad_norms.items()},
                self.steps,
                self.best["step"],
                wall,
                cpu,
            )  # fmt: skip
            for i in range(k)
        ]
        return results if self.stacked else results[0]

    def _epoch(self, batches, evaluate, generator, stop_when, monitor, patience, budget):
        """One round of every seed still active: its steps, then its row, schedule and stop
        rules; the seeds that logged a row. A seed's round ends at a step that diverges
        (not taken, no row); every seed's at the step that spends the CPU-time budget."""
        k, epoch, over = self.n_seeds, self.epoch, None
        losses: list[list[float]] = [[] for _ in range(k)]
        norms: list[list[float]] = [[] for _ in range(k)]
        for batch in batches(generator):
            was_active = self.active.tolist()
            loss, norm = self.train_step(batch)
            if not self.stacked:
                loss, norm = [loss], [norm]
            for i in (i for i in range(k) if was_active[i]):
                losses[i].append(loss[i])
                norms[i].append(norm[i])
                self.step_norms[i].append(norm[i])
                self._callback("on_batch_end", i, loss[i], norm[i])
                if not (math.isfinite(loss[i]) and math.isfinite(norm[i])):
                    what = "loss" if not math.isfinite(loss[i]) else "gradient norm"
                    where = f"epoch {epoch}, step {len(self.step_norms[i])}"
                    self._stop(i, "diverged", f"non-finite {what} at {where}")
            if not self.active.any():
                return []
            if budget is not None and self.elapsed()[1] > budget:
                over = f"CPU time over {budget:g} s"
                break
        wall, cpu = self.elapsed()
        metrics = evaluate(self.model)
        logged = [i for i in range(k) if self.active[i]]
        for i in logged:
            lrs, scheduler = self.schedules[i]
            train_loss = sum(losses[i]) / len(losses[i])
            numbers = dict(epoch=epoch, step=self.steps, lr=lrs.param_groups[0]["lr"],
                           train_loss=train_loss, grad_norm_mean=sum(norms[i]) / len(norms[i]),
                           grad_norm_max=max(norms[i]), seconds=wall, cpu_seconds=cpu)  # fmt: skip
            row = {c: numbers[c] for c in self.columns} | (metrics[i] if self.stacked else metrics)
            if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                scheduler.step(train_loss)
            elif scheduler is not None:
                scheduler.step()
            if self.stacked:
                self.lrs[i] = lrs.param_groups[0]["lr"]
            self.rows[i].append(row)
            if monitor is not None and row[monitor] < self.best["value"]:
                self.best = {"value": row[monitor], "step": self.steps, "epoch": epoch,
                             "state": copy.deepcopy(self.model.state_dict())}  # fmt: skip
            if stop_when is not None and stop_when(self.rows[i]):
                self._stop(i, "early_stop", f"stop rule met at epoch {epoch}")
            elif patience is not None and epoch - self.best["epoch"] >= patience:
                self._stop(i, "early_stop", f"no better {monitor} in {patience} epochs")
            elif over is not None:
                self._stop(i, "time_budget", over)
        return logged
