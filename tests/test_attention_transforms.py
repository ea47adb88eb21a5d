"""Attention modules compose with torch.func and torch.compile (issue 43, section 4).

``vmap(grad(...))`` over stacked modules is how a GPU trains many runs at once; a
compiled training step needs forwards that keep no Python-side state (the fast-path
counts are a tensor buffer) and a custom autograd.Function torch.func can trace.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch.func import functional_call, grad, stack_module_state, vmap

from structattn_lite.models.attention import build_attention
from structattn_lite.models.lm import CharLM, LMConfig

D_MODEL, HEADS, N = 32, 2, 12  # d_head = 16
# three different graphs on the 16 head dimensions, each with 16 edges
SUPPORTS = [{"support": "random", "support_seed": 0}, {"support": "ring"}, {"support": "complete"}]


def _modules(kind):
    mods = []
    for i, opts in enumerate(SUPPORTS if kind == "matroidal" else [{}] * 3):
        torch.manual_seed(i)
        mod = build_attention(kind, D_MODEL, HEADS, **({"m": 16, **opts} if opts else {}))
        with torch.no_grad():  # each module's metric off its initial value, differently
            for p in mod.metric_parameters():
                p.add_(0.3 * torch.randn_like(p))
        mod.check_every = 1  # the counters are read under vmap too
        mods.append(mod)
    return mods


def _loss(y: torch.Tensor) -> torch.Tensor:
    return (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum()


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # CPU SDPA: no batch rule
@pytest.mark.parametrize("kind", ["matroidal", "dense"])
def test_vmap_grad_over_stacked_modules_equals_separate_backward_passes(kind):
    mods = _modules(kind)
    if kind == "matroidal":  # the supports differ: stacked as (dense) buffers
        assert all(not torch.equal(mods[0].A, m.A) for m in mods[1:])
    x = torch.randn(3, 4, N, D_MODEL)
    params, buffers = stack_module_state(mods)
    base = copy.deepcopy(mods[0]).to("meta")

    def loss(p, b, xi):
        return _loss(functional_call(base, (p, b), (xi,)))

    got, got_x = vmap(grad(loss, argnums=(0, 2)))(params, buffers, x)
    for i, mod in enumerate(mods):
        xi = x[i].clone().requires_grad_(True)
        _loss(mod(xi)).backward()
        for name, p in mod.named_parameters():
            torch.testing.assert_close(got[name][i], p.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_x[i], xi.grad, rtol=1e-5, atol=1e-5)
        # the counts went into each stacked module's own buffer, as they did separately
        assert torch.equal(buffers["fast_counts"][i], mod.fast_counts)
        assert mod.stats.calls == mod.stats.checked_calls == 1 and mod.stats.rows > 0


def _train(kind: str, every: int, compile_: dict | None, steps: int = 3):
    """A tiny CharLM trained ``steps`` SGD steps, eagerly or compiled; (losses, model)."""
    torch.manual_seed(0)
    cfg = LMConfig(vocab_size=11, block_size=N, d_model=16, n_heads=2, n_layers=2,
                   mlp_ratio=2, attention=kind)  # fmt: skip
    model = CharLM(cfg)
    model.check_every(every)
    forward = torch.compile(model, **compile_) if compile_ is not None else model
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, 11, (4, N), generator=data)
        logits = forward(idx)
        loss = F.cross_entropy(logits.reshape(-1, 11), idx.roll(-1, 1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize(
    "kind,every", [("dot", 0), ("dense", 0), ("matroidal", 0), ("matroidal", 2)]
)
def test_compiled_charlm_trains_without_recompiling(kind, every):
    """Three training steps of a compiled CharLM: one graph, no recompilation (dynamo
    raises on one), the same losses and counts as eager. ``backend="aot_eager"`` (dynamo
    plus AOTAutograd, where buffer mutations and the custom autograd.Function are traced;
    recompilation is decided by dynamo, before any backend) keeps this to seconds; the
    inductor backend compiles C++ for a minute on a busy CPU. With check_every > 0 the
    gate and count are one graph break per module, still no recompilation."""
    eager_losses, eager = _train(kind, every, None)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    options = {"backend": "aot_eager", "fullgraph": every == 0}
    with torch._dynamo.config.patch(error_on_recompile=True):
        losses, model = _train(kind, every, options)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # it did compile
    assert losses == pytest.approx(eager_losses, rel=1e-5)
    for p, q in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    stats = model.fast_path_stats()
    assert stats == eager.fast_path_stats() and stats["calls"] == 3 * 2  # 3 steps, 2 layers
    assert stats["checked_calls"] == (2 * 2 if every == 2 else 0)  # steps 1 and 3
    torch._dynamo.reset()  # leave no compiled frames behind for later tests
