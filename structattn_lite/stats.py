"""The study's one statistics module: intervals over seeds and the verdict rules.

Every verdict in the study is one of three words, each with a short reason:

- **reproduced**: the 95% interval of ours lies wholly on the claimed side (inside the
  published number's margin, for an equivalence);
- **not reproduced**: otherwise, when the interval excludes an effect of the smallest
  size of interest (delta) in the claimed direction (or lies wholly outside the margin; or
  the runs cannot produce the number at all: most seeds diverged, or too few reached a
  threshold);
- **undecided**: anything else (too few seeds, no published number, no run).

Which test decides a row, its delta and why, and whether the row is confirmatory or
exploratory are written in one table, ``claims/rules.csv``, committed before the runs that
decide it; the tests themselves are here (``RULES`` says each in words). A rule never
looks at which way the result goes.

"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

REPRODUCED, NOT_REPRODUCED, UNDECIDED = "reproduced", "not reproduced", "undecided"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, UNDECIDED)
LEVEL = 0.95
MIN_SEEDS = 3  # fewer finite seeds than this decide nothing

# Equivalence margins, in the claim's own units.
ACCURACY_MARGIN = 0.02  # accuracy or F1: the paper prints two digits; 0.02 is its last digit x2
LENGTH_MARGIN = 0.05  # accuracy far past the training length, where papers report rough levels
BPC_MARGIN = 0.02  # bits per character: "equal" loss within 0.02 bpc (about 1% at 2 bpc)
UNIT = (0.0, 1.0)  # where accuracy and F1 live: the interval of their mean stays inside it
EPOCHS = (0.0, math.inf)  # a count of epochs is never negative

RULES = {
    "equivalence": (
        f"reproduced when the {LEVEL:.0%} t interval of our mean over seeds lies inside the "
        "published number ± the margin; not reproduced when it lies wholly outside; undecided "
        f"otherwise or with fewer than {MIN_SEEDS} finite seeds. A row whose seeds mostly "
        "diverged is not reproduced (its model does not train as described)."
    ),
    "bounded": (
        "a mean of a metric bounded in [0, 1] (accuracy, F1) cannot leave [0, 1], so the t "
        "interval of that mean is clipped to [0, 1] before any rule reads it; bits per "
        "character and epochs have no such bound and are not clipped."
    ),
    "gap": (
        "epochs from the first 90% to the first 100% (and 99%) test accuracy, per seed; a "
        "seed that never reaches the threshold is censored at its last epoch (Kaplan-Meier "
        f"median). Reproduced when every seed reached it and the {LEVEL:.0%} t interval of "
        "our mean gap (never below 0 epochs) lies inside the paper's mean ± its sd; not "
        "reproduced when it lies wholly outside, or when fewer than half the seeds reached "
        f"the threshold; undecided otherwise, or when fewer than {MIN_SEEDS} seeds sit at "
        "chance before the jump (no grokking phase to measure)."
    ),
    "majority": (
        f"the share of seeds with the property, with its {LEVEL:.0%} Clopper-Pearson "
        "interval: reproduced when the interval lies above 1/2, not reproduced when below, "
        "undecided otherwise. An event tied to the jump counts only seeds that sat at "
        f"chance before it; with fewer than {MIN_SEEDS} such seeds the row is undecided."
    ),
    "noninferiority": (
        f"for a published number at the top of its range (1.00) or a claim 'not worse': "
        f"reproduced when the {LEVEL:.0%} t interval lies wholly above the published number "
        "(or 0) minus delta, not reproduced when wholly below it, undecided otherwise; "
        "where every seed scores the same, the reason says what the seeds bound: the "
        "Clopper-Pearson interval of a seed's chance to fall below the edge."
    ),
    "superiority": (
        f"the {LEVEL:.0%} Welch t interval of the difference of means: reproduced when it "
        "lies wholly on the claimed side of 0, not reproduced when it excludes an effect of "
        "delta or more in the claimed direction, undecided otherwise."
    ),
    "log_ratio": (
        "a variance compared as the log ratio of variances (Welch on per-seed logs), so that "
        "models with different parameter counts are on one scale; decided as superiority "
        "with delta on that scale."
    ),
    "paired": (
        "seeds measured twice (pruned and unpruned, the same seed): the t interval of the "
        "per-seed differences, decided as noninferiority."
    ),
    "interaction": (
        f"(a - b in the first setting) - (a - b in the second), its {LEVEL:.0%} "
        "Welch-Satterthwaite t interval: reproduced when it lies below 0 (a's edge is larger "
        "in the first setting), not reproduced when it excludes an effect of delta or more "
        f"(lies above -delta), undecided otherwise or with fewer than {MIN_SEEDS} seeds in a "
        "cell."
    ),
    "tuning": (
        "a comparison between trained variants decides only when each variant's learning "
        "rate was chosen on validation at the step budget the comparison reports, over at "
        f"least {MIN_SEEDS} seeds; otherwise it is undecided, whatever its interval says, "
        "because a rate tuned at another budget can decide it by accident."
    ),
}


# --- intervals -----------------------------------------------------------------------


def t_half_width(sd: float, n: int, level: float = LEVEL) -> float:
    """Half-width of the t interval of a mean over ``n`` values (NaN below two)."""
    if n < 2 or sd is None or math.isnan(sd):
        return math.nan
    return float(stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n))


def mean_interval(
    values: Sequence[float], level: float = LEVEL, *, bounds: tuple[float, float] | None = None
) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite values; low and high NaN below two values.

    ``bounds`` (``UNIT`` for accuracy and F1) is the range the metric cannot leave; the
    interval is clipped to it (the rule ``RULES["bounded"]``). None: no clipping.
    """
    mean, sd, n = summary(values)
    half = t_half_width(sd, n, level)
    low, high = mean - half, mean + half
    if bounds is not None and not math.isnan(half):
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return mean, low, high, n


def welch_difference(a: tuple, b: tuple, level: float = LEVEL) -> tuple[float, float, float]:
    """mean(A) - mean(B) and its Welch t interval, from (mean, sd, n) of each sample; the
    interval is NaN when either side has fewer than two values."""
    (ma, sa, na), (mb, sb, nb) = a, b
    diff = ma - mb
    if na < 2 or nb < 2:
        return diff, math.nan, math.nan
    if sa**2 / na + sb**2 / nb == 0:
        return diff, diff, diff
    half = _welch_half([(sa, na), (sb, nb)], level)
    return diff, diff - half, diff + half


def _welch_half(parts: list[tuple[float, int]], level: float) -> float:
    """Half-width of the Welch-Satterthwaite t interval of a signed sum of the means of
    independent samples, from (sd, n) of each."""
    v = [sd**2 / n for sd, n in parts]
    dof = sum(v) ** 2 / sum(vi**2 / (n - 1) for vi, (_, n) in zip(v, parts, strict=True))
    return float(stats.t.ppf(0.5 + level / 2, dof) * math.sqrt(sum(v)))


def finite_values(values: Sequence[float]) -> np.ndarray:
    """The finite values of ``values`` (None and NaN dropped), as floats."""
    return np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)


def summary(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sd, n) of the finite values, the form ``welch_difference`` takes."""
    x = finite_values(values)
    if len(x) == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x)


def interaction(a1, b1, a2, b2, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean(a1) - mean(b1)) - (mean(a2) - mean(b2)) over four independent samples, and its
    Welch-Satterthwaite t interval (NaN with fewer than two values in any sample)."""
    parts = [summary(x) for x in (a1, b1, a2, b2)]
    if min(n for *_, n in parts) < 2:
        return math.nan, math.nan, math.nan
    diff = parts[0][0] - parts[1][0] - parts[2][0] + parts[3][0]
    half = _welch_half([(sd, n) for _, sd, n in parts], level)
    return diff, diff - half, diff + half


def interaction_difference(
    a1, b1, a2, b2, *, where: str, delta: float
) -> tuple[tuple[float, float, float], str, str]:
    """((diff, low, high), verdict, reason) for "a's edge over b is larger ``where`` (the
    first setting) than in the second": ``interaction`` below 0, decided by ``decide``
    with the smallest effect of interest ``delta``."""
    check_delta(delta)
    n = min(len(finite_values(x)) for x in (a1, b1, a2, b2))
    if n < MIN_SEEDS:
        nan = (math.nan, math.nan, math.nan)
        return nan, UNDECIDED, f"{n} seed(s) in a cell, fewer than {MIN_SEEDS}"
    diff, low, high = interaction(a1, b1, a2, b2)
    text = (f"interaction {diff:+.3f} [{low:+.3f}, {high:+.3f}] (negative: larger edge "
            f"{where}); delta {delta}")  # fmt: skip
    return (diff, low, high), decide(low, high, "less", delta), text


def share_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Clopper-Pearson interval of a share k / n."""
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def km_median(times: Sequence[float], reached: Sequence[bool]) -> float:
    """Kaplan-Meier median of times where ``reached`` is False for a censored value (the
    event not seen by that time); inf when the survival curve never falls to 1/2."""
    times = np.asarray(times, dtype=float)
    reached = np.asarray(reached, dtype=bool)
    if not reached.any():
        return math.inf
    data = stats.CensoredData.right_censored(times, ~reached)
    sf = stats.ecdf(data).sf
    below = sf.quantiles[sf.probabilities <= 0.5]
    return float(below[0]) if len(below) else math.inf


# --- verdicts ------------------------------------------------------------------------


def _against_published(published: float, n: int, diverged: int) -> tuple[str, str] | None:
    """The verdict a row against a published number gets before any interval is read:
    no number, no run, most seeds diverged, or too few finite seeds; else None."""
    total = n + diverged
    if published is None or math.isnan(published):
        return UNDECIDED, "the paper gives no number, so no run can decide it"
    if total == 0:
        return UNDECIDED, "not run yet"
    if diverged * 2 > total:
        return NOT_REPRODUCED, f"{diverged} of {total} seeds diverged (non-finite loss)"
    if n < MIN_SEEDS:
        return UNDECIDED, f"{n} finite seed(s), fewer than {MIN_SEEDS}"
    return None


def equivalence(
    values: Sequence[float],
    published: float,
    margin: float,
    *,
    diverged: int = 0,
    digits: int = 3,
    bounds: tuple[float, float] | None = None,
) -> tuple[str, str]:
    """(verdict, reason) for "our mean equals ``published``" within ± ``margin``.

    ``values`` are the finite per-seed numbers; ``diverged`` counts seeds that produced
    none (a non-finite loss); ``bounds`` (``UNIT`` for accuracy and F1) clips the interval
    as ``mean_interval`` does.
    """
    n = len(finite_values(values))
    total = n + diverged
    early = _against_published(published, n, diverged)
    if early is not None:
        return early
    mean, low, high, _ = mean_interval(values, bounds=bounds)
    if math.isnan(low):  # every seed the same value
        low = high = mean
    lo, hi = published - margin, published + margin
    note = f"; {diverged} of {total} seeds diverged" if diverged else ""
    if lo <= low and high <= hi:
        return REPRODUCED, f"interval inside {published:.2f} ± {margin}{note}"
    if high < lo or low > hi:
        side = "above" if low > hi else "below"
        return NOT_REPRODUCED, f"interval wholly {side} {published:.2f} ± {margin}{note}"
    if bounds is not None and (low, high) != mean_interval(values)[1:3]:  # clipped: no ± left
        span = f"[{low:.{digits}f}, {high:.{digits}f}] (clipped to [{bounds[0]:g}, {bounds[1]:g}])"
        return UNDECIDED, f"interval {span} crosses the margin's edge{note}"
    return UNDECIDED, f"interval ±{(high - low) / 2:.{digits}f} crosses the margin's edge{note}"


def majority_seeds(k: int, n: int) -> float:
    """About how many seeds would decide "most seeds show it" if the share k / n holds."""
    low, high = share_interval(k, n)
    return seeds_to_decide(k / n, low, high, n, (0.5,))


def majority(k: int, n: int, what: str) -> tuple[str, str]:
    """(verdict, reason) for "most seeds show ``what``": k of n seeds do."""
    if n == 0:
        return UNDECIDED, f"no seed to look for {what} in"
    low, high = share_interval(k, n)
    reason = f"{k} of {n} seeds {what} (95% CP {low:.2f}-{high:.2f})"
    if low > 0.5:
        return REPRODUCED, reason
    if high < 0.5:
        return NOT_REPRODUCED, reason
    need = majority_seeds(k, n)
    more = (f"about {need:.0f} seeds would decide it if the share holds" if need <= 1000
            else "no seed count would decide it at this share")  # fmt: skip
    return UNDECIDED, f"{reason}; {more}"


def decide(low: float, high: float, claim: str, delta: float) -> str:
    """The three-way verdict of an interval (low, high) of a - b for a directional claim.

    ``claim``: "greater" (a - b > 0), "less" (a - b < 0), "not_worse" (a - b >= -delta) or
    "not_more" (a - b <= delta). Reproduced when the interval lies wholly on the claimed
    side (of 0, or of the margin delta for the last two); not reproduced when it excludes
    an effect of delta or more in the claimed direction (for the last two: lies wholly on
    the other side of the margin); undecided otherwise.
    """
    check_delta(delta)
    if claim == "not_worse":
        return REPRODUCED if low > -delta else NOT_REPRODUCED if high < -delta else UNDECIDED
    if claim == "not_more":
        return REPRODUCED if high < delta else NOT_REPRODUCED if low > delta else UNDECIDED
    lo, hi = {"greater": (low, high), "less": (-high, -low)}[claim]  # as "greater"
    return REPRODUCED if lo > 0 else NOT_REPRODUCED if hi < delta else UNDECIDED


def check_delta(delta: float) -> float:
    """A smallest effect of interest: a finite number > 0 (without one, an interval around
    0 could never refute a directional claim)."""
    if delta is None or not math.isfinite(delta) or delta <= 0:
        raise ValueError(
            f"delta must be a finite number > 0 (the smallest effect of interest), got {delta!r}"
        )
    return delta


def _edge_text(claim: str, delta: float, spec: str) -> str:
    return {"greater": f"claimed > 0, delta {delta:{spec.lstrip('+')}}",
            "less": f"claimed < 0, delta {delta:{spec.lstrip('+')}}",
            "not_worse": f"claimed >= {-delta:{spec}}",
            "not_more": f"claimed <= {delta:{spec}}"}[claim]  # fmt: skip


def difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    delta: float,
    claim: str = "greater",
    spec: str = "+.3f",
    paired: bool = False,
    log: bool = False,
) -> tuple[tuple[float, float, float], str, str]:
    """((diff, low, high), verdict, reason) for a claim about mean(a) - mean(b), decided by
    ``decide`` with the smallest effect of interest ``delta``.

    ``paired``: a[i] and b[i] are one seed measured twice; the t interval of the per-seed
    differences (seeds missing on either side dropped). ``log``: compare log(a) - log(b)
    (a ratio, for variances). ``spec`` formats the numbers of the reason ("+.2e" for
    quantities far below 0.001).
    """
    check_delta(delta)
    if log:
        a, b = (np.log(finite_values(x)) for x in (a, b))
    if paired:
        pairs = [(x, y) for x, y in zip(a, b, strict=False) if x is not None and y is not None
                 and np.isfinite(x) and np.isfinite(y)]  # fmt: skip
        if len(pairs) < MIN_SEEDS:
            nan = (math.nan, math.nan, math.nan)
            return nan, UNDECIDED, f"{len(pairs)} paired seed(s), fewer than {MIN_SEEDS}"
        diff, low, high, _ = mean_interval([x - y for x, y in pairs])
        if math.isnan(low):
            low = high = diff
        how = f"paired over {len(pairs)} seeds"
    else:
        sa, sb = summary(a), summary(b)
        if min(sa[2], sb[2]) < MIN_SEEDS:
            nan = (math.nan, math.nan, math.nan)
            return nan, UNDECIDED, f"{min(sa[2], sb[2])} seed(s) on a side, fewer than {MIN_SEEDS}"
        diff, low, high = welch_difference(sa, sb)
        how = "Welch"
    what = f"{how}, log ratio (x{math.exp(diff):.2f})" if log else how
    text = f"{what} {diff:{spec}} [{low:{spec}}, {high:{spec}}]; {_edge_text(claim, delta, spec)}"
    return (diff, low, high), decide(low, high, claim, delta), text


def noninferiority(
    values: Sequence[float],
    published: float,
    delta: float,
    *,
    diverged: int = 0,
    bounds: tuple[float, float] | None = None,
) -> tuple[str, str]:
    """(verdict, reason) for "our mean is at least ``published`` - ``delta``": a published
    number at the top of its range (1.00), where an equivalence's upper side means nothing.

    Reproduced when the t interval lies wholly above the edge, not reproduced when wholly
    below it, undecided otherwise. The reason counts the seeds below the edge with the
    Clopper-Pearson interval of a seed's chance to fall there, which is what the seeds bound
    when every seed scores the same (a zero-width t interval).
    """
    check_delta(delta)
    x = finite_values(values)
    n, total = len(x), len(x) + diverged
    early = _against_published(published, n, diverged)
    if early is not None:
        return early
    edge = published - delta
    mean, low, high, _ = mean_interval(x, bounds=bounds)
    if math.isnan(low):
        low = high = mean
    below = int((x < edge).sum()) + diverged
    cp_low, cp_high = share_interval(below, total)
    note = (f"{below} of {total} seeds below {edge:.2f} (a seed's chance of that: "
            f"95% CP {cp_low:.2f}-{cp_high:.2f})")  # fmt: skip
    if low > edge:
        return REPRODUCED, f"interval above {published:.2f} - {delta}; {note}"
    if high < edge:
        return NOT_REPRODUCED, f"interval below {published:.2f} - {delta}; {note}"
    return UNDECIDED, f"interval [{low:.3f}, {high:.3f}] contains {edge:.2f}; {note}"


def gap(
    times: Sequence[float],
    reached: Sequence[bool],
    at_chance: int,
    paper: tuple[float, float],
    level: str = "100",
) -> tuple[float, float, float, str, str]:
    """(ours, low, high, verdict, reason) of a grokking gap (``RULES["gap"]``): per-seed
    epochs from the jump to ``level``% (``times``; censored at the last epoch where not
    ``reached``), ``at_chance`` seeds sat at chance before their jump, ``paper`` is the
    paper's (mean, sd). The interval is over the seeds that reached, never below 0."""
    times, reached = np.asarray(times, dtype=float), np.asarray(reached, dtype=bool)
    n, k = len(times), int(reached.sum())
    mean, low, high, _ = mean_interval(times[reached], bounds=EPOCHS)
    median = km_median(times, reached)
    half = (
        f"KM median {median:g} epochs" if math.isfinite(median) else "not reached by half the seeds"
    )
    counts = f"{k} of {n} seeds reached {level}%, {half}"
    if at_chance < MIN_SEEDS:
        why = (f"no grokking phase to measure: {at_chance} of {n} seeds at chance before the "
               "jump; only a protocol whose runs sit at chance first can decide it")  # fmt: skip
        return mean, low, high, UNDECIDED, why
    if 2 * k < n:
        return mean, low, high, NOT_REPRODUCED, f"{counts} (the paper: every seed)"
    if k < MIN_SEEDS:
        return mean, low, high, UNDECIDED, f"{counts}, fewer than {MIN_SEEDS}"
    lo, hi = paper[0] - paper[1], paper[0] + paper[1]
    if math.isnan(low):
        low = high = mean
    text = f"{counts}; ours [{low:.1f}, {high:.1f}] against the paper's {paper[0]} ± {paper[1]}"
    if high < lo or low > hi:
        return mean, low, high, NOT_REPRODUCED, text
    if k == n and lo <= low and high <= hi:
        return mean, low, high, REPRODUCED, text
    if k < n:
        text += f"; {n - k} seed(s) never reached {level}%"
    need = seeds_to_decide(mean, low, high, k, (lo, hi))
    if math.isfinite(need) and need <= 1000:
        text += f"; about {need:.0f} seeds reaching {level}% would decide it if the spread holds"
    else:
        text += "; no seed count would decide it at this spread"
    return mean, low, high, UNDECIDED, text


def seeds_to_decide(ours: float, low: float, high: float, n: int, edges: Sequence[float]) -> float:
    """About how many seeds (per arm) would decide an undecided row if its spread held:
    the interval's half-width shrinks as 1/sqrt(n), and the row decides once it no longer
    holds the decision edge nearest its estimate. inf when the estimate sits on an edge."""
    half, edges = (high - low) / 2, [e for e in edges if math.isfinite(e)]
    if not edges or not all(math.isfinite(v) for v in (ours, low, high)) or n < 1 or half <= 0:
        return math.nan
    gap = min(abs(ours - e) for e in edges)
    return math.inf if gap == 0 else float(math.ceil(n * (half / gap) ** 2))


UNTUNED = "rates chosen"  # how a reason the tuning rule decided begins its last clause


def untuned(
    result: tuple[tuple[float, float, float], str, str], how: str, cost: str = ""
) -> tuple[tuple[float, float, float], str, str]:
    """The tuning rule: ``result`` (from ``difference`` or ``interaction_difference``) of
    a comparison whose rates were not chosen at its own budget is undecided, its interval
    kept; ``how`` says how the rates were chosen, ``cost`` (a clause) what tuning them
    at this budget would cost."""
    numbers, _, reason = result
    return (
        numbers,
        UNDECIDED,
        f"{reason}; {UNTUNED} {how}; rates tuned at this budget would decide it{cost}",
    )
