"""One training run of a small sequence model on a state-tracking task.

``CSPRun`` is everything that determines a run (its hash keys the cached record);
``csp_setup(config)`` builds the data split and the model from it, the state-tracking
driver (``training.driver.train_seeds``) trains it, and ``csp_record`` makes its
``RunRecord``. The grokking and ablation studies both run these, one seed at a time or
seeds together (``runs.train``); a CSP trains seed-stacked either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from structattn_lite.config import (
    check_bools,
    check_choice,
    check_fraction_below_one,
    check_int,
    check_seed,
)
from structattn_lite.records import RunRecord
from structattn_lite.training.options import OptimConfig

if TYPE_CHECKING:
    import torch

    from structattn_lite.data.splits import StateTrackingData
    from structattn_lite.training.driver import Setup

# The tasks, models and losses (their registries load torch) are imported where a config
# is checked or a run built: a module that only names a grid's files, as the ledger does,
# loads no torch through this one.

EXPERIMENT = "csp"
EVAL_CHUNK = 256  # evaluation rows per pass, shared by the seeds of a stack (measured best)


def eval_chunk(n_seeds: int) -> int:
    """Evaluation rows per pass for a stack of ``n_seeds`` seeds (each seed's share)."""
    return max(64, EVAL_CHUNK // max(n_seeds, 1))


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
        from structattn_lite.data.splits import check_size
        from structattn_lite.data.tasks import LABELS, TASKS, make_task
        from structattn_lite.models import MODELS, model_config
        from structattn_lite.training.losses import LOSSES

        # Validate now, not when the model is built: a grid with a typo fails at once.
        check_choice("task", self.task, TASKS)
        check_choice("model", self.model, MODELS)
        check_choice("labels", self.labels, LABELS)
        check_choice("loss", self.loss, LOSSES)
        check_seed("seed", self.seed)
        check_bools(self)  # leaky=1 would be a new config (a new hash) for the same run
        for name in ("length", "n", "epochs", "batch_size"):
            check_int(name, getattr(self, name), minimum=1)
        # NaN would mean none; 1 would leave no training string
        check_fraction_below_one("val_fraction", self.val_fraction)
        check_size(self.n, self.length)  # a length it cannot serve: now, not mid-sweep
        if self.hold_perfect is not None:
            check_int("hold_perfect", self.hold_perfect, minimum=1)
            if self.val_fraction == 0:
                raise ValueError("hold_perfect reads the validation split: set val_fraction > 0")
        if not isinstance(self.optim, OptimConfig):
            raise ValueError(f"optim must be an OptimConfig, got {self.optim!r}")
        task = make_task(self.task, **self.task_options)  # unknown or out-of-range options
        self.check_data(distinct=False)  # n too small to split, a length with no strings
        # unknown preset, model option or value: the model's config checks them, unbuilt
        options = {"vocab_size": task.vocab_size, **self.model_options}
        model_config(self.model, self.preset, n_classes=task.n_classes, **options)

    def check_data(self, distinct: bool = True) -> None:
        """The split ``build_data`` makes, checked without sampling: n large enough for its
        test and validation parts, a length the task has strings of, and (``distinct``, for a
        disjoint split) that many distinct strings. A config checks all but the last when
        made; ``structattn run`` checks the last for every run of a grid before the first
        trains (the ablations' paper grid holds a disjoint parentheses run that cannot)."""
        from structattn_lite.data.splits import check_dataset

        check_dataset(self.task, self.n, self.length, labels=self.labels,
                      leaky=self.leaky or not distinct, val_fraction=self.val_fraction,
                      **self.task_options)  # fmt: skip


def paper_setting_run(task: str, preset: str, seed: int, n: int | None = None, **changes) -> CSPRun:
    """A run in the paper's setting: its string counts (5,000 / 5,000 / 10,000 unless ``n``),
    an i.i.d. split, and one label per string for the text's model ("paper") but one per
    prefix for the code's readings. The grokking and ablation grids share these runs."""
    from structattn_lite.data.tasks import PAPER_N

    labels = "sequence" if preset == "paper" else "prefix"
    return CSPRun(task=task, preset=preset, seed=seed, n=n or PAPER_N[task], leaky=True,
                  labels=labels, **changes)  # fmt: skip


def build_data(cfg: CSPRun) -> StateTrackingData:
    from structattn_lite.data.splits import make_dataset

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
    from structattn_lite.models import build_model

    options = {"vocab_size": vocab_size, **cfg.model_options}
    return build_model(cfg.model, preset=cfg.preset, n_classes=n_classes, **options)


def evaluation_row(labels: str, train: tuple, test: tuple, val: tuple) -> dict[str, float]:
    """One epoch's log from (predictions, targets) pairs: train and test scores on the
    run's labels, the whole-string test scores the paper reports, and validation
    accuracy (what an early stop reads; absent without a validation split)."""
    from structattn_lite.training.metrics import scores

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


def csp_setup(cfg: CSPRun) -> Setup:
    """The driver's description of one run: its data split, its model from the seed, the
    rows it logs and its early stop (100% validation accuracy held ``hold_perfect``
    epochs; never the test split)."""
    import torch

    from structattn_lite.training.driver import Setup, ValidationStop

    data = build_data(cfg)
    torch.manual_seed(cfg.seed)
    model = build_csp_model(cfg, data.n_classes, data.vocab_size)
    names = ("x_train", "y_train", "x_test", "y_test", "x_val", "y_val")
    k = cfg.hold_perfect
    return Setup(
        cfg,
        model,
        tensors={n: getattr(data, n) for n in names},
        evals=("train", "test", "val"),
        score=lambda p: evaluation_row(cfg.labels, p["train"], p["test"], p["val"]),
        stop=None if k is None else ValidationStop("val_acc", 1.0, k),
        last_only=cfg.labels == "sequence",
        desc=f"{cfg.task}/{cfg.preset or cfg.model}/s{cfg.seed}",
        context={"data": data},
    )


def csp_record(setup: Setup, result, seconds: float, trained_model, **extra) -> RunRecord:
    from structattn_lite.models import count_parameters

    return RunRecord.from_training(
        EXPERIMENT,
        setup.cfg,
        result,
        step_grad_norms=result.step_grad_norms,
        n_parameters=count_parameters(setup.model),
        seconds=seconds,
        data=setup.context["data"].summary(),
        **extra,
    )
