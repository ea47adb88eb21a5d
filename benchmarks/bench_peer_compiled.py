"""The authors' training step, eager and compiled, beside our seed-stacked one, per seed.

    .venv/bin/python benchmarks/bench_peer_compiled.py [--reps 30] [--seeds 10]

At the authors' sizes (their model at 3bb9f71: hidden 32, 3 layers; batch 64, T = 16,
a label per prefix, cross-entropy, Adam with clipping), one fixed batch:

- "theirs, eager": their model (``models.csp_authors``, which loads their state dicts) on a
  ``Trainer``, the step their code takes;
- "theirs, compiled": the same model under ``torch.compile`` (inductor; its compile time is
  printed, not counted);
- "ours, S=1" and "ours, S=k": the seed-stacked model (``csp_authors_stacked``) with one
  and ``--seeds`` seeds, the latter's time divided by k (per seed).

Times are this thread's CPU time (``time.thread_time``; other processes on a shared
machine do not inflate it), the variants taking turns; ratios are of the minimums, all
measured in this one run. The target (issue 52): per seed, S = 10 at least 4x faster
than their compiled step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_csp_speed import interleaved  # noqa: E402  (the turn-taking timer)

from structattn_lite.models import build_model  # noqa: E402
from structattn_lite.training.losses import get_loss, per_seed_loss  # noqa: E402
from structattn_lite.training.seed_batching import stack_models  # noqa: E402
from structattn_lite.training.trainer import OptimConfig, Trainer  # noqa: E402

PRESET, HIDDEN, BATCH, LENGTH = "upstream", 32, 64, 16
TARGET = 4.0  # S = 10, per seed, against their compiled step


def batch(n_seeds: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (n_seeds, BATCH, LENGTH), generator=g)
    return x, x.cumsum(-1) % 2  # parity of every prefix


def their_step(compiled: bool):
    torch.manual_seed(0)
    model = build_model("csp", preset=PRESET, d_model=HIDDEN, n_layers=3)
    x, y = (t[0] for t in batch(1))
    ce = get_loss("ce")
    forward = torch.compile(model) if compiled else model

    def loss(_m, xb, yb):
        return ce(forward(xb), yb)

    trainer = Trainer(model, loss, OptimConfig(), progress=False)
    return lambda: trainer.train_step((x, y))


def our_step(n_seeds: int, compiled: bool = False):
    torch.manual_seed(0)
    models = [build_model("csp", preset=PRESET, d_model=HIDDEN, n_layers=3) for _ in range(n_seeds)]
    stacked = stack_models(models)
    x, y = batch(n_seeds)
    ce = per_seed_loss("ce")
    forward = torch.compile(stacked, fullgraph=True) if compiled else stacked
    trainer = Trainer(stacked, lambda _m, xb, yb: ce(forward(xb), yb), OptimConfig())
    return lambda: trainer.train_step((x, y))


def main(argv=None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=30, help="training steps per variant")
    parser.add_argument("--seeds", type=int, default=10, help="seeds in the larger stack")
    parser.add_argument(
        "--compile-ours",
        action="store_true",
        help="also time our stacked steps compiled (inductor: its float32 sums differ from "
        "the eager step's, so compiled training would be a new protocol, not the records')",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    k = args.seeds
    print(f"torch {torch.__version__}, 1 thread, CPU ms per step and seed; authors' sizes "
          f"(hidden {HIDDEN}, 3 layers, batch {BATCH}, T={LENGTH}, prefix labels, CE)")  # fmt: skip
    variants = {"theirs, eager": their_step(compiled=False)}
    per_seed = {"theirs, eager": 1, "theirs, compiled": 1, "ours, S=1": 1, f"ours, S={k}": k}
    compiled = {"theirs, compiled": lambda: their_step(compiled=True)}
    if args.compile_ours:
        per_seed |= {"ours, S=1, compiled": 1, f"ours, S={k}, compiled": k}
        compiled |= {"ours, S=1, compiled": lambda: our_step(1, compiled=True),
                     f"ours, S={k}, compiled": lambda: our_step(k, compiled=True)}  # fmt: skip
    for name, build in compiled.items():
        step = build()
        start = time.perf_counter()
        step()  # the first call compiles (forward and backward)
        print(f"  {name}: compiled in {time.perf_counter() - start:.0f} s (not counted)")
        variants[name] = step
    variants |= {"ours, S=1": our_step(1), f"ours, S={k}": our_step(k)}
    times = interleaved(variants, args.reps)
    best = {name: min(t) / per_seed[name] * 1e3 for name, t in times.items()}
    for name, t in times.items():
        print(
            f"  {name:<22} min {best[name]:7.2f}  median "
            f"{statistics.median(t) / per_seed[name] * 1e3:7.2f}  "
            f"{best['theirs, compiled'] / best[name]:5.2f}x their compiled step"
        )
    lead = best["theirs, compiled"] / best[f"ours, S={k}"]
    print(f"  ours at S={k} per seed vs their compiled step: {lead:.2f}x (target >= {TARGET}x)")
    return best


if __name__ == "__main__":
    main()
