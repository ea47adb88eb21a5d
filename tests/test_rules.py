"""The rules table: one rule per ledger row, written before the runs that decide it.

A confirmatory row's rule (test, scale, claimed side, delta) may not change after it was
first committed: changing it makes the row exploratory until fresh seeds confirm it. The
fresh seeds of a row are committed after its rule, as git's history shows."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from structattn_lite import claims
from structattn_lite.claims import rules

ROOT = Path(__file__).resolve().parents[1]
RULES_PATH = "structattn_lite/claims/rules.csv"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def _history() -> list[str]:
    """Commits that touched the rules table, oldest first (skip without git history)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here to check the rules' order against")
    commits = _git("log", "--format=%H", "--reverse", "--", RULES_PATH).split()
    if not commits:
        pytest.skip("the rules table has no history in this clone (a shallow clone?)")
    return commits


def _at(commit: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(_git("show", f"{commit}:{RULES_PATH}")),
                       keep_default_na=False, na_values={"delta": [""]})  # fmt: skip


def test_every_ledger_row_has_one_rule_and_every_rule_a_row():
    table = rules.table()
    assert set(table["id"]) == set(claims.committed()["id"])
    committed = claims.committed().set_index("id")
    for ident in table["id"]:
        rule = rules.rule(ident)
        assert committed.loc[ident, "rule"] == rule.words()
        # a row waiting for fresh seeds is exploratory until they are in
        if (
            rule.fresh is not None
            and "exploratory until the fresh seeds" in committed.loc[ident, "reason"]
        ):
            assert committed.loc[ident, "evidence"] == rules.EXPLORATORY
    with pytest.raises(ValueError, match="ledger row 'nope/x' has no rule in rules.csv"):
        rules.rule("nope/x")


@pytest.mark.parametrize(
    "column, value, message",
    [("test", "vibes", "'vibes' is not one of"),
     ("evidence", "sure", "'sure' is not confirmatory or exploratory"),
     ("delta", "", "needs a delta > 0"),
     ("delta", "-0.1", "needs a delta > 0"),
     ("id", "table3/focal/mod3", "appears twice")],
)  # fmt: skip
def test_a_bad_rules_table_is_refused_naming_row_and_column(
    tmp_path, monkeypatch, column, value, message
):
    frame = pd.read_csv(rules.RULES_CSV, keep_default_na=False)
    frame.loc[0, column] = value
    bad = tmp_path / "rules.csv"
    frame.to_csv(bad, index=False)
    monkeypatch.setattr(rules, "RULES_CSV", bad)
    rules.table.cache_clear()
    try:
        with pytest.raises(
            ValueError, match=rf"rules.csv: row \d+, column '{column}': .*{message}"
        ):
            rules.table()
    finally:
        rules.table.cache_clear()


def _registered() -> pd.DataFrame:
    """Each row's rule as first committed (the table at the first commit holding its id)."""
    first = {}
    for commit in _history():
        for _, r in _at(commit).iterrows():
            first.setdefault(r["id"], r)
    return pd.DataFrame(first.values())


def test_a_confirmatory_rule_is_the_one_first_registered():
    assert rules.changed_after_registration(rules.table(), _registered()) == []


def test_changing_a_confirmatory_rule_after_its_data_is_caught():
    registered = _registered()
    now = rules.table().copy()
    # widen the margin of a confirmatory row that is undecided today
    row = now.index[now["id"] == "authors/dyck1/L64"][0]
    assert now.loc[row, "evidence"] == rules.CONFIRMATORY
    now.loc[row, "delta"] = 0.05
    assert rules.changed_after_registration(now, registered) == [
        "authors/dyck1/L64: confirmatory, but its delta changed from 0.02 to 0.05"
    ]
    now.loc[row, ["evidence", "note"]] = [rules.EXPLORATORY, "delta widened after reading"]
    assert rules.changed_after_registration(now, registered) == []


def test_fresh_seeds_were_committed_after_the_rule_that_reads_them():
    """Every commit that adds a fresh grid's file descends from the first commit whose
    rules table names that grid for the row (not merely from the table's first commit)."""
    history = _history()
    from structattn_lite.studies import get_study

    for ident in rules.table()["id"]:
        fresh = rules.rule(ident).fresh
        if fresh is None:
            continue
        study, grid, _ = fresh
        named = f"({study} {grid})"
        registered = next(
            (c for c in history
             if (at := _at(c)).loc[at["id"] == ident, "seeds"].str.endswith(named).any()),
            None,
        )  # fmt: skip
        assert registered, f"{ident}'s rule names {grid} but no commit holds it: commit it first"
        files = get_study(study).COMMITTED_CSV
        names = files[grid] if isinstance(files[grid], tuple) else (files[grid],)
        for name in names:
            path = f"data/results/{name}"
            added = _git("log", "--format=%H", "--diff-filter=A", "--", path).split()
            for commit in added:  # the row's rule is an ancestor of every commit adding its runs
                ok = subprocess.run(["git", "merge-base", "--is-ancestor", registered, commit],
                                    cwd=ROOT).returncode == 0  # fmt: skip
                assert ok, (
                    f"{path} was added in {commit[:8]}, not after {ident}'s rule named "
                    f"{grid} ({registered[:8]})"
                )


@pytest.mark.parametrize(
    "ident, test",
    [("attention/low_parameters/dot", "noninferiority"),  # an interaction, as it once read
     ("gap/paper/mod3", "majority"),
     ("authors/mod3/L32", "superiority")],  # read against a published number
)  # fmt: skip
def test_a_rule_that_names_another_test_than_its_row_computes_is_refused(
    tmp_path, monkeypatch, ident, test
):
    """The ledger prints each row's rule beside its verdict, so the rule must name the test
    that computed it: a table that says otherwise stops the ledger, naming the row."""
    frame = pd.read_csv(rules.RULES_CSV, keep_default_na=False)
    frame.loc[frame["id"] == ident, "test"] = test
    bad = tmp_path / "rules.csv"
    frame.to_csv(bad, index=False)
    monkeypatch.setattr(rules, "RULES_CSV", bad)
    rules.table.cache_clear()
    try:
        with pytest.raises(ValueError, match=rf"ledger row '{ident}' .*{test}"):
            claims.ledger()
    finally:
        rules.table.cache_clear()
