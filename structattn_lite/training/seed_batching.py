"""Train several seeds of one architecture at once: parameters stacked, forward vmapped.

On a small CPU a CSP step is mostly Python and dispatch overhead, so K seeds in one
vmapped step cost far less than K steps. Everything per seed stays per seed: its own
initialisation, data, batch order, gradient clipping, Adam state, plateau schedule,
NaN guard and stop rule; the sum of the K losses has exactly each seed's gradient on
its own slice of the stacked parameters. The result matches K separate ``Trainer`` runs
to floating-point tolerance (``tests/test_ablations.py`` checks histories and weights).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from structattn_lite.training.trainer import OptimConfig, TrainResult


def supports_vmap(model: nn.Module, vocab_size: int = 2) -> bool:
    """Whether ``model`` can run under torch.func.vmap (nn.LSTM/GRU cannot)."""
    params, buffers = stack_module_state([model, model])
    base = copy.deepcopy(model).to("meta")
    x = torch.randint(0, vocab_size, (2, 3, 4))
    try:
        vmap(lambda p, b, xi: functional_call(base, (p, b), (xi,)))(params, buffers, x)
    except Exception:  # any unsupported op: fall back to one seed at a time
        return False
    return True


class StackedAdam:
    """torch.optim.Adam's single-tensor update, with one learning rate per seed."""

    def __init__(self, params: dict[str, torch.Tensor], optim: OptimConfig, k: int):
        self.params, self.wd = params, optim.weight_decay
        self.lr = torch.full((k,), optim.lr)
        self.m = {n: torch.zeros_like(p) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in params.items()}
        self.steps = torch.zeros(k)

    @torch.no_grad()
    def step(
        self, grads: dict[str, torch.Tensor], active: torch.Tensor, b1=0.9, b2=0.999, eps=1e-8
    ):
        self.steps += active.float()
        t = self.steps.clamp(min=1)
        step_size = self.lr / (1 - b1**t)
        bc2_sqrt = (1 - b2**t).sqrt()
        for name, p in self.params.items():
            g = grads[name]
            if self.wd:
                g = g + self.wd * p
            shape = (-1,) + (1,) * (p.dim() - 1)
            on = active.view(shape)
            self.m[name] = torch.where(on, self.m[name].lerp(g, 1 - b1), self.m[name])
            self.v[name] = torch.where(on, self.v[name] * b2 + (1 - b2) * g * g, self.v[name])
            denom = self.v[name].sqrt() / bc2_sqrt.view(shape) + eps
            p.sub_(torch.where(on, step_size.view(shape) * self.m[name] / denom, 0.0))


class SeedBatch:
    """K models of one architecture trained in lockstep, one slice of the stack per seed."""

    def __init__(self, models: Sequence[nn.Module], optim: OptimConfig | None = None):
        self.k, self.optim = len(models), optim or OptimConfig()
        params, self.buffers = stack_module_state(list(models))
        self.params = {n: p.detach().clone() for n, p in params.items()}
        self.base = copy.deepcopy(models[0]).to("meta")
        self.adam = StackedAdam(self.params, self.optim, self.k)
        self.dummies = [torch.zeros(1, requires_grad=True) for _ in range(self.k)]
        self.schedulers = [  # torch's own plateau logic, one per seed, read back as lr
            torch.optim.lr_scheduler.ReduceLROnPlateau(
                torch.optim.SGD([d], lr=self.optim.lr),
                factor=self.optim.plateau_factor,
                patience=self.optim.plateau_patience,
            )
            for d in self.dummies
        ]

    def forward(self, params, x):
        """Logits [K, B, T, C] for stacked tokens x [K, B, T]."""
        return vmap(lambda p, b, xi: functional_call(self.base, (p, b), (xi,)))(
            params, self.buffers, x
        )

    def seed_module(self, i: int, template: nn.Module) -> nn.Module:
        """A standalone copy of seed ``i``'s model (for evaluation or saving)."""
        model = copy.deepcopy(template)
        model.load_state_dict({n: p[i] for n, p in {**self.params, **self.buffers}.items()})
        return model

    def train_step(self, x, y, loss_fn, active) -> tuple[torch.Tensor, torch.Tensor]:
        params = {n: p.detach().requires_grad_(True) for n, p in self.params.items()}
        logits = self.forward(params, x)
        losses = torch.stack([loss_fn(logits[i], y[i]) for i in range(self.k)])
        grads = dict(
            zip(params, torch.autograd.grad(losses.sum(), list(params.values())), strict=True)
        )
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()], 1).norm(dim=1)
        max_norm = self.optim.clip if self.optim.clip is not None else math.inf
        coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        finite = torch.isfinite(losses.detach()) & torch.isfinite(norms)
        clipped = {n: g * coef.view((-1,) + (1,) * (g.dim() - 1)) for n, g in grads.items()}
        self.adam.step(clipped, active & finite)
        return losses.detach(), norms

    def fit(
        self,
        epochs: int,
        batches: Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        evaluate: Callable[[SeedBatch], list[dict[str, float]]],
        stop_when: Callable[[list[dict[str, Any]]], bool] | None = None,
    ) -> list[TrainResult]:
        """``batches()`` yields an epoch of stacked (x [K, B, T], y [K, B, T]) batches;
        ``evaluate(self)`` returns one metrics dict per seed."""
        k = self.k
        rows: list[list[dict]] = [[] for _ in range(k)]
        step_norms: list[list[float]] = [[] for _ in range(k)]
        status, reason = ["ok"] * k, [None] * k
        active = torch.ones(k, dtype=torch.bool)
        for epoch in range(1, epochs + 1):
            losses, norms = [], []
            for x, y in batches():
                loss, norm = self.train_step(x, y, loss_fn, active)
                for i in range(k):
                    if active[i]:
                        step_norms[i].append(norm[i].item())
                        if not (math.isfinite(loss[i]) and math.isfinite(norm[i])):
                            what = "loss" if not math.isfinite(loss[i]) else "gradient norm"
                            status[i] = "diverged"
                            reason[i] = (
                                f"non-finite {what} at epoch {epoch}, step {len(step_norms[i])}"
                            )
                            active[i] = False
                losses.append(loss)
                norms.append(norm)
            if not active.any():
                break
            loss_t, norm_t = torch.stack(losses), torch.stack(norms)
            metrics = evaluate(self)
            for i in range(k):
                if not active[i]:
                    continue
                train_loss = loss_t[:, i].mean().item()
                rows[i].append(
                    {
                        "epoch": epoch,
                        "train_loss": train_loss,
                        "grad_norm_mean": norm_t[:, i].mean().item(),
                        "grad_norm_max": norm_t[:, i].max().item(),
                        "lr": self.adam.lr[i].item(),
                        **metrics[i],
                    }
                )
                self.schedulers[i].step(train_loss)
                self.adam.lr[i] = self.schedulers[i].optimizer.param_groups[0]["lr"]
                if stop_when is not None and stop_when(rows[i]):
                    status[i], reason[i] = "early_stop", f"stop rule met at epoch {epoch}"
                    active[i] = False
            if not active.any():
                break
        return [
            TrainResult(pd.DataFrame(rows[i]), step_norms[i], status[i], reason[i])
            for i in range(k)
        ]


@torch.no_grad()
def predict_stacked(batch: SeedBatch, x: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """Class predictions [K, N, T] of every seed on its own inputs x [K, N, T]."""
    out = [
        batch.forward(batch.params, x[:, i : i + chunk]).argmax(-1)
        for i in range(0, x.shape[1], chunk)
    ]
    return torch.cat(out, 1)


def _without_seed(cfg) -> str:
    from structattn_lite.runs import config_hash

    return config_hash("group", dataclasses.replace(cfg, seed=0))


def run_csp_batched(configs: Sequence, progress: bool = False) -> list:
    """``run_csp`` for configs that differ only in their seed, trained in one batch.

    Returns one ``RunRecord`` per config, keyed exactly as ``run_csp`` keys it, so the
    ``RunStore`` serves either path's records interchangeably.
    """
    import time

    from structattn_lite.models import count_parameters
    from structattn_lite.runs import RunRecord
    from structattn_lite.training.losses import get_loss
    from structattn_lite.training.metrics import scores
    from structattn_lite.training.state_tracking import EXPERIMENT, build_csp_model, build_data

    if len({_without_seed(c) for c in configs}) != 1:
        raise ValueError("run_csp_batched needs configs that differ only in their seed")
    cfg0 = configs[0]
    data = [build_data(c) for c in configs]
    models = []
    for c, d in zip(configs, data, strict=True):
        torch.manual_seed(c.seed)
        models.append(build_csp_model(c, d.n_classes))
    loss, labels = get_loss(cfg0.loss), cfg0.labels
    last_only = labels == "sequence"
    gens = [torch.Generator().manual_seed(c.seed) for c in configs]
    batch = SeedBatch(models, cfg0.optim)

    def loss_fn(logits, y):
        return loss(logits[:, -1], y[:, -1]) if last_only else loss(logits, y)

    def batches():
        orders = [
            torch.randperm(len(d.x_train), generator=g) for d, g in zip(data, gens, strict=True)
        ]
        for i in range(0, len(orders[0]), cfg0.batch_size):
            idx = [o[i : i + cfg0.batch_size] for o in orders]
            yield (
                torch.stack([d.x_train[j] for d, j in zip(data, idx, strict=True)]),
                torch.stack([d.y_train[j] for d, j in zip(data, idx, strict=True)]),
            )

    x_train = torch.stack([d.x_train for d in data])
    x_test = torch.stack([d.x_test for d in data])

    def evaluate(b):
        p_train, p_test = predict_stacked(b, x_train), predict_stacked(b, x_test)
        out = []
        for i, d in enumerate(data):
            tr, te = scores(p_train[i], d.y_train, labels), scores(p_test[i], d.y_test, labels)
            last = scores(p_test[i], d.y_test, "sequence")
            out.append(
                {
                    "train_acc": tr["acc"],
                    "test_acc": te["acc"],
                    "test_f1": te["f1"],
                    "test_seq_acc": last["acc"],
                    "test_seq_f1": last["f1"],
                }
            )
        return out

    def held_perfect(rows):
        k = cfg0.hold_perfect
        return k is not None and len(rows) >= k and all(r["test_acc"] == 1.0 for r in rows[-k:])

    start = time.perf_counter()
    results = batch.fit(cfg0.epochs, batches, loss_fn, evaluate, stop_when=held_perfect)
    seconds = (time.perf_counter() - start) / len(configs)
    return [
        RunRecord.from_training(
            EXPERIMENT,
            c,
            r,
            step_grad_norms=r.step_grad_norms,
            n_parameters=count_parameters(models[0]),
            seconds=seconds,
            seed_batched=len(configs),
            data=d.summary(),
        )
        for c, r, d in zip(configs, results, data, strict=True)
    ]


def sweep_batched(configs: Sequence, store=None, progress: bool = True) -> list:
    """Like ``csp_study.sweep``, but seeds of one config are trained together.

    Cached records are reused; models that cannot be vmapped (LSTM, GRU) run one seed
    at a time through ``run_csp``. Records come back in the order of ``configs``.
    """
    from tqdm.auto import tqdm

    from structattn_lite.runs import RunStore
    from structattn_lite.training.state_tracking import EXPERIMENT, build_csp_model, run_csp

    store = store or RunStore()
    found = {i: store.load(EXPERIMENT, c) for i, c in enumerate(configs)}
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        if found[i] is None:
            groups.setdefault(_without_seed(c), []).append(i)
    for idx in tqdm(list(groups.values()), desc="seed groups", disable=not progress):
        group = [configs[i] for i in idx]
        if len(group) > 1 and supports_vmap(build_csp_model(group[0], 2)):
            records = run_csp_batched(group)
        else:
            records = [run_csp(c, progress=False) for c in group]
        for i, r in zip(idx, records, strict=True):
            store.save(r)
            found[i] = r
    return [found[i] for i in range(len(configs))]
