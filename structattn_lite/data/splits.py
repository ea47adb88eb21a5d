"""Train, validation and test splits of a state-tracking task, with their provenance.

``make_dataset`` builds the split: disjoint by sequence by default, or the paper's
i.i.d. random split (``leaky=True``), whose overlap it measures. The validation strings
are carved from the training strings, so early stopping and learning-rate plateaus
never need the test set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.data.tasks import LABELS, Task, make_task

PROGRESS_CELLS = 20_000_000  # symbols in a split above which building it shows progress
MAX_CELLS = 200_000_000  # symbols a split is built from at most (int64: 1.6 GB, twice)
MAX_LENGTH = 4096  # the longest string a run trains or is scored at


@dataclass
class StateTrackingData:
    """A train/validation/test split of one task at one length, with its provenance.

    ``y_*`` always hold one label per prefix (-100 where a padded task has no symbol);
    with ``labels="sequence"`` models are trained and scored on the last position only.
    The validation strings come out of the training strings: select on them, never on test.
    """

    task: Task
    length: int
    labels: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    leaky: bool
    n_possible: int  # distinct strings of this length in the task's population
    stats: dict = field(default_factory=dict)
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None

    @property
    def n_classes(self) -> int:
        return self.task.n_classes

    @property
    def vocab_size(self) -> int:
        return self.task.vocab_size

    @property
    def n_distinct(self) -> int:
        return self.stats["n_distinct"]

    @property
    def overlap(self) -> float:
        return self.stats["test_in_train"]

    def summary(self) -> dict:
        return {
            "task": self.task.name,
            "length": self.length,
            "labels": self.labels,
            "split": "leaky (i.i.d. random)" if self.leaky else "disjoint by sequence",
            "n_train": len(self.x_train),
            "n_val": 0 if self.x_val is None else len(self.x_val),
            "n_test": len(self.x_test),
            "n_possible": self.n_possible,
            **self.stats,
        }


def check_size(n: int, length: int, what: str = "length") -> None:
    """A ValueError naming ``what`` for a length no run here can serve: over
    ``MAX_LENGTH`` (a model's activations at 100,000 filled 22 GB), or ``n`` strings of
    it over ``MAX_CELLS`` symbols (the split is built in memory)."""
    if length > MAX_LENGTH:
        raise ValueError(
            f"{what}={length} is longer than the {MAX_LENGTH:,} symbols a run can train "
            f"or be scored at in memory; use {what} <= {MAX_LENGTH:,}"
        )
    if n * length > MAX_CELLS:
        raise ValueError(
            f"{what}={length} with n={n} strings is {n * length:,} symbols, over the "
            f"{MAX_CELLS:,} a split can be built from in memory; use {what} <= "
            f"{MAX_CELLS // n:,} for n={n}, or fewer strings"
        )


def overlap_stats(
    x_train: torch.Tensor, x_test: torch.Tensor, x_val: torch.Tensor | None = None
) -> dict:
    """Distinct strings held (all splits); share of test strings, and of test prefixes, seen
    in training; share of validation strings seen in training.

    Each position t numbers the distinct pairs (number of the prefix before, symbol at t)
    of all rows, so two rows share a number exactly when their first t + 1 symbols agree:
    L sorts of n keys (n L log n, memory n), not n L^2 slices. A bar shows progress for a
    large split.
    """
    val = x_val if x_val is not None else x_train[:0]
    rows = torch.cat([x_train, x_test, val]).numpy().astype(np.int64)
    n_train, n_test = len(x_train), len(x_test)
    length = rows.shape[1]
    ids = np.zeros(len(rows), dtype=np.int64)  # the number of each row's prefix so far
    base = int(rows.max(initial=0)) + 1
    hits = 0
    big = rows.size > PROGRESS_CELLS
    for t in tqdm(range(length), desc="test prefixes in train", unit="pos", disable=not big):
        ids = np.unique(ids * base + rows[:, t], return_inverse=True)[1].reshape(-1)
        hits += int(np.isin(ids[n_train : n_train + n_test], ids[:n_train]).sum())
    train, test, val_ids = ids[:n_train], ids[n_train : n_train + n_test], ids[n_train + n_test :]
    return {
        "n_distinct": len(np.unique(ids)),
        "test_in_train": float(np.isin(test, train).sum()) / max(n_test, 1),
        "test_prefixes_in_train": hits / max(n_test * length, 1),
        "val_in_train": float(np.isin(val_ids, train).sum()) / max(len(val_ids), 1),
    }


def check_dataset(
    task: str,
    n: int,
    length: int,
    seed: int = 0,
    *,
    labels: str = "sequence",
    test_fraction: float = 0.2,
    val_fraction: float = 0.1,
    leaky: bool = False,
    **options,
):
    """Every check ``make_dataset`` makes of its arguments, without sampling a string
    (a config checks them when made, so a grid fails before its first run, not midway):
    (the task, the test and validation sizes) or a one-line ValueError naming the value.
    """
    spec = make_task(task, **options)
    check_int("n", n, minimum=1)
    check_int("length", length, minimum=1)
    check_size(n, length)
    check_int("seed", seed, minimum=0)
    check_choice("labels", labels, LABELS)
    if labels == "sequence" and spec.pad is not None:
        raise ValueError(
            f"task {task!r} pads its strings, so the last position is often padding; "
            "use labels='prefix'"
        )
    check_number("test_fraction", test_fraction, minimum=0.0, strict=True)
    check_number("val_fraction", val_fraction, minimum=0.0)
    if test_fraction + val_fraction >= 1:
        raise ValueError(
            f"test_fraction + val_fraction must be < 1, got {test_fraction} + {val_fraction}"
        )
    n_test = max(1, round(n * test_fraction))
    n_val = max(1, round(n * val_fraction)) if val_fraction > 0 else 0
    if n_test + n_val >= n:
        raise ValueError(
            f"n={n} is too small for a train/validation/test split with "
            f"test_fraction={test_fraction} and val_fraction={val_fraction}"
        )
    spec.check_sizes(n, length, distinct=not leaky)  # enough distinct strings, an even length
    return spec, n_test, n_val


def make_dataset(
    task: str,
    n: int,
    length: int,
    seed: int,
    *,
    labels: str = "sequence",
    test_fraction: float = 0.2,
    val_fraction: float = 0.1,
    leaky: bool = False,
    **options,
) -> StateTrackingData:
    """Sample ``n`` strings of ``length`` and split them into train, validation and test.

    Disjoint (default): ``n`` distinct strings, so no string occurs in two splits.
    ``leaky=True``: the paper's protocol, ``n`` i.i.d. strings split at random; the
    returned ``stats`` say how much of the test set the training set already holds.
    ``test_fraction`` of the strings go to test; ``val_fraction`` (of all ``n``; 0 for
    none) is carved from the rest, the training strings, and serves every selection.
    Options: ``k`` and ``target`` for "modk"; ``balanced``, ``negatives`` and ``label``
    for "dyck1" (see :class:`Dyck1`); ``min_length`` for "dyck1_authors" (``length`` is
    then the padded length).
    """
    spec, n_test, n_val = check_dataset(
        task, n, length, seed, labels=labels, test_fraction=test_fraction,
        val_fraction=val_fraction, leaky=leaky, **options,
    )  # fmt: skip

    generator = torch.Generator().manual_seed(seed)
    x = spec.sample(n, length, generator, distinct=not leaky)
    x = x[torch.randperm(n, generator=generator)]
    y = spec.prefix_labels(x)
    # Test first, as before validation existed: the same seed gives the same test strings.
    cut = n_test + n_val
    x_train, x_val, x_test = x[cut:], x[n_test:cut], x[:n_test]
    return StateTrackingData(
        task=spec,
        length=length,
        labels=labels,
        x_train=x_train,
        y_train=y[cut:],
        x_test=x_test,
        y_test=y[:n_test],
        leaky=leaky,
        n_possible=spec.population(length),
        stats=overlap_stats(x_train, x_test, x_val),
        x_val=x_val,
        y_val=y[n_test:cut],
    )
