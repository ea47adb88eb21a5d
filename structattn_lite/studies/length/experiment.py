"""Length generalization: train short, evaluate every length up to 256.

Two training protocols:

- ``"fixed"``: the paper's setting, a fixed training set of strings of one length
  (``train_length``, 16), split disjointly from its test set (``make_dataset``);
- ``"variable"``: the Chomsky-hierarchy setting, fresh strings every step, one length
  per batch drawn from 1..``train_length`` (40); no fixed dataset, so nothing can leak.
  The length schedule comes from its own generator (the same for every seed), the
  strings from the seed's.

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
from dataclasses import dataclass, field

import pandas as pd
import torch

from structattn_lite.config import check_choice
from structattn_lite.data.tasks import make_dataset, make_task
from structattn_lite.models import build_model, count_parameters
from structattn_lite.runs import RunRecord, RunStore
from structattn_lite.training.losses import get_loss
from structattn_lite.training.metrics import accuracy, predict
from structattn_lite.training.trainer import OptimConfig, Trainer

EXPERIMENT = "length"
PROTOCOLS = ("fixed", "variable")
TABLE_LENGTHS = (16, 32, 64, 128, 256)

# Display name -> (model, preset). CSP-Vanilla / CSP-Fast in the authors' README are
# their code's variants; our "csp_upstream" follows their code, "csp_paper" the text.
LENGTH_MODELS = {
    "csp_paper": ("csp", "paper"),
    "csp_upstream": ("csp", "upstream"),
    "lstm": ("lstm", None),
    "gru": ("gru", None),
    "transformer": ("transformer", None),
    "diag_rnn": ("diag_rnn", None),
    "diag_rnn_neg": ("diag_rnn_neg", None),
    "complex_rnn": ("complex_rnn", None),
}


@dataclass(frozen=True)
class LengthRun:
    task: str = "parity"
    model: str = "lstm"  # a key of LENGTH_MODELS
    model_options: dict = field(default_factory=dict)
    task_options: dict = field(default_factory=dict)
    protocol: str = "fixed"
    train_length: int = 16  # fixed: the one length; variable: the longest
    n: int = 2000  # fixed protocol: strings in train + test
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


def build_length_model(cfg: LengthRun, n_classes: int):
    name, preset = LENGTH_MODELS[cfg.model]
    options = dict(cfg.model_options)
    if name == "csp" or name in ("diag_rnn", "diag_rnn_neg", "complex_rnn"):
        options.setdefault("scan", "parallel")  # length 256 evaluation needs the scan
    return build_model(name, preset=preset, n_classes=n_classes, **options)


def train_lengths(cfg: LengthRun) -> list[int]:
    """Lengths a variable-protocol batch may take (Dyck-1 needs even lengths)."""
    step = 2 if cfg.task == "dyck1" else 1
    return list(range(step, cfg.train_length + 1, step))


def eval_lengths(task: str, max_length: int) -> list[int]:
    if task != "dyck1":
        return list(range(1, max_length + 1))
    short = list(range(2, 34, 2))
    return short + list(range(40, max_length + 1, 8))


@torch.no_grad()
def length_curve(model, task, cfg: LengthRun) -> pd.DataFrame:
    """seq_acc, unseen_acc and all_acc of ``model`` at every evaluated length."""
    gen = torch.Generator().manual_seed(10_000 + cfg.seed)  # never a training seed
    rows = []
    if task.name != "dyck1":
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
        unseen = pred[:, cfg.train_length :]
        rows.append(
            {
                "length": length,
                "seq_acc": accuracy(pred[:, -1], y[:, -1]),
                "unseen_acc": accuracy(unseen, y[:, cfg.train_length :])
                if unseen.numel()
                else float("nan"),
                "all_acc": accuracy(pred, y),
            }
        )
    return pd.DataFrame(rows)


def run_length(cfg: LengthRun, progress: bool = False) -> RunRecord:
    """Train one model under one protocol, then score it at every length."""
    task = make_task(cfg.task, **cfg.task_options)
    torch.manual_seed(cfg.seed)
    model = build_length_model(cfg, task.n_classes)
    loss = get_loss(cfg.loss)
    if cfg.protocol == "fixed":
        data = make_dataset(
            cfg.task, cfg.n, cfg.train_length, cfg.seed, labels="prefix", **cfg.task_options
        )
        x_test, y_test = data.x_test, data.y_test

        def batches(gen):
            order = torch.randperm(len(data.x_train), generator=gen)
            for i in range(0, len(order), cfg.batch_size):
                idx = order[i : i + cfg.batch_size]
                yield data.x_train[idx], data.y_train[idx]
    else:
        lengths = train_lengths(cfg)
        schedule = torch.Generator().manual_seed(12345)  # same length sequence for every seed
        x_test = task.sample(
            512, cfg.train_length, torch.Generator().manual_seed(20_000 + cfg.seed)
        )
        y_test = task.prefix_labels(x_test)

        def batches(gen):
            for _ in range(cfg.steps_per_epoch):
                length = lengths[torch.randint(len(lengths), (1,), generator=schedule).item()]
                x = task.sample(cfg.batch_size, length, gen)
                yield x, task.prefix_labels(x)

    def evaluate(m):
        return {"test_acc": accuracy(predict(m, x_test), y_test)}

    trainer = Trainer(model, lambda m, x, y: loss(m(x), y), cfg.optim, progress=progress)
    start = time.perf_counter()
    result = trainer.fit(cfg.epochs, batches, evaluate, torch.Generator().manual_seed(cfg.seed))
    seconds = time.perf_counter() - start
    curve = length_curve(model, task, cfg)
    return RunRecord.from_training(
        EXPERIMENT,
        cfg,
        result,
        n_parameters=count_parameters(model),
        seconds=seconds,
        eval_seconds=time.perf_counter() - start - seconds,
        curve=curve.round(5).to_dict(orient="list"),
    )


def sweep_lengths(configs: list[LengthRun], store: RunStore | None = None, progress: bool = True):
    from tqdm.auto import tqdm

    from structattn_lite.training.trainer import few_threads

    store = store or RunStore()
    with few_threads():
        return [
            store.get_or_run(EXPERIMENT, c, run_length)
            for c in tqdm(configs, desc="length runs", disable=not progress)
        ]


def curves_frame(records: list[RunRecord]) -> pd.DataFrame:
    """Long table: one row per (run, evaluated length), with the run's config columns."""
    frames = []
    for r in records:
        c = r.config
        curve = pd.DataFrame(r.extra["curve"])
        for key in ("task", "model", "protocol", "seed", "train_length", "epochs"):
            curve[key] = c[key]
        curve["steps"] = len(r.history) * (
            c["steps_per_epoch"]
            if c["protocol"] == "variable"
            else -(-int(c["n"] * 0.8) // c["batch_size"])
        )
        curve["n_parameters"] = r.extra["n_parameters"]
        curve["final_test_acc"] = r.history["test_acc"].iloc[-1] if len(r.history) else float("nan")
        frames.append(curve)
    return pd.concat(frames, ignore_index=True)


# Per-model sizes near CSP's (d=32, 2 layers: ~7-9k parameters) for the length grids.
MODEL_SIZES = {
    "csp_paper": {"d_model": 32, "n_layers": 2},
    "csp_upstream": {"d_model": 32, "n_layers": 2},
    "lstm": {"d_model": 32, "n_layers": 1},
    "gru": {"d_model": 32, "n_layers": 1},
    "transformer": {"d_model": 32, "n_layers": 1},
    "diag_rnn": {"d_model": 24, "n_layers": 2},
    "diag_rnn_neg": {"d_model": 24, "n_layers": 2},
    "complex_rnn": {"d_model": 20, "n_layers": 2},
}
LENGTH_GRIDS = {
    "smoke": {"tasks": ("parity",), "models": ("lstm", "csp_upstream"), "protocols": ("fixed",),
              "seeds": (0,), "epochs": 2, "n": 300, "max_eval_length": 64, "n_eval": 32},
    "quick": {"tasks": ("parity",), "models": ("lstm", "csp_upstream", "diag_rnn_neg"),
              "protocols": ("fixed",), "seeds": (0,), "epochs": 8, "n": 2000,
              "max_eval_length": 256, "n_eval": 100},
    "committed": {"tasks": ("parity", "mod3", "dyck1"), "models": tuple(LENGTH_MODELS),
                  "protocols": PROTOCOLS, "seeds": (0, 1, 2), "epochs": 12, "n": 2000,
                  "max_eval_length": 256, "n_eval": 200},
    "paper": {"tasks": ("parity", "mod3", "dyck1"), "models": tuple(LENGTH_MODELS),
              "protocols": PROTOCOLS, "seeds": tuple(range(5)), "epochs": 100, "n": 5000,
              "max_eval_length": 256, "n_eval": 500},
}  # fmt: skip


def length_grid(grid: str) -> list[LengthRun]:
    """The runs of a length grid, seed-major (a partial sweep covers every cell)."""
    spec = LENGTH_GRIDS[check_choice("grid", grid, LENGTH_GRIDS)]
    return [
        LengthRun(
            task=task,
            model=model,
            model_options=MODEL_SIZES[model],
            protocol=protocol,
            train_length=16 if protocol == "fixed" else 40,
            n=spec["n"],
            epochs=spec["epochs"],
            seed=seed,
            max_eval_length=spec["max_eval_length"],
            n_eval=spec["n_eval"],
        )
        for seed in spec["seeds"]
        for task in spec["tasks"]
        for protocol in spec["protocols"]
        for model in spec["models"]
    ]


def run_length_grid(
    grid: str, store: RunStore | None = None, run_missing: bool = True, progress: bool = True
):
    """Curves of every run of a grid (``run_missing=False``: only the cached ones)."""
    store = store or RunStore()
    if run_missing:
        records = sweep_lengths(length_grid(grid), store, progress)
    else:
        records = [
            r for r in (store.load(EXPERIMENT, c) for c in length_grid(grid)) if r is not None
        ]
    return curves_frame(records).assign(grid=grid) if records else pd.DataFrame()
