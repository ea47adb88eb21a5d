"""The attention study: determinism, learning, records, grids, tables, the CLI."""

from __future__ import annotations

import math

import pytest
import torch

from structattn_lite.data import FALLBACK_LABEL
from structattn_lite.models.lm import CharLM, LMConfig
from structattn_lite.runs import RunStore
from structattn_lite.studies.attention import experiment as st
from structattn_lite.studies.attention.report import (
    fraction_table,
    low_data_verdict,
    measurement_table,
    summarize,
)

TINY = dict(dataset="fallback", d_model=32, n_heads=2, n_layers=1, block_size=16, batch_size=4,
            steps_per_eval=3, evals=2, eval_windows=8, final_eval_windows=8, check_windows=2)  # fmt: skip


@pytest.mark.parametrize("kind", ["dot", "dense", "matroidal"])
def test_tiny_lm_learns_a_periodic_sequence(kind):
    torch.manual_seed(0)
    period = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    text = period.repeat(40)
    cfg = LMConfig(vocab_size=10, block_size=16, d_model=32, n_heads=2, n_layers=1, attention=kind)
    model = CharLM(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    first = None
    for _ in range(120):
        x, y = st.windows(text, torch.randint(0, len(text) - 17, (8,), generator=gen), 16)
        loss = model.loss(x, y)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 2.0  # about ln 10 at the start
    assert loss.item() < 0.5, f"{kind} did not learn a period-8 sequence: loss {loss.item():.3f}"


def test_identical_configs_give_identical_histories_and_seeds_differ():
    cfg = st.AttentionRun(kind="matroidal", m=16, **TINY)
    a, b = st.run_attention(cfg, progress=False), st.run_attention(cfg, progress=False)
    cols = ["train_loss", "val_bpc", "fast_ref_gap", "neg_sq_dist"]
    assert a.history[cols].equals(b.history[cols])
    assert a.extra["step_grad_norms"] == b.extra["step_grad_norms"]
    assert a.extra["weights"] == b.extra["weights"] and a.extra["maps"] == b.extra["maps"]
    c = st.run_attention(st.replace(cfg, seed=1), progress=False)
    assert c.extra["step_grad_norms"] != a.extra["step_grad_norms"]


def test_a_record_carries_every_measurement():
    rec = st.run_attention(st.AttentionRun(kind="matroidal", m=32, **TINY), progress=False)
    x = rec.extra
    assert rec.status == "ok" and x["variant"] == "matroidal m=2d"
    assert x["data"]["source"] == FALLBACK_LABEL
    assert len(x["step_grad_norms"]) == 6 and x["grad_norm_var"] >= 0
    assert x["params_metric"] == 2 * 32 and x["params_total"] > x["params_attention"] > 0
    assert x["flops_fast"] == x["flops_analytic"] > 0 and x["flops_pairwise"] > 0
    assert 0 < x["final"]["val_bpc"] < 10 and x["seconds_per_step"] > 0
    assert x["failures_final"]["fast_ref_gap"] < 1e-4
    assert len(x["weights"]) == 1 and len(x["weights"][0]) == 2 and len(x["weights"][0][0]) == 32
    maps = torch.tensor(
        x["maps"][0]
    )  # layer 0: [heads, 16, 16], rows sum to 1 (3 decimals), causal
    assert maps.shape == (2, 16, 16) and torch.allclose(maps.sum(-1), torch.ones(2, 16), atol=1e-2)
    assert maps.triu(1).abs().max() == 0
    assert [p["fraction"] for p in x["pruning"]] == [0.0, 0.25, 0.5, 0.75]
    kept = [p["kept"] for p in x["pruning"]]
    assert kept[0] == 1.0 and kept[1:] == pytest.approx([0.75, 0.5, 0.25], abs=0.02)
    assert {"val_bpc", "train_bpc", "step", "underflow_rows"} <= set(rec.history.columns)


def test_data_fraction_limits_the_training_text():
    rec = st.run_attention(st.AttentionRun(kind="dot", data_fraction=0.001, **TINY), progress=False)
    assert 18 <= rec.extra["data"]["train_symbols_used"] < 1000
    with pytest.raises(ValueError, match=r"data_fraction must be in \(0, 1\]"):
        st.run_attention(st.AttentionRun(data_fraction=1.5, **TINY))
    with pytest.raises(ValueError, match=r"data_fraction must be > 0"):
        st.run_attention(st.AttentionRun(data_fraction=0.0, **TINY))
    with pytest.raises(ValueError, match=r"dataset='imagenet' is not allowed"):
        st.run_attention(st.AttentionRun(**{**TINY, "dataset": "imagenet"}))


def test_runstore_reuses_a_finished_run(tmp_path):
    store = RunStore(tmp_path)
    cfg = st.AttentionRun(kind="dense", **TINY)
    calls = []

    def run(c):
        calls.append(c)
        return st.run_attention(c, progress=False)

    first = store.get_or_run(st.EXPERIMENT, cfg, run)
    second = store.get_or_run(st.EXPERIMENT, cfg, run)
    assert len(calls) == 1 and second.extra["step_grad_norms"] == first.extra["step_grad_norms"]
    assert summarize([second])["val_bpc"].iloc[0] == pytest.approx(first.extra["final"]["val_bpc"])


def test_profile_grids():
    main = st.main_grid("quick", "ptb")
    labels = {st.variant_label(c) for c in main}
    assert {"dot", "dense", "matroidal m=1d", "matroidal m=2d", "matroidal m=4d"} <= labels
    assert {"dense (sep q/k)", "matroidal m=2d (sep q/k)"} <= labels
    assert {c.m for c in main if c.kind == "matroidal"} == {16, 32, 64}
    assert len({c.seed for c in main}) >= 2 and all(c.data_fraction == 1.0 for c in main)
    fracs = st.fraction_grid("paper", "ptb")
    assert {c.data_fraction for c in fracs} == {0.01, 0.1}
    assert st.cifar_grid("quick") == []
    with pytest.raises(ValueError, match=r"profile='fast' is not allowed"):
        st.main_grid("fast", "ptb")


def test_missing_ptb_falls_back_loudly(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTATTN_DATA", str(tmp_path))
    with pytest.warns(UserWarning, match="Penn Treebank not found; using the FALLBACK"):
        assert st.resolve_dataset() == "fallback"


def test_tables_and_verdict_from_records():
    recs = [
        st.run_attention(st.AttentionRun(kind=k, seed=s, data_fraction=f, **TINY), progress=False)
        for k in ("dense", "matroidal")
        for f in (0.01, 1.0)
        for s in (0, 1)
    ]
    summary = summarize(recs)
    assert len(summary) == 8 and (summary["status"] == "ok").all()
    table = measurement_table(summary)
    assert list(table["variant"]) == ["dense", "matroidal m=2d"]
    assert table["val_bpc"].str.contains(r"± .* \(n=2\)").all()
    assert fraction_table(summary).shape == (2, 2)
    verdict = low_data_verdict(summary)
    assert "matroidal m=2d vs dense" in verdict and "-> " in verdict
    assert verdict.startswith("Low-data hypothesis, judged against the dense metric")
    assert (
        "fraction 0.01" in verdict
        and "vs dot" in verdict
        and "NOT TESTABLE" not in verdict.splitlines()[0]
    )
    one_seed = summary[summary["seed"] == 0]
    assert "needs at least 2 seeds" in low_data_verdict(one_seed)
    assert math.isfinite(summary["grad_norm_var"].iloc[0])


def test_cli_runs_the_smoke_profile(capsys):
    from structattn_lite.cli import main

    assert main(["run", "attention", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "matroidal m=4d" in out and "val_bpc" in out
