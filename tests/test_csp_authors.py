"""The authors' CSP revisions: counts, hand-derived steps, and a plain-Python reference."""

import math

import pytest
import torch

from structattn_lite.models import (
    AUTHORS_PRESETS,
    PRESETS,
    AuthorsCSP,
    build_model,
    count_parameters,
    preset_config,
)
from structattn_lite.models.csp_authors import REVISIONS, AuthorsCSPConfig


def total_parameters(model):  # the authors' count: frozen parameters included
    return sum(p.numel() for p in model.parameters())


# Published counts: README of 7d6c56a3 (parity 4,686; mod-3 4,893; Dyck-1 4,795), README
# of 778a15c1 (parity 4,779), and the paper-era script's printout for hidden 32 (4,043).
@pytest.mark.parametrize(
    "revision, vocab, classes, expected",
    [
        ("befce39", 2, 2, 4043),
        ("3bb9f71", 2, 2, 4686),
        ("7d6c56a", 3, 3, 4893),
        ("7d6c56a", 3, 2, 4795),
        ("7d6c56a", 2, 2, 4779),
        ("778a15c", 3, 3, 4893),
        ("778a15c", 3, 2, 4795),
        ("778a15c", 2, 2, 4779),
    ],
)
def test_parameter_counts_match_the_authors(revision, vocab, classes, expected):
    model = build_model("csp", preset=f"authors_{revision}", vocab_size=vocab, n_classes=classes)
    assert total_parameters(model) == expected
    frozen = vocab * 16 if revision == "778a15c" else 0  # the frozen embedding table
    assert count_parameters(model) == expected - frozen


def test_presets_and_alias():
    assert set(AUTHORS_PRESETS) == {f"authors_{r}" for r in REVISIONS}
    assert preset_config("upstream") == preset_config("authors_3bb9f71")
    assert preset_config("code_switches").rotation == "cumulative"
    assert isinstance(build_model("csp", preset="upstream"), AuthorsCSP)
    with pytest.raises(ValueError, match=r"preset='arxiv'.*'code_switches'.*'upstream'"):
        build_model("csp", preset="arxiv")
    with pytest.raises(ValueError, match=r"CSP option='scan'.*'authors_778a15c'.*'d_model'"):
        build_model("csp", preset="authors_778a15c", scan="parallel")
    with pytest.raises(ValueError, match=r"revision='abc'.*'befce39'"):
        AuthorsCSPConfig(revision="abc")
    with pytest.raises(ValueError, match=r"n_classes must be >= 2"):
        build_model("csp", preset="authors_befce39", n_classes=1)
    assert set(PRESETS) >= {"paper", "code_switches", "upstream"}


def test_state_dict_uses_the_authors_names():
    keys = set(build_model("csp", preset="authors_3bb9f71", n_layers=1).state_dict())
    assert keys == {
        "embed.weight", "embed_proj.weight", "embed_proj.bias", "head.weight", "head.bias",
        "theta_proj.weight", "theta_proj.bias", "layers.0.theta_proj.weight",
        "layers.0.theta_proj.bias", "layers.0.B_proj.weight", "layers.0.B_proj.bias",
        "layers.0.delta_proj.weight", "layers.0.delta_proj.bias", "layers.0.gamma_proj.weight",
        "layers.0.gamma_proj.bias", "layers.0.skip_gate", "decoder.weight", "decoder.bias",
    }  # fmt: skip
    keys = set(build_model("csp", preset="authors_778a15c", n_layers=1).state_dict())
    assert "layers.0.B_proj.bias" not in keys and "layers.0.theta_proj.bias" not in keys


def test_initialisation_per_revision():
    torch.manual_seed(0)
    for revision in REVISIONS:
        model = build_model("csp", preset=f"authors_{revision}", vocab_size=3)
        block = model.layers[0]
        assert torch.equal(block.skip_gate, torch.full((32,), 0.5))
        zero_angle = revision in ("befce39", "3bb9f71")
        assert (block.theta_proj.weight.abs().sum() == 0) == zero_angle
    frozen = build_model("csp", preset="authors_778a15c", vocab_size=3).embed.weight
    assert not frozen.requires_grad
    torch.testing.assert_close(frozen @ frozen.T, torch.eye(3))  # orthonormal rows


def set_(param, values):
    with torch.no_grad():
        param.copy_(torch.tensor(values, dtype=param.dtype).reshape(param.shape))


def test_befce39_by_hand():
    """d = 1, one layer, tokens (1, 1): rotation by pi/2 each step, decay read from Im h."""
    model = build_model("csp", preset="authors_befce39", d_model=1, n_layers=1)
    block = model.layers[0]
    set_(model.encoder.weight, [1.0]), set_(model.encoder.bias, [0.0])
    set_(block.theta_proj.weight, [0.0, 0.0]), set_(block.theta_proj.bias, [math.atanh(0.5)])
    set_(block.B_proj.weight, [1.0]), set_(block.B_proj.bias, [0.0])
    set_(block.gamma_proj.weight, [0.0, 0.0]), set_(block.gamma_proj.bias, [math.pi / 2])
    set_(block.delta_proj.weight, [0.0, 1.0]), set_(block.delta_proj.bias, [0.0])
    set_(model.decoder.weight, [[1.0, 0.0], [0.0, 1.0]]), set_(model.decoder.bias, [0.0, 0.0])
    a = math.tanh(1.0)
    # x_t = a; rotated i a; gamma = 1; h_0 = i a; delta_1 = Im h_0 + Im x_1 = a
    h1 = a * (1 + math.exp(-math.log1p(math.exp(a))))
    silu = h1 / (1 + math.exp(-h1))
    gate = 1 / (1 + math.exp(-0.5))
    psi = math.atan2(silu, gate * a + 1e-8)
    logits = model(torch.tensor([[1, 1]]))
    torch.testing.assert_close(logits[0, 1], torch.tensor([math.cos(psi), math.sin(psi)]))
    h_re, h_im, alpha = block.recur(torch.full((1, 2, 1), a), torch.zeros(1, 2, 1))
    torch.testing.assert_close(alpha[0, :, 0], torch.tensor([0.5, 1 / (1 + math.exp(a))]))
    torch.testing.assert_close(h_im[0, :, 0], torch.tensor([a, h1]))


@pytest.mark.parametrize("revision", REVISIONS)
def test_angle_per_step_or_cumulative_by_hand(revision):
    """Each step's angle is pi/2; the paper era rotates by it, the others by the running sum.

    With alpha ~ 0 (delta bias 40), gamma = 1 and B = 1: h_t = e^{i phi_t} x_t, x_t = 1.
    """
    model = build_model("csp", preset=f"authors_{revision}", d_model=1, n_layers=1)
    block = model.layers[0]
    if revision in ("befce39", "3bb9f71"):  # pi tanh(b) = pi/2
        set_(block.theta_proj.weight, [0.0, 0.0]), set_(block.theta_proj.bias, [math.atanh(0.5)])
    else:  # c = (0, Re x): atan2(Re x, 0) = pi/2 for Re x > 0
        set_(block.theta_proj.weight, [[0.0, 0.0], [1.0, 0.0]])
    set_(block.B_proj.weight, [1.0])
    if block.B_proj.bias is not None:
        set_(block.B_proj.bias, [0.0])
    set_(block.gamma_proj.weight, [0.0, 0.0]), set_(block.gamma_proj.bias, [math.pi / 2])
    set_(block.delta_proj.weight, [0.0, 0.0]), set_(block.delta_proj.bias, [40.0])
    h_re, h_im, _ = block.recur(torch.ones(1, 3, 1), torch.zeros(1, 3, 1))
    h = torch.complex(h_re, h_im)[0, :, 0]
    if revision == "befce39":
        expected = torch.tensor([1j, 1j, 1j])
    else:  # i, -1, -i
        expected = torch.tensor([1j, -1, -1j])
    torch.testing.assert_close(h, expected.to(h.dtype), atol=1e-6, rtol=0)


def test_778a15c_gates_read_the_drive_by_hand():
    """alpha_t = exp(-softplus(Re b_t)) with b_0 = i, b_1 = -1 (rotations by pi/2, pi)."""
    model = build_model("csp", preset="authors_778a15c", d_model=1, n_layers=1)
    block = model.layers[0]
    set_(block.theta_proj.weight, [[0.0, 0.0], [1.0, 0.0]])
    set_(block.B_proj.weight, [1.0])
    set_(block.delta_proj.weight, [1.0, 0.0]), set_(block.delta_proj.bias, [0.0])
    set_(block.gamma_proj.weight, [0.0, 0.0]), set_(block.gamma_proj.bias, [math.pi / 2])
    h_re, h_im, alpha = block.recur(torch.ones(1, 2, 1), torch.zeros(1, 2, 1))
    alpha_1 = 1 / (1 + math.exp(-1.0))  # exp(-softplus(z)) = 1 / (1 + e^z), z = Re b_1 = -1
    torch.testing.assert_close(alpha[0, :, 0], torch.tensor([0.5, alpha_1]))
    h1 = torch.complex(h_re, h_im)[0, 1, 0]  # alpha_1 * i + (-1)
    torch.testing.assert_close(h1, torch.tensor(complex(-1.0, alpha_1)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("revision", REVISIONS)
def test_decay_reads_the_previous_state(revision):
    """alpha_t from the returned states: exp(-softplus(delta([h_{t-1}] + [x_t]))), or from
    the drive (778a15c); with the state term dropped the formula no longer holds."""
    torch.manual_seed(1)
    block = build_model("csp", preset=f"authors_{revision}", d_model=3, n_layers=1).layers[0]
    torch.nn.init.normal_(block.theta_proj.weight)
    x_re, x_im = torch.randn(4, 5, 3), torch.randn(4, 5, 3)
    h_re, h_im, alpha = block.recur(x_re, x_im)
    current = torch.cat([x_re, x_im], -1)
    previous = torch.cat([h_re, h_im], -1)[:, :-1]
    from_state = torch.exp(
        -torch.nn.functional.softplus(block.delta_proj(previous + current[:, 1:]))
    )
    from_input = torch.exp(-torch.nn.functional.softplus(block.delta_proj(current[:, 1:])))
    if revision == "778a15c":
        assert not torch.allclose(alpha[:, 1:], from_state)
    else:
        torch.testing.assert_close(alpha[:, 1:], from_state)
        assert not torch.allclose(alpha[:, 1:], from_input, atol=1e-3)


# --- an independent plain-Python reference of every revision --------------------------


def lin(layer, v):
    w = layer.weight.tolist()
    b = layer.bias.tolist() if layer.bias is not None else [0.0] * len(w)
    return [
        sum(wi * vi for wi, vi in zip(row, v, strict=True)) + bi
        for row, bi in zip(w, b, strict=True)
    ]


def softplus(z):
    return math.log1p(math.exp(z))


def silu(z):
    return z / (1 + math.exp(-z))


def reference(model, tokens, revision):
    """Logits of one string, following the revision's description step by step."""
    if revision == "befce39":
        xs = [[math.tanh(v) for v in lin(model.encoder, [float(tok)])] for tok in tokens]
    else:
        table = model.embed.weight.tolist()
        xs = [lin(model.embed_proj, table[tok]) for tok in tokens]
        if revision != "778a15c":
            xs = [[math.tanh(v) for v in x] for x in xs]
    res, ims = xs, [[0.0] * len(x) for x in xs]
    for block in model.layers:
        d, phi = len(res[0]), 0.0
        h_re, h_im = [0.0] * d, [0.0] * d
        gate = [1 / (1 + math.exp(-g)) for g in block.skip_gate.tolist()]
        out_re, out_im = [], []
        for x_re, x_im in zip(res, ims, strict=True):
            u = x_re + x_im
            c = lin(block.theta_proj, u)
            if revision in ("befce39", "3bb9f71"):
                step = math.pi * math.tanh(c[0])
            else:
                if revision == "778a15c":
                    c = [math.tanh(v) for v in c]
                    norm = math.sqrt(c[0] ** 2 + c[1] ** 2 + 1e-8)
                    c = [v / norm for v in c]
                step = math.atan2(c[1], c[0] + math.copysign(1e-9, c[0]) * (c[0] != 0))
            phi = step if revision == "befce39" else phi + step
            rot_re = [
                math.cos(phi) * a - math.sin(phi) * b for a, b in zip(x_re, x_im, strict=True)
            ]
            rot_im = [
                math.sin(phi) * a + math.cos(phi) * b for a, b in zip(x_re, x_im, strict=True)
            ]
            b_re, b_im = lin(block.B_proj, rot_re), lin(block.B_proj, rot_im)
            if revision == "778a15c":
                delta = lin(block.delta_proj, b_re + b_im)[0]
                g = lin(block.gamma_proj, b_re + b_im)[0]
            else:
                delta = lin(block.delta_proj, [p + q for p, q in zip(h_re + h_im, u, strict=True)])[
                    0
                ]
                g = lin(block.gamma_proj, u)[0]
            alpha, gamma = math.exp(-softplus(delta)), (1 + math.sin(g)) / 2
            h_re = [alpha * h + gamma * b for h, b in zip(h_re, b_re, strict=True)]
            h_im = [alpha * h + gamma * b for h, b in zip(h_im, b_im, strict=True)]
            s_re = [k * a + silu(h) for k, a, h in zip(gate, x_re, h_re, strict=True)]
            s_im = [k * a + silu(h) for k, a, h in zip(gate, x_im, h_im, strict=True)]
            norm = [math.sqrt(a * a + b * b + 1e-8) for a, b in zip(s_re, s_im, strict=True)]
            out_re.append([a / n for a, n in zip(s_re, norm, strict=True)])
            out_im.append([b / n for b, n in zip(s_im, norm, strict=True)])
        res, ims = out_re, out_im
    eps = 0.0 if revision == "778a15c" else 1e-8
    logits = []
    for x_re, x_im in zip(res, ims, strict=True):
        psi = [math.atan2(b, a + eps) for a, b in zip(x_re, x_im, strict=True)]
        logits.append(lin(model.decoder, [math.cos(p) for p in psi] + [math.sin(p) for p in psi]))
    return logits


@pytest.mark.parametrize("revision", REVISIONS)
def test_forward_matches_a_plain_python_reference(revision):
    torch.manual_seed(3)
    model = build_model(
        "csp", preset=f"authors_{revision}", vocab_size=3, n_classes=3, d_model=2, n_layers=2,
        embed_dim=3,
    ).double()  # fmt: skip
    with torch.no_grad():  # every weight random, the angle projections included
        for p in model.parameters():
            p.normal_(0, 0.8)
    tokens = torch.tensor([[0, 1, 2], [2, 2, 1]])
    logits = model(tokens)
    assert logits.shape == (2, 3, 3)
    for i in range(2):
        expected = torch.tensor(reference(model, tokens[i].tolist(), revision), dtype=torch.float64)
        torch.testing.assert_close(logits[i], expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("revision", REVISIONS)
def test_position_t_is_the_prediction_for_the_prefix(revision):
    """Causal: the last-position readout (befce39) equals the logits of every prefix, and a
    trailing pad never changes earlier positions."""
    torch.manual_seed(0)
    model = build_model("csp", preset=f"authors_{revision}", vocab_size=3, d_model=4, n_layers=2)
    tokens = torch.tensor([[0, 1, 1, 0, 2, 2]])
    full = model(tokens)
    for t in range(1, 6):
        torch.testing.assert_close(model(tokens[:, :t])[:, -1], full[:, t - 1])
    assert model.readout == ("last" if revision == "befce39" else "prefix")


def test_gradients_reach_every_trainable_parameter_and_tokens_are_checked():
    for revision in REVISIONS:
        model = build_model("csp", preset=f"authors_{revision}", d_model=4, n_layers=2)
        torch.nn.init.normal_(model.layers[0].theta_proj.weight)
        model(torch.randint(0, 2, (3, 5))).square().sum().backward()
        inert = {"head.weight", "head.bias", "theta_proj.weight", "theta_proj.bias"}
        for name, p in model.named_parameters():
            if p.requires_grad and name not in inert:
                assert p.grad is not None and p.grad.abs().sum() > 0, (revision, name)
    with pytest.raises(ValueError, match="tokens must be an integer tensor"):
        model(torch.rand(2, 5))


def test_cumulative_angle_is_added_step_by_step_in_float32_as_theirs():
    from structattn_lite.models.csp_authors import running_sum

    torch.manual_seed(0)
    phi = torch.rand(200, 64, 1) * 6 - 3
    theirs, total = [], torch.zeros_like(phi[:, 0])
    for t in range(phi.shape[1]):  # their loop: theta_cum = theta_cum + theta_t
        total = total + phi[:, t]
        theirs.append(total)
    assert torch.equal(running_sum(phi), torch.stack(theirs, 1))  # bit for bit
    assert not torch.equal(phi.cumsum(1), torch.stack(theirs, 1))  # cumsum sums in double
