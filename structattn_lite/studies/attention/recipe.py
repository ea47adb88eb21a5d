"""The attention study's training schedule: ``Recipe`` (AdamW's peak rate, warmup then a
half cosine, weight decay, clipping, evaluation rhythm, early stopping, precision) and
``lr_at``, the rate it sets at each step. Reading a Recipe needs no torch: the training
that follows it is ``experiment.train``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from structattn_lite.config import PRECISIONS, check_choice, check_int, check_number


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
