import numpy as np
import pytest
import torch

from devbench.engine.lanes import Lanes, LaneTimes
from devbench.logger import DeviceLogger
from devbench.workloads.norms import STRATEGIES, NormLoop
from devbench.workloads.parallel import ParallelPair

CPU = torch.device("cpu")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_matches_float64(strategy):
    loop = NormLoop(16, 250, CPU, flush_every=100)
    got = loop.check(strategy)
    assert got.shape == (250,)
    np.testing.assert_allclose(got, loop.reference(), rtol=1e-5)


def test_strategies_agree_with_each_other():
    loop = NormLoop(8, 30, CPU, flush_every=7)
    outs = [loop.strategy(s)() for s in STRATEGIES]
    for other in outs[1:]:
        np.testing.assert_array_equal(outs[0], other)
    assert len(set(outs[0].tolist())) > 1  # steps really differ


def test_check_catches_wrong_norms(monkeypatch):
    loop = NormLoop(8, 5, CPU)
    monkeypatch.setattr(loop, "on_device", lambda: loop.reference().astype(np.float32) * 1.01)
    with pytest.raises(AssertionError, match="on_device on cpu"):
        loop.check("on_device")


def test_unknown_strategy_named():
    with pytest.raises(ValueError, match="sometimes"):
        NormLoop(4, 4, CPU).strategy("sometimes")


def test_logger_flushes_and_grows():
    log = DeviceLogger(CPU, capacity=2, flush_every=3)
    for i in range(10):
        log.log(torch.tensor(float(i)))
    assert len(log) == 10
    np.testing.assert_array_equal(log.values(), np.arange(10, dtype=np.float32))
    log.log(torch.tensor(10.0))
    assert log.values()[-1] == 10.0


def test_logger_rejects_bad_input():
    with pytest.raises(ValueError, match="capacity"):
        DeviceLogger(CPU, capacity=0)
    with pytest.raises(ValueError, match="flush_every"):
        DeviceLogger(CPU, flush_every=0)
    log = DeviceLogger(CPU)
    with pytest.raises(ValueError, match="meta"):
        log.log(torch.tensor(1.0, device="meta"))


def test_parallel_pair_on_two_cpu_lanes():
    pair = ParallelPair(64, [CPU, CPU], run_s=0.01)
    assert pair.reps >= 1
    assert len({id(mm) for mm in (*pair.par, *pair.seq)}) == 4  # every lane and every sequential work its own
    assert pair.par[0].outputs[0].data_ptr() != pair.par[1].outputs[0].data_ptr()
    assert pair.run_parallel() > 0 and pair.run_sequential() > 0
    pairs = pair.pairs(3)
    assert 3 <= len(pairs) and all(seq > 0 and par > 0 for seq, par in pairs)
    with pytest.raises(ValueError, match="2 lanes"):
        ParallelPair(8, [CPU])


def test_parallel_pair_sizes_its_work_after_the_warm_up(monkeypatch):
    """The first, cold run (threads, handles, workspaces) must not size the repetitions."""
    walls = iter([5.0, 0.01])  # the cold first run, then a warm one that sizes the work
    calls = []

    def fake_run(self, fns, calls_per_lane=1):
        calls.append(calls_per_lane)
        return LaneTimes(next(walls, 0.01), (0.01,) * len(fns))

    monkeypatch.setattr(Lanes, "run", fake_run)
    monkeypatch.setattr(Lanes, "sequential", lambda self, fns, calls=1: 0.02)
    pair = ParallelPair(8, [CPU, CPU], run_s=0.4)
    assert pair.reps == 20  # 0.4 s over 2 lanes / 0.01 s, not over 5.0 s -> 1
    assert calls == [1, 1]  # sized from single-product runs


def test_a_pairs_sequential_run_lasts_the_same_whatever_its_lanes(monkeypatch):
    """N lanes share the sequential run's ``run_s``: on eight GPUs a lane sized as two lanes' made a pair last 1.8 s
    where two lanes' lasts 0.6 s (and gpu-run priced it as two lanes')."""
    monkeypatch.setattr(Lanes, "run", lambda self, fns, calls_per_lane=1: LaneTimes(0.01, (0.01,) * len(fns)))
    monkeypatch.setattr(Lanes, "sequential", lambda self, fns, calls=1: 0.01 * len(fns) * calls)
    two, four = ParallelPair(8, [CPU] * 2, run_s=0.4), ParallelPair(8, [CPU] * 4, run_s=0.4)
    assert (two.reps, four.reps) == (20, 10)  # 0.2 s and 0.1 s a lane, each product 0.01 s
    assert two.run_sequential() == pytest.approx(four.run_sequential()) == pytest.approx(0.4)


def test_parallel_pair_makes_its_lanes_once(monkeypatch):
    made = []
    real_init = Lanes.__init__

    def counting_init(self, devices):
        made.append(devices)
        real_init(self, devices)

    monkeypatch.setattr(Lanes, "__init__", counting_init)
    pair = ParallelPair(16, [CPU, CPU], run_s=0.002)
    for _ in range(3):
        pair.run_parallel()
        pair.run_sequential()
    assert len(made) == 1


def test_a_pairs_two_runs_take_turns_going_first_and_each_pair_stays_sequential_then_parallel():
    """The lanes idle through a sequential run: a parallel run always after one would always start them cold."""
    pair = ParallelPair(8, [CPU, CPU], run_s=0.002)
    order: list[str] = []
    pair.run_sequential = lambda: order.append("seq") or 2.0
    pair.run_parallel = lambda: order.append("par") or 1.0
    got = pair.pairs(4)
    assert order == ["seq", "par", "par", "seq", "seq", "par", "par", "seq"]
    assert got == [(2.0, 1.0)] * 4


@pytest.mark.cuda
def test_logger_on_gpu_matches_cpu():
    loop = NormLoop(64, 300, torch.device("cuda"))
    for s in STRATEGIES:
        loop.check(s)


def test_the_float64_reference_computes_each_distinct_product_once(monkeypatch):
    import torch

    from devbench.workloads import norms

    loop = NormLoop(8, 20, "cpu")
    a, b = loop.a.double(), loop.b.double()
    brute = np.array([float(torch.linalg.matrix_norm(a[i % norms.INPUT_SETS] @ b)) for i in range(20)])
    calls = []
    real = torch.linalg.matrix_norm
    monkeypatch.setattr(torch.linalg, "matrix_norm", lambda x, *k, **kw: calls.append(1) or real(x, *k, **kw))
    np.testing.assert_allclose(loop.reference(), brute, rtol=1e-12)
    assert len(calls) == norms.INPUT_SETS  # 8 distinct products, not 20
    loop.reference()
    assert len(calls) == norms.INPUT_SETS  # kept: a check of two strategies reads it twice


def test_a_loops_time_and_its_ratio_come_from_the_same_pairs_of_blocks(monkeypatch):
    """LogNorms' two figures read one set of pairs: a block of the strategy's loops and one of on_device's."""
    import torch

    from devbench.workloads.norms import NormLoop

    loop = NormLoop(16, 10, torch.device("cpu"))
    pairs, calls = loop.pairs("per_step_item", 0.001, count=4)
    assert len(pairs) == 4 and calls >= 1 and all(own > 0 and ref > 0 for own, ref in pairs)
    monkeypatch.setenv("DEVBENCH_BLOCKS", "3")  # compare's fixed blocks hold for the pairs too
    assert len(loop.pairs("periodic", 0.001)[0]) == 3
