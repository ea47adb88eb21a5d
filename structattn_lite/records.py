"""Run records and the store that keeps them, keyed by a hash of each record's full
config, so every number in a table can be traced to the run that made it."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from structattn_lite import __version__, files, schemas
from structattn_lite.config import runs_dir


def torch_version() -> str:
    """The installed torch's version, read from its package metadata: reading records
    (the ledger, the findings) needs no torch import."""
    import sys
    from importlib.metadata import PackageNotFoundError, version

    if "torch" in sys.modules:  # the exact build string (e.g. "+cu130") when torch is in
        return sys.modules["torch"].__version__
    try:
        return version("torch")
    except PackageNotFoundError:
        return "unknown"


def stack_words(extra: dict[str, Any]) -> str | None:
    """What a record says about the stack it trained in, for an exported table: "seeds
    10-21" (the seeds of the stack, when the record holds them), "12 seeds" (only their
    number, where a record holds no seed list), or None (not stacked, or unknown)."""
    seeds = extra.get("stack")
    if seeds:
        seeds = sorted(seeds)
        contiguous = seeds == list(range(seeds[0], seeds[-1] + 1))
        listed = (
            f"{seeds[0]}-{seeds[-1]}"
            if contiguous and len(seeds) > 1
            else " ".join(map(str, seeds))
        )
        return f"seeds {listed}"
    size = extra.get("seed_batched")
    return f"{size} seed{'s' if size != 1 else ''}" if size else None


def config_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-able dict of a (frozen dataclass) config."""
    plain = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    return json.loads(json.dumps(plain))


def config_hash(experiment: str, config: Any) -> str:
    """Stable 16-hex key of the experiment name and the full config."""
    blob = json.dumps({"experiment": experiment, "config": config_dict(config)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def without_seed(config: Any) -> str:
    """The config but for its seed: equal for configs that may train together."""
    return json.dumps({k: v for k, v in config_dict(config).items() if k != "seed"}, sort_keys=True)


@dataclasses.dataclass
class RunRecord:
    """What one training run leaves behind."""

    experiment: str
    key: str
    config: dict[str, Any]
    history: pd.DataFrame  # one row per epoch
    status: str = "ok"  # one of FINISHED, or "failed" (an exception; never served as cached)
    reason: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # per-step norms, evals
    version: str = __version__
    device: str = "cpu"  # where it trained (not part of the config hash)
    torch_version: str = dataclasses.field(default_factory=torch_version)

    @property
    def seed(self) -> int | None:
        return self.config.get("seed")

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "key": self.key,
            "config": self.config,
            "seed": self.seed,
            "version": self.version,
            "device": self.device,
            "torch_version": self.torch_version,
            "status": self.status,
            "reason": self.reason,
            "history": self.history.to_dict(orient="list"),
            "extra": self.extra,
        }

    @classmethod
    def from_training(
        cls, experiment: str, config: Any, result: Any, history: pd.DataFrame | None = None, **extra
    ) -> RunRecord:
        """The record of a finished ``Trainer.fit`` (a ``TrainResult``) for ``config``."""
        return cls(
            experiment=experiment,
            key=config_hash(experiment, config),
            config=config_dict(config),
            history=result.history if history is None else history,
            status=result.status,
            reason=result.reason,
            extra=extra,
        )

    @classmethod
    def from_json(cls, blob: dict[str, Any]) -> RunRecord:
        if not isinstance(blob["history"], dict):  # a table is a dict of columns
            raise ValueError(f"its history is a {type(blob['history']).__name__}, not a table")
        return cls(
            experiment=blob["experiment"],
            key=blob["key"],
            config=blob["config"],
            history=pd.DataFrame(blob["history"]),
            status=blob["status"],
            reason=blob.get("reason"),
            extra=blob.get("extra", {}),
            version=blob["version"],
            device=blob.get("device", "cpu"),
            torch_version=blob.get("torch_version", "unknown"),
        )


# A finished run: trained to the end, stopped by its rule, or stopped by the NaN/Inf guard
# (a diverged run is a result). Anything else (an exception) is rerun by the next sweep.
FINISHED = schemas.FINISHED


class CorruptRecordWarning(UserWarning):
    """A record (or checkpoint) on disk could not be read or is incomplete; it was moved
    aside and the run recomputed."""


class ExportRefused(ValueError):
    """An export that would put an unfinished grid in place of committed results; the
    message says what is missing and how to keep the runs meanwhile."""


class StoreError(OSError):
    """A record, checkpoint or lock could not be read or written; the message names the
    path. ``store_wide``: the whole store is affected (a full disk, a read-only file
    system), not one path, so training more runs is pointless."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.errno = getattr(cause, "errno", None)

    @property
    def store_wide(self) -> bool:
        return self.errno in (None, errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def set_aside(path: Path, aside: Path, why: str, stacklevel: int = 3) -> Path | None:
    """Move a corrupt file to ``aside`` (or ``aside.1``, ... never overwriting an older
    one) with a warning; None when another process moved it first."""
    free, k = aside, 0
    while free.exists():
        k += 1
        free = aside.with_name(f"{aside.name}.{k}")
    try:
        os.replace(path, free)
    except FileNotFoundError:
        return None  # a second sweep met the same file and set it aside first
    warnings.warn(
        f"{path} {why}; moved to {free.name} and recomputing",
        CorruptRecordWarning,
        stacklevel=stacklevel,
    )
    return free


def incomplete(record: RunRecord) -> str | None:
    """Why a record that says it finished is not a whole result, or None when it is.

    A finished run (other than a diverged one) has a history whose last row holds every
    metric it logged, finite, and finite final metrics (``extra["final"]``) if it has any.
    """
    if record.status not in FINISHED or record.status == "diverged":
        return None
    if record.history.empty:
        return "has an empty history"
    history = record.history
    final = record.extra.get("final")
    last = {
        **history.iloc[-1].to_dict(),
        **({f"final {k}": v for k, v in final.items()} if isinstance(final, dict) else {}),
    }
    for name, value in last.items():
        if value is None:
            return f"has no value for {name}"
        if isinstance(value, float) and not math.isfinite(value):
            column = history.get(name)
            if column is not None and pd.to_numeric(column, errors="coerce").isna().all():
                continue  # a column this kind of run never fills (NaN throughout)
            return f"has a non-finite {name} ({value})"
    return None


class RunStore:
    """Records under ``<root>/<experiment>/<key>.json`` (root: ``STRUCTATTN_RUNS`` or data/runs)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else runs_dir()

    def remove_stale_tmp(self, experiment: str, older_than: float = 3600.0) -> None:
        """Delete the temp files of saves interrupted over ``older_than`` seconds ago (a
        save in progress keeps its file's time fresh)."""
        for tmp in (self.root / experiment).glob(".*.tmp"):
            try:
                if time.time() - tmp.stat().st_mtime > older_than:
                    tmp.unlink()
            except OSError:
                pass  # removed by another sweep meanwhile, or not ours to remove

    def path(self, experiment: str, key: str) -> Path:
        return self.root / experiment / f"{key}.json"

    def load(self, experiment: str, config: Any) -> RunRecord | None:
        """The finished record for this config, or None (missing, unfinished, corrupt or
        incomplete: the last two are set aside). StoreError when the path cannot be read."""
        key = config_hash(experiment, config)
        path = self.path(experiment, key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:  # e.g. a directory where the record should be
            raise StoreError(f"cannot read the run record {path}: {err}", err) from None
        try:  # a record that is not UTF-8 (a stray byte, re-saved as UTF-16) is corrupt too
            record = RunRecord.from_json(json.loads(raw.decode("utf-8")))
            if record.key != key or record.config != config_dict(config):
                raise ValueError("record does not match its config")
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            set_aside(path, path.with_suffix(".corrupt"), f"is corrupt ({err})")
            return None
        why = incomplete(record)
        if why is None and record.status in FINISHED:  # values in range, history length
            why = schemas.record_problem(record)
        if why is not None:
            set_aside(path, path.with_suffix(".corrupt"), f"is incomplete: it {why}")
            return None
        return record if record.status in FINISHED else None

    def save(self, record: RunRecord) -> Path:
        path = self.path(record.experiment, record.key)
        return atomic_write(path, "run record", lambda fh: json.dump(record.to_json(), fh))


def atomic_write(path: str | os.PathLike, what: str, write, binary: bool = False) -> Path:
    """``write(fh)`` to a temp file beside ``path``, then replace it (``files.replacing``):
    a crash mid-write never leaves half a file. Text is UTF-8. StoreError naming ``path``
    when it cannot be written (torch reports a full disk as a RuntimeError)."""
    path = Path(path)
    try:
        with files.replacing(path) as raw:
            if binary:
                write(raw)
            else:
                fh = io.TextIOWrapper(raw, encoding=files.ENCODING, newline="")
                write(fh)
                fh.flush()
                fh.detach()  # leave ``raw`` open for replacing to sync and close
    except (OSError, RuntimeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise StoreError(f"cannot write the {what} {path}: {first}", err) from None
    return path


def keep_committed_rows(
    path: str | os.PathLike,
    frame: pd.DataFrame,
    run_id: list[str],
    order: list[tuple],
    only_order: bool = False,
) -> pd.DataFrame:
    """``frame`` with the rows already in the committed file ``path`` of every run it does
    not hold (a run is its ``run_id`` values), in grid ``order``: a run store does not
    outlive its machine, so a grid exported (or partly retrained) in parts keeps the rows
    committed before. ``only_order`` drops the committed rows of runs outside ``order``
    (seeds another grid holds)."""
    ids = lambda f: f[run_id].astype(str).agg("|".join, axis=1)  # noqa: E731
    rank = {"|".join(map(str, run)): i for i, run in enumerate(order)}
    if Path(path).exists():
        old = pd.read_csv(path)
        if missing := [c for c in run_id if c not in old]:
            raise ValueError(f"{path} has no {', '.join(missing)} column to tell its runs "
                             "apart; re-key it before exporting into it")  # fmt: skip
        old = old[~ids(old).isin(set(ids(frame)))]
        if only_order:
            old = old[ids(old).isin(set(rank))]
        frame = pd.concat([old, frame], ignore_index=True)
    return frame.iloc[ids(frame).map(rank).fillna(len(rank)).argsort(kind="stable")]


def export_histories(
    records: list[RunRecord],
    path: str | os.PathLike,
    keep_order: list[str] | None = None,
    only_order: bool = False,
) -> Path:
    """One CSV row per (run, epoch), config as JSON: compact records to ship in git.

    Per-step gradient norms and other non-scalar extras are left out (the per-epoch
    mean and max norms stay), all but ``stack``, the seeds a run trained beside. A ``.gz``
    suffix compresses the repeated config column.
    ``keep_order`` (the grid's run keys in order) keeps the runs already in ``path`` that
    ``records`` do not hold (``keep_committed_rows``; with ``only_order``, those the grid
    still asks for).
    """
    frames = []
    for r in records:
        scalars = {k: v for k, v in r.extra.items() if isinstance(v, (int, float, str))}
        if "stack" in r.extra:  # the seeds it trained beside: its float32 numbers depend on them
            scalars["stack"] = [int(s) for s in r.extra["stack"]]
        meta = dict(experiment=r.experiment, key=r.key, version=r.version, device=r.device,
                    status=r.status, reason=r.reason, config=json.dumps(r.config, sort_keys=True),
                    extra=json.dumps(scalars, sort_keys=True))  # fmt: skip
        frames.append(r.history.assign(**meta)[[*meta, *r.history.columns]])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.concat(frames, ignore_index=True)
    if keep_order is not None:
        order = [(k,) for k in keep_order]
        frame = keep_committed_rows(path, frame, ["key"], order, only_order=only_order)
    files.write_csv(
        frame, path, index=False, float_format="%.6g", compression={"method": "infer", "mtime": 0}
    )
    return path


def load_histories(path: str | os.PathLike) -> list[RunRecord]:
    """The records written by :func:`export_histories`, in their original order. A file
    (or row) with no ``device`` reads as a CPU run: every such run trained on the CPU."""
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    meta = ["experiment", "key", "version", "device", "status", "reason", "config", "extra"]
    out = []
    for key, frame in table.groupby("key", sort=False):
        first = frame.iloc[0]
        device = first.get("device")
        out.append(
            RunRecord(
                experiment=first["experiment"],
                key=key,
                config=json.loads(first["config"]),
                history=frame.drop(columns=[c for c in meta if c in frame]).reset_index(drop=True),
                status=first["status"],
                reason=None if pd.isna(first["reason"]) else first["reason"],
                version=first["version"],
                device="cpu" if device is None or pd.isna(device) else device,
                extra=json.loads(first["extra"]),
            )
        )
    return out
