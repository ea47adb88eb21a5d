"""One training run of a small sequence model on a state-tracking task.

``CSPRun`` is everything that determines a run (its hash keys the cached record);
``run_csp(config)`` builds the data split and the model from it, trains, and returns a
``RunRecord``. The grokking and ablation studies both run these.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from structattn_lite.config import check_choice, check_int
from structattn_lite.data.splits import StateTrackingData, make_dataset
from structattn_lite.data.tasks import LABELS, TASKS, make_task
from structattn_lite.models import MODELS, build_model, count_parameters, model_config
from structattn_lite.records import RunRecord
from structattn_lite.training.losses import LOSSES, get_loss
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
    val_fraction: float = 0.1  # validation strings carved from training (early stop reads them)
    loss: str = "focal"
    epochs: int = 300
    batch_size: int = 64
    optim: OptimConfig = field(default_factory=OptimConfig)
    # Early stop after this many epochs at 100% validation accuracy (None: never).
    hold_perfect: int | None = None

    def __post_init__(self):
        # Validate now, not when the model is built: a grid with a typo fails at once.
        check_choice("task", self.task, TASKS)
        check_choice("model", self.model, MODELS)
        check_choice("labels", self.labels, LABELS)
        check_choice("loss", self.loss, LOSSES)
        for name in ("seed",):
            check_int(name, getattr(self, name), minimum=0)
        for name in ("length", "n", "epochs", "batch_size"):
            check_int(name, getattr(self, name), minimum=1)
        if self.hold_perfect is not None:
            check_int("hold_perfect", self.hold_perfect, minimum=1)
            if self.val_fraction == 0:
                raise ValueError("hold_perfect reads the validation split: set val_fraction > 0")
        if not isinstance(self.optim, OptimConfig):
            raise ValueError(f"optim must be an OptimConfig, got {self.optim!r}")
        task = make_task(self.task, **self.task_options)  # unknown or out-of-range options
        # unknown preset, model option or value: the model's config checks them, unbuilt
        options = {"vocab_size": task.vocab_size, **self.model_options}
        model_config(self.model, self.preset, n_classes=task.n_classes, **options)


def paper_setting_run(task: str, preset: str, seed: int, n: int | None = None, **changes) -> CSPRun:
    """A run in the paper's setting: its string counts (5,000 / 5,000 / 10,000 unless ``n``),
    an i.i.d. split, and one label per string for the text's model ("paper") but one per
    prefix for the code's readings. The grokking and ablation grids share these runs."""
    from structattn_lite.data.tasks import PAPER_N

    labels = "sequence" if preset == "paper" else "prefix"
    return CSPRun(task=task, preset=preset, seed=seed, n=n or PAPER_N[task], leaky=True,
                  labels=labels, **changes)  # fmt: skip


def build_data(cfg: CSPRun) -> StateTrackingData:
    return make_dataset(
        cfg.task,
        cfg.n,
        cfg.length,
        cfg.seed,
        labels=cfg.labels,
        leaky=cfg.leaky,
        val_fraction=cfg.val_fraction,
        **cfg.task_options,
    )


def build_csp_model(cfg: CSPRun, n_classes: int, vocab_size: int = 2) -> torch.nn.Module:
    options = {"vocab_size": vocab_size, **cfg.model_options}
    return build_model(cfg.model, preset=cfg.preset, n_classes=n_classes, **options)


def evaluation_row(labels: str, train: tuple, test: tuple, val: tuple) -> dict[str, float]:
    """One epoch's log from (predictions, targets) pairs: train and test scores on the
    run's labels, the whole-string test scores the paper reports, and validation
    accuracy (what an early stop reads; absent without a validation split)."""
    on_train, on_test = scores(*train, labels), scores(*test, labels)
    last = scores(*test, "sequence")  # the whole string, as the paper scores
    row = {
        "train_acc": on_train["acc"],
        "test_acc": on_test["acc"],
        "test_f1": on_test["f1"],
        "test_seq_acc": last["acc"],
        "test_seq_f1": last["f1"],
    }
    if val[0] is not None:
        row["val_acc"] = scores(*val, labels)["acc"]
    return row


def run_csp(
    cfg: CSPRun, callbacks=(), progress: bool = True, device: str = "cpu", checkpoint=None
) -> RunRecord:
    """Train one config from its seed; the history is identical for identical configs.

    ``checkpoint`` (a ``training.checkpoint.CheckpointPlan``) makes the run checkpoint
    and resume from a checkpoint it finds."""
    data = build_data(cfg)
    # Moved once: batches and evaluations index tensors already on the device.
    x_train, y_train, x_test, y_test, x_val, y_val = (
        t.to(device) if t is not None else None
        for t in (data.x_train, data.y_train, data.x_test, data.y_test, data.x_val, data.y_val)
    )
    torch.manual_seed(cfg.seed)
    model = build_csp_model(cfg, data.n_classes, data.vocab_size).to(device)
    loss = get_loss(cfg.loss)
    last_only = cfg.labels == "sequence"

    def loss_fn(m, x, y):
        logits = m(x)
        return loss(logits[:, -1], y[:, -1]) if last_only else loss(logits, y)

    def batches(generator):
        order = torch.randperm(len(x_train), generator=generator).to(device)
        for i in range(0, len(order), cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            yield x_train[idx], y_train[idx]

    def evaluate(m):
        val = (predict(m, x_val), y_val) if x_val is not None and len(x_val) else (None, None)
        return evaluation_row(
            cfg.labels, (predict(m, x_train), y_train), (predict(m, x_test), y_test), val
        )

    def held_perfect(rows):  # reads the validation split, never the test split
        k = cfg.hold_perfect
        return k is not None and len(rows) >= k and all(r.get("val_acc") == 1.0 for r in rows[-k:])

    trainer = Trainer(
        model, loss_fn, cfg.optim, callbacks=callbacks, progress=progress, checkpoint=checkpoint
    )
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
