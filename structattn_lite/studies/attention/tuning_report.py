"""What the tuning runs say: each variant's validation number at every peak rate, the
rate it keeps, and whether rates past the sweep's edge would have done better.

A grid's ``lrs`` are its sweep: each variant keeps the rate with the best validation
number among them (``experiment.choose_lrs``). A grid's ``edge_lrs`` are tuning runs
on the same terms at rates past the sweep, trained after the finals; they never change
the rate a variant keeps, they say whether the sweep's edge capped it. Whether the rate a
short tuning schedule chose also wins over the finals' full budget is read from the final
runs of two sweeps (``rate_transfer_table``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from structattn_lite.studies.attention.grids import IMAGE_DATASETS
from structattn_lite.studies.attention.report import (
    difference,
    float32_finals,
    interval,
    load_summary,
    main_finals,
)


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


def edge_check_verdict(summary: pd.DataFrame, sweep) -> str:
    """In words: for how many variants a rate past the sweep beat the kept rate."""
    table = _validation(summary)
    check = _edge_check(table, sweep)
    if check.empty:
        return "No rates past the sweep's edge were checked."
    past = sorted(set(table.columns) - set(_swept(table, sweep)))
    parts = []
    for (dataset, what), rows in check.groupby(level=["dataset", "what"], sort=False):
        gains = rows["gain"][rows["gain"] > 0]
        by = f"{gains.min():.3f}" + (f"-{gains.max():.3f}" if gains.max() > gains.min() else "")
        spread = f" (by {by} {what})" if len(gains) else ""
        parts.append(f"{dataset}: {len(gains)} of {len(rows)} variants{spread}")
    at_top = (check["gain"] > 0) & (check["best_lr"] == past[-1])
    still = (
        f" For {int(at_top.sum())} of them the best is the highest rate checked "
        f"({past[-1]:g}), so their best rate may lie higher still."
        if at_top.any()
        else ""
    )
    return (
        f"Rates past the sweep's edge ({', '.join(f'{lr:g}' for lr in past)}; tuning runs on "
        f"the same terms, validation only) beat the rate each variant kept on "
        + "; ".join(parts)
        + ". Where they do, that variant's final runs are at a rate below its best on "
        "validation, and its verdicts hold at the kept rate only." + still
    )


# --- does the short schedule's choice hold at the full budget? -------------------------


def load_first_sweep() -> pd.DataFrame | None:
    """The committed grid's first sweep ({0.003, 0.006}, every variant at 0.006), kept when
    the sweep was widened: its final runs are the full-budget numbers at that rate."""
    return load_summary("committed", sweep="first")


def rate_transfer_table(first: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Per variant of the main comparison: full-budget validation bpc of the final runs at
    the first sweep's rate and at the rate the current sweep keeps (mean ± 95% t over
    seeds), and the difference (current minus first, 95% Welch t; negative: the current
    rate is better). Reads validation only, as the choice did."""
    old, new = main_finals(first), main_finals(current)
    rows = []
    for variant, now in new.groupby("variant", sort=False):
        before = old[old["variant"] == variant]
        if before.empty:
            continue
        d, lo, hi, n = difference(before["val_bpc"], now["val_bpc"])
        lr_old, lr_new = before["lr"].iloc[0], now["lr"].iloc[0]
        if np.isclose(lr_old, lr_new):
            word = "same rate"
        elif math.isnan(lo):
            word = "no interval"
        else:
            word = f"{lr_new:g} better" if hi < 0 else f"{lr_old:g} better" if lo > 0 else "no difference shown"  # fmt: skip
        rows.append({
            "variant": variant, "first sweep: rate": f"{lr_old:g}",
            "first sweep: val bpc": interval(before["val_bpc"]), "current: rate": f"{lr_new:g}",
            "current: val bpc": interval(now["val_bpc"]),
            "current minus first": f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}] (n={n})",
            "on validation": word,
        })  # fmt: skip
    return pd.DataFrame(rows)


def rate_transfer_verdict(table: pd.DataFrame, current: pd.DataFrame) -> str:
    """In words: for which variants the rate chosen over the short tuning schedule also
    does better on validation over the finals' budget (both read from ``current``)."""
    if table.empty:
        return "No final runs at both rates to compare."
    text = current[~current["dataset"].isin(IMAGE_DATASETS)]
    tuned = text["tuning"].astype(bool)
    steps, tune_steps = (int(text.loc[rows, "max_steps"].max()) for rows in (~tuned, tuned))
    moved = table[table["on validation"] != "same rate"]
    word = moved["on validation"]
    better = moved[word == moved["current: rate"] + " better"]["variant"].tolist()
    worse = moved[word == moved["first sweep: rate"] + " better"]["variant"].tolist()
    alone = moved[word == "no interval"]["variant"].tolist()  # one seed at a rate: no test
    unclear = moved[~moved["variant"].isin(better + worse + alone)]["variant"].tolist()
    untested = (
        f" {len(alone)} ({', '.join(alone)}) had one seed at a rate, too few for an interval."
        if alone
        else ""
    )
    return (
        f"Over the finals' {steps:,} steps, the rate the {tune_steps}-step tuning runs chose "
        f"did better on validation than the first sweep's for {len(better)} of {len(moved)} "
        f"variants ({', '.join(better) or 'none'}), worse for {len(worse)} "
        f"({', '.join(worse) or 'none'}), and no difference was shown for {len(unclear)} "
        f"({', '.join(unclear) or 'none'}) (95% Welch t over seeds).{untested} Where it did "
        "worse, the short schedule's choice does not carry over to the full budget, and that "
        "variant's committed finals are not at its best rate known on validation."
    )


def best_known(first: pd.DataFrame, current: pd.DataFrame, parts=("main",)) -> pd.DataFrame:
    """The final float32 runs of ``parts`` with each variant, at each fraction of the
    text, at the better of its two sweeps' rates on validation (lower mean validation bpc
    over seeds), with a ``sweep`` column ("first" or "current"): the most tuned numbers
    the records hold, chosen without the test split. With ``parts=("main", "low data")``
    the low-data verdict can be read at those rates."""
    old, new = float32_finals(first, parts), float32_finals(current, parts)
    chosen = []
    for (variant, fraction), now in new.groupby(["variant", "fraction"], sort=False):
        before = old[(old["variant"] == variant) & (old["fraction"] == fraction)]
        if len(before) and before["val_bpc"].mean() < now["val_bpc"].mean():
            chosen.append(before.assign(sweep="first"))
        else:
            chosen.append(now.assign(sweep="current"))
    return pd.concat(chosen, ignore_index=True) if chosen else new.assign(sweep=[])
