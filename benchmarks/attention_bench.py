"""Forward+backward time and peak memory of each attention kind, fast and reference paths.

    python benchmarks/attention_bench.py [--n 128 256 512 1024] [--batch 4] [--reps 5]

One attention module (d_model 128, 8 heads, d_head 16, causal, projections included) per
row; ratios are to dot-product attention through SDPA at the same N. Time: median of
``reps`` forward+backward passes after one warm-up (at most 2 on the slow reference path). Peak memory: tensor bytes alive at
the peak of one forward+backward, tracked by torch's MemTracker (a dispatch-level
tracker that works on CPU; it is a private torch API, so the column is skipped if it is
missing). The reference path is skipped where its N x N x m tensor alone would exceed
``--ref-limit-mb``. Targets from the issue: matroidal fast <= 1.3x dot time, memory
growing at most like N^2 (no N^2 m tensor).
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd
import torch

from structattn_lite.models.attention import build_attention

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


def step(module, x, path):
    x.grad = None
    module.zero_grad(set_to_none=True)
    module(x, path=path).sum().backward()


def seconds(module, x, path, reps: int) -> float:
    step(module, x, path)  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step(module, x, path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_mb(module, x, path) -> float:
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError:
        return float("nan")
    tracker = MemTracker()
    tracker.track_external(module, x)
    with tracker:
        step(module, x, path)
    peak = tracker.get_tracker_snapshot("peak")
    per_device = next(iter(peak.values()))
    total = next(v for k, v in per_device.items() if "Total" in str(k))
    return total / 2**20


def run(ns, batch: int, reps: int, ref_limit_mb: float) -> pd.DataFrame:
    rows = []
    for n in ns:
        x = torch.randn(batch, n, D_MODEL, requires_grad=True)
        for name, (kind, opts) in VARIANTS.items():
            torch.manual_seed(0)
            module = build_attention(kind, D_MODEL, HEADS, **opts)
            width = opts.get("m", D_HEAD) if kind != "dot" else 1
            pair_mb = batch * HEADS * n * n * width * 4 / 2**20
            for path in ("fast", "reference"):
                if path == "reference" and kind != "dot" and pair_mb > ref_limit_mb:
                    rows.append({"N": n, "variant": name, "path": path, "ms": None, "peak MB": None,
                                 "note": f"skipped: N^2 m tensor {pair_mb:.0f} MB"})  # fmt: skip
                    continue
                rows.append({"N": n, "variant": name, "path": path,
                             "ms": 1e3 * seconds(module, x, path, reps if path == "fast" else min(reps, 2)),
                             "peak MB": peak_mb(module, x, path), "note": ""})  # fmt: skip
            print(f"N={n} {name}: done", flush=True)
    df = pd.DataFrame(rows)
    base = df[(df["variant"] == "dot") & (df["path"] == "fast")].set_index("N")
    df["time / dot"] = df["ms"] / df["N"].map(base["ms"])
    df["mem / dot"] = df["peak MB"] / df["N"].map(base["peak MB"])
    return df


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--ref-limit-mb", type=float, default=300.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    df = run(args.n, args.batch, args.reps, args.ref_limit_mb)
    pd.set_option("display.width", 200)
    print(
        f"\nbatch {args.batch}, d_model {D_MODEL}, {HEADS} heads, threads {args.threads}, torch {torch.__version__}"
    )
    print(df.round(3).to_string(index=False))
    fast = df[df["path"] == "fast"].pivot(index="variant", columns="N", values="time / dot")
    print("\nfast-path time / dot-product SDPA time (target for matroidal: <= 1.3):")
    print(fast.round(2).to_string())
    mem = df[df["path"] == "fast"].pivot(index="variant", columns="N", values="peak MB")
    print("\nfast-path peak MB by N (growth at most ~N^2 expected; no N^2 m tensor):")
    print(mem.round(1).to_string())
    return df


if __name__ == "__main__":
    main()
