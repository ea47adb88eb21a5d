"""A parallel scan for the linear recurrence h_t = alpha_t h_{t-1} + drive_t, h_0 = 0.

The pairs (a, b) compose associatively, (a1, b1) then (a2, b2) = (a1 a2, a2 b1 + b2),
so the recurrence is a prefix scan. We scan in two levels: inside chunks of about
sqrt(T) steps with a log-depth Hillis-Steele sweep (all chunks at once), then across
the chunk summaries, then one multiply-add fixes every chunk up with its carry-in.
Only products of alphas appear, never a division by them, so decays whose cumulative
product underflows to 0 give exact zeros, not NaN.

The backward pass is the same recurrence run in reverse,
g_b[t] = g_h[t] + conj(alpha[t+1]) g_b[t+1] and g_alpha[t] = g_b[t] conj(h[t-1]),
so it costs one more scan instead of an autograd graph with T nodes.
"""

from __future__ import annotations

import math

import torch


def _hillis_steele(a: torch.Tensor, b: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inclusive scan of (a, b) pairs along ``dim``: returns (prod of a, state)."""
    n = a.shape[dim]
    offset = 1
    while offset < n:
        a_hi, a_lo = a.narrow(dim, offset, n - offset), a.narrow(dim, 0, n - offset)
        b_hi, b_lo = b.narrow(dim, offset, n - offset), b.narrow(dim, 0, n - offset)
        b = torch.cat([b.narrow(dim, 0, offset), torch.addcmul(b_hi, a_hi, b_lo)], dim)
        a = torch.cat([a.narrow(dim, 0, offset), a_hi * a_lo], dim)
        offset *= 2
    return a, b


def scan_forward(a: torch.Tensor, b: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """h over dim 1 of [B, T, ...] tensors of one dtype, without autograd tricks."""
    batch, length = b.shape[:2]
    rest = b.shape[2:]
    chunk = chunk or max(1, 2 ** round(math.log2(math.sqrt(length))))
    if chunk >= length:
        return _hillis_steele(a, b, 1)[1]
    n_chunks = -(-length // chunk)
    pad = n_chunks * chunk - length
    if pad:  # pad the end with the identity pair (1, 0): earlier states are unchanged
        a = torch.cat([a, a.new_ones(batch, pad, *rest)], 1)
        b = torch.cat([b, b.new_zeros(batch, pad, *rest)], 1)
    a = a.reshape(batch, n_chunks, chunk, *rest)
    b = b.reshape(batch, n_chunks, chunk, *rest)
    a_cum, h_local = _hillis_steele(a, b, 2)  # every chunk scanned from a zero state
    a_end, h_end = a_cum[:, :, -1], h_local[:, :, -1]
    _, carry = _hillis_steele(a_end, h_end, 1)  # state at the end of each chunk
    carry_in = torch.cat([torch.zeros_like(carry[:, :1]), carry[:, :-1]], 1)
    h = torch.addcmul(h_local, a_cum, carry_in.unsqueeze(2))
    return h.reshape(batch, n_chunks * chunk, *rest)[:, :length]


def _like(grad: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """A complex gradient for a real input is its real part (PyTorch's convention)."""
    return grad.real if grad.is_complex() and not ref.is_complex() else grad


class _LinearRecurrence(torch.autograd.Function):
    generate_vmap_rule = True  # so seed batching (torch.func.vmap) can map over it

    @staticmethod
    def forward(alpha, drive, chunk):
        dtype = torch.result_type(alpha, drive)
        h = scan_forward(alpha.to(dtype), drive.to(dtype), chunk)
        return h.clone() if h is drive else h  # T = 1: autograd needs a fresh tensor

    @staticmethod
    def setup_context(ctx, inputs, output):
        alpha, drive, chunk = inputs
        ctx.save_for_backward(alpha, drive, output)
        ctx.chunk = chunk

    @staticmethod
    def backward(ctx, grad_h):
        alpha, drive, h = ctx.saved_tensors
        a = alpha.to(h.dtype)
        a = a.conj() if a.is_complex() else a
        # reverse recurrence: coefficient of step t is conj(alpha[t + 1]); none after T
        a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], 1)
        grad_b = scan_forward(a_next.flip(1), grad_h.flip(1), ctx.chunk).flip(1)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)
        grad_a = grad_b * (h_prev.conj() if h_prev.is_complex() else h_prev)
        return _like(grad_a, alpha), _like(grad_b, drive), None


def linear_recurrence_scan(
    alpha: torch.Tensor, drive: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """h_t = alpha_t h_{t-1} + drive_t over dim 1 of [B, T, d] tensors, h_0 = 0.

    ``alpha`` and ``drive`` may each be real or complex (the result takes the wider
    dtype) and must have the same shape. ``chunk`` sets the first-level chunk size
    (default about sqrt(T)); it changes speed, not the result beyond rounding.
    """
    if alpha.shape != drive.shape:
        raise ValueError(
            f"alpha and drive must have the same shape, got {tuple(alpha.shape)} and {tuple(drive.shape)}"
        )
    if drive.dim() < 2:
        raise ValueError(f"expected [B, T, ...] tensors, got shape {tuple(drive.shape)}")
    if drive.shape[1] == 0:
        return drive.to(torch.result_type(alpha, drive)).clone()
    return _LinearRecurrence.apply(alpha, drive, chunk)
