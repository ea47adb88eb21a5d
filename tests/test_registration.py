"""Extension by registration: a new attention variant is one registered class, a new task
one registry row. Each test defines its own inside itself (a dot product whose queries
and keys share one projection; "more ones than zeros so far"), registers it, and runs it
through a grid, the FLOP audit or the gap report, the tables and a figure with no file
of the package edited. A name nobody registered is a one-line error."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite import names
from structattn_lite.models import attention_base
from structattn_lite.models.attention import KINDS, Attention, build_attention, register
from structattn_lite.models.attention_flops import analytic_attention_flops

KIND = "toy_shared_dot"
NAME = "toy: dot product, one projection for q and k"


class SharedDot(Attention):
    """softmax(z_i . z_j / sqrt(d)) with z = W_z x: one projection for both sides."""

    kind = KIND
    display_name = NAME
    color = "#117733"

    def __init__(self, d_model: int, n_heads: int, causal: bool = True):
        super().__init__(d_model, n_heads, causal)
        self.w_z = nn.Linear(d_model, d_model, bias=False)

    @classmethod
    def analytic_flops(cls, batch, n_tokens, d_model, n_heads, *, m=None, shared_qk=True,
                       path="fast", width=None) -> int:  # fmt: skip
        """z, v and o projections (2 B N D^2 each); scores and weighted values."""
        B, N, D, H = batch, n_tokens, d_model, n_heads
        return 2 * B * N * D * D * 3 + 2 * (2 * B * H * N * N * (D // H))

    def reference_logits(self, x: torch.Tensor) -> torch.Tensor:
        z = self.split(self.w_z(x))
        return z @ z.transpose(-1, -2) / math.sqrt(self.d_head)

    def fast(self, x: torch.Tensor) -> torch.Tensor:
        z, v = self.split(self.w_z(x)), self.split(self.w_v(x))
        y = F.scaled_dot_product_attention(z, z, v, is_causal=self.causal)
        self.check(z, z, 1 / math.sqrt(self.d_head), y)
        return self.w_o(self.merge(y))


@pytest.fixture
def registry(monkeypatch):
    """The attention and names registries, restored after the test: what it registers
    stays inside it."""
    from structattn_lite.data import sizes, tasks

    for table in ("ENTRIES", "DISPLAY_NAMES", "_STYLES", "_MODELS"):
        value = getattr(names, table)
        monkeypatch.setattr(names, table, value.copy())
    assert attention_base.KINDS is KINDS  # the one dict every module reads
    saved = [(table, dict(table)) for table in (KINDS, tasks.TASKS, sizes.PAPER_N)]
    yield
    for table, before in saved:
        table.clear()
        table.update(before)


def test_an_unregistered_kind_is_a_one_line_error(registry):
    from structattn_lite.studies.attention.experiment import Config

    for attempt in (lambda: build_attention(KIND, 16, 2), lambda: Config(kind=KIND),
                    lambda: analytic_attention_flops(KIND, 1, 8, 16, 2), lambda: names.style(KIND)):  # fmt: skip
        with pytest.raises(ValueError) as err:
            attempt()
        assert KIND in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_variant_without_its_flop_count_or_its_name_is_refused(registry):
    class Uncounted(SharedDot):
        kind = "toy_uncounted"
        analytic_flops = Attention.analytic_flops

    with pytest.raises(TypeError, match="analytic_flops"):
        register(Uncounted)

    class Unnamed(SharedDot):
        kind, display_name, color = "toy_unnamed", None, None

    with pytest.raises(ValueError, match="toy_unnamed"):
        register(Unnamed)
    assert "toy_uncounted" not in KINDS and "toy_unnamed" not in KINDS

    class Taken(SharedDot):
        kind = "dot"

    with pytest.raises(ValueError, match="already registered"):
        register(Taken)


def test_a_registered_variant_runs_through_a_grid_the_flop_audit_the_tables_and_a_figure(
    registry, monkeypatch, tmp_path
):
    from structattn_lite.records import RunStore
    from structattn_lite.report import in_words
    from structattn_lite.runs import run_grid
    from structattn_lite.studies.attention import grids
    from structattn_lite.studies.attention.figures import plot_learning_curves
    from structattn_lite.studies.attention.tables import measurement_table, summarize

    register(SharedDot)
    smoke = grids.GRIDS["smoke"]
    monkeypatch.setitem(grids.GRIDS, "toy", {
        **smoke, "main": ((KIND, None, True), ("dot", None, True)), "fractions": (),
        "digits": (), "bf16": (),
    })  # fmt: skip
    monkeypatch.delenv("STRUCTATTN_DATA", raising=False)  # the bundled fallback text
    records = run_grid("attention", "toy", progress=False, store=RunStore(tmp_path / "runs"))
    finals = [r for r in records if not r.extra.get("tuning") and r.config["kind"] == KIND]
    assert finals and all(r.status == "ok" for r in records)

    # the FLOP audit: measured on the module equals the class's own count, per layer
    model = smoke["model"]
    x = finals[0].extra
    n_tokens = model["block_size"]
    one = analytic_attention_flops(KIND, 1, n_tokens, model["d_model"], model["n_heads"])
    dot = analytic_attention_flops("dot", 1, n_tokens, model["d_model"], model["n_heads"])
    assert x["flops_fast"] == x["flops_analytic"] == model["n_layers"] * one
    assert one < dot  # one projection fewer: its own count, not dot product's

    # the tables (as a reader sees them) and a figure name it by its display name
    table = in_words(measurement_table(summarize(records)))
    assert NAME in set(table["variant"]) and KIND not in " ".join(table["variant"])
    fig = plot_learning_curves(records)
    titles = [ax.get_title() for ax in fig.axes]
    assert any(NAME.split(",")[0] in t for t in titles)
    assert not any(KIND in t for t in titles)


# --- a task ------------------------------------------------------------------------------

TASK = "toy_majority"
TASK_NAME = "toy: more ones than zeros"


def majority_task():
    from structattn_lite.data.tasks import Task

    class Majority(Task):
        """1 after a prefix holding more ones than zeros."""

        name = TASK

        def prefix_labels(self, x):
            return ((2 * x - 1).cumsum(1) > 0).long()

    return Majority


def test_an_unregistered_task_is_a_one_line_error(registry):
    from structattn_lite.data.tasks import make_task
    from structattn_lite.training.state_tracking import CSPRun

    for attempt in (lambda: make_task(TASK), lambda: CSPRun(task=TASK), lambda: names.chance(TASK)):
        with pytest.raises(ValueError) as err:
            attempt()
        assert TASK in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_registered_task_runs_through_a_grid_the_gap_report_and_a_figure(
    registry, monkeypatch, tmp_path
):
    from structattn_lite.data.tasks import make_task, register_task
    from structattn_lite.records import RunStore
    from structattn_lite.report import in_words
    from structattn_lite.runs import sweep
    from structattn_lite.studies.grokking import experiment as grokking
    from structattn_lite.studies.grokking.report import grokking_figure, summarize

    Majority = majority_task()
    with pytest.raises(ValueError, match=TASK):  # no name here or in names.py
        register_task(TASK, Majority)
    register_task(TASK, Majority, name=TASK_NAME, chance=0.5, paper_n=300)
    with pytest.raises(ValueError, match="option"):
        make_task(TASK, k=3)  # its row allows no options
    monkeypatch.setitem(grokking.GRIDS, "toy", {
        **grokking.GRIDS["smoke"], "tasks": (TASK,), "presets": ("paper",), "epochs": 3,
        "n": None,  # the paper's n: the row's
    })  # fmt: skip
    configs = grokking.grid("toy")
    assert [c.task for c in configs] == [TASK] and configs[0].n == 300
    records = sweep("grokking", configs, progress=False, store=RunStore(tmp_path / "runs"))
    assert [r.status for r in records] == ["ok"] and len(records[0].history) == 3

    table = in_words(summarize(records))
    assert TASK_NAME in table.to_string() and TASK not in table.to_string()
    fig = grokking_figure(records, TASK)
    text = " ".join([fig._suptitle.get_text() if fig._suptitle else ""]
                    + [ax.get_title() for ax in fig.axes])  # fmt: skip
    assert TASK_NAME in text and TASK not in text
