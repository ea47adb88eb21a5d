"""What the study measures inside the attention layers of a trained (or training) model.

- ``logit_failures``: NaN/Inf logits, rows that underflow, negative squared distances
  in the expanded form, and the fast-vs-reference output gap, for one module and input;
- ``model_failures``: the same summed over every layer of a model on one batch;
- ``attention_maps``, ``learned_weights``: what the browsing widget plots;
- ``model_flops``: measured and analytic attention FLOPs of a model per sequence, and
  ``time_attention``: measured time of its attention layers beside dot product.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from structattn_lite.models.attention import (
    Attention,
    DenseAttention,
    MatroidalAttention,
    MetricAttention,
    build_attention,
)
from structattn_lite.models.attention_flops import (
    analytic_attention_flops,
    attention_flops,
    pairwise_flops,
)

# exp(x) underflows to 0 in float32 below this: a softmax without the max shift then
# divides 0 by 0 on a row whose every logit is that small.
EXP_UNDERFLOW = math.log(torch.finfo(torch.float32).tiny)
FAILURE_KEYS = ("nonfinite_logits", "underflow_rows", "zero_rows", "neg_sq_dist", "fast_ref_gap")


@torch.no_grad()
def logit_failures(module: Attention, x: torch.Tensor) -> dict[str, float]:
    """Failure counts over the valid (unmasked) entries of one module on input x.

    nonfinite_logits: NaN/Inf reference logits. underflow_rows: rows whose largest
    logit is below log(float32 tiny), so exp() without the max shift is all zero.
    zero_rows: rows of the actual softmax that do not sum to 1 (all zero or NaN).
    neg_sq_dist: entries of z_i^T M z_i + z_j^T M z_j - 2 z_i^T M z_j below 0 (the
    pairwise form is a sum of squares and never is); NaN for dot (no distance).
    fast_ref_gap: max |fast output - reference output|.
    """
    logits = module.reference_logits(x)
    valid = torch.isfinite(module.mask(torch.zeros_like(logits)))
    masked = module.mask(logits)
    row_max = masked.amax(-1)  # over valid entries: masked ones are -inf
    probs = masked.softmax(-1)
    row_sum = probs.sum(-1)
    out = {
        "nonfinite_logits": float((~torch.isfinite(logits) & valid).sum()),
        "underflow_rows": float((row_max < EXP_UNDERFLOW).sum()),
        "zero_rows": float((~torch.isfinite(row_sum) | ((row_sum - 1).abs() > 1e-3)).sum()),
        "neg_sq_dist": float("nan"),
        "fast_ref_gap": float((module(x, path="fast") - module(x, path="reference")).abs().max()),
        "logit_min": float(logits[valid].min()),
        "logit_max": float(logits[valid].max()),
        "entries": float(valid.sum()),
    }
    if isinstance(module, MetricAttention):
        out["neg_sq_dist"] = float(((module.expanded_sq_dist(x) < 0) & valid).sum())
    return out


def _attention_inputs(model: nn.Module, run: Any) -> list[tuple[Attention, torch.Tensor]]:
    """(module, its input) for every attention layer during ``run()``."""
    seen: list[tuple[Attention, torch.Tensor]] = []
    hooks = [
        mod.register_forward_pre_hook(lambda m, args: seen.append((m, args[0].detach())))
        for mod in model.modules()
        if isinstance(mod, Attention)
    ]
    try:
        with torch.no_grad():
            run()
    finally:
        for h in hooks:
            h.remove()
    return seen


def model_failures(model: nn.Module, batch: torch.Tensor) -> dict[str, float]:
    """``logit_failures`` summed over layers (gap, logit range: worst layer)."""
    was_training = model.training
    model.eval()
    per_layer = [logit_failures(m, x) for m, x in _attention_inputs(model, lambda: model(batch))]
    model.train(was_training)
    total = {k: float(sum(r[k] for r in per_layer)) for k in FAILURE_KEYS if k != "fast_ref_gap"}
    total["fast_ref_gap"] = max(r["fast_ref_gap"] for r in per_layer)
    total["entries"] = float(sum(r["entries"] for r in per_layer))
    total["logit_min"] = min(r["logit_min"] for r in per_layer)
    total["logit_max"] = max(r["logit_max"] for r in per_layer)
    return total


@torch.no_grad()
def attention_maps(model: nn.Module, batch: torch.Tensor, decimals: int = 3) -> list[list]:
    """Softmax attention per layer for the first sequence: [layer][head][N][N] lists."""
    was_training = model.training
    model.eval()
    model.keep_logits(True)
    model.set_path("reference")
    try:
        model(batch[:1])
        maps = [a.last_logits[0].softmax(-1) for a in model.attention_modules()]
    finally:
        model.set_path("fast")
        model.keep_logits(False)
        model.train(was_training)
    return [np.round(m.cpu().numpy().astype(np.float64), decimals).tolist() for m in maps]


@torch.no_grad()
def learned_weights(model: nn.Module) -> list[list[list[float]]]:
    """Per layer, per head: l = softplus(theta) (matroidal) or the eigenvalues of M (dense)."""
    out = []
    for a in model.attention_modules():
        if isinstance(a, MatroidalAttention):
            out.append(a.weights().tolist())
        elif isinstance(a, DenseAttention):
            out.append(torch.linalg.eigvalsh(a.metric()).tolist())
    return out


def model_flops(model: nn.Module, n_tokens: int) -> dict[str, int]:
    """Attention FLOPs of one forward pass over one sequence, summed over layers.

    flops_fast is measured on the width the kernel runs on this machine (d + 2 for the
    folded metric kinds, more where padded), and equals flops_analytic.
    """
    out = {"flops_fast": 0, "flops_reference": 0, "flops_analytic": 0, "flops_pairwise": 0}
    for a in model.attention_modules():
        m = getattr(a, "m", None)
        shared = getattr(a, "shared_qk", False)
        device = next(a.parameters()).device
        width = a.width(device) if isinstance(a, MetricAttention) else None
        out["flops_fast"] += attention_flops(a, n_tokens, path="fast")
        out["flops_reference"] += attention_flops(a, n_tokens, path="reference")
        out["flops_analytic"] += analytic_attention_flops(
            a.kind, 1, n_tokens, a.d_model, a.n_heads, m=m, shared_qk=shared, width=width
        )
        out["flops_pairwise"] += pairwise_flops(a.kind, 1, n_tokens, a.d_model, a.n_heads, m=m)
    return out


def time_attention(
    model: nn.Module, n_tokens: int, batch: int = 4, reps: int = 5
) -> dict[str, float]:
    """Measured forward+backward time of the model's attention layers at one shape, beside
    a dot-product layer of the same size timed in the same interleaved loop.

    attn_ms: median milliseconds for all layers together (CPU time of this process on a
    CPU, which waiting for a core does not inflate; wall time with synchronisation on
    CUDA); attn_time_vs_dot: median of the paired ratios to the dot layers.
    """
    import copy
    import statistics
    import time

    mods = model.attention_modules()
    device = next(model.parameters()).device
    ref = build_attention("dot", mods[0].d_model, mods[0].n_heads, causal=mods[0].causal).to(device)
    x = torch.randn(batch, n_tokens, mods[0].d_model, device=device, requires_grad=True)
    clock = time.process_time if device.type == "cpu" else time.perf_counter

    def once(layers) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = clock()
        for layer in layers:
            layer(x).sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return clock() - start

    copies = [copy.deepcopy(a) for a in mods]  # gradients stay off the trained model
    dots = [ref] * len(mods)
    once(copies), once(dots)  # warm-up
    pairs = [(once(copies), once(dots)) for _ in range(reps)]
    return {
        "attn_ms": 1e3 * statistics.median(p[0] for p in pairs),
        "attn_time_vs_dot": statistics.median(p[0] / p[1] for p in pairs),
    }


def gradient_agreement(
    kind: str, options: dict, scale: float, tau: float, seed: int = 0
) -> dict[str, float]:
    """How far float32 gradients are from the float64 reference at one input scale and tau.

    A module (d_model 32, 2 heads) with its metric moved off its start, inputs
    scale * N(0, 1) [3, 20, 32], loss sum(y * w) with fixed weights w. Per gradient
    tensor: |g32 - g64| / |g64| where the true gradient is not 0 (|g64| above 1e-9 of the
    largest), and |g32 - g64| where it is 0 (a spurious gradient, which Adam would turn
    into full-size steps); the worst of each, for the fast and the float32 reference
    path, and how many fast calls fell back to the reference.
    """
    import copy

    torch.manual_seed(seed)
    mod = build_attention(kind, 32, 2, tau=tau, **options)
    with torch.no_grad():
        for p in mod.metric_parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = scale * torch.randn(3, 20, 32, generator=torch.Generator().manual_seed(seed + 1))

    def grads(path, dtype):
        m = copy.deepcopy(mod).to(dtype)
        xi = x.to(dtype).clone().requires_grad_(True)
        y = m(xi, path=path)
        (y * torch.linspace(-1, 1, y.numel(), dtype=dtype).view_as(y)).sum().backward()
        return [xi.grad, *(p.grad for p in m.parameters())], m

    ref, _ = grads("reference", torch.float64)
    floor = 1e-9 * max(float(g.norm()) for g in ref)

    def worst(got, zero: bool) -> float:
        errs = [float((a.double() - b).norm()) / (1.0 if zero else float(b.norm()))
                for a, b in zip(got, ref, strict=True) if (float(b.norm()) <= floor) == zero]  # fmt: skip
        return max(errs, default=0.0)

    fast, used = grads("fast", torch.float32)
    ref32, _ = grads("reference", torch.float32)
    return {
        "fast: relative error": worst(fast, False),
        "fast: spurious gradient": worst(fast, True),
        "float32 reference: relative error": worst(ref32, False),
        "float32 reference: spurious gradient": worst(ref32, True),
        "fast calls sent to the reference": used.stats.fallbacks,
    }
