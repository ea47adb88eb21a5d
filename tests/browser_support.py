"""What the browser tests share: finding Chromium, starting and stopping a local server,
and driving JupyterLab and Voila pages with Playwright.

Servers listen on a free loopback port with a random token and are stopped by their own
process id (terminate, then kill). Pages run with the network blocked except loopback
and file:// URLs, so a test proves the page works offline.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "reports" / "browser"
BIN = Path(sys.executable).parent

# Chromium as root in a container, with no network beyond loopback: without the
# background-networking flags it keeps trying (and failing) to reach Google's hosts.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# JupyterLab user settings for a test: never write the notebooks back (autosave), keep
# every cell in the DOM (windowing), ask no one about news or updates, and save widget
# state with a notebook, as `make lab` does (lab-settings/overrides.json).
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyter-widgets/jupyterlab-manager/plugin": {"saveState": True},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_FAILURES = ("HBox(children=", "VBox(children=", "Error displaying widget")


def chromium_path() -> str | None:
    """Debian's Chromium (``STRUCTATTN_CHROMIUM`` overrides), or None."""
    for candidate in (os.environ.get("STRUCTATTN_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return (
            "no Chromium on PATH (Debian: apt-get install chromium; .ci/run installs it); "
            "Playwright's own browser download is not used"
        )
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(cmd: list[str], ready_url: str, env: dict, log: Path, timeout: float = 90):
    """Start ``cmd``; wait until ``ready_url`` answers 200; stop it by its pid on exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}; see {log}")
                try:
                    with urllib.request.urlopen(ready_url, timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{ready_url} did not answer in {timeout}s; see {log}")
                time.sleep(0.5)
            yield proc
        finally:
            stop(proc)


def stop(proc: subprocess.Popen, grace: float = 20) -> None:
    """Terminate ``proc``; kill it if it is still there after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def study_env(tmp: Path) -> dict:
    """The server's (and so the kernels') environment: smoke profile, scratch outputs."""
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # the kernels draw inline, as for a user (conftest sets Agg)
    env.update(
        STRUCTATTN_PROFILE="smoke",
        STRUCTATTN_FIGURES=str(tmp / "figures"),
        STRUCTATTN_RUNS=str(tmp / "runs"),
        OMP_NUM_THREADS="1",
        JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "lab-workspaces"),
        PYTHONUNBUFFERED="1",
    )
    for plugin, values in LAB_SETTINGS.items():
        path = tmp / "lab-settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return env


def root_flags() -> list[str]:
    return ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []


@contextmanager
def jupyterlab(root: Path, tmp: Path):
    """A JupyterLab on loopback serving ``root``; yields its base URL with the token."""
    port, token = free_port(), secrets.token_hex(16)
    cmd = [
        str(BIN / "jupyter-lab"),
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--expose-app-in-browser",
        *root_flags(),
    ]
    base = f"http://127.0.0.1:{port}"
    with server(cmd, f"{base}/api/status?token={token}", study_env(tmp), tmp / "lab.log"):
        yield base, token


@contextmanager
def voila(folder: Path, tmp: Path):
    """Voila serving every notebook in ``folder`` without code cells; yields URL, token."""
    with voila_process(folder, tmp) as (_, base, token):
        yield base, token


@contextmanager
def voila_process(folder: Path, tmp: Path, extra: tuple[str, ...] = ()):
    """``voila``, with more arguments (``extra``), yielding its process too."""
    port, token = free_port(), secrets.token_hex(16)
    cmd = [
        str(BIN / "python"),
        "-m",
        "structattn_lite.dashboard",  # Voila, as `make dashboard` starts it
        str(folder),
        "--no-browser",
        "--Voila.ip=127.0.0.1",
        f"--port={port}",
        f"--token={token}",
        "--strip_sources=True",
        "--show_tracebacks=True",
        *extra,
    ]
    base = f"http://127.0.0.1:{port}"
    with server(cmd, f"{base}/?token={token}", study_env(tmp), tmp / "voila.log") as proc:
        yield proc, base, token


def kernels(proc: subprocess.Popen) -> list:
    """The live kernel processes a server started (psutil processes)."""
    import psutil

    def live_kernel(process) -> bool:
        # a kernel that exits between the listing and this look is a zombie or gone: dead
        try:
            return process.status() != psutil.STATUS_ZOMBIE and "ipykernel" in " ".join(
                process.cmdline()
            )
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            return False

    children = psutil.Process(proc.pid).children(recursive=True)
    return [c for c in children if live_kernel(c)]


def block_network(page, allowed: tuple[str, ...] = ()) -> list[str]:
    """Abort every request that leaves the machine; returns the aborted URLs, less those
    containing one of ``allowed`` (aborted too, but expected)."""
    aborted: list[str] = []

    def route(r):
        url = r.request.url
        local = url.startswith(("file:", "data:", "blob:", "http://127.0.0.1", "ws://127.0.0.1"))
        if local:
            r.continue_()
            return
        if not any(a in url for a in allowed):
            aborted.append(url)
        r.abort()

    page.route("**/*", route)
    return aborted


def collect_errors(page, benign: tuple[str, ...] = ()) -> list[str]:
    """Uncaught page errors and console errors, less those whose text or source URL
    contains one of ``benign``."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))

    def console(msg):
        where = (msg.location or {}).get("url", "")
        if msg.type == "error" and not any(b in msg.text or b in where for b in benign):
            errors.append(f"console: {msg.text} ({where})")

    page.on("console", console)
    return errors


class Clock:
    """Seconds per phase of a test, for its log: ``lap("open")``; ``str()`` lists them."""

    def __init__(self):
        self.start, self.laps = time.monotonic(), []

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps.append(f"{name} {now - self.start:.1f}s")
        self.start = now

    def __str__(self) -> str:
        return ", ".join(self.laps)


def wait_for(predicate, timeout: float, interval: float = 0.5) -> bool:
    """Poll ``predicate`` for up to ``timeout`` seconds; whether it became true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5):
    """Poll ``predicate`` until it returns a truthy value; fail saying ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# --- JupyterLab notebook helpers ------------------------------------------------------

_CELLS_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.model.cells;
  const out = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i).toJSON();
    out.push({type: c.cell_type, count: c.execution_count ?? null,
              outputs: (c.outputs || []).map(o => ({type: o.output_type, ename: o.ename || null,
                        evalue: o.evalue || null, mimes: Object.keys(o.data || {})}))});
  }
  return out;
}"""


def open_notebook(page, base: str, token: str, name: str, timeout: float = 120) -> str:
    """Open ``name`` alone in JupyterLab (loading JupyterLab once per page), wait for its
    kernel to be idle; returns the notebook panel's DOM id."""
    if page.evaluate("() => !window.jupyterapp"):
        page.goto(f"{base}/lab/workspaces/browser-test/tree/{name}?token={token}&reset")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started")
    else:  # close what the last test left open, unsaved (autosave is off), then open
        page.evaluate(
            """async name => {
                 const app = window.jupyterapp;
                 for (const w of Array.from(app.shell.widgets('main'))) {
                   if (w.context) { w.context.model.dirty = false; }
                   w.close();
                 }
                 await app.commands.execute('docmanager:open', {path: name});
               }""",
            name,
        )
    page.wait_for_function(
        """name => { const w = window.jupyterapp.shell.currentWidget;
                     return w && w.context && w.context.path === name && w.sessionContext &&
                            w.sessionContext.session && w.sessionContext.session.kernel &&
                            w.sessionContext.session.kernel.status === 'idle'; }""",
        arg=name,
        timeout=timeout * 1000,
    )
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.id")


def shutdown_kernel(page) -> None:
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")


def run_all(page, timeout: float) -> list[dict]:
    """Run every cell and wait until the run has finished; returns the cells.

    JupyterLab may execute cells on a kernel subshell, so neither the kernel's status
    nor the execution counts (set when a cell starts) say that the run is over: the
    promise of the run-all command does.
    """
    page.evaluate(
        """() => { window.__runAll = 'running';
                   window.jupyterapp.commands.execute('notebook:run-all-cells')
                     .then(() => { window.__runAll = 'done'; },
                           e => { window.__runAll = 'failed: ' + e; }); }"""
    )
    page.wait_for_function("() => window.__runAll !== 'running'", timeout=timeout * 1000)
    state = page.evaluate("() => window.__runAll")
    assert state == "done", f"run all cells: {state}"
    busy = page.locator(".jp-Notebook .jp-InputPrompt:has-text('[*]')")
    wait_until(lambda: busy.count() == 0 and kernel_idle(page), 60, "the last cell to finish")
    return page.evaluate(_CELLS_JS)


def kernel_idle(page) -> bool:
    return page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        " === 'idle'"
    )


def output_snapshot(area) -> str:
    """The HTML of every widget Output area and Image widget inside ``area`` (images
    included as data or blob URLs, tables as HTML): what a change of a control must change."""
    return area.evaluate(
        """el => Array.from(el.querySelectorAll(
                   '.widget-output, .jupyter-widgets-output-area, img.widget-image'))
                     .map(o => o.outerHTML).join('\\n')"""
    )


def dropdown_labels(area) -> list[str]:
    return area.evaluate(
        """el => Array.from(el.querySelectorAll('.widget-dropdown'))
                     .map(d => (d.querySelector('label') || {}).textContent || '')"""
    )


def pick_other_option(area, labels: tuple[str, ...]) -> str:
    """Select another option in the first dropdown labelled as in ``labels`` that has two
    or more options (else the first such dropdown); returns what was changed."""
    dropdowns = area.locator(".widget-dropdown")
    names = dropdown_labels(area)
    sizes = [dropdowns.nth(i).locator("option").count() for i in range(len(names))]
    usable = [i for i, n in enumerate(sizes) if n > 1]
    assert usable, f"no dropdown with two options; labels: {names}, options: {sizes}"
    chosen = next((i for want in labels for i in usable if names[i] == want), usable[0])
    select = dropdowns.nth(chosen).locator("select")
    options = select.locator("option").all_text_contents()
    values = select.evaluate("s => Array.from(s.options).map(o => o.value)")
    current = select.input_value()
    target = next(v for v in values if v != current)
    select.select_option(value=target)
    return f"{names[chosen]}: {options[values.index(current)]} -> {options[values.index(target)]}"
