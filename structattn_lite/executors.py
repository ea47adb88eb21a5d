"""Where a grid's runs execute: in this process, or as tasks on a Ray cluster.

A run that raises becomes a "failed" record and the other runs go on. Cache look-ups,
store writes and claiming runs stay with the caller (``runs.sweep``), on the driver.
With Ray, ``run_one`` and the configs are pickled to the workers, which must be able to
import ``structattn_lite``.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.records import RunRecord, StoreError, config_dict, config_hash
from structattn_lite.training.checkpoint import checkpoint_plan
from structattn_lite.training.trainer import few_threads

EXECUTORS = ("local", "ray")
LOOPBACK = "127.0.0.1"  # where a local Ray instance listens

RunOne = Callable[..., RunRecord]  # run_one(item, checkpoint=plan or None)
CheckpointFor = Callable[[Any], "str | Path | None"]
Claim = Callable[[Any], Any]  # item -> what of it to run now, or None to skip it


def failed_record(experiment: str, config: Any, error: BaseException | str) -> RunRecord:
    """The record of a run that raised: no history, the error as its reason."""
    if isinstance(error, BaseException):
        reason = f"{type(error).__name__}: {error}"
        detail = "".join(traceback.format_exception(error))
    else:
        reason = detail = str(error)
    return RunRecord(
        experiment=experiment,
        key=config_hash(experiment, config),
        config=config_dict(config),
        history=pd.DataFrame(),
        status="failed",
        reason=reason,
        extra={"traceback": detail[-4000:]},
    )


def failed_records(experiment: str, item: Any, error: BaseException | str):
    """The failed record of a config, or one per config of a list of them."""
    if isinstance(item, (list, tuple)):
        return [failed_record(experiment, c, error) for c in item]
    return failed_record(experiment, item, error)


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
    except StoreError as err:
        if err.store_wide:
            raise
        return failed_records(experiment, item, err)
    except Exception as err:  # noqa: BLE001 - any failure of one run is recorded, not raised
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
