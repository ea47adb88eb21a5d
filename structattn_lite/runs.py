"""The one sweep every study goes through: reuse finished records, train the rest.

``sweep(study, configs)`` looks each config up in the store, claims the missing ones
with a lock, trains them here or as Ray tasks (``executors``), checkpoints long runs,
and saves every record as it finishes.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from structattn_lite.records import RunRecord, RunStore, config_dict, config_hash

# --- the one sweep -------------------------------------------------------------------


def _without_seed(config: Any) -> str:
    blob = config_dict(config)
    blob.pop("seed", None)
    return json.dumps(blob, sort_keys=True)


def run_unit(
    study: Any,
    unit: Any,
    device: str = "cpu",
    progress: bool = False,
    callbacks: Sequence[Any] = (),
) -> RunRecord | list[RunRecord]:
    """Train one work unit: a config, or a list of configs equal but for their seed."""
    if isinstance(unit, list):
        return list(study.run_seeds(unit, progress=progress, device=device))
    return study.run(unit, progress=progress, callbacks=callbacks, device=device)


def checkpoint_path(root: Path, experiment: str, config: Any) -> Path:
    """Where a run checkpoints while it trains: beside its future record."""
    return root / experiment / f"{config_hash(experiment, config)}.ckpt"


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

    ``study`` is a study's experiment module or its name (``structattn_lite.studies``).
    ``only_cached=True`` trains nothing: it returns the records already on disk (a
    partial grid gives the runs it has). A run that diverges is recorded and the sweep
    goes on; one that raises is recorded as "failed" and rerun by the next sweep.
    ``threads``: intra-op threads per training process (None leaves torch's setting).
    ``seed_batching``: configs equal but for their seed train together, when the study
    has ``run_seeds``. ``executor``: "local" (this process) or "ray" (one Ray task per
    unit; ``address`` joins an existing cluster). A run checkpoints every
    ``checkpoint_every`` epochs (0: never) and resumes from it if interrupted; a lock
    beside each record keeps two processes from training the same config at once.
    """
    from structattn_lite.config import check_choice, check_int, resolve_device
    from structattn_lite.executors import EXECUTORS, execute
    from structattn_lite.locking import RunLock, RunLockedError
    from structattn_lite.studies import get_study

    study = get_study(study)
    check_choice("executor", executor, EXECUTORS)
    check_int("checkpoint_every", checkpoint_every, minimum=0)
    device = resolve_device(device)
    store = store or RunStore()
    records: dict[int, RunRecord] = {}
    for i, cfg in enumerate(configs):
        found = store.load(study.EXPERIMENT, cfg)
        if found is not None:
            records[i] = found
    todo = [i for i in range(len(configs)) if i not in records]
    if progress and records:
        print(
            f"[{study.EXPERIMENT}] reused {len(records)} cached run(s); {len(todo)} to train"
            if not only_cached
            else f"[{study.EXPERIMENT}] {len(records)} cached run(s) found"
        )
    if only_cached or not todo:
        return [records[i] for i in sorted(records)]

    locks: dict[int, RunLock] = {}
    try:
        for i in todo:  # claim every run first: another process may be training some
            lock = RunLock(
                store.path(study.EXPERIMENT, config_hash(study.EXPERIMENT, configs[i])).with_suffix(
                    ".lock"
                )
            )
            try:
                locks[i] = lock.acquire()
            except RunLockedError as err:
                warnings.warn(f"skipping a run another process is training: {err}", stacklevel=2)
        units: list[Any] = [configs[i] for i in locks]
        index = {id(configs[i]): i for i in locks}
        if seed_batching and hasattr(study, "run_seeds"):
            groups: dict[str, list[Any]] = {}
            for i in locks:
                groups.setdefault(_without_seed(configs[i]), []).append(configs[i])
            units = [g if len(g) > 1 else g[0] for g in groups.values()]
        run_one = functools.partial(
            run_unit,
            study,
            device=device,
            progress=False,
            callbacks=callbacks if executor == "local" else (),
        )
        results = execute(
            run_one,
            units,
            experiment=study.EXPERIMENT,
            executor=executor,
            address=address,
            progress=progress,
            threads=threads,
            gpus_per_run=1 if device.startswith("cuda") else 0,
            checkpoint_for=functools.partial(checkpoint_path, store.root, study.EXPERIMENT),
            checkpoint_every=checkpoint_every,
            desc=f"{study.EXPERIMENT} runs",
        )
        for unit, got in results:
            pairs = zip(unit, got, strict=True) if isinstance(unit, list) else [(unit, got)]
            for cfg, record in pairs:
                record.device = device
                if record.status == "failed":
                    warnings.warn(
                        f"run {record.key} failed and will be rerun next time: "
                        f"{record.reason.splitlines()[0]}",
                        stacklevel=2,
                    )
                store.save(record)
                i = index[id(cfg)]
                records[i] = record
                locks.pop(i).release()
    finally:
        for lock in locks.values():
            lock.release()
    return [records[i] for i in sorted(records)]
