"""Three attention kinds behind one constructor: dot product, dense and matroidal metrics.

``build_attention(kind, d_model, n_heads, **options)`` returns a module mapping
[B, N, d_model] -> [B, N, d_model]. The metric kinds score a query-key pair by
-dist(z_i, z_j) / (2 tau) with dist(x, y) = (x - y)^T M (x - y), M per head:

- dense:     M = L L^T + eps I, L lower-triangular and learned (d(d+1)/2 per head);
- matroidal: M = A diag(l) A^T + eps I, A a fixed graph-incidence support (d x m),
  l = softplus(theta), only theta (m per head) learned.

The module contract and dot product live in ``attention_base``, the metric kinds and
their folded fast path in ``metric_attention``; this module is the constructor.
"""

from __future__ import annotations

from typing import Any

from structattn_lite.config import check_choice
from structattn_lite.models.attention_base import KINDS, PATHS, Attention, DotAttention, register
from structattn_lite.models.metric_attention import (
    DenseAttention,
    MatroidalAttention,
    MetricAttention,
)

# what callers import from here: the constructor, the registry and the classes it holds
__all__ = [
    "ATTENTION_KINDS", "KINDS", "PATHS", "Attention", "DenseAttention", "DotAttention",
    "MatroidalAttention", "MetricAttention", "build_attention", "register",
]  # fmt: skip

ATTENTION_KINDS = KINDS  # every registered kind (``register``), in registration order


def build_attention(kind: str, d_model: int, n_heads: int, **options: Any) -> Attention:
    """``build_attention("matroidal", 128, 8, m=32, support="random", shared_qk=True)``.

    Any registered kind (``KINDS``); each takes the options its class lists. Options:
    causal (all kinds, default True); for the metric kinds shared_qk (default
    True: the seed's one projection z for both sides), tau (default sqrt(d_head); with
    learn_tau=True its starting value, then learned per head as log tau), eps
    (default 1e-4), logit_bound ("auto": none with shared_qk, 1e3 with separate q/k;
    None never falls back), pad_to (head-width
    multiple for the folded q~, k~, v; default None: 8 on CUDA, none on CPU, where 17
    runs faster than 20 or 24); for matroidal m (default 2 d_head), support (one of
    SUPPORT_RULES, default "random"), support_seed, theta_init (default: l_e = d_head /
    (2m), so that trace(M) matches the identity's).
    """
    cls = KINDS[check_choice("kind", kind, KINDS)]
    unknown = sorted(set(options) - set(cls.options))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for kind={kind!r}; allowed options: {list(cls.options)}"
        )
    return cls(d_model, n_heads, **options)
