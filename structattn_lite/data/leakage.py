"""How much of a test set the training set already holds, under the paper's random split
and under our disjoint one (a property of the data, shared by the CSP notebooks)."""

from __future__ import annotations

import pandas as pd

from structattn_lite.data.splits import make_dataset
from structattn_lite.data.tasks import PAPER_N
from structattn_lite.names import PAPER_TASKS


def leakage_table(tasks=PAPER_TASKS, sizes=None, length: int = 16, seeds=(0, 1, 2)):
    """Share of test strings (and prefixes) also in training: random split vs disjoint."""
    sizes = sizes or {
        "paper sizes": PAPER_N,
        "ablation grid": dict.fromkeys(tasks, 1000),
        "length grid": dict.fromkeys(tasks, 2000),
    }
    columns = {"n_distinct": "distinct strings", "test_in_train": "test strings in train",
               "test_prefixes_in_train": "test prefixes in train"}  # fmt: skip
    rows = []
    for label, ns in sizes.items():
        for task in tasks:
            for split, leaky in (("random (paper)", True), ("disjoint (ours)", False)):
                stats = []
                for seed in seeds:
                    try:
                        stats.append(make_dataset(task, ns[task], length, seed, leaky=leaky).stats)
                    except ValueError:  # too few distinct strings exist for a disjoint split
                        pass
                means = pd.DataFrame(stats, columns=list(columns)).mean()  # NaN: none built
                rows.append({"data": label, "task": task, "n": ns[task], "split": split,
                             **means.rename(columns).to_dict()})  # fmt: skip
    return pd.DataFrame(rows).set_index(["data", "task", "n", "split"])
