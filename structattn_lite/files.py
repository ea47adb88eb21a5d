"""Every file the project writes is written whole or not at all: to a temporary file in
the target's folder, flushed to disk, then moved over the target (``os.replace``), so a
kill or a failed write at any point leaves the old file or the new one, never half of
one. Text is always UTF-8, whatever the locale says.

``check_writable`` is the look before a batch of writes (``findings --write``,
``figures``): every target a file, every folder one this process may write, before
anything is written. Nothing here imports more than the standard library.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

ENCODING = "utf-8"


class WriteRefused(ValueError):
    """A file that cannot be written where it must go (a directory in its place, a folder
    that cannot be written); the one-line message names the path."""


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """A binary file handle on a temporary file beside ``path``; when the block ends
    without an error the file is flushed, synced and moved over ``path``. On an error
    the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():  # keep the mode of the file replaced (mkstemp's is 0600)
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(path.parent)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (where the platform lets a folder be synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """``data`` into ``path``, whole or not at all; an OSError whose one-line message
    names ``path`` when it cannot be written (a full disk, a folder in its place)."""
    try:
        with replacing(path) as fh:
            fh.write(data)
    except OSError as err:
        why = err.strerror or str(err).strip() or type(err).__name__
        raise OSError(err.errno, f"cannot write {path}: {why.splitlines()[0]}") from err
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """``text`` into ``path`` as UTF-8 (newlines as given), whole or not at all."""
    return write_bytes(path, text.encode(ENCODING))


def read_text(path: str | os.PathLike) -> str:
    """A text file the project wrote (UTF-8, whatever the locale)."""
    return Path(path).read_text(encoding=ENCODING)


def csv_bytes(frame: Any, path: str | os.PathLike, **to_csv: Any) -> bytes:
    """The bytes ``frame.to_csv(path, **to_csv)`` writes to ``path``, byte for byte (UTF-8;
    gzip-compressed when ``compression`` or a ``.gz`` suffix says so, with ``path``'s
    name in the gzip header as pandas puts it there), made in memory."""
    compression = to_csv.pop("compression", "infer")
    if isinstance(compression, str):
        compression = {"method": compression}
    method = compression.get("method")
    if method == "infer":
        method = "gzip" if str(path).endswith(".gz") else None
    if method not in (None, "gzip"):
        raise ValueError(f"compression={method!r} is not written here; use gzip or none")
    buffer = io.BytesIO()
    if method == "gzip":  # pandas names the file in the header only when given a path
        compression = {**compression, "method": "gzip", "filename": str(path)}
        frame.to_csv(buffer, compression=compression, encoding=ENCODING, **to_csv)
    else:
        frame.to_csv(buffer, compression=None, encoding=ENCODING, **to_csv)
    return buffer.getvalue()


def write_csv(frame: Any, path: str | os.PathLike, **to_csv: Any) -> Path:
    """``frame.to_csv(path, **to_csv)``, whole or not at all (see ``csv_bytes``)."""
    return write_bytes(path, csv_bytes(frame, path, **to_csv))


def figure_bytes(fig: Any, fmt: str, **savefig: Any) -> bytes:
    """What ``fig.savefig`` writes as ``fmt`` ("png", "pdf"), in memory."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, **savefig)
    return buffer.getvalue()


def problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be written by replacing it, or None: a directory (or other
    non-file) where the file goes, a file where a folder of its path goes, or a folder
    this process may not write."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a directory where a file must be written; move it away"
    if path.exists() and not path.is_file():
        return f"{path} is not a regular file; move it away"
    folder = path.parent
    while not folder.exists():  # the folders to be made: the nearest that exists decides
        if folder.is_symlink():
            return f"{folder} is a broken link where a folder of {path} must be"
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file where a folder of {path} must be; move it away"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write {path}: the folder {folder} is not writable"
    return None


def check_writable(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """``paths`` as Paths when each can be written by ``write_bytes``; else a
    ``WriteRefused`` naming the first that cannot (before any is written)."""
    paths = [Path(p) for p in paths]
    for path in paths:
        if (why := problem(path)) is not None:
            raise WriteRefused(why)
    return paths
