"""How much of a test set the training set already holds, under the paper's random split
and under our disjoint one (a property of the data, shared by the CSP notebooks)."""

from __future__ import annotations

import math

import pandas as pd

from structattn_lite.data.splits import make_dataset
from structattn_lite.data.tasks import PAPER_N


def leakage_table(tasks=("parity", "mod3", "dyck1"), sizes=None, length: int = 16, seeds=(0, 1, 2)):
    """Share of test strings (and prefixes) also in training: random split vs disjoint."""
    sizes = sizes or {
        "paper sizes": PAPER_N,
        "ablation grid": dict.fromkeys(tasks, 1000),
        "length grid": dict.fromkeys(tasks, 2000),
    }
    rows = []
    for label, ns in sizes.items():
        for task in tasks:
            for split, leaky in (("random (paper)", True), ("disjoint (ours)", False)):
                stats = []
                for seed in seeds:
                    try:
                        stats.append(make_dataset(task, ns[task], length, seed, leaky=leaky).stats)
                    except ValueError:  # too few distinct strings exist for a disjoint split
                        stats.append(None)
                ok = [s for s in stats if s is not None]
                rows.append(
                    {
                        "data": label,
                        "task": task,
                        "n": ns[task],
                        "split": split,
                        "distinct strings": sum(s["n_distinct"] for s in ok) / len(ok)
                        if ok
                        else math.nan,
                        "test strings in train": sum(s["test_in_train"] for s in ok) / len(ok)
                        if ok
                        else math.nan,
                        "test prefixes in train": sum(s["test_prefixes_in_train"] for s in ok)
                        / len(ok)
                        if ok
                        else math.nan,
                    }
                )
    return pd.DataFrame(rows).set_index(["data", "task", "n", "split"])
