"""A per-run lock, so two processes never train the same config at once.

An OS file lock (``filelock.FileLock``: ``flock`` on the run's ``.lock`` file), waited
for at most ``ACQUIRE_WAIT_S``: a run whose lock another process holds is skipped. The
OS releases a lock when its process ends, however it ends, so the lock of a process that
died is free at once, and a lock file no process holds (left by a crash, empty or
garbage) is simply taken. The holder writes its pid, host and start time into the file,
so a refused run can say who has it; on release the holder removes the file (filelock
retries a lock taken on a file removed meanwhile).
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

# A run waits this long for its lock before it is skipped: long enough to ride out another
# process's ``held`` probe (which takes a free lock for microseconds), short beside any run.
ACQUIRE_WAIT_S = 0.1


class RunLockedError(RuntimeError):
    """Another live process holds the lock of this run."""


class RunLock:
    """``with RunLock(path): train()``; a lock held elsewhere raises RunLockedError."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = FileLock(
            self.path, timeout=ACQUIRE_WAIT_S, thread_local=False, on_acquired=self._own
        )
        self._ours: os.stat_result | None = None  # the file we locked, while we hold it

    def _own(self, fd: int) -> None:
        """Write who holds the lock into the file just locked (filelock's callback)."""
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "time": time.strftime("%Y-%m-%d %H:%M:%S %z")}  # fmt: skip
        os.ftruncate(fd, 0)
        with os.fdopen(os.dup(fd), "w") as fh:  # a full disk raises: filelock rolls back
            fh.write(json.dumps(owner))
        self._ours = os.fstat(fd)

    def owner(self) -> dict[str, Any] | None:
        """The holder's pid, host and time as its file says ({} when unreadable), or None
        when there is no lock file."""
        try:
            owner = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return owner if isinstance(owner, dict) else {}

    def held(self) -> bool:
        """Whether some process (this one included, through another RunLock) holds it."""
        if not self.path.exists():
            return False
        probe = FileLock(self.path, timeout=0, thread_local=False)
        try:
            probe.acquire()
        except Timeout:
            return True
        probe.release()
        return False

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            owner = self.owner() or {}
            who = (f"process {owner.get('pid')} on {owner.get('host')} since {owner.get('time')}"
                   if owner else "another process")  # fmt: skip
            raise RunLockedError(
                f"this run is already being trained by {who} (lock file {self.path}). Wait for "
                "it to finish; its lock goes when its process ends, however it ends."
            ) from None
        except OSError:  # the owner could not be written (a full disk): leave no file
            probe = FileLock(self.path, timeout=0, thread_local=False)
            with suppress(OSError, Timeout), probe:  # removed under a lock: no one else's
                self.path.unlink()
            raise
        return self

    def release(self) -> None:
        """Remove the lock file if it is still the one we locked, then unlock."""
        if not self._lock.is_locked:
            return
        with suppress(OSError):
            if self._ours is not None and os.path.samestat(os.stat(self.path), self._ours):
                self.path.unlink()
        self._ours = None
        self._lock.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
