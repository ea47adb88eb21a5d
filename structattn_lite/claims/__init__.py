"""The claims ledger: every published claim the study tests, one row each, decided from
the committed records in ``data/results/`` by the rules of ``stats``.

``ledger()`` builds the table; ``write()`` saves it as ``data/results/claims.csv`` and
``markdown()`` renders it for the README and the notebooks. Nothing here reads a run
store or trains: the table is a function of the committed files alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from structattn_lite import files, stats
from structattn_lite.claims import attention, csp, length, theory
from structattn_lite.claims.csp import gap_verdict
from structattn_lite.claims.rows import COLUMNS
from structattn_lite.config import results_dir
from structattn_lite.studies.grokking.report import seed_gaps

CLAIMS_CSV = "claims.csv"
# --- the table --------------------------------------------------------------------------

SECTIONS: list[Callable[[], list[dict]]] = [
    csp.table3,
    csp.table4,
    csp.ablation_claims,
    csp.grokking,
    csp.curves,
    length.authors_length,
    length.wider_field,
    attention.attention,
    theory.theory,
]


def ledger(values: bool = False) -> pd.DataFrame:
    """Every claim's row, computed from the committed records (four significant digits,
    as written); with
    ``values``, a last column holds each row's per-seed numbers."""
    rows = [row for section in SECTIONS for row in section()]
    table = pd.DataFrame(rows, columns=[*COLUMNS, "values"] if values else COLUMNS)
    for column in ("published", "ours", "low", "high"):
        table[column] = [float(f"{x:.4g}") for x in table[column].astype(float)]
    table["seeds"] = table["seeds"].astype(int)
    return table


def path() -> Path:
    return results_dir() / CLAIMS_CSV


def write() -> Path:
    return files.write_csv(ledger(), path(), index=False)  # whole or not at all


def committed() -> pd.DataFrame:
    return pd.read_csv(path())


def by_source(table: pd.DataFrame, prefixes: tuple[str, ...]) -> pd.DataFrame:
    """The rows whose id starts with one of ``prefixes`` ("table4", "gap", ...)."""
    return table[table["id"].str.split("/").str[0].isin(prefixes)]


def _cell(x: float, digits: int = 3, spec: str | None = None) -> str:
    return "" if pd.isna(x) else f"{x:{spec or f'.{digits}f'}}"


def _spec(r: pd.Series) -> str:
    """Three decimals, or two significant digits for a row whose numbers are all below
    0.01 (gradient-norm variances, shares of rows), which three decimals print as 0."""
    size = pd.Series([r["ours"], r["low"], r["high"]]).abs().max()
    return ".2e" if 0 < size < 0.01 else ".3f"


def markdown(
    table: pd.DataFrame | None = None, prefixes: tuple[str, ...] = (), ids: bool = False
) -> str:
    """The ledger as a Markdown table: claim, published, ours [95% interval] (seeds),
    verdict, evidence (confirmatory or exploratory) and the reason (the rule and protocol columns stay in the CSV); only the
    rows whose id starts with one of ``prefixes`` ("table4", "gap", ...), if given; with
    ``ids``, each row's id first (as the README's "In short" cites it)."""
    table = committed() if table is None else table  # the ledger as committed: read
    if prefixes:
        table = by_source(table, prefixes)
    lines = ["| claim | source | published | ours [95% interval] (seeds) | verdict | evidence | reason |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    if ids:
        lines = ["| id " + lines[0], "| --- " + lines[1]]
    for _, r in table.iterrows():
        spec = _spec(r)
        ours = _cell(r["ours"], spec=spec) or "–"
        if not pd.isna(r["low"]) and r["low"] != r["high"]:
            ours += f" [{_cell(r['low'], spec=spec)}, {_cell(r['high'], spec=spec)}]"
        lines.append(
            (f"| `{r['id']}` " if ids else "")
            + f"| {r['claim']} | {r['source']} | {_cell(r['published'], 2)} | {ours} "
            f"({r['seeds']}) | **{r['verdict']}** | {r['evidence']} | {r['reason']} |"
        )
    return "\n".join(lines)


def counts(table: pd.DataFrame | None = None) -> dict[str, int]:
    table = ledger() if table is None else table
    return {v: int((table["verdict"] == v).sum()) for v in stats.VERDICTS}
