"""Baselines share CSP's interface, are causal, and each learns a short parity task."""

import pytest
import torch

from structattn_lite.models import BASELINES, MODELS, build_model, count_parameters
from structattn_lite.runs import train
from structattn_lite.studies.length.experiment import MODEL_SIZES, LengthRun
from structattn_lite.training.trainer import OptimConfig


@pytest.mark.parametrize("name", BASELINES)
def test_interface_shapes_and_causality(name):
    torch.manual_seed(0)
    model = build_model(name, n_classes=3, vocab_size=2, d_model=16, n_layers=2)
    x = torch.randint(0, 2, (4, 300))
    y = model(x)
    assert y.shape == (4, 300, 3) and torch.isfinite(y).all()
    x2 = x.clone()
    x2[:, 150:] = 1 - x2[:, 150:]  # change only the future
    torch.testing.assert_close(model(x2)[:, :150], y[:, :150], atol=1e-5, rtol=1e-5)


def test_registry_and_sizes_near_csp():
    assert set(BASELINES) < set(MODELS) and MODELS[0] == "csp"
    csp = count_parameters(build_model("csp", preset="paper"))
    for name in BASELINES:  # default sizes: within a factor 1.6 of CSP's 38k
        n = count_parameters(build_model(name))
        assert csp / 1.6 < n < csp * 1.6, (name, n, csp)


def test_bad_names_and_presets_are_clear_errors():
    with pytest.raises(ValueError, match="model='mamba' is not allowed"):
        build_model("mamba")
    with pytest.raises(ValueError, match="preset='paper' only applies to model 'csp'"):
        build_model("lstm", preset="paper")
    with pytest.raises(ValueError, match="option for model 'gru'"):
        build_model("gru", rotation="step")
    with pytest.raises(ValueError, match="divisible by n_heads"):
        build_model("transformer", d_model=30, n_heads=4)


# Parity with per-prefix labels, fresh strings of lengths 1..T every step (12 x 25 steps),
# scored on every position of 256 new strings of length T. Bounds: >= 0.99 at T = 8 for
# the models that can track parity; parity is hard for the other two, so they get a
# shorter task and >= 0.95: the causal Transformer (T = 6) and the diagonal RNN with
# decay in [0, 1] (T = 4), whose non-negative eigenvalues cannot track parity at all
# lengths (Grazzi et al.); at T = 8 it plateaus near 0.9, and even at T = 4 it tends to
# miss one string pattern (~0.986).
LEARNS = {  # name: (T, bound, size overrides, lr)
    "lstm": (8, 0.99, {}, 3e-3),
    "gru": (8, 0.99, {}, 3e-3),
    "diag_rnn_neg": (8, 0.99, {}, 3e-3),
    "complex_rnn": (8, 0.99, {}, 3e-3),
    "transformer": (6, 0.95, {"n_layers": 2}, 3e-3),
    "diag_rnn": (4, 0.95, {"n_layers": 3}, 3e-3),
}


@pytest.mark.parametrize("name", BASELINES)
def test_each_baseline_learns_short_parity(name):
    length, bound, sizes, lr = LEARNS[name]
    cfg = LengthRun(
        task="parity", model=name, model_options={**MODEL_SIZES[name], **sizes}, protocol="variable",
        train_length=length, epochs=12, steps_per_epoch=25, optim=OptimConfig(lr=lr),
        max_eval_length=length, n_eval=256,
    )  # fmt: skip
    acc = train("length", cfg).extra["curve"]["all_acc"][-1]
    assert acc >= bound, f"{name} reached {acc:.3f} on parity at T={length} (bound {bound})"
