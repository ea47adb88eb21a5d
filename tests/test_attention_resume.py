"""An attention run resumes from its checkpoint and ends as the uninterrupted run does:
killed with SIGKILL in a subprocess right after its first checkpoint, and interrupted
in-process by an exception; history, per-step gradient norms, fast-path counts, best
step and final validation number all equal, exactly."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from test_resume import kill_after_first_checkpoint

from structattn_lite.studies.attention import experiment as st
from structattn_lite.studies.attention.recipe import Recipe
from structattn_lite.training.checkpoint import (
    checkpoint_plan,
    model_shapes,
    rng_state,
    save_checkpoint,
)
from structattn_lite.training.trainer import few_threads

# About 2 s on one thread: long enough to kill mid-run. Matroidal, so the metric
# parameters and the fast-path counters are in the state too; on 2% of the text it peaks
# on validation at step 120 and stops early at 200, so the best state and the patience
# count must come back from the checkpoint as well.
RUN = st.Config(
    dataset="fallback", kind="matroidal", d_model=16, n_heads=2, n_layers=1, block_size=16,
    batch_size=8, eval_windows=4, final_eval_windows=4, prune_fractions=(), seed=5,
    data_fraction=0.02,
    recipe=Recipe(lr=3e-2, max_steps=400, warmup_steps=20, eval_every=20, check_every=3,
                  patience=4),
)  # fmt: skip
CLOCKS = ["seconds", "cpu_seconds"]  # the only columns a resumed run may differ in


class Interrupt(Exception):
    pass


class StopAtEvaluation:
    def __init__(self, n: int):
        self.n = n

    def on_batch_end(self, *args):
        pass

    def on_epoch_end(self, outcome, row):
        if row["epoch"] == self.n:
            raise Interrupt


def train_attention(checkpoint: str | None, callbacks=()):
    """What the subprocess runs (and the test runs in-process to compare)."""
    with few_threads(1):
        plan = checkpoint_plan(checkpoint, every=1)
        return st.run(RUN, progress=False, callbacks=callbacks, checkpoint=plan)


def same_run(got, want) -> None:
    pd.testing.assert_frame_equal(
        got.history.drop(columns=CLOCKS), want.history.drop(columns=CLOCKS), check_exact=True
    )
    for key in ("grad_norms", "fast_path", "best_step", "steps", "stop", "final"):
        assert got.extra[key] == want.extra[key], key


@pytest.fixture(scope="module")
def uninterrupted():
    return train_attention(None)


@pytest.mark.slow
def test_killed_attention_run_resumes_to_the_uninterrupted_run(tmp_path, uninterrupted):
    path = tmp_path / "attention.ckpt"
    steps = kill_after_first_checkpoint("train_attention", path, "test_attention_resume")["steps"]
    assert 0 < steps < RUN.recipe.max_steps
    resumed = train_attention(str(path))
    assert resumed.extra["resumed_from_step"] == steps and not path.exists()
    assert uninterrupted.extra["resumed_from_step"] == 0
    same_run(resumed, uninterrupted)


def test_interrupted_attention_run_resumes_exactly(tmp_path, uninterrupted):
    path = tmp_path / "attention.ckpt"
    with pytest.raises(Interrupt):
        train_attention(str(path), callbacks=[StopAtEvaluation(8)])
    resumed = train_attention(str(path))
    # the checkpoint of the interrupted evaluation: saved before its callbacks ran
    cut = 8 * RUN.recipe.eval_every
    assert resumed.extra["resumed_from_step"] == cut
    # the run peaked before the cut and stopped after it, by the restored patience count
    assert uninterrupted.extra["best_step"] < cut < uninterrupted.extra["steps"]
    assert uninterrupted.extra["stop"] == "early_stop"
    same_run(resumed, uninterrupted)


def test_a_checkpoint_of_the_old_attention_loop_is_refused(tmp_path, uninterrupted):
    """recipe.train once had its own loop and checkpoint state: such a checkpoint is set
    aside with a warning, even where its step target equals the rounds of the one Trainer
    (eval_every 1), and the run trains from scratch to the uninterrupted run."""
    task, model = st.build_task(RUN)
    rounds = math.ceil(RUN.recipe.max_steps / RUN.recipe.eval_every)
    old = {"model": model.state_dict(), "optimizer": {}, "steps": 20, "target": rounds,
           "rows": [], "grad_norms": {}, "best": (None, math.inf, 0, 0), "stats": [],
           "elapsed": (0.0, 0.0), "rng": rng_state(torch.Generator()),
           "shapes": model_shapes(model)}  # fmt: skip
    path = tmp_path / "attention.ckpt"
    save_checkpoint(path, old)
    with pytest.warns(UserWarning, match="another model, epoch count or trainer"):
        resumed = train_attention(str(path))
    assert resumed.extra["resumed_from_step"] == 0 and not path.exists()
    same_run(resumed, uninterrupted)


def test_checkpointing_needs_the_batch_generator(tmp_path):
    from structattn_lite.studies.attention.experiment import train

    task, model = st.build_task(RUN)
    plan = checkpoint_plan(tmp_path / "x.ckpt")
    with pytest.raises(ValueError, match="batch.generator"):
        train(model, lambda m, b: m(b[0]).sum(), lambda step: None, task.evaluate, RUN.recipe,
              checkpoint=plan)  # fmt: skip
