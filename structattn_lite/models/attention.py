"""Three attention kinds behind one constructor: dot product, dense and matroidal metrics.

``build_attention(kind, d_model, n_heads, **options)`` returns a module mapping
[B, N, d_model] -> [B, N, d_model]. The metric kinds score a query-key pair by
-dist(z_i, z_j) / (2 tau) with dist(x, y) = (x - y)^T M (x - y), M per head:

- dense:     M = L L^T + eps I, L lower-triangular and learned (d(d+1)/2 per head);
- matroidal: M = A diag(l) A^T + eps I, A a fixed graph-incidence support (d x m),
  l = softplus(theta), only theta (m per head) learned.

Each module has two exact computations. ``path="reference"`` follows the seed's
pseudocode (explicit pairwise differences: an N x N x m tensor, for inspection and
small N). ``path="fast"`` folds the key bias into one extra head dimension,
q~ = [M z_i, 1], k~ = [z_j, -0.5 z_j^T M z_j], and calls SDPA with scale 1/tau: the
query's own norm is constant along a softmax row, so the softmax is unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.theory import SUPPORT_RULES, support_matrix

ATTENTION_KINDS = ("dot", "dense", "matroidal")
PATHS = ("fast", "reference")
_METRIC_OPTIONS = ("causal", "shared_qk", "tau", "eps")
OPTIONS = {
    "dot": ("causal",),
    "dense": _METRIC_OPTIONS,
    "matroidal": (*_METRIC_OPTIONS, "m", "support", "support_seed", "theta_init"),
}


def build_attention(kind: str, d_model: int, n_heads: int, **options: Any) -> Attention:
    """``build_attention("matroidal", 128, 8, m=32, support="random", shared_qk=True)``.

    Options: causal (all kinds, default True); shared_qk (default True: the seed's one
    projection z for both sides), tau (default sqrt(d_head)), eps (default 1e-4) for
    the metric kinds; m (default 2 d_head), support (one of SUPPORT_RULES, default
    "random"), support_seed, theta_init (default: l_e = d_head / (2m), so that
    trace(M) matches the identity's) for matroidal.
    """
    check_choice("kind", kind, ATTENTION_KINDS)
    unknown = sorted(set(options) - set(OPTIONS[kind]))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for kind={kind!r}; allowed options: {list(OPTIONS[kind])}"
        )
    cls = {"dot": DotAttention, "dense": DenseAttention, "matroidal": MatroidalAttention}[kind]
    return cls(d_model, n_heads, **options)


class Attention(nn.Module):
    """Shared parts: value/output projections, head split, causal mask, the two paths.

    ``keep_logits = True`` stores the last reference logits ([B, H, N, N], masked
    entries -inf) in ``last_logits`` for plots.
    """

    kind = "base"

    def __init__(self, d_model: int, n_heads: int, causal: bool = True):
        super().__init__()
        d_model = check_int("d_model", d_model, minimum=1)
        n_heads = check_int("n_heads", n_heads, minimum=1)
        if d_model % n_heads:
            divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
            raise ValueError(
                f"d_model={d_model} must be divisible by n_heads={n_heads}; "
                f"n_heads that divide it: {divisors}"
            )
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.causal = bool(causal)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)
        self.path = "fast"
        self.keep_logits = False
        self.last_logits: torch.Tensor | None = None

    def split(self, t: torch.Tensor) -> torch.Tensor:
        B, N, _ = t.shape
        return t.view(B, N, self.n_heads, self.d_head).transpose(1, 2)

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """Causal -inf above the diagonal (a no-op when not causal)."""
        if not self.causal:
            return logits
        n_q, n_k = logits.shape[-2:]
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=logits.device).tril()
        return logits.masked_fill(~keep, float("-inf"))

    def reference_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Unmasked logits [B, H, N, N] by the explicit (reference) formula."""
        raise NotImplementedError

    def fast(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, path: str | None = None) -> torch.Tensor:
        path = check_choice("path", path or self.path, PATHS)
        v = self.split(self.w_v(x))
        if path == "fast":
            y = self.fast(x, v)
        else:
            logits = self.mask(self.reference_logits(x))
            if self.keep_logits:
                self.last_logits = logits.detach()
            y = logits.softmax(-1) @ v
        B, N, _ = x.shape
        return self.w_o(y.transpose(1, 2).reshape(B, N, self.d_model))

    def metric_parameters(self) -> list[nn.Parameter]:
        """Parameters that define the similarity beyond the projections."""
        return []


class DotAttention(Attention):
    """Standard scaled dot-product attention with separate W_q, W_k."""

    kind = "dot"

    def __init__(self, d_model: int, n_heads: int, causal: bool = True):
        super().__init__(d_model, n_heads, causal)
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)

    def reference_logits(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.split(self.w_q(x)), self.split(self.w_k(x))
        return q @ k.transpose(-1, -2) / math.sqrt(self.d_head)

    def fast(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k = self.split(self.w_q(x)), self.split(self.w_k(x))
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class MetricAttention(Attention):
    """logits = -(z_i - z_j)^T M (z_i - z_j) / (2 tau); subclasses define M.

    Projections are bias-free: a shared bias would cancel in every difference anyway.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        causal: bool = True,
        shared_qk: bool = True,
        tau: float | None = None,
        eps: float = 1e-4,
    ):
        super().__init__(d_model, n_heads, causal)
        self.shared_qk = bool(check_choice("shared_qk", shared_qk, (True, False)))
        tau = math.sqrt(self.d_head) if tau is None else tau
        self.tau = check_number("tau", tau, minimum=0.0, strict=True)
        self.eps = check_number("eps", eps, minimum=0.0)
        if not (math.isfinite(self.tau) and math.isfinite(self.eps)):
            raise ValueError(f"tau and eps must be finite, got tau={tau}, eps={eps}")
        if self.shared_qk:
            self.w_z = nn.Linear(d_model, d_model, bias=False)
        else:
            self.w_q = nn.Linear(d_model, d_model, bias=False)
            self.w_k = nn.Linear(d_model, d_model, bias=False)

    # --- subclasses: the metric and its factor ------------------------------------
    def metric(self) -> torch.Tensor:
        """M per head, [H, d, d] (symmetric PSD)."""
        raise NotImplementedError

    def factor(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(U [H or 1, d, r], w [H, r]) with M = U diag(w) U^T + eps I, for the reference."""
        raise NotImplementedError

    # --- the two paths --------------------------------------------------------------
    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.shared_qk:
            z = self.split(self.w_z(x))
            return z, z
        return self.split(self.w_q(x)), self.split(self.w_k(x))

    def reference_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The seed's pseudocode: u = A^T z, pairwise deltas, weighted squares."""
        z_q, z_k = self.project(x)
        U, w = self.factor()
        u_q = torch.einsum("hdm,bhnd->bhnm", U, z_q)
        u_k = u_q if self.shared_qk else torch.einsum("hdm,bhnd->bhnm", U, z_k)
        delta = u_q[:, :, :, None, :] - u_k[:, :, None, :, :]  # [B, H, N, N, m]
        diff = z_q[:, :, :, None, :] - z_k[:, :, None, :, :]
        dist = (delta**2 * w[None, :, None, None, :]).sum(-1) + self.eps * (diff**2).sum(-1)
        return -dist / (2 * self.tau)

    def folded_qk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q~ = [M z_i, 1], k~ = [z_j, -0.5 z_j^T M z_j]; q~ . k~ / tau = logits + row const."""
        z_q, z_k = self.project(x)
        M = self.metric()
        mz_q = z_q @ M  # M symmetric: the row vector z M is (M z)^T
        mz_k = mz_q if self.shared_qk else z_k @ M
        bias = -0.5 * (mz_k * z_k).sum(-1, keepdim=True)
        q = torch.cat([mz_q, torch.ones_like(bias)], dim=-1)
        return q, torch.cat([z_k, bias], dim=-1)

    def fast(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k = self.folded_qk(x)
        # SDPA's fused CPU kernel needs one head size for q, k and v: pad v by a zero column.
        y = F.scaled_dot_product_attention(
            q, k, F.pad(v, (0, 1)), is_causal=self.causal, scale=1.0 / self.tau
        )
        return y[..., : self.d_head]

    def expanded_sq_dist(self, x: torch.Tensor) -> torch.Tensor:
        """z_i^T M z_i + z_j^T M z_j - 2 z_i^T M z_j [B, H, N, N]: can go negative by rounding."""
        z_q, z_k = self.project(x)
        M = self.metric()
        mz_q, mz_k = z_q @ M, z_k @ M
        sq_q = (mz_q * z_q).sum(-1)
        sq_k = (mz_k * z_k).sum(-1)
        return sq_q[..., :, None] + sq_k[..., None, :] - 2 * mz_q @ z_k.transpose(-1, -2)


class DenseAttention(MetricAttention):
    """A learned full metric per head: M = L L^T + eps I (L lower-triangular, from I)."""

    kind = "dense"

    def __init__(self, d_model: int, n_heads: int, **options: Any):
        super().__init__(d_model, n_heads, **options)
        rows, cols = torch.tril_indices(self.d_head, self.d_head)
        self.register_buffer("tril_rows", rows, persistent=False)
        self.register_buffer("tril_cols", cols, persistent=False)
        self.l_params = nn.Parameter((rows == cols).float().repeat(n_heads, 1))

    def lower(self) -> torch.Tensor:
        L = self.l_params.new_zeros(self.n_heads, self.d_head, self.d_head)
        L[:, self.tril_rows, self.tril_cols] = self.l_params
        return L

    def metric(self) -> torch.Tensor:
        L = self.lower()
        eye = torch.eye(self.d_head, dtype=L.dtype, device=L.device)
        return L @ L.transpose(-1, -2) + self.eps * eye

    def factor(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lower(), self.l_params.new_ones(self.n_heads, self.d_head)

    def metric_parameters(self) -> list[nn.Parameter]:
        return [self.l_params]


class MatroidalAttention(MetricAttention):
    """M = A diag(l) A^T + eps I, A a fixed graph-incidence support, l = softplus(theta)."""

    kind = "matroidal"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        m: int | None = None,
        support: str = "random",
        support_seed: int = 0,
        theta_init: float | None = None,
        **options: Any,
    ):
        super().__init__(d_model, n_heads, **options)
        d = self.d_head
        m = 2 * d if m is None else check_int("m", m, minimum=1)
        self.support = check_choice("support", support, SUPPORT_RULES)
        A = support_matrix(support, d, m, seed=check_int("support_seed", support_seed))
        self.m = m
        self.register_buffer("A", torch.as_tensor(A, dtype=torch.float32))
        self.register_buffer("keep", torch.ones(n_heads, m))  # pruning mask (1 = kept)
        if theta_init is None:  # l_e = d / (2m): trace(A diag(l) A^T) = 2 m l = d = trace(I)
            theta_init = math.log(math.expm1(d / (2 * m)))
        theta_init = check_number("theta_init", theta_init)
        self.theta = nn.Parameter(torch.full((n_heads, m), theta_init))

    def weights(self) -> torch.Tensor:
        """l = softplus(theta) times the pruning mask, [H, m]."""
        return F.softplus(self.theta) * self.keep

    def metric(self) -> torch.Tensor:
        AL = self.A[None] * self.weights()[:, None, :]  # [H, d, m]
        eye = torch.eye(self.d_head, dtype=AL.dtype, device=AL.device)
        return AL @ self.A.T[None] + self.eps * eye

    def factor(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.A[None].expand(self.n_heads, -1, -1), self.weights()

    def metric_parameters(self) -> list[nn.Parameter]:
        return [self.theta]

    @torch.no_grad()
    def prune(self, delta: float) -> int:
        """Drop columns with l_e < delta (per head); returns how many are kept in all."""
        delta = check_number("delta", delta, minimum=0.0)
        self.keep.copy_((F.softplus(self.theta) >= delta).float())
        return int(self.keep.sum())

    @torch.no_grad()
    def unprune(self) -> None:
        self.keep.fill_(1.0)
