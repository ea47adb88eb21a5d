"""The rules table (``rules.csv`` beside this file): for every ledger row, the test that
decides it, the scale it is read on, the claimed side, the smallest effect of interest
delta with its reason, the seeds that decide it, and whether that reading is confirmatory
(the rule was committed before the runs were read) or exploratory (the rule came after).

The table is written before the runs it decides: a row marked confirmatory whose rule
changes afterwards fails ``tests/test_rules.py``, and a row whose rule came after its
data is confirmed only on fresh seeds (``seeds`` says "10-19 fresh (<study> <grid>)").
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path

import pandas as pd

RULES_CSV = Path(__file__).with_name("rules.csv")
COLUMNS = ["id", "test", "measure", "claimed", "delta", "delta_reason", "evidence", "seeds", "note"]
# test -> whether it needs a smallest effect of interest (delta > 0)
TESTS = {
    "equivalence": True, "noninferiority": True, "superiority": True, "log_ratio": True,
    "paired_noninferiority": True, "interaction": True, "majority": False, "gap": False,
    "count": False,
}  # fmt: skip
CONFIRMATORY, EXPLORATORY = "confirmatory", "exploratory"
_FRESH = re.compile(r"^(\d+)-(\d+) fresh \((\w+) (\w+)\)$")


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    test: str
    measure: str
    claimed: str
    delta: float
    delta_reason: str
    evidence: str
    seeds: str
    note: str

    @property
    def fresh(self) -> tuple[str, str, tuple[int, ...]] | None:
        """(study, grid, seeds) of the fresh seeds that decide this row, or None."""
        found = _FRESH.match(self.seeds)
        if not found:
            return None
        first, last, study, grid = found.groups()
        return study, grid, tuple(range(int(first), int(last) + 1))

    def words(self) -> str:
        """The rule as the ledger's ``rule`` column says it."""
        delta = "" if math.isnan(self.delta) else f", delta {self.delta:g}"
        return f"{self.test}: {self.measure}; claimed {self.claimed}{delta}"

    def evidence_now(self, fresh_read: bool) -> str:
        """Confirmatory only when the seeds the rule names decided the row: a row waiting
        for its fresh seeds is read, for now, on seeds its rule came after."""
        if self.fresh is not None and not fresh_read:
            return EXPLORATORY
        return self.evidence


def _refuse(row: int, column: str, why: str) -> None:
    raise ValueError(f"{RULES_CSV.name}: row {row + 2}, column {column!r}: {why}")


@functools.cache
def table() -> pd.DataFrame:
    """The rules table, checked: its columns, one row per id, a known test and evidence,
    and a delta > 0 wherever the test needs one."""
    frame = pd.read_csv(RULES_CSV, keep_default_na=False, na_values={"delta": [""]})
    if list(frame.columns) != COLUMNS:
        raise ValueError(f"{RULES_CSV.name}: columns {list(frame.columns)}, expected {COLUMNS}")
    for i, r in frame.iterrows():
        if r["test"] not in TESTS:
            _refuse(i, "test", f"{r['test']!r} is not one of {sorted(TESTS)}")
        if r["evidence"] not in (CONFIRMATORY, EXPLORATORY):
            _refuse(i, "evidence", f"{r['evidence']!r} is not {CONFIRMATORY} or {EXPLORATORY}")
        delta = float(r["delta"])
        if TESTS[r["test"]] and not (math.isfinite(delta) and delta > 0):
            _refuse(i, "delta", f"a {r['test']} test needs a delta > 0, got {r['delta']!r}")
        if r["evidence"] == EXPLORATORY and not r["note"]:
            _refuse(i, "note", "an exploratory row says why")
    duplicated = frame["id"][frame["id"].duplicated()]
    if len(duplicated):
        _refuse(int(duplicated.index[0]), "id", f"{duplicated.iloc[0]!r} appears twice")
    return frame


def rule(ident: str) -> Rule:
    """The rule of ledger row ``ident``; a row with no rule is refused in one line."""
    frame = table()
    found = frame[frame["id"] == ident]
    if found.empty:
        raise ValueError(
            f"ledger row {ident!r} has no rule in {RULES_CSV.name}; write its rule first"
        )
    r = found.iloc[0]
    return Rule(**{c: float(r[c]) if c == "delta" else str(r[c]) for c in COLUMNS})


RULE_FIELDS = ["test", "measure", "claimed", "delta"]  # what decides a verdict


def changed_after_registration(now: pd.DataFrame, registered: pd.DataFrame) -> list[str]:
    """The confirmatory rows of ``now`` whose rule (``RULE_FIELDS``) differs from the one
    first registered for them (``registered``: the table as first committed), or that
    were not registered at all: each such row must say ``exploratory`` until fresh seeds,
    read after the new rule was committed, confirm it."""
    first = registered.set_index("id")
    problems = []
    for _, r in now[now["evidence"] == CONFIRMATORY].iterrows():
        if r["id"] not in first.index:
            problems.append(f"{r['id']}: confirmatory, but its rule was not registered")
            continue
        was = first.loc[r["id"]]
        for field in RULE_FIELDS:
            a, b = r[field], was[field]
            same = (pd.isna(a) and pd.isna(b)) or a == b
            if not same:
                problems.append(f"{r['id']}: confirmatory, but its {field} changed from {b} to {a}")
    return problems
