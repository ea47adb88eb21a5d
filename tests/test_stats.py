"""The one statistics module: intervals against scipy, and the verdict rules at their edges."""

import math

import numpy as np
import pytest
from scipy import stats as sp

from structattn_lite import stats


def test_mean_interval_is_scipys_t_interval():
    x = [0.91, 0.95, 0.97, 0.93, 0.99]
    mean, low, high, n = stats.mean_interval(x)
    ref = sp.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=sp.sem(x))
    assert n == 5 and mean == pytest.approx(np.mean(x))
    assert (low, high) == pytest.approx(ref)
    assert stats.mean_interval([0.5, math.nan])[3] == 1  # non-finite values are dropped


def test_welch_difference_is_scipys_welch_interval():
    a, b = [1.0, 1.4, 1.1, 1.9], [0.2, 0.3, 0.25, 0.9, 0.1, 0.4]
    diff, low, high = stats.welch_difference(stats.summary(a), stats.summary(b))
    ci = sp.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert diff == pytest.approx(np.mean(a) - np.mean(b))
    assert (low, high) == pytest.approx((ci.low, ci.high))


def test_km_median_counts_censored_seeds():
    # 3 of 5 reach the event by 5, 10, 20; two are censored at 300: the median is 20.
    assert stats.km_median([5, 10, 20, 300, 300], [True, True, True, False, False]) == 20
    # dropping the censored seeds would give 10; counting them moves the median up
    assert stats.km_median([5, 10, 20], [True] * 3) == 10
    assert stats.km_median([5, 300, 300], [True, False, False]) == math.inf
    assert stats.km_median([1, 2], [False, False]) == math.inf


def test_equivalence_rule_at_its_edges():
    assert stats.equivalence([1.0] * 5, 1.0, 0.02)[0] == stats.REPRODUCED
    assert stats.equivalence([0.99, 0.995, 0.993], 1.0, 0.02)[0] == stats.REPRODUCED
    assert stats.equivalence([0.67, 0.68, 0.66], 1.0, 0.02)[0] == stats.NOT_REPRODUCED
    assert stats.equivalence([0.9, 1.0, 0.95], 1.0, 0.02)[0] == stats.UNDECIDED  # straddles
    assert stats.equivalence([1.0, 1.0], 1.0, 0.02)[0] == stats.UNDECIDED  # two seeds
    assert stats.equivalence([1.0, 1.0], 1.0, 0.02, diverged=3)[0] == stats.NOT_REPRODUCED
    assert stats.equivalence([], 1.0, 0.02)[1] == "not run yet"
    assert stats.equivalence([1.0] * 5, math.nan, 0.02)[0] == stats.UNDECIDED


def test_majority_rule_needs_an_interval_off_one_half():
    assert stats.majority(5, 5, "x")[0] == stats.UNDECIDED  # 5 seeds cannot exclude 1/2
    assert stats.majority(10, 10, "x")[0] == stats.REPRODUCED
    assert stats.majority(0, 10, "x")[0] == stats.NOT_REPRODUCED


def test_difference_rule_reads_the_claimed_side():
    low, high = [1.0, 1.1, 1.2, 1.05], [2.0, 2.1, 2.3, 2.2]
    (diff, lo, hi), verdict, _ = stats.difference(low, high, claim="less")
    assert verdict == stats.REPRODUCED and lo < hi < 0 < -diff
    assert stats.difference(low, high, claim="greater")[1] == stats.NOT_REPRODUCED
    assert stats.difference(high, high, claim="greater")[1] == stats.UNDECIDED
    assert stats.difference(low, high, margin=2.0, claim="not_worse")[1] == stats.REPRODUCED


def test_interaction_reduces_to_welch_when_one_contrast_is_exact():
    a, b = [2.0, 2.2, 2.1, 2.3], [1.0, 1.4, 1.2, 1.1]
    flat = [5.0, 5.0, 5.0]
    diff, low, high = stats.interaction(a, b, flat, flat)
    ref = stats.welch_difference(stats.summary(a), stats.summary(b))
    assert (diff, low, high) == pytest.approx(ref)
    assert math.isnan(stats.interaction(a, b, [1.0], flat)[1])


def test_interaction_rule_reads_the_side_of_its_interval_and_needs_three_seeds():
    high, low = [2.0, 2.1, 2.05, 2.02], [1.0, 1.1, 1.05, 1.02]
    base = [0.0, 0.01, -0.01, 0.02]
    # a - b is about 2 in the first setting and 1 in the second: a positive interaction
    (diff, lo, hi), verdict, _ = stats.interaction_difference(high, base, low, base, where="at 1%")
    assert verdict == stats.NOT_REPRODUCED and 0 < lo < diff < hi  # fmt: skip
    verdict = stats.interaction_difference(low, base, high, base, where="x")[1]
    assert verdict == stats.REPRODUCED
    (diff, *_), verdict, reason = stats.interaction_difference(
        high[:2], base, low, base, where="x")  # fmt: skip
    assert verdict == stats.UNDECIDED and math.isnan(diff) and "2 seed(s)" in reason


def test_tuning_rule_leaves_a_decided_comparison_undecided_and_keeps_its_interval():
    decided = stats.difference([1.0, 1.1, 1.2, 1.05], [2.0, 2.1, 2.3, 2.2], claim="less")
    assert decided[1] == stats.REPRODUCED
    numbers, verdict, reason = stats.untuned(decided, "over 600 steps of one seed")
    assert numbers == decided[0] and verdict == stats.UNDECIDED
    assert reason.startswith(decided[2]) and "600 steps of one seed" in reason
