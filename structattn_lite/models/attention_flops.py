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
from structattn_lite.models.attention import KINDS, PATHS, Attention


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
    """Forward matmul FLOPs of one attention module of a registered ``kind``, term by
    term (2 per multiply-add): its class's ``analytic_flops``."""
    cls = KINDS[check_choice("kind", kind, KINDS)]
    check_choice("path", path, PATHS)
    return cls.analytic_flops(batch, n_tokens, d_model, n_heads, m=m, shared_qk=shared_qk,
                              path=path, width=width)  # fmt: skip


def pairwise_flops(kind: str, batch: int, n_tokens: int, d_model: int, n_heads: int, m=None):
    """Elementwise FLOPs of the reference path's pairwise terms (uncounted by torch): its
    class's ``pairwise_flops`` (0 for a kind that forms no pairwise tensor)."""
    cls = KINDS[check_choice("kind", kind, KINDS)]
    return cls.pairwise_flops(batch, n_tokens, d_model, n_heads, m=m)
