"""Every figure and table in ``figures/``, drawn from the committed records in data/results.

``FIGURES`` maps each file's stem (``<notebook>_<name>``) to the function that draws it:
a matplotlib figure, or a ``Table`` that ``report.save_table`` writes as HTML, PNG and PDF.
The notebooks show these same drawings (``save``), ``structattn figures`` rewrites them all
(``write_all``), and tests/test_committed_figures.py fails when a file in git differs from
what the records render. The findings figures (``figures/findings_*.png``) are
``findings.write_figures``'s. Figures of a profile's own runs go to ``reports/<profile>/``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from structattn_lite import files
from structattn_lite.config import COMMITTED
from structattn_lite.findings import FIGURES as FINDINGS
from structattn_lite.names import PAPER_TASKS, display_name
from structattn_lite.report import in_words, save_figure, save_table, use_style
from structattn_lite.studies.ablations import report as ct
from structattn_lite.studies.ablations.grids import COMMITTED_CSV as ABLATION_CSV
from structattn_lite.studies.attention import figures as ap
from structattn_lite.studies.attention import lowparam
from structattn_lite.studies.attention import report as tr
from structattn_lite.studies.attention import tables as at
from structattn_lite.studies.attention.grids import LONG_FIRST_SWEEP_CSV
from structattn_lite.studies.grokking import report as gr
from structattn_lite.studies.grokking.results import committed_records
from structattn_lite.studies.length import authors as la
from structattn_lite.studies.length import report as lt


@dataclass(frozen=True)
class Table:
    """A table figure: the frame and the caption printed above it."""

    frame: pd.DataFrame
    caption: str = ""


# --- what the figures share --------------------------------------------------------

# A figure whose committed file is not there fails naming the file: the notebooks show
# these figures, and a notebook that cannot show its committed grid must fail.
_summary = partial(at.load_summary, missing_ok=False)
_histories = partial(at.load_committed_histories, missing_ok=False)


def _learning_curves(records: list, dataset: str, **kwargs) -> Figure:
    """The learning curves of the full-text float32 runs on ``dataset`` that read the test
    split among a committed grid's ``records``. (The n-gram floors the notebook prints need
    the corpus, which is not committed.)"""
    return ap.plot_learning_curves(
        [r for r in records if r.config["read_test"] and r.config["dataset"] == dataset
         and r.config["data_fraction"] == 1.0 and r.config["recipe"]["precision"] == "float32"],
        **kwargs,
    )  # fmt: skip


def _rate_sweeps() -> Figure:
    finals = at.main_finals(_summary())
    ran_at = finals[finals["dataset"] == "ptb"].groupby("variant")["lr"].first().to_dict()
    return ap.plot_rate_sweeps(at.load_tuning_histories(), ran_at)


def _grokking(task: str, grid: str, title: str) -> Figure:
    return gr.grokking_figure(committed_records(grid, missing_ok=False), task, title=title)


def _ablations(title: str, table, grids: tuple[str, ...] = ct.PAPER_SIZE) -> Table:
    """``table`` of the committed ``grids``' results, captioned ``title`` and the grid."""
    results = ct.load_results(grids)
    return Table(table(results), title + ct.grid_caption(results))


def _length_table(metric: str, title: str, protocol: str | None = None) -> Table:
    curves = lt.load_curves("committed")
    table = lt.length_table(curves, metric, protocol=protocol)
    return Table(table, title + lt.length_caption(curves))


def authors_curves() -> pd.DataFrame:
    """The authors' grid's curves: the full grid if committed, else its short version."""
    curves = lt.load_curves("authors")
    return curves if not curves.empty else lt.load_curves("authors_short", missing_ok=False)


def _grazzi_table() -> Table:
    curves = lt.load_curves("grazzi", missing_ok=False)
    caption = "Parity at Grazzi et al.'s protocol. " + lt.grazzi_caption(curves)
    return Table(lt.grazzi_table(curves), caption)


FIGURES: dict[str, Callable[[], Figure | Table]] = {
    # 02: attention variants (data/results/attention_*)
    "02_attention_committed_learning_curves":
        lambda: _learning_curves(_histories("committed"), "ptb"),
    "02_attention_committed_digits_learning_curves": lambda: _learning_curves(
        _histories("committed"), "digits", metric="val_loss"),
    "02_attention_long_learning_curves":
        lambda: _learning_curves(_histories("long"), "ptb"),
    "02_attention_long_learning_curves_first_sweep":
        lambda: _learning_curves(at.load_earlier(LONG_FIRST_SWEEP_CSV), "ptb"),
    "02_attention_committed_fraction_sweep": lambda: ap.plot_fraction_sweep(
        _summary(), rates="rates: as tuned on the full text"),
    "02_attention_committed_fraction_sweep_best_rates": lambda: ap.plot_fraction_sweep(
        tr.best_known(tr.load_first_sweep(), _summary(), parts=("main", "low data")),
        rates="rates: each best on validation, per fraction"),
    "02_attention_committed_rate_sweeps": _rate_sweeps,
    "02_attention_lowparam": lambda: lowparam.figure(
        _summary("lowparam"), _histories("lowparam")),
    # 03: grokking (data/results/csp_grokking_gap, csp_paper_era_parity)
    **{f"03_csp_grokking_{task}_gap": partial(
        _grokking, task, "gap", f"{display_name(task)}, paper sizes (grid 'gap')")
       for task in PAPER_TASKS},
    "03_csp_grokking_parity_paper_era": partial(  # the panel names the model
        _grokking, "parity", "paper_era", f"{display_name('parity')}, the paper text's protocol"),
    # 04: ablations (data/results/csp_ablations_paper_*)
    "04_ablations_table3_paper_text": lambda: _ablations(
        "Table 3, paper size. ", lambda r: ct.display_table(ct.table3(r)),
        (ABLATION_CSV["paper_text"],)),
    "04_ablations_table4_paper_size": lambda: _ablations(
        "Table 4, paper size. ", lambda r: ct.display_table(ct.table4(r[r["loss"] == "focal"]))),
    "04_ablations_claims_paper_size": lambda: _ablations(
        "The paper's 'A beats B' claims, the ledger's ablation/* rows: mean(A) - mean(B) "
        "[95% Welch interval]; each row's reason is in LEDGER.md. ", lambda r: ct.claims_rows()),
    # 05: length generalization (data/results/length_*)
    **{f"05_length_{metric}_vs_length":
       lambda metric=metric: lt.plot_curves(lt.load_curves("committed"), metric)
       for metric in ("seq_acc", "unseen_acc")},
    "05_length_table_all_acc_fixed": partial(
        _length_table, "all_acc", "all-positions accuracy, trained at T=16. ", "fixed"),
    "05_length_table_seq_acc": partial(_length_table, "seq_acc", "whole-string accuracy at L. "),
    "05_length_authors_table": lambda: la.authors_figure(authors_curves()),
    "05_length_grazzi": lambda: lt.grazzi_figure(lt.load_curves("grazzi", missing_ok=False)),
    "05_length_grazzi_table": _grazzi_table,
}  # fmt: skip


# --- drawing and writing --------------------------------------------------------------


def draw(name: str) -> Figure | Table:
    """The figure or table ``name`` (a stem of ``FIGURES``), drawn from data/results."""
    if name not in FIGURES:
        raise ValueError(f"no committed figure {name!r}; the registry has {sorted(FIGURES)}")
    return FIGURES[name]()


def save(name: str, out: Path | None = None) -> Figure | Table:
    """Draw ``name`` and write its files into ``out`` (default ``figures/``); returns the
    drawing, for a notebook to show."""
    return _write(name, out)[0]


def _write(name: str, out: Path | None) -> tuple[Figure | Table, list[Path]]:
    # matplotlib's defaults and the study's style only, whatever a matplotlibrc, a notebook
    # or an earlier figure set: the same records give the same bytes on every machine
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        use_style()
        drawn = draw(name)
        notebook, rest = name.split("_", 1)  # save_figure writes "<notebook>_<name>"
        if isinstance(drawn, Table):  # its rows read as words (names.py), not code keys
            drawn = Table(in_words(drawn.frame), drawn.caption)
            paths = save_table(drawn.frame, notebook, rest, drawn.caption, COMMITTED, out=out)
        else:
            paths = save_figure(drawn, notebook, rest, profile=COMMITTED, out=out)
            # closed for pyplot, which would keep it open and show it a second time at the
            # end of a notebook's cell; ``display`` still draws a closed figure
            plt.close(drawn)
    return drawn, paths


def targets(folder: Path) -> list[Path]:
    """Every file ``write_all`` may write into ``folder``: each registered name as PNG,
    PDF and (a table) HTML, and the manifest."""
    return [folder / f"{name}.{ext}" for name in FIGURES for ext in ("png", "pdf", "html")] + [
        folder / MANIFEST
    ]


def check_targets(folder: Path) -> list[Path]:
    """``targets(folder)`` when each can be written; else a one-line ``files.WriteRefused``
    naming the first that cannot (a directory in its place, a folder not writable)."""
    return files.check_writable(targets(folder))


def write_all(out: Path | None = None) -> list[Path]:
    """Redraw every registered figure into ``out`` (default ``figures/``); returns the
    paths written."""
    paths = []
    for name in FIGURES:
        paths += _write(name, out)[1]
    return paths


MANIFEST = ".structattn-figures.json"  # the files ``structattn figures`` drew into a folder


def stray(folder: Path, written: list[Path]) -> list[Path]:
    """The files in ``folder`` that neither ``written`` (``write_all``'s paths) nor the
    findings figures (``findings.write_figures``) account for (what figures/ must not
    hold; ``structattn figures`` removes only those of them that it drew, ``stale``)."""

    drawn = {p.name for p in written} | {f"{name}.png" for name in FINDINGS}
    return sorted(p for p in folder.iterdir() if p.name not in {*drawn, ".gitkeep", MANIFEST})


def drawn_before(folder: Path) -> list[str]:
    """The names the last ``record_drawn`` in ``folder`` listed (none without a manifest,
    or with one that cannot be read)."""
    try:
        names = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def stale(folder: Path, written: list[Path]) -> list[Path]:
    """The files this command drew into ``folder`` before (its manifest) that it did not
    draw now: what it may remove. A file it never drew (a user's notes, a findings figure,
    a subfolder) is never among them."""
    now = {p.name for p in written}
    return sorted(
        folder / name
        for name in drawn_before(folder)
        if name not in now and "/" not in name and (folder / name).is_file()
    )


def record_drawn(folder: Path, written: list[Path]) -> Path:
    """Write the manifest of the files drawn into ``folder``."""
    path = folder / MANIFEST
    files.write_text(path, json.dumps(sorted(p.name for p in written), indent=0) + "\n")
    return path
