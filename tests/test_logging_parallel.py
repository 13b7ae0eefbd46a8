import numpy as np
import pytest
import torch

from devbench.logger import DeviceLogger
from devbench.workloads.norms import STRATEGIES, NormLoop
from devbench.workloads.parallel import (
    DeviceRunError,
    MatmulWork,
    ParallelPair,
    run_in_sequence,
    run_on_devices,
)

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


def test_run_on_devices_returns_each_result_in_order():
    seen = []

    def fn(dev):
        seen.append(dev)
        return torch.ones(2, device=dev) * len(str(dev))

    out = run_on_devices([lambda d: fn(d), lambda d: fn(d) + 1], [CPU, "meta"])
    assert out[0].equal(torch.full((2,), 3.0))
    assert out[1].device.type == "meta"
    assert sorted(map(str, seen)) == ["cpu", "meta"]


def test_run_on_devices_runs_lanes_concurrently():
    import threading

    barrier = threading.Barrier(2, timeout=5)  # deadlocks (BrokenBarrierError) if run one by one
    out = run_on_devices(lambda d: barrier.wait() >= 0, [CPU, CPU])
    assert out == [True, True]


def test_run_on_devices_names_failing_device():
    def fn(dev):
        if dev.type == "meta":
            raise RuntimeError("out of memory")
        return 1

    with pytest.raises(DeviceRunError, match="on meta: RuntimeError: out of memory") as err:
        run_on_devices(fn, [CPU, torch.device("meta")])
    assert err.value.device == torch.device("meta")


def test_run_on_devices_synchronizes_every_device(monkeypatch):
    from devbench.workloads import parallel

    synced = []
    monkeypatch.setattr(parallel, "synchronize", lambda d: synced.append(str(d)))
    run_on_devices(lambda d: None, [CPU, torch.device("meta")])
    assert sorted(synced) == ["cpu", "meta"]
    synced.clear()
    run_in_sequence(lambda d: None, [CPU, torch.device("meta")])
    assert len(synced) == 1 and "meta" in synced[0] and "cpu" in synced[0]  # one call, both devices


def test_function_count_must_match_devices():
    with pytest.raises(ValueError, match="2 functions for 3 devices"):
        run_on_devices([lambda d: 1, lambda d: 2], [CPU, CPU, CPU])


def test_parallel_pair_on_two_cpu_lanes():
    pair = ParallelPair(64, [CPU, CPU], lane_s=0.005)
    assert pair.par.reps >= 1 and pair.par.reps == pair.seq.reps
    assert pair.run_parallel() > 0 and pair.run_sequential() > 0
    assert pair.speedup(samples=1) > 0
    with pytest.raises(ValueError, match="2 lanes"):
        ParallelPair(8, [CPU])


def test_matmul_work_lanes_have_own_buffers():
    work = MatmulWork(8, [CPU, CPU], reps=3)
    a, b = (fn(CPU) for fn in work.lanes())
    assert a.data_ptr() != b.data_ptr()


@pytest.mark.cuda
def test_logger_on_gpu_matches_cpu():
    loop = NormLoop(64, 300, torch.device("cuda"))
    for s in STRATEGIES:
        loop.check(s)
