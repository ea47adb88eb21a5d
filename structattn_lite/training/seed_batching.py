"""Train S seeds of one config at once, each as if alone: one stacked model per group.

``stack_models`` turns reference models of one config into one stacked model (every
parameter with a leading seed axis: ``models.csp_stacked``, ``models.csp_authors_stacked``)
and ``unstack_model`` takes a seed back out. ``run_csp_stacked(configs)`` is ``run_csp``
for configs equal but for their seed, trained together by ``StackedTrainer`` (per-seed
data order, Adam, lr schedule, clipping, NaN guard and stop rule: see
``training.stacked_trainer``), and returns the records ``run_csp`` would. A model with no
stacked form (the baselines) runs one seed at a time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import torch
from torch import nn

from structattn_lite.training.stacked_trainer import StackedTrainer, per_seed_loss

# --- stacked CSP runs ------------------------------------------------------------------


def stack_models(models: Sequence[nn.Module]) -> nn.Module | None:
    """One stacked model for reference models of one config, or None if it has no stacked form."""
    from structattn_lite.models.csp import CSP
    from structattn_lite.models.csp_authors import AuthorsCSP
    from structattn_lite.models.csp_authors_stacked import stack_authors
    from structattn_lite.models.csp_stacked import stack_csps

    if all(type(m) is CSP for m in models) and len({m.cfg for m in models}) == 1:
        return stack_csps(list(models))
    if all(type(m) is AuthorsCSP for m in models) and len({m.cfg for m in models}) == 1:
        return stack_authors(list(models))
    return None


def unstack_model(stacked: nn.Module, i: int, template: nn.Module | None = None) -> nn.Module:
    """Seed ``i`` of a model made by ``stack_models``, as its reference model (a copy).

    ``template`` (one of the stacked reference models) is accepted for symmetry and unused.
    """
    from structattn_lite.models.csp_stacked import StackedCSP, unstack_csp

    if isinstance(stacked, StackedCSP):
        return unstack_csp(stacked, i)
    from structattn_lite.models.csp_authors_stacked import StackedAuthorsCSP, unstack_authors

    if isinstance(stacked, StackedAuthorsCSP):
        return unstack_authors(stacked, i)
    raise ValueError(f"not a stacked model: {type(stacked).__name__}")


def _without_seed(cfg) -> str:
    from structattn_lite.records import config_hash

    return config_hash("group", dataclasses.replace(cfg, seed=0))


def run_csp_stacked(
    configs: Sequence, progress: bool = False, device: str = "cpu", checkpoint=None
) -> list:
    """``run_csp`` for configs equal but for their seed, trained together; one record each.

    Records are keyed and filled as ``run_csp`` keys and fills them (plus ``seed_batched``,
    the number of seeds trained together), so a ``RunStore`` serves either path's records.
    A model with no stacked form (the baselines) runs one seed at a time through ``run_csp``.
    ``checkpoint``, a ``stacked=True`` plan, checkpoints the stacked unit; seeds run one at
    a time do not checkpoint (one file cannot hold several runs).
    """
    from structattn_lite.models import count_parameters
    from structattn_lite.records import RunRecord
    from structattn_lite.training.state_tracking import (
        EXPERIMENT,
        build_csp_model,
        build_data,
        evaluation_row,
        run_csp,
    )

    configs = list(configs)
    if len({_without_seed(c) for c in configs}) > 1:
        raise ValueError("run_csp_stacked needs configs that differ only in their seed")
    data = [build_data(c) for c in configs]
    models = []
    for c, d in zip(configs, data, strict=True):
        torch.manual_seed(c.seed)
        models.append(build_csp_model(c, d.n_classes, d.vocab_size))
    splits = ("x_train", "y_train", "x_test", "y_test", "x_val", "y_val")
    shapes = {
        tuple(None if getattr(d, n) is None else getattr(d, n).shape for n in splits) for d in data
    }
    stacked = stack_models(models) if configs and len(shapes) == 1 else None
    if stacked is None:
        return [run_csp(c, progress=progress, device=device) for c in configs]
    cfg0, n_seeds = configs[0], len(configs)
    stacked = stacked.to(device)
    x_train, y_train, x_test, y_test, x_val, y_val = (
        None
        if getattr(data[0], name) is None
        else torch.stack([getattr(d, name) for d in data]).to(device)
        for name in splits
    )
    has_val = x_val is not None and x_val.shape[1] > 0
    loss, last_only = per_seed_loss(cfg0.loss), cfg0.labels == "sequence"
    chunk = max(64, 256 // n_seeds)  # rows per seed and evaluation pass (measured best)

    def loss_fn(model, x, y):
        return loss(model(x, last=True), y[:, :, -1]) if last_only else loss(model(x), y)

    def batches(generators):
        orders = torch.stack(
            [torch.randperm(x_train.shape[1], generator=g) for g in generators]
        ).to(device)
        seeds = torch.arange(n_seeds, device=device)[:, None]
        for i in range(0, orders.shape[1], cfg0.batch_size):
            idx = orders[:, i : i + cfg0.batch_size]
            yield x_train[seeds, idx], y_train[seeds, idx]

    def predict(model, x, y):
        """Predictions and targets per seed, at the last position only if only it is scored."""
        if last_only:
            return model.predict(x, chunk, last=True)[..., None], y[..., -1:]
        return model.predict(x, chunk), y

    def evaluate(model):
        p_train, ys_train = predict(model, x_train, y_train)
        p_test, ys_test = predict(model, x_test, y_test)
        p_val, ys_val = predict(model, x_val, y_val) if has_val else (None, None)
        out = []
        for s in range(n_seeds):
            val = (p_val[s], ys_val[s]) if has_val else (None, None)
            train, test = (p_train[s], ys_train[s]), (p_test[s], ys_test[s])
            out.append(evaluation_row(cfg0.labels, train, test, val))
        return out

    def held_perfect(rows):  # reads the validation split, never the test split
        k = cfg0.hold_perfect
        return k is not None and len(rows) >= k and all(r.get("val_acc") == 1.0 for r in rows[-k:])

    trainer = StackedTrainer(stacked, loss_fn, cfg0.optim, checkpoint=checkpoint)
    generators = [torch.Generator().manual_seed(c.seed) for c in configs]
    start = time.perf_counter()
    results = trainer.fit(cfg0.epochs, batches, evaluate, generators, stop_when=held_perfect)
    seconds = (time.perf_counter() - start) / n_seeds
    return [
        RunRecord.from_training(
            EXPERIMENT,
            c,
            r,
            step_grad_norms=r.step_grad_norms,
            n_parameters=count_parameters(m),
            seconds=seconds,
            data=d.summary(),
            seed_batched=n_seeds,
        )
        for c, r, d, m in zip(configs, results, data, models, strict=True)
    ]
