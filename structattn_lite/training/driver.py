"""One driver for every state-tracking run: the grokking, ablation and length studies.

A study describes one config's run as a ``Setup`` and turns a trained run into its
``RunRecord``; the driver builds the rest in one place (the loss, the batch sampler, the
evaluation and the stop rule). ``train_seeds`` trains one config, or configs equal but for
their seed on the one ``Trainer``: a model with a stacked form as a stack of its seeds (one
seed included), any other as a plain model, one seed at a time (``run_alone``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from structattn_lite.records import RunRecord, without_seed
from structattn_lite.training.checkpoint import CheckpointPlan
from structattn_lite.training.losses import get_loss, per_seed_loss
from structattn_lite.training.metrics import predict
from structattn_lite.training.seed_batching import stack_models, unstack_model
from structattn_lite.training.trainer import Trainer


@dataclass(frozen=True)
class ValidationStop:
    """Stop once ``metric`` (a validation column) has been at least ``level`` for the last
    ``patience`` epochs; an epoch without it counts as 0. It never reads a test column."""

    metric: str
    level: float
    patience: int

    def __post_init__(self):
        if not self.metric.startswith("val_"):
            raise ValueError(f"a stop rule reads validation only, not {self.metric!r}")

    def __call__(self, rows: list[dict[str, Any]]) -> bool:
        k = self.patience
        return len(rows) >= k and all(r.get(self.metric, 0.0) >= self.level for r in rows[-k:])


Preds = dict[str, tuple[torch.Tensor | None, torch.Tensor | None]]


@dataclass
class Setup:
    """One config's run, as its study builds it.

    ``tensors``: ``x_train``/``y_train`` (absent when ``sample`` draws the batches) and
    ``x_<name>``/``y_<name>`` of each evaluation set in ``evals``. ``score(preds)`` makes an
    epoch's row from ``{name: (predictions, targets)}``. ``sample(generator)``: an epoch's
    batches, drawn from the seed's generator, instead of a permutation of ``x_train``.
    """

    cfg: Any  # epochs, batch_size, loss, optim and seed are read from it
    model: nn.Module
    tensors: dict[str, torch.Tensor | None]
    evals: tuple[str, ...]
    score: Callable[[Preds], dict[str, float]]
    stop: ValidationStop | None = None
    last_only: bool = False
    sample: Callable[[torch.Generator], Iterable[tuple]] | None = None
    desc: str = "train"
    context: dict[str, Any] = field(default_factory=dict)  # what the study's record reads


# record(setup, result, seconds, trained_model, **extra) -> RunRecord; ``trained_model()``
# gives the seed's trained model (unstacked, for a stacked run) and ``extra`` is
# {"seed_batched": S, "stack": [its S seeds]} for a stacked run (S = 1 included): a seed's
# float32 numbers can depend on the seeds it trained beside (the elementwise kernels treat
# a tensor's last elements apart), so the record says which they were.
Record = Callable[..., RunRecord]


def run_alone(
    setup: Setup,
    record: Record,
    *,
    callbacks: Sequence[Any] = (),
    progress: bool = False,
    device: str = "cpu",
    checkpoint: CheckpointPlan | None = None,
) -> RunRecord:
    """Train one config as a plain model (the ``Trainer``'s plain step) from its seed;
    identical setups, identical runs.

    ``train_seeds``' path for a model with no stacked form; for a CSP, its readable model
    trained this way is the reference the stacked path is tested equal to."""
    options = dict(callbacks=callbacks, progress=progress, device=device, checkpoint=checkpoint)
    return _train([setup], record, stacked=False, **options)[0]


def train_seeds(
    configs: Sequence,
    setup: Callable[[Any], Setup],
    record: Record,
    *,
    callbacks: Sequence[Any] = (),
    progress: bool = False,
    device: str = "cpu",
    checkpoint: CheckpointPlan | None = None,
    eval_chunk: int = 512,
) -> list[RunRecord]:
    """Train configs equal but for their seed (one config or several), one record each.

    A model with a stacked form trains as one stack on the ``Trainer``, each seed as
    ``run_alone`` would train it; that is its only training path, one seed included. A
    model without one (the baselines) trains as a plain model one seed at a time
    (``run_alone``), and seeds whose tensors differ in shape train as stacks of one;
    either way only a lone config takes the checkpoint (one file holds one unit).
    """
    configs = list(configs)
    if len({without_seed(c) for c in configs}) > 1:
        raise ValueError("seeds trained together need configs that differ only in their seed")
    if not configs:
        return []
    options = dict(callbacks=callbacks, progress=progress, device=device)
    alone_plan = checkpoint if len(configs) == 1 else None
    first = setup(configs[0])
    if stack_models([first.model]) is None:  # each setup built just before its run trains
        lazily = itertools.chain([first], (setup(c) for c in configs[1:]))
        return [run_alone(s, record, checkpoint=alone_plan, **options) for s in lazily]
    setups = [first, *(setup(c) for c in configs[1:])]
    shapes = {tuple((k, getattr(v, "shape", None)) for k, v in s.tensors.items()) for s in setups}
    if len(shapes) > 1:
        return [
            train_seeds([c], setup, record, **options, eval_chunk=eval_chunk)[0] for c in configs
        ]
    options |= dict(checkpoint=checkpoint, eval_chunk=eval_chunk)
    return _train(setups, record, stacked=True, **options)


def _train(
    setups: list[Setup],
    record: Record,
    *,
    stacked: bool,
    callbacks: Sequence[Any],
    progress: bool,
    device: str,
    checkpoint: CheckpointPlan | None,
    eval_chunk: int = 512,
) -> list[RunRecord]:
    """Train configs equal but for their seed on one ``Trainer``: a stack of their models
    (``stacked``), or one plain model (a stack of one seed whose tensors keep their seed
    axis of 1 until the model is called, so both take the same batches)."""
    first, n_seeds = setups[0], len(setups)
    cfg0, bs, last_only = first.cfg, first.cfg.batch_size, first.last_only
    model = (stack_models([s.model for s in setups]) if stacked else first.model).to(device)
    t = {
        k: None if v is None else torch.stack([s.tensors[k] for s in setups]).to(device)
        for k, v in first.tensors.items()
    }
    loss = (per_seed_loss if stacked else get_loss)(cfg0.loss)

    def loss_fn(m, x, y):  # a plain model takes its one seed's batch, without the seed axis
        if stacked:
            return loss(m(x, last=True), y[:, :, -1]) if last_only else loss(m(x), y)
        logits, y = m(x[0]), y[0]
        return loss(logits[:, -1], y[:, -1]) if last_only else loss(logits, y)

    def seeds(generators):  # a plain model's one generator as a stack's
        return generators if stacked else [generators]

    if first.sample is None:
        x_train, y_train = t["x_train"], t["y_train"]
        index = torch.arange(n_seeds, device=device)[:, None]

        def batches(generators):
            orders = torch.stack(
                [torch.randperm(x_train.shape[1], generator=g) for g in seeds(generators)]
            ).to(device)
            for i in range(0, orders.shape[1], bs):
                idx = orders[:, i : i + bs]
                yield x_train[index, idx], y_train[index, idx]
    else:

        def batches(generators):  # each seed's draw (on the CPU, seeded), stacked
            draws = [s.sample(g) for s, g in zip(setups, seeds(generators), strict=True)]
            for batch in zip(*draws, strict=True):
                yield tuple(torch.stack(parts).to(device) for parts in zip(*batch, strict=True))

    def predict_seeds(m, x, y):
        """Predictions and targets per seed, at the last position only if only it is scored
        (a plain model predicts every position)."""
        if not stacked:
            return predict(m, x[0])[None], y
        if last_only:
            return m.predict(x, eval_chunk, last=True)[..., None], y[..., -1:]
        return m.predict(x, eval_chunk), y

    def evaluate(m):
        preds = {}
        for name in first.evals:
            x, y = t.get(f"x_{name}"), t.get(f"y_{name}")
            present = x is not None and x.shape[1] > 0  # [S, N, ...]: any rows
            preds[name] = predict_seeds(m, x, y) if present else (None, None)
        scores = [
            s.score({k: (p[i], y[i]) if p is not None else (p, y) for k, (p, y) in preds.items()})
            for i, s in enumerate(setups)
        ]
        return scores if stacked else scores[0]

    trainer = Trainer(
        model, loss_fn, cfg0.optim, callbacks=callbacks, progress=progress, checkpoint=checkpoint
    )
    generators = [torch.Generator().manual_seed(s.cfg.seed) for s in setups]
    start = time.perf_counter()
    results = trainer.fit(
        cfg0.epochs,
        batches,
        evaluate,
        generators if stacked else generators[0],
        first.stop,
        [s.desc for s in setups] if stacked else first.desc,
    )
    seconds = (time.perf_counter() - start) / n_seeds
    if not stacked:
        return [record(first, results, seconds, lambda: model)]
    return [
        record(
            s,
            r,
            seconds,
            lambda i=i: unstack_model(model, i),
            seed_batched=n_seeds,
            stack=[x.cfg.seed for x in setups],
        )  # fmt: skip
        for i, (s, r) in enumerate(zip(setups, results, strict=True))
    ]
