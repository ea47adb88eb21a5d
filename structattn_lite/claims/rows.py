"""What every section of the ledger shares: its columns, the paper text's protocol, and
the two ways a row is made (the tasks' names and metrics are ``names.py``'s)."""

from __future__ import annotations

import functools
import json
import math
import re

import pandas as pd

from structattn_lite import stats
from structattn_lite.claims.rules import rule as rule_of
from structattn_lite.config import results_dir
from structattn_lite.names import display_name
from structattn_lite.studies.attention.grids import COMMITTED_CSV as ATTENTION_CSV

COLUMNS = [
    "id", "study", "claim", "source", "published", "ours", "low", "high", "seeds",
    "verdict", "evidence", "reason", "rule", "protocol", "grid", "notebook", "command",
]  # fmt: skip

PAPER_TEXT = (
    f"{display_name('paper')} (d 64, 3 layers), 5,000/5,000/10,000 strings of length 16, 80/20 "
    "i.i.d. split, focal loss, Adam 1e-3 with plateau halving, up to 300 epochs, early stop "
    "once validation held 100% for 10 epochs"
)


def read(name: str) -> pd.DataFrame | None:
    """A committed results file, or None when it is not there."""
    path = results_dir() / name
    return pd.read_csv(path) if path.exists() else None


def fresh_reader(load, grid_words: str, command: str):
    """``read_on(row id)`` -> (what the row reads, its fields). For a row whose rule names
    fresh seeds, once every one is in: ``load(grid, seeds)`` (None until then), and fields
    naming that grid and the command that trains it (``grid_words`` and ``command`` with
    ``{grid}`` filled in) with ``fresh_read``; otherwise (None, {}). Each grid loads once."""
    loaded = {}

    def read_on(ident):
        named = rule_of(ident).fresh
        if named is None:
            return None, {}
        _, grid, seeds = named
        if grid not in loaded:
            loaded[grid] = load(grid, seeds)
        if loaded[grid] is None:
            return None, {}
        words = {"grid": grid_words.format(grid=grid), "command": command.format(grid=grid)}
        return loaded[grid], {"fresh_read": True, **words}

    return read_on


def row(values=(), *, test: str, fresh_read: bool = False, cell: dict | None = None,
        **fields) -> dict:  # fmt: skip
    """One ledger row. ``values`` holds the per-seed numbers behind it, for the claims
    dashboard (a list, or a dict of lists for a two-sided comparison); not in the CSV.
    ``test``: the test that computed its verdict, which must be the one its rule in the
    rules table names (the ledger prints that rule beside the verdict). Its ``rule`` and
    ``evidence`` come from the rules table; ``fresh_read``: the row was read on the fresh
    seeds its rule names; ``cell``: the config fields of the runs it reads (e.g. task and
    preset), so that "N more seeds" is priced at their pace."""
    rule = rule_of(fields["id"])
    if rule.test != test:
        raise ValueError(
            f"ledger row {fields['id']!r} is decided by a {test} test, but its rule in "
            f"rules.csv names a {rule.test} test; correct the rule (and mark the row "
            "exploratory if its runs were read under the wrong one)"
        )
    fields = {**fields, "rule": rule.words(), "evidence": rule.evidence_now(fresh_read)}
    waiting = rule.fresh is not None and not fresh_read  # the fresh seeds that decide it
    if waiting:
        study, grid, seeds = rule.fresh
        fields["reason"] = (f"{fields.get('reason', '')}; exploratory until the fresh seeds "
                            f"{seeds[0]}-{seeds[-1]} ({study} grid {grid}) are all in")  # fmt: skip
    values = values if isinstance(values, dict) else {"ours": list(values)}
    if fields.get("verdict") == stats.UNDECIDED:
        fields["reason"] = fields.get("reason", "") + _to_decide(
            rule, fields, arms=len(values), cell=cell or {},
            fresh=len(rule.fresh[2]) if waiting else None,
        )  # fmt: skip
    return {**{column: fields.get(column, math.nan) for column in COLUMNS}, "values": values}


# The decision edges of each claimed side (delta and the published number p).
_EDGES = {
    "< 0": lambda d, p: (0.0, -d), "> 0": lambda d, p: (0.0, d),
    ">= -delta": lambda d, p: (-d,), "<= +delta": lambda d, p: (d,),
    "within published +- delta": lambda d, p: (p - d, p + d),
    ">= published - delta": lambda d, p: (p - d,),
}  # fmt: skip


# The committed runs' CPU time per seed, by the grid a row names: what "N more seeds"
# costs. A grid whose files keep no timing (the length grids) has none.
_TIMED = {
    **{f"{grid} (attention)": (files[0], "cpu_seconds") for grid, files in ATTENTION_CSV.items()},
    "paper_text": ("csp_ablations_paper_text.csv", "seconds"),
    "paper_332 (+ paper_text)": ("csp_ablations_paper_332.csv", "seconds"),
    "paper_rope (+ paper_text)": ("csp_ablations_paper_rope.csv", "seconds"),
    "gap": ("csp_grokking_gap.csv.gz", "extra"),
    "fresh_gap": ("csp_grokking_fresh_gap.csv.gz", "extra"),
    "fresh_authors": ("csp_grokking_fresh_authors.csv.gz", "extra"),
}  # fmt: skip


def _timed_runs(grid: str) -> pd.DataFrame | None:
    """One row per committed run of ``grid``: its CPU seconds (a stacked run's share of its
    stack) beside its config fields; None where the grid's files keep no timing. Read once
    per results folder (``STRUCTATTN_RESULTS`` may name another)."""
    return _timed_runs_in(str(results_dir()), grid)


@functools.cache
def _timed_runs_in(_folder: str, grid: str) -> pd.DataFrame | None:
    if grid not in _TIMED:
        return None
    name, column = _TIMED[grid]
    frame = read(name)
    if frame is None or column not in frame:
        return None
    if column != "extra":  # the final runs (a grid's file may hold its tuning runs too)
        finals = frame[~frame["tuning"].astype(bool)] if "tuning" in frame else frame
        return finals.assign(_seconds=finals[column])
    runs = frame.drop_duplicates("key")  # one row per epoch: each run's record, once
    return pd.DataFrame(
        [{**json.loads(c), "_seconds": json.loads(e).get("seconds", math.nan)}
         for c, e in zip(runs["config"], runs["extra"], strict=True)]
    )  # fmt: skip


def seed_seconds(grid: str, **cell) -> float:
    """The median CPU seconds one seed of ``grid``'s committed runs took, over the runs
    whose config matches ``cell`` (a field the grid's files lack is ignored), or NaN where
    the grid's files keep no timing. A cell matters: a run that stops early costs a
    tenth of one that goes the distance."""
    runs = _timed_runs(grid)
    if runs is None:
        return math.nan
    for key, value in cell.items():
        if key in runs:
            runs = runs[runs[key] == value]
    return float(runs["_seconds"].astype(float).median()) if len(runs) else math.nan


def priced(seeds: float, grid: str, **cell) -> str:
    """What ``seeds`` more seeds of ``grid`` cost at its committed runs' pace
    (``seed_seconds``), as a clause to append to a reason; where the grid's files keep no
    timing, it says so."""
    each = seed_seconds(grid, **cell)
    if math.isnan(each):
        return f", unpriced: the committed files of {grid} keep no timing"
    return f", about {max(seeds, 0) * each / 3600:.1f} CPU-hours more at the committed runs' pace"


def _to_decide(
    rule, fields: dict, arms: int = 1, cell: dict | None = None, fresh: int | None = None
) -> str:
    """What more seeds would do for an undecided row whose interval straddles an edge, and
    what they would cost at the committed runs' pace (``seed_seconds``), where known. A row
    waiting for ``fresh`` seeds (its rule names them) is decided by those alone: the count
    is set beside theirs, not priced as seeds added to the ones it reads now."""
    edges = _EDGES.get(rule.claimed)
    numbers = [fields.get(k, math.nan) for k in ("ours", "low", "high")]
    n = fields.get("seeds", 0)
    if edges is None or stats.UNTUNED in str(fields.get("reason", "")) or not n:
        return ""
    need = stats.seeds_to_decide(
        *numbers, int(n), edges(rule.delta, fields.get("published", math.nan))
    )
    if math.isnan(need):
        return ""
    if math.isinf(need) or need > 1000:
        return "; no seed count would decide it at this spread"
    if fresh is not None:
        return (f"; about {need:.0f} seeds (per arm, where two are compared) would decide it if "
                f"the spread holds, and its fresh grid trains {fresh} seeds")  # fmt: skip
    cost = priced((need - n) * arms, str(fields.get("grid")), **(cell or {}))
    return (f"; about {need:.0f} seeds (per arm, where two are compared) would decide it if the "
            f"spread holds{cost}")  # fmt: skip


def published_row(values: pd.Series, diverged: int, published: float, *,
                  bounds: tuple[float, float] | None, **fields) -> dict:  # fmt: skip
    """A row for "our mean matches the published number", by the row's rule: equivalence
    (within ± delta) or, for a number at the top of its range, noninferiority (at least the
    number - delta). ``bounds``: ``stats.UNIT`` for accuracy and F1 (the interval clipped to
    [0, 1]), None for a metric without bounds; every caller says which."""
    rule = rule_of(fields["id"])
    tests = {"equivalence": stats.equivalence, "noninferiority": stats.noninferiority}
    if rule.test not in tests:
        raise ValueError(f"ledger row {fields['id']!r} is read against a published number, "
                         f"so its rule names one of {sorted(tests)}, not {rule.test!r}")  # fmt: skip
    verdict, reason = tests[rule.test](values.tolist(), published, rule.delta,
                                       diverged=diverged, bounds=bounds)  # fmt: skip
    mean, low, high, n = stats.mean_interval(values.tolist(), bounds=bounds)
    return row(values.tolist(), test=rule.test, published=published, ours=mean, low=low,
               high=high, seeds=n + diverged, verdict=verdict, reason=reason, **fields)  # fmt: skip


_DIVERGED = re.compile(r"(\d+) of (\d+) seeds diverged")  # as stats.equivalence writes it


def diverged_seeds(reason: str) -> tuple[int, int] | None:
    """(k, n) when a row's reason says k of its n seeds diverged, else None."""
    found = _DIVERGED.search(str(reason))
    return (int(found.group(1)), int(found.group(2))) if found else None
