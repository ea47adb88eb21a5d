"""The attention study: dot vs dense vs matroidal attention in a small Transformer.

The study contract (``structattn_lite.runs.sweep``): ``EXPERIMENT``, ``Config`` (checked
when built), ``GRIDS`` and ``grid(name)``, ``run(config)`` and ``export(records)``.

Fair tuning. Each variant (kind, m, shared or separate q/k) gets its own peak learning
rate: ``tuning_grid(name)`` trains it at every rate of the grid's ``lrs`` on its tuning seeds,
``choose_lrs`` keeps the rate with the best *validation* number, and ``final_grid``
trains every seed at that rate; only the final runs read the test split, once, at the
end (``Config.read_test``). ``grid(name)`` is the tuning grid followed, once its records
are on disk, by the final grid, so ``sweep(study, grid(name))`` twice runs everything
(``runs.run_grid`` does both). tau starts at sqrt(d_head) and is learned per head.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from structattn_lite import config as cfgmod
from structattn_lite.config import check_bools, check_choice, check_int, check_number, check_seed
from structattn_lite.data import cifar10_available
from structattn_lite.data.text import resolve_dataset
from structattn_lite.models.attention import ATTENTION_KINDS
from structattn_lite.models.attention_checks import (
    attention_maps,
    learned_weights,
    model_failures,
    model_flops,
    time_attention,
)
from structattn_lite.models.lm import CharLM, LMConfig, PatchClassifier, parameter_report
from structattn_lite.records import RunRecord, config_dict, config_hash
from structattn_lite.studies.attention import results
from structattn_lite.studies.attention.grids import (
    COMMITTED_CSV,
    GRIDS,
    IMAGE_DATASETS,
    variant_configs,
)
from structattn_lite.studies.attention.recipe import Recipe, lr_at
from structattn_lite.studies.attention.tables import rate_sweep, variant_key, variant_label
from structattn_lite.theory.support import SUPPORT_RULES
from structattn_lite.training.checkpoint import CheckpointPlan
from structattn_lite.training.options import OptimConfig, TrainResult

EXPERIMENT = "attention"
DATASETS = ("ptb", "fallback", *IMAGE_DATASETS)


@dataclass(frozen=True)
class Config:
    """Everything that determines one run; its hash keys the cached record."""

    dataset: str = "ptb"  # "ptb", "fallback" (stdlib docstrings), "digits", "cifar10"
    kind: str = "matroidal"
    m: int | None = None  # matroidal support columns (None: 2 d_head)
    shared_qk: bool = True  # the seed's one projection z for queries and keys
    support: str = "random"  # drawn from ``seed`` for the random rule
    tau: float | None = None  # starting tau (None: sqrt(d_head))
    learn_tau: bool = True
    eps: float = 1e-4
    d_model: int = 128
    n_heads: int = 8
    n_layers: int = 2
    tie_weights: bool = False  # language model only (measured slower to learn early: off)
    block_size: int = 128
    batch_size: int = 32
    data_fraction: float = 1.0  # leading fraction of the training text (or images)
    recipe: Recipe = field(default_factory=Recipe)
    eval_windows: int = 256  # validation windows (or images) per learning-curve point
    final_eval_windows: int = 3000
    read_test: bool = False  # final runs only: the test split, once, after training
    prune_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)  # delta = this quantile of l
    prune_finetune_steps: int = 0  # steps at the final rate after each pruning
    seed: int = 0

    def __post_init__(self):
        check_choice("dataset", self.dataset, DATASETS)
        check_choice("kind", self.kind, ATTENTION_KINDS)
        check_choice("support", self.support, SUPPORT_RULES)
        if self.m is not None:
            check_int("m", self.m, minimum=1)
        check_bools(self)  # shared_qk, learn_tau, tie_weights, read_test: 1 is not True
        if self.tau is not None:
            check_number("tau", self.tau, minimum=0.0, strict=True)
        check_number("eps", self.eps, minimum=0.0)
        for name in ("d_model", "n_heads", "n_layers", "block_size", "batch_size",
                     "eval_windows", "final_eval_windows"):  # fmt: skip
            check_int(name, getattr(self, name), minimum=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        check_number("data_fraction", self.data_fraction, minimum=0.0, strict=True)
        if self.data_fraction > 1:
            raise ValueError(f"data_fraction must be in (0, 1], got {self.data_fraction}")
        if not isinstance(self.recipe, Recipe):
            raise ValueError(f"recipe must be a Recipe, got {type(self.recipe).__name__}")
        for f in self.prune_fractions:
            check_number("prune_fractions", f, minimum=0.0, strict=True)
        check_int("prune_finetune_steps", self.prune_finetune_steps, minimum=0)
        check_seed("seed", self.seed)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def replace(cfg: Config, **changes) -> Config:
    return dataclasses.replace(cfg, **changes)


def with_recipe(cfg: Config, **changes) -> Config:
    return replace(cfg, recipe=dataclasses.replace(cfg.recipe, **changes))


def attention_options(cfg: Config) -> dict[str, Any]:
    """The config's fields that its kind's class takes (``options``), by their names there."""
    fields = {"shared_qk": cfg.shared_qk, "tau": cfg.tau, "eps": cfg.eps,
              "learn_tau": cfg.learn_tau, "m": cfg.m, "support": cfg.support,
              "support_seed": cfg.seed}  # fmt: skip
    takes = ATTENTION_KINDS[cfg.kind].options
    return {name: value for name, value in fields.items() if name in takes}


# --- one run ----------------------------------------------------------------------


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on the matrices of linear layers only (not on embeddings, norms,
    biases, positions or the metric parameters)."""
    decay = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    if hasattr(model, "tok"):  # a weight tied to the embedding is an embedding
        decay.discard(id(model.tok.weight))
    params = list(dict.fromkeys(model.parameters()))
    return [
        {"params": [p for p in params if id(p) in decay], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) not in decay], "weight_decay": 0.0},
    ]


def grad_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Parameter groups whose gradient norm is logged each step: each layer, and the
    metric parameters of all layers together (empty for dot-product attention)."""
    groups = {f"layer{i}": list(b.parameters()) for i, b in enumerate(model.blocks)}
    groups["metric"] = [p for a in model.attention_modules() for p in a.metric_parameters()]
    return {k: v for k, v in groups.items() if v}


@dataclass
class Outcome(TrainResult):
    """A trained attention run: its ``TrainResult`` (``status`` "ok" or "diverged": a run
    stopped early is a finished run), how it stopped, and its fast-path failure counts."""

    stop: str = "max_steps"  # "max_steps", "early_stop", "time_budget", "diverged"
    stats: dict[str, float] = field(default_factory=dict)  # over the whole run


class FastPathCounts:
    """The model's fast-path failure counts (no model state) for a checkpoint to carry."""

    def __init__(self, model: nn.Module):
        self.model = model

    def state_dict(self) -> list[dict[str, float]]:
        return [a.stats.as_dict() for a in self.model.attention_modules()]

    def load_state_dict(self, saved: list[dict[str, float]]) -> None:
        from structattn_lite.models.attention_base import FastPathStats

        for a, stats in zip(self.model.attention_modules(), saved, strict=True):
            a.stats = FastPathStats(**stats)


def train(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    batch: Callable[[int], Any],
    evaluate: Callable[[nn.Module], dict[str, float]],
    recipe: Recipe,
    monitor: str = "val_loss",
    callbacks: Sequence[Any] = (),
    progress: bool = False,
    checkpoint: CheckpointPlan | None = None,
) -> Outcome:
    """Train ``model`` in place; the best state by ``evaluate(model)[monitor]`` is restored.

    ``batch(step)`` gives step's training batch (it owns its generator, ``batch.generator``,
    so identical seeds give identical runs); ``loss_fn(model, batch)`` returns a scalar in
    nats. Callbacks get ``on_batch_end(trainer, loss, grad_norm)`` and
    ``on_epoch_end(trainer, row)``, one "epoch" per evaluation.
    ``checkpoint`` (not a ``stacked`` plan): save every ``checkpoint.every`` evaluations.
    """
    from structattn_lite.training.trainer import Trainer

    generator = getattr(batch, "generator", None)
    if checkpoint is not None and not isinstance(generator, torch.Generator):
        raise ValueError("checkpointing needs batch.generator, the generator batch(step) draws on")
    model.check_every(recipe.check_every)
    model.reset_stats()
    trainer = Trainer(
        model, loss_fn,
        OptimConfig(lr=recipe.lr, clip=recipe.clip, weight_decay=recipe.weight_decay),
        make_optimizer=lambda m, o: torch.optim.AdamW(
            param_groups(m, o.weight_decay), lr=o.lr, betas=(0.9, recipe.beta2)),
        lr_at=lambda step: lr_at(step, recipe), grad_groups=grad_groups(model),
        precision=recipe.precision, callbacks=callbacks, progress=progress,
        checkpoint=checkpoint, stateful=[FastPathCounts(model)],
        columns=("epoch", "step", "lr", "train_loss", "seconds", "cpu_seconds"),
    )  # fmt: skip
    k, end = recipe.eval_every, recipe.max_steps

    def round_batches(_):  # the next evaluation's steps; batch draws on its own generator
        return ((batch(s),) for s in range(trainer.steps, min(trainer.steps + k, end)))

    result = trainer.fit(
        math.ceil(end / k), round_batches, evaluate,
        generator if generator is not None else torch.Generator(), monitor=monitor,
        patience=recipe.patience, time_budget_s=recipe.time_budget_s,
    )  # fmt: skip
    model.check_every(0)
    stop = "max_steps" if result.status == "ok" else result.status
    status = "diverged" if stop == "diverged" else "ok"
    return Outcome(**{**vars(result), "status": status}, stop=stop, stats=model.fast_path_stats())


def build_task(cfg: Config, corpus=None, device: str = "cpu"):
    """(task, model): the data a run reads (on ``device``) and its freshly initialised model."""
    from structattn_lite.studies.attention.tasks import ImageTask, LMTask

    opts = attention_options(cfg)
    if cfg.dataset in IMAGE_DATASETS:
        task = ImageTask.build(cfg, device)
        n_patches, patch_dim = task.tokens
        torch.manual_seed(cfg.seed)
        lm = LMConfig(vocab_size=1, block_size=n_patches, d_model=cfg.d_model,
                      n_heads=cfg.n_heads, n_layers=cfg.n_layers, attention=cfg.kind,
                      attention_options=opts)  # fmt: skip
        return task, PatchClassifier(lm, patch_dim=patch_dim, n_classes=10)
    task = LMTask.build(cfg, corpus, device)
    torch.manual_seed(cfg.seed)
    lm = LMConfig(vocab_size=len(task.corpus.vocab), block_size=cfg.block_size,
                  d_model=cfg.d_model, n_heads=cfg.n_heads, n_layers=cfg.n_layers,
                  attention=cfg.kind, attention_options=opts, tie_weights=cfg.tie_weights)  # fmt: skip
    return task, CharLM(lm)


def _loss(cfg: Config):
    if cfg.dataset in IMAGE_DATASETS:
        return lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1])
    return lambda m, b: m.loss(*b)


def _pruning(model, task, cfg: Config, loss_fn) -> list[dict[str, float]]:
    """Validation after dropping columns with l_e < delta, delta a quantile of the learned
    l (a fixed delta keeps all or nothing, since every l_e starts equal); each level is
    fine-tuned for ``prune_finetune_steps`` at the run's final rate, then restored."""
    mods = [a for a in model.attention_modules() if a.kind == "matroidal"]
    if not mods:
        return []
    state = {k: v.clone() for k, v in model.state_dict().items()}
    out = [{"fraction": 0.0, "delta": 0.0, "kept": 1.0, **task.evaluate(model, cfg.eval_windows)}]
    l_all = torch.cat([a.weights().detach().flatten() for a in mods])
    tune = dataclasses.replace(cfg.recipe, lr=cfg.recipe.lr * cfg.recipe.min_lr_ratio,
                               warmup_steps=0, min_lr_ratio=1.0, check_every=0,
                               max_steps=max(cfg.prune_finetune_steps, 1), patience=None,
                               time_budget_s=None, eval_every=max(cfg.prune_finetune_steps, 1))  # fmt: skip
    for frac in cfg.prune_fractions:
        delta = float(torch.quantile(l_all, frac))
        kept = sum(a.prune(delta) for a in mods) / len(l_all)
        if cfg.prune_finetune_steps:
            train(model, loss_fn, task.batches(), lambda m: {"v": 0.0}, tune, monitor="v")
        out.append({"fraction": frac, "delta": delta, "kept": kept,
                    **task.evaluate(model, cfg.eval_windows)})  # fmt: skip
        model.load_state_dict(state)
    for a in mods:
        a.unprune()
    return out


def run(config: Config, progress: bool = True, callbacks=(), device: str = "cpu", corpus=None,
        checkpoint=None) -> RunRecord:  # fmt: skip
    """Train one config from its seed; identical configs give identical histories.

    ``corpus`` replaces the language-model corpus (tests pass a doctored one);
    ``checkpoint`` (a ``training.checkpoint.CheckpointPlan``) goes to ``train``, which
    trains on the one ``Trainer``.
    """
    cfg = config
    task, model = build_task(cfg, corpus, device)
    model.to(device)
    monitor = "val_loss" if cfg.dataset in IMAGE_DATASETS else "val_bpc"
    loss_fn = _loss(cfg)
    out = train(model, loss_fn, task.batches(), lambda m: task.evaluate(m, cfg.eval_windows),
                cfg.recipe, monitor=monitor, callbacks=callbacks, progress=progress,
                checkpoint=checkpoint)  # fmt: skip
    history = out.history
    if "train_loss" in history and monitor == "val_bpc":
        history["train_bpc"] = history["train_loss"] / math.log(2)
    check_x = task.check_batch().to(device)
    warmup = cfg.recipe.warmup_steps
    extra = {
        "variant": variant_label(cfg),
        "variant_key": variant_key(cfg),
        "stop": out.stop,
        "steps": out.steps,
        # 0 unless a checkpoint resumed the run, which it saved after a whole round
        "resumed_from_step": out.resumed_from * cfg.recipe.eval_every,
        "best_step": out.best_step,
        "seconds": out.seconds,
        "cpu_seconds": out.cpu_seconds,
        "grad_norms": {k: v[:: max(1, len(v) // 500)] for k, v in out.grad_norms.items()},
        "grad_norm_var": out.grad_norm_variance(after=warmup),
        "fast_path": out.stats,  # counted inside training steps, in the run's precision
        **parameter_report(model),
        **model_flops(model, check_x.shape[1]),
        **time_attention(model, check_x.shape[1]),
    }
    if out.status == "ok":
        extra["final"] = task.evaluate(model, cfg.final_eval_windows)
        if cfg.read_test:  # the only place the test split is read
            extra["final"].update(task.evaluate_test(model, cfg.final_eval_windows))
        extra["audit"] = model_failures(model, check_x)  # reference path, a separate audit
        extra["maps"] = attention_maps(model, check_x[:, :48])
        extra["weights"] = learned_weights(model)
        extra["pruning"] = _pruning(model, task, cfg, loss_fn)
    else:
        extra["reason"] = out.reason
    if hasattr(task, "corpus"):
        data = {**task.corpus.summary(), "train_symbols_used": len(task.train),
                "map_text": task.corpus.decode(check_x[0].cpu())}  # fmt: skip
    else:
        data = {"source": cfg.dataset, "train_images_used": len(task.train_x),
                "val_images": len(task.valid_x)}  # fmt: skip
    extra["data"] = data
    return RunRecord(experiment=EXPERIMENT, key=config_hash(EXPERIMENT, cfg),
                     config=config_dict(cfg), history=history, status=out.status,
                     reason=extra.get("reason"), extra=extra)  # fmt: skip


# --- tuning and grids ---------------------------------------------------------------


def choose_lrs(records: list[RunRecord]) -> dict[str, float]:
    """variant_key -> the peak rate with the lowest ``rate_sweep`` mean."""
    table = rate_sweep(records)
    return {k: float(g.loc[g["best"].idxmin(), "lr"]) for k, g in table.groupby("key")}


def tuning_grid(
    name: str, records: list[RunRecord] = (), dataset: str | None = None
) -> list[Config]:
    """Every variant at every rate of the grid's ``lrs`` on its tuning seeds (the first
    seed unless the grid names ``tune_seeds``; validation only); a grid with ``rates_from``
    reuses that grid's tuning runs instead. With ``widen_edges``, ``records`` (the tuning
    runs so far) add the next rate out for each variant whose best is at an edge. The text
    runs read ``dataset`` (default: ``resolve_dataset()``, PTB when it is here)."""
    spec = GRIDS[cfgmod.check_choice("grid", name, GRIDS)]
    if "rates_from" in spec:
        return tuning_grid(spec["rates_from"], records, dataset)
    wider = widened_rates(records) if spec.get("widen_edges") and records else {}
    return [with_recipe(c, lr=lr) for c in _tuned_variants(name, dataset)
            for lr in (*spec["lrs"], *sorted(set(wider.get(variant_key(c), ())) - set(spec["lrs"])))]  # fmt: skip


def widened_rates(records: list[RunRecord]) -> dict[str, list[float]]:
    """variant_key -> the rates tried plus, where the best (``choose_lrs``) is the lowest
    or highest rate tried, the next one out (half or double), so a choice at the edge
    of a sweep is never taken as its optimum."""
    tried = {}
    for r in records:
        tried.setdefault(r.extra.get("variant_key") or variant_key(r.config), set()).add(
            r.config["recipe"]["lr"]
        )
    out = {}
    for key, best in choose_lrs(records).items():
        rates = sorted(tried[key])
        if best == rates[0]:
            rates.insert(0, best / 2)
        elif best == rates[-1]:
            rates.append(best * 2)
        out[key] = rates
    return out


def _tuned_variants(name: str, dataset: str | None = None) -> list[Config]:
    spec = GRIDS[name]
    seen, out = set(), []
    for c in variant_configs(name, Config, dataset or resolve_dataset(), cifar10_available()):
        recipe = dataclasses.replace(c.recipe, precision="float32", patience=None)
        if "tune_seeds" in spec:  # tuned at the finals' own budget, early stop included
            recipe = c.recipe
        elif c.dataset not in IMAGE_DATASETS and "tune_recipe" in spec:
            recipe = dataclasses.replace(recipe, **spec["tune_recipe"])
        for seed in spec.get("tune_seeds", spec["seeds"][:1]):
            base = replace(c, seed=seed, read_test=False, data_fraction=1.0,
                           prune_fractions=(), recipe=recipe)  # fmt: skip
            if (variant_key(base), seed) not in seen:
                seen.add((variant_key(base), seed))
                out.append(base)
    return out


def edge_grid(name: str) -> list[Config]:
    """Tuning runs at the grid's ``edge_lrs``, rates past its sweep: they check whether the
    sweep's edge capped a variant's choice and never enter it (``report.tuning_table``)."""
    spec = GRIDS[cfgmod.check_choice("grid", name, GRIDS)]
    return [with_recipe(c, lr=lr) for c in _tuned_variants(name) for lr in spec.get("edge_lrs", ())]


def final_grid(name: str, lrs: dict[str, float], keys=None) -> list[Config]:
    """Every run of the grid at its variant's tuned rate, reading the test split once
    (only the variants in ``keys``, when given)."""
    return [with_recipe(replace(c, read_test=True), lr=lrs[variant_key(c)])
            for c in variant_configs(name, Config, resolve_dataset(), cifar10_available())
            if keys is None or variant_key(c) in keys]  # fmt: skip


def grid(name: str, store=None) -> list[Config]:
    """The tuning grid (widened where a best rate sits at its edge), then the final runs
    of every variant whose tuning runs are all cached, then the edge check."""
    from structattn_lite.records import RunStore

    store = store or RunStore()
    results.restore_committed(name, store)  # committed runs back into a new store
    return configs_from(name, lambda c: store.load(EXPERIMENT, c))


def configs_from(name: str, lookup) -> list[Config]:
    """``grid(name)`` as the records settle it (``lookup(config)``: its record or None)."""
    tuning, done, missing = settled_tuning(name, lookup)
    if not done:
        return tuning
    lrs = choose_lrs(done)
    return tuning + final_grid(name, lrs, keys=lrs) + ([] if missing else edge_grid(name))


def settled_tuning(name: str, lookup) -> tuple[list[Config], list[RunRecord], set[str]]:
    """The grid's tuning runs as far as the records (``lookup(config)``: its record or
    None) settle them: every config (widened where a variant's best rate sits at an edge;
    a variant widens only once all its runs so far are in), the records of the variants
    whose runs are all in, and the variant keys still missing a run."""
    tuning = tuning_grid(name)
    while True:
        cached = {c: lookup(c) for c in tuning}
        missing = {variant_key(c) for c, r in cached.items() if r is None}
        done = [r for c, r in cached.items() if r is not None and variant_key(c) not in missing]
        wider = [c for c in tuning_grid(name, done) if c not in cached]
        if not wider:
            return tuning, done, missing
        tuning += wider


def export(records: list[RunRecord], grid: str = "committed") -> list[Path]:
    """The committed compact results (``results.write``): one CSV row per run (summary)
    and the histories, keeping the committed rows of the runs ``records`` do not hold."""
    cfgmod.check_choice("grid", grid, COMMITTED_CSV)
    order = [config_hash(EXPERIMENT, c) for c in tuning_grid(grid)]  # finals follow
    return results.write(records, grid, order)
