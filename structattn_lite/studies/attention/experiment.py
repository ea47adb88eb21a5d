"""The attention study: dot vs dense vs matroidal attention in a small Transformer.

``run_attention(cfg)`` trains one config (char-level LM on PTB or the labelled
fallback corpus; or CIFAR-10 patch tokens) and returns a ``RunRecord`` with every
measurement; ``sweep`` caches runs in the ``RunStore``; ``main_grid`` and
``fraction_grid`` list each profile's runs; ``run_profile`` does it all and returns
the per-run summary (``structattn run attention``).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from structattn_lite import config
from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.data import FALLBACK_LABEL, cifar10_available, load_corpus, ptb_available
from structattn_lite.models.attention import ATTENTION_KINDS
from structattn_lite.models.attention_checks import (
    attention_maps,
    learned_weights,
    model_failures,
    model_flops,
)
from structattn_lite.models.lm import CharLM, LMConfig, parameter_report
from structattn_lite.runs import RunRecord, RunStore, config_dict
from structattn_lite.theory import SUPPORT_RULES
from structattn_lite.training.trainer import Callback, OptimConfig, Trainer, few_threads

EXPERIMENT = "attention"
DATASETS = ("ptb", "fallback", "cifar10")
LN2 = math.log(2.0)


@dataclass(frozen=True)
class AttentionRun:
    """Everything that determines one run; its hash keys the cached record."""

    dataset: str = "ptb"  # "ptb", "fallback" (stdlib docstrings), "cifar10"
    kind: str = "matroidal"
    m: int | None = None  # matroidal support columns (None: 2 d_head)
    shared_qk: bool = True  # the seed's one projection z for queries and keys
    support: str = "random"  # drawn from ``seed`` for the random rule
    tau: float | None = None  # None: sqrt(d_head)
    eps: float = 1e-4
    d_model: int = 128
    n_heads: int = 8
    n_layers: int = 2
    block_size: int = 64
    batch_size: int = 16
    steps_per_eval: int = 25  # one trainer "epoch" = this many random-window steps
    evals: int = 6
    eval_windows: int = 128  # validation windows per learning-curve point
    final_eval_windows: int = 512
    check_windows: int = 4  # validation windows for the failure counts at each eval
    data_fraction: float = 1.0  # leading fraction of the training text used
    prune_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)  # delta = this quantile of l
    seed: int = 0
    optim: OptimConfig = field(default_factory=OptimConfig)


def check_run(cfg: AttentionRun) -> AttentionRun:
    check_choice("dataset", cfg.dataset, DATASETS)
    check_choice("kind", cfg.kind, ATTENTION_KINDS)
    check_choice("support", cfg.support, SUPPORT_RULES)
    check_number("data_fraction", cfg.data_fraction, minimum=0.0, strict=True)
    if cfg.data_fraction > 1:
        raise ValueError(f"data_fraction must be in (0, 1], got {cfg.data_fraction}")
    for name in ("block_size", "batch_size", "steps_per_eval", "evals", "eval_windows"):
        check_int(name, getattr(cfg, name), minimum=1)
    return cfg


def attention_options(cfg: AttentionRun) -> dict[str, Any]:
    if cfg.kind == "dot":
        return {}
    opts = {"shared_qk": cfg.shared_qk, "tau": cfg.tau, "eps": cfg.eps}
    if cfg.kind == "matroidal":
        opts.update(m=cfg.m, support=cfg.support, support_seed=cfg.seed)
    return opts


def variant_label(cfg: AttentionRun | dict) -> str:
    """ "dot", "dense", "matroidal m=2d", with " (sep q/k)" for separate projections."""
    c = cfg if isinstance(cfg, dict) else config_dict(cfg)
    label = c["kind"]
    if c["kind"] == "matroidal":
        d = c["d_model"] // c["n_heads"]
        m = c["m"] or 2 * d
        label += f" m={m // d}d" if m % d == 0 else f" m={m}"
    if c["kind"] != "dot" and not c["shared_qk"]:
        label += " (sep q/k)"
    return label


# --- data windows -----------------------------------------------------------------


def windows(data: torch.Tensor, starts: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    chunk = data[starts[:, None] + torch.arange(T + 1)]
    return chunk[:, :-1], chunk[:, 1:]


def eval_starts(n: int, T: int, count: int) -> torch.Tensor:
    """Evenly spaced, fixed window starts: every evaluation sees the same text."""
    return torch.linspace(0, n - T - 2, min(count, n - T - 1)).long()


@torch.no_grad()
def bits_per_char(model: CharLM, data: torch.Tensor, T: int, count: int, batch: int = 64) -> float:
    was_training = model.training
    model.eval()
    starts, total = eval_starts(len(data), T, count), 0.0
    for i in range(0, len(starts), batch):
        x, y = windows(data, starts[i : i + batch], T)
        total += model.loss(x, y).item() * len(x)
    model.train(was_training)
    return total / len(starts) / LN2


class StepTimer(Callback):
    """Wall time between consecutive steps within an eval interval (evals excluded)."""

    def __init__(self):
        self.last, self.gaps = None, []

    def on_batch_end(self, trainer, loss, grad_norm):
        now = time.perf_counter()
        if self.last is not None:
            self.gaps.append(now - self.last)
        self.last = now

    def on_epoch_end(self, trainer, row):
        self.last = None


# --- one run ----------------------------------------------------------------------


def _lm_task(cfg: AttentionRun):
    corpus = load_corpus(cfg.dataset)
    T = cfg.block_size
    n_train = max(T + 2, math.ceil(cfg.data_fraction * len(corpus.train)))
    train, valid = corpus.train[:n_train], corpus.valid
    torch.manual_seed(cfg.seed)
    lm_cfg = LMConfig(
        vocab_size=len(corpus.vocab),
        block_size=T,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        attention=cfg.kind,
        attention_options=attention_options(cfg),
    )
    model = CharLM(lm_cfg)

    def batches(generator):
        for _ in range(cfg.steps_per_eval):
            starts = torch.randint(0, n_train - T - 1, (cfg.batch_size,), generator=generator)
            yield windows(train, starts, T)

    def metric(m, count):
        return {"val_bpc": bits_per_char(m, valid, T, count)}

    check_x = windows(valid, eval_starts(len(valid), T, cfg.check_windows), T)[0]
    data = {
        **corpus.summary(),
        "train_symbols_used": n_train,
        "map_text": corpus.decode(check_x[0]),
    }
    return model, (lambda m, x, y: m.loss(x, y)), batches, metric, check_x, data


def _cifar_task(cfg: AttentionRun):
    from structattn_lite.studies.attention.images import cifar_task

    return cifar_task(cfg, attention_options(cfg))


def _pruning(model, metric, cfg: AttentionRun) -> list[dict[str, float]]:
    """Evaluate with columns l_e < delta removed; delta = a quantile of the learned l.

    Quantiles rather than fixed deltas: l starts at d / 2m, so a fixed delta would keep
    all or nothing depending on m; a quantile removes the smallest columns of any model.
    """
    mods = [a for a in model.attention_modules() if a.kind == "matroidal"]
    if not mods:
        return []
    out = [{"fraction": 0.0, "delta": 0.0, "kept": 1.0, **metric(model, cfg.eval_windows)}]
    l_all = torch.cat([a.weights().detach().flatten() for a in mods])
    for frac in cfg.prune_fractions:
        delta = float(torch.quantile(l_all, frac))
        kept = sum(a.prune(delta) for a in mods) / len(l_all)
        out.append(
            {"fraction": frac, "delta": delta, "kept": kept, **metric(model, cfg.eval_windows)}
        )
    for a in mods:
        a.unprune()
    return out


def run_attention(cfg: AttentionRun, callbacks=(), progress: bool = True) -> RunRecord:
    """Train one config from its seed; identical configs give identical histories."""
    check_run(cfg)
    task = _cifar_task if cfg.dataset == "cifar10" else _lm_task
    model, loss_fn, batches, metric, check_x, data = task(cfg)
    timer = StepTimer()

    def evaluate(m):
        return {**metric(m, cfg.eval_windows), **model_failures(m, check_x)}

    trainer = Trainer(model, loss_fn, cfg.optim, callbacks=(timer, *callbacks), progress=progress)
    start = time.perf_counter()
    result = trainer.fit(
        cfg.evals,
        batches,
        evaluate,
        torch.Generator().manual_seed(cfg.seed),
        desc=f"{variant_label(cfg)}/f{cfg.data_fraction:g}/s{cfg.seed}",
    )
    seconds = time.perf_counter() - start
    history = result.history
    if "train_loss" in history and cfg.dataset != "cifar10":
        history["train_bpc"] = history["train_loss"] / LN2
    history["step"] = history["epoch"] * cfg.steps_per_eval
    norms = torch.tensor(result.step_grad_norms, dtype=torch.float64)
    finite = norms[torch.isfinite(norms)]
    late = finite[len(finite) // 2 :]
    extra = {
        "variant": variant_label(cfg),
        "step_grad_norms": result.step_grad_norms,
        "grad_norm_var": float(finite.var()) if len(finite) > 1 else float("nan"),
        "grad_norm_var_late": float(late.var()) if len(late) > 1 else float("nan"),
        "seconds": seconds,
        "seconds_per_step": float(torch.tensor(timer.gaps).median()) if timer.gaps else None,
        "data": data,
        **parameter_report(model),
        **model_flops(model, check_x.shape[1]),
    }
    if result.status == "ok":
        extra["final"] = metric(model, cfg.final_eval_windows)
        extra["failures_final"] = model_failures(model, check_x)
        extra["maps"] = attention_maps(model, check_x[:, :48])
        extra["weights"] = learned_weights(model)
        extra["pruning"] = _pruning(model, metric, cfg)
    return RunRecord.from_training(EXPERIMENT, cfg, result, history=history, **extra)


def sweep(
    configs: list[AttentionRun],
    store: RunStore | None = None,
    progress: bool = True,
    threads: int | None = None,
) -> list[RunRecord]:
    """Run (or reload) each config; ``threads`` caps torch's intra-op threads meanwhile.

    ``progress`` shows one bar over the runs (per-run bars would flood a notebook).
    """
    from tqdm.auto import tqdm

    store = store or RunStore()
    with few_threads(threads):
        return [
            store.get_or_run(EXPERIMENT, c, lambda c: run_attention(c, progress=False))
            for c in tqdm(configs, desc="runs", disable=not progress)
        ]


# --- the profile grids ----------------------------------------------------------

# (kind, m as a multiple of d_head, shared_qk)
MAIN_VARIANTS = (
    ("dot", None, True),
    ("dense", None, True),
    ("dense", None, False),
    ("matroidal", 1, True),
    ("matroidal", 2, True),
    ("matroidal", 4, True),
    ("matroidal", 2, False),
)
FRACTION_VARIANTS = (("dot", None, True), ("dense", None, True), ("matroidal", 2, True))

# Single-threaded runs: these models are small, and on a shared 2-core machine two
# threads contend with the notebook kernel and everything else (measured 2-4x slower).
STUDY_PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {"run": {"block_size": 32, "batch_size": 8, "steps_per_eval": 3, "evals": 2,
                      "eval_windows": 16, "final_eval_windows": 16, "check_windows": 2},
              "seeds": (0,), "fractions": (0.01,), "threads": 1},
    "quick": {"run": {"block_size": 64, "batch_size": 16, "steps_per_eval": 20, "evals": 6,
                      "eval_windows": 64, "final_eval_windows": 512},
              "seeds": (0, 1), "fractions": (0.001, 0.01), "threads": 1},
    "paper": {"run": {"block_size": 128, "batch_size": 32, "steps_per_eval": 100, "evals": 50,
                      "eval_windows": 512, "final_eval_windows": 3000},
              "seeds": (0, 1, 2), "fractions": (0.01, 0.1), "threads": None},
}  # fmt: skip


def resolve_dataset(root=None) -> str:
    """ "ptb" when its files are there, else "fallback" with a warning (never silent)."""
    if ptb_available(root):
        return "ptb"
    warnings.warn(f"Penn Treebank not found; using the {FALLBACK_LABEL}", stacklevel=2)
    return "fallback"


def _variant(spec: dict, dataset: str, kind: str, factor, shared: bool, **kw) -> AttentionRun:
    d = AttentionRun.d_model // AttentionRun.n_heads
    m = factor * d if factor else None
    return AttentionRun(dataset=dataset, kind=kind, m=m, shared_qk=shared, **spec["run"], **kw)


def main_grid(profile: str, dataset: str) -> list[AttentionRun]:
    """Every variant at full data, each seed."""
    spec = config.pick(profile, STUDY_PROFILES)
    return [_variant(spec, dataset, *v, seed=s) for v in MAIN_VARIANTS for s in spec["seeds"]]


def fraction_grid(profile: str, dataset: str) -> list[AttentionRun]:
    """The low-data sweep (fraction 1.0 is in the main grid)."""
    spec = config.pick(profile, STUDY_PROFILES)
    return [
        _variant(spec, dataset, *v, seed=s, data_fraction=f)
        for f in spec["fractions"]
        for v in FRACTION_VARIANTS
        for s in spec["seeds"]
    ]


def cifar_grid(profile: str) -> list[AttentionRun]:
    """Paper profile only, and only where CIFAR-10 is on disk."""
    if profile != "paper" or not cifar10_available():
        return []
    spec = config.pick(profile, STUDY_PROFILES)
    return [_variant(spec, "cifar10", *v, seed=s) for v in MAIN_VARIANTS for s in spec["seeds"]]


def run_profile(profile: str, progress: bool = True) -> pd.DataFrame:
    """Run (or reload) the profile's grids; one summary row per run."""
    from structattn_lite.studies.attention.report import summarize

    dataset = resolve_dataset()
    runs = main_grid(profile, dataset) + fraction_grid(profile, dataset) + cifar_grid(profile)
    threads = config.pick(profile, STUDY_PROFILES)["threads"]
    return summarize(sweep(runs, progress=progress, threads=threads))


def replace(cfg: AttentionRun, **changes) -> AttentionRun:
    return dataclasses.replace(cfg, **changes)
