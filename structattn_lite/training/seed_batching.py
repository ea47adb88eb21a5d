"""Train S seeds of one config at once, each as if alone: one stacked model per group.

``stack_models`` turns reference models of one config into one stacked model (every
parameter with a leading seed axis: ``models.csp_stacked``, ``models.csp_authors_stacked``)
and ``unstack_model`` takes a seed back out. ``run_csp_stacked(configs)`` is ``run_csp``
for configs equal but for their seed, trained together by ``StackedTrainer`` (per-seed
data order, Adam, lr schedule, clipping, NaN guard and stop rule: see
``training.stacked_trainer``), and returns the records ``run_csp`` would. A model with no
stacked form (the baselines) runs one seed at a time. ``SeedBatch`` keeps the older
torch.func.vmap route for any model (slower than separate runs at d >= 32).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Sequence

import torch
from torch import nn

from structattn_lite.training.stacked_trainer import (  # noqa: F401  (the public names)
    StackedAdam,
    StackedTrainer,
    _per_seed,
    per_seed_grad_norm,
    per_seed_loss,
)
from structattn_lite.training.trainer import OptimConfig

# --- stacked CSP runs ------------------------------------------------------------------


def stack_models(models: Sequence[nn.Module]) -> nn.Module | None:
    """One stacked model for reference models of one config, or None if it has no stacked form."""
    from structattn_lite.models.csp import CSP
    from structattn_lite.models.csp_stacked import stack_csps

    if all(type(m) is CSP for m in models) and len({m.cfg for m in models}) == 1:
        return stack_csps(list(models))
    try:
        from structattn_lite.models.csp_authors import AuthorsCSP
        from structattn_lite.models.csp_authors_stacked import stack_authors
    except ImportError:  # no stacked form of the authors' model in this checkout
        return None
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


def run_csp_stacked(configs: Sequence, progress: bool = False, device: str = "cpu") -> list:
    """``run_csp`` for configs equal but for their seed, trained together; one record each.

    Records are keyed and filled as ``run_csp`` keys and fills them (plus ``seed_batched``,
    the number of seeds trained together), so a ``RunStore`` serves either path's records.
    A model with no stacked form (the baselines) runs one seed at a time through ``run_csp``.
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

    trainer = StackedTrainer(stacked, loss_fn, cfg0.optim)
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


run_csp_batched = run_csp_stacked  # the earlier name


def sweep_batched(configs: Sequence, store=None, progress: bool = True) -> list:
    """Like ``sweep``, but the seeds of one config are trained together.

    Cached records are reused; records come back in the order of ``configs``.
    """
    from tqdm.auto import tqdm

    from structattn_lite.records import RunStore
    from structattn_lite.training.state_tracking import EXPERIMENT

    store = store or RunStore()
    found = {i: store.load(EXPERIMENT, c) for i, c in enumerate(configs)}
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        if found[i] is None:
            groups.setdefault(_without_seed(c), []).append(i)
    for idx in tqdm(list(groups.values()), desc="seed groups", disable=not progress):
        records = run_csp_stacked([configs[i] for i in idx])
        for i, r in zip(idx, records, strict=True):
            store.save(r)
            found[i] = r
    return [found[i] for i in range(len(configs))]


# --- the torch.func.vmap route, for any model (slower than separate runs at d >= 32) ---


def supports_vmap(model: nn.Module, vocab_size: int = 2) -> bool:
    """Whether ``model`` can run under torch.func.vmap (nn.LSTM/GRU cannot)."""
    from torch.func import functional_call, stack_module_state, vmap

    params, buffers = stack_module_state([model, model])
    base = copy.deepcopy(model).to("meta")
    x = torch.randint(0, vocab_size, (2, 3, 4))
    try:
        vmap(lambda p, b, xi: functional_call(base, (p, b), (xi,)))(params, buffers, x)
    except Exception:  # any unsupported op
        return False
    return True


class SeedBatch:
    """K models of one architecture stepped together through torch.func.vmap."""

    def __init__(self, models: Sequence[nn.Module], optim: OptimConfig | None = None):
        from torch.func import stack_module_state

        self.k, self.optim = len(models), optim or OptimConfig()
        params, self.buffers = stack_module_state(list(models))
        self.params = {n: p.detach().clone() for n, p in params.items()}
        self.base = copy.deepcopy(models[0]).to("meta")
        self.adam = StackedAdam(
            list(self.params.values()), self.optim.lr, self.k, self.optim.weight_decay
        )

    def forward(self, params, x):
        """Logits [K, B, T, C] for stacked tokens x [K, B, T]."""
        from torch.func import functional_call, vmap

        return vmap(lambda p, b, xi: functional_call(self.base, (p, b), (xi,)))(
            params, self.buffers, x
        )

    def train_step(self, x, y, loss_fn, active) -> tuple[torch.Tensor, torch.Tensor]:
        params = {n: p.detach().requires_grad_(True) for n, p in self.params.items()}
        losses = torch.stack(
            [loss_fn(lg, yi) for lg, yi in zip(self.forward(params, x), y, strict=True)]
        )
        grads = list(torch.autograd.grad(losses.sum(), list(params.values())))
        norms = per_seed_grad_norm(grads)
        max_norm = self.optim.clip if self.optim.clip is not None else math.inf
        coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        grads = [g * _per_seed(coef, g) for g in grads]
        finite = torch.isfinite(losses.detach()) & torch.isfinite(norms)
        self.adam.step(grads, active & finite)
        return losses.detach(), norms


@torch.no_grad()
def predict_stacked(batch, x: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """Class predictions [K, N, T] of every seed on its own inputs x [K, N, T]."""
    if isinstance(batch, nn.Module):
        return batch.predict(x, chunk)
    out = [
        batch.forward(batch.params, x[:, i : i + chunk]).argmax(-1)
        for i in range(0, x.shape[1], chunk)
    ]
    return torch.cat(out, 1)
