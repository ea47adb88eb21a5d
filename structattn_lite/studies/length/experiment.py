"""Length generalization: train short, evaluate every length up to 256.

Two training protocols:

- ``"fixed"``: the paper's setting, a fixed training set of strings of one length
  (``train_length``, 16), split disjointly from its test set (``make_dataset``);
- ``"variable"``: the Chomsky-hierarchy setting, fresh strings every step, one length
  per batch drawn from 1..``train_length`` (40); no fixed dataset, so nothing can leak.
  The length schedule comes from its own generator (the same for every seed), the
  strings from the seed's.
- ``"grazzi"``: the variable protocol as Grazzi et al. run it (grid ``grazzi``), whose
  validation strings are longer than any training string: length 128, scored at lengths
  64..128 only, so a learning rate can be chosen for length without reading a test length.

Every model is causal, so one forward pass over a string of length 256 gives its
prediction for each of the 256 prefixes. For parity and mod-3 the prefix of a random
string is a random string, so that one pass scores every length at once. Dyck-1 needs
balanced strings of each length, so it is sampled per (even) length on a grid.
At each length L we report ``seq_acc`` (the label of the whole string, position L),
``unseen_acc`` (positions beyond the training length) and ``all_acc`` (all L
positions, which is, we believe, what the authors' README reports).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import torch

from structattn_lite.config import (
    check_bools,
    check_choice,
    check_fraction_below_one,
    check_int,
    check_seed,
)
from structattn_lite.data.splits import check_dataset, check_size, make_dataset
from structattn_lite.data.tasks import TASKS, make_task, task_class
from structattn_lite.models import build_model, count_parameters
from structattn_lite.records import RunRecord
from structattn_lite.studies.length import results
from structattn_lite.studies.length.grids import (
    GRAZZI_VAL_LENGTHS,
    GRIDS,
    LENGTH_MODELS,
    MODEL_SIZES,
    PROTOCOLS,
    TABLE_LENGTHS,  # noqa: F401 (read as ls.TABLE_LENGTHS)
)
from structattn_lite.training.driver import Setup, ValidationStop
from structattn_lite.training.losses import LOSSES
from structattn_lite.training.metrics import IGNORE, accuracy, length_scores, predict, scores
from structattn_lite.training.options import OptimConfig

EXPERIMENT = "length"
SPLITS = ("disjoint", "random")


@dataclass(frozen=True)
class LengthRun:
    task: str = "parity"
    model: str = "lstm"  # a key of LENGTH_MODELS
    model_options: dict = field(default_factory=dict)
    task_options: dict = field(default_factory=dict)
    protocol: str = "fixed"
    train_length: int = 16  # fixed: the one length; variable: the longest
    n: int = 2000  # fixed protocol: strings in train + validation + test
    split: str = "disjoint"  # fixed protocol: "disjoint" by string, or "random" (i.i.d.)
    val_fraction: float = 0.1  # fixed protocol: validation strings carved from training
    # Stop once the validation whole-string accuracy has been at least this for
    # ``fit_patience`` epochs (None: train every epoch). Reads validation, never test.
    stop_at_fit: float | None = None
    fit_patience: int = 3
    epochs: int = 20  # an "epoch" of the variable protocol is steps_per_epoch batches
    steps_per_epoch: int = 25
    batch_size: int = 64
    loss: str = "ce"
    optim: OptimConfig = field(default_factory=OptimConfig)
    seed: int = 0
    max_eval_length: int = 256
    n_eval: int = 200

    def __post_init__(self):
        check_choice("model", self.model, LENGTH_MODELS)
        check_choice("protocol", self.protocol, PROTOCOLS)
        check_choice("task", self.task, TASKS)
        check_choice("loss", self.loss, LOSSES)
        check_choice("split", self.split, SPLITS)
        check_seed("seed", self.seed)
        check_bools(self)
        check_int("fit_patience", self.fit_patience, minimum=1)
        # NaN would mean none; 1 would leave no training string
        check_fraction_below_one("val_fraction", self.val_fraction)
        if self.stop_at_fit is not None and not 0 < self.stop_at_fit <= 1:
            raise ValueError(f"stop_at_fit must lie in (0, 1] or be None, got {self.stop_at_fit}")
        if self.stop_at_fit is not None and self.protocol == "fixed" and self.val_fraction == 0:
            raise ValueError("stop_at_fit needs a validation split: set val_fraction > 0")
        for name in (
            "train_length",
            "n",
            "epochs",
            "steps_per_epoch",
            "batch_size",
            "max_eval_length",
            "n_eval",
        ):
            check_int(name, getattr(self, name), minimum=1)
        check_size(self.n, self.train_length, "train_length")  # a length it cannot serve
        check_size(self.n_eval, self.max_eval_length, "max_eval_length")
        task = make_task(self.task, **self.task_options)
        self.check_data(distinct=False)  # n too small to split, a length with no strings
        with torch.device("meta"):  # unknown model options fail now, not mid-sweep
            build_length_model(self, task.n_classes, task.vocab_size)

    def check_data(self, distinct: bool = True) -> None:
        """The fixed protocol's split (``fixed_protocol_data``), checked without sampling, as
        ``CSPRun.check_data`` checks its own."""
        if self.protocol == "fixed":
            check_dataset(self.task, self.n, self.train_length, labels="prefix",
                          leaky=self.split == "random" or not distinct,
                          val_fraction=self.val_fraction, **self.task_options)  # fmt: skip


def build_length_model(cfg: LengthRun, n_classes: int, vocab_size: int = 2):
    name, preset = LENGTH_MODELS[cfg.model]
    options = {"vocab_size": vocab_size, **cfg.model_options}
    if preset in ("paper", "code_switches") or name in ("diag_rnn", "diag_rnn_neg", "complex_rnn"):
        options.setdefault("scan", "parallel")  # linear recurrences: the scan for length 256
    return build_model(name, preset=preset, n_classes=n_classes, **options)


def train_lengths(cfg: LengthRun) -> list[int]:
    """Lengths a variable-protocol batch may take (Dyck-1 needs even lengths)."""
    step = task_class(cfg.task).length_step
    return list(range(step, cfg.train_length + 1, step))


def eval_lengths(task: str, max_length: int) -> list[int]:
    """Every length up to ``max_length``; a task whose strings come in steps of more than
    one (Dyck-1: even lengths) is scored every step to 32, then every 8 (its strings are
    costlier to score)."""
    step = task_class(task).length_step
    if step == 1:
        return list(range(1, max_length + 1))
    return list(range(step, 34, step)) + list(range(40, max_length + 1, 8))


@torch.no_grad()
def length_curve(model, task, cfg: LengthRun) -> pd.DataFrame:
    """seq_acc, unseen_acc and all_acc of ``model`` at every evaluated length."""
    gen = torch.Generator().manual_seed(10_000 + cfg.seed)  # never a training seed
    rows = []
    if task.prefixes_are_samples:  # one draw at the longest length scores every length
        x = task.sample(cfg.n_eval, cfg.max_eval_length, gen)
        correct = (predict(model, x, batch_size=128) == task.prefix_labels(x)).float()
        per_pos = correct.mean(0)
        for length in eval_lengths(task.name, cfg.max_eval_length):
            unseen = per_pos[cfg.train_length : length]
            rows.append(
                {
                    "length": length,
                    "seq_acc": per_pos[length - 1].item(),
                    "unseen_acc": unseen.mean().item() if len(unseen) else float("nan"),
                    "all_acc": per_pos[:length].mean().item(),
                }
            )
        return pd.DataFrame(rows)
    for length in eval_lengths(task.name, cfg.max_eval_length):
        x = task.sample(cfg.n_eval, length, gen)
        pred, y = predict(model, x, batch_size=128), task.prefix_labels(x)
        rows.append(
            {
                "length": length,
                **length_scores(pred, y, cfg.train_length),
                "all_acc": accuracy(pred, y),
            }
        )
    return pd.DataFrame(rows)


def evaluation_row(pred_test, y_test, pred_val=None, y_val=None) -> dict[str, float]:
    """One epoch's log: prefix accuracy on test (only reported) and on validation, and the
    validation whole-string accuracy the fit-stop reads."""
    row = {"test_acc": accuracy(pred_test, y_test)}
    if pred_val is not None:
        row["val_acc"] = accuracy(pred_val, y_val)
        row["val_seq_acc"] = scores(pred_val, y_val, "sequence")["acc"]
    return row


def fit_stop(cfg: LengthRun) -> ValidationStop | None:
    """The fit-stop: validation whole-string accuracy at least ``stop_at_fit`` for the
    last ``fit_patience`` epochs (None: train every epoch). It reads validation only."""
    if cfg.stop_at_fit is None:
        return None
    return ValidationStop("val_seq_acc", cfg.stop_at_fit, cfg.fit_patience)


def fixed_protocol_data(cfg: LengthRun):
    """The fixed protocol's strings of one run: its training length, a label per prefix."""
    return make_dataset(
        cfg.task,
        cfg.n,
        cfg.train_length,
        cfg.seed,
        labels="prefix",
        leaky=cfg.split == "random",
        val_fraction=cfg.val_fraction,
        **cfg.task_options,
    )


def length_setup(cfg: LengthRun) -> Setup:
    """The driver's description of one run: its model from the seed, its data (the fixed
    protocol's strings, or the variable protocol's sampler of fresh ones and its own test
    and validation strings), the rows it logs and its fit-stop."""
    task = make_task(cfg.task, **cfg.task_options)
    torch.manual_seed(cfg.seed)
    model = build_length_model(cfg, task.n_classes, task.vocab_size)
    sample = None
    if cfg.protocol == "fixed":
        data = fixed_protocol_data(cfg)
        names = ("x_train", "y_train", "x_test", "y_test", "x_val", "y_val")
        tensors = {n: getattr(data, n) for n in names}
    else:
        lengths = train_lengths(cfg)
        schedule = torch.Generator().manual_seed(12345)  # same length sequence for every seed
        x_test = task.sample(
            512, cfg.train_length, torch.Generator().manual_seed(20_000 + cfg.seed)
        )
        val_gen = torch.Generator().manual_seed(30_000 + cfg.seed)
        if cfg.protocol == "grazzi":  # longer than training, scored at 64..128 only
            first, last = GRAZZI_VAL_LENGTHS
            x_val = task.sample(512, last, val_gen)
            y_val = task.prefix_labels(x_val)
            y_val[..., : first - 1] = IGNORE
        else:
            x_val = task.sample(512, cfg.train_length, val_gen)
            y_val = task.prefix_labels(x_val)
        tensors = {"x_test": x_test, "y_test": task.prefix_labels(x_test),
                   "x_val": x_val, "y_val": y_val}  # fmt: skip

        def sample(gen):
            for _ in range(cfg.steps_per_epoch):
                length = lengths[torch.randint(len(lengths), (1,), generator=schedule).item()]
                x = task.sample(cfg.batch_size, length, gen)
                yield x, task.prefix_labels(x)

    return Setup(
        cfg,
        model,
        tensors,
        evals=("test", "val"),
        score=lambda p: evaluation_row(*p["test"], *p["val"]),
        stop=fit_stop(cfg),
        sample=sample,
        context={"task": task},
    )


def length_record(setup: Setup, result, seconds: float, trained_model, **extra) -> RunRecord:
    """The run's record, with its curve: the trained model scored at every length."""
    cfg, eval_start = setup.cfg, time.perf_counter()
    model = trained_model()
    curve = length_curve(model, setup.context["task"], cfg)
    return RunRecord.from_training(
        EXPERIMENT,
        cfg,
        result,
        n_parameters=count_parameters(model),
        steps=len(result.step_grad_norms),
        seconds=seconds,
        eval_seconds=time.perf_counter() - eval_start,
        curve=curve.round(5).to_dict(orient="list"),
        **extra,
    )


def _seeds(spec: dict, task: str) -> tuple[int, ...]:
    """A grid's seeds for ``task``: one tuple for every task, or one per task."""
    seeds = spec["seeds"]
    return seeds[task] if isinstance(seeds, dict) else seeds


def _first_pass(spec: dict) -> list[LengthRun]:
    models = spec["models"]
    # A grid with ``lrs`` trains every run once per rate, at a constant rate.
    rates = [{"optim": OptimConfig(lr=lr, schedule="constant")} for lr in spec.get("lrs", ())]
    return [
        LengthRun(
            task=task,
            model=model,
            model_options=MODEL_SIZES[model],
            protocol=protocol,
            train_length=16 if protocol == "fixed" else 40,
            n=spec["n"][task] if isinstance(spec["n"], dict) else spec["n"],
            epochs=spec["epochs"],
            seed=seed,
            max_eval_length=spec["max_eval_length"],
            n_eval=spec["n_eval"],
            task_options=spec.get("task_options", {}).get(task, {}),
            **spec.get("run", {}),
            **rate,
        )
        for seed in sorted({s for t in spec["tasks"] for s in _seeds(spec, t)})
        for task in spec["tasks"]
        if seed in _seeds(spec, task)
        for protocol in spec["protocols"]
        for model in (models[task] if isinstance(models, dict) else models)
        for rate in rates or [{}]
    ]


def grid(name: str, store=None) -> list[LengthRun]:
    """The runs of a length grid, seed-major (a partial sweep covers every cell).

    A grid with ``refit`` trains in two passes: once every first-pass run is on disk, the
    cells where some seed did not fit (``unfit_cells``, validation only) are trained again
    on every seed with the ``refit`` changes (a longer budget)."""
    from structattn_lite.records import RunStore

    spec = GRIDS[check_choice("grid", name, GRIDS)]
    first = _first_pass(spec)
    if "refit" not in spec:
        return first
    store = store or RunStore()
    records = [store.load(EXPERIMENT, c) for c in first]
    if any(r is None for r in records):
        return first
    unfit = results.unfit_cells(records)
    return first + [replace(c, **spec["refit"]) for c in first if results.cell(c) in unfit]


Config = LengthRun
setup, record = length_setup, length_record  # the study's runs, as runs.train trains them
grid_runs = grid  # for export, whose parameter ``grid`` (a name) shadows the function


def export(records: list[RunRecord], grid: str = "committed") -> list[Path]:
    """``results.export``, in the grid's order where its committed rows are kept."""
    order = grid_runs(grid) if grid in results.GROWN_ACROSS_SESSIONS else None
    return results.export(records, grid, order=order)


curves_frame = results.curves_frame
COMMITTED_CSV = results.COMMITTED_CSV  # grid -> its committed file, as every study has
