"""One training run of a small sequence model on a state-tracking task.

``CSPRun`` is everything that determines a run (its hash keys the cached record);
``run_csp(config)`` builds the data split and the model from it, trains, and returns a
``RunRecord``. The grokking and ablation studies both run these.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from structattn_lite.data.tasks import StateTrackingData, make_dataset
from structattn_lite.models import build_model, count_parameters
from structattn_lite.runs import RunRecord
from structattn_lite.training.losses import get_loss
from structattn_lite.training.metrics import predict, scores
from structattn_lite.training.trainer import OptimConfig, Trainer

EXPERIMENT = "csp"


@dataclass(frozen=True)
class CSPRun:
    """Everything that determines one run; its hash keys the cached record."""

    task: str = "parity"
    model: str = "csp"
    preset: str | None = "paper"
    model_options: dict = field(default_factory=dict)  # overrides of the preset's fields
    task_options: dict = field(default_factory=dict)  # k, target, balanced, negatives, label
    seed: int = 0
    length: int = 16
    n: int = 5000
    labels: str = "sequence"
    leaky: bool = False
    loss: str = "focal"
    epochs: int = 300
    batch_size: int = 64
    optim: OptimConfig = field(default_factory=OptimConfig)
    hold_perfect: int | None = None  # early stop after this many epochs at 100% (None: never)


def build_data(cfg: CSPRun) -> StateTrackingData:
    return make_dataset(
        cfg.task,
        cfg.n,
        cfg.length,
        cfg.seed,
        labels=cfg.labels,
        leaky=cfg.leaky,
        **cfg.task_options,
    )


def build_csp_model(cfg: CSPRun, n_classes: int) -> torch.nn.Module:
    return build_model(cfg.model, preset=cfg.preset, n_classes=n_classes, **cfg.model_options)


def run_csp(cfg: CSPRun, callbacks=(), progress: bool = True) -> RunRecord:
    """Train one config from its seed; the history is identical for identical configs."""
    data = build_data(cfg)
    torch.manual_seed(cfg.seed)
    model = build_csp_model(cfg, data.n_classes)
    loss = get_loss(cfg.loss)
    last_only = cfg.labels == "sequence"

    def loss_fn(m, x, y):
        logits = m(x)
        return loss(logits[:, -1], y[:, -1]) if last_only else loss(logits, y)

    def batches(generator):
        order = torch.randperm(len(data.x_train), generator=generator)
        for i in range(0, len(order), cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            yield data.x_train[idx], data.y_train[idx]

    def evaluate(m):
        train = scores(predict(m, data.x_train), data.y_train, cfg.labels)
        pred_test = predict(m, data.x_test)
        test = scores(pred_test, data.y_test, cfg.labels)
        last = scores(pred_test, data.y_test, "sequence")  # whole string, as the paper scores
        return {
            "train_acc": train["acc"],
            "test_acc": test["acc"],
            "test_f1": test["f1"],
            "test_seq_acc": last["acc"],
            "test_seq_f1": last["f1"],
        }

    def held_perfect(rows):
        k = cfg.hold_perfect
        return k is not None and len(rows) >= k and all(r["test_acc"] == 1.0 for r in rows[-k:])

    trainer = Trainer(model, loss_fn, cfg.optim, callbacks=callbacks, progress=progress)
    start = time.perf_counter()
    result = trainer.fit(
        cfg.epochs,
        batches,
        evaluate,
        torch.Generator().manual_seed(cfg.seed),
        stop_when=held_perfect,
        desc=f"{cfg.task}/{cfg.preset or cfg.model}/s{cfg.seed}",
    )
    seconds = time.perf_counter() - start
    return RunRecord.from_training(
        EXPERIMENT,
        cfg,
        result,
        step_grad_norms=result.step_grad_norms,
        n_parameters=count_parameters(model),
        seconds=seconds,
        data=data.summary(),
    )
