"""The metric kinds: logits are a negative learned Mahalanobis distance.

Each metric module has two exact computations. ``path="reference"`` follows the seed's
pseudocode (explicit pairwise differences: an N x N x m tensor, for inspection, audits
and small N). ``path="fast"`` folds the key bias into extra head columns,
q~ = [M z_i / tau, 1, 0], k~ = [z_j, -0.5 z_j^T M z_j / tau, 1], and calls SDPA: the
query's own norm is constant along a softmax row, so the softmax is unchanged.

The fast path's gradients match a float64 reference at large norms and small tau
(tests/test_attention_gradients.py) by three choices: z is centred on the sequence's
first position before folding (distances are translation invariant; the folded terms
shrink from |z|^2 to |z - z_0|^2); 1/tau is folded into q~, so SDPA runs with scale 1
and its backward recomputes exactly the logits of its forward; and the last column
(0 against 1) reads each row's sum of the kernel's softmax gradient, which is 0 in
exact arithmetic, so ``_RowSumZero`` can remove the residual a fused kernel leaves on
rows that are one-hot to float32 precision. With separate q/k such a row peaks at an
unknown key, so calls whose folded logits could exceed ``logit_bound`` run the same
folded kernel in float64 instead, counted in ``stats.fallbacks``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.models.attention_base import FALLBACKS, Attention, register
from structattn_lite.theory.support import SUPPORT_RULES, support_matrix

# With separate q/k a fused kernel leaves a rounding residual in rows that are one-hot
# to float32 precision, which the folded q~, k~ amplify; past this folded-logit size
# those calls fold in float64 (tests/test_attention_gradients.py).
SEPARATE_QK_LOGIT_BOUND = 1e3


class MetricAttention(Attention):
    """logits = -(z_i - z_j)^T M (z_i - z_j) / (2 tau); subclasses define M.

    Projections are bias-free: a shared bias would cancel in every difference anyway.
    """

    options = ("causal", "shared_qk", "tau", "learn_tau", "eps", "logit_bound", "pad_to")

    @classmethod
    def rank(cls, d: int, m: int | None) -> int:
        """r, the columns of M's factor U (M = U diag(l) U^T + eps I) per head."""
        raise NotImplementedError

    @classmethod
    def analytic_flops(cls, batch, n_tokens, d_model, n_heads, *, m=None, shared_qk=True,
                       path="fast", width=None) -> int:  # fmt: skip
        """Projections: 2 B N D^2 each (z, or q and k; v, o); on the fast path v and o run
        at the kernel's width, 2 B N D H w each. Fast path: forming M (2 H d r d), then
        M z per distinct side (2 B H N d^2). Reference path: u = U^T z per distinct side
        (2 B H N d r). Scores and weighted values: 2 B H N^2 w each, with w the folded
        width (d + 2, or ``width`` after padding) on the fast path, d on the reference
        path. The math backend and the reference path compute all N^2 scores even when
        causal."""
        B, N, D, H = batch, n_tokens, d_model, n_heads
        d = D // H
        sides = 1 if shared_qk else 2
        proj = 2 * B * N * D * D * (2 + sides)
        r = cls.rank(d, m)
        if path == "reference":
            return proj + sides * 2 * B * H * N * d * r + 2 * B * H * N * N * d
        w = d + 2 if width is None else width
        proj += 2 * (2 * B * N * D * H * (w - d))  # v and o at the padded width
        form = 2 * H * d * d * r
        return proj + form + sides * 2 * B * H * N * d * d + 2 * (2 * B * H * N * N * w)

    @classmethod
    def pairwise_flops(cls, batch, n_tokens, d_model, n_heads, m=None) -> int:
        """Per query-key pair and head: r subtractions, squares, weightings and additions
        for the support part, 3 d for the eps part."""
        d = d_model // n_heads
        return batch * n_heads * n_tokens * n_tokens * (4 * cls.rank(d, m) + 3 * d)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        causal: bool = True,
        shared_qk: bool = True,
        tau: float | None = None,
        learn_tau: bool = False,
        eps: float = 1e-4,
        logit_bound: float | str | None = "auto",
        pad_to: int | None = None,
    ):
        super().__init__(d_model, n_heads, causal)
        self.shared_qk = bool(check_choice("shared_qk", shared_qk, (True, False)))
        tau = math.sqrt(self.d_head) if tau is None else tau
        self.tau = check_number("tau", tau, minimum=0.0, strict=True)
        self.eps = check_number("eps", eps, minimum=0.0)  # both finite: check_number says so
        self.learn_tau = bool(check_choice("learn_tau", learn_tau, (True, False)))
        log_tau = torch.full((n_heads,), math.log(self.tau))
        if self.learn_tau:
            self.log_tau = nn.Parameter(log_tau)
        else:
            self.register_buffer("log_tau", log_tau)
        if logit_bound == "auto":  # the shared form is exact at any size (_RowSumZero)
            logit_bound = None if self.shared_qk else SEPARATE_QK_LOGIT_BOUND
        if logit_bound is not None:
            logit_bound = check_number("logit_bound", logit_bound, minimum=0.0, strict=True)
        self.logit_bound = logit_bound
        self.pad_to = None if pad_to is None else check_int("pad_to", pad_to, minimum=1)
        if self.shared_qk:
            self.w_z = nn.Linear(d_model, d_model, bias=False)
        else:
            self.w_q = nn.Linear(d_model, d_model, bias=False)
            self.w_k = nn.Linear(d_model, d_model, bias=False)

    def inv_tau(self) -> torch.Tensor:
        """1 / tau per head, [H, 1, 1]."""
        return torch.exp(-self.log_tau)[:, None, None]

    def metric_parameters(self) -> list[nn.Parameter]:
        return [self.log_tau] if self.learn_tau else []

    # --- subclasses: the metric, its factor, and the folded terms -------------------
    def metric(self) -> torch.Tensor:
        """M per head, [H, d, d] (symmetric PSD)."""
        raise NotImplementedError

    def factor(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(U [H or 1, d, r], w [H, r]) with M = U diag(w) U^T + eps I, for the reference."""
        raise NotImplementedError

    @staticmethod
    def apply_metric(z: torch.Tensor, m_tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For z [B, N, H, d] and M / tau [H, d, d]: (M z / tau, z^T M z / tau [B, N, H]).

        One small product per head with the d x d metric, so the cost does not grow
        with the number of support columns m.
        """
        mz = torch.einsum("bnhd,hde->bnhe", z, m_tau)  # M symmetric: rows of M z
        return mz, (mz * z).sum(-1)

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
        return dist * (-0.5 * self.inv_tau())

    def heads(self, t: torch.Tensor) -> torch.Tensor:
        """[B, N, H d] -> [B, N, H, d], the projection's own memory order (no copy)."""
        B, N, _ = t.shape
        return t.view(B, N, self.n_heads, self.d_head)

    def centred(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z minus one point c per sequence and head, [B, N, H, d]: the first position's
        (the mean of q and k there with separate projections).

        Every logit is unchanged (dist(z_i - c, z_j - c) = dist(z_i, z_j)), so c carries
        no gradient and is detached; the first position is visible to every query, so
        centring never lets a later token change an earlier output.
        """
        if self.shared_qk:
            z = self.heads(self.w_z(x))
            z = z - z[:, :1].detach()
            return z, z
        z_q, z_k = self.heads(self.w_q(x)), self.heads(self.w_k(x))
        c = (0.5 * (z_q[:, :1] + z_k[:, :1])).detach()
        return z_q - c, z_k - c

    def folded(self, x: torch.Tensor, width: int | None = None, dtype=None):
        """(q~, k~, |z_q|_M^2 / tau, |z_k|_M^2 / tau), q~ . k~ = logits + a row constant.

        Columns: d of M z / tau against z; the key bias (1 against -|z|_M^2 / 2 tau);
        a probe (0 against 1) whose gradient is the row sum of the kernel's dS (see
        ``_RowSumZero``); zeros up to ``width`` (default d + 2). q~, k~ are [B, H, N, w]
        views of [B, N, H, w] memory, as SDPA takes them. ``dtype``: fold in this
        precision (the projections z stay in the module's).
        """
        z_q, z_k = self.centred(x)
        if dtype is not None:
            z_q, z_k = z_q.to(dtype), z_k.to(dtype)
        m_tau = self.metric().to(z_q.dtype) * self.inv_tau().to(z_q.dtype)
        mz_q, sq_q = self.apply_metric(z_q, m_tau)
        mz_k, sq_k = (mz_q, sq_q) if self.shared_qk else self.apply_metric(z_k, m_tau)
        ones = torch.ones_like(sq_q)[..., None]
        pad = (width or self.d_head + 2) - self.d_head - 2
        q = torch.cat([mz_q, ones, ones.new_zeros(*ones.shape[:-1], 1 + pad)], -1)
        k_parts = [z_k, -0.5 * sq_k[..., None], ones]
        k = torch.cat(k_parts + ([ones.new_zeros(*ones.shape[:-1], pad)] if pad else []), -1)
        return q.transpose(1, 2), k.transpose(1, 2), sq_q, sq_k

    def folded_bound(self, sq_q: torch.Tensor, sq_k: torch.Tensor) -> float:
        """An upper bound on |q~ . k~| (Cauchy-Schwarz in the M inner product)."""
        a, b = float(sq_q.detach().amax()), float(sq_k.detach().amax())
        return math.sqrt(max(a, 0.0) * max(b, 0.0)) + 0.5 * b

    def width(self, device: torch.device) -> int:
        """Head width of the folded kernel: d + 2, padded to a multiple of pad_to.

        On CPU d + 2 = 18 runs as fast as d + 1 (measured; both miss the 16-wide
        vector path) and 20 or 24 run slower; CUDA's fused kernels want multiples of 8.
        """
        multiple = self.pad_to or (8 if device.type == "cuda" else 1)
        return -(-(self.d_head + 2) // multiple) * multiple

    def fast(self, x: torch.Tensor) -> torch.Tensor:
        width = self.width(x.device)
        q, k, sq_q, sq_k = self.folded(x, width)
        if self.logit_bound is not None:
            self.last_bound = self.folded_bound(sq_q, sq_k)
            if not self.last_bound <= self.logit_bound:  # also catches NaN
                if self.training:
                    self.fast_counts[FALLBACKS].add_(1)
                return self.folded_float64(x, width)
        if self.shared_qk:
            q, k = _RowSumZero.apply(q, k, self.d_head + 1)
        y = F.scaled_dot_product_attention(
            q, k, self.padded_value(x, width), is_causal=self.causal, scale=1.0
        )
        self.check(q, k, 1.0, y)
        return self.padded_output(y, width)

    # The kernel needs v as wide as q~, k~. Padding w_v's rows and w_o's columns per head
    # with zeros (small [d_model, d_model] copies) lets the projections write and read
    # the padded [B, N, H, width] layout directly, instead of padding v and slicing y
    # (copies of [B, N, d_model] activations, forward and backward): 6% of the module.
    def padded_value(self, x: torch.Tensor, width: int) -> torch.Tensor:
        """w_v x with each head zero-padded to ``width``, as [B, H, N, width]."""
        H, d, D = self.n_heads, self.d_head, self.d_model
        w_v = F.pad(self.w_v.weight.view(H, d, D), (0, 0, 0, width - d))
        B, N, _ = x.shape
        return F.linear(x, w_v.reshape(H * width, D)).view(B, N, H, width).transpose(1, 2)

    def padded_output(self, y: torch.Tensor, width: int) -> torch.Tensor:
        """w_o on the kernel's [B, H, N, width] output (its pad columns are 0)."""
        B, _, N, _ = y.shape
        H, d, D = self.n_heads, self.d_head, self.d_model
        w_o = F.pad(self.w_o.weight.view(D, H, d), (0, width - d)).reshape(D, H * width)
        return F.linear(y.transpose(1, 2).reshape(B, N, H * width), w_o)

    def folded_float64(self, x: torch.Tensor, width: int) -> torch.Tensor:
        """The fallback: the same folded kernel in float64, where the rounding residual
        of one-hot rows is ~1e-16 of the logits instead of ~1e-7 (exact to the tests'
        1e-4 at any logit size met in training), at a fraction of the pairwise
        reference's cost. Autocast is off inside: it must not cast back to half."""
        with torch.autocast(x.device.type, enabled=False):
            x_own = x.to(self.w_v.weight.dtype)  # autocast may hand in bfloat16
            q, k, _, _ = self.folded(x_own, width, dtype=torch.float64)
            v = self.heads(self.w_v(x_own)).to(torch.float64)
            v = F.pad(v, (0, width - self.d_head)).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=1.0)
            self.check(q, k, 1.0, y)
            out = self.w_o(self.merge(y[..., : self.d_head]).to(x_own.dtype))
        return out.to(x.dtype)

    def expanded_sq_dist(self, x: torch.Tensor) -> torch.Tensor:
        """z_i^T M z_i + z_j^T M z_j - 2 z_i^T M z_j [B, H, N, N]: can go negative by rounding."""
        z_q, z_k = self.project(x)
        M = self.metric()
        mz_q, mz_k = z_q @ M, z_k @ M
        sq_q = (mz_q * z_q).sum(-1)
        sq_k = (mz_k * z_k).sum(-1)
        return sq_q[..., :, None] + sq_k[..., None, :] - 2 * mz_q @ z_k.transpose(-1, -2)


class _RowSumZero(torch.autograd.Function):
    """Identity on (q~, k~) whose backward removes the fused kernel's row-sum residual.

    Each row of the softmax gradient dS sums to 0, but a fused kernel forms it as
    P_ij (dP_ij - D_i) with D_i from the forward output, so a row that is one-hot to
    float32 precision (the diagonal always wins with a shared z) keeps a rounding residual
    r_i on its diagonal, and the folded q~, k~ (of size |z|_M^2 / tau) turn it into a
    spurious gradient. The probe column (q~ = 0, k~ = 1) reads r_i off dq~; for a row
    that is one-hot on its diagonal the residual's whole effect is r_i k~_i on dq~_i and
    r_i q~_i on dk~_i, removed here (elsewhere r_i is rounding-sized, and so is the change).

    Forward without ctx plus ``setup_context``, and a generated vmap rule, let torch.func
    (``vmap``, ``grad``, stacked modules) and ``torch.compile`` trace it.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(q, k, probe: int):
        return q.view_as(q), k.view_as(k)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, probe = inputs
        ctx.save_for_backward(q, k)
        ctx.probe = probe

    @staticmethod
    def backward(ctx, dq, dk):
        q, k = ctx.saved_tensors
        r = dq[..., ctx.probe : ctx.probe + 1]
        return torch.addcmul(dq, r, k, value=-1), torch.addcmul(dk, r, q, value=-1), None


@register
class DenseAttention(MetricAttention):
    """A learned full metric per head: M = L L^T + eps I (L lower-triangular, from I)."""

    kind = "dense"

    @classmethod
    def rank(cls, d: int, m: int | None) -> int:
        return d

    def __init__(self, d_model: int, n_heads: int, **options: Any):
        super().__init__(d_model, n_heads, **options)
        rows, cols = torch.tril_indices(self.d_head, self.d_head)
        self.register_buffer("tril_rows", rows, persistent=False)
        self.register_buffer("tril_cols", cols, persistent=False)
        self.l_params = nn.Parameter((rows == cols).float().repeat(n_heads, 1))

    def lower(self) -> torch.Tensor:
        """L [H, d, d] from its lower-triangle entries, out of place (so torch.func can
        batch it over stacked modules, which an indexed assignment does not allow)."""
        H, d = self.n_heads, self.d_head
        flat = self.tril_rows * d + self.tril_cols
        return self.l_params.new_zeros(H, d * d).index_copy(1, flat, self.l_params).view(H, d, d)

    def metric(self) -> torch.Tensor:
        L = self.lower()
        eye = torch.eye(self.d_head, dtype=L.dtype, device=L.device)
        return L @ L.transpose(-1, -2) + self.eps * eye

    def factor(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lower(), self.l_params.new_ones(self.n_heads, self.d_head)

    def metric_parameters(self) -> list[nn.Parameter]:
        return [self.l_params, *super().metric_parameters()]


@register
class MatroidalAttention(MetricAttention):
    """M = A diag(l) A^T + eps I, A a fixed graph-incidence support, l = softplus(theta)."""

    kind = "matroidal"
    options = (*MetricAttention.options, "m", "support", "support_seed", "theta_init")

    @classmethod
    def rank(cls, d: int, m: int | None) -> int:
        return 2 * d if m is None else m

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
        return [self.theta, *super().metric_parameters()]

    @torch.no_grad()
    def prune(self, delta: float) -> int:
        """Drop columns with l_e < delta (per head); returns how many are kept in all."""
        delta = check_number("delta", delta, minimum=0.0)
        self.keep.copy_((F.softplus(self.theta) >= delta).float())
        return int(self.keep.sum())

    @torch.no_grad()
    def unprune(self) -> None:
        self.keep.fill_(1.0)
