"""What each grid of the attention study runs (``GRIDS``) and the configs it expands to.

Four parts share one spec per grid: the main comparison (every variant on the full
training text), the low-data sweep (fractions of the text, early-stopped on
validation), stability (the same variants under bfloat16 autocast), and the digits
comparison (dot, dense, matroidal on scikit-learn's 8x8 digits). Pruning with a short
fine-tune is measured at the end of every matroidal run of the main comparison.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from structattn_lite.studies.attention.recipe import Recipe

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
CORE_VARIANTS = (("dot", None, True), ("dense", None, True), ("matroidal", 2, True))
# the low-parameter arm: the core variants, and dense and matroidal with separate q/k
# (each structured metric against the dense one with the same q/k sharing)
LOWPARAM_VARIANTS = (*CORE_VARIANTS, ("dense", None, False), ("matroidal", 2, False))

_LM = {"d_model": 128, "n_heads": 8, "n_layers": 2, "block_size": 128, "batch_size": 32}
_DIGITS = {"d_model": 64, "n_heads": 4, "n_layers": 2, "batch_size": 64}
_DIGITS_RECIPE = {"max_steps": 400, "warmup_steps": 40, "eval_every": 50, "check_every": 10}


def heads_for(d_model: int, factor: int = 2, most: int = 8) -> int:
    """The most heads (at most ``most``) whose width w leaves room for m = factor * w
    distinct incidence columns: a graph on w nodes has w (w - 1) / 2 edges."""
    for n in range(most, 0, -1):
        w, rest = divmod(d_model, n)
        if not rest and w * (w - 1) // 2 >= factor * w:
            return n
    raise ValueError(f"d_model={d_model} has no head width with room for m = {factor} d_head")


# What the fresh low-parameter grids share: dense and matroidal m=2d (shared q/k) on the
# full text, at the rates lowparam chose, under its budget and early stop.
_FRESH_LOWPARAM = {
    "rates_from": "lowparam", "main": (CORE_VARIANTS[1], CORE_VARIANTS[2]),
    "fractions": (), "bf16": (), "digits": (), "model": _LM,
    "recipe": {"max_steps": 4000, "warmup_steps": 200, "eval_every": 250, "patience": 4},
    "evals": (256, 2000), "prune_finetune_steps": 0, "prune_fractions": (),
}  # fmt: skip

GRIDS: dict[str, dict[str, Any]] = {
    # smoke: proves the pipeline in seconds (tiny model, a handful of steps).
    "smoke": {
        "seeds": (0,), "lrs": (3e-3,), "main": (CORE_VARIANTS[0], CORE_VARIANTS[2]),
        "fractions": (0.01,), "bf16": (), "digits": CORE_VARIANTS,
        "model": {"d_model": 32, "n_heads": 4, "n_layers": 1, "block_size": 32, "batch_size": 8},
        "recipe": {"max_steps": 6, "warmup_steps": 2, "eval_every": 3, "check_every": 2},
        "evals": (16, 32), "prune_finetune_steps": 2,
        "digits_model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "batch_size": 16},
        "digits_recipe": {"max_steps": 6, "warmup_steps": 2, "eval_every": 3},
    },
    # quick (make study): minutes on one core; ranks early training, not final quality.
    "quick": {
        "seeds": (0, 1), "lrs": (2e-3, 6e-3), "main": (*CORE_VARIANTS, ("matroidal", 2, False)),
        "fractions": (0.01,), "bf16": (), "digits": CORE_VARIANTS,
        "model": {**_LM, "block_size": 64, "batch_size": 16},
        "recipe": {"max_steps": 200, "warmup_steps": 20, "eval_every": 50},
        "evals": (64, 512), "prune_finetune_steps": 20,
        "digits_model": _DIGITS, "digits_recipe": {**_DIGITS_RECIPE, "max_steps": 200},
    },
    # committed: the grid whose records ship in data/results, sized for two CPU cores.
    # Final runs: 1,000 steps (about 4M characters, 0.8 of a pass over the text): all seven
    # variants, low data (1% and 10% of the text) and bfloat16, each on 5 seeds. Rates are
    # chosen as ``lowparam`` chooses them: on validation at the finals' own 1,000 steps over
    # three tuning seeds, the sweep widened wherever its best rate is at an edge. The rates
    # start at 0.012 (0.006 lost to 0.012 and 0.024 on every text variant in the 600-step,
    # one-seed tuning of ``RETIRED_TUNING_CSV``); widening adds 0.006 to any variant whose
    # best is 0.012.
    "committed": {
        "seeds": (0, 1, 2, 3, 4), "tune_seeds": (0, 1, 2), "lrs": (1.2e-2, 2.4e-2, 4.8e-2),
        "widen_edges": True, "main": MAIN_VARIANTS,
        "fractions": (0.01, 0.1), "bf16": CORE_VARIANTS, "digits": CORE_VARIANTS,
        "model": _LM,
        "recipe": {"max_steps": 1000, "warmup_steps": 60, "eval_every": 200},
        "evals": (256, 2000), "prune_finetune_steps": 50,
        "digits_model": _DIGITS, "digits_recipe": _DIGITS_RECIPE,
    },
    # long: the main contrasts at a budget where dot passes 1.75 validation bpc, about
    # 30 core-minutes a run here (8,000 steps, about 6.5 passes over the text). No
    # tuning of its own: each variant keeps the rate the committed grid chose for it on
    # validation (``rates_from``). Its committed finals (seeds 0-2) ran at rates chosen over
    # 600 steps of one seed: at 0.006 out of {0.003, 0.006} (dot and both matroidal m=2d;
    # ``LONG_FIRST_SWEEP_CSV``) and out of 0.006-0.048 (all five, dense for "equal or better
    # than dense"; its own files), so they also say whether such a rate serves at 8,000.
    "long": {
        "seeds": (0, 1, 2), "rates_from": "committed", "fractions": (), "bf16": (), "digits": (),
        "main": (("dot", None, True), ("matroidal", 2, False), ("matroidal", 2, True),
                 ("dense", None, True), ("dense", None, False)),
        "model": _LM, "recipe": {"max_steps": 8000, "warmup_steps": 200, "eval_every": 500},
        "evals": (256, 2000), "prune_finetune_steps": 50,
    },
    # fresh: fresh seeds (never trained for these rows) for the rows of the committed grid
    # that seeds decide, under the rules committed before them (claims/rules.csv): dense and
    # matroidal m=2d (shared q/k) on the full text and on 1% of it, seeds 5-16, each at the
    # rate the committed grid chose on validation; otherwise the committed grid's runs.
    "fresh": {
        "seeds": tuple(range(5, 17)), "rates_from": "committed",
        "main": (CORE_VARIANTS[1], CORE_VARIANTS[2]), "low_data": (CORE_VARIANTS[1], CORE_VARIANTS[2]),
        "fractions": (0.01,), "bf16": (), "digits": (),
        "model": _LM,
        "recipe": {"max_steps": 1000, "warmup_steps": 60, "eval_every": 200},
        "evals": (256, 2000), "prune_finetune_steps": 50,
    },
    # fresh_bf16: fresh seeds for the bfloat16 row (attention/stable/bfloat16, undecided on
    # seeds 0-4 at about 15 seeds): dense and matroidal m=2d (shared q/k), each under
    # float32 and under bfloat16 autocast, seeds 5-20 at the committed grid's rates. Their
    # float32 runs of seeds 5-16 are the fresh grid's (the same configs); no bfloat16
    # shift on these seeds is in any other grid.
    "fresh_bf16": {
        "seeds": tuple(range(5, 21)), "rates_from": "committed",
        "main": (CORE_VARIANTS[1], CORE_VARIANTS[2]), "bf16": (CORE_VARIANTS[1], CORE_VARIANTS[2]),
        "fractions": (), "digits": (),
        "model": _LM,
        "recipe": {"max_steps": 1000, "warmup_steps": 60, "eval_every": 200},
        "evals": (256, 2000), "prune_finetune_steps": 50,
    },
    # fresh_lowparam: fresh seeds for attention/low_parameters/d32/shared (undecided on
    # seeds 0-4 at about 14 seeds per arm): dense and matroidal m=2d (shared q/k) at
    # d_model 32 on the full text, seeds 5-19, each at the rate the lowparam grid chose on
    # validation, under the lowparam grid's budget and early stop.
    "fresh_lowparam": {**_FRESH_LOWPARAM, "seeds": tuple(range(5, 20)),
                       "sizes": ({"d_model": 32, "n_heads": heads_for(32)},)},
    # fresh_lowparam64: the same for attention/low_parameters/d64/shared (undecided on
    # seeds 0-4 at about 10 seeds per arm): d_model 64, seeds 5-14.
    "fresh_lowparam64": {**_FRESH_LOWPARAM, "seeds": tuple(range(5, 15)),
                         "sizes": ({"d_model": 64, "n_heads": heads_for(64)},)},
    # lowparam: the card's low-parameter arm at d_model 32 and 64 on the full
    # text: warmup, then a cosine over at most 4,000 steps (about 3 passes over the text),
    # stopped early once validation has not improved for ``patience`` evaluations (1,000
    # steps). At a constant rate 7 of 8 runs at d 32 still improved at 6,000 steps, so
    # literal convergence is past two cores' budget; the cosine ends each run annealed.
    # Rates are chosen on validation at this same budget over the three ``tune_seeds``; a
    # variant whose best rate is at the sweep's edge gets the next rate out (``widen_edges``)
    # until it is not. ``sizes``: the heads each width allows, the smallest model first.
    # ``fractions``: the low-data half at convergence, at the smallest size (1% and 10% of
    # the text beside its full-text finals), stopped by the same patience, at the rate each
    # variant chose on the full text.
    "lowparam": {
        "seeds": (0, 1, 2, 3, 4), "tune_seeds": (0, 1, 2), "lrs": (3e-3, 6e-3, 1.2e-2),
        "widen_edges": True, "main": LOWPARAM_VARIANTS,
        "sizes": tuple({"d_model": d, "n_heads": heads_for(d)} for d in (32, 64)),
        "fractions": (0.01, 0.1), "bf16": (), "digits": (),
        "model": _LM,
        "recipe": {"max_steps": 4000, "warmup_steps": 200, "eval_every": 250, "patience": 4},
        "evals": (256, 2000), "prune_finetune_steps": 0, "prune_fractions": (),
    },
    # paper: a GPU or a Ray cluster; long enough for the dot model to pass 1.45 bpc. Rates
    # are chosen as ``lowparam`` chooses them: on validation at the finals' own budget over
    # three seeds, the sweep widened wherever its best rate is at an edge.
    "paper": {
        "seeds": (0, 1, 2, 3, 4), "tune_seeds": (0, 1, 2), "lrs": (1e-3, 2e-3, 4e-3),
        "widen_edges": True, "main": MAIN_VARIANTS,
        "fractions": (0.01, 0.1), "bf16": CORE_VARIANTS, "digits": CORE_VARIANTS,
        "model": _LM,
        "recipe": {"max_steps": 30000, "warmup_steps": 500, "eval_every": 1000},
        "evals": (512, 3000), "prune_finetune_steps": 300,
        "digits_model": _DIGITS, "digits_recipe": {**_DIGITS_RECIPE, "max_steps": 2000},
    },
}  # fmt: skip
# datasets scored by validation loss (the text ones by bits per character)
IMAGE_DATASETS = ("digits", "cifar10")
# grid -> (one row per run, histories): the files each committed grid ships in data/results
COMMITTED_CSV = {
    "committed": ("attention_runs.csv", "attention_histories.csv.gz"),
    "long": ("attention_long_runs.csv", "attention_long_histories.csv.gz"),
    "lowparam": ("attention_lowparam_runs.csv", "attention_lowparam_histories.csv.gz"),
    "fresh": ("attention_fresh_runs.csv", "attention_fresh_histories.csv.gz"),
    "fresh_bf16": ("attention_fresh_bf16_runs.csv", "attention_fresh_bf16_histories.csv.gz"),
    "fresh_lowparam": (
        "attention_fresh_lowparam_runs.csv",
        "attention_fresh_lowparam_histories.csv.gz",
    ),
    "fresh_lowparam64": (
        "attention_fresh_lowparam64_runs.csv",
        "attention_fresh_lowparam64_histories.csv.gz",
    ),
}
# The committed grids are final. Runs of theirs that the current rate choice does not use,
# kept for committed figures: the committed grid's finals at 0.006 (``FIRST_SWEEP_CSV``; the
# fraction sweep reads each variant at its better rate), its 600-step one-seed tuning curves
# (``RETIRED_TUNING_CSV``; the rate sweeps) and the long grid's curves at 0.006. Each
# variant's rate, sweep by sweep, is the table ``RATE_HISTORY_CSV`` (``report.rate_history``).
FIRST_SWEEP_CSV = "attention_runs_first_sweep.csv"
RETIRED_TUNING_CSV = "attention_histories_retired.csv.gz"
LONG_FIRST_SWEEP_CSV = "attention_long_histories_first_sweep.csv.gz"
RATE_HISTORY_CSV = "attention_rate_history.csv"
# the n-gram floors of the text, exported beside the text grids for the figures to draw
FLOORS_CSV = "attention_ngram_floors.csv"
# The recipe's target on these machines: dot product at or below this validation bpc
# within about 30 core-minutes; ``tables.budget_table`` reads it off the runs.
RECIPE_TARGET_BPC = 1.75
# Runs on a fraction of the text stop after this many evaluations without a new best.
LOW_DATA_PATIENCE = 3


def _variant(config_cls, spec, dataset, kind, factor, shared, seed, size=None, **changes):
    model = spec["digits_model"] if dataset == "digits" else {**spec["model"], **(size or {})}
    recipe = spec["digits_recipe"] if dataset == "digits" else spec["recipe"]
    d_head = model["d_model"] // model["n_heads"]
    evals = dict(zip(("eval_windows", "final_eval_windows"), spec["evals"], strict=True))
    return config_cls(
        dataset=dataset, kind=kind, m=factor * d_head if factor else None, shared_qk=shared,
        recipe=Recipe(**{**recipe, **changes.pop("recipe", {})}), seed=seed,
        prune_finetune_steps=spec["prune_finetune_steps"], **model, **evals, **changes,
    )  # fmt: skip


def variant_configs(name: str, config_cls, dataset: str, cifar: bool = False) -> list:
    """Every run of grid ``name`` (learning rates not yet tuned): the cheap digits runs
    first, then the main comparison seed-major, then the smallest fraction of the text
    (where the low-data hypothesis is judged) and stability taking turns seed by seed, then
    the larger fractions: a partial sweep already covers every part with some seeds."""
    spec = GRIDS[name]
    seeds = spec["seeds"]
    out = [_variant(config_cls, spec, "digits", *v, seed, prune_fractions=())
           for seed in seeds for v in spec["digits"]]  # fmt: skip
    prune = {"prune_fractions": spec["prune_fractions"]} if "prune_fractions" in spec else {}
    for size in spec.get("sizes", (None,)):  # smallest model first
        for seed in seeds:
            out += [_variant(config_cls, spec, dataset, *v, seed, size, **prune)
                    for v in spec["main"]]  # fmt: skip

    # low data at the smallest size, stopped by the grid's own patience where it has one
    size, patience = (
        spec.get("sizes", (None,))[0],
        spec["recipe"].get("patience", LOW_DATA_PATIENCE),
    )

    def low_data(fraction, seed):
        return [_variant(config_cls, spec, dataset, *v, seed, size, data_fraction=fraction,
                         recipe={"patience": patience}, prune_fractions=())
                for v in spec.get("low_data", CORE_VARIANTS)]  # fmt: skip

    fractions = sorted(spec["fractions"])
    for seed in seeds:
        out += low_data(fractions[0], seed) if fractions else []
        out += [_variant(config_cls, spec, dataset, *v, seed, prune_fractions=(),
                         recipe={"precision": "bfloat16"}) for v in spec["bf16"]]  # fmt: skip
    out += [c for fraction in fractions[1:] for seed in seeds for c in low_data(fraction, seed)]
    if cifar and name == "paper":
        out += [_variant(config_cls, spec, "cifar10", *v, seed)
                for seed in seeds for v in CORE_VARIANTS]  # fmt: skip
    return out


def part(cfg) -> str:
    """Which part of a grid a config belongs to."""
    c = cfg if isinstance(cfg, dict) else dataclasses.asdict(cfg)
    if c["dataset"] in ("digits", "cifar10"):
        return c["dataset"]
    if c["recipe"]["precision"] != "float32":
        return "stability"
    return "main" if c["data_fraction"] == 1.0 else "low data"


# The ``structattn run`` flags this study's runs take (``cli.FLAG_FIELDS``: a field of its
# config each reads; seed_batching: its runs stack by seed), so the command line refuses
# any other before torch loads; tests/test_flags.py checks it against the config class.
RUN_FLAGS = ()  # its rates and budgets are the grid's
