"""Numbers in prose come from data: the README's findings are the committed tables
rendered, and no notebook's Markdown types a result by hand."""

import json
import re
from pathlib import Path

import pandas as pd

from structattn_lite import claims, findings, stats
from structattn_lite.studies.ablations.grids import PAPER_TABLE3, PAPER_TABLE4
from structattn_lite.studies.grokking.experiment import PAPER_GROKKING_GAP
from structattn_lite.studies.length.experiment import GRIDS as LENGTH_GRIDS
from structattn_lite.studies.length.grids import AUTHORS

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("parity", "mod3", "dyck1")

# Decimals a notebook may type: the papers' and the authors' published numbers (held in
# the package, beside which ours are shown), and facts about the tasks themselves.
TASK_FACTS = {
    0.5,  # chance on parity and on balanced Dyck-1
    0.67,  # majority class of "divisible by 3" (two thirds are not)
    0.625,  # (16 + 0.5 (64 - 16)) / 64: chance beyond T = 16 on all 64 positions
    0.25,  # the focal loss's alpha, a setting named in prose
    stats.ACCURACY_MARGIN,  # the equivalence margin on accuracy and F1
    stats.LENGTH_MARGIN,  # the equivalence margin far past the training length
    0.95,  # the confidence level of every interval
    LENGTH_GRIDS["committed"]["run"]["stop_at_fit"],  # the committed length grid's fit-stop
}


def published() -> set[float]:
    values = set(PAPER_TABLE3.values())
    values |= {v for row in PAPER_TABLE4.values() for v in row}
    values |= {v for pair in PAPER_GROKKING_GAP.values() for v in pair}
    values |= {v for task in AUTHORS.values() for row in task.values() for v in row}
    return {round(v, 3) for v in values if v == v}


def typed_numbers(text: str) -> list[float]:
    """Decimals and percentages in Markdown (integers such as 2^16 = 65,536 are counts)."""
    text = re.sub(r"\$[^$]*\$", "", text)  # formulas are derivations, not results
    text = re.sub(r"(?i)(section|table|eq\.|version) \d+(\.\d+)*", "", text)  # references
    found = [float(x) for x in re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", text)]
    found += [float(x) / 100 for x in re.findall(r"(\d+(?:\.\d+)?)%", text)]
    return found


def test_readme_findings_are_the_ledger_rendered_from_the_records():
    assert findings.readme_section() == findings.render(), (
        "README findings differ from data/results: run `structattn findings --write`"
    )


def test_committed_ledger_is_what_the_records_give():
    pd.testing.assert_frame_equal(claims.committed(), claims.ledger(), check_dtype=False)


def test_findings_figures_are_what_the_records_render(tmp_path):
    stale = [p.name for p in findings.write_figures(tmp_path)
             if p.read_bytes() != (ROOT / "figures" / p.name).read_bytes()]  # fmt: skip
    assert not stale, f"stale figures (run `structattn findings --write`): {stale}"


def test_every_claim_the_ledger_owes_has_its_row():
    ids = set(claims.ledger()["id"])
    owed = {f"table3/{loss}/{task}" for loss in ("focal", "ce") for task in TASKS}
    owed |= {f"table4/{rot}/{row}/{task}" for rot in ("with", "without")
             for row in ("base", "+silu", "+skip", "+norm") for task in TASKS}  # fmt: skip
    owed |= {"table4/with/layernorm/dyck1"}
    owed |= {f"{kind}/paper/{task}" for kind in ("gap", "spike") for task in TASKS}
    owed |= {f"authors/{task}/L{n}" for task in TASKS for n in (16, 32, 64)}
    owed |= {"grazzi/diag_rnn", "grazzi/diag_rnn_neg", "chomsky/lstm", "chomsky/transformer"}
    owed |= {f"attention/{row}" for row in (
        "not_worse/shared", "not_worse/sep", "smoother/shared", "smoother/sep",
        "fewer_parameters", "stable/nonfinite", "stable/bfloat16", "low_data/dense",
        "low_data/dot", "low_parameters", "long/not_worse/shared", "long/not_worse/sep",
        "best_m", "pruning", "digits")}  # fmt: skip
    assert owed <= ids, sorted(owed - ids)
    assert set(claims.ledger()["verdict"]) <= set(stats.VERDICTS)


def test_no_notebook_types_a_result_in_its_prose():
    allowed = published() | {round(v, 3) for v in TASK_FACTS}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] != "markdown":
                continue
            for value in typed_numbers("".join(cell["source"])):
                assert round(value, 3) in allowed, (
                    f"{path.name} cell {i} types the number {value}; render it from the "
                    "records (display(Markdown(...))) or name it in TASK_FACTS with why"
                )


def test_the_prose_checker_catches_a_typed_result():
    assert typed_numbers("parity reaches 0.97 and 62% of test strings leak") == [0.97, 0.62]
    assert typed_numbers("$C_8 = 1.430$, section 2.4 and version 2.14.1") == []


def test_the_attention_figure_draws_every_bpc_comparison_of_the_ledger():
    ledger = claims.ledger()
    drawn = {i for ids in findings.ATTENTION_PANELS.values()
             for i in ledger["id"] if re.fullmatch(ids, i)}  # fmt: skip
    # rows on another scale (parameters, shares, gradient variance, accuracy) stay out
    other = r"attention/(smoother/.*|fewer_parameters|stable/(nonfinite|saturated)|digits)"
    bpc = {i for i in ledger["id"] if i.startswith("attention/") and not re.fullmatch(other, i)}
    assert drawn == bpc, sorted(bpc ^ drawn)


NUMBERED = sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb"))


def numbered_items(text: str) -> list[str]:
    return re.findall(r"(?m)^\d+\. ", text)


def test_every_numbered_notebook_ends_with_three_questions_and_collapsed_answers():
    assert len(NUMBERED) == 5, [p.name for p in NUMBERED]
    for path in NUMBERED:
        *_, questions, answers = json.loads(path.read_text())["cells"]
        asked, answered = "".join(questions["source"]), "".join(answers["source"])
        assert questions["cell_type"] == answers["cell_type"] == "markdown", path.name
        assert asked.startswith("## Questions"), f"{path.name}: second-last cell is not Questions"
        assert len(numbered_items(asked)) == 3, f"{path.name}: Questions need three exercises"
        assert re.search(r"<details>\s*<summary>Answers</summary>", answered), (
            f"{path.name}: the last cell must hold the answers in a collapsed <details> block"
        )
        assert answered.rstrip().endswith("</details>"), path.name
        assert len(numbered_items(answered)) == 3, f"{path.name}: three answers, one a question"


def test_notebook_03_writes_the_csp_block_down_and_checks_it_by_hand():
    cells = json.loads((ROOT / "notebooks" / "03_csp_state_tracking.ipynb").read_text())["cells"]
    prose = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    for equation in (
        r"\theta_t = \pi \tanh",  # rotate
        r"\tilde z_t = e^{i\theta_t} z_t",
        r"h_t = \alpha_t\, h_{t-1} + \gamma_t\, \tilde z_t",  # recur
        r"\alpha_t = \gamma_t = \operatorname{softplus}(\delta_t)",
        r"\tilde h_t = \operatorname{SiLU}(h_t) + \sigma(g)\, z_t",  # skip
        r"h^{(l)}_t = \tilde h_t / |\tilde h_t|",  # normalise
        r"W_o\,[\cos\psi_t;\ \sin\psi_t]",  # phase decoder
    ):
        assert equation in prose, f"notebook 03 does not write {equation!r}"
    for revision in ("befce39", "3bb9f71", "7d6c56a", "778a15c"):
        assert revision in prose, f"notebook 03 does not say where {revision} departs"
    assert any(
        'build_model("csp", preset="paper"' in c and c.count("torch.testing.assert_close") >= 2
        for c in code
    ), "notebook 03 needs a cell that computes the block by hand and checks it with assert_close"
    assert any("phase_figure(" in c and "save_figure(" in c for c in code)


def test_every_notebook_cell_has_the_id_its_format_requires():
    """nbformat 4.5 gives each cell an id; a cell pasted in without one makes every run warn
    (MissingIDFieldWarning), and future nbformat versions refuse the notebook."""
    for path in sorted(
        [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "dashboards").glob("*.ipynb")]
    ):
        nb = json.loads(path.read_text())
        if (nb["nbformat"], nb["nbformat_minor"]) < (4, 5):
            continue
        missing = [i for i, cell in enumerate(nb["cells"]) if "id" not in cell]
        assert not missing, f"{path.name}: cells {missing} have no id"
