"""A trainer for stacked models: S seeds in one module, each trained as ``Trainer`` would.

Each seed keeps its own batch order, Adam state, lr schedule, clipping, NaN/Inf guard
(a diverged seed stops updating, the others go on), stop rule and callbacks' calls. The
loss is the *sum* of the per-seed mean losses, so seed s's parameters get exactly seed s's
gradient; Adam is elementwise, so one ``torch.optim.Adam`` over the stacked tensors is S
Adams (``step_seeds`` gives each seed its own rate). Every CSP run trains here, one seed included.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from structattn_lite.training.checkpoint import (
    CheckpointPlan,
    load_matching_checkpoint,
    model_shapes,
    plain,
    rng_state,
    set_rng_state,
    trainer_plan,
)
from structattn_lite.training.trainer import OptimConfig, TrainResult

# --- per-seed gradient norms and Adam ------------------------------------------


def per_seed_grad_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """clip_grad_norm_'s total 2-norm, once per seed (leading axis): [S]."""
    norms = [torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms), dim=0)


def _per_seed(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.view(-1, *([1] * (like.dim() - 1)))


def unit_adam(params: Sequence[torch.Tensor], weight_decay: float) -> torch.optim.Adam:
    """torch's Adam at rate 1: its step is each element's unit step, which ``step_seeds``
    scales by each seed's own rate (Adam's rate only scales its step). ``fused``: one
    kernel for the whole update, which keeps the stacked step as fast as it was with a
    hand-written Adam."""
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


# --- the trainer -----------------------------------------------------------------------


def _scheduler(optim: OptimConfig, epochs: int):
    """One seed's lr schedule: the Trainer's own, on a dummy optimizer whose lr we read."""
    from structattn_lite.training.trainer import make_scheduler

    dummy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=optim.lr)
    scheduler = make_scheduler(dummy, optim, epochs)
    dummy.step()  # a no-op (no gradient) that tells the scheduler the optimizer steps
    return dummy, scheduler


class StackedTrainer:
    """``Trainer`` for a stacked model: ``loss_fn(model, x, y)`` returns the per-seed losses
    [S], ``batches(generators)`` an epoch's stacked batches from one generator per seed,
    ``evaluate(model)`` one metrics dict per seed; ``fit`` one ``TrainResult`` per seed.
    Callbacks are called as a ``Trainer`` calls them, once per seed still training, with
    ``run_name`` naming that seed. A stack of several seeds takes only a checkpoint plan
    of seeds trained together; a stack of one takes either kind.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable,
        optim: OptimConfig | None = None,
        checkpoint_path: str | os.PathLike | None = None,
        checkpoint_every: int = 1,
        checkpoint: CheckpointPlan | None = None,
        callbacks: Sequence[Any] = (),
        progress: bool = False,
    ):
        self.model, self.loss_fn = model, loss_fn
        self.optim = optim or OptimConfig()
        self.callbacks, self.progress = callbacks, progress
        self.n_seeds = model.n_seeds
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.adam = unit_adam(self.params, self.optim.weight_decay)
        device = self.params[0].device
        self.lrs = torch.full(
            (self.n_seeds,), float(self.optim.lr), dtype=torch.float64, device=device
        )
        self.active = torch.ones(self.n_seeds, dtype=torch.bool)
        kind = True if self.n_seeds > 1 else None  # None: either kind
        self.plan = trainer_plan(
            checkpoint, checkpoint_path, checkpoint_every, kind, "StackedTrainer"
        )
        self.epoch = 0
        self.rows: list[list[dict]] = [[] for _ in range(self.n_seeds)]
        self.step_norms: list[list[float]] = [[] for _ in range(self.n_seeds)]
        self.status: list[str] = ["ok"] * self.n_seeds
        self.reason: list[str | None] = [None] * self.n_seeds
        self.schedules: list[tuple] = []  # (dummy optimizer, scheduler) per seed, from fit
        self.names = [f"seed {i}" for i in range(self.n_seeds)]  # callbacks' run_name, from fit

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[list[float], list[float]]:
        self.model.train()
        losses = self.loss_fn(self.model, x, y)
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
            step_seeds(self.adam, self.lrs, update)
        loss_values, norm_values = stats.tolist()
        return loss_values, norm_values

    # --- checkpoints -------------------------------------------------------------------

    def state(self, generators: list[torch.Generator], target: int) -> dict[str, Any]:
        """Everything the next epochs depend on, for every seed."""
        return {
            "model": self.model.state_dict(),
            "adam": self.adam.state_dict(),
            "lrs": self.lrs,
            "schedules": [
                (dummy.state_dict(), None if sched is None else sched.state_dict())
                for dummy, sched in self.schedules
            ],
            "active": self.active.tolist(),
            "status": list(self.status),
            "reason": list(self.reason),
            "epoch": self.epoch,
            "target": target,
            "rows": [[{k: plain(v) for k, v in row.items()} for row in r] for r in self.rows],
            "step_norms": [list(n) for n in self.step_norms],
            "rng": rng_state(generators),
            "shapes": model_shapes(self.model),
        }

    def resume(self, generators: list[torch.Generator], target: int) -> int:
        """Load the plan's checkpoint if there is one; the epoch it resumes from."""
        state = load_matching_checkpoint(self.plan.path, self.params[0].device, self.model, target)
        if state is None:
            return 0
        self.model.load_state_dict(state["model"])
        self.adam.load_state_dict(state["adam"])
        self.lrs.copy_(state["lrs"])
        for (dummy, sched), (dummy_state, sched_state) in zip(
            self.schedules, state["schedules"], strict=True
        ):
            dummy.load_state_dict(dummy_state)
            if sched is not None:
                sched.load_state_dict(sched_state)
        self.active = torch.tensor(state["active"], dtype=torch.bool)
        self.status, self.reason = state["status"], state["reason"]
        self.epoch, self.rows, self.step_norms = state["epoch"], state["rows"], state["step_norms"]
        set_rng_state(state["rng"], generators)
        return self.epoch

    # --- training ----------------------------------------------------------------------

    def fit(
        self,
        epochs: int,
        batches: Callable[[list[torch.Generator]], Iterable[tuple[torch.Tensor, torch.Tensor]]],
        evaluate: Callable[[nn.Module], list[dict[str, float]]],
        generators: list[torch.Generator],
        stop_when: Callable[[list[dict[str, Any]]], bool] | None = None,
        names: Sequence[str] | None = None,
    ) -> list[TrainResult]:
        """Train every seed ``epochs`` rounds (fewer once it stops); ``names``: each seed's
        run name (the progress bar's and callbacks')."""
        k = self.n_seeds
        self.names = list(names) if names is not None else self.names
        self.schedules = [_scheduler(self.optim, epochs) for _ in range(k)]
        resumed_from = self.resume(generators, epochs) if self.plan else 0
        desc = self.names[0] if k == 1 else f"{self.names[0]} +{k - 1} seeds"
        bar = tqdm(
            total=epochs, initial=self.epoch, desc=desc, disable=not self.progress, leave=False
        )
        while self.epoch < epochs and self.active.any():
            self.epoch += 1
            logged = self._epoch(batches, evaluate, generators, stop_when)
            plan = self.plan
            if plan and self.active.any() and self.epoch < epochs and self.epoch % plan.every == 0:
                plan.save(self.state(generators, epochs))
            for i in logged:
                self._callback("on_epoch_end", i, self.rows[i][-1])
            bar.update(1)
            shown = [self.rows[i][-1] for i in logged]
            bar.set_postfix({c: f"{sum(r[c] for r in shown) / len(shown):.3g}"
                             for c in ("train_loss", "test_acc") if shown and c in shown[0]})  # fmt: skip
        bar.close()
        if self.plan:
            self.plan.path.unlink(missing_ok=True)  # the run is over: its records say the rest
        return [
            TrainResult(
                pd.DataFrame(self.rows[i]),
                list(self.step_norms[i]),
                self.status[i],
                self.reason[i],
                resumed_from,
            )
            for i in range(k)
        ]

    def _callback(self, hook: str, seed: int, *args) -> None:
        self.run_name = self.names[seed]
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def _epoch(self, batches, evaluate, generators, stop_when) -> list[int]:
        """One epoch of every seed still active: its steps, then its row and schedule; the
        seeds that logged a row."""
        k, epoch = self.n_seeds, self.epoch
        losses: list[list[float]] = [[] for _ in range(k)]
        norms: list[list[float]] = [[] for _ in range(k)]
        for x, y in batches(generators):
            was_active = self.active.tolist()
            loss, norm = self.train_step(x, y)
            for i in (i for i in range(k) if was_active[i]):
                losses[i].append(loss[i])
                norms[i].append(norm[i])
                self.step_norms[i].append(norm[i])
                self._callback("on_batch_end", i, loss[i], norm[i])
                if not (math.isfinite(loss[i]) and math.isfinite(norm[i])):
                    what = "loss" if not math.isfinite(loss[i]) else "gradient norm"
                    self.status[i] = "diverged"
                    self.reason[i] = (
                        f"non-finite {what} at epoch {epoch}, step {len(self.step_norms[i])}"
                    )
                    self.active[i] = False
            if not self.active.any():
                return []
        metrics = evaluate(self.model)
        logged = [i for i in range(k) if self.active[i]]
        for i in logged:
            dummy, scheduler = self.schedules[i]
            train_loss = sum(losses[i]) / len(losses[i])
            self.rows[i].append(
                {
                    "epoch": epoch,
                    "train_loss": train_loss,
                    "grad_norm_mean": sum(norms[i]) / len(norms[i]),
                    "grad_norm_max": max(norms[i]),
                    "lr": dummy.param_groups[0]["lr"],
                    **metrics[i],
                }
            )
            if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                scheduler.step(train_loss)
            elif scheduler is not None:
                scheduler.step()
            self.lrs[i] = dummy.param_groups[0]["lr"]
            if stop_when is not None and stop_when(self.rows[i]):
                self.status[i], self.reason[i] = "early_stop", f"stop rule met at epoch {epoch}"
                self.active[i] = False
        return logged
