"""What the attention study's grids ship in ``data/results`` and how a new run store gets
it back: a store does not outlive its machine, so a grid exported in parts
(``GROWN_ACROSS_SESSIONS``) keeps its committed rows when it exports, and a new store gets
its committed runs back before anything trains (``restore_committed``), so none is
trained twice.
"""

from __future__ import annotations

from pathlib import Path

from structattn_lite import config as cfgmod
from structattn_lite import files
from structattn_lite.data import load_corpus
from structattn_lite.records import RunRecord, export_histories, keep_committed_rows
from structattn_lite.studies.attention.grids import COMMITTED_CSV, FLOORS_CSV, GRIDS
from structattn_lite.studies.attention.tables import load_committed_histories, summarize

# Grids whose committed files grow as runs are exported: an export replaces the runs it
# holds and keeps the others (the low-parameter arm is more than two cores finish at once).
GROWN_ACROSS_SESSIONS = ("lowparam", "long", "fresh", "fresh_bf16")
RESTORED = "restored_from"  # extra of a record rebuilt from a committed file


def restore_committed(name: str, store) -> list[RunRecord]:
    """Save into ``store`` the committed grid's runs it lacks, rebuilt from the committed
    histories (config, status and learning curve; the per-step norms and measurements
    stay in the committed summary), so a new store neither retrains them nor chooses
    its rates without them. ``export`` leaves their committed rows as they are. A grid
    that keeps another's rates (``rates_from``) gets that grid's runs too: they are its
    tuning runs."""
    source = GRIDS[name].get("rates_from")
    restored = restore_committed(source, store) if source else []
    if name not in COMMITTED_CSV:
        return restored
    for r in load_committed_histories(name):
        if not store.path(r.experiment, r.key).exists():
            r.extra[RESTORED] = COMMITTED_CSV[name][1]
            store.save(r)
            restored.append(r)
    return restored


def write(records: list[RunRecord], grid: str, order: list[str]) -> list[Path]:
    """Write the grid's finished ``records`` to its committed files, keeping the rows of
    the runs they do not hold, in the grid's ``order`` (run keys; the others follow)."""
    runs_name, histories_name = COMMITTED_CSV[cfgmod.check_choice("grid", grid, COMMITTED_CSV)]
    out = cfgmod.results_dir()
    new = [r for r in records if RESTORED not in r.extra]
    if not new:  # the others' rows are committed
        return []
    summary = out / runs_name
    frame = summarize(new).assign(key=[r.key for r in new])
    summary.parent.mkdir(parents=True, exist_ok=True)
    # a run store does not outlive its machine: keep the rows of the runs not exported now
    frame = keep_committed_rows(summary, frame, ["key"], [(k,) for k in order])
    files.write_csv(frame, summary, index=False, float_format="%.6g")
    paths = [summary, export_histories(new, out / histories_name, keep_order=order)]
    if any(r.config["dataset"] == "ptb" for r in records):  # the floors the figures draw
        from structattn_lite.studies.attention.tasks import floor_frame

        files.write_csv(floor_frame(load_corpus("ptb")), out / FLOORS_CSV, index=False)
        paths.append(out / FLOORS_CSV)
    return paths
