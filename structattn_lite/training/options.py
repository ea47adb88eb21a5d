"""What a run's optimizer and its result are, without torch: ``OptimConfig`` (part of a
config, so part of its hash), the schedules and precisions a trainer offers, and
``TrainResult``. The trainer (``training.trainer``) uses them; configs and the ledger read
them without loading torch."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from structattn_lite.config import check_choice, check_int, check_number

SCHEDULES = ("plateau", "cosine", "constant")

if TYPE_CHECKING:  # numpy and pandas load where a result is used, not where a flag is checked
    import pandas as pd


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
        import numpy as np

        out = {}
        for name, norms in self.grad_norms.items():
            late = np.asarray(norms[after:], dtype=float)
            late = late[np.isfinite(late)]
            out[name] = float(late.var(ddof=1)) if len(late) > 1 else math.nan
        return out
