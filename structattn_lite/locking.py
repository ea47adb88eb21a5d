"""A per-run lock file, so two processes never train the same config at once.

The lock is a file created with ``O_CREAT | O_EXCL`` (atomic on local disks and NFSv3+)
holding the owner's pid, host name and start time. A lock is judged by its holder's
process first: one whose pid is alive on this host is never taken over, whatever its
age, and one whose pid is gone is taken over at once. A holder on another host cannot
be probed, so its lock is taken over once the file has not been touched for
``stale_after`` seconds (long runs call :meth:`RunLock.refresh` at each checkpoint to
say they are still alive). An empty or garbage lock (a full disk, a crash mid-write) is
taken over once it is a few seconds old, past any write in progress.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from structattn_lite.config import check_number

DEFAULT_STALE_AFTER = 24 * 3600.0  # longer than any single run of the paper profile
UNREADABLE_AFTER = 10.0  # seconds: an unreadable lock older than this is no write in progress


class RunLockedError(RuntimeError):
    """Another live process holds the lock of this run."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (signal 0 probes, sends nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _parse_owner(text: str) -> dict[str, Any]:
    """A lock file's content; {} when empty, half-written or garbage."""
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


class RunLock:
    """``with RunLock(path): train()``; a live lock held elsewhere raises RunLockedError."""

    def __init__(self, path: str | os.PathLike, stale_after: float = DEFAULT_STALE_AFTER):
        self.path = Path(path)
        self.stale_after = check_number("stale_after", stale_after, minimum=0, strict=True)
        self.token: str | None = None  # our own lock's content while we hold it

    # --- what a lock file says -----------------------------------------------------

    def owner(self) -> dict[str, Any] | None:
        """The holder's pid, host and time, or None when unlocked (or unreadable)."""
        try:
            return _parse_owner(self.path.read_text())
        except FileNotFoundError:
            return None
        except OSError:
            return {}

    def stale_reason(self, owner: dict[str, Any]) -> str | None:
        """Why this lock may be taken over, or None when its holder may still be alive."""
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return "released meanwhile"
        pid, host = owner.get("pid"), owner.get("host")
        if not (isinstance(pid, int) and isinstance(host, str)):
            # No holder named: written just now by a process still writing, or never whole.
            return f"unreadable and {age:.0f} s old" if age > UNREADABLE_AFTER else None
        if host == socket.gethostname():  # liveness decides, whatever the age
            return None if pid_alive(pid) else f"its process {pid} is no longer alive on {host}"
        if age > self.stale_after:
            return f"untouched for {age:.0f} s (stale_after={self.stale_after:.0f} s)"
        return None

    # --- acquire / release -----------------------------------------------------------

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        token = json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "time": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "id": uuid.uuid4().hex,
            }
        )
        for _ in range(3):  # a stale lock is broken at most a couple of times before giving up
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self.owner()
                if owner is None:
                    continue  # released between our open and our read
                if self.stale_reason(owner) is None:
                    raise RunLockedError(self._held_message(owner)) from None
                self._break(owner)
                continue
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write(token)
            except OSError:  # a full disk: leave no empty lock behind to block the run
                self.path.unlink(missing_ok=True)
                raise
            self.token = token
            return self
        raise RunLockedError(f"could not take the lock {self.path}: it keeps being re-created")

    def _break(self, seen: dict[str, Any]) -> None:
        """Move a stale lock aside; if it changed since we judged it, put it back."""
        aside = self.path.with_name(f"{self.path.name}.stale-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # someone else broke or released it first
        try:
            if _parse_owner(aside.read_text()) != seen:
                # A live holder re-took it between our read and our rename: restore it
                # (link fails if yet another process already holds the path).
                try:
                    os.link(aside, self.path)
                except FileExistsError:
                    pass
        finally:
            aside.unlink(missing_ok=True)

    def _held_message(self, owner: dict[str, Any]) -> str:
        who = (
            f"process {owner.get('pid')} on {owner.get('host')} since {owner.get('time')}"
            if owner
            else "an unreadable lock file"
        )
        return (
            f"this run is already being trained by {who} (lock file {self.path}). Wait for "
            f"it to finish. A lock whose process is gone from this host is taken over at "
            f"once; one held on another host once untouched for {self.stale_after:.0f} s."
        )

    def refresh(self) -> None:
        """Touch the lock so other hosts see its holder is alive (call every few minutes).

        Only while the lock is still ours, and never raising: a lost refresh only makes
        the lock look older to other hosts."""
        if self.token is None:
            return
        try:
            if self.path.read_text() == self.token:
                os.utime(self.path)
        except OSError:
            pass

    def release(self) -> None:
        """Remove the lock if it is still ours (never someone else's that took it over)."""
        if self.token is None:
            return
        try:
            if self.path.read_text() == self.token:
                self.path.unlink()
        except FileNotFoundError:
            pass
        self.token = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
