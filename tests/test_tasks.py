import itertools
import math

import pytest
import torch

from structattn_lite.data.splits import make_dataset
from structattn_lite.data.tasks import Dyck1, is_balanced, make_task, random_dyck_words


def brute_force_balanced(length: int) -> int:
    count = 0
    for bits in itertools.product((0, 1), repeat=length):
        depth, ok = 0, True
        for b in bits:
            depth += 1 if b == 0 else -1
            ok &= depth >= 0
        count += ok and depth == 0
    return count


@pytest.mark.parametrize("length", [2, 4, 6, 8, 10, 12])
def test_catalan_counts_match_enumeration(length):
    assert Dyck1().n_balanced(length) == brute_force_balanced(length)


def test_catalan_at_paper_length():
    assert Dyck1().n_balanced(16) == 1430
    assert make_task("parity").population(16) == 65536


def test_cycle_lemma_words_are_balanced_and_uniform():
    g = torch.Generator().manual_seed(0)
    words = random_dyck_words(20000, 6, g)
    assert is_balanced(words).all()
    counts = torch.unique(words, dim=0, return_counts=True)[1]
    assert len(counts) == 5  # C_3
    assert (counts.float() / len(words) - 0.2).abs().max() < 0.02


@pytest.mark.parametrize("task", ["parity", "mod3", "dyck1"])
def test_disjoint_split_has_no_shared_sequence(task):
    data = make_dataset(task, 1000, 16, seed=3)
    train = {tuple(r) for r in data.x_train.tolist()}
    assert not any(tuple(r) in train for r in data.x_test.tolist())
    assert data.overlap == 0.0
    assert data.n_distinct == 1000


def test_leaky_split_reports_its_overlap():
    data = make_dataset("dyck1", 10000, 16, seed=0, leaky=True)
    train = {tuple(r) for r in data.x_train.tolist()}
    shared = sum(tuple(r) in train for r in data.x_test.tolist()) / len(data.x_test)
    assert data.overlap == pytest.approx(shared)
    assert data.overlap > 0.5  # 5,000 draws from 1,430 balanced strings repeat a lot
    assert data.n_distinct < 10000


def test_prefix_labels_follow_definitions():
    x = make_dataset("parity", 200, 9, seed=1).x_train
    for task, rule in [
        ("parity", lambda c: c % 2),
        ("mod3", lambda c: int(c % 3 == 0)),
    ]:
        y = make_task(task).prefix_labels(x)
        for row, labels in zip(x.tolist(), y.tolist(), strict=True):
            assert labels == [rule(sum(row[: t + 1])) for t in range(len(row))]
    residue = make_task("modk", k=5, target="residue")
    assert residue.n_classes == 5
    assert torch.equal(residue.prefix_labels(x), x.cumsum(1) % 5)


def test_dyck_sequence_label_is_balancedness_and_share_is_respected():
    data = make_dataset("dyck1", 800, 16, seed=0)
    y_last = torch.cat([data.y_train[:, -1], data.y_val[:, -1], data.y_test[:, -1]])
    x = torch.cat([data.x_train, data.x_val, data.x_test])
    assert torch.equal(y_last.bool(), is_balanced(x))
    assert y_last.float().mean().item() == pytest.approx(0.5)
    # equal-count negatives: counting "(" alone cannot reject them
    assert ((x == 0).sum(1) == 8).all()


def test_same_seed_same_data_and_any_length():
    a, b = make_dataset("mod3", 300, 16, seed=7), make_dataset("mod3", 300, 16, seed=7)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    c = make_dataset("mod3", 300, 16, seed=8)
    assert not torch.equal(a.x_train, c.x_train)
    for length in (1, 3, 100):
        data = make_dataset("parity", 50, length, seed=0, leaky=True)
        assert data.x_train.shape[1] == length


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: make_dataset("sorting", 10, 4, 0),
            r"task='sorting'.*'parity', 'mod3', 'modk', 'dyck1'",
        ),
        (lambda: make_dataset("parity", 10, 0, 0), r"length must be >= 1"),
        (lambda: make_dataset("parity", 0, 4, 0), r"n must be >= 1"),
        (lambda: make_dataset("modk", 10, 4, 0, k=1), r"k must be >= 2"),
        (lambda: make_dataset("parity", 17, 4, 0), r"n=17 distinct strings.*only 16 exist"),
        (lambda: make_dataset("dyck1", 4000, 16, 0), r"2000 distinct balanced.*only 1430 exist"),
        (lambda: make_dataset("dyck1", 10, 7, 0), r"length=7 is odd"),
        (
            lambda: make_dataset("parity", 10, 4, 0, labels="token"),
            r"labels='token'.*'sequence', 'prefix'",
        ),
        (lambda: make_dataset("modk", 10, 4, 0, target="mean"), r"target='mean'"),
    ],
)
def test_bad_input_names_parameter_and_allowed_values(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_population_of_equal_count_negatives():
    assert Dyck1().n_negative(16) == math.comb(16, 8) - 1430


def test_paper_sizes_match_the_paper():
    from structattn_lite.data.splits import make_dataset
    from structattn_lite.data.tasks import PAPER_LENGTH, PAPER_N

    def paper(task):
        return make_dataset(task, PAPER_N[task], PAPER_LENGTH, 0, leaky=True)

    for task, n in [("parity", 5000), ("mod3", 5000), ("dyck1", 10000)]:
        data = paper(task)
        total = len(data.x_train) + len(data.x_val) + len(data.x_test)
        assert (total, data.length, data.leaky) == (n, 16, True)
    dyck = paper("dyck1")
    y = torch.cat([dyck.y_train, dyck.y_val, dyck.y_test])
    assert y[:, -1].float().mean().item() == pytest.approx(0.5)


def test_a_tasks_length_step_is_its_classs_and_the_length_study_reads_it():
    """Which lengths a task's strings may have is the task's own (its class), not a test
    of its name: the length study's training and scoring lengths follow it."""
    from structattn_lite.data.tasks import TASKS, make_task, task_class
    from structattn_lite.studies.length.experiment import eval_lengths

    assert {t: task_class(t).length_step for t in TASKS} == {
        "parity": 1, "mod3": 1, "modk": 1, "dyck1": 2, "mod3_authors": 1, "dyck1_authors": 2}  # fmt: skip
    assert all(isinstance(make_task(t), task_class(t)) for t in ("parity", "mod3", "dyck1"))
    # one long draw scores every length only where a prefix is a sample of its length
    assert [t for t in TASKS if not task_class(t).prefixes_are_samples] == [
        "dyck1", "dyck1_authors"]  # fmt: skip
    assert eval_lengths("mod3", 5) == [1, 2, 3, 4, 5]
    assert eval_lengths("dyck1", 48) == [*range(2, 34, 2), 40, 48]
    with pytest.raises(ValueError, match="task='nope'"):
        task_class("nope")
