"""Run records and the store that keeps them.

A record carries the config, seed, package version, status and per-epoch history, so
every number in a table can be traced to the run that made it. The store keys each
record by a hash of its full config and writes it atomically; a finished record on disk
is reused, a corrupt one reported, set aside and recomputed (see ``runs.sweep``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from structattn_lite import __version__
from structattn_lite.config import runs_dir


def config_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-able dict of a (frozen dataclass) config."""
    if dataclasses.is_dataclass(config):
        return json.loads(json.dumps(dataclasses.asdict(config)))
    return json.loads(json.dumps(dict(config)))


def config_hash(experiment: str, config: Any) -> str:
    """Stable 16-hex key of the experiment name and the full config."""
    blob = json.dumps({"experiment": experiment, "config": config_dict(config)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
    torch_version: str = torch.__version__

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
FINISHED = ("ok", "early_stop", "diverged")


class CorruptRecordWarning(UserWarning):
    """A record on disk could not be read; it was moved aside and the run recomputed."""


class RunStore:
    """Records under ``<root>/<experiment>/<key>.json`` (root: ``STRUCTATTN_RUNS`` or data/runs)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else runs_dir()

    def path(self, experiment: str, key: str) -> Path:
        return self.root / experiment / f"{key}.json"

    def load(self, experiment: str, config: Any) -> RunRecord | None:
        """The finished record for this config, or None (missing, unfinished or corrupt)."""
        key = config_hash(experiment, config)
        path = self.path(experiment, key)
        if not path.exists():
            return None
        try:
            record = RunRecord.from_json(json.loads(path.read_text()))
            if record.key != key or record.config != config_dict(config):
                raise ValueError("record does not match its config")
        except (ValueError, KeyError, TypeError) as err:
            aside = _free_name(path.with_suffix(".corrupt"))  # never overwrite an older one
            os.replace(path, aside)
            warnings.warn(
                f"run record {path} is corrupt ({err}); moved to {aside.name} and recomputing",
                CorruptRecordWarning,
                stacklevel=2,
            )
            return None
        return record if record.status in FINISHED else None

    def save(self, record: RunRecord) -> Path:
        """Write atomically: a crash mid-write never leaves a half record behind."""
        path = self.path(record.experiment, record.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{record.key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(record.to_json(), fh)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def records(self, experiment: str) -> list[RunRecord]:
        """Every readable record of an experiment (for browsing widgets)."""
        out = []
        for path in sorted((self.root / experiment).glob("*.json")):
            try:
                out.append(RunRecord.from_json(json.loads(path.read_text())))
            except (ValueError, KeyError, TypeError):
                warnings.warn(
                    f"skipping corrupt run record {path}", CorruptRecordWarning, stacklevel=2
                )
        return out


def _free_name(path: Path) -> Path:
    """``path``, or ``path.1``, ``path.2``, ... whichever does not exist yet."""
    candidate, k = path, 0
    while candidate.exists():
        k += 1
        candidate = path.with_name(f"{path.name}.{k}")
    return candidate


def export_histories(records: list[RunRecord], path: str | os.PathLike) -> Path:
    """One CSV row per (run, epoch), config as JSON: compact records to ship in git.

    Per-step gradient norms and other non-scalar extras are left out (the per-epoch
    mean and max norms stay). A ``.gz`` suffix compresses the repeated config column.
    """
    frames = []
    for r in records:
        frame = r.history.copy()
        scalars = {k: v for k, v in r.extra.items() if isinstance(v, (int, float, str))}
        frame.insert(0, "extra", json.dumps(scalars, sort_keys=True))
        frame.insert(0, "config", json.dumps(r.config, sort_keys=True))
        frame.insert(0, "reason", r.reason)
        frame.insert(0, "status", r.status)
        frame.insert(0, "version", r.version)
        frame.insert(0, "key", r.key)
        frame.insert(0, "experiment", r.experiment)
        frames.append(frame)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_csv(
        path, index=False, float_format="%.6g", compression={"method": "infer", "mtime": 0}
    )
    return path


def load_histories(path: str | os.PathLike) -> list[RunRecord]:
    """The records written by :func:`export_histories`, in their original order."""
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    meta = ["experiment", "key", "version", "status", "reason", "config", "extra"]
    out = []
    for key, frame in table.groupby("key", sort=False):
        first = frame.iloc[0]
        out.append(
            RunRecord(
                experiment=first["experiment"],
                key=key,
                config=json.loads(first["config"]),
                history=frame.drop(columns=meta).reset_index(drop=True),
                status=first["status"],
                reason=None if pd.isna(first["reason"]) else first["reason"],
                version=first["version"],
                extra=json.loads(first["extra"]),
            )
        )
    return out
