"""The dashboards in a real browser: JupyterLab, the Voila teaching app, an offline report.

Playwright drives Debian's Chromium (never a browser Playwright downloads). Each test
fails with what it saw; it is skipped, saying why, only when no browser can run here.
Screenshots go to reports/browser/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import browser_support as bs
import pytest

pytestmark = pytest.mark.slow

REASON = bs.skip_reason()
needs_browser = pytest.mark.skipif(REASON is not None, reason=f"browser tests skipped: {REASON}")

# Notebook, the dropdown to change (by its label), and the longest it may take to run.
NOTEBOOKS = [
    ("01_theory.ipynb", ("rule",), 120),
    ("03_csp_state_tracking.ipynb", ("task",), 180),
    ("05_length_generalization.ipynb", ("model",), 180),
]

# Console errors and blocked requests a test lets pass, each with the reason. JupyterLab
# needs none. Voila's page template links Font Awesome's CSS from a CDN, although Voila's
# own bundle (voila.js) already carries Font Awesome 5: offline both links fail (blocked
# here) and nothing on the page changes. Leaving a Voila page (following a link on the
# landing page) sends Voila's kernel-shutdown request without an _xsrf argument, which its
# server refuses with 403 (voila-dashboards/voila#1458): that page's kernel then lives on
# until the server stops.
LAB_BENIGN = ()
VOILA_BENIGN = ("cdn.jsdelivr.net/npm/@fortawesome/fontawesome-free", "/voila/api/shutdown/")


@pytest.fixture(scope="module")
def browser():
    if REASON is not None:
        pytest.skip(f"browser tests skipped: {REASON}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=bs.chromium_path(), args=bs.CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _page(browser, benign=()):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    aborted = bs.block_network(page, benign)
    errors = bs.collect_errors(page, benign)
    return page, aborted, errors


@pytest.fixture(scope="module")
def lab(browser, tmp_path_factory):
    """JupyterLab over a scratch copy of notebooks/ (so nothing is written back), and one
    page for all notebooks (JupyterLab loads once)."""
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "notebooks"
    shutil.copytree(bs.REPO / "notebooks", root, ignore=shutil.ignore_patterns(".*"))
    with bs.jupyterlab(root, tmp) as (base, token):
        page, aborted, errors = _page(browser, LAB_BENIGN)
        try:
            yield page, aborted, errors, base, token
        finally:
            page.close()


def _dashboard_cell(page, panel, cells):
    """The last cell whose widget output has a dropdown (progress bars are widgets too)."""
    shown = [
        i for i, c in enumerate(cells) if any(bs.WIDGET_MIME in o["mimes"] for o in c["outputs"])
    ]
    assert shown, "no cell displayed a widget"
    all_cells = page.locator(f"#{panel} .jp-Notebook .jp-Cell")
    for i in reversed(shown):
        cell = all_cells.nth(i)
        if bs.wait_for(lambda c=cell: c.locator(".widget-dropdown").count() > 0, 10):
            return cell
    raise AssertionError(f"no widget output with a dropdown in cells {shown}")


def _settled(area, idle, timeout: float, what: str, differs_from: str | None = None) -> str:
    """Wait until the kernel is idle and the output stops changing with a figure in it (and
    differs from ``differs_from``); returns the output's snapshot. Voila sends a widget's
    figure after the page, so an output that is empty for a moment is not yet its view."""
    last = [None]

    def steady():
        if not idle():
            return None
        now = bs.output_snapshot(area)
        stable, last[0] = now == last[0], now
        return now if stable and "<img" in now and now != differs_from else None

    return bs.wait_until(steady, timeout, what, interval=0.7)


def _change_and_compare(page, area, labels, idle, timeout=90) -> str:
    """Change a dropdown; assert the plot or table below it changes; returns what changed."""
    before = _settled(area, idle, 30, "the dashboard's first view")
    assert "<img" in before, "the dashboard's output shows no figure before any change"
    changed = bs.pick_other_option(area, labels)
    after = _settled(area, idle, timeout, f"the output to change after {changed}", before)
    assert "<img" in after, f"the dashboard's output shows no figure after {changed}"
    return changed


@needs_browser
@pytest.mark.parametrize("name, labels, limit", NOTEBOOKS, ids=[n[:2] for n, _, _ in NOTEBOOKS])
def test_notebook_dashboard(lab, name, labels, limit):
    page, aborted, errors, base, token = lab
    del aborted[:], errors[:]  # what this notebook causes, not the one before
    stem = Path(name).stem
    bs.SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        _check_notebook(page, base, token, name, stem, labels, limit, errors, aborted)
    except BaseException:  # what the page showed, for the report
        page.screenshot(path=bs.SHOTS / f"{stem}_failure.png")
        (bs.SHOTS / f"{stem}_failure.txt").write_text(page.inner_text("body"))
        raise


def _check_notebook(page, base, token, name, stem, labels, limit, errors, aborted):
    clock = bs.Clock()
    panel = bs.open_notebook(page, base, token, name)
    clock.lap("open")
    cells = bs.run_all(page, limit)
    clock.lap("run all")
    failed = [o for c in cells for o in c["outputs"] if o["type"] == "error"]
    assert not failed, f"{name}: a cell raised {failed[0]['ename']}: {failed[0]['evalue']}"

    cell = _dashboard_cell(page, panel, cells)
    cell.scroll_into_view_if_needed()
    bs.wait_until(lambda: cell.locator(".jupyter-widgets").count() > 0, 30, "widgets to render")
    text = cell.inner_text()
    assert not [f for f in bs.WIDGET_FAILURES if f in text], f"{name}: widget as text: {text}"
    cell.screenshot(path=bs.SHOTS / f"{stem}_dashboard.png")

    changed = _change_and_compare(page, cell, labels, lambda: bs.kernel_idle(page))
    cell.screenshot(path=bs.SHOTS / f"{stem}_dashboard_changed.png")
    if stem.startswith("01"):  # the theory explorer also has sliders
        before = bs.output_snapshot(cell)
        handle = cell.locator(".widget-slider .noUi-handle").first
        handle.focus()
        handle.press("ArrowLeft")
        _settled(cell, lambda: bs.kernel_idle(page), 60, "a change after a slider step", before)
        cell.screenshot(path=bs.SHOTS / f"{stem}_dashboard_slider.png")
    clock.lap("interact")
    bs.shutdown_kernel(page)
    print(f"{name}: {clock}")

    page_text = page.inner_text("body")
    assert "Error displaying widget" not in page_text, f"{name}: a widget failed to display"
    assert not errors, f"{name}: JavaScript errors after {changed}: {errors}"
    assert not aborted, f"{name}: the page tried to reach the network: {aborted[:5]}"


_TRAINING_CELL = """\
import torch
from structattn_lite.report import LivePlot
from structattn_lite.training.trainer import Trainer

live = LivePlot()
display(live.widget)
for seed in (0, 1):  # two runs, as notebook 03's smoke grid trains; each with its bar
    Trainer(torch.nn.Linear(2, 1), lambda m, x: m(x).pow(2).mean(), callbacks=[live]).fit(
        3, lambda g: [(torch.ones(3, 2),)], lambda m: {"test_acc": 0.5}, torch.Generator())
"""


@needs_browser
def test_a_saved_training_cell_reopens_with_every_widget(lab):
    """Notebook 03 saved and reopened showed two "Loading widget..." views that never
    resolved, and the console said "widget model not found" twice: the bar of each run
    closed its widget, and JupyterLab saved the view without the model. Saved with its
    widget state (as `make lab` saves), the training cell reopens with every view drawn."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    page, aborted, errors, base, token = lab
    del aborted[:], errors[:]
    name = "saved_widgets.ipynb"
    nb = new_notebook(cells=[new_code_cell(_TRAINING_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    content = {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))}
    page.request.put(f"{base}/api/contents/{name}?token={token}", data=content)
    bs.open_notebook(page, base, token, name)
    cells = bs.run_all(page, 120)
    assert not [o for c in cells for o in c["outputs"] if o["type"] == "error"], cells
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    saved = page.request.get(f"{base}/api/contents/{name}?token={token}").json()["content"]
    assert "widgets" in saved["metadata"], f"saved without widget state: {saved['metadata']}"
    state = saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    views = [o["data"][bs.WIDGET_MIME]["model_id"] for o in saved["cells"][0]["outputs"]
             if bs.WIDGET_MIME in o.get("data", {})]  # fmt: skip
    assert len(views) >= 3, f"the live plot and two bars: {views}"
    assert [v for v in views if v not in state] == [], "views saved without their model"
    bs.shutdown_kernel(page)
    page.evaluate(
        """async name => {
             const app = window.jupyterapp;
             for (const w of Array.from(app.shell.widgets('main'))) { w.close(); }
             await app.commands.execute('docmanager:open', {path: name, kernel: null});
           }""",
        name,
    )
    page.wait_for_selector(".jp-OutputArea-output", timeout=60_000)
    outputs = page.locator(".jp-Notebook .jp-OutputArea-output")
    drawn = lambda: "Loading widget" not in " ".join(outputs.all_inner_texts())  # noqa: E731
    bs.wait_until(drawn, 30, "every saved widget to be drawn")
    text = page.inner_text("body")
    assert "Error displaying widget" not in text and "model not found" not in text
    assert not [e for e in errors if "model not found" in e], errors


def _code_lines(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    src = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return [line.strip() for s in src for line in s.splitlines() if len(line.strip()) > 8]


@needs_browser
def test_voila_app_offline(browser, tmp_path):
    """The teaching app: every dashboard renders without code, with its guide, offline."""
    from structattn_lite.dashboard import LANDING

    folder = bs.REPO / "dashboards"
    names = sorted(p.name for p in folder.glob("*.ipynb") if p.name != LANDING)
    assert len(names) >= 3, f"expected the dashboards in {folder}, found {names}"
    bs.SHOTS.mkdir(parents=True, exist_ok=True)
    with bs.voila(folder, tmp_path) as (base, token):
        page, aborted, errors = _page(browser, VOILA_BENIGN)
        page.goto(f"{base}/?token={token}", timeout=120_000)  # the landing page
        links = page.locator("a[href$='.ipynb']")
        bs.wait_until(lambda: links.count() == len(names), 60, f"links to {names}")
        page.screenshot(path=bs.SHOTS / "voila_landing.png", full_page=True)
        links.first.click()
        page.wait_for_url(f"**/voila/render/{names[0]}*", timeout=30_000)
        assert not errors and not aborted, (errors, aborted)
        page.close()
        for name in names:
            page, aborted, errors = _page(browser, VOILA_BENIGN)
            # Voila runs the notebook before it sends the page: allow what the widgets get
            page.goto(f"{base}/voila/render/{name}?token={token}", timeout=120_000)
            page.wait_for_selector(".widget-dropdown select", timeout=120_000)
            if "$" in (folder / name).read_text():  # the guide has formulas: typeset?
                bs.wait_until(lambda p=page: p.locator("mjx-container").count(), 30, "formulas")
            body = page.inner_text("body")
            assert page.locator("h1, h2").count() > 0, f"{name}: no guide heading"
            code = [line for line in _code_lines(folder / name) if line in body]
            assert not code, f"{name}: code is shown: {code}"
            assert not [f for f in bs.WIDGET_FAILURES if f in body], f"{name}: {body[:300]}"
            assert "Traceback" not in body, f"{name}: a cell failed: {body[-600:]}"
            for raw in ("$$", "\\mathrm", "\\ell", "\\varepsilon"):
                assert raw not in body, f"{name}: raw LaTeX {raw!r} in the guide"
            area = page.locator(".jp-OutputArea-output:has(.widget-dropdown)").last
            page.screenshot(path=bs.SHOTS / f"voila_{Path(name).stem}.png", full_page=True)
            changed = _change_and_compare(page, area, ("task", "rule", "model"), lambda: True)
            page.screenshot(path=bs.SHOTS / f"voila_{Path(name).stem}_changed.png", full_page=True)
            assert not errors, f"{name}: JavaScript errors after {changed}: {errors}"
            assert not aborted, f"{name}: the app tried to reach the network: {aborted[:5]}"
            page.close()


# Issue 45: 21 page views of the teaching app left 21 kernels holding 16.8 GiB.
PAGE_VIEWS = 20
KERNELS_LEFT = 2  # alive a minute after the last page closed, at most


@needs_browser
def test_voila_culls_the_kernels_of_closed_pages(browser, tmp_path):
    """Twenty views of a dashboard, each page closed: a minute after the last one, the
    app's culling (dashboard.CULL, the settings `make dashboard` uses) has shut down all
    but at most two kernels. Voila starts one kernel per view, and its own shutdown request
    on leaving a page is refused (see VOILA_BENIGN).

    The views are counted by the kernels they started, each seen while its page is live
    (its widgets drawn), not by how many ran at once: on a busy machine a closed view's
    kernel may be culled before the next view's starts, and that is the culling working."""
    from structattn_lite.dashboard import CULL_IDLE_S

    name = "3_length_generalization.ipynb"
    clock = bs.Clock()
    with bs.voila_process(bs.REPO / "dashboards", tmp_path) as (proc, base, token):
        started: set[int] = set()  # kernel process ids, each seen while its view was live
        for view in range(PAGE_VIEWS):
            page, _, _ = _page(browser, VOILA_BENIGN)
            page.goto(f"{base}/voila/render/{name}?token={token}", timeout=120_000)
            page.wait_for_selector(".widget-dropdown select", timeout=120_000)
            live = {k.pid for k in bs.kernels(proc)}
            assert live - started, f"view {view + 1} drew its widgets with no kernel of its own"
            started |= live
            page.close()
        clock.lap(f"{PAGE_VIEWS} views")
        memory = sum(k.memory_info().rss for k in bs.kernels(proc)) / 2**30
        assert len(started) >= PAGE_VIEWS, f"{len(started)} kernels for {PAGE_VIEWS} views"
        bs.wait_for(lambda: len(bs.kernels(proc)) <= KERNELS_LEFT, 60, interval=2)
        left = bs.kernels(proc)
        clock.lap("a minute later")
        print(
            f"kernels: {len(started)} started by the views ({memory:.2f} GiB after the last), "
            f"{len(left)} a minute later (cull idle {CULL_IDLE_S} s); {clock}"
        )
        assert len(left) <= KERNELS_LEFT, (
            f"{len(left)} kernels alive a minute after {PAGE_VIEWS} closed page views "
            f"(at most {KERNELS_LEFT}); {clock}"
        )


@needs_browser
def test_offline_report(browser, tmp_path, monkeypatch):
    """An HTML report from the study runner, opened from disk with the network blocked:
    formulas are typeset and every widget shows its saved view, never a blank area."""
    from structattn_lite.notebook_runner import run_notebooks

    for var, sub in (("STRUCTATTN_FIGURES", "figures"), ("STRUCTATTN_RUNS", "runs")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    (report,) = run_notebooks("smoke", only=["01"], out_dir=tmp_path / "reports")

    page, aborted, errors = _page(browser)
    page.goto(report.as_uri())
    page.wait_for_function(
        "() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.running === 0 "
        "&& MathJax.Hub.queue.pending === 0",
        timeout=60_000,
    )
    pictures = ".widget-output img, img.widget-image"
    bs.wait_until(lambda: page.locator(pictures).count() > 0, 60, "widget views")
    bs.SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=bs.SHOTS / "report_01_offline.png", full_page=True)

    text = page.inner_text("body")
    assert page.locator(".MathJax, .MathJax_Display").count() > 20, "formulas were not typeset"
    for raw in ("$$", "\\mathrm", "\\varepsilon"):
        assert raw not in text, f"raw LaTeX {raw!r} left in the report"
    tex_errors = page.evaluate("() => MathJax.Hub.getAllJax().filter(j => j.texError).length")
    assert tex_errors == 0, f"{tex_errors} formulas show a MathJax error (e.g. psmallmatrix)"
    views = page.locator(".jp-OutputArea-output:has(script[type='" + bs.WIDGET_MIME + "'])")
    assert views.count() > 0, "the report has no widget output"
    for i in range(views.count()):
        box = views.nth(i).bounding_box()
        assert box and box["height"] > 50, f"widget area {i} is blank"
    assert views.last.locator("select").count() > 0, "the explorer's controls are missing"
    # the saved view is marked as a snapshot, and its controls are not live-looking
    note = page.locator(".structattn-snapshot")
    assert note.count() == 1 and "open the notebook in jupyterlab" in note.inner_text().lower()
    for control in views.last.locator("select, input").all():
        assert control.evaluate("e => getComputedStyle(e).pointerEvents") == "none"
    cut = [t for t in page.locator("td, th").all_inner_texts() if t.strip().endswith("...")]
    assert not cut, f"table cells cut: {cut[:5]}"
    assert not [e for e in errors if e.startswith("pageerror")], errors
    assert not aborted, f"the report tried to reach the network: {aborted[:5]}"
