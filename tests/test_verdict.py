"""The paired verdict rule (devbench.records.verdict) on synthetic log ratios: no timing here."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from devbench.records import verdict as V


def test_signed_rank_counts_every_sign_pattern():
    for n in (1, 4, 8):
        counts = V._w_counts(n)
        assert len(counts) == n * (n + 1) // 2 + 1 and sum(counts) == 2**n
        assert counts == counts[::-1]  # W+ is symmetric under the null
        # against brute force: every subset of ranks 1..n
        brute = [0] * len(counts)
        for signs in itertools.product((0, 1), repeat=n):
            brute[sum(r for r, s in zip(range(1, n + 1), signs, strict=True) if s)] += 1
        assert tuple(brute) == counts


@pytest.mark.parametrize(
    ("n", "confidence", "k"),
    [
        (5, 0.95, 0),  # P(W+ = 0) = 1/32 > 0.025
        (6, 0.95, 1),  # 1/64 <= 0.025 < 2/64
        (7, 0.99, 0),  # 1/128 > 0.005
        (8, 0.99, 1),  # 1/256 <= 0.005 < 2/256
        (10, 0.95, 9),  # P(W+ <= 8) = 25/1024 <= 0.025 < P(W+ <= 9) = 31/1024
    ],
)
def test_signed_rank_k_matches_the_exact_tail(n, confidence, k):
    assert V.signed_rank_k(n, confidence) == k


def test_paired_interval_is_the_hodges_lehmann_estimate_and_covers_it():
    diffs = [math.log(1.1) + d for d in (-0.01, 0.0, 0.01, 0.005, -0.005, 0.002, -0.002, 0.0)]
    mid, lo, hi = V.paired_interval(diffs, 0.99)
    assert math.exp(mid) == pytest.approx(1.1, rel=1e-3) and lo <= mid <= hi
    assert lo == min(diffs) and hi == max(diffs)  # k = 1 at n = 8: the extreme Walsh averages


def test_too_few_values_give_an_unbounded_interval():
    _, lo, hi = V.paired_interval([0.1] * 7, 0.99)
    assert lo == -math.inf and hi == math.inf


@pytest.mark.parametrize(
    ("lo", "hi", "floor", "expected"),
    [
        (0.05, 0.1, 0.02, V.UP),
        (-0.1, -0.05, 0.02, V.DOWN),
        (-0.01, 0.015, 0.02, V.SAME),
        (-0.01, 0.05, 0.02, V.UNDECIDED),
        (0.01, 0.05, 0.02, V.UNDECIDED),  # beyond zero but not wholly beyond the floor
    ],
)
def test_decide_against_the_floor(lo, hi, floor, expected):
    assert V.decide(lo, hi, floor) == expected


def test_an_a_a_run_of_many_figures_rarely_calls_a_change():
    """Symmetric noise about zero: at 99% and a 2% floor, 1,000 figures of 8 process pairs each
    (log sd 3% per pair) give no verdict of up or down."""
    rng = random.Random(7)
    called = 0
    for _ in range(1000):
        diffs = [rng.gauss(0, 0.03) for _ in range(8)]
        _, lo, hi = V.paired_interval(diffs, 0.99)
        called += V.decide(lo, hi, 0.02) in (V.UP, V.DOWN)
    assert called <= 2


def test_a_ten_percent_change_is_found_at_three_percent_noise():
    rng = random.Random(11)
    found = 0
    for _ in range(200):
        diffs = [math.log(1.10) + rng.gauss(0, 0.03) for _ in range(8)]
        _, lo, hi = V.paired_interval(diffs, 0.99)
        found += V.decide(lo, hi, 0.02) == V.UP
    assert found >= 190


def test_futile_means_no_future_values_can_decide():
    """Exhaustively: a figure called futile with n values left undecided whatever the next values are."""
    values = [0.0, 0.2, -0.2, 0.1, -0.1, 0.15]
    assert V.futile(values, 8, 0.02, 0.99)
    for extra in itertools.product((-1.0, -0.01, 0.0, 0.01, 1.0), repeat=2):
        _, lo, hi = V.paired_interval(values + list(extra), 0.99)
        assert V.decide(lo, hi, 0.02) == V.UNDECIDED


def test_a_figure_that_may_still_decide_is_not_futile():
    values = [0.1, 0.11, 0.09, 0.1, 0.12, 0.1]
    assert not V.futile(values, 8, 0.02, 0.99)
    _, lo, hi = V.paired_interval(values + [0.1, 0.1], 0.99)
    assert V.decide(lo, hi, 0.02) == V.UP


def test_without_same_futile_means_neither_up_nor_down_can_come():
    """Values inside the floor may still end same (not futile), but can no longer end up or down: without
    ``same`` they are futile, exhaustively over the values to come."""
    values = [0.001, -0.002, 0.0, 0.003, -0.001, 0.002]
    assert not V.futile(values, 8, 0.02, 0.99)
    assert V.futile(values, 8, 0.02, 0.99, same=False)
    for extra in itertools.product((-1.0, -0.01, 0.0, 0.01, 1.0), repeat=2):
        _, lo, hi = V.paired_interval(values + list(extra), 0.99)
        assert V.decide(lo, hi, 0.02) in (V.UNDECIDED, V.SAME)
    slower = [0.1, 0.11, 0.09, 0.1, 0.12, 0.1]
    assert not V.futile(slower, 8, 0.02, 0.99, same=False)


def test_detectable_is_the_floor_plus_half_the_interval():
    assert V.detectable(-0.05, 0.05, 0.02) == pytest.approx(math.expm1(math.log1p(0.02) + 0.05))
    assert V.detectable(-math.inf, 0.1, 0.02) == math.inf
