"""The README answers on its first screen, each "In short" line states the verdict of the
ledger rows it cites, and LEDGER.md is claims.csv, row for row."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from structattn_lite import claims, findings, stats

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FIRST_SCREEN = "\n".join(README.splitlines()[:40])


def test_readme_fits_in_200_lines_and_answers_in_words_on_its_first_screen():
    assert len(README.splitlines()) <= 200
    assert "make study" in FIRST_SCREEN and "make test" in FIRST_SCREEN
    first_line = findings.in_short(claims.committed()).splitlines()[1]
    assert first_line in FIRST_SCREEN, "the first finding in words is not on the first screen"
    table = findings.verdict_counts(claims.committed()).to_markdown(index=False)
    image = "![findings_ledger](figures/findings_ledger.png)"
    assert README.index(first_line) < README.index(table) < README.index(image)
    assert f"]({findings.LEDGER_MD})" in README


def test_each_in_short_line_states_the_verdict_and_numbers_of_the_rows_it_cites():
    table = claims.committed()
    text = findings.in_short(table)
    for _, words, ids in findings.IN_SHORT:
        verdict = findings.line_verdict(table, ids)
        rows = findings.cited_rows(table, ids)
        assert set(rows["verdict"]) == {verdict}
        assert f"*{verdict}*" in text and findings.line_text(table, words) in text
    # a number in a line is the row's own: change the row, the line changes
    row = "gap/authors_3bb9f71/parity"
    changed = table.assign(ours=table["ours"].where(table["id"] != row, 99.0))
    assert "99.0 epochs" in findings.in_short(changed) and "99.0 epochs" not in text


def test_the_in_short_check_catches_a_line_its_rows_contradict():
    table = claims.committed()
    # the false sentence the README once had: LayerNorm solves all three tasks
    rows = findings.cited_rows(table, ["table4/with/layernorm/*"])
    assert set(rows["id"]) == {"table4/with/layernorm/dyck1"}  # parity, mod-3: no rows
    with pytest.raises(ValueError, match=r"pattern 'table9/\*' matches no id"):
        findings.cited_rows(table, ["table9/*"])
    # a line whose rows disagree states no verdict
    with pytest.raises(ValueError, match="disagree"):
        findings.line_verdict(table, ["attention/smoother/sep/layer1", "attention/smoother/sep"])
    flipped = table.assign(verdict=table["verdict"].where(
        table["id"] != "table3/focal/mod3", stats.UNDECIDED))  # fmt: skip
    with pytest.raises(ValueError, match="disagree"):
        findings.in_short(flipped)


def test_in_short_is_rendered_into_the_readme_with_its_ids():
    assert findings.in_short(claims.committed()) in README, "run `structattn findings --write`"


def test_the_counts_take_a_claim_on_the_same_runs_once_and_split_the_evidence():
    table = claims.committed()
    counts = findings.verdict_counts(table).set_index("claims from")
    repeated = findings.cited_rows(table, list(findings.SAME_RUNS))
    assert len(repeated) == 3 and counts.loc["all sources", "claims"] == len(table) - 3
    total = counts.loc["all sources"]
    assert total["confirmatory"] + total["exploratory"] == total["claims"]
    assert total[list(stats.VERDICTS)].sum() == total["claims"]
    # a source the groups do not list is counted, not hidden
    odd = pd.concat([table, table.iloc[[0]].assign(id="newpaper/x", source="a new paper")],
                    ignore_index=True)  # fmt: skip
    assert findings.verdict_counts(odd).set_index("claims from").loc["a new paper", "claims"] == 1


def ledger_rows(text: str) -> pd.DataFrame:
    """The rows of LEDGER.md's table: id, claim, verdict."""
    rows = re.findall(r"^\| `([^`]+)` \| (.*?) \| .*? \| \*\*([a-z ]+)\*\* \| .*\|$", text, re.M)
    return pd.DataFrame(rows, columns=["id", "claim", "verdict"])


def test_the_ledger_file_is_claims_csv_row_for_row():
    text = (ROOT / findings.LEDGER_MD).read_text()
    assert text == findings.render_ledger(), "LEDGER.md is stale: run `structattn findings --write`"
    committed = claims.committed()[["id", "claim", "verdict"]]
    pd.testing.assert_frame_equal(ledger_rows(text), committed.reset_index(drop=True))
    table_lines = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(table_lines) == len(committed)  # nothing else in the table


def test_the_ledger_parser_sees_a_missing_or_changed_row():
    text = findings.render_ledger()
    committed = claims.committed()[["id", "claim", "verdict"]]
    dropped = "\n".join(line for line in text.splitlines() if "`table3/ce/mod3`" not in line)
    assert len(ledger_rows(dropped)) == len(committed) - 1
    changed = ledger_rows(text.replace("**not reproduced**", "**reproduced**", 1))
    assert not changed.equals(committed.reset_index(drop=True))
