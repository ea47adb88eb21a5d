"""The one sweep every study goes through: reuse finished records, train the rest.

A run a sweep leaves unfinished (failed, held by another process, at a path that cannot
be read or written) is warned about and, when ``STRUCTATTN_UNFINISHED`` names a file,
appended to it as one JSON line: that is how ``structattn run`` and ``structattn study``
(whose notebooks sweep in their own kernels) know to exit nonzero.
"""

from __future__ import annotations

import functools
import json
import os
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from structattn_lite.records import (
    RunRecord,
    RunStore,
    StoreError,
    config_dict,
    config_hash,
    without_seed,
)

UNFINISHED_ENV = "STRUCTATTN_UNFINISHED"
# A file each sweep appends its progress to (runs done of its total), when set: how
# `structattn study` shows a notebook's runs while papermill executes it.
PROGRESS_ENV = "STRUCTATTN_PROGRESS"

# --- the one sweep -------------------------------------------------------------------


def held_elsewhere(study: Any, configs: Sequence[Any], store: RunStore | None = None) -> list[str]:
    """The keys of ``configs`` with no finished record whose lock a live process holds:
    runs another sweep is training now."""
    from structattn_lite.locking import RunLock
    from structattn_lite.studies import get_study

    experiment, store = get_study(study).EXPERIMENT, store or RunStore()
    held = []
    for cfg in configs:
        key = config_hash(experiment, cfg)
        if store.load(experiment, cfg) is not None:
            continue
        if RunLock(store.path(experiment, key).with_suffix(".lock")).held():
            held.append(key)
    return held


def run_unit(
    study: Any,
    unit: Any,
    device: str = "cpu",
    progress: bool = False,
    callbacks: Sequence[Any] = (),
    checkpoint: Any = None,
) -> RunRecord | list[RunRecord]:
    """Train one work unit: a config, or a list of configs equal but for their seed;
    ``checkpoint`` (a ``training.checkpoint.CheckpointPlan`` or None) goes to the study.
    (On CUDA, deterministic in whichever process it runs: a Ray worker too.)"""
    from structattn_lite.config import training_device

    device = training_device(device)
    if isinstance(unit, list):
        return list(study.run_seeds(unit, progress=progress, device=device, checkpoint=checkpoint))
    return study.run(
        unit, progress=progress, callbacks=callbacks, device=device, checkpoint=checkpoint
    )


def checkpoint_path(root: Path, experiment: str, unit: Any) -> Path:
    """Where a unit checkpoints while it trains: beside its future record(s).

    Seeds trained together are keyed by their first config and their seeds, so their
    checkpoint is never mistaken for that of one of those configs trained alone.
    """
    if isinstance(unit, (list, tuple)):
        seeds = "-".join(str(config_dict(c).get("seed")) for c in unit)
        return root / experiment / f"{config_hash(experiment, unit[0])}-seeds-{seeds}.ckpt"
    return root / experiment / f"{config_hash(experiment, unit)}.ckpt"


def group_seeds(configs: Sequence[Any]) -> list[Any]:
    """Work units: configs equal but for their seed as one list (a lone config as itself)."""
    groups: dict[str, list[Any]] = {}
    for cfg in configs:
        groups.setdefault(without_seed(cfg), []).append(cfg)
    return [g if len(g) > 1 else g[0] for g in groups.values()]


def report_unfinished(experiment: str, unfinished: dict[str, tuple[Any, str]]) -> None:
    """Append each unfinished run (key -> (config, why)) to the ``STRUCTATTN_UNFINISHED``
    file, when that variable is set."""
    path = os.environ.get(UNFINISHED_ENV)
    if not path or not unfinished:
        return
    with open(path, "a") as fh:
        for key, (cfg, why) in unfinished.items():
            blob = {"experiment": experiment, "key": key, "config": config_dict(cfg), "why": why}
            fh.write(json.dumps(blob) + "\n")


def report_progress(experiment: str, sweep_id: str, done: int, total: int) -> None:
    """Append one sweep's progress (``done`` of its ``total`` runs finished or reused) to
    the ``STRUCTATTN_PROGRESS`` file, when that variable is set."""
    path = os.environ.get(PROGRESS_ENV)
    if not path:
        return
    blob = {"experiment": experiment, "sweep": sweep_id, "done": done, "total": total}
    with open(path, "a") as fh:
        fh.write(json.dumps(blob) + "\n")


def read_progress(path: str | os.PathLike) -> tuple[int, int]:
    """(runs done, runs asked for), summed over the sweeps reported to a
    ``STRUCTATTN_PROGRESS`` file, each at its last report; (0, 0) when there is none. A
    line still being written is skipped."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return 0, 0
    latest = {}
    for line in lines:
        try:
            blob = json.loads(line)
        except json.JSONDecodeError:
            continue
        latest[blob["sweep"]] = (blob["done"], blob["total"])
    return sum(d for d, _ in latest.values()), sum(t for _, t in latest.values())


def read_unfinished(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The runs reported to a ``STRUCTATTN_UNFINISHED`` file, the last report of each."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    latest = {}
    for line in lines:
        blob = json.loads(line)
        latest[(blob["experiment"], blob["key"])] = blob
    return list(latest.values())


def sweep(
    study: Any,
    configs: Sequence[Any],
    *,
    only_cached: bool = False,
    threads: int | None = 1,
    seed_batching: bool = False,
    executor: str = "local",
    address: str | None = None,
    device: str = "cpu",
    checkpoint_every: int = 5,
    progress: bool = True,
    callbacks: Sequence[Any] = (),
    store: RunStore | None = None,
) -> list[RunRecord]:
    """Reuse each config's finished record or train it; return the records in config order.

    ``study``: a study's module or name. ``only_cached=True`` trains nothing and returns
    the records on disk. ``seed_batching``: configs equal but for their seed train
    together, when the study has ``run_seeds``. A run checkpoints every
    ``checkpoint_every`` epochs (0: never). A run another process holds is skipped with a
    warning (and returned if its record is there when this sweep ends); a path that cannot
    be read or written skips its run; a full disk raises ``StoreError``.
    """
    from structattn_lite.config import check_choice, check_int, check_threads, training_device
    from structattn_lite.executors import EXECUTORS, execute
    from structattn_lite.locking import RunLock, RunLockedError
    from structattn_lite.studies import get_study

    study = get_study(study)
    check_choice("executor", executor, EXECUTORS)
    check_int("checkpoint_every", checkpoint_every, minimum=0)
    if threads is not None:
        check_threads("threads", threads)
    device = training_device(device)  # deterministic on CUDA, here and in each run_unit
    store = store or RunStore()
    experiment = study.EXPERIMENT
    config_class = getattr(study, "Config", None)
    if isinstance(config_class, type):  # a study's configs are of its own class
        wrong = next((c for c in configs if not isinstance(c, config_class)), None)
        if wrong is not None:
            raise ValueError(
                f"configs of the {experiment!r} study must be {config_class.__name__}, "
                f"got a {type(wrong).__name__} (a config of another study?)"
            )
    unfinished: dict[str, tuple[Any, str]] = {}  # run key -> (config, why), as reported

    def load(cfg: Any) -> RunRecord | None:
        """The finished record, or None; a path that cannot be read skips the run."""
        try:
            return store.load(experiment, cfg)
        except StoreError as err:
            key = config_hash(experiment, cfg)
            unfinished[key] = (cfg, str(err))
            warnings.warn(f"skipping {experiment} run {key}: {err}", stacklevel=3)
            return None

    if not only_cached:
        store.remove_stale_tmp(experiment)
    records: dict[int, RunRecord] = {}
    for i, cfg in enumerate(configs):
        found = load(cfg)
        if found is not None:
            records[i] = found
    blocked = set(unfinished)
    todo = [
        i
        for i in range(len(configs))
        if i not in records and config_hash(experiment, configs[i]) not in blocked
    ]
    sweep_id = uuid.uuid4().hex
    report_progress(experiment, sweep_id, len(records), len(configs))
    if progress and records:
        print(
            f"[{experiment}] reused {len(records)} cached run(s); {len(todo)} to train"
            if not only_cached
            else f"[{experiment}] {len(records)} cached run(s) found"
        )
    if only_cached or not todo:
        report_unfinished(experiment, unfinished)
        return [records[i] for i in sorted(records)]

    at: dict[str, list[int]] = {}  # run key -> where its config sits in the grid
    for i in todo:
        at.setdefault(config_hash(experiment, configs[i]), []).append(i)
    units = [configs[where[0]] for where in at.values()]
    if seed_batching and hasattr(study, "run_seeds"):
        units = group_seeds(units)
    locks: dict[str, RunLock] = {}
    held_elsewhere: list[str] = []

    def keep(key: str, record: RunRecord) -> None:
        for i in at[key]:
            records[i] = record

    def claim(unit: Any) -> Any:
        """Lock a unit's runs just before they train; the part left to train, or None."""
        left = []
        for cfg in unit if isinstance(unit, list) else [unit]:
            key = config_hash(experiment, cfg)
            try:
                locks[key] = RunLock(store.path(experiment, key).with_suffix(".lock")).acquire()
            except RunLockedError as err:
                held_elsewhere.append(key)
                unfinished[key] = (cfg, str(err))
                warnings.warn(
                    f"skipping {experiment} run {key} {config_dict(cfg)}: {err}", stacklevel=2
                )
                continue
            except OSError as err:  # the lock cannot be written
                error = StoreError(f"cannot write the lock of run {key}: {err}", err)
                if error.store_wide:  # a full disk or read-only store: no run can start
                    raise error from None
                unfinished[key] = (cfg, str(error))
                warnings.warn(f"skipping {experiment} run {key}: {error}", stacklevel=2)
                continue
            found = load(cfg)  # another process may have just finished it
            if found is not None or key in unfinished:
                if found is not None:
                    keep(key, found)
                locks.pop(key).release()
            else:
                left.append(cfg)
        if not left:
            return None
        return left if isinstance(unit, list) and len(left) > 1 else left[0]

    run_one = functools.partial(
        run_unit,
        study,
        device=device,
        progress=progress and executor == "local",  # a bar of each run's epochs or steps
        callbacks=callbacks if executor == "local" else (),
    )
    try:
        results = execute(
            run_one,
            units,
            experiment=experiment,
            executor=executor,
            address=address,
            progress=progress,
            threads=threads,
            gpus_per_run=1 if device.startswith("cuda") else 0,
            checkpoint_for=functools.partial(checkpoint_path, store.root, experiment),
            checkpoint_every=checkpoint_every,
            desc=f"{experiment} runs",
            claim=claim,
        )
        for unit, got in results:
            pairs = zip(unit, got, strict=True) if isinstance(unit, list) else [(unit, got)]
            for cfg, record in pairs:
                record.device = device
                key = config_hash(experiment, cfg)
                if record.status == "failed":
                    why = f"failed: {(record.reason or '').splitlines()[0]}"
                    unfinished[key] = (cfg, why)
                    warnings.warn(f"run {key} {why}; it will be rerun next time", stacklevel=2)
                try:
                    store.save(record)
                except StoreError as err:
                    if err.store_wide:
                        raise
                    unfinished[key] = (cfg, str(err))  # one blocked path: the sweep goes on
                    warnings.warn(f"run {key} trained but not saved: {err}", stacklevel=2)
                keep(key, record)
                locks.pop(key).release()
            report_progress(experiment, sweep_id, len(records), len(configs))
    finally:
        for lock in locks.values():
            lock.release()
    for key in held_elsewhere:  # the other process may have finished it by now
        found = load(configs[at[key][0]])
        if found is not None:
            keep(key, found)
            unfinished.pop(key, None)
    report_unfinished(experiment, unfinished)
    report_progress(experiment, sweep_id, len(records), len(configs))
    return [records[i] for i in sorted(records)]


def run_grid(study: Any, name: str, progress: bool = True, **sweep_options) -> list[RunRecord]:
    """A staged grid run to its end (attention: tune, widening where the grid asks, choose
    each variant's rate on validation, train the finals, then the edge check; length:
    fit, then refit the cells that did not): sweep ``study.grid(name)`` again while the
    records on disk grow it. ``sweep_options``: as ``sweep`` takes them."""
    from structattn_lite.studies import get_study

    study = get_study(study)
    store = {"store": sweep_options["store"]} if sweep_options.get("store") else {}
    configs, records = [], []
    while (more := study.grid(name, **store)) != configs:
        configs = more
        records = sweep(study, configs, progress=progress, **sweep_options)
    return records
