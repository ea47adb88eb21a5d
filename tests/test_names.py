"""One display name per model: the table in ``structattn_lite.names`` is the only place a
model's name is written, and figures, the ledger and the dashboards read it from there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from code_keys import keys_in

from structattn_lite import claims, names
from structattn_lite.report import model_style

ROOT = Path(__file__).resolve().parents[1]
# Display names the package wrote before the table, and the authors' name for their model.
OLD_NAMES = (
    "CSP, the text",
    "CSP, code switches",
    "CSP, the authors'",
    "the authors' CSP (",
    "Mahalanobis, separate q/k",
    "m=2d, separate q/k",
    "paper-era code (",
)
# The word may name their row (in prose, or as the key of their table), nothing else.
THEIR_ROW = r"their (README's )?CSP-Vanilla|CSP-Vanilla( parity)? row|\"CSP-Vanilla\"[:\])]"


def test_every_code_key_of_the_agreed_table_has_its_display_name():
    assert names.display_name("csp_paper") == names.display_name("paper") == "CSP (paper text)"
    for key in ("csp_authors", "authors_3bb9f71", "upstream"):
        assert names.display_name(key) == "CSP (authors' code, 3bb9f71)"
    for key in ("csp_authors_7d6c56a", "authors_7d6c56a"):
        assert names.display_name(key) == "CSP (authors' code, 7d6c56a)"
    assert names.display_name("authors_befce39") == "CSP (authors' code, befce39)"
    assert names.display_name("code_switches") == "CSP (paper text, code's switches)"
    assert names.display_name("matroidal m=1d") == "matroidal m=d"
    assert names.display_name("dense (sep q/k)") == "dense Mahalanobis (separate q/k)"
    assert names.display_name("diag_rnn_neg") == "diagonal RNN [-1, 1]"


def test_an_unknown_key_is_an_error_naming_the_table():
    with pytest.raises(ValueError, match=r"key='csp_vanilla' .* names\.DISPLAY_NAMES"):
        names.display_name("csp_vanilla")


def test_names_is_the_bottom_layer():
    source = (ROOT / "structattn_lite" / "names.py").read_text()
    assert not re.search(r"^\s*(from|import) structattn_lite", source, re.M)


def test_every_figure_style_takes_its_name_from_the_table():
    for key in names.MODELS + tuple(names.ALIASES):
        assert model_style(key)["name"] == names.display_name(key), key
    assert model_style("upstream")["name"] == "CSP (authors' code, 3bb9f71)"


def test_no_display_name_is_written_outside_the_table():
    package = [p for p in (ROOT / "structattn_lite").rglob("*.py") if p.name != "names.py"]
    dashboards = sorted((ROOT / "dashboards").glob("*.ipynb"))
    for path in [*package, *dashboards]:
        text = path.read_text()
        for old in OLD_NAMES:
            assert old not in text, f"{path.relative_to(ROOT)} writes {old!r}: use names.py"
        # "CSP-Vanilla" is the authors' README's name for its row, never ours
        for line in text.splitlines():
            if "CSP-Vanilla" in line and not re.search(THEIR_ROW, line):
                pytest.fail(f"{path.relative_to(ROOT)} calls a model CSP-Vanilla: {line.strip()}")


def test_the_ledger_names_models_as_the_table_does():
    ledger = claims.ledger().set_index("id")
    text = names.display_name("paper")
    assert ledger.loc["gap/paper/parity", "claim"].startswith(
        f"grokking gap (90% to 100% test accuracy), parity, {text}:"
    )
    assert (
        f", {names.display_name('authors_3bb9f71')}"
        in ledger.loc["spike/authors_3bb9f71/mod3", "claim"]
    )
    # each row of the authors' table names the revision behind it
    assert ledger.loc["authors/parity/L16", "claim"].startswith(names.authors("3bb9f71"))
    assert ledger.loc["authors/mod3/L32", "claim"].startswith(names.authors("7d6c56a"))
    assert ledger.loc["authors/dyck1/L64", "claim"].endswith("(their README's CSP-Vanilla row)")
    assert ledger.loc["attention/not_worse/sep", "claim"].startswith(
        "matroidal m=2d (separate q/k): validation bpc equal to or better than "
        "dense Mahalanobis (separate q/k)"
    )
    assert "over dot product" in ledger.loc["attention/low_data/dot", "claim"]


def test_a_model_dropdown_shows_display_names_and_passes_code_keys():
    from structattn_lite.report import browser

    shown = []
    tasks, seeds = ["parity", "dyck1"], [0]
    app = browser({"grid": ["csp_paper", "lstm"]},
                  lambda data: {"model": data, "task": tasks, "seed": seeds},
                  lambda data, model, task, seed: shown.append((model, task)))  # fmt: skip
    pickers = {getattr(w, "description", ""): w for w in app.children[0].children}
    model = pickers["model"]
    assert list(model.options) == [("CSP (paper text)", "csp_paper"), ("LSTM", "lstm")]
    model.value = "lstm"
    task = pickers["task"]
    # a task reads as words too, and passes its key (tasks in the paper's order)
    assert list(task.options) == [(names.display_name(t), t) for t in ("parity", "dyck1")]
    assert dict(task.options)["parentheses"] == "dyck1"
    task.value = "dyck1"
    assert shown == [("csp_paper", "parity"), ("lstm", "parity"), ("lstm", "dyck1")]
    seed = pickers["seed"]
    assert list(seed.options) == [0]  # not a code key: shown as it is


def test_every_task_and_loss_the_package_trains_has_a_display_name():
    """A caption or title names each task and loss by the table; a new one without an
    entry is an error there, not a code key in a figure."""
    from structattn_lite.data.tasks import TASKS
    from structattn_lite.training.losses import LOSSES

    for key in (*TASKS, *LOSSES):
        assert names.display_name(key) != key or key == "parity", key


def figure_text(fig) -> list[str]:
    """Every string matplotlib was given for ``fig``: titles, labels, ticks, legends, texts
    and table cells (all are Text artists)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def frame_text(frame) -> list[str]:
    """Every string a table shows: its headers, index and cells."""
    index = [str(v) for v in frame.index.to_flat_index()] + [str(n) for n in frame.index.names]
    return [*map(str, frame.columns.to_flat_index()), *index, *map(str, frame.values.ravel())]


@pytest.mark.parametrize("name", sorted(__import__("structattn_lite.committed_figures",
                                                   fromlist=["FIGURES"]).FIGURES))  # fmt: skip
def test_no_committed_figure_shows_a_code_key(name):
    """The strings each committed figure or table is drawn from (its Text artists; a
    table's frame, as written, and its caption) hold no code key."""
    import matplotlib.pyplot as plt

    from structattn_lite import committed_figures as cf
    from structattn_lite.report import in_words, table_figure

    drawn = cf.draw(name)
    if isinstance(drawn, cf.Table):
        shown = in_words(drawn.frame)
        fig = table_figure(shown, drawn.caption)
        strings = [*frame_text(shown), drawn.caption, *figure_text(fig)]
    else:
        fig, strings = drawn, figure_text(drawn)
    plt.close(fig)
    assert strings, name
    assert not keys_in(strings), f"{name} shows code keys: {keys_in(strings)}"


def test_no_findings_figure_shows_a_code_key():
    import matplotlib.pyplot as plt

    from structattn_lite import claims, findings

    table = claims.committed()
    drawn = {"ledger": lambda: findings.ledger_figure(table),
             "attention": lambda: findings.attention_figure(table),
             "grokking": findings.grokking_figure, "length": findings.length_figure}  # fmt: skip
    for name, draw in drawn.items():
        fig = draw()
        strings = figure_text(fig)
        plt.close(fig)
        assert strings and not keys_in(strings), f"{name}: {keys_in(strings)}"


def test_no_claims_dashboard_page_shows_a_code_key():
    """Each claim's page of dashboard 4: its dropdowns, its Markdown and its figure."""
    import matplotlib.pyplot as plt

    from structattn_lite.claims import browser

    table = browser.rows()
    strings = [*browser.sources(table), *table["claim"], browser.what_to_show(table)]
    for _, row in table.iterrows():
        strings.append(browser.describe(row))
        fig = browser.claim_figure(row)
        strings += figure_text(fig)
        plt.close(fig)
    assert not keys_in(strings), keys_in(strings)[:5]


def test_a_notebook_output_that_shows_a_code_key_is_found():
    """conftest fails every notebook nbmake executes whose outputs show a code key: a table
    cell, a printed line; a `code span` (a config value to type) and a progress bar's
    widget (its run id) are not words to read."""
    from code_keys import shown_in_notebook

    def out(**data):
        return {"output_type": "display_data", "data": data}

    nb = {"cells": [
        {"cell_type": "code", "outputs": [out(**{"text/html": "<td>dense (sep q/k)</td>"})]},
        {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                           "text": "trained upstream\n"}]},
        {"cell_type": "code", "outputs": [out(**{"text/markdown": "`preset` = `upstream`"})]},
        {"cell_type": "code", "outputs": [out(**{"application/vnd.jupyter.widget-view+json": {},
                                                 "text/plain": "parity/upstream/s0: 50%"})]},
        {"cell_type": "code", "outputs": [out(**{"text/plain": "CSP (authors' code, 3bb9f71)"})]},
    ]}  # fmt: skip
    assert [cell for cell, _ in shown_in_notebook(nb)] == [0, 1]
