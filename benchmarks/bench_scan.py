"""Parallel scan vs the loop reference: forward + backward time at T in {16, 256, 1024}.

    .venv/bin/python benchmarks/bench_scan.py [--batch 16] [--dim 32] [--threads 1]

Times one forward and backward pass of h_t = alpha_t h_{t-1} + drive_t (complex drive,
real and complex alpha) and of a whole CSP / diagonal-RNN model, and prints the speedup
of the scan over the loop, all measured in this one run. The target is >= 5x at T=1024.
"""

from __future__ import annotations

import argparse
import time

import torch

from structattn_lite.models import build_model
from structattn_lite.models.csp import linear_recurrence_loop
from structattn_lite.models.scan import linear_recurrence_scan


def seconds(fn, min_time=0.5, max_reps=50):
    fn()  # warm-up
    reps, start = 0, time.perf_counter()
    while reps < max_reps and (reps < 2 or time.perf_counter() - start < min_time):
        fn()
        reps += 1
    return (time.perf_counter() - start) / reps


def recurrence_case(scan, batch, length, dim, complex_alpha):
    g = torch.Generator().manual_seed(0)
    alpha = torch.rand(batch, length, dim, generator=g)
    if complex_alpha:
        alpha = torch.polar(alpha, torch.rand(batch, length, dim, generator=g))
    alpha.requires_grad_()
    drive = torch.randn(batch, length, dim, generator=g, dtype=torch.complex64, requires_grad=True)

    def step():
        h = scan(alpha, drive)
        torch.view_as_real(h).square().sum().backward()

    return step


def model_case(name, preset, scan, batch, length, dim):
    torch.manual_seed(0)
    kwargs = {"preset": preset} if preset else {}
    model = build_model(name, **kwargs, d_model=dim, n_layers=2, scan=scan)
    x = torch.randint(0, 2, (batch, length))

    def step():
        model.zero_grad()
        model(x).square().sum().backward()

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 256, 1024])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"forward+backward, batch={args.batch}, d={args.dim}, {args.threads} thread(s), torch {torch.__version__}"
    )
    print(f"{'case':<34}{'T':>6}{'loop ms':>11}{'scan ms':>11}{'speedup':>9}")
    cases = [
        ("recurrence, real alpha", lambda f, t: recurrence_case(f, args.batch, t, args.dim, False)),
        (
            "recurrence, complex alpha",
            lambda f, t: recurrence_case(f, args.batch, t, args.dim, True),
        ),
    ]
    for label, make in cases:
        for length in args.lengths:
            loop = seconds(make(linear_recurrence_loop, length))
            par = seconds(make(linear_recurrence_scan, length))
            print(
                f"{label:<34}{length:>6}{loop * 1e3:>11.1f}{par * 1e3:>11.1f}{loop / par:>8.1f}x",
                flush=True,
            )
    for name, preset in (("csp", "code_switches"), ("diag_rnn_neg", None), ("complex_rnn", None)):
        label = f"model {name}{'/' + preset if preset else ''} (2 layers)"
        for length in args.lengths:
            loop = seconds(model_case(name, preset, "loop", args.batch, length, args.dim))
            par = seconds(model_case(name, preset, "parallel", args.batch, length, args.dim))
            print(
                f"{label:<34}{length:>6}{loop * 1e3:>11.1f}{par * 1e3:>11.1f}{loop / par:>8.1f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
