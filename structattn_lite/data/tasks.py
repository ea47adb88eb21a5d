"""State-tracking tasks on binary strings: parity, counting mod k, Dyck-1.

Each task is a small class that samples strings of any length and labels every prefix
(the Chomsky-hierarchy style), so a model can be evaluated at lengths it never saw.
Splits of a task into training, validation and test strings live in ``data.splits``.

Beside ours, the authors' tasks (github hilhert/CSP, csp/data.py at 3bb9f71b):
``mod3_authors``, the 3-class residue (count of ones mod 3) per prefix, and
``dyck1_authors``, valid-prefix labels on strings of variable even length, padded.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from structattn_lite import names
from structattn_lite.config import check_choice, check_int, check_number
from structattn_lite.data.sizes import PAPER_LENGTH, PAPER_N  # noqa: F401 (re-exported)

LABELS = ("sequence", "prefix")
IGNORE_INDEX = -100  # label of padded positions; cross-entropy skips it


def random_bits(n: int, length: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, (n, length), generator=generator)


def distinct_rows(
    draw, n: int, generator: torch.Generator, max_draws: int | None = None
) -> torch.Tensor:
    """Call ``draw(batch, generator)`` until ``n`` distinct rows are held (order kept).

    ``max_draws`` bounds the rows drawn in all, for samplers under which some strings are
    so rare that collecting nearly all of them would take forever.
    """
    if n == 0:  # e.g. no positives at balanced=0.0; callers reshape to (0, length)
        return torch.empty(0, dtype=torch.long)
    seen: dict[bytes, torch.Tensor] = {}
    drawn = 0
    while len(seen) < n:
        if max_draws is not None and drawn >= max_draws:
            raise ValueError(
                f"only {len(seen)} distinct strings of the n={n} requested turned up in "
                f"{drawn} draws; lower n or pass leaky=True to sample with replacement"
            )
        batch = draw(max(2 * (n - len(seen)), 64), generator)
        drawn += len(batch)
        for row in batch:
            seen.setdefault(row.numpy().tobytes(), row)
            if len(seen) == n:
                break
    return torch.stack(list(seen.values()))


class Task:
    """Binary strings with one label per prefix; subclasses define the language."""

    name = "task"
    n_classes = 2
    vocab_size = 2  # tokens 0 and 1
    pad = None  # the padding token, for tasks whose strings vary in length
    length_step = 1  # the lengths a string may have are multiples of this
    # a prefix of a sampled string is a sample of its own length (uniform strings): one
    # long draw scores every length; a task with its own sampler per length draws each
    prefixes_are_samples = True

    def population(self, length: int) -> int:
        """How many distinct strings of this length the task samples from."""
        return 2**length

    def draw(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` i.i.d. strings (with replacement)."""
        return random_bits(n, length, generator)

    def check_sizes(self, n: int, length: int, distinct: bool = False) -> None:
        """The ValueError ``sample(n, length, distinct=distinct)`` would raise for these
        sizes, found without sampling (a grid's configs check it before any run)."""
        if distinct and n > self.population(length):
            raise ValueError(
                f"n={n} distinct strings requested but only {self.population(length)} exist "
                f"for task {self.name!r} at length {length}; lower n or pass leaky=True"
            )

    def sample(
        self, n: int, length: int, generator: torch.Generator, distinct: bool = False
    ) -> torch.Tensor:
        if not distinct:
            return self.draw(n, length, generator)
        self.check_sizes(n, length, distinct)
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


class Mod3Authors(ModK):
    """The authors' mod-3: three classes, the count of ones mod 3 after every prefix.

    Tokens are 0 and 1, but their script (experiments/mod3.py, 7d6c56a3) builds the model
    with ``vocab_size=3``, one embedding row never read; their 4,893 parameters include it,
    and with the same torch seed only that vocabulary draws their initial weights.
    """

    def __init__(self, vocab_size: int = 2):
        super().__init__(k=3, target="residue")
        self.name = "mod3_authors"
        self.vocab_size = check_choice("vocab_size", vocab_size, (2, 3))


def catalan(m: int) -> int:
    return math.comb(2 * m, m) // (m + 1)


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

    length_step = 2  # a balanced string has even length
    prefixes_are_samples = False  # balanced strings are drawn per length

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
        return catalan(length // 2) if length % 2 == 0 else 0

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
        if n - n_pos and length % 2 and self.negatives == "equal_count":
            raise ValueError(
                f"length={length} is odd: no string holds as many '(' as ')'; use an even "
                "length or negatives='random'"
            )
        return n_pos, n - n_pos

    def check_sizes(self, n, length, distinct=False):
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

    def sample(self, n, length, generator, distinct=False):
        self.check_sizes(n, length, distinct)
        n_pos, n_neg = self.split_counts(n, length)
        if distinct:
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


def nested_word(pairs: int, uniforms: list[float]) -> list[int]:
    """The authors' recursive Dyck word: "(" inner ")" rest, inner pairs uniform in 0..m-1.

    One uniform draw per pair, taken with ``uniforms.pop()`` in the order the recursion
    asks for them (outer pair, then its inside, then the rest); an explicit stack instead of
    recursion, so any length works.
    """
    close, word, todo = -1, [], [pairs]
    while todo:
        m = todo.pop()
        if m == close:
            word.append(1)
        elif m > 0:
            inner = int(uniforms.pop() * m)
            word.append(0)
            todo += [m - 1 - inner, close, inner]  # popped last to first
    return word


class AuthorsDyck1(Task):
    """The authors' Dyck-1 (csp/data.py at 3bb9f71b, used by their scripts to 778a15c1).

    Half the strings are valid, half invalid; each draws its length uniformly from the even
    numbers ``min_length..length`` and is padded at the end to ``length``. Valid strings are
    built by the recursion of :func:`nested_word` (balanced, not uniform over Dyck words).
    Invalid strings are random "(" / ")" strings of a random even length, redrawn (length
    included) until their depth dips below zero, so longer lengths are over-represented.
    Labels: 1 while the prefix never went below zero, else 0; -100 on padding.

    Tokens: 0 = "(", 1 = ")", 2 = pad (vocabulary 3). The authors number them 1, 2 and pad 0;
    a learned embedding cannot tell the two numberings apart. With an odd ``n`` the extra
    string is invalid (the authors' generator returns 2 * (n // 2) strings).
    """

    length_step = 2  # a balanced string has even length
    prefixes_are_samples = False  # balanced strings are drawn per length

    name = "dyck1_authors"
    vocab_size = 3
    pad = 2

    def __init__(self, min_length: int = 2):
        self.min_length = self._even("min_length", min_length, 2)

    @staticmethod
    def _even(param: str, value, minimum: int) -> int:
        check_int(param, value, minimum=minimum)
        if value % 2:
            raise ValueError(f"{param} must be even (the authors' strings are), got {value}")
        return value

    def lengths(self, length: int) -> range:
        self._even("length", length, self.min_length)
        return range(self.min_length, length + 1, 2)

    def n_valid(self, length: int) -> int:
        return sum(catalan(L // 2) for L in self.lengths(length))

    def n_invalid(self, length: int) -> int:  # strings whose depth dips below zero
        return sum(2**L - math.comb(L, L // 2) for L in self.lengths(length))

    def population(self, length):
        return self.n_valid(length) + self.n_invalid(length)

    def draw_lengths(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        options = torch.tensor(self.lengths(length))
        return options[torch.randint(len(options), (n,), generator=generator)]

    def draw_valid(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        sizes = self.draw_lengths(n, length, generator).tolist()
        uniforms = torch.rand(n, length // 2, generator=generator, dtype=torch.float64)
        out = torch.full((n, length), self.pad, dtype=torch.long)
        for i, (size, u) in enumerate(zip(sizes, uniforms.tolist(), strict=True)):
            out[i, :size] = torch.tensor(nested_word(size // 2, u[: size // 2][::-1]))
        return out

    def draw_invalid(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        out = torch.empty(0, length, dtype=torch.long)
        while len(out) < n:  # at least half of all (length, string) pairs dip below zero
            b = 2 * (n - len(out)) + 16
            sizes = self.draw_lengths(b, length, generator)
            x = torch.randint(0, 2, (b, length), generator=generator)
            x[torch.arange(length) >= sizes[:, None]] = self.pad
            dips = (self.depth(x).cummin(1).values < 0).any(1)
            out = torch.cat([out, x[dips]])
        return out[:n]

    def depth(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x == self.pad, 0, 1 - 2 * x).cumsum(1)

    def check_sizes(self, n, length, distinct=False):
        self.lengths(length)  # an even length, at least min_length
        n_valid, n_invalid = n // 2, n - n // 2
        if distinct:
            for what, want, have in (
                ("valid", n_valid, self.n_valid(length)),
                ("invalid", n_invalid, self.n_invalid(length)),
            ):
                if want > have:
                    raise ValueError(
                        f"n={n} asks for {want} distinct {what} strings but only {have} exist "
                        f"at lengths {self.min_length}..{length}; lower n or pass leaky=True"
                    )

    def sample(self, n, length, generator, distinct=False):
        self.check_sizes(n, length, distinct)
        n_valid, n_invalid = n // 2, n - n // 2
        if distinct:
            # Deeply nested words are rare under the recursion: bound the search.
            cap = 100 * n + 10_000
            valid = distinct_rows(
                lambda b, g: self.draw_valid(b, length, g), n_valid, generator, cap
            )
            invalid = distinct_rows(
                lambda b, g: self.draw_invalid(b, length, g), n_invalid, generator, cap
            )
        else:
            valid = self.draw_valid(n_valid, length, generator)
            invalid = self.draw_invalid(n_invalid, length, generator)
        x = torch.cat([valid.reshape(-1, length), invalid.reshape(-1, length)])
        return x[torch.randperm(len(x), generator=generator)]

    def draw(self, n, length, generator):
        return self.sample(n, length, generator)

    def prefix_labels(self, x):
        labels = (self.depth(x).cummin(1).values >= 0).long()
        return labels.masked_fill(x == self.pad, IGNORE_INDEX)


# --- the registry: one row per task ----------------------------------------------------


@dataclass(frozen=True)
class TaskRow:
    """A registered task: what builds it (its class, or a partial of it) and the options
    its constructor takes."""

    make: Callable[..., Task]
    options: tuple[str, ...] = ()

    @property
    def cls(self) -> type[Task]:
        return self.make.func if isinstance(self.make, functools.partial) else self.make


TASKS: dict[str, TaskRow] = {}  # task -> its row, in registration order


def register_task(
    task: str, make: Callable[..., Task], options: tuple[str, ...] = (), *,
    name: str | None = None, metric: str = "test_seq_acc", metric_name: str = "accuracy",
    chance: float | None = None, title: str | None = None, paper_n: int | None = None,
) -> TaskRow:  # fmt: skip
    """Register a task: one row holds everything the study needs of it. ``make`` and
    ``options`` build it; for a task names.py does not list, ``name`` (its display
    name), ``metric`` (the record column it is scored on) with ``metric_name``,
    ``chance`` (the majority class of the whole string) and ``title`` (a table's column
    title) go to names.py; ``paper_n``: its strings at the paper's sizes."""
    if task in TASKS and TASKS[task].make is not make:
        raise ValueError(f"task={task!r} is already registered")
    if name is not None:
        title = title or f"{name} ({'acc' if metric_name == 'accuracy' else metric_name})"
        names.register(task, names.Entry(name, title=title, metric=metric,
                                         metric_name=metric_name, chance=chance))  # fmt: skip
    names.display_name(task)  # named, here or in names.py: else a one-line error
    if paper_n is not None:
        PAPER_N[task] = check_int("paper_n", paper_n, minimum=1)
    TASKS[task] = row = TaskRow(make, tuple(options))
    return row


register_task("parity", Parity)
register_task("mod3", functools.partial(ModK, k=3), ("target",))
register_task("modk", ModK, ("k", "target"))
register_task("dyck1", Dyck1, ("balanced", "negatives", "label"))
register_task("mod3_authors", Mod3Authors, ("vocab_size",))
register_task("dyck1_authors", AuthorsDyck1, ("min_length",))


def make_task(task: str, **options) -> Task:
    """A registered task built with ``options`` (each one its row allows)."""
    row = TASKS[check_choice("task", task, TASKS)]
    for option in options:
        if option not in row.options:
            raise ValueError(
                f"task option={option!r} is not allowed for task {task!r}; "
                + (f"choose one of {list(row.options)}" if row.options else "it takes no options")
            )
    return row.make(**options)


def task_class(task: str) -> type[Task]:
    """The class behind a task's name: what every task of it shares (``length_step``,
    ``n_classes``), read without building one."""
    return TASKS[check_choice("task", task, TASKS)].cls
