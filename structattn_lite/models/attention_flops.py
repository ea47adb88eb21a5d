"""Attention FLOPs: measured with FlopCounterMode, and the analytic count it must match.

FlopCounterMode counts matrix products only (2 FLOPs per multiply-add) and counts 0
for SDPA's fused CPU kernel, so ``measure_flops`` runs under the math backend, where
SDPA decomposes into two batched matmuls. Elementwise work (softmax, the reference
path's N x N x m pairwise squares) is never counted by it; ``pairwise_flops`` gives
that part analytically so the reference path's real cost is not hidden.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from structattn_lite.config import check_choice, check_int
from structattn_lite.models.attention import ATTENTION_KINDS, PATHS, Attention


def measure_flops(fn: Callable[[], object], backward: bool = False) -> dict[str, int]:
    """Counted FLOPs of ``fn()`` (and of ``.sum().backward()`` on its output) by op."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        out = fn()
        if backward:
            out.sum().backward()
    by_op = {
        str(op).split(".")[-1]: int(n) for op, n in counter.get_flop_counts()["Global"].items()
    }
    return {"total": int(counter.get_total_flops()), **by_op}


def attention_flops(
    module: Attention, n_tokens: int, batch: int = 1, path: str = "fast", backward: bool = False
) -> int:
    """Measured matmul FLOPs of one attention module on a random [batch, n_tokens, d] input."""
    check_choice("path", path, PATHS)
    device = next(module.parameters()).device
    x = torch.randn(batch, check_int("n_tokens", n_tokens, 1), module.d_model, device=device)
    with torch.set_grad_enabled(backward):
        return measure_flops(lambda: module(x, path=path), backward=backward)["total"]


def analytic_attention_flops(
    kind: str,
    batch: int,
    n_tokens: int,
    d_model: int,
    n_heads: int,
    m: int | None = None,
    shared_qk: bool = True,
    path: str = "fast",
    width: int | None = None,
) -> int:
    """Forward matmul FLOPs of one attention module, term by term (2 per multiply-add).

    Projections: 2 B N D^2 each (q, k, v, o for dot and separate q/k; z, v, o shared;
    on the metric kinds' fast path v and o run at the kernel's width, 2 B N D H w each).
    Fast path: forming M (matroidal (A l) A^T: 2 H d m d; dense L L^T: 2 H d^3), then
    M z per distinct side (2 B H N d^2). Reference path: u = U^T z
    per distinct side (2 B H N d r; r = m, or d for dense). Scores and weighted values:
    2 B H N^2 w each, with w the width the kernel runs: d for dot, the folded width
    (d + 2, or ``width`` after padding) on the fast path, d on the reference path. The
    math backend and the reference path compute all N^2 scores even when causal.
    """
    check_choice("kind", kind, ATTENTION_KINDS)
    check_choice("path", path, PATHS)
    B, N, D, H = batch, n_tokens, d_model, n_heads
    d = D // H
    sides = 1 if (shared_qk and kind != "dot") else 2
    proj = 2 * B * N * D * D * (2 + sides)
    if kind == "dot":
        return proj + 2 * (2 * B * H * N * N * d)
    r = d if kind == "dense" else (2 * d if m is None else m)
    if path == "reference":
        return proj + sides * 2 * B * H * N * d * r + 2 * B * H * N * N * d
    w = d + 2 if width is None else width
    proj += 2 * (2 * B * N * D * H * (w - d))  # v and o at the padded width
    form = 2 * H * d * d * (d if kind == "dense" else r)
    return proj + form + sides * 2 * B * H * N * d * d + 2 * (2 * B * H * N * N * w)


def pairwise_flops(kind: str, batch: int, n_tokens: int, d_model: int, n_heads: int, m=None):
    """Elementwise FLOPs of the reference path's pairwise terms (uncounted by torch).

    Per query-key pair and head: r subtractions, squares, weightings and additions for
    the support part, 3 d for the eps part; 0 for dot (it has no pairwise tensor).
    """
    check_choice("kind", kind, ATTENTION_KINDS)
    if kind == "dot":
        return 0
    d = d_model // n_heads
    r = d if kind == "dense" else (2 * d if m is None else m)
    return batch * n_heads * n_tokens * n_tokens * (4 * r + 3 * d)
