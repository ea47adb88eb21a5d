"""``structattn findings`` (without ``--write``) checks the committed ``claims.csv`` against
the ledger it recomputes from data/results, and names each row where they differ."""

from __future__ import annotations

import pandas as pd
import pytest

from structattn_lite import cli


def edit(results, how: str) -> list[str]:
    """Edit the copy's claims.csv as ``how`` says; the row ids (with the column) the
    check must name."""
    path = results / "claims.csv"
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    if how == "verdict":
        row = table.index[table["verdict"] == "not reproduced"][0]
        table.loc[row, "verdict"] = "reproduced"
        named = [f"{table.at[row, 'id']} (verdict)"]
    elif how == "duplicated":
        table = pd.concat([table, table.iloc[[3]]], ignore_index=True)
        named = [f"{table.at[3, 'id']} (duplicated)"]
    else:  # two rows removed
        named = [f"{table.at[5, 'id']} (missing)", f"{table.at[9, 'id']} (missing)"]
        table = table.drop(index=[5, 9])
    table.to_csv(path, index=False)
    return named


@pytest.mark.parametrize("how", ["verdict", "duplicated", "removed"])
def test_findings_names_each_row_where_claims_csv_differs(results_copy, capsys, how):
    from structattn_lite import findings

    assert cli.main(["findings"]) == 0  # the copy as committed: the ledger, row for row
    assert capsys.readouterr().out.strip() == findings.readme_section().strip()
    named = edit(results_copy, how)
    assert cli.main(["findings"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "claims.csv" in err and "Traceback" not in err, err
    for words in named:
        assert words in err, f"{words!r} not named in: {err}"
    assert f"in {len(named)} place(s)" in err  # those rows, and no other
