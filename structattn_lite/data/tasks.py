"""State-tracking tasks on binary strings: parity, counting mod k, Dyck-1.

Each task is a small class that samples strings of any length and labels every prefix
(the Chomsky-hierarchy style), so a model can be evaluated at lengths it never saw.
``make_dataset`` builds a train/test split from a task: disjoint by sequence by default,
or the paper's i.i.d. random split (``leaky=True``), whose overlap it measures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from structattn_lite.config import check_choice, check_int, check_number

TASKS = ("parity", "mod3", "modk", "dyck1")
LABELS = ("sequence", "prefix")

# The paper's data (section 3): length 16; 5,000 strings for parity and mod-3, 10,000
# parentheses strings balanced 50/50; i.i.d. samples split 80/20 at random.
PAPER_LENGTH = 16
PAPER_N = {"parity": 5000, "mod3": 5000, "dyck1": 10000}


def random_bits(n: int, length: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, (n, length), generator=generator)


def distinct_rows(draw, n: int, generator: torch.Generator) -> torch.Tensor:
    """Call ``draw(batch, generator)`` until ``n`` distinct rows are held (order kept)."""
    seen: dict[bytes, torch.Tensor] = {}
    while len(seen) < n:
        batch = draw(max(2 * (n - len(seen)), 64), generator)
        for row in batch:
            seen.setdefault(row.numpy().tobytes(), row)
            if len(seen) == n:
                break
    return torch.stack(list(seen.values()))


class Task:
    """Binary strings with one label per prefix; subclasses define the language."""

    name = "task"
    n_classes = 2

    def population(self, length: int) -> int:
        """How many distinct strings of this length the task samples from."""
        return 2**length

    def draw(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` i.i.d. strings (with replacement)."""
        return random_bits(n, length, generator)

    def sample(
        self, n: int, length: int, generator: torch.Generator, distinct: bool = False
    ) -> torch.Tensor:
        if not distinct:
            return self.draw(n, length, generator)
        if n > self.population(length):
            raise ValueError(
                f"n={n} distinct strings requested but only {self.population(length)} exist "
                f"for task {self.name!r} at length {length}; lower n or pass leaky=True"
            )
        if length <= 20:  # enumerate codes: exact and fast even when n is near 2**length
            codes = torch.randperm(2**length, generator=generator)[:n]
            powers = 2 ** torch.arange(length - 1, -1, -1)
            return (codes[:, None] // powers) % 2
        return distinct_rows(lambda b, g: self.draw(b, length, g), n, generator)

    def prefix_labels(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Parity(Task):
    name = "parity"

    def prefix_labels(self, x):
        return x.cumsum(1) % 2


class ModK(Task):
    """Count of ones mod k: "divisible" (binary, the paper's mod-3) or the k-class residue."""

    def __init__(self, k: int = 3, target: str = "divisible"):
        self.k = check_int("k", k, minimum=2)
        self.target = check_choice("target", target, ("divisible", "residue"))
        self.name = f"mod{k}"
        self.n_classes = 2 if target == "divisible" else k

    def prefix_labels(self, x):
        residue = x.cumsum(1) % self.k
        return (residue == 0).long() if self.target == "divisible" else residue


def dyck_depth(x: torch.Tensor) -> torch.Tensor:
    """Depth after each symbol, 0 = "(" and 1 = ")"."""
    return (1 - 2 * x).cumsum(1)


def is_balanced(x: torch.Tensor) -> torch.Tensor:
    depth = dyck_depth(x)
    return (depth[:, -1] == 0) & (depth.min(1).values >= 0)


def random_dyck_words(n: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Uniform balanced strings by the cycle lemma (no rejection, exact uniformity).

    A random arrangement of length/2 "(" and length/2 + 1 ")" has exactly one rotation
    whose walk stays >= 0 until its final step; dropping that step leaves a Dyck word.
    """
    half = length // 2
    steps = torch.cat([torch.ones(n, half), -torch.ones(n, half + 1)], 1)
    steps = steps.gather(1, torch.argsort(torch.rand(n, length + 1, generator=generator), 1))
    walk = steps.cumsum(1)
    start = (walk.argmin(1) + 1) % (length + 1)  # first minimum: the walk starts after it
    idx = (start[:, None] + torch.arange(length + 1)) % (length + 1)
    word = steps.gather(1, idx)[:, :length]
    return (word < 0).long()


class Dyck1(Task):
    """Balanced parentheses, a share ``balanced`` of positives.

    Negatives are unbalanced strings: with ``negatives="equal_count"`` they hold as many
    "(" as ")" (so counting alone cannot reject them); ``"random"`` takes any string.
    ``label="balanced"`` labels each prefix "balanced so far" (its last position is the
    sequence label); ``"valid_prefix"`` is the authors' one-counter "never below zero".
    """

    name = "dyck1"

    def __init__(
        self, balanced: float = 0.5, negatives: str = "equal_count", label: str = "balanced"
    ):
        self.balanced = check_number("balanced", balanced, minimum=0.0)
        if balanced > 1:
            raise ValueError(f"balanced must be a share in [0, 1], got {balanced}")
        self.negatives = check_choice("negatives", negatives, ("equal_count", "random"))
        self.label = check_choice("label", label, ("balanced", "valid_prefix"))

    def n_balanced(self, length: int) -> int:
        return math.comb(length, length // 2) // (length // 2 + 1) if length % 2 == 0 else 0

    def n_negative(self, length: int) -> int:
        pool = math.comb(length, length // 2) if self.negatives == "equal_count" else 2**length
        return (
            pool - self.n_balanced(length) if length % 2 == 0 or self.negatives == "random" else 0
        )

    def population(self, length):
        return self.n_balanced(length) + self.n_negative(length)

    def draw_negatives(self, n, length, generator):
        def draw(b, g):
            if self.negatives == "random":
                return random_bits(b, length, g)
            ones = torch.arange(length) >= length // 2
            return ones.long()[torch.argsort(torch.rand(b, length, generator=g), 1)]

        out = torch.empty(0, length, dtype=torch.long)
        while len(out) < n:  # rejection: balanced strings are at most 1/(length/2 + 1)
            batch = draw(2 * (n - len(out)) + 16, generator)
            out = torch.cat([out, batch[~is_balanced(batch)]])
        return out[:n]

    def split_counts(self, n: int, length: int) -> tuple[int, int]:
        n_pos = round(n * self.balanced)
        if n_pos and length % 2:
            raise ValueError(
                f"length={length} is odd: no balanced strings exist; use an even length"
            )
        return n_pos, n - n_pos

    def sample(self, n, length, generator, distinct=False):
        n_pos, n_neg = self.split_counts(n, length)
        if distinct:
            for what, want, have in (
                ("balanced", n_pos, self.n_balanced(length)),
                (f"unbalanced ({self.negatives})", n_neg, self.n_negative(length)),
            ):
                if want > have:
                    raise ValueError(
                        f"n={n} with balanced={self.balanced} asks for {want} distinct {what} "
                        f"strings but only {have} exist at length {length}; lower n, change "
                        "balanced, or pass leaky=True to sample with replacement"
                    )
            pos = distinct_rows(lambda b, g: random_dyck_words(b, length, g), n_pos, generator)
            neg = distinct_rows(lambda b, g: self.draw_negatives(b, length, g), n_neg, generator)
        else:
            pos = random_dyck_words(n_pos, length, generator)
            neg = self.draw_negatives(n_neg, length, generator)
        x = torch.cat([pos.reshape(-1, length), neg.reshape(-1, length)])
        return x[torch.randperm(len(x), generator=generator)]

    def draw(self, n, length, generator):
        return self.sample(n, length, generator)

    def prefix_labels(self, x):
        depth = dyck_depth(x)
        never_negative = depth.cummin(1).values >= 0
        if self.label == "valid_prefix":
            return never_negative.long()
        return (never_negative & (depth == 0)).long()


def make_task(task: str, **options) -> Task:
    """Name-to-constructor table; options go to the task's constructor."""
    check_choice("task", task, TASKS)
    if task == "parity":
        return Parity(**options)
    if task == "mod3":
        return ModK(k=3, **options)
    if task == "modk":
        return ModK(**options)
    return Dyck1(**options)


@dataclass
class StateTrackingData:
    """A train/test split of one task at one length, with its provenance.

    ``y_*`` always hold one label per prefix; with ``labels="sequence"`` models are
    trained and scored on the last position only.
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

    @property
    def n_classes(self) -> int:
        return self.task.n_classes

    @property
    def n_distinct(self) -> int:
        return self.stats["n_distinct"]

    @property
    def overlap(self) -> float:
        return self.stats["test_in_train"]

    @property
    def prefix_overlap(self) -> float:
        return self.stats["test_prefixes_in_train"]

    def summary(self) -> dict:
        return {
            "task": self.task.name,
            "length": self.length,
            "labels": self.labels,
            "split": "leaky (i.i.d. random)" if self.leaky else "disjoint by sequence",
            "n_train": len(self.x_train),
            "n_test": len(self.x_test),
            "n_possible": self.n_possible,
            **self.stats,
        }


def _rows(x: torch.Tensor) -> list[bytes]:
    return [r.tobytes() for r in x.numpy().astype("uint8")]


def overlap_stats(x_train: torch.Tensor, x_test: torch.Tensor) -> dict:
    """Distinct strings held; share of test strings, and of test prefixes, seen in training."""
    train_rows, test_rows = _rows(x_train), _rows(x_test)
    train_set = set(train_rows)
    in_train = sum(r in train_set for r in test_rows) / max(len(test_rows), 1)
    seen = hits = 0
    for t in range(1, x_train.shape[1] + 1):
        train_prefixes = {r[:t] for r in train_rows}
        hits += sum(r[:t] in train_prefixes for r in test_rows)
        seen += len(test_rows)
    return {
        "n_distinct": len(train_set | set(test_rows)),
        "test_in_train": in_train,
        "test_prefixes_in_train": hits / max(seen, 1),
    }


def make_dataset(
    task: str,
    n: int,
    length: int,
    seed: int,
    *,
    labels: str = "sequence",
    test_fraction: float = 0.2,
    leaky: bool = False,
    **options,
) -> StateTrackingData:
    """Sample ``n`` strings of ``length`` and split them into train and test.

    Disjoint (default): ``n`` distinct strings, so no test string occurs in training.
    ``leaky=True``: the paper's protocol, ``n`` i.i.d. strings split at random; the
    returned ``stats`` say how much of the test set the training set already holds.
    Options: ``k`` and ``target`` for "modk"; ``balanced``, ``negatives`` and ``label``
    for "dyck1" (see :class:`Dyck1`).
    """
    spec = make_task(task, **options)
    check_int("n", n, minimum=1)
    check_int("length", length, minimum=1)
    check_int("seed", seed, minimum=0)
    check_choice("labels", labels, LABELS)
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    n_test = max(1, round(n * test_fraction))
    if n_test >= n:
        raise ValueError(
            f"n={n} is too small for a train/test split with test_fraction={test_fraction}"
        )

    generator = torch.Generator().manual_seed(seed)
    x = spec.sample(n, length, generator, distinct=not leaky)
    x = x[torch.randperm(n, generator=generator)]
    y = spec.prefix_labels(x)
    x_train, x_test = x[n_test:], x[:n_test]
    return StateTrackingData(
        task=spec,
        length=length,
        labels=labels,
        x_train=x_train,
        y_train=y[n_test:],
        x_test=x_test,
        y_test=y[:n_test],
        leaky=leaky,
        n_possible=spec.population(length),
        stats=overlap_stats(x_train, x_test),
    )


def paper_dataset(task: str, seed: int = 0, **options) -> StateTrackingData:
    """The paper's preset: its length, sample size and i.i.d. random split (leaky)."""
    check_choice("task", task, tuple(PAPER_N))
    return make_dataset(task, PAPER_N[task], PAPER_LENGTH, seed, leaky=True, **options)
