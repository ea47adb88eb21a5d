"""What the attention study's grids ship in ``data/results`` and how a later session
gets it back: a run store does not outlive its machine, so a grid trained over several
sessions (``GROWN_ACROSS_SESSIONS``) keeps its committed rows when it exports, and a new
store gets its committed runs back before anything trains (``restore_committed``), so none
is trained twice. A grid being retuned (``grids.PENDING_CSV``) keeps its new runs pending
until every run it asks for is in; they then join its committed files, and the runs it no
longer asks for move to ``grids.RETIRED_CSV``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from structattn_lite import config as cfgmod
from structattn_lite.data import load_corpus
from structattn_lite.records import (
    RunRecord,
    export_histories,
    keep_committed_rows,
    load_histories,
)
from structattn_lite.studies.attention.grids import (
    COMMITTED_CSV,
    FLOORS_CSV,
    GRIDS,
    PENDING_CSV,
    RETIRED_CSV,
)
from structattn_lite.studies.attention.tables import load_committed_histories, summarize

# Grids whose committed files grow over sessions: an export replaces the runs it holds
# and keeps the others (the low-parameter arm is more than one session's cores).
GROWN_ACROSS_SESSIONS = ("lowparam", "long")
RESTORED = "restored_from"  # extra of a record rebuilt from a committed file


def restore_committed(name: str, store) -> list[RunRecord]:
    """Save into ``store`` the grid's committed runs it lacks, and its pending ones
    (``PENDING_CSV``), rebuilt from the committed histories (config, status and learning
    curve; the per-step norms and measurements stay in the committed summary), so a later
    session neither retrains them nor chooses its rates without them. ``export`` leaves
    their committed rows as they are. A grid that keeps another's rates (``rates_from``)
    gets that grid's runs too: they are its tuning runs."""
    source = GRIDS[name].get("rates_from")
    restored = restore_committed(source, store) if source else []
    if name not in GROWN_ACROSS_SESSIONS and name not in PENDING_CSV:
        return restored
    sources = [(COMMITTED_CSV[name][1], load_committed_histories(name))]
    pending = cfgmod.results_dir() / PENDING_CSV[name][1] if name in PENDING_CSV else None
    if pending is not None and pending.exists():
        sources.append((PENDING_CSV[name][1], load_histories(pending)))
    for path, records in sources:
        for r in records:
            if not store.path(r.experiment, r.key).exists():
                r.extra[RESTORED] = path
                store.save(r)
                restored.append(r)
    return restored


def _retire(paths: list[Path], keys: set[str], retired: list[Path]) -> list[Path]:
    """Move the rows of runs not in ``keys`` from the committed ``paths`` (runs, then
    histories) to the ``retired`` ones, which keep what they already hold."""
    out = []
    for path, to in zip(paths, retired, strict=True):
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
        gone = frame[~frame["key"].isin(keys)]
        if gone.empty:
            continue
        old = keep_committed_rows(to, gone, ["key"], []) if to.exists() else gone
        old.to_csv(
            to, index=False, float_format="%.6g", compression={"method": "infer", "mtime": 0}
        )
        frame[frame["key"].isin(keys)].to_csv(
            path, index=False, float_format="%.6g", compression={"method": "infer", "mtime": 0}
        )
        out.append(to)
    return out


def write(
    records: list[RunRecord], grid: str, order: list[str], pending: bool = False, wanted=()
) -> list[Path]:
    """Write the grid's finished ``records`` to its committed files (its pending ones with
    ``pending``), keeping the rows of the runs they do not hold, in the grid's ``order``
    (run keys; the others follow). ``wanted``: every run key a retuned grid asks for, all
    among ``records``: its pending runs join its committed files, and the committed runs
    not wanted move to ``RETIRED_CSV``."""
    files = PENDING_CSV if pending else COMMITTED_CSV
    runs_name, histories_name = files[cfgmod.check_choice("grid", grid, files)]
    out = cfgmod.results_dir()
    joining = None if pending else PENDING_CSV.get(grid)  # pending runs move in
    new = [r for r in records if RESTORED not in r.extra
           or (joining and r.extra[RESTORED] == joining[1])]  # fmt: skip
    if not new:  # the others' rows are committed
        return []
    summary, trained = out / runs_name, [r for r in new if RESTORED not in r.extra]
    frame = summarize(trained).assign(key=[r.key for r in trained])
    if joining and len(trained) < len(new):  # their measurements are in the pending summary
        waiting = pd.read_csv(out / joining[0])
        moved = {r.key for r in new} - set(frame["key"])
        frame = pd.concat([waiting[waiting["key"].isin(moved)], frame], ignore_index=True)
    summary.parent.mkdir(parents=True, exist_ok=True)
    # a run store does not outlive its machine: keep the rows of the runs not exported now
    frame = keep_committed_rows(summary, frame, ["key"], [(k,) for k in order])
    frame.to_csv(summary, index=False, float_format="%.6g")
    paths = [summary, export_histories(new, out / histories_name, keep_order=order)]
    if pending:
        return paths
    if joining:
        paths += _retire(paths[:2], set(wanted), [out / f for f in RETIRED_CSV[grid]])
        for name in joining:
            (out / name).unlink(missing_ok=True)
    if any(r.config["dataset"] == "ptb" for r in records):  # the floors the figures draw
        from structattn_lite.studies.attention.tasks import floor_frame

        floor_frame(load_corpus("ptb")).to_csv(out / FLOORS_CSV, index=False)
        paths.append(out / FLOORS_CSV)
    return paths
