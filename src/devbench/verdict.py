"""Verdicts on A/B measurements: faster, slower, same or undecided, with the noise floor.

No torch, no asv, no pandas: plain numbers in, a ``Verdict`` out, so the rule is tested on
synthetic samples (``tests/test_verdict.py``).

The unit of evidence is one **process** (one asv round): samples inside one process agree
closely, processes and the minutes they run in do not (issue 16's measurements). A side's
evidence is therefore one figure per process, A and B interleaved over rounds.

* **Ratio and interval.** The change is the Hodges-Lehmann shift of the log figures
  (the median of all head-minus-base differences of logs), reported as a ratio head/base.
  Its interval is the distribution-free one that inverts the Mann-Whitney test: the k-th
  smallest and largest of the differences, k from the exact null distribution of U. No
  normality is assumed, and one wild process moves it by one order statistic.
* **Verdict.** ``slower``/``faster`` when the whole interval lies beyond the noise floor
  on the worse/better side; ``same`` when the whole interval lies inside the floor;
  ``undecided`` otherwise (cuda-bench's third answer: the data cannot tell).
* **Noise floor.** A change smaller than what processes of one commit differ by is not a
  change a user can act on. ``calibrate`` (an A/A run) learns it per figure as
  ``FLOOR_SIGMAS`` robust standard deviations of the log figure between processes, at
  least ``MIN_FLOOR`` and at most ``MAX_FLOOR``; without a calibration the floor is
  ``DEFAULT_FLOOR``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

#: the floor when this machine has no calibration for a figure (relative change)
DEFAULT_FLOOR = 0.05
#: no learned floor is below this: 2% is below what any figure here resolves between processes
MIN_FLOOR = 0.02
#: a learned floor is this many robust standard deviations of the per-process log figure
FLOOR_SIGMAS = 3.0
#: and at most this: a figure noisier than that is judged by its interval against 50%, so
#: that "same" can never be said of a change as large as the noise of a wild figure (an
#: A/A run on a busy 2-vCPU host learned 4,600% for one 64x64 bf16 product)
MAX_FLOOR = 0.5
#: two-sided confidence of the interval (asv compare's 99%)
CONFIDENCE = 0.99

FASTER, SLOWER, SAME, UNDECIDED = "faster", "slower", "same", "undecided"
VERDICTS = (FASTER, SLOWER, SAME, UNDECIDED)


def figure_key(benchmark: str, params: str) -> str:
    """One figure's name in noise files and tables: ``benchmark [params]`` (the benchmark alone without params)."""
    return f"{benchmark} [{params}]" if params else benchmark


@cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings give each value of the Mann-Whitney U (0..mn)."""
    # f(m, n, u) = f(m - 1, n, u - n) + f(m, n - 1, u): the largest value is an x or a y
    if m == 0 or n == 0:
        return (1,)
    with_x = _u_counts(m - 1, n)
    with_y = _u_counts(m, n - 1)
    out = [0] * (m * n + 1)
    for u, c in enumerate(with_x):
        out[u + n] += c
    for u, c in enumerate(with_y):
        out[u] += c
    return tuple(out)


def order_statistic_k(m: int, n: int, confidence: float = CONFIDENCE) -> int:
    """k such that [D_(k), D_(mn+1-k)] of the m*n sorted differences covers at ``confidence``.

    The largest k with P(U <= k - 1) <= (1 - confidence) / 2 under the null; 0 when the
    samples are too few for that confidence (then the interval is unbounded).
    """
    if m < 1 or n < 1:
        raise ValueError(f"both sides need samples, got {m} and {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    counts = _u_counts(m, n)
    total = math.comb(m + n, m)
    tail = (1 - confidence) / 2
    k, cum = 0, 0
    for u, c in enumerate(counts):
        cum += c
        if cum / total > tail:
            break
        k = u + 1
    return k


def shift_interval(
    base: Sequence[float], head: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """Hodges-Lehmann shift of head over base and its distribution-free interval (log space)."""
    xs = [math.log(v) for v in base]
    ys = [math.log(v) for v in head]
    diffs = sorted(y - x for y in ys for x in xs)
    k = order_statistic_k(len(xs), len(ys), confidence)
    if k == 0:
        return statistics.median(diffs), -math.inf, math.inf
    return statistics.median(diffs), diffs[k - 1], diffs[len(diffs) - k]


@dataclass(frozen=True)
class Verdict:
    """One figure's A/B answer. Ratios are head / base of the figure as measured."""

    verdict: str
    ratio: float
    ratio_lo: float
    ratio_hi: float
    floor: float
    base: float
    head: float
    n_base: int
    n_head: int

    @property
    def change(self) -> float:
        """Relative change head vs base (+0.1 = the figure went up 10%)."""
        return self.ratio - 1.0


def positive(values: Sequence[float]) -> list[float]:
    """The finite, positive values (a ratio of logs needs them); the rest cannot be judged."""
    return [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v) and v > 0]


def judge(
    base: Sequence[float],
    head: Sequence[float],
    higher_is_better: bool,
    floor: float = DEFAULT_FLOOR,
    confidence: float = CONFIDENCE,
) -> Verdict:
    """The verdict on one figure from per-process values of each side."""
    if floor < 0:
        raise ValueError(f"floor must be >= 0, got {floor}")
    b, h = positive(base), positive(head)
    if not b or not h:
        nan = math.nan
        return Verdict(UNDECIDED, nan, nan, nan, floor, nan, nan, len(b), len(h))
    mid, lo, hi = shift_interval(b, h, confidence)
    up, down = math.log1p(floor), -math.log1p(floor)
    if lo > up or hi < down:
        went_up = lo > up
        verdict = FASTER if went_up == higher_is_better else SLOWER
    elif down <= lo and hi <= up:
        verdict = SAME
    else:
        verdict = UNDECIDED
    return Verdict(
        verdict,
        math.exp(mid),
        math.exp(lo),
        math.exp(hi),
        floor,
        statistics.median(b),
        statistics.median(h),
        len(b),
        len(h),
    )


def settled(
    base: Sequence[float],
    head: Sequence[float],
    floor: float,
    final_base: int,
    final_head: int,
    confidence: float = CONFIDENCE,
) -> bool:
    """Whether ``judge`` on ``final_base`` x ``final_head`` values is certain to be undecided, whatever
    the values still to come (``base`` and ``head`` are the first of them).

    The interval of the final judgement is ``[D_(k), D_(N+1-k)]`` of all N differences, with k from
    the final counts. Differences only ever join the sorted list, so the final k-th smallest is at
    most the k-th smallest of the differences already there, and the final k-th largest at least
    their k-th largest. When the first already reaches down to the floor's upper edge, the interval
    can never clear the floor upwards; when the second reaches up to its lower edge, never
    downwards; and when either lies outside the floor, the interval can never fit inside it.
    Sequential analysis calls stopping on such a figure stopping for futility: no verdict is lost.
    """
    b, h = positive(base), positive(head)
    if not b or not h:
        return False  # cannot be judged now: nothing to bound
    k = order_statistic_k(final_base, final_head, confidence)
    if k == 0:
        return True  # the final interval is unbounded: undecided whatever comes
    diffs = sorted(math.log(y) - math.log(x) for y in h for x in b)
    if len(diffs) < k:
        return False
    low, high = diffs[k - 1], diffs[len(diffs) - k]
    up, down = math.log1p(floor), -math.log1p(floor)
    return low <= up and high >= down and (low < down or high > up)


def process_sigma(values: Sequence[float]) -> float:
    """Robust standard deviation of log values between processes (1.4826 MAD), 0 for < 2."""
    logs = [math.log(v) for v in positive(values)]
    if len(logs) < 2:
        return 0.0
    mid = statistics.median(logs)
    return 1.4826 * statistics.median(abs(v - mid) for v in logs)


def learned_floor(a: Sequence[float], b: Sequence[float]) -> float:
    """The noise floor of a figure from an A/A run: its process-to-process spread.

    Each side is centred on its own median first, so a difference between the sides (which
    an A/A run should not have, and which ``calibrate`` reports on its own) does not widen it.
    """
    logs: list[float] = []
    for side in (positive(a), positive(b)):
        if side:
            mid = statistics.median(side)
            logs += [v / mid for v in side]
    return min(MAX_FLOOR, max(MIN_FLOOR, math.expm1(FLOOR_SIGMAS * process_sigma(logs))))


def detectable_change(floor: float, a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """The smallest change ``judge`` would call on this figure at the A/A run's noise and rounds.

    The interval must clear the floor: the floor plus the half-width of the interval the A/A
    data gave (infinite when the rounds are too few for the confidence).
    """
    pa, pb = positive(a), positive(b)
    if not pa or not pb:
        return math.inf
    _, lo, hi = shift_interval(pa, pb, confidence)
    if not math.isfinite(lo) or not math.isfinite(hi):
        return math.inf
    return math.expm1(math.log1p(floor) + (hi - lo) / 2)


def stopped_rounds(value: object) -> int | None:
    """A compare.csv ``stopped_after`` cell as rounds per side, ``None`` when the figure ran every round
    (an empty cell, read as ``""``, ``None`` or NaN depending on the reader)."""
    if value is None or value == "":
        return None
    try:
        n = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(n) else int(n)


def interval_text(ratio_lo: float, ratio_hi: float, stopped_after: object = None) -> str:
    """A figure's interval as compare's table, Markdown and the report show it: ``[-12.0%, +30.5%]``;
    "stopped after N" for a figure stopped once settled; "n/a" with no value on one side; "unbounded"
    when its rounds are too few for the confidence."""
    n = stopped_rounds(stopped_after)
    if n is not None:
        return f"stopped after {n}"
    if math.isnan(ratio_lo) or math.isnan(ratio_hi):
        return "n/a"
    if not (ratio_lo > 0 and math.isfinite(ratio_hi)):
        return "unbounded"
    return f"[{100 * (ratio_lo - 1):+.1f}%, {100 * (ratio_hi - 1):+.1f}%]"
