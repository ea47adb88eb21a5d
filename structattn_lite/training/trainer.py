"""A small trainer shared by every study: Adam, ReduceLROnPlateau, clipping, callbacks.

It records the gradient norm of every step before clipping, keeps a per-epoch history,
and stops a run whose loss or gradient turns NaN/Inf, recording why, so a sweep can
carry on with the next config.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm


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


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    clip: float | None = 1.0  # max gradient norm; None = measure but do not clip
    plateau_factor: float = 0.5
    plateau_patience: int = 10  # epochs without train-loss improvement before lr halves
    weight_decay: float = 0.0


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


@dataclass
class Trainer:
    """Train ``model`` with ``loss_fn(model, *batch) -> scalar`` for some epochs.

    ``batches(generator)`` yields an epoch's batches; ``evaluate(model)`` returns the
    per-epoch metrics to log (e.g. test accuracy). The plateau scheduler watches the
    training loss, never a test metric.
    """

    model: nn.Module
    loss_fn: Callable[..., torch.Tensor]
    optim: OptimConfig = field(default_factory=OptimConfig)
    callbacks: Sequence[Callback] = ()
    progress: bool = True

    def __post_init__(self):
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=self.optim.lr, weight_decay=self.optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer, factor=self.optim.plateau_factor, patience=self.optim.plateau_patience
        )
        self.step_grad_norms: list[float] = []
        self.rows: list[dict[str, Any]] = []
        self.epoch = 0

    def train_step(self, batch: tuple) -> tuple[float, float]:
        self.model.train()
        loss = self.loss_fn(self.model, *batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = self.optim.clip if self.optim.clip is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm).item()
        if math.isfinite(loss.item()) and math.isfinite(grad_norm):
            self.optimizer.step()
        return loss.item(), grad_norm

    def fit(
        self,
        epochs: int,
        batches: Callable[[torch.Generator], Iterable[tuple]],
        evaluate: Callable[[nn.Module], dict[str, float]],
        generator: torch.Generator,
        stop_when: Callable[[list[dict[str, Any]]], bool] | None = None,
        desc: str = "train",
    ) -> TrainResult:
        status, reason = "ok", None
        bar = tqdm(range(epochs), desc=desc, disable=not self.progress, leave=False)
        for _ in bar:
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
            self.scheduler.step(train_loss)
            self.rows.append(row)
            for cb in self.callbacks:
                cb.on_epoch_end(self, row)
            bar.set_postfix(
                {k: f"{v:.3g}" for k, v in row.items() if k in ("train_loss", "test_acc")}
            )
            if stop_when is not None and stop_when(self.rows):
                status, reason = "early_stop", f"stop rule met at epoch {self.epoch}"
                break
        return TrainResult(pd.DataFrame(self.rows), list(self.step_grad_norms), status, reason)
