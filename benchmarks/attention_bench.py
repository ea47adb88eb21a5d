"""Forward+backward time of each attention kind against dot product, as paired ratios.

    python benchmarks/attention_bench.py [--n 128 256] [--batch 32] [--reps 30] [--core]

One attention module per variant (d_model 128, 8 heads, d_head 16, causal, projections
included; ``--core`` times only the attention kernel on the q, k, v each module feeds
it). The variants run interleaved in a new random order every repetition, after a
warm-up, so a burst of load on a shared machine hits every variant of that repetition
alike; each ratio is variant / dot of the same repetition. Printed: the median time and
the median and minimum of the paired ratios (the minimum is the least disturbed pair).
Times are the process's CPU time (one intra-op thread by default), which time spent
waiting for a core on a loaded machine does not inflate, as wall time would.
Target from issue 11: the whole matroidal module at most 1.15x dot on CPU.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import pandas as pd
import torch
import torch.nn.functional as F

from structattn_lite.models.attention import MetricAttention, build_attention

D_MODEL, HEADS = 128, 8
D_HEAD = D_MODEL // HEADS
VARIANTS = {
    "dot": ("dot", {}),
    "dense": ("dense", {}),
    "matroidal m=1d": ("matroidal", {"m": D_HEAD}),
    "matroidal m=2d": ("matroidal", {"m": 2 * D_HEAD}),
    "matroidal m=4d": ("matroidal", {"m": 4 * D_HEAD}),
    "matroidal m=2d (sep q/k)": ("matroidal", {"m": 2 * D_HEAD, "shared_qk": False}),
    "dense (sep q/k)": ("dense", {"shared_qk": False}),
}


def module_step(module, x):
    """One forward+backward of the whole module."""

    def step():
        x.grad = None
        module.zero_grad(set_to_none=True)
        module(x).sum().backward()

    return step


def core_step(module, x):
    """One forward+backward of the attention kernel alone, on the tensors the module uses."""
    with torch.no_grad():
        v = module.split(module.w_v(x))
        if isinstance(module, MetricAttention):
            width = module.width(x.device)
            q, k, _, _ = module.folded(x, width)
            v, scale = F.pad(v, (0, width - module.d_head)), 1.0
        else:
            q, k, scale = module.split(module.w_q(x)), module.split(module.w_k(x)), None
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))

    def step():
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).sum().backward()

    return step


def paired(n: int, batch: int, reps: int, warmup: int, core: bool) -> pd.DataFrame:
    torch.manual_seed(0)
    x = torch.randn(batch, n, D_MODEL, requires_grad=True)
    steps = {}
    for name, (kind, opts) in VARIANTS.items():
        module = build_attention(kind, D_MODEL, HEADS, **opts)
        steps[name] = (core_step if core else module_step)(module, x)
    times = {name: [] for name in steps}
    order = list(steps)
    for rep in range(warmup + reps):
        random.Random(rep).shuffle(order)
        for name in order:
            start = time.process_time()
            steps[name]()
            if rep >= warmup:
                times[name].append(time.process_time() - start)
    rows = []
    for name, t in times.items():
        ratios = [a / b for a, b in zip(t, times["dot"], strict=True)]
        rows.append({"N": n, "variant": name, "median ms": 1e3 * statistics.median(t),
                     "ratio median": statistics.median(ratios), "ratio min": min(ratios),
                     "ratio max": max(ratios)})  # fmt: skip
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[128])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--core", action="store_true", help="time the attention kernel only")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    df = pd.concat([paired(n, args.batch, args.reps, args.warmup, args.core) for n in args.n])
    what = "attention kernel only" if args.core else "whole module (projections included)"
    print(f"{what}; forward+backward; batch {args.batch}, d_model {D_MODEL}, {HEADS} heads, "
          f"threads {args.threads}, {args.reps} interleaved repetitions after {args.warmup} "
          f"warm-up, torch {torch.__version__}")  # fmt: skip
    print(df.round(3).to_string(index=False))
    return df


if __name__ == "__main__":
    main()
