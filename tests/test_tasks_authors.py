"""The authors' mod-3 and Dyck-1, the validation split, and every task option's range."""

import itertools
import math
from collections import Counter

import pytest
import torch

from structattn_lite.data.splits import make_dataset
from structattn_lite.data.tasks import TASKS, AuthorsDyck1, make_task, nested_word

PAD = 2


def encode(text: str, length: int) -> list[int]:
    return [{"(": 0, ")": 1}[c] for c in text] + [PAD] * (length - len(text))


def test_mod3_authors_labels_the_residue_of_every_prefix():
    task = make_task("mod3_authors")
    assert (task.n_classes, task.vocab_size, task.name) == (3, 2, "mod3_authors")
    x = torch.tensor([[1, 1, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    assert task.prefix_labels(x).tolist() == [[1, 2, 2, 0, 1, 2], [0, 0, 0, 0, 0, 1]]
    assert torch.equal(make_task("mod3", target="residue").prefix_labels(x), task.prefix_labels(x))


def test_dyck1_authors_labels_hand_written_strings():
    task = make_task("dyck1_authors")
    x = torch.tensor([encode("())(", 8), encode("(())()", 8), encode(")(", 8), encode("((", 8)])
    i = -100
    assert task.prefix_labels(x).tolist() == [
        [1, 1, 0, 0, i, i, i, i],
        [1, 1, 1, 1, 1, 1, i, i],
        [0, 0, i, i, i, i, i, i],
        [1, 1, i, i, i, i, i, i],  # a valid prefix, though not balanced
    ]
    assert (task.vocab_size, task.pad) == (3, PAD)


def test_dyck1_authors_strings_follow_the_generator():
    task = AuthorsDyck1(min_length=4)
    x = task.sample(4000, 12, torch.Generator().manual_seed(0))
    assert x.shape == (4000, 12) and set(x.unique().tolist()) == {0, 1, PAD}
    sizes = (x != PAD).sum(1)
    assert set(sizes.tolist()) == {4, 6, 8, 10, 12}
    positions = torch.arange(12)
    assert torch.equal(x == PAD, positions >= sizes[:, None])  # padding only trails
    depth = torch.where(x == PAD, 0, 1 - 2 * x).cumsum(1)
    valid = depth.min(1).values >= 0
    assert valid.sum() == 2000  # half and half
    assert (depth[valid, -1] == 0).all()  # every valid string is balanced
    labels = task.prefix_labels(x)
    assert torch.equal(labels == -100, x == PAD)
    assert (labels[~valid] == 0).any(1).all()  # every invalid string has a failing prefix


def test_valid_words_follow_the_recursion_not_the_uniform_law():
    """Three pairs: inner pairs k uniform in {0, 1, 2}, so "(())()" (k = 1) has 1/3 and the
    other four words 1/6 each (a uniform law would give 1/5)."""
    x = AuthorsDyck1(min_length=6).draw_valid(6000, 6, torch.Generator().manual_seed(1))
    counts = Counter("".join("()"[t] for t in row) for row in x.tolist())
    assert set(counts) == {"((()))", "(()())", "(())()", "()(())", "()()()"}
    assert counts["(())()"] / 6000 == pytest.approx(1 / 3, abs=0.02)
    for word in ("((()))", "(()())", "()(())", "()()()"):
        assert counts[word] / 6000 == pytest.approx(1 / 6, abs=0.02)
    assert nested_word(2, [0.9, 0.1]) == [0, 1, 0, 1]  # pops 0.1 first: k = 0, then "()"


def test_invalid_strings_redraw_their_length_too():
    """P(dip | L=2) = 1/2, P(dip | L=4) = 10/16, so P(L=2 | invalid) = 4/9."""
    x = AuthorsDyck1().draw_invalid(9000, 4, torch.Generator().manual_seed(2))
    share_short = ((x != PAD).sum(1) == 2).float().mean().item()
    assert share_short == pytest.approx(4 / 9, abs=0.02)


def brute_force(length_max: int, min_length: int = 2) -> tuple[int, int]:
    valid = invalid = 0
    for size in range(min_length, length_max + 1, 2):
        for bits in itertools.product((1, -1), repeat=size):
            dips = min(itertools.accumulate(bits)) < 0
            valid += not dips and sum(bits) == 0
            invalid += dips
    return valid, invalid


@pytest.mark.parametrize("length, min_length", [(2, 2), (6, 2), (8, 4), (10, 10)])
def test_population_counts_match_enumeration(length, min_length):
    task = AuthorsDyck1(min_length=min_length)
    assert (task.n_valid(length), task.n_invalid(length)) == brute_force(length, min_length)
    assert AuthorsDyck1().n_valid(16) == sum(math.comb(2 * m, m) // (m + 1) for m in range(1, 9))


def test_dyck1_authors_at_its_smallest_length():
    x = make_task("dyck1_authors").sample(200, 2, torch.Generator().manual_seed(0))
    words = {tuple(r) for r in x.tolist()}
    assert words == {(0, 1), (1, 0), (1, 1)}  # "()", ")(", "))"


def test_dyck1_authors_at_a_long_length():
    task = make_task("dyck1_authors")
    x = task.draw_valid(3, 3000, torch.Generator().manual_seed(0))
    depth = torch.where(x == PAD, 0, 1 - 2 * x).cumsum(1)
    assert (depth.min(1).values >= 0).all() and (depth[:, -1] == 0).all()


# --- the validation split ------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS)
def test_validation_split_is_carved_from_training_and_disjoint(task):
    labels = "prefix" if task == "dyck1_authors" else "sequence"
    data = make_dataset(task, 600, 16, seed=1, labels=labels)
    splits = [{tuple(r) for r in x.tolist()} for x in (data.x_train, data.x_val, data.x_test)]
    assert [len(s) for s in splits] == [420, 60, 120]
    assert (
        not (splits[0] & splits[1]) and not (splits[0] & splits[2]) and not (splits[1] & splits[2])
    )
    assert data.stats["val_in_train"] == 0.0 and data.n_distinct == 600
    torch.testing.assert_close(data.y_val, data.task.prefix_labels(data.x_val))
    # the test strings do not depend on how much validation is carved out
    other = make_dataset(task, 600, 16, seed=1, labels=labels, val_fraction=0.3)
    assert torch.equal(other.x_test, data.x_test) and len(other.x_val) == 180


def test_no_validation_and_the_leaky_split():
    data = make_dataset("parity", 100, 8, seed=0, val_fraction=0.0)
    assert (len(data.x_train), len(data.x_val), len(data.x_test)) == (80, 0, 20)
    leaky = make_dataset("dyck1_authors", 4000, 16, seed=0, labels="prefix", leaky=True)
    assert leaky.stats["val_in_train"] > 0.5  # i.i.d. draws repeat, as the authors' split does
    assert leaky.summary()["n_val"] == 400


# --- every option across its range -----------------------------------------------------


@pytest.mark.parametrize(
    "task, options",
    [
        ("parity", {}),
        ("mod3", {"target": "divisible"}),
        ("mod3", {"target": "residue"}),
        ("modk", {"k": 2, "target": "divisible"}),
        ("modk", {"k": 2, "target": "residue"}),
        ("modk", {"k": 7}),
        ("mod3_authors", {}),
        ("dyck1", {"balanced": 0.0, "negatives": "random"}),
        ("dyck1", {"balanced": 1.0}),
        ("dyck1", {"balanced": 0.0, "negatives": "equal_count", "label": "valid_prefix"}),
    ],
)
def test_options_at_their_endpoints_work(task, options):
    length = 1 if options.get("negatives") == "random" or task.startswith(("par", "mod")) else 2
    data = make_dataset(task, 30, length, seed=0, leaky=True, **options)
    assert data.x_train.shape[1] == length
    assert ((data.y_train >= 0) & (data.y_train < data.n_classes)).all()


def test_mod2_targets_are_parity_and_its_complement():
    x = torch.randint(0, 2, (50, 9), generator=torch.Generator().manual_seed(0))
    parity = make_task("parity").prefix_labels(x)
    assert torch.equal(make_task("modk", k=2, target="residue").prefix_labels(x), parity)
    assert torch.equal(make_task("modk", k=2, target="divisible").prefix_labels(x), 1 - parity)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: make_task("modk", k=1), r"k must be >= 2"),
        (lambda: make_task("modk", target="sum"), r"target='sum'.*'divisible', 'residue'"),
        (lambda: make_task("mod3", k=5), r"task option='k'.*'mod3'.*\['target'\]"),
        (lambda: make_task("parity", k=2), r"task option='k'.*'parity'.*takes no options"),
        (lambda: make_task("dyck1", balanced=1.01), r"balanced must be a share in \[0, 1\]"),
        (lambda: make_task("dyck1", balanced=-0.1), r"balanced must be >= 0"),
        (lambda: make_task("dyck1_authors", min_length=3), r"min_length must be even"),
        (lambda: make_task("dyck1_authors", min_length=0), r"min_length must be >= 2"),
        (lambda: make_dataset("dyck1", 20, 7, 0, leaky=True), r"length=7 is odd"),
        (lambda: make_dataset("dyck1", 20, 7, 0, leaky=True, balanced=0.0),
         r"length=7 is odd: no string holds as many"),
        (lambda: make_dataset("dyck1_authors", 20, 9, 0, labels="prefix"), r"length must be even"),
        (lambda: make_dataset("dyck1_authors", 20, 4, 0, labels="prefix", min_length=6),
         r"length must be >= 6"),
        (lambda: make_dataset("dyck1_authors", 20, 8, 0), r"pads its strings.*labels='prefix'"),
        (lambda: make_dataset("dyck1_authors", 5000, 8, 0, labels="prefix"),
         r"distinct valid strings but only 22 exist"),
        (lambda: make_dataset("parity", 2, 8, 0), r"n=2 is too small"),
        (lambda: make_dataset("parity", 0, 8, 0), r"n must be >= 1"),
        (lambda: make_dataset("parity", 10, 0, 0), r"length must be >= 1"),
        (lambda: make_dataset("parity", 10, 8, 0, test_fraction=0.0), r"test_fraction must be > 0"),
        (lambda: make_dataset("parity", 10, 8, 0, val_fraction=-0.1), r"val_fraction must be >= 0"),
        (lambda: make_dataset("parity", 10, 8, 0, test_fraction=0.5, val_fraction=0.5),
         r"test_fraction \+ val_fraction must be < 1"),
        (lambda: make_dataset("parity", 10, 3, 0), r"n=10 distinct strings.*only 8 exist"),
    ],
)  # fmt: skip
def test_out_of_range_options_raise_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_smallest_splits():
    data = make_dataset("parity", 3, 4, seed=0)
    assert (len(data.x_train), len(data.x_val), len(data.x_test)) == (1, 1, 1)
    assert len(make_dataset("parity", 2, 4, seed=0, val_fraction=0.0).x_train) == 1
