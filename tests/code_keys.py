"""Code keys a reader must never meet in a figure, a table, a page or a notebook's output:
the authors' model's keys, the grids' and the attention variants' raw spellings. Used by
test_names (figures, tables, dashboards) and by conftest (every notebook nbmake executes)."""

import json
import re

import pandas as pd

from structattn_lite.config import results_dir

CODE_KEYS = re.compile(
    r"upstream|authors_3bb9f71|csp_authors|csp_paper|code_switches|paper_text|paper_table4"
    r"|sep q/k|m=1d|diag_rnn|mod3_authors|dyck1_authors|focal_constant|ce_all_positions"
)
# what is typed rather than read: a `code span`, an HTML <code> element (a command, a
# grid), and a run's progress bar (its run id)
TYPED = re.compile(r"`[^`]*`|<code>.*?</code>", re.S)


def keys_in(strings) -> list[str]:
    """The strings that show a code key. A ledger row id ("grazzi/diag_rnn", cited as the
    README cites it) and a `code span` (a command or grid to type) are names to type, not
    words to read, and are left out."""
    ids = sorted(pd.read_csv(results_dir() / "claims.csv")["id"], key=len, reverse=True)
    cited = re.compile("|".join(map(re.escape, ids)))
    words = [cited.sub("<row id>", TYPED.sub("`typed`", s)) for s in strings]
    return sorted({s for s in words if CODE_KEYS.search(s)})


def shown_in_notebook(nb) -> list[tuple[int, str]]:
    """(cell index, the line) of each code key a notebook's outputs show a reader: its
    tables, Markdown and printed text. A widget's own view (a progress bar names its run)
    is checked by the dashboard tests."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data or out.get("name") == "stderr":
                continue
            texts = [out.get("text", "")] + [
                data.get(k, "") for k in ("text/html", "text/markdown", "text/plain")
            ]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else text
                lines = [line for line in re.split(r"\n|</t[dh]>", text) if line.strip()]
                found += [(i, line.strip()[:160]) for line in keys_in(lines)]
    return found


if __name__ == "__main__":  # check executed notebooks: python tests/code_keys.py reports/*.ipynb
    import sys

    for path in sys.argv[1:]:
        for cell, line in shown_in_notebook(json.load(open(path))):
            print(f"{path} cell {cell}: {line}")
