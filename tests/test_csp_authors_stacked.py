"""The seed-stacked authors' CSP equals models/csp_authors.py, and trains (seeds stacked,
or one seed: ``runs.train`` of one config) as the reference model does on a ``Trainer``."""

import copy
import statistics

import pandas as pd
import pytest
import stack_support
import torch

from structattn_lite.models.csp_authors import REVISIONS, AuthorsCSP, AuthorsCSPConfig
from structattn_lite.models.csp_authors_stacked import (
    StackedAuthorsCSP,
    _key,
)
from structattn_lite.runs import train
from structattn_lite.training.state_tracking import CSPRun
from structattn_lite.training.trainer import OptimConfig


def reference_models(cfg, seeds, perturb=0.0):
    return stack_support.reference_models(AuthorsCSP, cfg, seeds, perturb)


def outputs_and_grads(model, x, weights, last):
    model.zero_grad()
    stacked = isinstance(model, StackedAuthorsCSP)
    out = model(x, last=last) if stacked else model(x)
    if last and not stacked:
        out = out[:, -1]
    (out * weights).flatten(int(stacked)).mean(-1).sum().backward()  # per-seed means, summed
    grads = {}
    for name, p in model.named_parameters() if not stacked else []:
        if p.grad is not None:
            grads[name] = p.grad
    if stacked:
        for name in model.names:
            t = model.w(name)
            if isinstance(t, torch.nn.Parameter) and t.grad is not None:
                grads[name] = t.grad
    return out.detach(), grads


def compare(cfg, n_seeds, dtype, last, perturb):
    refs = reference_models(cfg, range(n_seeds), perturb)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (n_seeds, 8, 12), generator=g)
    shape = (8, cfg.n_classes) if last else (8, 12, cfg.n_classes)
    weights = torch.randn(n_seeds, *shape, generator=g, dtype=torch.float64)
    stacked = StackedAuthorsCSP.stack([copy.deepcopy(r).to(dtype) for r in refs])
    out, grads = outputs_and_grads(stacked, x, weights.to(dtype), last)
    for s, ref in enumerate(refs):
        exact, exact_grads = outputs_and_grads(ref, x[s], weights[s], last)
        theirs, their_grads = outputs_and_grads(
            copy.deepcopy(ref).to(dtype), x[s], weights[s].to(dtype), last
        )
        assert grads.keys() == exact_grads.keys()  # frozen and inert tensors: no gradient
        yield "output", out[s], theirs, exact
        for name, e in exact_grads.items():
            yield name, grads[name][s], their_grads[name], e


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("n_seeds", [1, 3])
@pytest.mark.parametrize("vocab, classes", [(2, 2), (3, 3)])
@pytest.mark.parametrize("revision", REVISIONS)
def test_outputs_and_gradients_equal_the_reference(revision, vocab, classes, n_seeds, last):
    cfg = AuthorsCSPConfig(revision=revision, vocab_size=vocab, n_classes=classes, d_model=8)
    for name, ours, _, exact in compare(cfg, n_seeds, torch.float64, last, perturb=0.2):
        torch.testing.assert_close(ours, exact, atol=1e-10, rtol=1e-9, msg=name)
    # float32: as close to the exact answer as the float32 reference (see test_csp_stacked)
    ratios = []
    for name, ours, theirs, exact in compare(cfg, n_seeds, torch.float32, last, perturb=0.0):
        our_err = ((ours.double() - exact).norm() / exact.norm().clamp_min(1e-30)).item()
        ref_err = ((theirs.double() - exact).norm() / exact.norm().clamp_min(1e-30)).item()
        assert our_err <= max(1e-3, 100 * ref_err), (name, our_err, ref_err)
        ratios.append(our_err / max(ref_err, 1e-7))
    assert statistics.median(ratios) <= 5


@pytest.mark.parametrize("revision", REVISIONS)
def test_round_trip_and_what_trains(revision):
    cfg = AuthorsCSPConfig(revision=revision, vocab_size=3, d_model=5, n_layers=2)
    refs = reference_models(cfg, (0, 1), perturb=0.1)
    stacked = StackedAuthorsCSP.stack(refs)
    for s, ref in enumerate(refs):
        back = stacked.unstack(s)
        for name, value in ref.state_dict().items():
            assert torch.equal(back.state_dict()[name], value), name
    names = {n for n, _ in stacked.named_parameters()}
    assert not any(n.startswith(("head", "theta_proj")) for n in names)  # inert: buffers
    assert (_key("embed.weight") in names) == (revision in ("3bb9f71", "7d6c56a"))
    fresh = StackedAuthorsCSP(cfg, 2)  # S reference initialisations
    assert not torch.equal(fresh.w("decoder.weight")[0], fresh.w("decoder.weight")[1])
    with pytest.raises(ValueError, match="one config"):
        StackedAuthorsCSP.stack([AuthorsCSP(cfg), AuthorsCSP(AuthorsCSPConfig(revision=revision))])


def test_trainable_count_equals_the_references_trained_parameters():
    for revision in REVISIONS:
        ref = AuthorsCSP(AuthorsCSPConfig(revision=revision))
        used = sum(  # what the reference's optimizer ever moves: parameters with a gradient
            p.numel()
            for n, p in ref.named_parameters()
            if p.requires_grad and not n.startswith(("head.", "theta_proj."))
        )
        stacked = StackedAuthorsCSP.stack([ref])
        assert sum(p.numel() for p in stacked.parameters()) == used


@pytest.mark.parametrize(
    "preset, labels, loss",
    [("upstream", "prefix", "ce"), ("authors_befce39", "sequence", "focal")],
)
@pytest.mark.parametrize("n_seeds", [1, 2])
def test_each_seed_of_a_stacked_run_equals_its_reference_run(preset, labels, loss, n_seeds):
    old = torch.get_default_dtype()
    torch.set_default_dtype(
        torch.float64
    )  # float32 training amplifies rounding: see test_csp_stacked
    try:
        configs = [
            CSPRun(task="parity", preset=preset, seed=s, length=8, n=160, labels=labels,
                   loss=loss, epochs=2, batch_size=32, model_options={"d_model": 6, "n_layers": 2},
                   optim=OptimConfig(lr=1e-2, schedule="cosine"))
            for s in range(n_seeds)
        ]  # fmt: skip
        alone = [stack_support.reference_run(c) for c in configs]
        if n_seeds == 1:
            together = [train("grokking", configs[0], progress=False)]
        else:
            together = train("grokking", configs)
    finally:
        torch.set_default_dtype(old)
    for a, b in zip(alone, together, strict=True):
        assert a.key == b.key and a.status == b.status and b.extra["seed_batched"] == n_seeds
        pd.testing.assert_frame_equal(a.history, b.history, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            torch.tensor(b.extra["step_grad_norms"]),
            torch.tensor(a.extra["step_grad_norms"]),
            rtol=1e-5,
            atol=1e-5,
        )
