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


def test_readme_fits_in_200_lines_and_answers_on_its_first_screen():
    assert len(README.splitlines()) <= 200
    assert "make study" in FIRST_SCREEN and "make test" in FIRST_SCREEN
    table = findings.verdict_counts(claims.committed()).to_markdown(index=False)
    assert table in FIRST_SCREEN, "the verdict counts by source are not on the first screen"
    assert "![findings_ledger](figures/findings_ledger.png)" in FIRST_SCREEN
    assert f"]({findings.LEDGER_MD})" in README


def test_each_in_short_line_states_the_verdict_of_every_row_it_cites():
    table = claims.committed()
    for _, verdict, text, ids in findings.IN_SHORT:
        assert verdict in stats.VERDICTS, text
        rows = findings.cited_rows(table, ids)
        wrong = rows.loc[rows["verdict"] != verdict, ["id", "verdict"]]
        assert wrong.empty, f"{text!r} says {verdict}, but: {wrong.to_dict('records')}"


def test_the_in_short_check_catches_a_line_its_rows_contradict():
    table = claims.committed()
    # the false sentence the README once had: LayerNorm solves all three tasks
    rows = findings.cited_rows(table, ["table4/with/layernorm/*"])
    assert set(rows["id"]) == {"table4/with/layernorm/dyck1"}  # parity, mod-3: no rows
    # "(the whole model's are not)": the whole model's smoothness is undecided
    rows = findings.cited_rows(table, ["attention/smoother/sep"])
    assert set(rows["verdict"]) == {stats.UNDECIDED}
    with pytest.raises(ValueError, match=r"pattern 'table9/\*' matches no id"):
        findings.cited_rows(table, ["table9/*"])


def test_in_short_is_rendered_into_the_readme_with_its_ids():
    for _, verdict, text, ids in findings.IN_SHORT:
        line = f"*{verdict}*: {text} [{' '.join(f'`{i}`' for i in ids)}]"
        assert line in README, f"README lacks the line {line!r}: run `structattn findings --write`"


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
