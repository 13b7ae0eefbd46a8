"""Verdicts on paired A/B measurements: faster, slower, same or undecided.

No torch, no asv, no pandas: plain numbers in, so the rule is tested on synthetic values
(``tests/test_verdict.py``).

The values are log ratios head/base, one per pair of processes (``devbench.compare.judge``): each
already the median over adjacent blocks of the two processes, so drift of the host slower
than a pair of blocks has cancelled inside it.

* **Change and interval.** The change is the one-sample Hodges-Lehmann estimate (the median
  of the Walsh averages) and its interval the distribution-free one that inverts the
  Wilcoxon signed-rank test: the k-th smallest and largest Walsh averages, k from the exact
  null distribution of W+. It assumes only that the values are independent and symmetric
  about the change; one wild pair moves it by one order statistic.
* **Verdict.** ``decide``: up or down when the whole interval lies beyond the floor on that
  side (faster or slower by the figure's unit), ``same`` when it lies inside it,
  ``undecided`` otherwise (cuda-bench's third answer: the data cannot tell).
* **Floor.** The smallest change given a verdict: a declared size of effect, the same on
  every host, not a fit to one host's noise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import cache

#: the floor of a history's steps (``report.steps``): a level change smaller than this is not listed
DEFAULT_FLOOR = 0.05
#: two-sided confidence of the interval (asv compare's 99%)
CONFIDENCE = 0.99

FASTER, SLOWER, SAME, UNDECIDED = "faster", "slower", "same", "undecided"
VERDICTS = (FASTER, SLOWER, SAME, UNDECIDED)


def figure_key(benchmark: str, params: str) -> str:
    """One figure's name in noise files and tables: ``benchmark [params]`` (the benchmark alone without params)."""
    return f"{benchmark} [{params}]" if params else benchmark


@cache
def _w_counts(n: int) -> tuple[int, ...]:
    """How many of the 2**n sign patterns give each value of the signed-rank statistic W+ (0..n(n+1)/2)."""
    counts = [1]
    for rank in range(1, n + 1):  # rank r is positive or not: W+ gains r or nothing
        grown = counts + [0] * rank
        for w, c in enumerate(counts):
            grown[w + rank] += c
        counts = grown
    return tuple(counts)


def signed_rank_k(n: int, confidence: float = CONFIDENCE) -> int:
    """k such that [W_(k), W_(M+1-k)] of the M = n(n+1)/2 sorted Walsh averages covers at ``confidence``.

    The largest k with P(W+ <= k - 1) <= (1 - confidence) / 2 under the null of a distribution
    symmetric about the shift (the Wilcoxon signed-rank test inverted); 0 when n is too small for
    that confidence (then the interval is unbounded): 6 values give a 95% interval, 8 a 99% one.
    """
    if n < 1:
        raise ValueError(f"need at least one value, got {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    counts = _w_counts(n)
    tail, total = (1 - confidence) / 2, 2**n
    k, cum = 0, 0
    for w, c in enumerate(counts):
        cum += c
        if cum / total > tail:
            break
        k = w + 1
    return k


def walsh_averages(values: Sequence[float]) -> list[float]:
    """Every (x_i + x_j) / 2 for i <= j, sorted: the one-sample Hodges-Lehmann estimate is their median."""
    xs = list(values)
    return sorted((xs[i] + xs[j]) / 2 for i in range(len(xs)) for j in range(i, len(xs)))


def paired_interval(diffs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """One-sample Hodges-Lehmann estimate of paired log differences and its distribution-free interval."""
    walsh = walsh_averages(diffs)
    k = signed_rank_k(len(diffs), confidence)
    if k == 0:
        return statistics.median(walsh), -math.inf, math.inf
    return statistics.median(walsh), walsh[k - 1], walsh[len(walsh) - k]


UP, DOWN = "up", "down"


def decide(lo: float, hi: float, floor: float) -> str:
    """``UP`` or ``DOWN`` when the interval (log ratio) lies wholly beyond the floor on that side, ``SAME``
    when it lies wholly inside it, ``UNDECIDED`` otherwise (the data cannot tell)."""
    if floor < 0:
        raise ValueError(f"floor must be >= 0, got {floor}")
    up, down = math.log1p(floor), -math.log1p(floor)
    if lo > up:
        return UP
    if hi < down:
        return DOWN
    if down <= lo and hi <= up:
        return SAME
    return UNDECIDED


def futile(
    values: Sequence[float], final_n: int, floor: float, confidence: float = CONFIDENCE, same: bool = True
) -> bool:
    """Whether the paired interval of ``final_n`` values, the first of which are ``values``, is certain to
    be undecided whatever the values still to come (without ``same``: certain to be neither up nor down,
    whether or not it could still fit inside the floor).

    More values only add Walsh averages, so the final k-th smallest is at most the k-th smallest of
    those there now, and the final k-th largest at least their k-th largest (k from ``final_n``).
    When the first already reaches up to the floor's upper edge, the interval can never clear the
    floor upwards; when the second reaches down to its lower edge, never downwards; and when either
    lies outside the floor, the interval can never fit inside it (stopping for futility: no verdict
    is lost).
    """
    if not values:
        return False
    k = signed_rank_k(final_n, confidence)
    if k == 0:
        return True
    walsh = walsh_averages(values)
    if len(walsh) < k:
        return False
    low, high = walsh[k - 1], walsh[len(walsh) - k]
    up, down = math.log1p(floor), -math.log1p(floor)
    return low <= up and high >= down and (not same or low < down or high > up)


def detectable(lo: float, hi: float, floor: float) -> float:
    """The smallest change this figure's interval could have called: the floor plus its half-width
    (relative; infinite when the interval is unbounded)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return math.inf
    return math.expm1(math.log1p(floor) + (hi - lo) / 2)


def interval_text(ratio_lo: float, ratio_hi: float) -> str:
    """A figure's interval as compare's table, Markdown and the report show it: ``[-12.0%, +30.5%]``;
    "n/a" with no value on one side; "unbounded" when its pairs of processes are too few for the confidence."""
    if math.isnan(ratio_lo) or math.isnan(ratio_hi):
        return "n/a"
    if not (ratio_lo > 0 and math.isfinite(ratio_hi)):
        return "unbounded"
    return f"[{100 * (ratio_lo - 1):+.1f}%, {100 * (ratio_hi - 1):+.1f}%]"
