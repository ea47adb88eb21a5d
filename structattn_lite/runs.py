"""The run driver, between the CLI (or a notebook) and the training loop: every study's
runs go through ``sweep``, which reuses finished records and trains the rest, one work unit
at a time (``train``: a config, or configs equal but for their seed), in this process or as
tasks on a Ray cluster (``execute``).

A unit that raises becomes a "failed" record and the other runs go on. Cache look-ups,
store writes and claiming runs stay with the sweep, on the driver; with Ray, the unit's
study and configs are pickled to the workers, which must be able to import
``structattn_lite``.

A run a sweep leaves unfinished (failed, held by another process, at a path that cannot
be read or written) is warned about and, when ``STRUCTATTN_UNFINISHED`` names a file,
appended to it as one JSON line: that is how ``structattn run`` and ``structattn study``
(whose notebooks sweep in their own kernels) know to exit nonzero.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from structattn_lite.config import (
    SeedStacks,
    check_choice,
    check_int,
    check_number,
    check_threads,
    seed_stacks,
    training_device,
)
from structattn_lite.locking import RunLock, RunLockedError
from structattn_lite.records import (
    RunRecord,
    RunStore,
    StoreError,
    config_dict,
    config_hash,
    without_seed,
)
from structattn_lite.studies import get_study
from structattn_lite.training.checkpoint import checkpoint_plan
from structattn_lite.training.driver import train_seeds
from structattn_lite.training.trainer import few_threads

UNFINISHED_ENV = "STRUCTATTN_UNFINISHED"
# A file each sweep appends its progress to (runs done of its total), when set: how
# `structattn study` shows a notebook's runs while papermill executes it.
PROGRESS_ENV = "STRUCTATTN_PROGRESS"

# --- the one sweep -------------------------------------------------------------------


def held_elsewhere(study: Any, configs: Sequence[Any], store: RunStore | None = None) -> list[str]:
    """The keys of ``configs`` with no finished record whose lock a live process holds:
    runs another sweep is training now."""
    experiment, store = get_study(study).EXPERIMENT, store or RunStore()
    held = []
    for cfg in configs:
        key = config_hash(experiment, cfg)
        if store.load(experiment, cfg) is not None:
            continue
        if RunLock(store.path(experiment, key).with_suffix(".lock")).held():
            held.append(key)
    return held


def train(
    study: Any,
    unit: Any,
    device: str = "cpu",
    progress: bool = False,
    callbacks: Sequence[Any] = (),
    checkpoint: Any = None,
) -> RunRecord | list[RunRecord]:
    """Train one work unit from its seed(s): a config (its record), or a list of configs
    equal but for their seed (one record each, trained together).

    A study that describes its runs (``setup(config)`` and ``record(...)``: the
    state-tracking studies) trains through ``training.driver.train_seeds``; one that trains
    itself (``run(config, ...)``: the attention study) trains each config in turn.
    ``checkpoint``: a ``training.checkpoint.CheckpointPlan`` or None. On CUDA, deterministic
    in whichever process it runs: a Ray worker too.
    """
    study, device = get_study(study), training_device(device)
    configs = unit if isinstance(unit, list) else [unit]
    options = dict(progress=progress, callbacks=callbacks, device=device, checkpoint=checkpoint)
    if hasattr(study, "setup"):
        if hasattr(study, "eval_chunk"):  # evaluation rows per pass, for this many seeds
            options["eval_chunk"] = study.eval_chunk(len(configs))
        records = train_seeds(configs, study.setup, study.record, **options)
    else:
        records = [study.run(cfg, **options) for cfg in configs]
    return records if isinstance(unit, list) else records[0]


def checkpoint_path(root: Path, experiment: str, unit: Any) -> Path:
    """Where a unit checkpoints while it trains: beside its future record(s).

    Seeds trained together are keyed by their first config and their seeds, so their
    checkpoint is never mistaken for that of one of those configs trained alone.
    """
    if isinstance(unit, (list, tuple)):
        seeds = "-".join(str(config_dict(c).get("seed")) for c in unit)
        return root / experiment / f"{config_hash(experiment, unit[0])}-seeds-{seeds}.ckpt"
    return root / experiment / f"{config_hash(experiment, unit)}.ckpt"


def _in_stack(record: RunRecord, stack: tuple[int, ...]) -> bool:
    """Whether ``record`` trained in ``stack``: its record names it, or (a record from
    before records named their stack) it trained beside as many seeds, the one evidence
    such a record keeps (where the stack is all of its task's seeds, the only one it can be)."""
    named = record.extra.get("stack")
    if named is not None:
        return tuple(named) == stack
    return record.extra.get("seed_batched") == len(stack)


def group_seeds(configs: Sequence[Any], stacks: SeedStacks | None = None) -> list[Any]:
    """Work units: configs equal but for their seed as one list (a lone config as itself).
    With ``stacks`` (a grid's protocol, ``config.seed_stacks``), each stack of seeds is its
    own unit, its seeds in the stack's order."""
    groups: dict[tuple, list[Any]] = {}
    for cfg in configs:
        groups.setdefault((without_seed(cfg), stacks and stacks.of(cfg)), []).append(cfg)
    for (_, stack), group in groups.items():
        if stack is not None:
            group.sort(key=lambda c: stack.index(c.seed))
    return [g if len(g) > 1 else g[0] for g in groups.values()]


def _append_lines(env: str, blobs: Iterable[dict[str, Any]]) -> None:
    """Append each blob as one JSON line to the file ``env`` names, when it is set (and
    there is a blob: no report, no file)."""
    lines = [json.dumps(blob) + "\n" for blob in blobs]
    if lines and (path := os.environ.get(env)):
        with open(path, "a") as fh:
            fh.writelines(lines)


def _last_reports(path: str | os.PathLike, *key: str) -> list[dict[str, Any]]:
    """The last line of each ``key`` in a JSON-lines report file ([] when there is none);
    a line still being written is skipped."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    latest = {}
    for line in lines:
        try:
            blob = json.loads(line)
        except json.JSONDecodeError:
            continue
        latest[tuple(blob[k] for k in key)] = blob
    return list(latest.values())


def report_unfinished(experiment: str, unfinished: dict[str, tuple[Any, str]]) -> None:
    """Report each unfinished run (key -> (config, why)) to ``STRUCTATTN_UNFINISHED``."""
    _append_lines(UNFINISHED_ENV, ({"experiment": experiment, "key": key, "config": config_dict(cfg),
                                    "why": why} for key, (cfg, why) in unfinished.items()))  # fmt: skip


def report_progress(experiment: str, sweep_id: str, done: int, total: int) -> None:
    """Report one sweep's progress (``done`` of its ``total`` runs finished or reused) to
    ``STRUCTATTN_PROGRESS``."""
    _append_lines(PROGRESS_ENV, [{"experiment": experiment, "sweep": sweep_id, "done": done,
                                  "total": total}])  # fmt: skip


def read_progress(path: str | os.PathLike) -> tuple[int, int]:
    """(runs done, runs asked for), summed over the sweeps reported to a
    ``STRUCTATTN_PROGRESS`` file, each at its last report; (0, 0) when there is none."""
    latest = _last_reports(path, "sweep")
    return sum(b["done"] for b in latest), sum(b["total"] for b in latest)


def read_unfinished(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The runs reported to a ``STRUCTATTN_UNFINISHED`` file, the last report of each."""
    return _last_reports(path, "experiment", "key")


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
    stacks: SeedStacks | None = None,
) -> list[RunRecord]:
    """Reuse each config's finished record or train it; return the records in config order.

    ``study``: a study's module or name. ``only_cached=True`` trains nothing and returns
    the records on disk. ``seed_batching``: configs equal but for their seed train
    together, when the study describes its runs (``setup``). ``stacks``: the seed stacks
    of the grid's protocol (``config.seed_stacks``): each trains as one unit, and a record
    trained in another stack is trained again in its own. A run checkpoints every
    ``checkpoint_every`` epochs (0: never). A run another process holds is skipped with a
    warning (and returned if its record is there when this sweep ends); a path that cannot
    be read or written skips its run; a full disk raises ``StoreError``.
    """
    study = get_study(study)
    check_choice("executor", executor, EXECUTORS)
    check_int("checkpoint_every", checkpoint_every, minimum=0)
    if threads is not None:
        check_threads("threads", threads)
    device = training_device(device)  # deterministic on CUDA, here and in each unit's process
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
        """The finished record, or None; a path that cannot be read skips the run, and a
        record trained in another stack than its protocol's is trained again."""
        try:
            found = store.load(experiment, cfg)
        except StoreError as err:
            key = config_hash(experiment, cfg)
            unfinished[key] = (cfg, str(err))
            warnings.warn(f"skipping {experiment} run {key}: {err}", stacklevel=3)
            return None
        wanted = stacks and stacks.of(cfg)
        if found is not None and wanted is not None and not _in_stack(found, wanted):
            had = found.extra.get("stack") or f"a stack of {found.extra.get('seed_batched', 1)}"
            warnings.warn(
                f"{experiment} run {found.key} (seed {cfg.seed}) was trained in {had}; its "
                f"grid trains it in the stack {list(wanted)}, so it trains again there",
                stacklevel=3,
            )
            return None
        return found

    if not only_cached:
        store.remove_stale_tmp(experiment)
    records = {i: found for i, cfg in enumerate(configs) if (found := load(cfg)) is not None}
    # a run whose path cannot be read (now in ``unfinished``) is not trained either
    todo = [
        i
        for i, cfg in enumerate(configs)
        if i not in records and config_hash(experiment, cfg) not in unfinished
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
    if (seed_batching or stacks is not None) and hasattr(study, "setup"):
        units = group_seeds(units, stacks)
        for unit in units if stacks is not None else ():
            first = unit[0] if isinstance(unit, list) else unit
            seeds = [c.seed for c in unit] if isinstance(unit, list) else [unit.seed]
            whole = stacks.of(first)
            if whole is not None and tuple(seeds) != whole:
                warnings.warn(
                    f"seeds {seeds} of the stack {list(whole)} train without the rest of it: "
                    "their float32 numbers differ from a whole stack's",
                    stacklevel=2,
                )
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
        train,
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


WAIT_FOR_OTHERS_S = 30  # between looks at runs another process holds


def run_staged(
    study: Any,
    configs_for: Callable[[], list[Any]],
    *,
    first: list[Any] | None = None,
    wait: bool = False,
    on_wait: Callable[[int], None] | None = None,
    **sweep_options,
) -> list[RunRecord]:
    """A staged grid run to its end: sweep ``configs_for()`` (``first`` the first time,
    when given) again while the records on disk grow it (attention: tune, widening where
    the grid asks, choose each variant's rate on validation, train the finals, then the
    edge check; length: fit, then refit the cells that did not). With ``wait``, the runs
    another process holds are waited for, since they too may grow it (``on_wait(count)``
    before each wait of ``WAIT_FOR_OTHERS_S``). ``sweep_options``: as ``sweep`` takes them."""
    study = get_study(study)
    configs = configs_for() if first is None else first
    while True:
        records = sweep(study, configs, **sweep_options)
        grown = [] if sweep_options.get("only_cached") else configs_for()
        if grown and grown != configs:
            configs = grown
            continue
        waiting = held_elsewhere(study, configs, sweep_options.get("store")) if wait else []
        if not waiting:
            return records
        if on_wait is not None:
            on_wait(len(waiting))
        time.sleep(WAIT_FOR_OTHERS_S)


def run_grid(study: Any, name: str, progress: bool = True, **sweep_options) -> list[RunRecord]:
    """``run_staged`` over the grid ``name`` as the records on disk grow it.
    ``sweep_options``: as ``sweep`` takes them."""
    study = get_study(study)
    takes_store = "store" in inspect.signature(study.grid).parameters  # a staged grid reads it
    store = {"store": sweep_options["store"]} if sweep_options.get("store") and takes_store else {}
    spec = getattr(study, "GRIDS", {}).get(name, {})
    sweep_options.setdefault("stacks", seed_stacks(spec))  # the stacks its protocol names
    return run_staged(study, lambda: study.grid(name, **store), progress=progress, **sweep_options)


# --- where units train: in this process, or as tasks on a Ray cluster ------------------

EXECUTORS = ("local", "ray")
LOOPBACK = "127.0.0.1"  # where a local Ray instance listens

RunOne = Callable[..., RunRecord]  # run_one(item, checkpoint=plan or None)
CheckpointFor = Callable[[Any], "str | Path | None"]
Claim = Callable[[Any], Any]  # item -> what of it to run now, or None to skip it


def failed_records(experiment: str, item: Any, error: BaseException | str):
    """The record of a run that raised (no history, the error as its reason); one per
    config of an item that is a list of them."""
    if isinstance(error, BaseException):
        reason = f"{type(error).__name__}: {error}"
        detail = "".join(traceback.format_exception(error))
    else:
        reason = detail = str(error)
    many = isinstance(item, (list, tuple))
    records = [
        RunRecord(
            experiment=experiment,
            key=config_hash(experiment, config),
            config=config_dict(config),
            history=pd.DataFrame(),
            status="failed",
            reason=reason,
            extra={"traceback": detail[-4000:]},
        )
        for config in (item if many else [item])
    ]
    return records if many else records[0]


def run_guarded(
    run_one: RunOne,
    item: Any,
    experiment: str,
    threads: int | None = 1,
    checkpoint_for: CheckpointFor | None = None,
    checkpoint_every: int = 0,
) -> RunRecord | list[RunRecord]:
    """``run_one(item, checkpoint=plan)``; an exception becomes a record, except a
    store-wide StoreError (a full disk), which no other run escapes."""
    stacked = isinstance(item, (list, tuple))
    path = checkpoint_for(item) if checkpoint_for is not None else None
    try:
        plan = checkpoint_plan(path, checkpoint_every, stacked=stacked)
        with few_threads(threads):
            return run_one(item, checkpoint=plan)
    except Exception as err:  # noqa: BLE001 - any failure of one run is recorded, not raised
        if isinstance(err, StoreError) and err.store_wide:
            raise
        return failed_records(experiment, item, err)


def execute(
    run_one: RunOne,
    configs: Iterable[Any],
    *,
    experiment: str,
    executor: str = "local",
    address: str | None = None,
    progress: bool = True,
    threads: int | None = 1,
    num_cpus: int | None = None,
    cpus_per_run: float = 1,
    gpus_per_run: float = 0,
    checkpoint_for: CheckpointFor | None = None,
    checkpoint_every: int = 0,
    desc: str | None = None,
    claim: Claim | None = None,
) -> Iterator[tuple[Any, RunRecord]]:
    """Run every config, yielding ``(item, record)`` as each finishes.

    ``run_one(item, checkpoint=plan)`` returns a record, or a list of them for an item
    that is a list of configs (seeds trained together). ``executor``: "local" (in order)
    or "ray" (one task per item, in the order they finish; ``address`` joins a cluster,
    else a local instance of ``num_cpus`` CPUs starts). ``threads``: torch intra-op
    threads per run. ``checkpoint_for(item) -> path``: on a cluster, a retried run resumes
    only on a shared file system. ``claim(item) -> item | None``: what of an item to run
    now (None skips it); local claims each item just before it runs, Ray all up front.
    """
    # Checked here, not when the first result is asked for (the rest is a generator).
    check_choice("executor", executor, EXECUTORS)
    check_int("checkpoint_every", checkpoint_every, minimum=0)
    check_number("cpus_per_run", cpus_per_run, minimum=0)
    check_number("gpus_per_run", gpus_per_run, minimum=0)
    if num_cpus is not None:
        check_int("num_cpus", num_cpus, minimum=1)
    if threads is not None:  # 0 would leave torch on every core
        check_int("threads", threads, minimum=1)
    if claim is not None and not callable(claim):
        raise ValueError(f"claim must be a callable (item -> item or None), got {claim!r}")
    configs = list(configs)
    options = dict(
        experiment=experiment,
        threads=threads,
        checkpoint_for=checkpoint_for,
        checkpoint_every=checkpoint_every,
    )
    bar = tqdm(total=len(configs), desc=desc or experiment, unit="run", disable=not progress)
    if executor == "local":
        return _execute_local(run_one, configs, bar, options, claim)
    resources = dict(num_cpus=cpus_per_run, num_gpus=gpus_per_run)
    return _execute_ray(run_one, configs, bar, address, num_cpus, resources, options, claim)


def _execute_local(run_one, configs, bar, options, claim):
    with contextlib.closing(bar):
        for config in configs:
            item = config if claim is None else claim(config)
            if item is None:  # another process has it, or it finished meanwhile
                bar.update(1)
                continue
            record = run_guarded(run_one, item, **options)
            bar.update(1)
            yield item, record


def connect_ray(address: str | None = None, num_cpus: int | None = None):
    """The ``ray`` module, initialised: joined to ``address`` or a new local instance."""
    try:
        import ray
    except ImportError as err:
        raise ImportError(
            "executor='ray' needs Ray: pip install -e '.[cluster]' in the checkout, or "
            "pip install ray"
        ) from err
    if not ray.is_initialized():
        if address is None:
            # Loopback only: on Linux Ray takes 127.0.0.1 for the host's reachable address
            # unless it is told this is no cluster, and then binds its servers to that.
            from ray._private import ray_constants

            ray_constants.ENABLE_RAY_CLUSTER = False
            ray.init(
                num_cpus=num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address=LOOPBACK,
            )
        else:
            try:
                ray.init(address=address, log_to_driver=False)
            except Exception as err:  # noqa: BLE001 - Ray raises several kinds for this
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise ValueError(
                    f"--address={address!r}: cannot join a Ray cluster there ({first}); "
                    "give the address of a running cluster (host:port), or leave --address "
                    "out to start a local Ray instance"
                ) from None
    return ray


def _execute_ray(run_one, configs, bar, address, num_cpus, resources, options, claim):
    if claim is not None:  # tasks start together, so their runs are claimed up front
        configs = [item for item in map(claim, configs) if item is not None]
        bar.reset(total=len(configs))
    ray = connect_ray(address, num_cpus)
    task = ray.remote(run_guarded).options(**resources)
    run_ref = ray.put(run_one)  # shipped once, not once per task
    pending = {task.remote(run_ref, c, **options): c for c in configs}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            config = pending.pop(done[0])
            try:
                record = ray.get(done[0])
            except ray.exceptions.RayError as err:  # the worker died (OOM, segfault, node loss)
                record = failed_records(options["experiment"], config, err)
            bar.update(1)
            yield config, record
    finally:
        bar.close()
        for ref in pending:  # the caller stopped early: do not leave work running
            ray.cancel(ref, force=True)
