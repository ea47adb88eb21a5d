"""The seed-stacked CSP equals the reference CSP, and stacked training (every CSP run's
path, one seed included) equals the reference model trained alone on a ``Trainer``."""

import copy
import dataclasses
import statistics

import pandas as pd
import pytest
import stack_support
import torch

from structattn_lite.models.csp import CSP, CSP_PRESETS, csp_config
from structattn_lite.models.csp_stacked import StackedCSP, _pairs
from structattn_lite.runs import train
from structattn_lite.studies.grokking import experiment as grokking
from structattn_lite.training import state_tracking
from structattn_lite.training.losses import LOSSES, get_loss, per_seed_loss
from structattn_lite.training.state_tracking import CSPRun
from structattn_lite.training.trainer import (
    OptimConfig,
    Trainer,
    per_seed_grad_norm,
    step_seeds,
    unit_adam,
)

# One switch at a time away from each preset: every value CSPConfig accepts appears.
SWITCHES = [
    {},
    {"rotation": "step"},
    {"rotation": "cumulative"},
    {"rotation": "cumulative", "angle_dims": "per_dim"},
    {"rotation": "step", "angle_dims": "per_dim"},
    {"rotation": "none"},
    {"gates": "softplus"},
    {"gates": "decay"},
    {"silu": "step"},
    {"silu": "none"},
    {"skip": False},
    {"norm": "layernorm"},
    {"norm": "none"},
    {"scan": "parallel"},
    {"silu": "none", "skip": False, "norm": "none"},  # the bare recurrence
]


def reference_models(cfg, seeds, perturb=0.0):
    return stack_support.reference_models(CSP, cfg, seeds, perturb)


def outputs_and_grads(model, x, weights, last):
    """Output and parameter gradients (by reference name) of a reference or stacked model."""
    model.zero_grad()
    out = model(x, last=last) if isinstance(model, StackedCSP) else model(x)
    if last and not isinstance(model, StackedCSP):
        out = out[:, -1]
    stacked = isinstance(model, StackedCSP)  # its loss: the sum of the per-seed means
    (out * weights).flatten(int(stacked)).mean(-1).sum().backward()
    if stacked:
        grads = {}
        for ref, t, transposed in _pairs(model):
            if t.grad is not None:
                grads[ref] = t.grad.transpose(-1, -2) if transposed else t.grad
        return out.detach(), grads
    return out.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def compare(cfg, n_seeds, dtype, last=False, batch=8, length=16, perturb=0.0):
    """Per seed and tensor (output, then each gradient): (name, stacked, reference in
    ``dtype``, exact = the float64 reference)."""
    refs = reference_models(cfg, range(n_seeds), perturb)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (n_seeds, batch, length), generator=g)
    shape = (batch, cfg.n_classes) if last else (batch, length, cfg.n_classes)
    weights = torch.randn(n_seeds, *shape, generator=g, dtype=torch.float64)
    stacked = StackedCSP.stack([copy.deepcopy(r).to(dtype) for r in refs])
    out, grads = outputs_and_grads(stacked, x, weights.to(dtype), last)
    for s, ref in enumerate(refs):
        exact, exact_grads = outputs_and_grads(ref, x[s], weights[s], last)
        theirs, their_grads = outputs_and_grads(
            copy.deepcopy(ref).to(dtype), x[s], weights[s].to(dtype), last
        )
        assert grads.keys() == exact_grads.keys()  # weights the reference never uses: no grad
        yield "output", out[s], theirs, exact
        for name, e in exact_grads.items():
            yield name, grads[name][s].reshape(e.shape), their_grads[name], e


def assert_matches_reference(cfg, n_seeds, last=False, batch=8, length=16, float32=True):
    """float64: stacked == reference to 1e-10 (weights perturbed off their initialisation).

    float32: as close to the exact (float64) answer as the float32 reference is. Over
    inputs the two errors are alike (median ratio about 1), but one tensor of one sample
    can be 25x apart either way, so: the median ratio within 5x, every tensor within 1e-3
    or 100x (relative norm); a wrong formula is off by 1e-2 or more. A strict 1e-5 between two float32 computations is not a property
    of this model: h / |h| is ill-conditioned where |h| is small, and the float32 reference
    itself is up to 1e-2 (relative) off the float64 one for some switches.
    """
    for name, ours, _, exact in compare(cfg, n_seeds, torch.float64, last, batch, length, 0.1):
        torch.testing.assert_close(ours, exact, atol=1e-10, rtol=1e-9, msg=name)
    if not float32:
        return
    ratios = []
    for name, ours, theirs, exact in compare(cfg, n_seeds, torch.float32, last, batch, length):
        if not torch.isfinite(theirs).all():  # the float32 reference overflows: so must we
            assert not torch.isfinite(ours).all(), name
            continue
        our_err = ((ours.double() - exact).norm() / exact.norm()).item()
        ref_err = ((theirs.double() - exact).norm() / exact.norm()).item()
        assert our_err <= max(1e-3, 100 * ref_err), (name, our_err, ref_err)
        ratios.append(our_err / max(ref_err, 1e-7))
    assert not ratios or statistics.median(ratios) <= 5, statistics.median(ratios)


WELL_CONDITIONED = [{}, {"rotation": "none"}, {"angle_dims": "per_dim"}, {"norm": "layernorm"},
                    {"silu": "none"}, {"scan": "parallel"}]  # fmt: skip


@pytest.mark.parametrize("n_seeds", [1, 3])
@pytest.mark.parametrize(
    "switch", SWITCHES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "preset"
)
@pytest.mark.parametrize("preset", list(CSP_PRESETS))
def test_outputs_and_gradients_equal_the_reference(preset, switch, n_seeds):
    cfg = csp_config(preset, d_model=16, n_layers=3, **switch)
    assert_matches_reference(cfg, n_seeds)


WELL_CONDITIONED = [{}, {"rotation": "none"}, {"angle_dims": "per_dim"}, {"norm": "layernorm"},
                    {"silu": "none"}, {"scan": "parallel"}]  # fmt: skip


@pytest.mark.parametrize("n_seeds", [1, 3])
@pytest.mark.parametrize("switch", WELL_CONDITIONED, ids=str)
def test_float32_outputs_equal_the_float32_reference_to_1e_5(switch, n_seeds):
    """Where the float32 reference is itself within ~1e-5 of the exact answer (the text's
    preset at its initialisation), the stacked model's outputs equal it to 1e-5."""
    cfg = csp_config("paper", d_model=16, n_layers=3, **switch)
    for name, ours, theirs, _ in compare(cfg, n_seeds, torch.float32):
        if name == "output":
            torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset", list(CSP_PRESETS))
def test_last_position_only_and_paths_without_folding(preset):
    # last=True is the full output's last position; a vocabulary larger than B*T takes the
    # path that projects every position instead of the V embedding rows
    assert_matches_reference(csp_config(preset, d_model=8, n_layers=2), 2, last=True)
    big_vocab = csp_config(preset, d_model=8, n_layers=1, vocab_size=50, n_classes=3)
    assert_matches_reference(big_vocab, 2, batch=2, length=3)
    assert_matches_reference(big_vocab, 2, batch=2, length=3, last=True)


def test_every_switch_combination_in_float64():
    """All 180 configs CSPConfig accepts (scan aside), tiny, where rounding is negligible."""
    fields = dict(
        rotation=("step", "cumulative", "none"), angle_dims=("scalar", "per_dim"),
        gates=("softplus", "decay"), silu=("boundary", "step", "none"), skip=(True, False),
        norm=("complex", "layernorm", "none"),
    )  # fmt: skip
    import itertools

    n = 0
    for values in itertools.product(*fields.values()):
        options = dict(zip(fields, values, strict=True))
        if options["rotation"] == "none" and options["angle_dims"] == "per_dim":
            continue
        cfg = csp_config("paper", d_model=3, n_layers=1, vocab_size=3, n_classes=3, **options)
        assert_matches_reference(cfg, 2, batch=3, length=5, float32=False, last=n % 2 == 1)
        n += 1
    assert n == 180


def test_stack_unstack_round_trip_and_errors():
    cfg = csp_config("code_switches", d_model=6, n_layers=2, norm="layernorm", rotation="none")
    refs = reference_models(cfg, (0, 1), perturb=0.1)
    stacked = StackedCSP.stack(refs)
    for s, ref in enumerate(refs):
        back = stacked.unstack(s)
        assert back.state_dict().keys() == ref.state_dict().keys()
        for name, value in ref.state_dict().items():
            assert torch.equal(back.state_dict()[name], value), name
    # the unused angle weights travel as buffers, not parameters (Adam must not touch them)
    names = {n for n, _ in stacked.named_parameters()}
    assert not any("angle" in n for n in names) and "blocks.0.angle_w" in dict(
        stacked.named_buffers()
    )
    fresh = StackedCSP(cfg, 3)  # S reference initialisations
    assert fresh.embed.shape == (3, 2, 12) and not torch.equal(fresh.embed[0], fresh.embed[1])
    with pytest.raises(ValueError, match="one config"):
        StackedCSP.stack([CSP(cfg), CSP(dataclasses.replace(cfg, skip=False))])
    with pytest.raises(ValueError, match="n_seeds must be an integer >= 1"):
        StackedCSP(cfg, 0)
    with pytest.raises(ValueError, match=r"seed index must be in \[0, 2\)"):
        stacked.unstack(2)
    with pytest.raises(ValueError, match=r"tokens must be integer \[S=2, B, T\]"):
        stacked(torch.zeros(3, 4, 5, dtype=torch.long))


# --- the per-seed pieces of the trainer ------------------------------------------------


@pytest.mark.parametrize("name", LOSSES)
def test_per_seed_losses_equal_the_single_seed_loss(name):
    g = torch.Generator().manual_seed(0)
    classes = 2
    logits = torch.randn(3, 8, 5, classes, generator=g) * 3
    target = torch.randint(0, classes, (3, 8, 5), generator=g)
    target[1, :, 3:] = -100  # padded positions are ignored
    target[2] = -100  # a seed with nothing labelled
    got = per_seed_loss(name)(logits, target)
    expected = torch.stack([get_loss(name)(logits[s], target[s]) for s in range(3)])
    torch.testing.assert_close(got, expected)


def test_stacked_adam_and_clipping_equal_torch_per_seed():
    g = torch.Generator().manual_seed(0)
    params = [
        torch.randn(3, 4, 5, generator=g).requires_grad_(),
        torch.randn(3, 7, generator=g).requires_grad_(),
    ]
    lrs, wd = (1e-3, 5e-3, 2e-2), 1e-2
    singles = [[p[s].detach().clone().requires_grad_() for p in params] for s in range(3)]
    opts = [
        torch.optim.Adam(ps, lr=lr, weight_decay=wd) for ps, lr in zip(singles, lrs, strict=True)
    ]
    adam = unit_adam(params, weight_decay=wd)
    initial = [p.detach().clone() for p in params]
    update = torch.tensor([True, True, False])  # seed 2 is frozen (stopped or diverged)
    for _ in range(4):
        grads = [torch.randn(p.shape, generator=g) * 3 for p in params]
        grads[0][2] = float("nan")  # a frozen seed's NaN must not leak into the others
        norms = per_seed_grad_norm(grads)
        coef = (1.0 / (norms + 1e-6)).clamp(max=1.0)
        for s in range(2):
            for p, grad in zip(singles[s], grads, strict=True):
                p.grad = grad[s].clone()
            expected = torch.nn.utils.clip_grad_norm_(singles[s], 1.0)
            torch.testing.assert_close(norms[s], expected)
            opts[s].step()
        for p, gr in zip(params, grads, strict=True):
            p.grad = gr * coef.view(-1, *[1] * (gr.dim() - 1))
        step_seeds(adam, torch.tensor(lrs, dtype=torch.float64), update)
    for s in range(2):
        for p, single in zip(params, singles[s], strict=True):
            torch.testing.assert_close(p[s].detach(), single.detach(), rtol=1e-6, atol=1e-7)
    for p, before in zip(params, initial, strict=True):  # seed 2 kept its values exactly
        assert torch.equal(p[2].detach(), before[2])


# --- stacked training runs equal single-seed runs --------------------------------------


def tiny_run(seed, **changes):
    base = dict(task="parity", preset="paper", seed=seed, length=8, n=160, labels="sequence",
                epochs=3, batch_size=32, model_options={"d_model": 8, "n_layers": 2},
                optim=OptimConfig(lr=3e-3, plateau_patience=0))  # fmt: skip
    return CSPRun(**{**base, **changes})


def assert_same_record(alone, together):
    assert alone.key == together.key and alone.status == together.status
    assert list(alone.history.columns) == list(together.history.columns)
    pd.testing.assert_frame_equal(alone.history, together.history, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        torch.tensor(together.extra["step_grad_norms"]),
        torch.tensor(alone.extra["step_grad_norms"]),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"preset": "code_switches", "labels": "prefix", "loss": "ce"},
        {"optim": OptimConfig(lr=3e-3, schedule="cosine", weight_decay=1e-3)},
    ],
    ids=["paper-sequence-focal", "code_switches-prefix-ce", "cosine-weight-decay"],
)
@pytest.mark.parametrize("n_seeds", [1, 3])
def test_each_seed_of_a_stacked_run_equals_its_reference_run(changes, n_seeds):
    """Seeds stacked, and one seed alone (``runs.train`` of one config: a stack of one), each equal the
    reference model trained on a ``Trainer``."""
    # float64: CSP training amplifies float32 rounding about tenfold per step, so after a
    # few dozen steps two correct float32 runs differ by far more than 1e-5
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        configs = [tiny_run(s, **changes) for s in range(n_seeds)]
        alone = [stack_support.reference_run(c) for c in configs]
        if n_seeds == 1:
            together = [train("grokking", configs[0], progress=False)]
        else:
            together = train("grokking", configs)
    finally:
        torch.set_default_dtype(old)
    for a, b in zip(alone, together, strict=True):
        assert_same_record(a, b)
        assert b.extra["seed_batched"] == n_seeds
    assert len(alone[0].history) == 3


class ToyMLP(torch.nn.Module):
    """A ReLU MLP; given weights with a leading seed axis, a stacked model of those seeds."""

    def __init__(self, w1: torch.Tensor, w2: torch.Tensor):
        super().__init__()
        if w1.dim() == 3:
            self.n_seeds = len(w1)
        self.w1, self.w2 = torch.nn.Parameter(w1.clone()), torch.nn.Parameter(w2.clone())

    def forward(self, x):
        return torch.relu(x @ self.w1) @ self.w2


def test_one_trainer_trains_a_plain_model_as_one_seed_of_a_stack():
    """The one Trainer, on plain models (S = 1, the plain step) and on the same models
    stacked (the per-seed step): each seed's rows, lr schedule, clipping, stop rule,
    status and step norms are its plain model's, while the seeds stop at different epochs."""
    g = torch.Generator().manual_seed(0)
    n, k = 48, 3
    w1 = torch.randn(k, 5, 16, generator=g, dtype=torch.float64) / 2
    w2 = torch.randn(k, 16, 2, generator=g, dtype=torch.float64) / 2
    x = torch.randn(k, n, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (k, n), generator=g)
    optim = OptimConfig(lr=0.3, clip=0.5, plateau_patience=0)
    ce = torch.nn.functional.cross_entropy

    def stop(rows):  # seed s stops by its rule after epoch 2 + 2s; seed 2 trains all 5
        return len(rows) == 2 + 2 * rows[-1]["seed"]

    def plain_run(s):
        def batches(gen):
            order = torch.randperm(n, generator=gen)
            for i in range(0, n, 16):
                yield x[s, order[i : i + 16]], y[s, order[i : i + 16]]

        def evaluate(m):
            return {"seed": s, "acc": (m(x[s]).argmax(-1) == y[s]).double().mean().item()}

        trainer = Trainer(ToyMLP(w1[s], w2[s]), lambda m, a, b: ce(m(a), b), optim, progress=False)
        return trainer.fit(5, batches, evaluate, torch.Generator().manual_seed(10 + s), stop)

    def stacked_batches(gens):
        orders = torch.stack([torch.randperm(n, generator=gen) for gen in gens])
        for i in range(0, n, 16):
            idx = orders[:, i : i + 16]
            yield x[torch.arange(k)[:, None], idx], y[torch.arange(k)[:, None], idx]

    def stacked_evaluate(m):
        acc = (m(x).argmax(-1) == y).double().mean(1).tolist()
        return [{"seed": s, "acc": acc[s]} for s in range(k)]

    def stacked_loss(m, a, b):
        return ce(m(a).transpose(1, 2), b, reduction="none").mean(1)

    trainer = Trainer(ToyMLP(w1, w2), stacked_loss, optim, progress=False)
    assert trainer.stacked and trainer.n_seeds == k
    gens = [torch.Generator().manual_seed(10 + s) for s in range(k)]
    together = trainer.fit(5, stacked_batches, stacked_evaluate, gens, stop)
    alone = [plain_run(s) for s in range(k)]
    assert [len(r.history) for r in together] == [2, 4, 5]
    assert [r.status for r in together] == ["early_stop", "early_stop", "ok"]
    for a, b in zip(alone, together, strict=True):
        assert (a.status, a.reason) == (b.status, b.reason)
        pd.testing.assert_frame_equal(a.history, b.history, rtol=1e-10)
        torch.testing.assert_close(
            torch.tensor(a.step_grad_norms), torch.tensor(b.step_grad_norms), rtol=1e-10, atol=0
        )
    assert together[2].history["lr"].nunique() > 1  # the plateau schedule stepped
    assert max(together[2].step_grad_norms) > optim.clip  # and clipping mattered


def test_a_stacked_model_refuses_what_only_the_plain_step_does():
    """The per-seed step has no other optimizer, per-step lr, grad groups, bf16 autocast,
    best-state monitor or CPU budget: asking for one is a one-line error, never ignored."""
    w1, w2 = torch.zeros(2, 5, 16), torch.zeros(2, 16, 2)
    for bad in ({"lr_at": lambda step: 0.1}, {"precision": "bfloat16"}, {"grad_groups": {"w": []}}):
        with pytest.raises(ValueError, match="are a plain model's") as err:
            Trainer(ToyMLP(w1, w2), lambda m, a, b: m(a).sum((1, 2)), **bad)
        assert len(str(err.value).splitlines()) == 1
    trainer = Trainer(ToyMLP(w1, w2), lambda m, a, b: m(a).sum((1, 2)), progress=False)
    gens = [torch.Generator(), torch.Generator()]
    for bad in ({"monitor": "val_loss"}, {"time_budget_s": 1.0}):
        with pytest.raises(ValueError, match="stop a plain model only"):
            trainer.fit(1, lambda g: [], lambda m: [{}, {}], gens, **bad)


def test_a_diverging_seed_stops_alone(monkeypatch):
    real = state_tracking.build_csp_model

    def exploding(cfg, *args):  # softplus gates with a huge bias overflow on long strings
        model = real(cfg, *args)
        if cfg.seed == 1:
            for block in model.blocks:
                torch.nn.init.constant_(block.delta.bias, 200.0)
        return model

    monkeypatch.setattr(state_tracking, "build_csp_model", exploding)
    options = {"d_model": 8, "n_layers": 1, "norm": "none", "silu": "none", "skip": False}
    configs = [tiny_run(s, length=64, n=200, model_options=options) for s in (0, 1, 2)]
    together = train("grokking", configs)
    assert [r.status for r in together] == ["ok", "diverged", "ok"]
    assert "non-finite" in together[1].reason and len(together[1].history) == 0
    alone = train("grokking", configs[1], progress=False)  # the guard of a stack of one seed
    assert alone.status == "diverged" and alone.reason == together[1].reason
    old = torch.get_default_dtype()
    for s in (0, 2):  # the others trained on as if alone (float32: compare the first steps)
        alone = stack_support.reference_run(configs[s])
        assert len(together[s].history) == len(alone.history) == 3
        torch.testing.assert_close(
            torch.tensor(together[s].extra["step_grad_norms"][:3]),
            torch.tensor(alone.extra["step_grad_norms"][:3]),
            rtol=1e-4,
            atol=1e-5,
        )
    assert torch.get_default_dtype() == old


def test_mixed_configs_are_rejected_and_baselines_run_one_by_one():
    with pytest.raises(ValueError, match="differ only in their seed"):
        train("grokking", [tiny_run(0), tiny_run(1, loss="ce")])
    configs = [tiny_run(s, model="diag_rnn", preset=None, epochs=1) for s in (0, 1)]
    records = train("grokking", configs)
    for c, r in zip(configs, records, strict=True):
        assert_same_record(train("grokking", c, progress=False), r)
        assert "seed_batched" not in r.extra


def test_seeds_whose_data_differ_in_shape_train_as_stacks_of_one(monkeypatch):
    """Seeds that cannot share one stack (here seed 1 has fewer test strings) each train
    as a stack of one seed, as ``runs.train`` trains them."""
    real = grokking.setup  # the grokking study's description of a run (csp_setup)

    def shorter(cfg):
        setup = real(cfg)
        if cfg.seed == 1:
            setup.tensors["x_test"] = setup.tensors["x_test"][:-1]
            setup.tensors["y_test"] = setup.tensors["y_test"][:-1]
        return setup

    monkeypatch.setattr(grokking, "setup", shorter)
    configs = [tiny_run(s, epochs=2) for s in (0, 1)]
    records = train("grokking", configs)
    assert [r.extra["seed_batched"] for r in records] == [1, 1]
    for c, r in zip(configs, records, strict=True):
        pd.testing.assert_frame_equal(r.history, train("grokking", c, progress=False).history)


@pytest.mark.parametrize("kind", ["paper", "code_switches", "authors"])
def test_a_stacked_step_compiles_whole_and_matches_the_eager_one(kind):
    """torch.compile(fullgraph=True) traces the seed-stacked models end to end (no write
    into a view of a buffer stops it), and the traced step gives the eager step's loss
    and gradients. ``aot_eager`` traces forward and backward as inductor would, without
    generating C++: seconds, not minutes."""
    from structattn_lite.models.csp_authors import AuthorsCSPConfig
    from structattn_lite.models.csp_authors_stacked import StackedAuthorsCSP

    torch.manual_seed(0)
    if kind == "authors":  # the revision whose decay reads the state (w . h_{t-1})
        model = StackedAuthorsCSP(AuthorsCSPConfig(revision="7d6c56a", d_model=8), 3)
    else:
        model = StackedCSP(csp_config(kind, d_model=8, n_layers=2), 3)
    x = torch.randint(0, 2, (3, 4, 16))

    def step(x):
        return model(x).float().pow(2).sum()

    eager = step(x)
    eager.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(x)
    compiled.backward()
    torch.testing.assert_close(compiled, eager)
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g)
