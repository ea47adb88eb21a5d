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

IMAGE_DATASETS = ("digits", "cifar10")


def _validation(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean best validation number of each tuning cell, variant by peak rate."""
    tun = summary[summary["tuning"].astype(bool)].copy()
    image = tun["dataset"].isin(IMAGE_DATASETS)
    tun["valid"] = np.where(image, tun["val_loss"], tun["val_bpc"])
    tun["what"] = np.where(image, "val loss", "val bpc")
    return tun.pivot_table(index=["dataset", "variant", "what"], columns="lr", values="valid")


def tuning_table(summary: pd.DataFrame, sweep=None) -> pd.DataFrame:
    """Best validation number of each tuning run, variant by peak rate; * marks the rate
    each variant keeps (read on validation only, among the ``sweep`` rates: all rates
    when None). Rates past the sweep are the edge check, in a column of their own."""
    if not summary["tuning"].astype(bool).any():
        return pd.DataFrame()
    table = _validation(summary)
    in_sweep = [lr for lr in table.columns if sweep is None or any(np.isclose(lr, sweep))]
    marked = table.astype(object)
    edge, checked = [], []
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
        past = row.drop(index=in_sweep).dropna()
        if len(past):
            lr = past.idxmin()
            checked.append(
                f"{lr:g} better by {best - past[lr]:.3f}" if past[lr] < best else "choice holds"
            )
    marked["chosen at the sweep's edge"] = edge
    if checked:
        marked["past the edge (check)"] = checked
    return marked.reset_index()


def edge_check_verdict(summary: pd.DataFrame, sweep) -> str:
    """In words: for how many variants a rate past the sweep beat the kept rate."""
    table = tuning_table(summary, sweep)
    if "past the edge (check)" not in table:
        return "No rates past the sweep's edge were checked."
    past = [c for c in table.columns if isinstance(c, float) and not any(np.isclose(c, sweep))]
    parts = []
    for dataset, rows in table.groupby("dataset", sort=False):
        better = rows[rows["past the edge (check)"] != "choice holds"]
        gains = [float(v.rsplit(" ", 1)[1]) for v in better["past the edge (check)"]] or [0.0]
        what = rows["what"].iloc[0]
        by = f"{min(gains):.3f}" + (f"-{max(gains):.3f}" if max(gains) > min(gains) else "")
        spread = f" (by {by} {what})" if gains else ""
        parts.append(f"{dataset}: {len(better)} of {len(rows)} variants{spread}")
    top = max(past)
    at_top = table["past the edge (check)"].str.startswith(f"{top:g} better")
    still = (
        f" For {int(at_top.sum())} of them the best is the highest rate checked ({top:g}), so "
        "their best rate may lie higher still."
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
