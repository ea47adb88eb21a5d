"""Execute the numbered notebooks with papermill and render them to HTML reports.

The reports read correctly with no network: MathJax (from the ``jupyter-server-mathjax``
package) and the widget manager that draws the saved widget state (npm's
``@jupyter-widgets/html-manager`` with ``requirejs``) are copied into ``reports/assets/`` at
export time and the HTML points there, not at a CDN. Nothing vendored is committed: the npm
tarballs are fetched once with ``npm pack`` into the virtual environment's share folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from structattn_lite import files
from structattn_lite.config import check_number, check_profile, repo_root
from structattn_lite.runs import PROGRESS_ENV, read_progress

# ipywidgets 8 saves widget state version 2, which html-manager 1.x draws.
NPM_PACKAGES = {"html-manager": "@jupyter-widgets/html-manager@^1.0", "requirejs": "requirejs@^2.3"}
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"

# jupyter-server-mathjax ships MathJax 2 with the STIX-Web fonts only (no TeX fonts): say so,
# or MathJax looks for fonts that are not there and falls back to the system's. MathJax 2 has
# no mathtools extension, so its small matrices with delimiters (psmallmatrix, as in
# notebook 01) are defined here on AMSmath's smallmatrix, as mathtools defines them.
_MATHJAX_CONFIG = """<script type="text/x-mathjax-config">
MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null}});
MathJax.Hub.Register.StartupHook("TeX AMSmath Ready", function () {
  var small = function (open, close) { return ["Array", null, open, close, "c", "0.333em", ".2em", "S", 1]; };
  MathJax.InputJax.TeX.Definitions.Add({environment: {
    psmallmatrix: small("(", ")"), bsmallmatrix: small("[", "]"), Bsmallmatrix: small("\\\\{", "\\\\}"),
    vsmallmatrix: small("\\\\vert", "\\\\vert"), Vsmallmatrix: small("\\\\Vert", "\\\\Vert")
  }}, null, true);
});
</script>
"""

# A report draws each widget's saved view, but no kernel answers its controls: say so above
# every widget area that has controls, and grey the controls out so none looks live.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SNAPSHOT_NOTE = (
    "Snapshot: the view saved when this notebook ran; its controls do nothing here. "
    "Open the notebook in JupyterLab to change this."
)
_SNAPSHOT_STYLE = """<style>
.structattn-snapshot { margin: 4px 0; padding: 4px 8px; border-left: 4px solid #b58900;
  background: #fdf6e3; font-size: 0.9em; }
.jp-OutputArea-output .jupyter-widgets :is(select, input, textarea, button, .noUi-target) {
  pointer-events: none; opacity: 0.55; }
</style>
"""
_CONTROL_MODELS = ("Dropdown", "Select", "Slider", "Text", "Checkbox", "Toggle", "Button",
                   "Radio", "Combobox", "Picker", "Play")  # fmt: skip


# Report tables are read, not skimmed: no cell or column is cut to "...", and floats show
# three decimals (pandas turns to scientific notation where three would hide a value). Set
# in each report's kernel before its first cell; a notebook's own set_option still wins.
REPORT_PANDAS_OPTIONS = {
    "display.max_colwidth": None,
    "display.max_columns": None,
    "display.precision": 3,
}


def kernel_arguments() -> list[str]:
    """The report kernel's command-line arguments: ``REPORT_PANDAS_OPTIONS`` set at start."""
    pairs = ", ".join(f"{k!r}, {v!r}" for k, v in REPORT_PANDAS_OPTIONS.items())
    return [f'--IPKernelApp.exec_lines=__import__("pandas").set_option({pairs})']


def ipc_kernel_manager(sockets: Path) -> type:
    """A kernel manager class whose kernels listen on Unix sockets under ``sockets`` (IPC
    transport), not on localhost TCP ports. Over TCP with no encryption key ipykernel warns
    on every start ("Kernel is running over TCP without encryption"), as ``make study``
    printed once per notebook; an IPC socket is a file that other users cannot open, so
    there is nothing to warn about. Each kernel gets its own socket prefix in ``sockets``.

    A finished notebook's kernel is shut down without the SIGINT that jupyter_client sends
    first: the kernel is idle by then, and a signal that lands while it still answers a
    late message is logged as "KeyboardInterrupt caught in kernel." on the study's output.
    An interrupt asked for while the kernel runs (a cell past its timeout) still goes."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

        @default("ip")
        def _ip_default(self) -> str:
            return tempfile.mkdtemp(prefix="kernel-", dir=sockets) + "/ipc"

        async def _async_interrupt_kernel(self) -> None:
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

    return IPCKernelManager


def notebooks(only: list[str] | None = None) -> list[Path]:
    found = sorted((repo_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.name.startswith(o) for o in only)]
    return found


def _npm_cache() -> Path:
    """Unpacked npm tarballs, beside the virtual environment's other shared files."""
    return Path(sys.prefix) / "share" / "structattn_lite" / "npm"


def npm_package(name: str) -> Path:
    """The unpacked folder of one of ``NPM_PACKAGES``, fetched with ``npm pack`` once."""
    if name not in NPM_PACKAGES:
        raise ValueError(f"name={name!r} is not allowed; choose one of {sorted(NPM_PACKAGES)}")
    folder = _npm_cache() / name
    if (folder / "package.json").exists():
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "npm is needed once to fetch the widget manager for offline reports "
            f"({NPM_PACKAGES[name]}); install Node.js and npm (Debian: apt-get install npm)"
        )
    tmp = _npm_cache() / f".{name}.download"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    subprocess.run(
        [npm, "pack", "--silent", NPM_PACKAGES[name], "--pack-destination", str(tmp)],
        check=True,
        cwd=tmp,
        stdout=subprocess.DEVNULL,
    )
    (tarball,) = tmp.glob("*.tgz")
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp, filter="data")
    shutil.rmtree(folder, ignore_errors=True)
    (tmp / "package").rename(folder)  # complete folders only: a failed fetch leaves none
    shutil.rmtree(tmp)
    return folder


def _copy_tree_once(src: Path, dst: Path, *ignore: str) -> None:
    if not dst.exists():
        part = dst.with_name(dst.name + ".part")
        shutil.copytree(src, part, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*ignore))
        os.replace(part, dst)


def offline_assets(out_dir: Path) -> dict[str, str]:
    """Copy MathJax, require.js and the widget manager to ``out_dir/assets``; return the
    ``HTMLExporter`` settings that point at them (relative, so the folder can move)."""
    import jupyter_server_mathjax

    assets = out_dir / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    _copy_tree_once(Path(jupyter_server_mathjax.__file__).parent / "static", assets / "mathjax")
    # embed.js is the non-AMD build of the same manager; source maps only help debugging
    _copy_tree_once(
        npm_package("html-manager") / "dist", assets / "html-manager", "*.map", "embed.js"
    )
    shutil.copyfile(npm_package("requirejs") / "require.js", assets / "require.js")
    return {
        "mathjax_url": f"assets/mathjax/MathJax.js?config={MATHJAX_CONFIG}",
        "require_js_url": "assets/require.js",
        "widget_renderer_url": "assets/html-manager/embed-amd.js",
    }


def _widget_state(nb) -> dict:
    """The notebook's saved widget models, by id."""
    widgets = nb.metadata.get("widgets", {})
    return widgets.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})


def _has_controls(state: dict, model_id: str) -> bool:
    """Whether the saved widget ``model_id`` is, or holds, a control (a dropdown, slider...)."""
    todo, seen = [model_id], set()
    while todo:
        mid = todo.pop()
        if mid in seen or mid not in state:
            continue
        seen.add(mid)
        name = state[mid].get("model_name", "")
        if not name.endswith(("StyleModel", "LayoutModel")) and any(
            c in name for c in _CONTROL_MODELS
        ):
            return True
        children = state[mid].get("state", {}).get("children", [])
        todo += [c.removeprefix("IPY_MODEL_") for c in children if isinstance(c, str)]
    return False


def missing_widget_models(nb) -> list[str]:
    """The model ids of saved widget views whose state the notebook does not hold.

    JupyterLab draws such a view as "Error displaying widget: model not found" once the
    kernel is gone: a notebook saved by JupyterLab with its default ``saveState: false``
    (``make lab`` turns it on, see ``lab-settings/overrides.json``), or one executed without
    ``store_widget_state``. A view whose model id is empty was closed and is drawn as nothing."""
    state = _widget_state(nb)
    missing = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            model_id = out.get("data", {}).get(WIDGET_VIEW, {}).get("model_id")
            if model_id and model_id not in state:
                missing.append(model_id)
    return missing


def mark_snapshots(nb) -> int:
    """Put ``SNAPSHOT_NOTE`` above every saved widget view that has controls; returns how many."""
    from nbformat.v4 import new_output

    state = _widget_state(nb)
    note = new_output(
        "display_data", {"text/html": f'<div class="structattn-snapshot">{SNAPSHOT_NOTE}</div>'}
    )
    marked = 0
    for cell in nb.cells:
        outputs = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view and _has_controls(state, view.get("model_id", "")):
                outputs.append(note)
                marked += 1
            outputs.append(out)
        if "outputs" in cell:
            cell.outputs = outputs
    return marked


def export_html(notebook: Path, out_dir: Path | None = None) -> Path:
    """Render an executed notebook to ``out_dir/<name>.html`` that works offline, with its
    widget views marked as snapshots."""
    import nbformat
    from nbconvert import HTMLExporter

    out_dir = Path(out_dir or notebook.parent)
    exporter = HTMLExporter(**offline_assets(out_dir))
    nb = nbformat.read(notebook, as_version=4)
    missing = missing_widget_models(nb)
    if missing:
        raise RuntimeError(
            f"{notebook.name} shows {len(missing)} widget(s) whose state it does not hold "
            "(a reader would see 'model not found'): execute it with store_widget_state=True"
        )
    mark_snapshots(nb)
    html, _ = exporter.from_notebook_node(nb)
    mathjax_script = f'<script src="{exporter.mathjax_url}">'
    if mathjax_script not in html or "</head>" not in html:
        raise RuntimeError("nbconvert's template no longer loads MathJax where expected")
    html = html.replace(mathjax_script, _MATHJAX_CONFIG + mathjax_script, 1)
    html = html.replace("</head>", _SNAPSHOT_STYLE + "</head>", 1)
    target = out_dir / notebook.with_suffix(".html").name
    files.write_text(target, html)
    return target


def defer_output_widget_echo() -> None:
    """Keep nbclient (papermill, nbmake, Voila) from stalling on Output widgets.

    nbclient mimics a browser's Output widget: each output a cell writes into one is
    echoed back to the kernel as a comm message, sent on the shell socket while nbclient
    awaits that cell's reply on the same socket. Now and then the reply then goes
    unnoticed until the cell's timeout (as in jupyter/nbclient#312): minutes late under
    nbmake, and for good under papermill and Voila, which set no timeout. Here the echo
    waits until the cell's reply is in, then goes out, so the kernel's copy of each widget
    (which Voila's page reads back) still ends up with its outputs. Idempotent.
    """
    from nbclient.client import NotebookClient
    from nbclient.output_widget import OutputWidget

    if getattr(OutputWidget, "_echo_deferred", False):
        return
    echo, execute_cell = OutputWidget.sync_state, NotebookClient.async_execute_cell

    def sync_state_later(widget) -> None:
        widget.executor.__dict__.setdefault("_pending_echoes", {})[widget.comm_id] = widget

    async def execute_cell_then_echo(client, *args, **kwargs):
        try:
            return await execute_cell(client, *args, **kwargs)
        finally:
            for widget in client.__dict__.pop("_pending_echoes", {}).values():
                echo(widget)

    OutputWidget.sync_state = sync_state_later
    NotebookClient.async_execute_cell = execute_cell_then_echo
    OutputWidget._echo_deferred = True


def elapsed(seconds: float) -> str:
    """``seconds`` as h:mm:ss, or m:ss under an hour."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_line(name: str, progress_file: Path, seconds: float) -> str:
    """One line of a notebook's progress: its sweeps' runs done out of those asked for so
    far (a notebook's later cells may ask for more), and the time since it started."""
    done, total = read_progress(progress_file)
    runs = f"{done}/{total} runs done" if total else "no runs asked for yet"
    return f"[study] {name}: {runs}, {elapsed(seconds)} elapsed"


@contextlib.contextmanager
def _ticking(name: str, progress_file: Path, every: float):
    """Print ``progress_line`` every ``every`` seconds while the block runs."""
    start, stopped = time.monotonic(), threading.Event()

    def tick() -> None:
        while not stopped.wait(every):
            print(progress_line(name, progress_file, time.monotonic() - start), flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopped.set()
        thread.join()


def study_summary(rows: list[dict]) -> str:
    """The table ``run_notebooks`` prints at the end: per notebook, how long it took, its
    runs, and what it wrote where (``rows``: notebook, seconds, done, total, written)."""
    lines = ["[study] summary", "| notebook | time | runs | written |", "| --- | --- | --- | --- |"]
    for r in rows:
        runs = f"{r['done']}/{r['total']}" if r["total"] else "-"
        written = ", ".join(str(p) for p in r["written"]) or "-"
        lines.append(f"| {r['notebook']} | {elapsed(r['seconds'])} | {runs} | {written} |")
    total = sum(r["seconds"] for r in rows)
    lines.append(f"| all ({len(rows)}) | {elapsed(total)} | | |")
    return "\n".join(lines)


def _written_since(folder: Path, since: float) -> list[Path]:
    """Files under ``folder`` modified at or after ``since`` (a time.time())."""
    if not folder.exists():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.stat().st_mtime >= since)


def run_notebooks(
    profile: str,
    only: list[str] | None = None,
    out_dir: Path | None = None,
    device: str = "cpu",
    every: float = 30.0,
) -> list[Path]:
    """Run each notebook in order with ``PROFILE=profile`` (and ``DEVICE=device`` where the
    notebook trains); write ``<out_dir>/<name>.ipynb`` and an offline ``.html``
    (``out_dir`` defaults to ``reports/``). While a notebook runs, a line every ``every``
    seconds says how many of its runs are done and how long it has taken; at the end (or
    when a notebook fails) a table says how long each took and what it wrote where."""
    import papermill as pm

    from structattn_lite.config import figures_dir, resolve_device

    check_profile(profile)
    check_number("every", every, minimum=0.1)
    device = resolve_device(device)
    defer_output_widget_echo()
    reports = Path(out_dir) if out_dir else repo_root() / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    figures = figures_dir(profile)
    written, summary = [], []
    saved_env = os.environ.get(PROGRESS_ENV)
    sockets = tempfile.TemporaryDirectory(prefix="structattn-kernels-")
    try:
        for nb in notebooks(only):
            out = reports / nb.name
            progress_file = reports / f".{nb.stem}.progress.jsonl"
            progress_file.unlink(missing_ok=True)
            os.environ[PROGRESS_ENV] = str(progress_file)  # the kernel inherits it
            print(f"[study] {nb.name} (profile={profile})", flush=True)
            parameters = {"PROFILE": profile}
            if "DEVICE" in nb.read_text():  # only notebooks that train take a device
                parameters["DEVICE"] = device
            started, start = time.time(), time.monotonic()
            with _ticking(nb.name, progress_file, every):
                pm.execute_notebook(
                    nb,
                    out,
                    parameters=parameters,
                    cwd=nb.parent,
                    progress_bar=False,
                    extra_arguments=kernel_arguments(),
                    kernel_manager_class=ipc_kernel_manager(Path(sockets.name)),
                )
            written.append(export_html(out, reports))
            seconds = time.monotonic() - start
            done, total = read_progress(progress_file)
            progress_file.unlink(missing_ok=True)
            files = [out, written[-1], *_written_since(figures, started)]
            here = Path.cwd()  # each file named from here where it lies below
            files = [f.relative_to(here) if f.is_relative_to(here) else f for f in files]
            summary.append({"notebook": nb.name, "seconds": seconds, "done": done,
                            "total": total, "written": files})  # fmt: skip
            runs = f"{done}/{total} runs done" if total else "no runs"
            print(f"[study] {nb.name}: finished in {elapsed(seconds)}, {runs}", flush=True)
    finally:
        sockets.cleanup()
        if saved_env is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = saved_env
        if summary:
            print(study_summary(summary), flush=True)
    return written
