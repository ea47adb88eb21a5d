"""Attention kinds: fast == reference, support, metric, errors, FLOPs, memory, failures."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from structattn_lite import theory as th
from structattn_lite.models.attention import build_attention
from structattn_lite.models.attention_checks import logit_failures
from structattn_lite.models.attention_flops import (
    analytic_attention_flops,
    attention_flops,
    measure_flops,
)
from structattn_lite.models.lm import CharLM, LMConfig, parameter_report

D_MODEL, HEADS = 32, 2  # d_head = 16: the complete graph has 120 edges >= 4 d_head
VARIANTS = [
    ("dot", {}),
    ("dense", {}),
    ("dense", {"shared_qk": False}),
    ("matroidal", {"m": 16}),
    ("matroidal", {"m": 32, "support": "complete"}),
    ("matroidal", {"m": 64, "shared_qk": False}),
    ("matroidal", {"m": 16, "support": "ring", "tau": 0.7, "eps": 0.0}),
]


def _module(kind, opts, causal=True, seed=0):
    torch.manual_seed(seed)
    mod = build_attention(kind, D_MODEL, HEADS, causal=causal, **opts)
    with torch.no_grad():  # move the metric off its initial value so the test means something
        for p in mod.metric_parameters():
            p.add_(0.3 * torch.randn_like(p))
    return mod


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind,opts", VARIANTS)
def test_fast_equals_reference_outputs_and_gradients(kind, opts, causal):
    mod = _module(kind, opts, causal)
    x = torch.randn(3, 20, D_MODEL, requires_grad=True)
    grads = {}
    for path in ("fast", "reference"):
        mod.zero_grad()
        x.grad = None
        y = mod(x, path=path)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        grads[path] = (y.detach(), x.grad.clone(), [p.grad.clone() for p in mod.parameters()])
    (yf, gxf, gpf), (yr, gxr, gpr) = grads["fast"], grads["reference"]
    torch.testing.assert_close(yf, yr, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gxf, gxr, atol=1e-5, rtol=1e-5)
    for a, b in zip(gpf, gpr, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_causal_output_ignores_the_future():
    mod = _module("matroidal", {"m": 32})
    x = torch.randn(1, 12, D_MODEL)
    x2 = x.clone()
    x2[:, 8:] += 5.0
    for path in ("fast", "reference"):
        torch.testing.assert_close(mod(x, path=path)[:, :8], mod(x2, path=path)[:, :8])


def test_support_is_the_theory_incidence_matrix_and_metric_matches():
    mod = _module("matroidal", {"m": 32, "support": "random", "support_seed": 3})
    A = mod.A.numpy().astype(int)
    np.testing.assert_array_equal(A, th.support_matrix("random", 16, 32, seed=3))
    assert A.shape == (16, 32)
    assert ((A == 1).sum(0) == 1).all() and ((A == -1).sum(0) == 1).all()
    assert th.is_totally_unimodular(A)
    assert mod.theta.shape == (HEADS, 32) and mod.theta.requires_grad and not mod.A.requires_grad
    lw = mod.weights().detach().numpy()
    for h in range(HEADS):
        want = th.metric_matrix(A, lw[h], mod.eps)
        np.testing.assert_allclose(mod.metric()[h].detach().numpy(), want, atol=1e-5)


def test_reference_logits_match_the_theory_module():
    mod = _module("matroidal", {"m": 16, "tau": 1.5})
    x = torch.randn(2, 10, D_MODEL)
    z, _ = mod.project(x)
    lw = mod.weights().detach()
    for h in range(HEADS):
        want = th.pairwise_logits_reference(
            z[:, h], z[:, h], mod.A.numpy(), lw[h].numpy(), mod.eps, 1.5
        )
        torch.testing.assert_close(mod.reference_logits(x)[:, h].detach(), want, atol=1e-5, rtol=0)


def test_shared_projection_puts_zero_distance_on_the_diagonal():
    mod = _module("dense", {})
    logits = mod.reference_logits(torch.randn(2, 9, D_MODEL)).detach()
    diag = torch.diagonal(logits, dim1=-2, dim2=-1)
    assert diag.abs().max() < 1e-6
    assert (logits <= 1e-6).all()  # -dist / (2 tau) <= 0 everywhere


def test_trace_matched_initialisation():
    for m in (16, 32, 64):
        mod = build_attention("matroidal", D_MODEL, HEADS, m=m)
        trace = torch.diagonal(mod.metric(), dim1=-2, dim2=-1).sum(-1)
        torch.testing.assert_close(trace, torch.full((HEADS,), 16 * (1 + mod.eps)))


def test_pruning_removes_small_columns_and_can_be_undone():
    mod = _module("matroidal", {"m": 32})
    x = torch.randn(1, 8, D_MODEL)
    before = mod(x).detach()
    lw = torch.nn.functional.softplus(mod.theta).detach()
    delta = float(lw.median())
    kept = mod.prune(delta)
    assert kept == int((lw >= delta).sum())
    assert (mod.weights()[lw < delta] == 0).all()
    assert not torch.allclose(mod(x), before)
    mod.unprune()
    torch.testing.assert_close(mod(x).detach(), before)
    assert mod.prune(0.0) == 32 * HEADS


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"kind": "cosine"}, r"kind='cosine' is not allowed; choose one of \['dot', 'dense', 'matroidal'\]"),
        ({"kind": "matroidal", "tau": 0.0}, r"tau must be > 0"),
        ({"kind": "dense", "tau": -1.0}, r"tau must be > 0"),
        ({"kind": "matroidal", "eps": -1e-3}, r"eps must be >= 0"),
        ({"kind": "matroidal", "m": 0}, r"m must be >= 1"),
        ({"kind": "matroidal", "m": 121, "support": "complete"}, r"m=121 exceeds .*maximum is 120"),
        ({"kind": "matroidal", "m": 17, "support": "ring"}, r"m=17 exceeds .*maximum is 16"),
        ({"kind": "matroidal", "support": "star"}, r"support='star' is not allowed; choose one of \['complete'"),
        ({"kind": "matroidal", "n_heads": 3}, r"d_model=32 must be divisible by n_heads=3"),
        ({"kind": "dot", "m": 8}, r"unknown option\(s\) \['m'\] for kind='dot'; allowed options: \['causal'\]"),
        ({"kind": "dense", "shared_qk": "yes"}, r"shared_qk='yes' is not allowed"),
    ],
)  # fmt: skip
def test_bad_input_names_the_parameter(kwargs, match):
    kind = kwargs.pop("kind")
    n_heads = kwargs.pop("n_heads", HEADS)
    with pytest.raises(ValueError, match=match):
        build_attention(kind, D_MODEL, n_heads, **kwargs)


def test_unknown_path_is_an_error():
    with pytest.raises(ValueError, match=r"path='slow' is not allowed"):
        _module("dot", {})(torch.randn(1, 4, D_MODEL), path="slow")


@pytest.mark.parametrize("path", ["fast", "reference"])
@pytest.mark.parametrize("kind,opts", VARIANTS)
def test_measured_flops_equal_the_analytic_count(kind, opts, path):
    mod = _module(kind, opts)
    measured = attention_flops(mod, n_tokens=24, batch=2, path=path)
    analytic = analytic_attention_flops(
        kind,
        2,
        24,
        D_MODEL,
        HEADS,
        m=opts.get("m"),
        shared_qk=opts.get("shared_qk", True),
        path=path,
    )
    assert measured == analytic > 0


def test_flop_counter_sees_sdpa_under_the_math_backend():
    q = torch.randn(1, 2, 16, 16)
    counts = measure_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert counts["total"] == 2 * (2 * 2 * 16 * 16 * 16)  # QK^T and PV
    assert attention_flops(_module("dot", {}), 24, backward=True) > attention_flops(
        _module("dot", {}), 24
    )


def _largest_saved(mod, x, path):
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mod(x, path=path).sum().backward()
    return max(sizes)


def test_fast_path_never_builds_the_pairwise_tensor():
    B, N, m = 1, 64, 64
    mod = _module("matroidal", {"m": m})
    x = torch.randn(B, N, D_MODEL, requires_grad=True)
    assert _largest_saved(mod, x, "reference") >= B * HEADS * N * N * m
    assert _largest_saved(mod, x, "fast") <= B * HEADS * N * N  # at most N^2 per head


def test_failure_counters():
    mod = _module("matroidal", {"m": 32, "shared_qk": False, "tau": 1e-3})
    x = 30 * torch.randn(2, 16, D_MODEL)
    f = logit_failures(mod, x)
    assert f["underflow_rows"] > 0  # separate projections, tiny tau: every logit << -87
    assert f["nonfinite_logits"] == 0 and f["zero_rows"] == 0  # max-shifted softmax is fine
    shared = logit_failures(_module("matroidal", {"m": 32}), torch.randn(2, 16, D_MODEL))
    assert shared["underflow_rows"] == 0  # dist(i, i) = 0: every row has a logit of 0
    assert shared["fast_ref_gap"] < 1e-5 and shared["entries"] == 2 * HEADS * 16 * 17 / 2
    assert np.isnan(logit_failures(_module("dot", {}), x)["neg_sq_dist"])


def test_expanded_form_goes_negative_where_pairwise_form_cannot():
    mod = _module("dense", {})
    x = 50 * torch.randn(4, 32, D_MODEL)
    f = logit_failures(mod, x)
    assert f["neg_sq_dist"] > 0  # the diagonal is an exact 0 only in the pairwise form
    assert mod.reference_logits(x).max() <= 0


def test_parameter_report_counts_metric_parameters():
    reports = {}
    for kind, opts in [("dot", {}), ("dense", {}), ("matroidal", {"m": 32})]:
        cfg = LMConfig(vocab_size=10, block_size=8, d_model=D_MODEL, n_heads=HEADS, n_layers=2,
                       attention=kind, attention_options=opts)  # fmt: skip
        reports[kind] = parameter_report(CharLM(cfg))
    assert reports["dot"]["params_metric"] == 0
    assert reports["dense"]["params_metric"] == 2 * HEADS * 16 * 17 // 2
    assert reports["matroidal"]["params_metric"] == 2 * HEADS * 32
    # shared z: one projection fewer than dot's W_q, W_k
    diff = reports["dot"]["params_attention"] - reports["matroidal"]["params_attention"]
    assert diff == 2 * (D_MODEL * D_MODEL - HEADS * 32)


# --- counters on the fast path (what training steps see) ------------------------------


def _counting(kind, opts, every=1):
    mod = _module(kind, opts)
    mod.check_every = every
    return mod


def test_fast_path_counters_count_training_calls_only():
    mod = _counting("matroidal", {"m": 32, "tau": 0.5})
    x = torch.randn(4, 16, D_MODEL)
    mod(x).sum().backward()
    s = mod.stats
    assert s.calls == s.checked_calls == 1 and s.rows == 4 * HEADS * 15  # row 0 sees one key
    assert s.nonfinite == 0 and s.saturated_rows == 0 and 0 < s.max_abs_logit < 1e3
    mod.eval()
    mod(x)
    assert mod.stats.calls == 1  # evaluation is not counted
    mod.train()
    mod.check_every = 3
    for _ in range(5):
        mod(x)
    assert mod.stats.calls == 6 and mod.stats.checked_calls == 2  # calls 1 and 4


def test_saturated_rows_and_non_finite_values_are_counted():
    mod = _counting("matroidal", {"m": 32, "tau": 0.05})
    mod(30 * torch.randn(2, 16, D_MODEL))  # the diagonal wins every row by far
    assert mod.stats.saturated_rows == mod.stats.rows > 0
    x = torch.randn(2, 16, D_MODEL)
    x[0, 3, 0] = float("inf")
    mod(x)
    assert mod.stats.nonfinite > 0
    dot = _counting("dot", {})
    dot(torch.randn(2, 16, D_MODEL))
    assert dot.stats.rows == 2 * HEADS * 15 and dot.stats.saturated_rows == 0


def test_bfloat16_autocast_is_counted_in_its_own_precision():
    mod = _counting("matroidal", {"m": 32, "tau": 0.5})
    x = torch.randn(4, 16, D_MODEL)
    mod(x)
    f32 = mod.stats.saturated_rows
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mod(x)
    assert y.dtype == torch.bfloat16
    assert f32 == 0 and mod.stats.saturated_rows > 0  # bf16's epsilon is 2^-8, not 2^-24


def test_separate_projections_fall_back_past_the_logit_bound_and_count_it():
    mod = _counting("matroidal", {"m": 32, "shared_qk": False, "tau": 0.05})
    mod(30 * torch.randn(2, 16, D_MODEL))
    assert mod.stats.fallbacks == 1 and mod.last_bound > mod.logit_bound
    mod(0.1 * torch.randn(2, 16, D_MODEL))
    assert mod.stats.fallbacks == 1 and mod.stats.calls == 2
    with pytest.raises(ValueError, match="logit_bound must be > 0"):
        build_attention("dense", D_MODEL, HEADS, logit_bound=0)
