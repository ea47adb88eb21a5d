"""The one statistics module: intervals against scipy, and the verdict rules at their edges."""

import math

import numpy as np
import pandas as pd
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
    (diff, lo, hi), verdict, _ = stats.difference(low, high, delta=0.1, claim="less")
    assert verdict == stats.REPRODUCED and lo < hi < 0 < -diff
    assert stats.difference(low, high, delta=0.1, claim="greater")[1] == stats.NOT_REPRODUCED
    assert stats.difference(high, high, delta=0.1, claim="greater")[1] == stats.UNDECIDED
    assert stats.difference(low, high, delta=2.0, claim="not_worse")[1] == stats.REPRODUCED
    assert stats.difference(low, high, delta=0.5, claim="not_worse")[1] == stats.NOT_REPRODUCED


def test_a_directional_claim_with_a_delta_can_be_refuted_by_no_effect():
    # two samples with the same mean: the interval sits around 0
    a = [1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00, 1.01]
    b = [1.00, 0.99, 1.01, 1.00, 0.98, 1.02, 1.00, 0.99]
    (_, low, high), verdict, reason = stats.difference(a, b, delta=0.1, claim="less")
    assert -0.1 < low < 0 < high  # excludes an effect of delta: refuted
    assert verdict == stats.NOT_REPRODUCED and "delta 0.100" in reason
    # with a delta wider than the interval's reach the same data stay undecided
    assert stats.difference(a, b, delta=0.005, claim="less")[1] == stats.UNDECIDED
    assert stats.decide(-0.3, -0.1, "less", 0.2) == stats.REPRODUCED
    assert stats.decide(-0.3, 0.1, "less", 0.2) == stats.UNDECIDED
    assert stats.decide(-0.1, 0.1, "less", 0.2) == stats.NOT_REPRODUCED
    assert stats.decide(0.1, 0.3, "greater", 0.2) == stats.REPRODUCED
    assert stats.decide(-0.1, 0.1, "greater", 0.2) == stats.NOT_REPRODUCED
    assert stats.decide(0.0, 0.1, "not_more", 0.2) == stats.REPRODUCED
    assert stats.decide(0.25, 0.3, "not_more", 0.2) == stats.NOT_REPRODUCED
    for bad in (None, 0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="delta must be a finite number > 0"):
            stats.difference(a, b, delta=bad, claim="less")


def test_paired_difference_is_scipys_paired_interval():
    a = [1.30, 1.32, 1.28, 1.35, 1.31]
    b = [1.31, 1.34, 1.29, 1.36, 1.33]  # each seed a little worse: paired, this is clear
    (diff, low, high), verdict, reason = stats.difference(a, b, delta=0.02, claim="not_more",
                                                          paired=True)  # fmt: skip
    ci = sp.ttest_rel(a, b).confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high)) and "paired over 5 seeds" in reason
    assert verdict == stats.REPRODUCED and high < 0
    welch = stats.difference(a, b, delta=0.02, claim="not_more")
    assert welch[0][2] - welch[0][1] > 5 * (high - low)  # unpaired, the seeds' spread dominates


def test_log_ratio_compares_variances_on_one_scale():
    small = [1e-4, 1.2e-4, 0.9e-4, 1.1e-4]  # one model's variances, a tenth of the other's
    large = [1e-3, 1.2e-3, 0.9e-3, 1.1e-3]
    (diff, low, high), verdict, reason = stats.difference(small, large, delta=0.2, claim="less",
                                                          log=True)  # fmt: skip
    assert diff == pytest.approx(math.log(0.1)) and verdict == stats.REPRODUCED
    assert "x0.10" in reason
    scaled = stats.difference([x * 7 for x in small], [x * 7 for x in large], delta=0.2,
                              claim="less", log=True)  # fmt: skip
    assert scaled[0] == pytest.approx((diff, low, high))  # a common scale cancels


def test_noninferiority_against_a_published_one_says_what_the_seeds_bound():
    verdict, reason = stats.noninferiority([1.0] * 5, 1.0, 0.02)
    assert verdict == stats.REPRODUCED
    # five perfect seeds bound a seed's chance of failing below 0.52 (Clopper-Pearson)
    assert "0 of 5 seeds below 0.98" in reason and "95% CP 0.00-0.52" in reason
    assert stats.noninferiority([0.9, 0.92, 0.91], 1.0, 0.02)[0] == stats.NOT_REPRODUCED
    verdict, reason = stats.noninferiority([1.0, 1.0, 0.6, 1.0, 1.0], 1.0, 0.02)
    assert verdict == stats.UNDECIDED and "1 of 5 seeds below 0.98" in reason
    assert stats.noninferiority([1.0] * 2, 1.0, 0.02, diverged=3)[0] == stats.NOT_REPRODUCED


def test_gap_interval_stays_at_or_above_zero_epochs_and_says_unreached_in_words():
    # two of ten seeds reached 100%, 1 and 145 epochs after the jump
    times = [1, 145, *[200] * 8]
    reached = [True, True, *[False] * 8]
    ours, low, high, verdict, reason = stats.gap(times, reached, 10, (3.2, 1.2))
    assert low >= 0 and verdict == stats.NOT_REPRODUCED
    assert "not reached by half the seeds" in reason and "inf" not in reason
    ours, low, high, verdict, _ = stats.gap([3, 4, 3, 2, 4], [True] * 5, 5, (3.2, 1.2))
    assert verdict == stats.REPRODUCED and 2.0 <= low <= high <= 4.4
    verdict, reason = stats.gap([3, 4, 3], [True] * 3, 0, (3.2, 1.2))[3:]
    assert verdict == stats.UNDECIDED and "no grokking phase" in reason


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
    (diff, lo, hi), verdict, _ = stats.interaction_difference(
        high, base, low, base, where="at 1%", delta=0.1)  # fmt: skip
    assert verdict == stats.NOT_REPRODUCED and 0 < lo < diff < hi  # fmt: skip
    verdict = stats.interaction_difference(low, base, high, base, where="x", delta=0.1)[1]
    assert verdict == stats.REPRODUCED
    (diff, *_), verdict, reason = stats.interaction_difference(
        high[:2], base, low, base, where="x", delta=0.1)  # fmt: skip
    assert verdict == stats.UNDECIDED and math.isnan(diff) and "2 seed(s)" in reason


def test_tuning_rule_leaves_a_decided_comparison_undecided_and_keeps_its_interval():
    decided = stats.difference([1.0, 1.1, 1.2, 1.05], [2.0, 2.1, 2.3, 2.2], delta=0.1, claim="less")
    assert decided[1] == stats.REPRODUCED
    numbers, verdict, reason = stats.untuned(decided, "over 600 steps of one seed")
    assert numbers == decided[0] and verdict == stats.UNDECIDED
    assert reason.startswith(decided[2]) and "600 steps of one seed" in reason


# The bounded rule: a mean accuracy's interval stays inside [0, 1]. Five seeds of mean 0.999
# whose t interval is [0.9962, 1.0018], as the authors' mod-3 row at L = 32 had.
NEAR_ONE = [1.0, 1.0, 1.0, 1.0, 0.995]


def test_bounded_interval_is_clipped_to_the_unit_interval():
    mean, low, high, n = stats.mean_interval(NEAR_ONE)
    assert high > 1.0  # the t interval alone passes 1
    clipped = stats.mean_interval(NEAR_ONE, bounds=stats.UNIT)
    assert clipped == (mean, pytest.approx(low), 1.0, n)  # only the end past 1 moves
    # and the lower end at 0, for a mean near chance of nothing
    assert stats.mean_interval([0.0, 0.0, 0.0, 0.0, 0.005], bounds=stats.UNIT)[1] == 0.0
    assert math.isnan(stats.mean_interval([0.5], bounds=stats.UNIT)[1])  # one seed: no interval


EQUIVALENCE_ROW = "authors/dyck1/L32"  # a row whose rule is equivalence within 0.02


def test_bounded_rule_decides_a_row_whose_only_obstacle_lay_above_one():
    from structattn_lite.claims.rows import published_row

    assert stats.equivalence(NEAR_ONE, 0.98, 0.02)[0] == stats.UNDECIDED  # 1.0018 > 0.98 + 0.02
    verdict, reason = stats.equivalence(NEAR_ONE, 0.98, 0.02, bounds=stats.UNIT)
    assert (verdict, reason) == (stats.REPRODUCED, "interval inside 0.98 ± 0.02")
    row = published_row(pd.Series(NEAR_ONE), 0, 0.98, bounds=stats.UNIT, id=EQUIVALENCE_ROW)
    assert (row["verdict"], row["high"]) == (stats.REPRODUCED, 1.0)
    # a clipped interval that still crosses the margin says so, not as a ± half-width
    wide = [1.0, 1.0, 0.6, 1.0, 1.0]
    verdict, reason = stats.equivalence(wide, 0.92, 0.02, bounds=stats.UNIT)
    assert verdict == stats.UNDECIDED and "(clipped to [0, 1])" in reason and "±" not in reason
    # every ledger row says whether its metric is bounded
    with pytest.raises(TypeError, match="bounds"):
        published_row(pd.Series(NEAR_ONE), 0, 0.98, id=EQUIVALENCE_ROW)


def test_an_unbounded_metric_is_not_clipped():
    from structattn_lite.claims.rows import published_row

    bpc = [1.30, 1.31, 1.29, 1.33, 1.28]  # bits per character live above 1
    mean, low, high, _ = stats.mean_interval(bpc)
    assert low > 1.0 and stats.mean_interval(bpc, bounds=None) == (mean, low, high, 5)
    row = published_row(pd.Series(NEAR_ONE), 0, 0.98, bounds=None, id=EQUIVALENCE_ROW)
    assert row["high"] > 1.0 and row["verdict"] == stats.UNDECIDED
    epochs = [-14.6, 51.0, 10.0]  # an epoch gap may be negative: no bound at 0 either
    assert stats.mean_interval(epochs)[1] < 0


def test_seeds_to_decide_scales_the_half_width_as_one_over_root_n():
    # half-width 0.1 at 5 seeds; the nearest edge 0.05 from the estimate: 4 x the seeds
    assert stats.seeds_to_decide(0.0, -0.1, 0.1, 5, (0.05, -0.2)) == 20
    assert stats.seeds_to_decide(0.0, -0.1, 0.1, 5, (0.0,)) == math.inf  # on its edge
    assert math.isnan(stats.seeds_to_decide(0.0, math.nan, 0.1, 5, (0.05,)))
    assert math.isnan(stats.seeds_to_decide(0.0, -0.1, 0.1, 5, (math.nan,)))  # no number


def test_an_undecided_row_with_an_interval_says_what_would_decide_it():
    from structattn_lite import claims

    table = claims.committed()
    undecided = table[(table["verdict"] == stats.UNDECIDED) & table["low"].notna()
                      & (table["low"] != table["high"])]  # fmt: skip
    said = undecided["reason"].str.contains("decide")
    assert said.all(), undecided.loc[~said, "id"].tolist()


def test_every_seed_band_is_the_ledgers_interval_clipped_to_the_unit_range():
    """Figures shade one band over seeds, the ledger's 95% t interval of a mean of
    accuracies (the length figures drew +-1 sd, the authors' figure a t band); a point
    with one seed has no band, and no band leaves [0, 1]."""
    import pandas as pd

    from structattn_lite.report import seed_band

    values = pd.Series([0.9, 1.0, 0.95, 0.5, 0.99, 1.0, 1.0])
    at = pd.Series([16, 16, 16, 32, 64, 64, 64])
    mean, low, high = seed_band(values, at)
    m, lo, hi, n = stats.mean_interval([0.9, 1.0, 0.95], bounds=stats.UNIT)
    assert (mean[16], low[16], high[16]) == (m, lo, hi) and n == 3
    assert mean[32] == low[32] == high[32] == 0.5  # one seed: no band
    assert high[64] == 1.0 and low[64] < 1.0 and (low >= 0).all() and (high <= 1).all()
