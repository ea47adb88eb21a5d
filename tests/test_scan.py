"""The parallel scan equals the loop reference, forward and backward, and never NaNs."""

import pytest
import torch

from structattn_lite.models import build_model
from structattn_lite.models.csp import linear_recurrence_loop
from structattn_lite.models.scan import linear_recurrence_scan

TOL = {"atol": 1e-5, "rtol": 1e-5}  # float32


def _inputs(length, complex_alpha, complex_drive, seed=0, low=0.0, high=1.0):
    g = torch.Generator().manual_seed(seed)
    alpha = low + (high - low) * torch.rand(3, length, 5, generator=g)
    if complex_alpha:
        alpha = torch.polar(alpha, 6.3 * torch.rand(3, length, 5, generator=g))
    drive = torch.randn(
        3, length, 5, generator=g, dtype=torch.complex64 if complex_drive else torch.float32
    )
    return alpha.requires_grad_(), drive.requires_grad_()


def _value_and_grads(fn, alpha, drive):
    h = fn(alpha, drive)
    w = torch.randn(h.shape, generator=torch.Generator().manual_seed(1), dtype=h.dtype)
    loss = (h * w.conj()).real.sum() if h.is_complex() else (h * w).sum()
    return (h, *torch.autograd.grad(loss, (alpha, drive)))


@pytest.mark.parametrize("length", [1, 2, 7, 16, 33, 256, 1024])
@pytest.mark.parametrize(
    "complex_alpha,complex_drive", [(False, False), (False, True), (True, True), (True, False)]
)
def test_scan_matches_loop_forward_and_backward(length, complex_alpha, complex_drive):
    alpha, drive = _inputs(length, complex_alpha, complex_drive)
    ref = _value_and_grads(linear_recurrence_loop, alpha, drive)
    got = _value_and_grads(linear_recurrence_scan, alpha, drive)
    for r, g in zip(ref, got, strict=True):
        assert r.dtype == g.dtype and r.shape == g.shape
        torch.testing.assert_close(g, r, **TOL)


@pytest.mark.parametrize("chunk", [1, 3, 8, 64, 512])
def test_chunk_size_changes_nothing(chunk):
    alpha, drive = _inputs(100, True, True, low=0.5, high=1.0)
    ref = _value_and_grads(linear_recurrence_loop, alpha, drive)
    got = _value_and_grads(lambda a, b: linear_recurrence_scan(a, b, chunk=chunk), alpha, drive)
    for r, g in zip(ref, got, strict=True):
        torch.testing.assert_close(g, r, **TOL)


@pytest.mark.parametrize("complex_alpha", [False, True])
def test_underflowing_products_give_zeros_not_nan(complex_alpha):
    # prod of 256 alphas of 1e-3 is 1e-768: far below float32's smallest number
    alpha = torch.full((2, 256, 4), 1e-3)
    if complex_alpha:
        alpha = torch.polar(alpha, torch.ones_like(alpha))
    alpha.requires_grad_()
    drive = torch.randn(2, 256, 4, dtype=torch.complex64, requires_grad=True)
    ref = _value_and_grads(linear_recurrence_loop, alpha, drive)
    got = _value_and_grads(linear_recurrence_scan, alpha, drive)
    for r, g in zip(ref, got, strict=True):
        assert torch.isfinite(torch.view_as_real(g) if g.is_complex() else g).all()
        torch.testing.assert_close(g, r, **TOL)


def test_exact_zero_decay_resets_the_state():
    alpha = torch.ones(1, 6, 1)
    alpha[0, 3] = 0.0
    h = linear_recurrence_scan(alpha, torch.ones(1, 6, 1))
    assert h.flatten().tolist() == [1, 2, 3, 1, 2, 3]


def test_shape_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="same shape"):
        linear_recurrence_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 4))


@pytest.mark.parametrize(
    "model,preset",
    [
        ("csp", "paper"),
        ("csp", "code_switches"),
        ("diag_rnn", None),
        ("diag_rnn_neg", None),
        ("complex_rnn", None),
    ],
)
def test_models_give_the_same_logits_and_gradients_with_either_scan(model, preset):
    kwargs = {"preset": preset} if preset else {}
    torch.manual_seed(0)
    loop = build_model(model, **kwargs, d_model=8, n_layers=2, scan="loop")
    par = build_model(model, **kwargs, d_model=8, n_layers=2, scan="parallel")
    par.load_state_dict(loop.state_dict())
    x = torch.randint(0, 2, (4, 40))
    out_loop, out_par = loop(x), par(x)
    torch.testing.assert_close(out_par, out_loop, **TOL)
    out_loop.square().sum().backward()
    out_par.square().sum().backward()
    for (name, p), q in zip(loop.named_parameters(), par.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4, msg=name)
