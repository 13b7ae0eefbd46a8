"""The stop rule: asv's own 99% interval of the median, within 0.5% of it, or the class's cap."""

import itertools
import random

import pytest

from devbench.engine import precision as P


def test_ci99_is_asvs_interval_where_asv_takes_it_from_the_samples():
    """Fails if asv changes how it computes the interval it records (``compute_stats``)."""
    from asv_runner.statistics import compute_stats

    rng = random.Random(11)
    for n in range(1, 41):
        for _ in range(20):
            values = [1.0 + rng.gauss(0, rng.choice([0.001, 0.01, 0.1])) for _ in range(n)]
            ours = P.ci99(values)
            _, stats = compute_stats(values, 1)
            if ours is None:  # asv extends its interval beyond the samples (its posterior): nothing to stop on
                assert n < P.MIN_SAMPLES
                continue
            assert ours == (stats["ci_99_a"], stats["ci_99_b"])
    assert P.ci99([1.0] * (P.MIN_SAMPLES - 1)) is None and P.ci99([1.0] * P.MIN_SAMPLES) == (1.0, 1.0)


def test_a_figure_stops_when_precise_and_at_its_cap_when_not():
    tight = itertools.cycle([1.0, 1.001, 0.999, 1.002, 0.998])
    got = P.sample(lambda: next(tight), cap=(0.0, 40))
    assert len(got.values) == P.MIN_SAMPLES and not got.capped and got.half_width <= P.REL
    wide = itertools.cycle([1.0, 1.2, 0.9, 1.1, 0.8])
    got = P.sample(lambda: next(wide), cap=(0.0, 15))
    assert len(got.values) == 15 and got.capped
    # the cap is seconds and samples, whichever ends later: a clock that has not moved keeps sampling
    ticks = itertools.count()
    got = P.sample(lambda: next(wide), cap=(10.0, 3), clock=lambda: next(ticks) * 0.5)
    assert got.capped and len(got.values) >= 19
    # a figure that needs fewer samples than the cap's count still stops at MIN_SAMPLES when precise
    assert len(P.sample(lambda: 2.0, cap=(0.0, 3)).values) == 3  # 3 < 8: the cap ends it first
    with pytest.raises(ValueError, match="cap"):
        P.sample(lambda: 1.0, cap=(0.0, 0))


def test_a_figure_whose_cap_ends_before_asvs_interval_can_narrow_stops_at_the_fewest_samples():
    """From 8 to 11 samples asv's interval is their range (checked against asv's own function), which another sample
    can only widen: a figure not within 0.5% at 8 whose cap ends before 12 stops at 8, capped; one whose cap leaves
    12 or more goes on, and from 12 its interval leaves the extremes out. The plan prices it so."""
    from asv_runner.statistics import compute_stats

    rng = random.Random(5)
    for n in range(P.MIN_SAMPLES, P.TRIMMED_SAMPLES + 1):
        values = [rng.gauss(1.0, 0.05) for _ in range(n)]
        _, stats = compute_stats(values, 1)
        is_range = (stats["ci_99_a"], stats["ci_99_b"]) == (min(values), max(values))
        assert is_range is (n < P.TRIMMED_SAMPLES), n
    wide = itertools.cycle([1.0, 1.2, 0.9, 1.1, 0.8])
    got = P.sample(lambda: next(wide), cap=(0.0, 11))
    assert len(got.values) == P.MIN_SAMPLES and got.capped
    ticks = itertools.count()  # 0.05 s a sample: the default cap's 0.5 s is 10 of them, its 11 samples later
    got = P.sample(lambda: next(wide), cap=P.DEFAULT_CAP, clock=lambda: next(ticks) * 0.05)
    assert len(got.values) == P.MIN_SAMPLES and got.capped
    ticks = itertools.count()  # 0.02 s a sample: 0.5 s is 25 of them
    got = P.sample(lambda: next(wide), cap=P.DEFAULT_CAP, clock=lambda: next(ticks) * 0.02)
    assert len(got.values) >= P.TRIMMED_SAMPLES and got.capped
    tight = itertools.cycle([1.0, 1.001, 0.999, 1.002, 0.998])  # precise at 8 whatever its cap
    assert len(P.sample(lambda: next(tight), cap=(0.0, 11)).values) == P.MIN_SAMPLES
    assert P.capped_samples(0.5, 11, 0.05) == P.MIN_SAMPLES and P.capped_samples(0.5, 11, 0.02) == 25
    assert P.capped_samples(0.0, 3, 0.05) == 3 and P.capped_samples(2.0, 8, 0.6) == P.MIN_SAMPLES
    # a cap that ends between 11 and 12 samples ends at the 12th, where the interval can narrow: it goes on
    assert P.cap_end(0.5, 11, 0.0435) == P.TRIMMED_SAMPLES and P.capped_samples(0.5, 11, 0.0435) == 12
    ticks = iter([0.0, *(0.0435 * i for i in range(1, 40))])
    got = P.sample(lambda: next(wide), cap=P.DEFAULT_CAP, clock=lambda: next(ticks))
    assert len(got.values) == P.TRIMMED_SAMPLES and got.capped
    # the pace is the samples' median: one slow first block does not end a figure whose cap leaves it 25
    times = [0.0, 0.2, *(0.2 + 0.02 * i for i in range(1, 40))]
    ticks = iter(times)
    got = P.sample(lambda: next(wide), cap=P.DEFAULT_CAP, clock=lambda: next(ticks))
    assert len(got.values) > P.TRIMMED_SAMPLES


def test_samples_read_on_two_clocks_stop_when_both_are_precise():
    tight = itertools.cycle([1.0, 1.001, 0.999, 1.002, 0.998])
    wide = itertools.cycle([1.0, 1.2, 0.9, 1.1, 0.8])
    got = P.sample(lambda: (next(tight), next(wide)), cap=(0.0, 15))
    assert len(got.values) == 15 and got.capped and got.half_width > P.REL  # the wide column holds it
    got = P.sample(lambda: (next(tight), 2 * next(tight)), cap=(0.0, 40))
    assert len(got.values) == P.MIN_SAMPLES and not got.capped


def test_measure_clocks_reads_each_block_on_both_clocks(monkeypatch):
    import torch

    from devbench.engine import measure as M

    monkeypatch.delenv(M.BLOCKS_ENV, raising=False)
    calls = []
    host, dev = M.measure_clocks(lambda: calls.append(1), torch.device("cpu"), 5, blocks=4)
    assert len(calls) == 20 and len(host.per_call) == len(dev.per_call) == 4 and host.calls == dev.calls == 5
    assert all(d <= h for h, d in zip(host.per_call, dev.per_call, strict=True))  # the device's lies inside
    with pytest.raises(ValueError, match="calls"):
        M.measure_clocks(lambda: None, torch.device("cpu"), 0)


def test_a_class_cap_holds_inside_capped_only():
    assert P.current_cap() == P.DEFAULT_CAP
    with P.capped((2.0, 30)):
        assert P.current_cap() == (2.0, 30)
        with P.capped(None):
            assert P.current_cap() == P.DEFAULT_CAP
    assert P.current_cap() == P.DEFAULT_CAP


def test_measure_samples_to_precision_unless_the_blocks_are_fixed(monkeypatch):
    import torch

    from devbench.engine import measure as M

    monkeypatch.delenv(M.BLOCKS_ENV, raising=False)
    fixed = M.measure(lambda: None, torch.device("cpu"), 10, blocks=3)
    assert len(fixed.per_call) == 3
    with P.capped((0.0, 9)):
        got = M.measure(lambda: None, torch.device("cpu"), 10)
    assert len(got.per_call) >= P.MIN_SAMPLES
    monkeypatch.setenv(M.BLOCKS_ENV, "1")
    assert len(M.measure(lambda: None, torch.device("cpu"), 10).per_call) == 1
    synced = []
    m = M.measure_synced(lambda: synced.append("call"), lambda: synced.append("sync"), 4, blocks=2)
    assert synced == ["call", "sync"] * 8 and m.calls == 4 and len(m.per_call) == 2


def test_a_host_clock_figure_on_the_cpu_samples_at_least_asvs_seconds(monkeypatch):
    import torch

    from devbench.engine import suite

    seen = []
    real = P.sample

    def spy(take, cap=None, **kw):
        seen.append(P.current_cap())
        return P.Sampled((1.0,) * 8, capped=False)

    monkeypatch.setattr(P, "sample", spy)
    monkeypatch.delenv("DEVBENCH_BLOCKS", raising=False)
    suite.waited(lambda: None, None, 0.05, torch.device("cpu"), one_s=1e-3)
    suite.waited(lambda: None, None, 0.05, torch.device("meta"), one_s=1e-3)  # any other device: the class's cap
    assert seen == [(suite.Benchmark.repeat[2], P.DEFAULT_CAP[1]), P.DEFAULT_CAP]
    assert real is not P.sample
