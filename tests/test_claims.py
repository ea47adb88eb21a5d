"""The claims ledger's gap rule on histories made by hand."""

import math

import pandas as pd
import pytest

from structattn_lite import claims, stats


def history(accuracy, spike_at=None):
    norms = [1.0] * len(accuracy)
    if spike_at is not None:
        norms[spike_at - 1] = 50.0
    return pd.DataFrame({"epoch": range(1, len(accuracy) + 1), "test_seq_acc": accuracy,
                         "grad_norm_max": norms})  # fmt: skip


def test_seed_gaps_reads_jump_gaps_plateau_and_spike():
    h = history([0.5, 0.5, 0.52, 0.95, 0.99, 1.0], spike_at=4)
    g = claims.seed_gaps(h, "parity")
    assert (g["jump"], g["gap_99"], g["gap_100"], g["plateau"]) == (4, 1, 2, True)
    assert g["spike_offset"] == 0
    never = claims.seed_gaps(history([0.5, 0.5, 0.95, 0.99, 0.995]), "parity")
    assert never["gap_100"] is None and never["gap_99"] == 1
    no_plateau = claims.seed_gaps(history([0.93, 0.95, 1.0]), "dyck1")
    assert not no_plateau["plateau"]


def _seeds(histories, task="parity"):
    return pd.DataFrame([claims.seed_gaps(h, task) for h in histories])


def test_gap_rule_counts_censored_seeds_instead_of_dropping_them():
    # Four seeds jump at 3 and stall below 100%; one reaches 100% one epoch after.
    stall = history([0.5, 0.5, 0.95] + [0.99] * 50)
    quick = history([0.5, 0.5, 0.95, 1.0])
    *_, verdict, reason = claims.gap_verdict(_seeds([stall] * 4 + [quick]), (1.0, 0.5), "gap_100")
    assert verdict == stats.NOT_REPRODUCED and "1 of 5 seeds reached 100%" in reason


def test_gap_rule_has_nothing_to_measure_without_a_plateau():
    seeds = _seeds([history([0.95, 0.97, 1.0])] * 5, "dyck1")
    *_, verdict, reason = claims.gap_verdict(seeds, (12.7, 3.4), "gap_100")
    assert verdict == stats.UNDECIDED and reason.startswith("no grokking phase")


def test_gap_rule_reproduces_a_gap_inside_the_papers_spread():
    seeds = _seeds([history([0.5, 0.5, 0.95] + [0.97] * k + [1.0]) for k in (2, 3, 3, 4, 3)])
    *_, verdict, _ = claims.gap_verdict(seeds, (4.0, 1.5), "gap_100")
    assert verdict == stats.REPRODUCED


def test_claims_browser_follows_its_controls():
    import matplotlib

    matplotlib.use("Agg")
    from structattn_lite.claims.browser import claims_browser

    app = claims_browser()
    source, claim = app.children[0].children
    assert claim.value.startswith("table3/")
    source.value = "CSP paper, section 4.2.1"  # the ledger's source column, as written
    assert claim.value.startswith("gap/")
    assert {i.split("/")[0] for _, i in claim.options} == {
        "gap",
        "spike",
        "csp",
    }  # csp/gap_order: 4.2.1 too
    from structattn_lite.claims.browser import claim_figure, describe

    row = claims.ledger(values=True).set_index("id").loc["gap/paper/parity"]
    row["id"] = "gap/paper/parity"
    assert "**not reproduced**" in describe(row) or row["verdict"] in describe(row)
    fig = claim_figure(row)
    dots = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
    assert dots == sum(len(v) for v in row["values"].values())  # every seed, both thresholds
    assert len(fig.axes[1].lines) >= 5  # the five seeds' curves, then the levels


def _row(ident):
    row = claims.ledger(values=True).set_index("id").loc[ident].copy()
    row["id"] = ident
    return row


def test_claims_browser_says_a_diverged_row_has_no_model_instead_of_empty_axes():
    import matplotlib

    matplotlib.use("Agg")
    from structattn_lite.claims.browser import claim_figure

    row = _row("table4/with/base/parity")
    assert pd.isna(row["ours"]) and row["reason"].startswith("5 of 5 seeds diverged")
    fig = claim_figure(row)
    assert all(not ax.axison for ax in fig.axes), "empty axes for a row with no value"
    words = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert words == ["5 of 5 seeds diverged (non-finite loss): no trained model to plot"]


def test_claims_browser_names_the_grid_its_curves_come_from():
    """Table 3's focal rows showed the gap grid's curves beside a command for paper_text."""
    import matplotlib

    matplotlib.use("Agg")
    from structattn_lite.claims.browser import claim_figure, describe
    from structattn_lite.claims.csp import GAP_COMMAND

    row = _row("table3/focal/parity")
    text = describe(row)
    assert "--grid paper_text" in row["command"] and f"`.venv/bin/{GAP_COMMAND}`" in text
    assert "--grid gap" in GAP_COMMAND
    assert "grid 'gap'" in claim_figure(row).axes[1].get_title()
    gap = _row("gap/paper/parity")  # its numbers and curves come from one grid: one command
    assert describe(gap).count("--grid gap") == 1
    assert "curves (right)" not in describe(_row("table4/with/base/parity"))  # no curves


def _rate_runs(tune_steps, tune_seeds, final_steps=1000):
    tuning = [{"dataset": "ptb", "tuning": True, "max_steps": tune_steps, "variant": v,
               "lr": lr, "seed": s} for v in ("dot", "dense") for lr in (0.01, 0.02)
              for s in range(tune_seeds)]  # fmt: skip
    finals = [{"dataset": "ptb", "tuning": False, "max_steps": final_steps, "variant": v,
               "lr": 0.01, "seed": s} for v in ("dot", "dense") for s in range(5)]  # fmt: skip
    return pd.DataFrame(tuning + finals)


def test_tuning_rule_reads_the_budget_and_seeds_of_a_grids_tuning_runs():
    from structattn_lite.claims.attention import _untuned

    assert _untuned(_rate_runs(1000, 3)) is None
    assert _untuned(_rate_runs(600, 1)) == "over 600 steps of one seed, not at this budget"
    assert "fewer than 3 seeds" in _untuned(_rate_runs(1000, 2))


def test_a_run_in_both_grokking_grids_counts_once(monkeypatch):
    """gap (10 seeds) and gap_seeds (seeds 5-24) share seeds 5-9 of the authors' model:
    the ledger reads each run once, so a seed is never counted twice."""
    from structattn_lite.claims import csp
    from structattn_lite.studies.grokking import experiment as ge

    records = {name: ge.committed_records(name) for name in ("gap", "gap_seeds")}
    shared = [r for r in records["gap_seeds"] if r.seed < 10]
    if not shared:  # the committed files do not overlap yet: make them
        shared = [r for r in records["gap_seeds"] if r.config["task"] == "mod3"][:2]
    monkeypatch.setattr(
        ge,
        "committed_records",
        lambda grid="gap": records[grid] + (shared if grid == "gap" else []),
    )
    # a row on fresh seeds reads those alone once they are all in; here, as before they
    # are, every row reads the two grids
    monkeypatch.setattr(csp, "_fresh_reader", lambda: lambda ident: (None, {}))
    rows = {r["id"]: r for r in csp.grokking()}
    expected = {}
    for r in records["gap"] + records["gap_seeds"]:
        expected.setdefault((r.config["task"], r.config["preset"]), set()).add(r.key)
    for (task, preset), keys in expected.items():
        assert rows[f"gap/{preset}/{task}"]["seeds"] == len(keys), (preset, task)
    assert {p for _, p in expected} == set(csp.GAP_PRESETS)  # both models, every task
    assert len(expected) == 2 * len(csp.PAPER_GROKKING_GAP)


def test_an_undecided_rows_seed_count_comes_with_its_cost(monkeypatch):
    """'About N seeds would decide it' is priced at the committed runs' pace: the seeds
    still to run (N less those in, on every arm) times the grid's median CPU seconds per
    seed; a grid whose files keep no timing gets the seed count alone."""
    import re

    from structattn_lite.claims import rows
    from structattn_lite.claims.rules import rule

    fields = dict(ours=86.0, low=33.0, high=139.0, seeds=10, published=85.0, grid="gap")
    real = rows.seed_seconds
    monkeypatch.setattr(
        rows, "seed_seconds", lambda grid, **cell: 360.0 if grid == "gap" else math.nan
    )
    one = rows._to_decide(rule("csp/grad_profile/mod3"), fields)
    need = int(re.search(r"about (\d+) seeds", one).group(1))
    hours = float(re.search(r"about ([\d.]+) CPU-hours", one).group(1))
    assert need > 10 and hours == pytest.approx((need - 10) * 360 / 3600, abs=0.05)
    two = rows._to_decide(rule("csp/grad_profile/mod3"), fields, arms=2)
    assert float(re.search(r"about ([\d.]+) CPU-hours", two).group(1)) == pytest.approx(
        2 * hours, abs=0.1
    )
    unpriced = rows._to_decide(rule("csp/grad_profile/mod3"), {**fields, "grid": "authors"})
    assert "would decide it" in unpriced and "CPU-hours" not in unpriced
    # a row waiting for the fresh seeds its rule names is decided by those alone: its count
    # is set beside theirs, not priced as seeds added to the ones it reads now
    waiting = rows._to_decide(rule("csp/grad_profile/mod3"), fields, fresh=20)
    assert f"about {need} seeds" in waiting and "its fresh grid trains 20 seeds" in waiting
    assert "CPU-hours" not in waiting
    assert real("gap") > 0 and math.isnan(real("authors"))  # the gap runs keep their time


def test_seeds_are_priced_at_their_own_cells_pace():
    """A run that stops early costs a fraction of one that goes the distance, so a row is
    priced at the pace of the runs it reads: the paper CSP's mod-3 gap runs never stop
    before 300 epochs, the parentheses runs stop within 20, and the grid's median over
    every cell would price mod-3 seeds at a fraction of their cost."""
    from structattn_lite.claims import rows

    mod3 = rows.seed_seconds("gap", task="mod3", preset="paper")
    dyck = rows.seed_seconds("gap", task="dyck1", preset="paper")
    assert mod3 > 5 * dyck > 0
    assert mod3 > 2 * rows.seed_seconds("gap")
    assert math.isnan(rows.seed_seconds("gap", task="no such task"))


def _fresh_gap_results(tmp_path, seeds):
    """A copy of data/results holding a fresh_gap file: the gap grid's paper-text runs of
    parity and mod-3, relabelled to ``seeds`` (each committed seed s to s + 10 and s + 20)."""
    import dataclasses
    import shutil

    from structattn_lite.config import results_dir
    from structattn_lite.records import export_histories
    from structattn_lite.studies.grokking.grids import COMMITTED_CSV
    from structattn_lite.studies.grokking.results import committed_records

    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    runs = [r for r in committed_records("gap")
            if r.config["preset"] == "paper" and r.config["task"] in ("parity", "mod3")]  # fmt: skip
    fresh = [dataclasses.replace(r, key=f"{r.key}-{shift}", config={**r.config, "seed": r.seed + shift})
             for shift in (10, 20) for r in runs if r.seed + shift in seeds]  # fmt: skip
    export_histories(fresh, copy / COMMITTED_CSV["fresh_gap"])
    return copy


@pytest.mark.parametrize("complete", [True, False])
def test_gap_rows_read_their_fresh_seeds_once_all_are_in(tmp_path, monkeypatch, complete):
    """The paper text's gap, spike and curve rows name fresh seeds 10-29 (grid fresh_gap):
    with every one committed they are read on those alone, confirmatory; with one missing,
    on the gap grid's seeds 0-9, exploratory, saying what they wait for."""
    seeds = set(range(10, 30)) - (set() if complete else {29})
    monkeypatch.setenv("STRUCTATTN_RESULTS", str(_fresh_gap_results(tmp_path, seeds)))
    from structattn_lite.claims import csp

    table = pd.DataFrame(csp.grokking() + csp.curves()).set_index("id")  # the rows concerned
    for ident in ("gap/paper/parity", "spike/paper/mod3", "csp/plateau/mod3",
                  "csp/grad_profile/mod3", "csp/gap_order"):  # fmt: skip
        r = table.loc[ident]
        if complete:
            assert (r["grid"], r["evidence"]) == ("fresh_gap", "confirmatory"), ident
            assert "--grid fresh_gap" in r["command"] and "exploratory until" not in r["reason"]
        else:
            assert (r["grid"], r["evidence"]) == ("gap", "exploratory"), ident
            assert (
                "exploratory until the fresh seeds 10-29 (grokking grid fresh_gap)" in r["reason"]
            )
    if complete:  # 20 seeds, the committed 10 twice over: the counts double
        assert table.loc["csp/grad_profile/mod3", "seeds"] == 20
        assert table.loc["gap/paper/dyck1", "grid"] == "gap"  # its rule names no fresh seeds


# how an undecided row may say what would decide it: priced at the committed runs' pace
# (or saying its grid keeps no timing), or naming why no seed count would
_DECIDED_BY = ("CPU-hours", "unpriced: the committed files", "no seed count would decide",
               "no run can decide", "only a protocol whose runs", "runs are not trained yet",
               "asks it of the full model", "its fresh grid trains",
               "the claim is decided at their protocol")  # fmt: skip


def test_every_undecided_row_says_what_would_decide_it_and_its_cost():
    ledger = claims.committed()
    undecided = ledger[ledger["verdict"] == "undecided"]
    silent = [r["id"] for _, r in undecided.iterrows()
              if not any(words in r["reason"] for words in _DECIDED_BY)]  # fmt: skip
    assert not silent, f"undecided rows that do not say what would decide them: {silent}"
    # a row whose side has too few values says how many seeds would give it enough, priced
    order = ledger.set_index("id").loc["csp/gap_order", "reason"]
    assert "fewer than 3" not in order or "would give 3, about" in order
