"""A per-run lock file, so two processes never train the same config at once.

The lock is a file created with ``O_CREAT | O_EXCL`` (atomic on local disks and NFSv3+)
holding the owner's pid, host name and start time. A lock is stale, and is taken over,
when its pid is no longer alive on this host or when the file has not been touched for
``stale_after`` seconds (a holder on another host cannot be probed; long runs call
:meth:`RunLock.refresh` to say they are still alive).
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
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, OSError):
            return {}  # half-written or garbage: judged by its age alone

    def stale_reason(self, owner: dict[str, Any]) -> str | None:
        """Why this lock may be taken over, or None when its holder may still be alive."""
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return "released meanwhile"
        if age > self.stale_after:
            return f"untouched for {age:.0f} s (stale_after={self.stale_after:.0f} s)"
        pid, host = owner.get("pid"), owner.get("host")
        if host == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid):
            return f"its process {pid} is no longer alive on {host}"
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
            with os.fdopen(fd, "w") as fh:
                fh.write(token)
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
            if json.loads(aside.read_text() or "{}") != seen:
                # A live holder re-took it between our read and our rename: restore it
                # (link fails if yet another process already holds the path).
                try:
                    os.link(aside, self.path)
                except FileExistsError:
                    pass
        except ValueError:
            pass  # still garbage: gone for good
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
            f"it to finish, or delete the lock file if that process is gone; a lock untouched "
            f"for {self.stale_after:.0f} s is taken over automatically."
        )

    def refresh(self) -> None:
        """Touch the lock so other hosts see its holder is alive (call every few minutes)."""
        if self.token is not None:
            os.utime(self.path)

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
