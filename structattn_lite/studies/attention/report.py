"""What notebook 02 shows, from the records: the tables that compare (variant against
variant, one learning rate against another) and the notebook's steps, so each of its
cells is a short call into this module. ``tables`` holds the run summary and what each
variant measured, ``figures`` the plots; the verdicts on the card's hypothesis are the
ledger's (``structattn_lite.claims``), and these tables are the numbers beside them.

Between variants: the contrasts the study was built for (``contrast_table``), each
rival's edge per fraction of the text (``low_data_table``) and what bfloat16 costs
(``precision_table``), all on test bpc of the final runs.

Between rates: a grid's ``lrs`` are its sweep, and each variant keeps the rate with the
best validation number among them (``experiment.choose_lrs``); ``edge_lrs`` are tuning
runs on the same terms at rates past the sweep, trained after the finals, which never
change the choice but show whether the sweep's edge capped it (``tuning_table``). How the
committed grids came to their rates over three sweeps, and whether a rate chosen over a
short tuning schedule also won over the finals' budget, is a committed table (the
notebook's appendix, ``rate_history``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from structattn_lite import stats
from structattn_lite.studies.attention.grids import (
    FIRST_SWEEP_CSV,
    GRIDS,
    IMAGE_DATASETS,
    RATE_HISTORY_CSV,
)
from structattn_lite.studies.attention.tables import (
    budget_table,
    difference,
    finals,
    float32_finals,
    fraction_table,
    grid_caption,
    load_committed_histories,
    load_summary,
    main_finals,
    measurement_table,
    pruning_table,
    summarize,
)

__all__ = [  # what the notebook calls, defined here or in tables
    "GRIDS", "budget_table", "caption", "contrast_table", "floors_for", "fraction_table",
    "ledger_rows", "load_committed_histories", "load_summary", "low_data_table",
    "measurement_table", "precision_table", "pruning_table", "rate_drift", "summarize",
    "rate_history", "tuning_table",
]  # fmt: skip
DIFFERENCE = ["difference", "low", "high", "seeds"]  # a mean and its 95% interval

# --- between variants ----------------------------------------------------------------

# (variant, against, what the pair isolates): the comparisons the study was built for
CONTRASTS = (
    ("matroidal m=2d", "dense", "matroidal vs dense, both with the seed's shared projection"),
    ("matroidal m=2d (sep q/k)", "matroidal m=2d", "separate q/k vs shared z (matroidal)"),
    ("dense (sep q/k)", "dense", "separate q/k vs shared z (dense)"),
    ("matroidal m=2d", "dot", "matroidal (shared z) vs dot"),
    ("matroidal m=2d (sep q/k)", "dot", "matroidal (separate q/k) vs dot"),
)


def contrast_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The contrasts of the main part that both sides ran: test bpc of ``against`` minus
    ``variant`` (positive: ``variant`` better), its 95% Welch t interval and the smaller
    seed count (one seed: no interval, NaN)."""
    main = main_finals(summary)
    rows = []
    for a, b, what in CONTRASTS:
        x, y = (main[main["variant"] == v]["test_bpc"] for v in (a, b))
        if len(x) and len(y):
            rows.append([what, a, b, *difference(x, y)])
    return pd.DataFrame(rows, columns=["contrast", "variant", "against", *DIFFERENCE])


def low_data_table(summary: pd.DataFrame, structured: str = "matroidal m=2d") -> pd.DataFrame:
    """The structured metric's edge over each rival at each fraction of the text: rival
    minus structured test bpc of the float32 final runs (positive: structured better),
    95% Welch t. The hypothesis asks for a larger edge at the smallest fraction than on
    all the text; the ledger's ``attention/low_data`` rows decide it on validation."""
    sub = float32_finals(summary)
    rows = []
    for rival in ("dense", "dot"):
        for fraction, at in sub.groupby("fraction"):
            x, y = (at[at["variant"] == v]["test_bpc"] for v in (structured, rival))
            if len(x) and len(y):
                rows.append([rival, fraction, *difference(x, y)])
    return pd.DataFrame(rows, columns=["rival", "fraction", *DIFFERENCE])


def precision_table(summary: pd.DataFrame) -> pd.DataFrame:
    """What bfloat16 autocast costs each variant of the stability part: its test bpc minus
    the same variant's float32 run of the main part on the same seed (same initialisation
    and data order; positive: bfloat16 worse), 95% paired t over those seeds (one seed:
    no interval, NaN)."""
    sub = finals(summary)
    sub = sub[sub["part"].isin(["main", "stability"]) & (sub["fraction"] == 1.0)]
    rows = []
    for variant in sub[sub["precision"] == "bfloat16"]["variant"].unique():
        runs = sub[sub["variant"] == variant].pivot_table(
            index="seed", columns="precision", values="test_bpc"
        )
        diffs = (runs["bfloat16"] - runs["float32"]).dropna()
        rows.append([variant, *stats.mean_interval(diffs)])
    return pd.DataFrame(rows, columns=["variant", *DIFFERENCE])


# --- between rates -------------------------------------------------------------------


def _validation(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean best validation number of each tuning cell, variant by peak rate."""
    tun = summary[summary["tuning"].astype(bool)].copy()
    image = tun["dataset"].isin(IMAGE_DATASETS)
    tun["valid"] = np.where(image, tun["val_loss"], tun["val_bpc"])
    tun["what"] = np.where(image, "val loss", "val bpc")
    return tun.pivot_table(index=["dataset", "variant", "what"], columns="lr", values="valid")


def _swept(table: pd.DataFrame, sweep) -> list[float]:
    return [lr for lr in table.columns if sweep is None or any(np.isclose(lr, sweep))]


def _edge_check(table: pd.DataFrame, sweep) -> pd.DataFrame:
    """Per variant: the kept rate's number, the best rate past the sweep, and the gain
    (positive when that rate beat the kept one); empty when no rate lies past it."""
    swept = _swept(table, sweep)
    past = table.drop(columns=swept)
    if past.empty:
        return pd.DataFrame()
    kept = table[swept].min(axis=1)
    best_lr = past.idxmin(axis=1)
    return pd.DataFrame({"kept": kept, "best_lr": best_lr, "gain": kept - past.min(axis=1)})


def tuning_table(summary: pd.DataFrame, sweep=None) -> pd.DataFrame:
    """Best validation number of each tuning run, variant by peak rate; * marks the rate
    each variant keeps (read on validation only, among the ``sweep`` rates: all rates
    when None). Rates past the sweep are the edge check, in a column of their own."""
    if not summary["tuning"].astype(bool).any():
        return pd.DataFrame()
    table = _validation(summary)
    in_sweep = _swept(table, sweep)
    marked = table.astype(object)
    edge = []
    for idx, row in table.iterrows():
        swept = row[in_sweep].dropna()
        best = swept.min()
        marked.loc[idx] = [
            "" if np.isnan(v) else f"{v:.3f}*" if lr in in_sweep and v == best else f"{v:.3f}"
            for lr, v in row.items()
        ]
        at = list(swept.index[swept == best])
        # a rate chosen at either end of the sweep may not be the best rate there is
        edge.append(
            "highest" if at[-1] == swept.index[-1] else "lowest" if at[0] == swept.index[0] else ""
        )
    marked["chosen at the sweep's edge"] = edge
    check = _edge_check(table, sweep)
    if len(check):
        marked["past the edge (check)"] = [
            f"{lr:g} better by {gain:.3f}" if gain > 0 else "choice holds"
            for lr, gain in zip(check["best_lr"], check["gain"], strict=True)
        ]
    return marked.reset_index()


def rate_drift(summary: pd.DataFrame, source: pd.DataFrame | None) -> pd.DataFrame:
    """The variants of a grid that keeps another grid's rates (``rates_from``) whose finals
    ran at a rate other than that of ``source``'s main-comparison finals: the rate each ran
    at and ``source``'s. Empty when they agree; a rerun trains at ``source``'s rates."""
    columns = ["variant", "ran at", "chosen now"]
    if source is None:
        return pd.DataFrame(columns=columns)
    now = main_finals(source).groupby("variant")["lr"].first()
    ran = finals(summary).groupby("variant")["lr"].first()
    moved = [(v, lr, now[v]) for v, lr in ran.items() if v in now and not np.isclose(lr, now[v])]
    return pd.DataFrame(moved, columns=columns)


def load_first_sweep() -> pd.DataFrame:
    """The committed grid's first-sweep runs (``FIRST_SWEEP_CSV``): every variant's finals
    at 0.006, the full-budget numbers at that rate."""
    from structattn_lite.config import results_dir

    return pd.read_csv(results_dir() / FIRST_SWEEP_CSV)


def best_known(first: pd.DataFrame, current: pd.DataFrame, parts=("main",)) -> pd.DataFrame:
    """The final float32 runs of ``parts`` with each variant, at each fraction of the
    text, at the better of its two sweeps' rates on validation (lower mean validation bpc
    over seeds), with a ``sweep`` column ("first" or "current"): the most tuned numbers
    the records hold, chosen without the test split. With ``parts=("main", "low data")``
    the low-data tables can be read at those rates."""
    old, new = float32_finals(first, parts), float32_finals(current, parts)
    chosen = []
    for (variant, fraction), now in new.groupby(["variant", "fraction"], sort=False):
        before = old[(old["variant"] == variant) & (old["fraction"] == fraction)]
        if len(before) and before["val_bpc"].mean() < now["val_bpc"].mean():
            chosen.append(before.assign(sweep="first"))
        else:
            chosen.append(now.assign(sweep="current"))
    return pd.concat(chosen, ignore_index=True) if chosen else new.assign(sweep=[])


def rate_history() -> pd.DataFrame:
    """The appendix: how the committed and long grids' main variants came to their rates,
    one row per sweep, oldest first (``sweep``: "first sweep", "retired", "committed"):
    the rates each sweep's tuning tried, over how many steps and seeds, the rate its
    finals ran at, their validation bpc (mean, 95% t) and the change from the sweep before
    (later minus earlier, 95% Welch t; negative: the later rate is better). The grids are
    final, so this is a committed table (``grids.RATE_HISTORY_CSV``), not recomputed."""
    from structattn_lite.config import results_dir

    table = pd.read_csv(results_dir() / RATE_HISTORY_CSV, keep_default_na=False)
    return table.set_index(["grid", "finals steps", "variant", "sweep"])


# --- the notebook's steps --------------------------------------------------------------


def ledger_rows(ledger: pd.DataFrame, *names: str) -> pd.DataFrame:
    """The card's rows of the claims ledger (``claims.ledger()``, which sits above the
    studies) whose id continues with one of ``names`` (``attention/<name>``): the verdicts
    a part of the grid decides."""
    ids = ledger["id"].str.removeprefix("attention/")
    return ledger[ledger["study"].eq("attention") & ids.str.startswith(names)]


def floors_for(summary: pd.DataFrame, dataset: str, floors: dict) -> dict | None:
    """``floors`` when the summary's language-model runs are on ``dataset``'s text (the
    floors belong under the tables of that text only), else None."""
    text = set(summary["dataset"]) - set(IMAGE_DATASETS)
    return floors if text == {dataset} else None


def caption(summary: pd.DataFrame, grid: str) -> str:
    """The grid a table came from (``tables.grid_caption``), with the rates its variants
    chose among, in Markdown."""
    spec = GRIDS[grid]  # without edge_lrs every rate tried (widened ones too) is in the choice
    return f"*Grid:* {grid_caption(summary, spec['lrs'] if spec.get('edge_lrs') else None)}."
