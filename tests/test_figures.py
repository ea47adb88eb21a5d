"""Every figure of the studies fits a paper and says what it plots.

Each figure function in ``structattn_lite/studies/*/{report,figures}.py`` is rendered on
the committed results in data/results (the attention study's per-run arrays, which are
not committed, come from its smoke grid) and checked: drawn one column (3.4 in) or two
columns (7.0 in) wide, no taller than a page, saved as PNG and PDF no wider than that
column, and no axis label a bare variable name or missing.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from structattn_lite import report
from structattn_lite.config import results_dir

STUDIES = Path(report.__file__).parent / "studies"
PAGE_HEIGHT = report.PAGE_HEIGHT


# --- the data: committed results, and the attention smoke grid for per-run arrays ------


@cache
def grokking_records():
    from structattn_lite.studies.grokking.experiment import committed_records

    records = committed_records()
    if not records:
        pytest.fail(f"no committed grokking records in {results_dir()}")
    return records


@cache
def length_curves():
    from structattn_lite.studies.length.report import load_curves

    return load_curves()


@cache
def ablations():
    from structattn_lite.studies.ablations import report as ct

    return ct.load_results()


@cache
def attention_records():
    """The committed attention histories are scalars per run; maps, weights, pruning and
    gradient norms exist only in full records, so the smoke grid supplies them."""
    from structattn_lite.runs import run_grid

    return [r for r in run_grid("attention", "smoke", progress=False) if r.status == "ok"]


def _attention_summary():
    from structattn_lite.studies.attention.tables import summarize

    return summarize(attention_records())


def _committed_tuning():
    from structattn_lite.studies.attention.tables import load_tuning_histories

    return load_tuning_histories()


def _first_with(field: str):
    return next(r for r in attention_records() if r.extra.get(field))


@cache
def _tables():
    from structattn_lite.studies.ablations import report as ct
    from structattn_lite.studies.length import report as lt

    results, curves = ablations(), length_curves()
    # the widest table (Table 4), the longest cells (claims), the most rows (length)
    return {
        "table4": ct.display_table(ct.table4(results)),
        "claims": ct.claims_rows(),
        "length_seq_acc": lt.length_table(curves, "seq_acc"),
    }


def _cases():
    from structattn_lite.studies.attention import figures as af
    from structattn_lite.studies.grokking import report as gr
    from structattn_lite.studies.length import report as lt

    cases = {
        f"grokking.grokking_figure[{t}]": lambda t=t: gr.grokking_figure(grokking_records(), t)
        for t in ("parity", "mod3", "dyck1")
    }
    cases |= {
        f"length.plot_curves[{m}]": lambda m=m: lt.plot_curves(length_curves(), m)
        for m in ("seq_acc", "unseen_acc", "all_acc")
    }
    cases |= {
        "length.grazzi_figure": lambda: lt.grazzi_figure(lt.load_curves("grazzi")),
    }
    cases |= {
        f"report.table_figure[{name}]": lambda name=name: report.table_figure(
            _tables()[name], f"{name}: a caption as long as the notebooks write. " * 3
        )
        for name in ("table4", "claims", "length_seq_acc")
    }
    cases |= {
        "attention.plot_learning_curves": lambda: af.plot_learning_curves(attention_records()),
        "attention.plot_fraction_sweep": lambda: af.plot_fraction_sweep(  # the longest title
            _attention_summary(), rates="rates: each best on validation, per fraction"
        ),
        "attention.plot_grad_norms": lambda: af.plot_grad_norms(attention_records()),
        "attention.plot_learned_weights": lambda: af.plot_learned_weights(_first_with("weights")),
        "attention.plot_weight_histograms": lambda: af.plot_weight_histograms(attention_records()),
        "attention.plot_attention_map": lambda: af.plot_attention_map(_first_with("maps")),
        "attention.plot_pruning": lambda: af.plot_pruning(attention_records()),
        "attention.plot_rate_sweeps": lambda: af.plot_rate_sweeps(  # both tuning schedules
            _committed_tuning(), {"dot": 4.8e-2}
        ),
    }
    return cases


CASES = _cases()


# --- the checks ----------------------------------------------------------------------


def _figure_functions() -> set[str]:
    """``study.function`` for each public function of a study's report/figures module
    that returns a figure (annotated ``-> Figure`` or ending in ``return fig``)."""
    found = set()
    for path in sorted(STUDIES.glob("*/*.py")):
        if path.stem not in ("report", "figures"):
            continue
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            annotated = node.returns is not None and "Figure" in ast.unparse(node.returns)
            last = node.body[-1]
            returns_fig = isinstance(last, ast.Return) and ast.unparse(last.value) == "fig"
            if annotated or returns_fig:
                found.add(f"{path.parent.name}.{node.name}")
    return found


def _bare_name(label: str) -> bool:
    """A label that is a variable name: contains "_" outside $math$."""
    return "_" in re.sub(r"\$[^$]*\$", "", label)


def _is_colorbar(ax) -> bool:
    return hasattr(ax, "_colorbar") or ax.get_label() == "<colorbar>"


def _overlap(a, b, axis: str) -> bool:
    lo, hi = ("x0", "x1") if axis == "x" else ("y0", "y1")
    return getattr(a, lo) < getattr(b, hi) and getattr(b, lo) < getattr(a, hi)


def label_problems(fig) -> list[str]:
    """Axis labels that are variable names, and axes with tick labels but no axis label
    (a label on another panel of the same column, row or the figure's own counts)."""
    axes = [ax for ax in fig.axes if ax.axison and not _is_colorbar(ax)]
    if not axes:  # a table: nothing to label
        return []
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()  # tick labels exist only once drawn
    problems = []
    for ax in axes:
        name = ax.get_title() or f"axes {fig.axes.index(ax)}"
        for axis in ("x", "y"):
            label = getattr(ax, f"get_{axis}label")()
            if _bare_name(label):
                problems.append(f"{name}: {axis} label {label!r} is a variable name")
            ticks = getattr(ax, f"get_{axis}ticklabels")()
            if label or not any(t.get_visible() and t.get_text() for t in ticks):
                continue
            along = "x" if axis == "x" else "y"  # a shared x label sits in the same column
            pos = ax.get_position()
            shared = any(
                getattr(o, f"get_{axis}label")() and _overlap(pos, o.get_position(), along)
                for o in axes
            )
            sup = getattr(fig, f"_sup{axis}label", None)
            if not shared and not (sup and sup.get_text()):
                problems.append(f"{name}: the {axis} axis has no label")
    for ax in fig.axes:
        if _is_colorbar(ax):
            for axis in ("x", "y"):
                label = getattr(ax, f"get_{axis}label")()
                if _bare_name(label):
                    problems.append(f"colour bar: label {label!r} is a variable name")
    return problems


def test_every_figure_function_is_checked():
    found = _figure_functions()
    assert len(found) >= 5, f"figure functions not found under {STUDIES}: {found}"
    covered = {case.split("[")[0] for case in CASES}
    missing = found - covered
    assert not missing, f"figure functions with no case in tests/test_figures.py: {missing}"


def test_label_check_catches_a_bare_name():
    from matplotlib.figure import Figure

    fig = Figure(figsize=report.figure_size(1))
    ax = fig.subplots()
    ax.plot([1, 2], [0.5, 0.7])
    ax.set(xlabel="evaluation length L", ylabel="seq_acc")
    assert label_problems(fig) == ["axes 0: y label 'seq_acc' is a variable name"]
    ax.set_ylabel("")
    assert label_problems(fig) == ["axes 0: the y axis has no label"]


def test_figure_size_names_its_columns():
    assert report.figure_size(1)[0] == report.ONE_COLUMN
    assert report.figure_size(2, height=3.0) == (report.TWO_COLUMN, 3.0)
    with pytest.raises(ValueError, match=r"columns=3 .*\[1, 2\]"):
        report.figure_size(3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_figure_fits_print(case, tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTATTN_FIGURES", str(tmp_path))
    fig = CASES[case]()
    width, height = fig.get_size_inches()
    columns = {report.ONE_COLUMN: 1, report.TWO_COLUMN: 2}
    column = next((c for c in columns if abs(width - c) < 0.01), None)
    assert column, f"{case}: {width:.2f} in wide, not one ({report.ONE_COLUMN}) or two columns"
    assert height <= PAGE_HEIGHT, f"{case}: {height:.2f} in tall, more than a page"
    assert not label_problems(fig), f"{case}: {label_problems(fig)}"

    png, pdf = report.save_figure(fig, "test", re.sub(r"\W+", "_", case), out=tmp_path)
    assert pdf.exists() and pdf.stat().st_size > 1000
    with Image.open(png) as im:
        saved = im.size[0] / report.SAVE_DPI
    assert saved <= column + 0.05, f"{case}: saved {saved:.2f} in wide; something sticks out"


def test_attention_panels_keep_the_grids_order_whatever_order_the_records_came_in():
    from structattn_lite.studies.attention.figures import in_grid_order
    from structattn_lite.studies.attention.grids import MAIN_VARIANTS

    met = ["matroidal m=2d (sep q/k)", "other", "dot", "matroidal m=4d", "dense", "dot",
           "dense (sep q/k)", "matroidal m=2d", "matroidal m=1d"]  # fmt: skip
    ordered = in_grid_order(met)
    assert ordered[:3] == ["dot", "dense", "dense (sep q/k)"]
    assert ordered[-1] == "other" and len(ordered) == len(MAIN_VARIANTS) + 1
    assert in_grid_order(met[::-1]) == ordered


# --- the README's findings figures: what a reader takes in at a glance -----------------


@cache
def _ledger():
    from structattn_lite import claims

    return claims.ledger()


def test_ledger_figure_keeps_diverged_rows_off_the_value_axis_and_clips_intervals():
    """A diverged row's x once sat at the published value ("ours = published") and one
    interval ran past 1.0: the x now sits in its own column, every mark inside [0, 1]."""
    import numpy as np

    from structattn_lite import findings

    table = _ledger()
    fig = findings.ledger_figure(table)
    value_ax, side = fig.axes
    rows = findings.accuracy_rows(table)
    assert rows["published"].between(0, 1).all()  # an accuracy axis: no epoch counts
    unrun = set(np.flatnonzero((rows["ours"].isna() & (rows["seeds"] > 0)).to_numpy()).tolist())
    assert unrun, "the committed ledger has diverged rows: the test needs them"
    marked = set()  # rows with a mark of ours on the value axis: dots and interval ends
    ends = []
    for line in value_ax.lines:
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        marked |= {int(round(v)) for v in y[np.isfinite(x)]}
        ends += list(x[np.isfinite(x)])
    for coll in value_ax.collections:
        for seg in getattr(coll, "get_segments", list)():
            ends += list(np.asarray(seg)[:, 0])
        marked |= {int(round(v)) for v in np.asarray(coll.get_offsets())[:, 1]}
    assert not unrun & marked, f"diverged rows drawn on the value axis: {sorted(unrun & marked)}"
    assert ends and 0 <= min(ends) and max(ends) <= 1, (min(ends), max(ends))
    side_rows = {int(round(y)) for c in side.collections for _, y in c.get_offsets()}
    assert unrun <= side_rows
    labels = [t.get_text() for t in side.texts]
    assert "5 of 5" in labels and len(labels) == len(side_rows)


def test_no_claim_is_titled_with_nan():
    claims = _ledger()["claim"]
    assert not claims.str.contains(r"\bnan\b").any(), claims[claims.str.contains("nan")].tolist()
    row = _ledger().set_index("id").loc["table3/ce/parity"]
    assert row["claim"].endswith("parity accuracy (no published number)")


def test_grokking_figure_shows_99_apart_from_100_with_its_levels_in_a_legend():
    """The 90/99/100% labels overlapped the curves, and a 0.4-1 axis cannot show 99%
    against 100%: a zoomed row does, and the levels are named in the figure's legend."""
    from structattn_lite import findings

    fig = findings.grokking_figure()
    assert len(fig.axes) == 6
    for ax in fig.axes:
        assert not ax.texts, f"{ax.get_title()}: text drawn over the curves"
    zoomed = [ax for ax in fig.axes if ax.get_ylim()[0] >= 0.9]
    assert len(zoomed) == 3
    for ax in zoomed:
        low, high = ax.get_ylim()
        assert (1.0 - 0.99) / (high - low) >= 0.1, "99% and 100% under a tenth of the panel apart"
    (legend,) = fig.legends
    assert {t.get_text() for t in legend.get_texts()} >= {"90%", "99%", "100%"}
    assert all("seeds reach 100%" in ax.get_title() for ax in fig.axes[:3])


def test_the_scratch_stamp_never_covers_a_figure_title(tmp_path):
    """Notebook 03's phase figure lost its title to the smoke stamp (both were the
    suptitle). A titled figure keeps its title, and the stamp sits apart from it."""
    import matplotlib.pyplot as plt

    titled, bare = plt.figure(), plt.figure()
    for fig in (titled, bare):
        fig.add_subplot().plot([0, 1], [0, 1])
    titled.suptitle("block 1's state, one string")
    report.save_figure(titled, "03_csp", "titled", profile="smoke", out=tmp_path)
    report.save_figure(bare, "03_csp", "bare", profile="smoke", out=tmp_path)
    assert titled.get_suptitle() == "block 1's state, one string"
    (stamp,) = [t for t in titled.texts if "[scratch: profile smoke" in t.get_text()]
    renderer = titled.canvas.get_renderer()
    title_box = titled._suptitle.get_window_extent(renderer)
    assert not stamp.get_window_extent(renderer).overlaps(title_box)
    assert "[scratch: profile smoke" in bare.get_suptitle()  # no title: the stamp is it
    plt.close(titled)
    plt.close(bare)


def test_a_theory_figure_is_never_stamped_scratch(tmp_path):
    """The HTML reports showed the theory figures with a red "[scratch: profile smoke,
    corpus n/a]": they depend on no profile or corpus, so they are not stamped."""
    import json

    from matplotlib.figure import Figure

    run, theory = Figure(), Figure()
    report.save_figure(run, "03_csp", "curves", profile="smoke", out=tmp_path)
    report.save_figure(theory, "01_theory", "spectra", profile="smoke", out=tmp_path,
                       from_runs=False)  # fmt: skip
    assert "[scratch: profile smoke" in run.get_suptitle()
    assert theory.get_suptitle() == ""
    notebook = Path(report.__file__).parents[1] / "notebooks" / "01_theory.ipynb"
    code = "\n".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
                     if c["cell_type"] == "code")  # fmt: skip
    calls = re.findall(r"save_figure\((.*)\)", code)
    assert calls and all("from_runs=False" in call for call in calls), calls


# --- rows, titles and tables read as words (names.DISPLAY_NAMES), not code keys --------

ID_SHAPED = re.compile(r"^[\w+]+(/[\w+]+)+$")  # a ledger id, e.g. table4/with/+silu/dyck1


def _code_keys_in(text: str) -> list[str]:
    """The code keys of ``names.DISPLAY_NAMES`` that ``text`` shows as keys: a key written
    as a word of its own outside every display name in the text (``dot`` in "dot product",
    ``paper`` in "CSP (paper text, code's switches)" are names)."""
    from structattn_lite.names import DISPLAY_NAMES

    rest = text
    for name in sorted(set(DISPLAY_NAMES.values()), key=len, reverse=True):
        rest = rest.replace(name, " ")
    return [
        key for key, name in DISPLAY_NAMES.items()
        if key != name and re.search(rf"(?<![\w+]){re.escape(key)}(?![\w+])", rest)
    ]  # fmt: skip


def test_the_code_key_check_catches_a_key():
    assert _code_keys_in("table4 · with · +silu · dyck1") == ["dyck1", "+silu"]
    assert _code_keys_in("Table 4, +SiLU, with rotation: parentheses") == []
    assert _code_keys_in("edge over dot product: 1% of the text vs all") == []


@pytest.mark.parametrize("figure", ["ledger_figure", "attention_figure"])
def test_findings_rows_read_as_words_with_their_ledger_ids_beside(figure):
    """The rows once read ``table4 · without · +silu · dyck1``: each row's label is now
    words, and its ledger id stands beside it, to look the row up in LEDGER.md."""
    from structattn_lite import findings

    table = _ledger()
    fig = getattr(findings, figure)(table)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels() if t.get_text()]
    assert len(labels) >= 10
    for label in labels:
        assert not ID_SHAPED.match(label) and " · " not in label, label
        assert not _code_keys_in(label), (label, _code_keys_in(label))
    ids = {t.get_text() for t in fig.texts}
    shown = {findings.row_label(i, c): i for i, c in zip(table["id"], table["claim"], strict=True)}
    assert all(shown[label] in ids for label in labels), sorted(set(shown.values()) - ids)[:3]


def test_a_ledger_row_label_names_models_tasks_and_variants_from_the_table():
    from structattn_lite import findings
    from structattn_lite.names import display_name

    label = findings.row_label("table4/with/+silu/dyck1")
    assert label.startswith("Table 4, +SiLU") and label.endswith(f": {display_name('dyck1')}")
    assert findings.row_label("table3/ce/mod3") == (
        f"Table 3, {display_name('ce')}: {display_name('mod3')}"
    )
    assert findings.row_label("authors/mod3/L32").startswith(display_name("authors_7d6c56a"))
    assert findings.row_label("chomsky/lstm/at_T16").startswith(f"{display_name('lstm')}: ")
    # a row of a kind it does not know is labelled by its claim, never by its id
    assert findings.row_label("new/kind", "a claim 0.50") == "a claim"
    with pytest.raises(ValueError, match="ident='new/kind'"):
        findings.row_label("new/kind")


@pytest.mark.parametrize("task", ["parity", "mod3", "dyck1"])
def test_grokking_titles_use_display_names(task):
    from structattn_lite import committed_figures as cf
    from structattn_lite.names import display_name
    from structattn_lite.studies.grokking import report as gr

    records = grokking_records()
    fig = gr.grokking_figure(records, task)
    presets = {r.config["preset"] or r.config["model"] for r in records if r.config["task"] == task}
    titles = {ax.get_title() for ax in fig.axes if ax.get_title()}
    assert titles == {f"{display_name(task)}: {display_name(p)}" for p in presets}
    committed = cf.draw(f"03_csp_grokking_{task}_gap")
    assert committed.get_suptitle().startswith(f"{display_name(task)}, ")


@pytest.mark.parametrize(
    "name",
    ["04_ablations_table3_paper_text", "04_ablations_table4_paper_size",
     "04_ablations_claims_paper_size", "05_length_table_seq_acc", "05_length_table_all_acc_fixed",
     "05_length_grazzi_table"],
)  # fmt: skip
def test_committed_tables_read_as_words(name, tmp_path):
    """Their rows once read ``paper · ce``, ``mod3``, ``diag_rnn_neg``: what is written
    (and what a notebook shows) names each model, task, variant and loss in words."""
    from structattn_lite import committed_figures as cf

    frame = cf.save(name, out=tmp_path).frame
    assert "preset" not in frame.index.names
    cells = [str(v) for level in frame.index.levels for v in level] if hasattr(
        frame.index, "levels") else [str(v) for v in frame.index]  # fmt: skip
    assert not [c for c in cells if _code_keys_in(c)], [c for c in cells if _code_keys_in(c)]
    caption = (tmp_path / f"{name}.html").read_text()
    assert not re.search(r"\b(ce|focal): ", caption)


def test_in_words_shows_display_names_and_refuses_a_key_it_does_not_know():
    import pandas as pd

    frame = pd.DataFrame({"preset": ["paper", "upstream"], "task": ["mod3", "dyck1"],
                          "seeds": [5, 3]}).set_index(["preset", "task"])  # fmt: skip
    shown = report.in_words(frame)
    assert list(shown.index.names) == ["model", "task"]
    assert list(shown.index) == [("CSP (paper text)", "mod-3"),
                                 ("CSP (authors' code, 3bb9f71)", "parentheses")]  # fmt: skip
    assert list(shown["seeds"]) == [5, 3]
    assert list(frame.index.get_level_values("task")) == ["mod3", "dyck1"]  # not changed
    assert report.in_words(shown).equals(shown)  # words stay words
    # an unregistered key is a one-line error, never shown as it is
    mystery = frame.rename(index={"upstream": "mystery"})
    with pytest.raises(ValueError, match=r"^key='mystery' has no entry in names\.DISPLAY_NAMES"):
        report.in_words(mystery)
