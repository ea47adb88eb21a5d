"""Every verdict a notebook table or the claims dashboard shows is the committed ledger's
(``data/results/claims.csv``), read by row id and never recomputed: with a deliberately
altered copy of the ledger under ``STRUCTATTN_RESULTS``, what they print changes with it.
(Notebook 03 section 7 printed 'undecided' from 10 seeds for the authors' model on parity
where the ledger says 'not reproduced' from 25.)"""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

from structattn_lite import stats
from structattn_lite.config import results_dir

# the rows altered, each to a verdict it does not have, a reason and a seed count
ALTERED = {
    "gap/authors_3bb9f71/parity": ("ALTERED gap reason", 77),
    "table3/focal/parity": ("ALTERED table 3 reason", 76),
    "table4/without/base/mod3": ("ALTERED table 4 reason", 75),
    "authors/parity/L32": ("ALTERED authors reason", 74),
}


@pytest.fixture
def altered(tmp_path, monkeypatch):
    """A copy of data/results whose ledger says something else for the ``ALTERED`` rows:
    {id: (verdict, reason, seeds)} as altered, and the altered table."""
    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    table = pd.read_csv(copy / "claims.csv").set_index("id")
    to = {}
    for ident, (reason, seeds) in ALTERED.items():
        verdict = next(v for v in stats.VERDICTS if v != table.at[ident, "verdict"])
        table.loc[ident, ["verdict", "reason", "seeds"]] = [verdict, reason, seeds]
        to[ident] = (verdict, reason, seeds)
    table.reset_index().to_csv(copy / "claims.csv", index=False)
    monkeypatch.setenv("STRUCTATTN_RESULTS", str(copy))
    return to, table


def test_the_grokking_table_prints_the_ledgers_verdict(altered):
    from structattn_lite.studies.grokking import experiment, report

    gaps = report.grokking_table(experiment.committed_records("gap")).set_index(["task", "preset"])
    row = gaps.loc[("parity", "authors_3bb9f71")]
    to, table = altered
    assert (row["verdict"], row["reason"]) == to["gap/authors_3bb9f71/parity"][:2]
    assert row["ledger: gap to 100% [95%]"].endswith("(77 seeds)")
    assert row["seeds"] == 10  # the records given: the table's own columns still count them
    # an unaltered row still reads as the ledger has it
    other = gaps.loc[("parity", "paper")]
    assert other["verdict"] == table.at["gap/paper/parity", "verdict"]


def test_the_ablation_tables_print_the_ledgers_verdicts(altered):
    from structattn_lite.studies.ablations import report as ct

    results = ct.load_results()
    t3, t4 = ct.table3(results), ct.table4(results[results["loss"] == "focal"])
    to, _ = altered
    assert t3.loc[("paper", "focal"), ("parity", "verdict")] == to["table3/focal/parity"][0]
    verdict = to["table4/without/base/mod3"][0]
    assert t4.loc[("paper", "without", "base"), ("mod3", "verdict")] == verdict
    shown = ct.display_table(t4)
    assert shown.loc[("paper", "without", "base"), ("mod-3 (acc)", "verdict")] == verdict


def test_the_authors_table_prints_the_ledgers_verdict(altered):
    from structattn_lite import committed_figures
    from structattn_lite.studies.length import authors

    table = authors.authors_table(committed_figures.authors_curves())
    row = table.loc[("parity", 32)]
    assert (row["verdict"], row["reason"]) == altered[0]["authors/parity/L32"][:2]
    assert row["ledger: all positions [95%]"].endswith("(74 seeds)")


def test_the_claims_dashboard_prints_the_ledgers_row_and_guide(altered):
    from structattn_lite.claims import browser

    rows = browser.rows().set_index("id")
    for ident, (verdict, reason, seeds) in altered[0].items():
        text = browser.describe(rows.loc[ident].rename(ident).to_frame().T.assign(id=ident).iloc[0])
        assert f"verdict: **{verdict}**: {reason}" in text and f"over {seeds} seed(s)" in text
    assert rows.loc["gap/authors_3bb9f71/parity", "values"]  # the dots still come from the records


def test_the_dashboard_guide_is_written_from_the_rows_it_names(tmp_path, monkeypatch):
    from structattn_lite.claims import browser

    copy = tmp_path / "results"
    shutil.copytree(results_dir(), copy)
    table = pd.read_csv(copy / "claims.csv")
    at = table["id"] == "gap/paper/parity"
    table.loc[at, ["verdict", "seeds", "reason"]] = ["reproduced", 33, "ALTERED guide reason"]
    table.to_csv(copy / "claims.csv", index=False)
    monkeypatch.setenv("STRUCTATTN_RESULTS", str(copy))
    guide = browser.what_to_show()
    assert "*reproduced* over 33 seeds: ALTERED guide reason" in guide
    assert "none reaches 100%" not in guide  # the sentence the page contradicted


def test_a_source_the_dashboard_does_not_know_is_shown():
    from structattn_lite.claims import browser

    table = browser.rows()
    extra = table.iloc[[0]].assign(id="newsource/x", source="a new paper", claim="a new claim")
    app = browser.claims_browser(pd.concat([table, extra], ignore_index=True))
    source, claim = app.children[0].children
    assert "a new paper" in source.options
    source.value = "a new paper"
    assert claim.value == "newsource/x"


def test_every_printed_command_is_complete_and_runs_as_printed():
    from structattn_lite.claims import browser
    from structattn_lite.studies.grokking.grids import GRIDS

    rows = browser.rows().set_index("id")
    for ident in ("gap/authors_3bb9f71/parity", "spike/authors_3bb9f71/mod3"):
        assert rows.at[ident, "seeds"] > 10  # more seeds than the gap grid holds...
        command = browser.runnable(rows.at[ident, "command"]) + " "
        grids = re.findall(r"--grid (\S+) ", command)  # ...so its command names the grids
        assert grids and f"--grid {rows.at[ident, 'grid']} " in command, ident
        held = sum(len(GRIDS[g]["seeds"]) for g in grids)  # that hold them all
        assert held >= rows.at[ident, "seeds"], (ident, grids)
    for task in ("parity", "mod3", "dyck1"):  # the full rotated model is paper_text's runs
        assert "--grid paper_text " in rows.at[f"table4/with/+norm/{task}", "command"]
    from structattn_lite.claims.rules import rule

    for ident, row in rows.iterrows():
        if rule(ident).seeds == "computed":  # no run: the ledger computes it each time
            assert browser.runnable(row["command"]) == ".venv/bin/structattn findings", ident
            continue
        for part in browser.runnable(row["command"]).split(" && "):
            assert part.startswith(".venv/bin/structattn run "), (ident, part)
            assert "--grid " in part, (ident, part)
