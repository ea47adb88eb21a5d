"""What the tuning runs say: each variant's validation number at every peak rate, the
rate it keeps, and whether rates past the sweep's edge would have done better.

A grid's ``lrs`` are its sweep: each variant keeps the rate with the best validation
number among them (``experiment.choose_lrs``). A grid's ``edge_lrs`` are tuning runs
on the same terms at rates past the sweep, trained after the finals; they never change
the rate a variant keeps, they say whether the sweep's edge capped it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from structattn_lite.studies.attention.grids import IMAGE_DATASETS


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
