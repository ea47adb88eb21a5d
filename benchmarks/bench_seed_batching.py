"""K seeds trained together (one stacked model, ``runs.train`` of a list) vs K runs one after another
(each a stack of one seed, ``runs.train`` of one config).

    .venv/bin/python benchmarks/bench_seed_batching.py [--seeds 3] [--threads 1]

Times ``runs.train`` of each seed against ``runs.train`` of them all on the same configs (a short
parity run with per-prefix labels) at a few model sizes, and prints the speedup.
"""

from __future__ import annotations

import argparse
import time

import torch

from structattn_lite.runs import train
from structattn_lite.training.state_tracking import CSPRun


def configs(k, d_model, n_layers, epochs, scan):
    return [
        CSPRun(task="parity", preset="code_switches", seed=s, length=16, n=1000, labels="prefix", leaky=True,
               epochs=epochs, model_options={"d_model": d_model, "n_layers": n_layers, "scan": scan})
        for s in range(k)
    ]  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"{args.seeds} seeds x {args.epochs} epochs (n=1000, T=16, batch 64), {args.threads} thread(s)"
    )
    print(f"{'model':<30}{'sequential s':>14}{'batched s':>11}{'speedup':>9}")
    for d_model, n_layers, scan in (
        (8, 1, "loop"),
        (16, 2, "loop"),
        (32, 2, "parallel"),
        (64, 3, "parallel"),
    ):
        cfgs = configs(args.seeds, d_model, n_layers, args.epochs, scan)
        start = time.perf_counter()
        for c in cfgs:
            train("grokking", c, progress=False)
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        train("grokking", cfgs)
        batched = time.perf_counter() - start
        label = f"csp d={d_model}, {n_layers} layer(s), {scan}"
        print(
            f"{label:<30}{sequential:>14.1f}{batched:>11.1f}{sequential / batched:>8.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
