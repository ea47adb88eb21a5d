"""The elementwise core of a seed-stacked CSP block, as autograd nodes with hand-written
backwards: at these sizes a training step pays per-op overhead more than arithmetic, so
everything between a block's projections and the next block (angles, gates, rotation,
the recurrence, SiLU, skip, normalisation) is one node, and the token gather and the
decoder's phase are one node each. ``models/csp_stacked.py`` builds the modules on them;
the tests compare both against the reference CSP, outputs and gradients.

Complex vectors are their two real halves on the last axis, [re | im]; ``_pair`` views
them as [..., 2, d].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

EPS = 1e-6  # of the reference's h / (|h| + 1e-6)


@dataclass(frozen=True)
class _Spec:
    """What one block's elementwise core does (fixed by the config)."""

    d: int
    n_angles: int  # 0 (no rotation), 1 (one angle per step) or d (one per dimension)
    cumulative: bool
    decay: bool  # gates "decay" (else "softplus")
    silu: str
    skip: bool
    complex_norm: bool  # "complex" is done in the core; "layernorm" after it


def _pair(t: torch.Tensor, d: int) -> torch.Tensor:
    """[..., 2d] as [..., 2, d]: index -2 picks the real (0) or imaginary (1) half."""
    return t.view(*t.shape[:-1], 2, d)


def _dot(a5: torch.Tensor, b5: torch.Tensor) -> torch.Tensor:
    """Re a Re b + Im a Im b per component: [..., 2, d] pairs -> [..., d]."""
    return torch.addcmul(a5[..., 0, :] * b5[..., 0, :], a5[..., 1, :], b5[..., 1, :])


def _unit_forward(y5: torch.Tensor):
    """y / (|y| + eps) per complex component, y as [..., 2, d]; returns out, |y|, |y| + eps."""
    n = torch.hypot(y5[..., 0, :], y5[..., 1, :])  # |y| without overflow, as torch.abs
    den = n + EPS
    return y5 / den.unsqueeze(-2), n, den


def _unit_backward(g5: torch.Tensor, y5: torch.Tensor, n: torch.Tensor, den: torch.Tensor):
    # d(y/den) = g/den - <g, y> y / (den^2 |y|); at y = 0 the second term is 0 (torch: sgn(0) = 0)
    p = _dot(g5, y5)
    coef = torch.where(n > 0, p / den / n.clamp_min(torch.finfo(n.dtype).tiny), 0.0)
    return (g5 - coef.unsqueeze(-2) * y5) / den.unsqueeze(-2)


class _Unit(torch.autograd.Function):
    """The decoder's phase, h / (|h| + 1e-6) per component, on [..., 2d]."""

    @staticmethod
    def forward(ctx, y):
        y5 = _pair(y, y.shape[-1] // 2)
        out, n, den = _unit_forward(y5)
        ctx.save_for_backward(y5, n, den)
        return out.view(y.shape)

    @staticmethod
    def backward(ctx, g):
        y5, n, den = ctx.saved_tensors
        return _unit_backward(_pair(g.contiguous(), y5.shape[-1]), y5, n, den).view(g.shape)


class _TokenRows(torch.autograd.Function):
    """table [S, V, k] -> table[s, token] at every position, rows = token + s V [S, T, B].

    The backward sums each row's gradient over all its positions in float64 (as fast as
    embedding's float32 running sum here, and 10x closer to the exact sum on 1,024 rows).
    """

    @staticmethod
    def forward(ctx, table, rows):
        ctx.save_for_backward(rows)
        ctx.table_shape = table.shape
        return F.embedding(rows, table.reshape(-1, table.shape[-1]))

    @staticmethod
    def backward(ctx, g):
        (rows,) = ctx.saved_tensors
        shape = ctx.table_shape
        total = g.new_zeros(shape[0] * shape[1], shape[2], dtype=torch.float64)
        total.index_add_(0, rows.reshape(-1), g.reshape(-1, shape[2]).double())
        return total.to(g.dtype).view(shape), None


class _BlockCore(torch.autograd.Function):
    """z [S,T,B,2d], pre [S,T,B,k] = (delta | gamma | angle) -> the block's output.

    ``last`` keeps only the last time step of the output (the recurrence still runs over
    all of them).
    """

    @staticmethod
    def forward(ctx, z, pre, skip_logit, spec: _Spec, last: bool):
        d = spec.d
        z5 = _pair(z, d)
        delta = pre[..., :d]
        if spec.n_angles:  # rotate the input: r = z e^{i theta}
            tanh_a = torch.tanh(pre[..., pre.shape[-1] - spec.n_angles :])
            theta = tanh_a * math.pi
            if spec.cumulative:
                theta = theta.cumsum(1)
            cos, sin = theta.cos(), theta.sin()
            r5 = torch.empty_like(z5)
            zr, zi = z5[..., 0, :], z5[..., 1, :]
            torch.mul(zr, cos, out=r5[..., 0, :]).addcmul_(zi, sin, value=-1.0)
            torch.mul(zr, sin, out=r5[..., 1, :]).addcmul_(zi, cos)
        else:
            tanh_a = cos = sin = None
            r5 = z5
        if spec.decay:  # alpha = exp(-softplus(delta)) = sigmoid(-delta); gamma = (1 + sin g) / 2
            alpha = torch.sigmoid(-delta)
            gamma = pre[..., d : 2 * d].sin().add_(1.0).mul_(0.5)
        else:
            alpha = gamma = F.softplus(delta)
        a5 = alpha.unsqueeze(-2)
        h5 = r5 * gamma.unsqueeze(-2)  # the drive, turned into the states in place
        a_t = a5.unbind(1)  # one view per step: cheaper than indexing inside the loop
        if spec.silu == "step":  # h_t = SiLU(alpha_t h_{t-1} + drive_t): keep pre-activations
            p5 = h5
            h5 = torch.empty_like(p5)
            p_t, h_t = p5.unbind(1), h5.unbind(1)
            h_t[0].copy_(F.silu(p_t[0]))
            for t in range(1, len(h_t)):
                h_t[t].copy_(F.silu(p_t[t].addcmul_(a_t[t], h_t[t - 1])))
        else:
            p5 = None
            h_t = h5.unbind(1)
            for t in range(1, len(h_t)):
                h_t[t].addcmul_(a_t[t], h_t[t - 1])
        hs5, zs5 = (h5[:, -1:], z5[:, -1:]) if last else (h5, z5)
        y5 = F.silu(hs5) if spec.silu == "boundary" else hs5
        sg = None
        if spec.skip:
            sg = torch.sigmoid(skip_logit)[:, None, None, None, :]
            y5 = torch.addcmul(y5, zs5, sg)
        n = den = None
        if spec.complex_norm:
            out5, n, den = _unit_forward(y5)
        else:
            out5 = y5.clone() if y5 is hs5 else y5  # never hand out the saved states
        ctx.spec, ctx.last = spec, last
        ctx.save_for_backward(z5, pre, tanh_a, cos, sin, r5, alpha, gamma, h5, p5, y5, sg, n, den)
        return out5.contiguous().view(*out5.shape[:-2], 2 * d)

    @staticmethod
    def backward(ctx, g_out):
        spec, last = ctx.spec, ctx.last
        z5, pre, tanh_a, cos, sin, r5, alpha, gamma, h5, p5, y5, sg, n, den = ctx.saved_tensors
        d = spec.d
        g5 = _pair(g_out.contiguous(), d)
        fresh = spec.complex_norm or spec.silu == "boundary"  # g5 is ours to overwrite
        if spec.complex_norm:
            g5 = _unit_backward(g5, y5, n, den)
        g_skip = gz_skip = None
        if spec.skip:
            zs5 = z5[:, -1:] if last else z5
            gz_skip = g5 * sg
            g_sg = (g5 * zs5).sum((1, 2, 3))
            g_skip = g_sg * sg[:, 0, 0, 0] * (1 - sg[:, 0, 0, 0])
        hs5 = h5[:, -1:] if last else h5
        if spec.silu == "boundary":
            g5 = torch.ops.aten.silu_backward(g5, hs5)
        if last:  # only the last step had an output
            gh5 = torch.zeros_like(h5)
            gh5[:, -1:] = g5
        else:
            gh5 = g5 if fresh else g5.clone()
        a_t, g_t = alpha.unsqueeze(-2).unbind(1), gh5.unbind(1)
        # reverse recurrence: g_drive_t = g_h_t + alpha_{t+1} g_drive_{t+1} (through SiLU)
        if spec.silu == "step":
            p_t = p5.unbind(1)
            for t in range(len(g_t) - 1, -1, -1):
                g_t[t].copy_(torch.ops.aten.silu_backward(g_t[t], p_t[t]))
                if t:
                    g_t[t - 1].addcmul_(a_t[t], g_t[t])
        else:
            for t in range(len(g_t) - 1, 0, -1):
                g_t[t - 1].addcmul_(a_t[t], g_t[t])
        g_alpha = torch.zeros_like(alpha)
        g_alpha[:, 1:] = _dot(gh5[:, 1:], h5[:, :-1])
        g_gamma = _dot(gh5, r5)
        g_r5 = gh5.mul_(gamma.unsqueeze(-2))
        parts, delta = [], pre[..., :d]
        if spec.decay:
            # d sigmoid(-x) / dx = -a (1 - a), with 1 - a = sigmoid(x) (no cancellation)
            parts.append(g_alpha.mul_(alpha).mul_(torch.sigmoid(delta)).neg_())
            parts.append(g_gamma.mul_(pre[..., d : 2 * d].cos()).mul_(0.5))
        else:
            parts.append(g_alpha.add_(g_gamma).mul_(torch.sigmoid(delta)))
        if spec.n_angles:
            gr, gi = g_r5[..., 0, :], g_r5[..., 1, :]
            rr, ri = r5[..., 0, :], r5[..., 1, :]
            g_theta = gi * rr - gr * ri
            if spec.n_angles == 1:
                g_theta = g_theta.sum(-1, keepdim=True)
            gz5 = torch.empty_like(g_r5)
            torch.mul(gr, cos, out=gz5[..., 0, :]).addcmul_(gi, sin)
            torch.mul(gi, cos, out=gz5[..., 1, :]).addcmul_(gr, sin, value=-1.0)
            if spec.cumulative:
                g_theta = g_theta.flip(1).cumsum(1).flip(1)
            parts.append(g_theta.mul_(1 - tanh_a.square()).mul_(math.pi))
        else:
            gz5 = g_r5
        if spec.skip:
            (gz5[:, -1:] if last else gz5).add_(gz_skip)
        g_pre = torch.cat(parts, -1)
        return gz5.view(*gz5.shape[:-2], 2 * d), g_pre, g_skip, None, None
