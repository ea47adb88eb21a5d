"""Every file the project writes is written whole or not at all (``structattn_lite.files``):
a process killed mid-write, or a write that raises, leaves the old file; ``findings
--write`` and ``figures`` look at every target before writing any, and name the first in
the way in one line; text is UTF-8 whatever the locale says.

Faults are injected by wrapping ``open`` (which ``Path.write_text``, pandas, matplotlib
and ``os.fdopen`` all call) so that a write to a chosen file writes half its bytes, then
kills the process (SIGKILL) or raises, in a subprocess or under monkeypatch."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Wraps io.open / builtins.open: a file opened for writing whose name holds FAULT_AT gets a
# handle that writes half of what it is given, flushes it to the file, then fails as
# FAULT says ("kill": SIGKILL this process; "raise": OSError ENOSPC).
FAULTS = textwrap.dedent(
    """
    import builtins, errno, io, os, signal

    _real_open = io.open

    def _name(file):
        if isinstance(file, int):
            return os.readlink(f"/proc/self/fd/{file}")
        return os.fspath(file)

    class _Failing:
        def __init__(self, fh, how):
            self._fh, self._how = fh, how

        def write(self, data):
            self._fh.write(data[: len(data) // 2])
            self._fh.flush()
            if self._how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._fh.__exit__(*exc)

        def __iter__(self):
            return iter(self._fh)

        def __getattr__(self, name):
            return getattr(self._fh, name)

    def install(fault_at, how):
        def opener(file, mode="r", *args, **kwargs):
            fh = _real_open(file, mode, *args, **kwargs)
            writing = any(c in mode for c in "wax+")
            if writing and fault_at in os.path.basename(_name(file)):
                return _Failing(fh, how)
            return fh

        io.open = builtins.open = opener
    """
)


@pytest.fixture
def checkout(tmp_path):
    """A stand-in checkout for ``findings --write``: a README whose findings section and a
    LEDGER.md that are stale (so the new ones differ), a copy of data/results and an
    empty figures folder. Returns (root, results, figures)."""
    from structattn_lite import findings

    root, results, figures = tmp_path / "root", tmp_path / "results", tmp_path / "figures"
    root.mkdir()
    figures.mkdir()
    shutil.copytree(ROOT / "data" / "results", results)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = findings.readme_section(readme)
    (root / "README.md").write_text(readme.replace(section, "a stale section"), encoding="utf-8")
    (root / findings.LEDGER_MD).write_text("# a stale ledger\n", encoding="utf-8")
    return root, results, figures


def run_findings_write(checkout, env=None, fault=None) -> subprocess.CompletedProcess:
    """``structattn findings --write`` into ``checkout`` in a subprocess (``repo_root``
    pointed at it), with ``fault`` = (file name, "kill" or "raise") injected."""
    root, results, figures = checkout
    code = FAULTS + textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from structattn_lite import cli, findings
        findings.repo_root = lambda: Path({str(root)!r})
        FAULT = {fault!r}
        if FAULT is not None:
            install(*FAULT)
        sys.exit(cli.main(["findings", "--write"]))
        """
    )
    full = {**os.environ, "STRUCTATTN_RESULTS": str(results), "STRUCTATTN_FIGURES": str(figures)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**full, **(env or {})}
    )


def snapshot(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["README.md", "LEDGER.md"])
def test_a_process_killed_mid_write_leaves_the_old_file_whole(checkout, name):
    root = checkout[0]
    before = (root / name).read_bytes()
    done = run_findings_write(checkout, fault=(name, "kill"))
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert (root / name).read_bytes() == before, f"{name} was left half-written"


def test_a_write_that_raises_leaves_the_old_file_and_one_line(checkout):
    root = checkout[0]
    before = snapshot(root)
    done = run_findings_write(checkout, fault=("LEDGER.md", "raise"))
    assert done.returncode == 1, done.stderr[-2000:]
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "LEDGER.md" in err and "No space" in err, err
    assert snapshot(root) == before  # LEDGER.md old, README.md not reached, no temp file left


def test_findings_write_in_the_c_locale_writes_utf8(checkout):
    from structattn_lite import claims, findings

    done = run_findings_write(checkout, env={"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    root, results, _ = checkout
    ledger = (root / findings.LEDGER_MD).read_bytes()
    assert "±".encode() in ledger  # not ASCII: the locale's codec could not have written it
    assert ledger == (ROOT / findings.LEDGER_MD).read_bytes()
    assert (results / claims.CLAIMS_CSV).read_bytes() == claims.path().read_bytes()
    section = findings.readme_section((root / "README.md").read_text(encoding="utf-8"))
    assert section == findings.readme_section()


@pytest.mark.parametrize(
    "in_the_way, named",
    [("figure", "findings_length.png"), ("ledger", "LEDGER.md"), ("markers", "README.md")],
    ids=["a directory where a figure goes", "a directory where LEDGER.md goes", "no end marker"],
)
def test_findings_write_refuses_in_one_line_before_writing_anything(
    checkout, monkeypatch, capsys, in_the_way, named
):
    from structattn_lite import cli, findings

    root, results, figures = checkout
    if in_the_way == "figure":
        (figures / "findings_length.png").mkdir()  # the last figure written
    elif in_the_way == "ledger":
        (root / "LEDGER.md").unlink()
        (root / "LEDGER.md").mkdir()
    else:
        readme = root / "README.md"
        readme.write_text(readme.read_text(encoding="utf-8").replace(findings.END, ""))
    (results / "claims.csv").write_text("id,claim\nstale,row\n")  # rewritten by a write
    monkeypatch.setenv("STRUCTATTN_RESULTS", str(results))
    monkeypatch.setenv("STRUCTATTN_FIGURES", str(figures))
    monkeypatch.setattr(findings, "repo_root", lambda: root)
    monkeypatch.setattr(findings, "check_committed", lambda: None)  # the stale claims.csv
    before = snapshot(root, results, figures)
    assert cli.main(["findings", "--write"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "Traceback" not in err, err
    assert snapshot(root, results, figures) == before  # nothing written, not even claims.csv


def test_figures_refuse_a_directory_in_the_way_before_drawing_anything(
    tmp_path, monkeypatch, capsys
):
    from structattn_lite import cli, committed_figures

    folder = tmp_path / "figures"
    last = list(committed_figures.FIGURES)[-1]
    (folder / f"{last}.png").mkdir(parents=True)
    monkeypatch.setenv("STRUCTATTN_FIGURES", str(folder))
    assert cli.main(["figures"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{last}.png" in err and "directory" in err, err
    assert [p.name for p in folder.iterdir()] == [f"{last}.png"]  # nothing drawn


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any folder")
def test_figures_refuse_an_unwritable_folder_in_one_line(tmp_path, monkeypatch, capsys):
    from structattn_lite import cli

    folder = tmp_path / "figures"
    folder.mkdir()
    folder.chmod(0o555)
    monkeypatch.setenv("STRUCTATTN_FIGURES", str(folder))
    try:
        assert cli.main(["figures"]) == 1
    finally:
        folder.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not writable" in err and str(folder) in err, err


def test_a_figure_killed_mid_write_leaves_the_old_png(tmp_path):
    """``report.save_figure`` (what every figure is written by) killed while writing."""
    png = tmp_path / "01_demo.png"
    png.write_bytes(b"the old figure")
    code = FAULTS + textwrap.dedent(
        f"""
        from pathlib import Path
        import matplotlib.pyplot as plt
        from structattn_lite.report import save_figure
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        install("01_demo.png", "kill")
        save_figure(fig, "01", "demo", out=Path({str(tmp_path)!r}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert png.read_bytes() == b"the old figure"


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_an_export_that_raises_leaves_the_old_file(tmp_path, monkeypatch, suffix):
    """``records.export_histories`` (what the studies' exports write through) failing
    mid-write: the committed file stays as it was, and no temp file is left."""
    import builtins
    import io

    import pandas as pd

    from structattn_lite.records import RunRecord, export_histories

    path = tmp_path / f"histories{suffix}"
    path.write_bytes(b"the old export")
    record = RunRecord("demo", "k0", {"seed": 0}, pd.DataFrame({"epoch": [1], "acc": [0.5]}))
    real = io.open

    def failing(file, mode="r", *args, **kwargs):
        fh = real(file, mode, *args, **kwargs)
        name = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else str(file)
        if "w" in mode and "histories" in os.path.basename(name):
            fh.write(b"half" if "b" in mode else "half")
            fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return fh

    monkeypatch.setattr(io, "open", failing)
    monkeypatch.setattr(builtins, "open", failing)
    with pytest.raises(OSError, match="No space"):
        export_histories([record], path)
    monkeypatch.undo()
    assert path.read_bytes() == b"the old export"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
