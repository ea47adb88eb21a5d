"""`make study` a person can follow: each sweep reports its runs done out of its total to
the STRUCTATTN_PROGRESS file, `run_notebooks` prints a notebook's progress while it runs,
and at the end a table of how long each notebook took and what it wrote where."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import nbformat
import pytest
from notebook_support import code_notebook
from toy_study import Toy, ToyStudy

from structattn_lite import notebook_runner as nr
from structattn_lite.records import RunStore
from structattn_lite.runs import PROGRESS_ENV, read_progress, sweep


def test_a_sweep_reports_its_runs_done_out_of_its_total(tmp_path, monkeypatch):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv(PROGRESS_ENV, str(progress))
    store, grid = RunStore(tmp_path / "runs"), [Toy(lr=0.1), Toy(lr=0.2), Toy(lr=0.3)]
    sweep(ToyStudy(), grid, store=store, progress=False)
    reports = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [r["done"] for r in reports] == [0, 1, 2, 3, 3]  # start, each run, the end
    assert {r["total"] for r in reports} == {3} and {r["experiment"] for r in reports} == {"toy"}
    assert read_progress(progress) == (3, 3)
    sweep(ToyStudy(), [*grid, Toy(lr=0.4)], store=store, only_cached=True)  # a second sweep
    assert read_progress(progress) == (6, 7)


def test_no_progress_file_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    sweep(ToyStudy(), [Toy()], store=RunStore(tmp_path / "runs"), progress=False)
    assert list(tmp_path.glob("*.jsonl")) == []


def test_read_progress_skips_a_line_still_being_written(tmp_path):
    path = tmp_path / "p.jsonl"
    assert read_progress(path) == (0, 0)
    line = {"experiment": "toy", "sweep": "a", "done": 2, "total": 4}
    path.write_text(json.dumps(line) + "\n" + '{"experiment": "toy", "sw')
    assert read_progress(path) == (2, 4)


def test_elapsed_reads_as_a_clock():
    assert nr.elapsed(5) == "0:05"
    assert nr.elapsed(8.5 * 60) == "8:30"
    assert nr.elapsed(3725) == "1:02:05"


def test_study_summary_names_each_notebook_its_time_runs_and_files():
    rows = [
        {"notebook": "01_theory.ipynb", "seconds": 12, "done": 0, "total": 0,
         "written": ["reports/01_theory.ipynb", "reports/01_theory.html"]},
        {"notebook": "02_attention_variants.ipynb", "seconds": 510, "done": 40, "total": 42,
         "written": ["reports/02_attention_variants.html", "reports/quick/02_a.png"]},
    ]  # fmt: skip
    text = nr.study_summary(rows)
    assert (
        "| 01_theory.ipynb | 0:12 | - | reports/01_theory.ipynb, reports/01_theory.html |" in text
    )
    assert "| 02_attention_variants.ipynb | 8:30 | 40/42 |" in text
    assert "reports/quick/02_a.png" in text
    assert "| all (2) | 8:42 |" in text


def test_run_notebooks_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="every"):
        nr.run_notebooks("smoke", every=0)


def _tiny_study(tmp_path, monkeypatch, code: str):
    """`make study` over one notebook of ``code`` (09_tiny.ipynb; HTML export stubbed):
    the folder its reports go to."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(code_notebook(code), folder / "09_tiny.ipynb")
    monkeypatch.setattr(nr, "notebooks", lambda only=None: [folder / "09_tiny.ipynb"])

    def fake_html(notebook, out_dir=None):  # the offline assets need npm; not under test
        target = out_dir / notebook.with_suffix(".html").name
        target.write_text("<html></html>")
        return target

    monkeypatch.setattr(nr, "export_html", fake_html)
    monkeypatch.setenv("PYTHONPATH", str(nr.repo_root()))
    return tmp_path / "reports"


def test_make_study_shows_a_notebooks_runs_while_it_runs_and_sums_up(tmp_path, monkeypatch, capsys):
    """A tiny notebook whose kernel reports runs through the inherited variable, waits, and
    draws a figure into the profile's folder: the lines while it runs count its runs, the
    summary lists its report and its figure."""
    code = (
        "import time\n"
        "from structattn_lite.config import figures_dir\n"
        "from structattn_lite.runs import report_progress\n"
        "report_progress('toy', 'one', 2, 5)\n"
        "figures_dir('smoke').mkdir(parents=True, exist_ok=True)\n"
        "(figures_dir('smoke') / '09_tiny_figure.png').write_bytes(b'png')\n"
        "time.sleep(2.5)\n"
    )
    reports = _tiny_study(tmp_path, monkeypatch, code)
    assert nr.run_notebooks("smoke", out_dir=reports, every=0.5) == [reports / "09_tiny.html"]
    out = capsys.readouterr().out
    assert re.search(r"\[study\] 09_tiny\.ipynb: 2/5 runs done, \d+:\d\d elapsed", out), out
    assert re.search(r"\[study\] 09_tiny\.ipynb: finished in \d+:\d\d, 2/5 runs done", out)
    summary = out[out.index("[study] summary") :]
    assert re.search(
        r"\| 09_tiny\.ipynb \| \d+:\d\d \| 2/5 \| .*09_tiny\.ipynb, .*09_tiny\.html", summary
    )
    assert "09_tiny_figure.png" in summary
    assert not list(reports.glob(".*.progress.jsonl"))  # the progress file is cleaned up


def test_make_study_kernels_run_over_ipc_so_no_tcp_warning(tmp_path, monkeypatch, capfd):
    """`make study` printed ipykernel's "Kernel is running over TCP without encryption"
    once per notebook: its kernels now listen on Unix sockets (IPC transport), so the
    warning has no cause. The kernel says which transport it runs on; the output of the
    runner and of the kernel it started (fd level, the kernel's stderr included) has no
    such line, and the sockets' folder is gone afterwards."""
    code = (
        "from ipykernel.kernelapp import IPKernelApp\n"
        "app = IPKernelApp.instance()\n"
        "print('transport:', app.transport, 'ip:', app.ip)\n"
    )
    reports = _tiny_study(tmp_path, monkeypatch, code)
    nr.run_notebooks("smoke", out_dir=reports, every=60)
    captured = capfd.readouterr()
    both = captured.out + captured.err
    assert "without encryption" not in both and "IPKernelApp" not in both, both
    printed = nbformat.read(reports / "09_tiny.ipynb", as_version=4).cells[-1].outputs[0].text
    assert "transport: ipc" in printed, printed
    sockets = Path(printed.split("ip: ")[1].strip()).parent.parent
    assert sockets.name.startswith("structattn-kernels-") and not sockets.exists()


def test_a_finished_kernel_is_shut_down_without_a_sigint(tmp_path):
    """jupyter_client sends SIGINT before every shutdown; a kernel still answering a late
    message then logs "KeyboardInterrupt caught in kernel." on `make study`'s output (CI saw
    it once under load). The study's kernels shut down without that signal: a SIGINT
    handler in the kernel that would write a file never runs, while an interrupt asked for
    during the run (a cell past its timeout) still reaches it."""
    marks = tmp_path / "sigints"
    code = (
        f"def mark(*_): open({str(marks)!r}, 'a').write('sigint\\n')\n"
        # ipykernel restores its idle handler after each message: replace that one
        "get_ipython().kernel.saved_sigint_handler = mark\n"
    )

    async def run() -> tuple[str, str]:
        (tmp_path / "sockets").mkdir()
        km = nr.ipc_kernel_manager(tmp_path / "sockets")()
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            await kc.execute_interactive(code, timeout=60)
            await km.interrupt_kernel()  # asked for during the run: reaches the kernel
            await asyncio.sleep(0.5)
            during = marks.read_text() if marks.exists() else ""
        finally:
            kc.stop_channels()
            await km.shutdown_kernel()
        await asyncio.sleep(0.5)
        return during, marks.read_text() if marks.exists() else ""

    during, after = asyncio.run(run())
    assert during == "sigint\n", during
    assert after == during, "the shutdown sent a SIGINT"
