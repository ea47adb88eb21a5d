"""The state-tracking driver: its stop rule reads validation only, and the length study's
CSP runs (seeds stacked, or one seed alone) equal the reference model trained on a
``Trainer``, as the CSP runs' do (test_csp_stacked)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import torch

from structattn_lite.runs import train
from structattn_lite.studies.length import experiment as ls
from structattn_lite.training import driver
from structattn_lite.training.driver import ValidationStop
from structattn_lite.training.trainer import OptimConfig


def test_the_stop_rule_reads_validation_and_counts_a_missing_epoch_as_zero():
    stop = ValidationStop("val_acc", 1.0, 2)
    assert not stop([{"val_acc": 1.0}])  # fewer epochs than its patience
    assert stop([{"val_acc": 0.5}, {"val_acc": 1.0}, {"val_acc": 1.0}])
    assert not stop([{"val_acc": 1.0}, {"val_acc": 0.9}])
    assert not stop([{"val_acc": 1.0}, {"test_acc": 1.0}])  # no validation: no stop
    fit = ValidationStop("val_seq_acc", 0.9, 1)
    assert fit([{"val_seq_acc": 0.95}]) and not fit([{"val_seq_acc": 0.85}])
    with pytest.raises(ValueError, match="validation only, not 'test_acc'"):
        ValidationStop("test_acc", 1.0, 1)
    assert ls.fit_stop(ls.LengthRun()) is None
    assert ls.fit_stop(ls.LengthRun(stop_at_fit=0.9, fit_patience=2)) == ValidationStop(
        "val_seq_acc", 0.9, 2
    )


def tiny_length_run(seed: int, **changes) -> ls.LengthRun:
    base = dict(task="parity", model="csp_paper", model_options={"d_model": 8, "n_layers": 1},
                n=160, epochs=3, batch_size=32, max_eval_length=20, n_eval=16, seed=seed,
                optim=OptimConfig(lr=3e-3, plateau_patience=0))  # fmt: skip
    return ls.LengthRun(**{**base, **changes})


def reference_length_run(cfg: ls.LengthRun):
    """The readable reference: the length model trained on a ``Trainer``."""
    return driver.run_alone(ls.length_setup(cfg), ls.length_record)


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_each_seed_of_a_stacked_length_run_equals_its_reference_run(n_seeds):
    # float64, as the CSP test: float32 rounding grows about tenfold per step
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        configs = [tiny_length_run(s) for s in range(n_seeds)]
        alone = [reference_length_run(c) for c in configs]
        if n_seeds == 1:
            together = [train("length", configs[0])]
        else:
            together = train("length", configs)
    finally:
        torch.set_default_dtype(old)
    for a, b in zip(alone, together, strict=True):
        assert a.key == b.key and a.status == b.status and b.extra["seed_batched"] == n_seeds
        assert list(a.history.columns) == list(b.history.columns)
        assert "val_seq_acc" in a.history  # the column the fit-stop reads
        pd.testing.assert_frame_equal(a.history, b.history, rtol=1e-5, atol=1e-5)
        pd.testing.assert_frame_equal(
            pd.DataFrame(a.extra["curve"]), pd.DataFrame(b.extra["curve"]), atol=1e-5, rtol=0
        )
        assert set(a.extra) == set(b.extra) - {"seed_batched", "stack"}
        assert b.extra["stack"] == list(range(n_seeds))  # the seeds it trained beside
    if n_seeds > 1:
        assert not alone[0].history.equals(alone[1].history)  # three seeds, three runs


@pytest.mark.parametrize("n_seeds", [1, 2])
def test_seeds_that_draw_fresh_strings_train_stacked_as_their_reference_runs(n_seeds):
    """The variable protocol samples each seed's batches; stacked, each seed draws and
    trains as its reference run does."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        configs = [
            tiny_length_run(s, protocol="variable", train_length=8, steps_per_epoch=3, epochs=2)
            for s in range(n_seeds)
        ]
        alone = [reference_length_run(c) for c in configs]
        together = train("length", configs)
    finally:
        torch.set_default_dtype(old)
    assert [r.config["seed"] for r in together] == list(range(n_seeds))
    for a, b in zip(alone, together, strict=True):
        assert b.extra["seed_batched"] == n_seeds and len(b.history) == 2
        pd.testing.assert_frame_equal(a.history, b.history, rtol=1e-5, atol=1e-5)
        assert a.extra["steps"] == b.extra["steps"] == 6
    with pytest.raises(ValueError, match="differ only in their seed"):
        train("length", [tiny_length_run(0), tiny_length_run(1, epochs=2)])


def test_an_exported_run_says_which_stack_it_trained_in():
    """A seed's float32 numbers can depend on the seeds beside it, so the record keeps its
    stack and the exported tables say it: the seeds when the record holds them, their
    number for records made before the list was kept, nothing for a run never stacked."""
    from structattn_lite.records import stack_words
    from structattn_lite.studies.length.results import curves_frame

    assert stack_words({"stack": [12, 10, 11], "seed_batched": 3}) == "seeds 10-12"
    assert stack_words({"stack": [0, 2]}) == "seeds 0 2"
    assert stack_words({"stack": [4], "seed_batched": 1}) == "seeds 4"
    assert stack_words({"seed_batched": 12}) == "12 seeds"
    assert stack_words({}) is None
    records = train("length", [tiny_length_run(s, epochs=1) for s in (3, 4)])
    frame = curves_frame(records)
    assert set(frame["stack"]) == {"seeds 3-4"}


def test_a_seed_repeats_bitwise_in_the_stack_its_record_names():
    """What a stacked run promises (float32, as the grids train): the same config and seed
    in the same stack give bitwise the same numbers, and the record names that stack, so
    rebuilding it reproduces the seed. Alone, or beside other seeds, a seed may round
    differently (the elementwise kernels treat a tensor's last elements apart); the record
    says which stack its numbers belong to."""
    configs = [tiny_length_run(s, epochs=2) for s in (5, 6, 7)]
    first, again = train("length", configs), train("length", configs)
    for a, b in zip(first, again, strict=True):
        pd.testing.assert_frame_equal(a.history, b.history, check_exact=True)
        pd.testing.assert_frame_equal(
            pd.DataFrame(a.extra["curve"]), pd.DataFrame(b.extra["curve"]), check_exact=True
        )
        assert a.extra["stack"] == b.extra["stack"] == [5, 6, 7]
    alone = train("length", configs[0])
    assert alone.extra["stack"] == [5] and alone.extra["seed_batched"] == 1


_FAULTS = """
import resource, sys, torch
from structattn_lite.models.csp import csp_config
from structattn_lite.models.csp_stacked import StackedCSP
if sys.argv[1] == "kept":
    from structattn_lite.training.trainer import keep_freed_memory
    assert keep_freed_memory()
torch.set_num_threads(1)
# four seeds of the text's model on strings of 256: activations of over 32 MiB, the most
# glibc's own threshold rises to, so by default each is mapped afresh every step
model = StackedCSP(csp_config("paper"), 4)
x = torch.randint(0, 2, (4, 64, 256))
def step():
    model.zero_grad()
    model(x).float().pow(2).mean().backward()
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 2)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_training_step_reuses_the_memory_the_last_one_freed():
    """By default glibc maps each large activation afresh and returns it when freed, so
    every step of a stacked model at long strings faults its pages in again; once the
    trainer has asked glibc to keep freed memory, a step reuses the last one's pages."""

    def faults(mode: str) -> int:
        run = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True,
                             text=True, check=True)  # fmt: skip
        return int(run.stdout.split()[-1])

    plain, kept = faults("plain"), faults("kept")
    assert kept * 10 < plain, (plain, kept)  # measured: 170,000-280,000 against 0-8,000


def test_every_trainer_keeps_freed_memory(monkeypatch):
    from structattn_lite.training import trainer

    asked = []
    monkeypatch.setattr(trainer, "keep_freed_memory", lambda: asked.append(True))
    trainer.Trainer(torch.nn.Linear(2, 2), lambda m, x: m(x).sum(), OptimConfig())
    assert asked == [True]
