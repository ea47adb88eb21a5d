"""The attention study's training recipe: AdamW, warmup then cosine decay, early stopping.

``train(model, loss_fn, batch, evaluate, recipe)`` trains one model from a step budget on
the one ``Trainer`` (``training.trainer``), a round of ``eval_every`` steps per
evaluation, and returns an ``Outcome``: the learning curve at every evaluation, per-step
gradient norms per layer and for the metric parameters, the fast-path failure counts, and
the best model (by the validation number ``evaluate`` returns, lower is better) restored
into ``model``. It reads no data itself: the caller hands it a training batch function
and a validation function, so the test split cannot leak into any choice made here.

Given a checkpoint plan (``checkpoint=``, a ``training.checkpoint.CheckpointPlan``, as
a sweep passes it through ``experiment.run``), the trainer saves its whole state every
``every`` evaluations and resumes from a checkpoint it finds there, ending with the
history of an uninterrupted run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.training.options import PRECISIONS, OptimConfig, TrainResult

if TYPE_CHECKING:  # torch is imported where a run trains: reading a Recipe needs none
    import torch
    from torch import nn

    from structattn_lite.training.checkpoint import CheckpointPlan


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
    from torch import nn

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
class Outcome(TrainResult):
    """A trained attention run: its ``TrainResult`` (``status`` "ok" or "diverged": a run
    stopped early is a finished run), how it stopped, and its fast-path failure counts."""

    stop: str = "max_steps"  # "max_steps", "early_stop", "time_budget", "diverged"
    stats: dict[str, float] = field(default_factory=dict)  # over the whole run


class FastPathCounts:
    """The model's fast-path failure counts (no model state) for a checkpoint to carry."""

    def __init__(self, model: nn.Module):
        self.model = model

    def state_dict(self) -> list[dict[str, float]]:
        return [a.stats.as_dict() for a in self.model.attention_modules()]

    def load_state_dict(self, saved: list[dict[str, float]]) -> None:
        from structattn_lite.models.attention_base import FastPathStats

        for a, stats in zip(self.model.attention_modules(), saved, strict=True):
            a.stats = FastPathStats(**stats)


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
    nats. Callbacks get ``on_batch_end(trainer, loss, grad_norm)`` and
    ``on_epoch_end(trainer, row)``, one "epoch" per evaluation.
    ``checkpoint`` (not a ``stacked`` plan): save every ``checkpoint.every`` evaluations.
    """
    import torch

    from structattn_lite.training.trainer import Trainer

    generator = getattr(batch, "generator", None)
    if checkpoint is not None and not isinstance(generator, torch.Generator):
        raise ValueError("checkpointing needs batch.generator, the generator batch(step) draws on")
    model.check_every(recipe.check_every)
    model.reset_stats()
    trainer = Trainer(
        model, loss_fn,
        OptimConfig(lr=recipe.lr, clip=recipe.clip, weight_decay=recipe.weight_decay),
        make_optimizer=lambda m, o: torch.optim.AdamW(
            param_groups(m, o.weight_decay), lr=o.lr, betas=(0.9, recipe.beta2)),
        lr_at=lambda step: lr_at(step, recipe), grad_groups=grad_groups(model),
        precision=recipe.precision, callbacks=callbacks, progress=progress,
        checkpoint=checkpoint, stateful=[FastPathCounts(model)],
        columns=("epoch", "step", "lr", "train_loss", "seconds", "cpu_seconds"),
    )  # fmt: skip
    k, end = recipe.eval_every, recipe.max_steps

    def round_batches(_):  # the next evaluation's steps; batch draws on its own generator
        return ((batch(s),) for s in range(trainer.steps, min(trainer.steps + k, end)))

    result = trainer.fit(
        math.ceil(end / k), round_batches, evaluate,
        generator if generator is not None else torch.Generator(), monitor=monitor,
        patience=recipe.patience, time_budget_s=recipe.time_budget_s,
    )  # fmt: skip
    model.check_every(0)
    stop = "max_steps" if result.status == "ok" else result.status
    status = "diverged" if stop == "diverged" else "ok"
    return Outcome(**{**vars(result), "status": status}, stop=stop, stats=model.fast_path_stats())
