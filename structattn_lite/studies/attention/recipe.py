"""The attention study's training recipe: AdamW, warmup then cosine decay, early stopping.

``train(model, loss_fn, batch, evaluate, recipe)`` trains one model from a step budget
and returns an ``Outcome``: the learning curve at every evaluation, per-step gradient
norms per layer and for the metric parameters, the fast-path failure counts, and the
best model (by the validation number ``evaluate`` returns, lower is better) restored
into ``model``. It reads no data itself: the caller hands it a training batch function
and a validation function, so the test split cannot leak into any choice made here.

Given a checkpoint plan (``checkpoint=``, a ``training.checkpoint.CheckpointPlan``, as
a sweep passes it through ``experiment.run``), ``train`` saves its whole state every
``every`` evaluations and resumes from a checkpoint it finds there, ending with the
history of an uninterrupted run.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.models.attention_base import FastPathStats
from structattn_lite.training.checkpoint import (
    CheckpointPlan,
    load_matching_checkpoint,
    model_shapes,
    rng_state,
    set_rng_state,
)

PRECISIONS = ("float32", "bfloat16")


@dataclass(frozen=True)
class Recipe:
    """One training schedule. ``lr`` is the peak rate reached after ``warmup_steps``;
    the rate then follows a half cosine down to ``min_lr_ratio * lr`` at ``max_steps``.

    ``patience``: evaluations without a new best before stopping (None: never);
    ``time_budget_s``: stop after this many seconds of the process's CPU time (one
    intra-op thread: core-seconds, which a loaded machine does not inflate; None: no limit);
    ``precision``: "bfloat16" runs forward and loss under autocast;
    ``check_every``: count fast-path failures on every k-th step (0: never).
    """

    lr: float = 3e-3
    warmup_steps: int = 100
    max_steps: int = 3000
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.1
    beta2: float = 0.99
    clip: float = 1.0
    eval_every: int = 250
    patience: int | None = None
    time_budget_s: float | None = None
    precision: str = "float32"
    check_every: int = 50

    def __post_init__(self):
        check_number("lr", self.lr, minimum=0.0, strict=True)
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_int("max_steps", self.max_steps, minimum=1)
        check_number("min_lr_ratio", self.min_lr_ratio, minimum=0.0)
        if self.min_lr_ratio > 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        check_number("weight_decay", self.weight_decay, minimum=0.0)
        check_number("beta2", self.beta2, minimum=0.0, strict=True)
        if self.beta2 >= 1:
            raise ValueError(f"beta2 must be in (0, 1), got {self.beta2}")
        check_number("clip", self.clip, minimum=0.0, strict=True)
        check_int("eval_every", self.eval_every, minimum=1)
        if self.patience is not None:
            check_int("patience", self.patience, minimum=1)
        if self.time_budget_s is not None:
            check_number("time_budget_s", self.time_budget_s, minimum=0.0, strict=True)
        check_choice("precision", self.precision, PRECISIONS)
        check_int("check_every", self.check_every, minimum=0)


def lr_at(step: int, recipe: Recipe) -> float:
    """Learning rate of step ``step`` (0-based): linear warmup, then half cosine."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    span = max(recipe.max_steps - recipe.warmup_steps, 1)
    progress = min((step - recipe.warmup_steps) / span, 1.0)
    floor = recipe.min_lr_ratio * recipe.lr
    return floor + (recipe.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on the matrices of linear layers only (not on embeddings, norms,
    biases, positions or the metric parameters)."""
    decay = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    if hasattr(model, "tok"):  # a weight tied to the embedding is an embedding
        decay.discard(id(model.tok.weight))
    params = list(dict.fromkeys(model.parameters()))
    return [
        {"params": [p for p in params if id(p) in decay], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) not in decay], "weight_decay": 0.0},
    ]


def grad_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Parameter groups whose gradient norm is logged each step: each layer, and the
    metric parameters of all layers together (empty for dot-product attention)."""
    groups = {f"layer{i}": list(b.parameters()) for i, b in enumerate(model.blocks)}
    groups["metric"] = [p for a in model.attention_modules() for p in a.metric_parameters()]
    return {k: v for k, v in groups.items() if v}


@dataclass
class Outcome:
    history: pd.DataFrame  # one row per evaluation
    grad_norms: dict[str, list[float]]  # per step, before clipping; "total" and per group
    stats: dict[str, float]  # fast-path failure counts over the whole run
    status: str = "ok"  # "ok" or "diverged"
    stop: str = "max_steps"  # "max_steps", "early_stop", "time_budget", "diverged"
    best_step: int = 0
    best_value: float = math.inf
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    steps: int = 0
    resumed_from: int = 0  # the step a checkpoint resumed this run from (0: from scratch)
    extra: dict[str, Any] = field(default_factory=dict)

    def grad_norm_variance(self, after: int) -> dict[str, float]:
        """Variance of each logged gradient norm over steps >= ``after`` (post warmup)."""
        out = {}
        for name, norms in self.grad_norms.items():
            late = np.asarray(norms[after:], dtype=float)
            late = late[np.isfinite(late)]
            out[name] = float(late.var(ddof=1)) if len(late) > 1 else math.nan
        return out


def _autocast(precision: str, device: torch.device):
    if precision == "float32":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16)


def _state(model, optimizer, out: Outcome, rows, best_state, since_best, generator, target):
    """Everything the remaining steps depend on (taken right after an evaluation)."""
    return {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "steps": out.steps, "target": target, "rows": rows, "grad_norms": out.grad_norms,
        "best": (best_state, out.best_value, out.best_step, since_best),
        "stats": [a.stats.as_dict() for a in model.attention_modules()],
        "elapsed": (out.seconds, out.cpu_seconds),  # wall and CPU seconds so far
        "rng": rng_state(generator), "shapes": model_shapes(model),
    }  # fmt: skip


def _resume(state, model, optimizer, out: Outcome, generator):
    """Load a checkpoint's state; (rows, best_state, since_best)."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    for a, saved in zip(model.attention_modules(), state["stats"], strict=True):
        a.stats = FastPathStats(**saved)
    best_state, out.best_value, out.best_step, since_best = state["best"]
    out.steps = out.resumed_from = state["steps"]
    out.grad_norms.update(state["grad_norms"])
    set_rng_state(state["rng"], generator)
    return state["rows"], best_state, since_best


def train(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    batch: Callable[[int], Any],
    evaluate: Callable[[nn.Module], dict[str, float]],
    recipe: Recipe,
    monitor: str = "val_loss",
    callbacks: Sequence[Any] = (),
    progress: bool = False,
    checkpoint: CheckpointPlan | None = None,
) -> Outcome:
    """Train ``model`` in place; the best state by ``evaluate(model)[monitor]`` is restored.

    ``batch(step)`` gives step's training batch (it owns its generator, ``batch.generator``,
    so identical seeds give identical runs); ``loss_fn(model, batch)`` returns a scalar in
    nats.
    Callbacks get ``on_batch_end(self, loss, grad_norm)`` and ``on_epoch_end(self, row)``
    (one "epoch" per evaluation, as the study-wide live plot expects).
    ``checkpoint`` (not a ``stacked`` plan): save every ``checkpoint.every`` evaluations.
    """
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(
        param_groups(model, recipe.weight_decay), lr=recipe.lr, betas=(0.9, recipe.beta2)
    )
    groups = grad_groups(model)
    norms: dict[str, list[float]] = {"total": [], **{k: [] for k in groups}}
    model.check_every(recipe.check_every)
    model.reset_stats()
    rows, best_state, since_best = [], None, 0
    out = Outcome(pd.DataFrame(), norms, {})
    losses: list[float] = []
    plan = checkpoint
    if plan is not None and plan.stacked:
        raise ValueError("train takes a checkpoint plan for a single run, not a stacked one")
    if plan is not None and not isinstance(getattr(batch, "generator", None), torch.Generator):
        raise ValueError("checkpointing needs batch.generator, the generator batch(step) draws on")
    saved = plan and load_matching_checkpoint(plan.path, device, model, recipe.max_steps)
    if saved:
        rows, best_state, since_best = _resume(saved, model, optimizer, out, batch.generator)
    start, cpu_start = time.perf_counter(), time.process_time()
    if saved:  # the clocks go on from where the checkpoint left them
        start, cpu_start = start - saved["elapsed"][0], cpu_start - saved["elapsed"][1]
    bar = tqdm(range(out.steps, recipe.max_steps), desc="train", disable=not progress,
               leave=False, initial=out.steps, total=recipe.max_steps)  # fmt: skip
    for step in bar:
        for g in optimizer.param_groups:
            g["lr"] = lr_at(step, recipe)
        model.train()
        with _autocast(recipe.precision, device):
            loss = loss_fn(model, batch(step))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for name, params in groups.items():
            grads = [p.grad.detach().float().norm() for p in params if p.grad is not None]
            norms[name].append(float(torch.stack(grads).norm()) if grads else 0.0)
        total = float(torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip))
        norms["total"].append(total)
        value = float(loss.detach())
        for cb in callbacks:
            cb.on_batch_end(out, value, total)
        if not (math.isfinite(value) and math.isfinite(total)):
            out.status = out.stop = "diverged"
            out.extra["reason"] = f"non-finite loss or gradient at step {step + 1}"
            break
        optimizer.step()
        losses.append(value)
        out.steps = step + 1
        over_time = recipe.time_budget_s is not None and (
            time.process_time() - cpu_start > recipe.time_budget_s
        )
        if out.steps % recipe.eval_every and out.steps < recipe.max_steps and not over_time:
            continue
        row = {
            "epoch": len(rows) + 1,
            "step": out.steps,
            "lr": lr_at(step, recipe),
            "train_loss": sum(losses) / len(losses),
            "seconds": time.perf_counter() - start,
            "cpu_seconds": time.process_time() - cpu_start,
            **evaluate(model),
        }
        losses = []
        rows.append(row)
        for cb in callbacks:
            cb.on_epoch_end(out, row)
        bar.set_postfix({monitor: f"{row[monitor]:.3f}"})
        since_best += 1
        if row[monitor] < out.best_value:
            out.best_value, out.best_step, since_best = row[monitor], out.steps, 0
            best_state = copy.deepcopy(model.state_dict())
        elif recipe.patience and since_best >= recipe.patience:
            out.stop = "early_stop"
            break
        if over_time:
            out.stop = "time_budget"
            break
        if plan and len(rows) % plan.every == 0 and out.steps < recipe.max_steps:
            out.seconds = time.perf_counter() - start
            out.cpu_seconds = time.process_time() - cpu_start
            state = _state(model, optimizer, out, rows, best_state, since_best,
                           batch.generator, recipe.max_steps)  # fmt: skip
            plan.save(state)
    if plan:
        plan.path.unlink(missing_ok=True)  # the run is over: its record says the rest
    out.seconds = time.perf_counter() - start
    out.cpu_seconds = time.process_time() - cpu_start
    if best_state is not None:
        model.load_state_dict(best_state)
    out.history = pd.DataFrame(rows)
    out.stats = model.fast_path_stats()
    model.check_every(0)
    return out
