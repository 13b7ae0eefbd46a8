"""The verdict rule (devbench.verdict) on synthetic per-process figures: no timing here."""

from __future__ import annotations

import math
import random

import pytest

from devbench import verdict as V


def test_u_distribution_counts_every_ordering():
    for m, n in [(1, 1), (3, 4), (5, 5), (6, 6)]:
        counts = V._u_counts(m, n)
        assert len(counts) == m * n + 1 and sum(counts) == math.comb(m + n, m)
        assert counts == counts[::-1]  # U is symmetric under the null


@pytest.mark.parametrize(
    ("m", "n", "confidence", "k"),
    [
        (5, 5, 0.95, 3),  # P(U <= 2) = 4/252 = 0.016 <= 0.025 < P(U <= 3) = 7/252
        (5, 5, 0.99, 1),  # P(U <= 0) = 1/252 <= 0.005 < P(U <= 1)
        (6, 6, 0.99, 3),  # P(U <= 2) = 4/924 <= 0.005 < 7/924
        (4, 4, 0.95, 1),
        (3, 3, 0.95, 0),  # 1/20 > 0.025: three rounds cannot give a 95% interval
    ],
)
def test_order_statistic_matches_the_exact_mann_whitney_tail(m, n, confidence, k):
    assert V.order_statistic_k(m, n, confidence) == k


def test_shift_interval_is_the_hodges_lehmann_estimate_and_covers_it():
    base = [1.0, 1.1, 0.9, 1.05, 0.95]
    head = [2 * v for v in base]
    mid, lo, hi = V.shift_interval(base, head, 0.95)
    assert math.exp(mid) == pytest.approx(2.0) and lo <= mid <= hi
    assert math.exp(lo) > 1.5 and math.exp(hi) < 2.7


def test_three_rounds_are_too_few_for_a_verdict():
    v = V.judge([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], higher_is_better=False)
    assert v.verdict == V.UNDECIDED and v.ratio == pytest.approx(2.0) and math.isinf(v.ratio_hi)


@pytest.mark.parametrize(
    ("factor", "higher_is_better", "expected"),
    [(2.0, False, V.SLOWER), (0.5, False, V.FASTER), (2.0, True, V.FASTER), (0.5, True, V.SLOWER)],
)
def test_a_clear_change_is_judged_by_the_figures_direction(factor, higher_is_better, expected):
    base = [1.0, 1.02, 0.98, 1.01, 0.99]
    head = [factor * v for v in base]
    v = V.judge(base, head, higher_is_better=higher_is_better)
    assert v.verdict == expected and v.ratio == pytest.approx(factor, rel=0.03)


def test_identical_quiet_sides_are_the_same():
    base = [1.0, 1.01, 0.99, 1.005, 0.995]
    v = V.judge(base, list(reversed(base)), higher_is_better=True)
    assert v.verdict == V.SAME and v.ratio_lo >= 1 / 1.05 and v.ratio_hi <= 1.05


def test_a_change_inside_the_noise_floor_is_not_a_verdict():
    base = [1.0, 1.004, 0.996, 1.002, 0.998]
    head = [1.03 * v for v in base]  # clearly different, but 3% under a 5% floor
    assert V.judge(base, head, higher_is_better=False, floor=0.05).verdict == V.SAME
    assert V.judge(base, head, higher_is_better=False, floor=0.01).verdict == V.SLOWER


def test_one_wild_process_makes_it_undecided_not_a_regression():
    base = [1.0, 1.0, 1.0, 1.0, 1.0]
    head = [1.0, 1.0, 1.0, 1.0, 3.0]  # one round ran while the host was busy
    assert V.judge(base, head, higher_is_better=False).verdict in (V.SAME, V.UNDECIDED)


def test_noisy_sides_with_a_real_change_are_undecided():
    base = [1.0, 1.6, 0.7, 1.3, 0.9]
    head = [1.25 * v for v in [1.4, 0.8, 1.1, 0.75, 1.5]]
    assert V.judge(base, head, higher_is_better=False).verdict == V.UNDECIDED


def test_unjudgeable_values_give_undecided():
    assert V.judge([], [1.0], higher_is_better=True).verdict == V.UNDECIDED
    assert V.judge([0.0, -1.0, math.nan], [1.0] * 5, higher_is_better=True).verdict == V.UNDECIDED
    with pytest.raises(ValueError, match="floor"):
        V.judge([1.0], [1.0], higher_is_better=True, floor=-0.1)


def test_a_a_runs_of_lognormal_noise_rarely_cross_a_learned_floor():
    """Simulated A/A comparisons: with the floor learned from an earlier A/A run, false verdicts are rare."""
    rng = random.Random(7)
    false = 0
    trials = 400
    for _ in range(trials):
        sigma = rng.choice([0.01, 0.05, 0.2, 0.4])

        def side(sigma=sigma):
            return [math.exp(rng.gauss(0, sigma)) for _ in range(5)]

        floor = V.learned_floor(side(), side())
        v = V.judge(side(), side(), higher_is_better=True, floor=floor)
        false += v.verdict in (V.FASTER, V.SLOWER)
    assert false <= trials * 0.01


def test_learned_floor_and_detectable_change():
    quiet = [1.0, 1.001, 0.999, 1.0005, 0.9995]
    assert V.learned_floor(quiet, quiet) == V.MIN_FLOOR
    noisy_a, noisy_b = [1.0, 1.2, 0.8, 1.1, 0.9], [1.05, 0.85, 1.15, 0.95, 1.0]
    floor = V.learned_floor(noisy_a, noisy_b)
    assert floor > 0.2  # 3 robust sigmas of ~10% noise
    assert V.learned_floor([2 * v for v in noisy_a], noisy_b) == pytest.approx(floor)  # sides centred first
    mdc = V.detectable_change(floor, noisy_a, noisy_b)
    assert mdc > floor and math.isfinite(mdc)
    assert math.isinf(V.detectable_change(floor, [1.0, 1.1], [1.0, 1.1]))  # too few rounds for 95%
    wild = [1.0, 50.0, 0.02, 3.0, 0.3]
    assert V.learned_floor(wild, wild) == V.MAX_FLOOR


def test_a_large_change_of_a_wild_figure_is_never_same():
    base = [1.0, 1.02, 0.98, 1.01, 0.99]
    head = [1.9 * v for v in base]
    assert V.judge(base, head, higher_is_better=False, floor=V.MAX_FLOOR).verdict == V.SLOWER
    head = [1.45 * v for v in [1.0, 1.3, 0.8, 1.1, 0.9]]
    assert V.judge(base, head, higher_is_better=False, floor=V.MAX_FLOOR).verdict == V.UNDECIDED


def test_settled_only_when_no_remaining_rounds_can_give_a_verdict():
    # 2 rounds per side, 5 at the end (99%: the interval is the smallest and largest difference)
    assert V.settled([1.0, 1.3], [1.25, 0.9], 0.1, 5, 5)  # differences reach past +10% and inside it
    assert not V.settled([1.0, 1.01], [1.02, 1.0], 0.1, 5, 5)  # all inside: may end the same
    assert not V.settled([1.0, 1.01], [2.0, 2.1], 0.1, 5, 5)  # all beyond: may end slower
    # up by 15% on the median, but one difference (+3.9%) already lies inside the floor: never slower
    assert V.settled([1.0, 1.01], [1.05, 1.3], 0.1, 5, 5)
    assert not V.settled([1.0], [], 0.1, 5, 5)  # nothing to bound
    assert V.settled([1.0, 1.0], [1.0, 1.0], 0.1, 2, 2)  # 2 x 2 rounds give no 99% interval at all
    # at 10 rounds per side the 99% interval drops the most extreme differences: a single wild one
    # settles nothing, since later rounds may outnumber it
    assert V.order_statistic_k(10, 10) > 1
    assert not V.settled([1.0, 1.0, 1.0], [1.0, 1.0, 1.6], 0.1, 10, 10)


@pytest.mark.parametrize(("final", "confidence"), [(5, 0.99), (7, 0.95), (10, 0.99)])
def test_a_settled_figure_ends_undecided_whatever_comes(final, confidence):
    """The guarantee stopping early rests on, tried on random data: whatever the later rounds bring
    (extreme values included), the final verdict of a settled figure is undecided."""
    rng = random.Random(7)
    seen = 0
    for _ in range(300):
        now = rng.randint(2, final - 1)
        sigma, shift, floor = rng.choice([0.05, 0.2, 0.5]), rng.choice([0.0, 0.1, 0.3]), rng.choice([0.05, 0.2])
        base = [math.exp(rng.gauss(0, sigma)) for _ in range(now)]
        head = [math.exp(rng.gauss(shift, sigma)) for _ in range(now)]
        if not V.settled(base, head, floor, final, final, confidence):
            continue
        seen += 1
        for _ in range(20):
            more = final - now
            pick = [0.1, 1.0, 10.0, math.exp(rng.gauss(shift, sigma))]
            b = base + [rng.choice(pick) for _ in range(more)]
            h = head + [rng.choice(pick) for _ in range(more)]
            assert V.judge(b, h, higher_is_better=True, floor=floor, confidence=confidence).verdict == V.UNDECIDED
    assert seen > 20  # the property was tried, not skipped


def test_interval_text_names_stopped_one_sided_and_unbounded_intervals():
    assert V.interval_text(0.9, 1.4) == "[-10.0%, +40.0%]"
    assert V.interval_text(0.0, math.inf) == "unbounded"
    assert V.interval_text(math.nan, math.nan) == "n/a"
    # compare.csv's stopped_after as its readers give it: "3", 3.0, and an empty cell as "", None or NaN
    for cell in ("3", 3.0, 3):
        assert V.interval_text(0.0, math.inf, cell) == "stopped after 3"
    for empty in ("", None, math.nan):
        assert V.stopped_rounds(empty) is None
        assert V.interval_text(0.9, 1.4, empty) == "[-10.0%, +40.0%]"
