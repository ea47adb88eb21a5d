"""The teaching app's words against what it shows, without a browser: each dashboard's
guide names only controls the page has, options they offer and files that exist; the
landing page links every dashboard by its title; the theory explorer's graph title says
what is drawn; the app asks for a token."""

from __future__ import annotations

import ast
import http.client
import re
import subprocess
import sys

import browser_support as bs
import nbformat
import pytest

from structattn_lite.dashboard import LANDING, controls, controls_table

FOLDER = bs.REPO / "dashboards"
DASHBOARDS = sorted(p for p in FOLDER.glob("*.ipynb") if p.name != LANDING)


def _run(notebook):
    """Run a dashboard's code cells here, as a kernel would; returns (the app widget, the
    guide's Markdown: its markdown cells and the Markdown its cells displayed)."""
    from IPython.display import Markdown

    nb = nbformat.read(notebook, as_version=4)
    scope: dict = {}
    shown = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, notebook.name, "exec"), scope)
        if last is not None:
            shown.append(eval(compile(ast.Expression(last.value), notebook.name, "eval"), scope))
    text = [c.source for c in nb.cells if c.cell_type == "markdown"]
    text += [m.data for m in shown if isinstance(m, Markdown)]
    return scope["app"], "\n".join(text)


@pytest.fixture(scope="module", params=DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def dashboard(request):
    return request.param, *_run(request.param)


def test_guide_names_only_what_the_page_has(dashboard):
    notebook, app, guide = dashboard
    found = controls(app)
    assert found, f"{notebook.name}: no controls found"
    labels = set(found)
    options = {o for opts, value in found.values() for o in [*opts, value]}
    # a control is written **label**; an option, a value, a file or a label `in backticks`
    for name in re.findall(r"\*\*(\w+)\*\*", guide):
        assert name in labels, f"{notebook.name}: the guide names control {name!r}; page: {labels}"
    for word in re.findall(r"`([^`\n]+)`", guide):
        if word in options:  # an option may hold a slash ("the authors' README (hilhert/CSP)")
            continue
        if "/" in word or word.endswith((".csv", ".gz", ".ipynb", ".json")):
            assert (bs.REPO / word).exists(), f"{notebook.name}: the guide names a missing {word}"
        else:
            assert word in options | labels, (
                f"{notebook.name}: the guide names {word!r}, which no control offers; "
                f"options: {sorted(options)}"
            )
    for label, (_, value) in found.items():  # the table of controls, with the opening values
        assert f"| **{label}** |" in guide and f"| `{value}` |" in guide, label


def test_controls_table_refuses_a_control_the_page_lacks():
    import ipywidgets as W

    app = W.VBox([W.Dropdown(options=["fixed"], description="protocol")])
    assert "| **protocol** | `fixed` | `fixed` |" in controls_table(app, {"protocol": "x"}).data
    with pytest.raises(ValueError, match=r"describes controls \['protocol', 'task'\]"):
        controls_table(app, {"protocol": "x", "task": "y"})
    with pytest.raises(ValueError, match=r"the page has \['protocol'\]"):
        controls_table(app, {})


def test_single_source_is_a_label_not_a_dropdown():
    import ipywidgets as W

    from structattn_lite.report import browser

    def shown(sources):
        app = browser(sources, lambda data: {"x": data}, lambda data, x: None)
        return app.children[0].children[0]

    assert isinstance(shown({"committed grid": [1, 2]}), W.Label)
    assert shown({"committed grid": [1, 2]}).value == "source: committed grid"
    assert isinstance(shown({"profile quick": [1], "committed grid": [2]}), W.Dropdown)


def _shown(w) -> bool:
    return w.layout.display != "none"


def test_a_control_with_one_option_is_a_label_not_a_dropdown():
    """Dashboard 3's protocol dropdown, and notebook 03's task and seed in the smoke
    profile, offered one option as if it were a choice: the browser shows a label instead,
    and the dropdown again once the source offers two values."""
    import ipywidgets as W

    from structattn_lite.report import browser

    sources = {"committed grid": ["fixed"], "profile runs": ["fixed", "variable"]}
    app = browser(sources, lambda data: {"protocol": data}, lambda data, protocol: None)
    source, protocol, *rest = app.children[0].children
    (fact,) = [w for w in rest if isinstance(w, W.Label)]
    assert isinstance(protocol, W.Dropdown) and list(protocol.options) == ["fixed"]
    assert protocol.disabled and not _shown(protocol)
    assert _shown(fact) and fact.value == "protocol: fixed"
    source.value = "profile runs"
    assert not protocol.disabled and list(protocol.options) == ["fixed", "variable"]
    assert _shown(protocol) and not _shown(fact)
    source.value = "committed grid"
    assert protocol.disabled and not _shown(protocol) and _shown(fact)
    assert fact.value == "protocol: fixed"


def test_a_one_value_label_shows_the_display_name():
    import ipywidgets as W

    from structattn_lite.report import browser

    app = browser({"runs": ["mod3"]}, lambda data: {"task": data}, lambda data, task: None)
    facts = [w for w in app.children[0].children if isinstance(w, W.Label) and _shown(w)]
    assert [w.value for w in facts] == ["source: runs", "task: mod-3"]


def test_a_browser_opens_on_parity():
    """Tasks sorted by their keys opened on `dyck1` (parentheses): the paper's order opens
    on parity."""
    from structattn_lite.report import browser

    drawn = []
    app = browser({"runs": ["dyck1", "mod3", "parity"]}, lambda data: {"task": data},
                  lambda data, task: drawn.append(task))  # fmt: skip
    found = controls(app)
    assert found["task"] == (["parity", "mod-3", "parentheses"], "parity")
    assert drawn == ["parity"]


def test_grokking_dashboard_opens_on_parity():
    app, guide = _run(FOLDER / "2_grokking_runs.ipynb")
    assert controls(app)["task"][1] == "parity"
    assert "| **task** |" in guide and "| `parity` |" in guide


def test_length_dashboard_shows_its_one_protocol_as_a_label_and_wraps_its_caption_by_words():
    """Printed, the caption was a stream output that the browser breaks mid-word."""
    import ipywidgets as W

    from structattn_lite.dashboard import caption

    notebook = FOLDER / "3_length_generalization.ipynb"
    app, _ = _run(notebook)
    pickers = {w.description: w for w in _widgets(app) if getattr(w, "description", "")}
    single = len(pickers["protocol"].options) == 1
    assert pickers["protocol"].disabled == single
    assert _shown(pickers["protocol"]) != single
    labels = [w.value for w in _widgets(app) if isinstance(w, W.Label) and _shown(w)]
    assert ("protocol: fixed" in labels) == single, labels
    assert not pickers["model"].disabled and _shown(pickers["model"])
    code = "\n".join(c.source for c in nbformat.read(notebook, 4).cells if c.cell_type == "code")
    assert "display(caption(length_caption(curves)))" in code and "print(" not in code
    shown = caption("grid 'committed': 135 runs <5 seeds> & more").data
    assert "word-break: normal" in shown and "&lt;5 seeds&gt; &amp; more" in shown


def _widgets(app):
    todo = [app]
    while todo:
        w = todo.pop(0)
        todo[:0] = list(getattr(w, "children", ()))
        yield w


def test_landing_page_links_every_dashboard_by_its_title():
    (cell,) = nbformat.read(FOLDER / LANDING, as_version=4).cells
    links = dict(
        (target, text) for text, target in re.findall(r"\[([^]]+)\]\(([^)]+)\)", cell.source)
    )
    assert sorted(links) == [p.name for p in DASHBOARDS], "link each dashboard once"
    for notebook in DASHBOARDS:
        first = nbformat.read(notebook, as_version=4).cells[0].source
        title = first.splitlines()[0].removeprefix("# ")
        assert links[notebook.name] == title, (
            f"{notebook.name}: the link reads {links[notebook.name]!r}"
        )
    lines = [line for line in cell.source.splitlines() if line.startswith("- [")]
    assert len(lines) == len(DASHBOARDS), "one line per dashboard"


@pytest.mark.parametrize(
    "rule, n, m, words",
    [
        ("complete", 16, 8, ["complete rule capped at m=8: first 8 of its 120 edges", "7 of 16 nodes isolated"]),
        ("complete", 6, 15, ["complete graph on 6 nodes: all 15 edges"]),
        ("ring", 8, 8, ["ring graph on 8 nodes: all 8 edges"]),
        ("random", 8, 12, ["random connected graph, 12 of 28 possible edges, seed=0"]),
    ],
)  # fmt: skip
def test_explorer_title_says_what_is_drawn(rule, n, m, words):
    from structattn_lite.theory.explorer import explore_support

    fig, _ = explore_support(rule, n, m)
    title = fig.axes[0].get_title()
    for w in words:
        assert w in title, title
    if rule != "random" and "isolated" not in " ".join(words):
        assert "isolated" not in title and "capped" not in title


def test_explorer_complete_rule_draws_the_complete_graph():
    """Rule `complete` at n_nodes 16 drew a star of 8 edges: m now stays at its top."""
    from structattn_lite.theory.explorer import support_explorer

    box = support_explorer()
    rule, n, m = box.children[0].children
    rule.value = "complete"
    n.value = 16
    assert (m.value, m.max) == (120, 120)
    m.value = 8  # below the top, m is kept, and the title says the rule is capped
    n.value = 15
    assert (m.value, m.max) == (8, 105)


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.getheader("Location") or ""
    finally:
        conn.close()


@pytest.mark.slow
def test_app_asks_for_a_token_and_opens_on_the_landing_page(tmp_path):
    """Started as `make dashboard` starts it, without a token argument: the app makes one."""
    port = bs.free_port()
    log = tmp_path / "voila.log"
    cmd = [sys.executable, "-m", "structattn_lite.dashboard", str(FOLDER), "--no-browser"]
    cmd += ["--Voila.ip=127.0.0.1", f"--port={port}"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=bs.study_env(tmp_path), stdout=out, stderr=out)
        try:
            url = bs.wait_until(
                lambda: re.search(rf"http://127\.0\.0\.1:{port}/\?token=(\w+)", log.read_text()),
                60,
                "the app's URL with its token",
            )
            token = url.group(1)
            assert len(token) >= 32
            status, where = _get(port, "/voila/tree")
            assert status in (302, 403) and "token" not in where, (status, where)
            status, where = _get(port, f"/?token={token}")
            assert status in (301, 302) and where.startswith(f"/voila/render/{LANDING}")
            assert f"token={token}" in where
        finally:
            bs.stop(proc)
