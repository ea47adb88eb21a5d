"""Why the baselines train one seed at a time: S seeds through torch.func.vmap vs one seed.

    .venv/bin/python benchmarks/bench_baseline_stacking.py [--seeds 5 10] [--reps 10]

For each baseline at the length study's sizes (``MODEL_SIZES``; batch 64, T = 16, parity
with per-prefix labels), it times one training step's forward and backward for one seed
(the plain module) and for S seeds stacked with ``torch.func.stack_module_state`` and
vmapped, on one thread (CPU time, the variants taking turns; min of ``--reps``). Stacking
pays when S seeds cost less than S separate steps: the printed ``S x one`` must be < S.
(nn.LSTM and nn.GRU have no vmap rule, so they are not in the table.)
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from structattn_lite.models.baselines import build_baseline
from structattn_lite.studies.length.experiment import MODEL_SIZES

KINDS = ("transformer", "diag_rnn", "diag_rnn_neg", "complex_rnn")


def seconds(fn, reps: int) -> float:
    for _ in range(2):
        fn()
    best = float("inf")
    for _ in range(reps):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def steps(kind: str, n_seeds: int):
    """(one seed's step, S stacked seeds' step) on one fixed parity batch."""
    torch.manual_seed(0)
    models = [build_baseline(kind, **MODEL_SIZES[kind]) for _ in range(n_seeds)]
    x = torch.randint(0, 2, (64, 16), generator=torch.Generator().manual_seed(0))
    y = x.cumsum(1) % 2
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def call(p, b, xi):
        return functional_call(base, (p, b), (xi,))

    def stacked():
        logits = vmap(call, in_dims=(0, 0, None))(params, buffers, x)
        F.cross_entropy(logits.reshape(-1, 2), y.repeat(n_seeds, 1).reshape(-1)).backward()

    def one():
        F.cross_entropy(models[0](x).reshape(-1, 2), y.reshape(-1)).backward()

    return one, stacked


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)  # vmap's note on its attention fallback
    print(f"torch {torch.__version__}, 1 thread; ms per training step (min of {args.reps})")
    print(
        f"{'model':<14}{'one seed':>10}"
        + "".join(f"{f'S={s}':>10}{'S x one':>9}" for s in args.seeds)
    )
    for kind in KINDS:
        line, one_ms = f"{kind:<14}", None
        for s in args.seeds:
            one, stacked = steps(kind, s)
            if one_ms is None:
                one_ms = seconds(one, args.reps) * 1e3
                line += f"{one_ms:>10.1f}"
            ms = seconds(stacked, args.reps) * 1e3
            line += f"{ms:>10.1f}{ms / one_ms:>8.1f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
