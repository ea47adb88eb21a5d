"""Focal loss conventions (class alpha vs the authors' constant alpha) and ignored labels."""

import pytest
import torch
import torch.nn.functional as F

from structattn_lite.training.losses import (
    IGNORE_INDEX,
    LOSSES,
    TERMS,
    cross_entropy,
    focal_constant,
    focal_loss,
    get_loss,
    reduce,
)


def logits_and_target(n=200, classes=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, classes, generator=g) * 3, torch.randint(0, classes, (n,), generator=g)


def test_class_alpha_weights_positives_by_alpha_and_negatives_by_one_minus_alpha():
    logits, target = logits_and_target()
    p1 = F.softmax(logits, -1)[:, 1]
    p_t = torch.where(target == 1, p1, 1 - p1)
    alpha_t = torch.where(target == 1, 0.25, 0.75)
    expected = (-alpha_t * (1 - p_t) ** 2 * torch.log(p_t)).mean()
    torch.testing.assert_close(focal_loss(logits, target), expected)
    torch.testing.assert_close(get_loss("focal")(logits, target), expected)


@pytest.mark.parametrize("classes", [2, 3, 5])
def test_constant_alpha_is_the_authors_formula(classes):
    logits, target = logits_and_target(classes=classes)
    p_t = F.softmax(logits, -1).gather(1, target[:, None])[:, 0]
    expected = (0.25 * (1 - p_t) ** 2 * -torch.log(p_t)).mean()
    torch.testing.assert_close(focal_loss(logits, target, alpha_mode="constant"), expected)
    torch.testing.assert_close(get_loss("focal_constant")(logits, target), expected)
    # gamma = 0: a constant multiple of cross-entropy
    torch.testing.assert_close(
        focal_constant(logits, target, gamma=0.0, alpha=0.5), 0.5 * F.cross_entropy(logits, target)
    )


def test_the_two_conventions_differ_on_the_same_binary_batch():
    logits, target = logits_and_target()
    class_alpha = focal_loss(logits, target, alpha_mode="class")
    constant = focal_loss(logits, target, alpha_mode="constant")
    assert not torch.allclose(class_alpha, constant)
    # all negatives: class mode weights them by 0.75, constant by 0.25, i.e. a factor 3
    zeros = torch.zeros_like(target)
    torch.testing.assert_close(
        focal_loss(logits, zeros, alpha_mode="class"),
        3 * focal_loss(logits, zeros, alpha_mode="constant"),
    )


@pytest.mark.parametrize("name", LOSSES)
def test_ignored_labels_do_not_count(name):
    logits, target = logits_and_target(n=48, classes=2)
    logits, target = logits.reshape(4, 12, 2), target.reshape(4, 12)
    padded = target.clone()
    padded[:, 8:] = -100
    loss = get_loss(name)(logits, padded)
    labelled = get_loss(name)(logits[:, :8], target[:, :8])
    if name == "ce_all_positions":  # the authors' mean over all 48 positions, pads as zero
        torch.testing.assert_close(loss, labelled * 32 / 48)
    else:
        torch.testing.assert_close(loss, labelled)
    torch.testing.assert_close(
        cross_entropy(logits, padded), F.cross_entropy(logits.reshape(-1, 2), padded.reshape(-1))
    )


@pytest.mark.parametrize("name", LOSSES)
def test_a_batch_with_no_labels_gives_a_zero_that_backpropagates(name):
    logits = torch.randn(3, 4, 2, requires_grad=True)
    loss = get_loss(name)(logits, torch.full((3, 4), -100))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: focal_loss(torch.randn(4, 3), torch.zeros(4, dtype=torch.long)),
         r"focal loss needs a binary target.*alpha_mode='constant'"),
        (lambda: focal_loss(torch.randn(4, 2), torch.zeros(4, dtype=torch.long), alpha=1.5),
         r"alpha must lie in \[0, 1\] with alpha_mode='class'"),
        (lambda: focal_loss(torch.randn(4, 2), torch.zeros(4, dtype=torch.long), gamma=-1),
         r"gamma must be >= 0"),
        (lambda: focal_loss(torch.randn(4, 2), torch.zeros(4, dtype=torch.long),
                            alpha_mode="lin"), r"alpha_mode='lin'.*'class', 'constant'"),
        (lambda: cross_entropy(torch.randn(4, 2), torch.zeros(4, dtype=torch.long),
                               average="sum"), r"average='sum'.*'labelled', 'all_positions'"),
        (lambda: cross_entropy(torch.randn(4, 5, 2), torch.zeros(4, dtype=torch.long)),
         r"one class axis more than target"),
        (lambda: get_loss("mse"), r"loss='mse'.*'focal', 'ce', 'focal_constant'"),
    ],
)  # fmt: skip
def test_bad_arguments_name_what_is_allowed(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_constant_alpha_accepts_alpha_above_one():
    logits, target = logits_and_target(classes=3)
    torch.testing.assert_close(
        focal_constant(logits, target, alpha=2.0), 8 * focal_constant(logits, target, alpha=0.25)
    )


@pytest.mark.parametrize("name", LOSSES)
def test_each_losss_per_position_terms_average_to_it(name):
    """The stacked trainer averages ``TERMS`` once per seed (``per_seed_loss``): they must
    be the very loss ``get_loss`` computes, ignored positions and all."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 6, 7, 2, generator=g) * 3
    target = torch.randint(0, 2, (3, 6, 7), generator=g)
    target[1, :, 4:] = IGNORE_INDEX
    target[2] = IGNORE_INDEX  # a seed with nothing labelled
    terms, average = TERMS[name]
    per = terms(logits.reshape(3, -1, 2), target.reshape(3, -1))
    got = reduce(per, target.reshape(3, -1) != IGNORE_INDEX, average, dim=1)
    expected = torch.stack([get_loss(name)(logits[s], target[s]) for s in range(3)])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    assert expected[2] == 0 or average == "all_positions"
