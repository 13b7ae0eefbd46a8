"""The measuring engine (devbench.engine.measure): block sizing, Measurement, lanes. No test asserts a speed."""

from __future__ import annotations

import threading

import pytest
import torch

from devbench.engine import blocks as B
from devbench.engine import lanes as L
from devbench.engine import measure as M

CPU = torch.device("cpu")


def test_pin_threads_and_the_block_form_restores_the_count(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert M.pin_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv(M.THREADS_ENV, "2")
        assert M.pin_threads() == 2
        monkeypatch.setenv(M.THREADS_ENV, "lots")
        with pytest.raises(ValueError, match="lots"):
            M.pin_threads()
        with pytest.raises(ValueError, match=">= 1"):
            M.pin_threads(0)
        torch.set_num_threads(2)
        with M.threads_pinned(1) as n:
            assert n == 1 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_randn_is_seeded_and_not_zero():
    a, b = M.randn((4, 4)), M.randn((4, 4))
    assert a.equal(b) and (a != 0).all()
    assert not M.randn(16, seed=1).equal(M.randn(16, seed=2))
    assert M.randn(8, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_time_block_counts_calls():
    calls = []
    timing = M.time_block(lambda: calls.append(1), CPU, 7)
    assert len(calls) == 7 and timing.calls == 7 and timing.seconds > 0
    assert timing.per_call == timing.seconds / 7
    with pytest.raises(ValueError):
        M.time_block(lambda: None, CPU, 0)


@pytest.mark.parametrize(
    ("one", "target", "min_calls", "max_calls", "want"),
    [
        (0.001, 0.05, 1, 10_000, 50),  # fills the target
        (1.5e-6, 0.1, 1, M.MAX_CALLS, 66_666),  # a 1.5 us call fills its block too (not cut to 15 ms)
        (0.06, 0.05, 1, 10_000, 1),  # one call is already a block
        (0.06, 0.05, 2, 10_000, 2),  # unless at least two are asked for
        (1e-9, 0.05, 1, 3, 3),  # capped
        (0.0, 0.05, 1, 7, 7),  # a clock that saw nothing: the cap
    ],
)
def test_block_calls_rule(one, target, min_calls, max_calls, want):
    assert M.block_calls(one, target, min_calls, max_calls) == want


def test_one_call_is_timed_in_batches_until_one_lasts_long_enough(monkeypatch):
    """A short call is timed in batches of 1, 10, 100, ... (a lone call of a 1.5 us op reads several times
    its time); a long call costs one call; a call the clock hardly sees stops at the batch limit."""
    batches = []

    def fake(per_call, first):  # a lone call reads `first`, a batch `per_call` a call
        def time_block(fn, device, calls, stream=None, hold=False):
            batches.append(calls)
            return B.BlockTiming(first if calls == 1 else per_call * calls, calls)

        return time_block

    monkeypatch.setattr(M, "time_block", fake(1.5e-6, 12e-6))
    assert M.one_call_s(lambda: None, CPU) == pytest.approx(1.5e-6)
    assert batches == [1, 10, 100, 1000, 10_000]  # 1,000 calls: 1.5 ms < 2 ms; 10,000: 15 ms
    # and the block it sizes fills its target, where the lone call would have made it 1/8 as long
    assert M.plan_blocks(lambda: None, CPU, target_s=0.1) == M.BlockPlan(66_666)
    batches.clear()
    monkeypatch.setattr(M, "time_block", fake(0.3, 0.3))
    assert M.one_call_s(lambda: None, CPU) == 0.3 and batches == [1]
    batches.clear()
    monkeypatch.setattr(M, "time_block", fake(0.0, 0.0))
    assert M.one_call_s(lambda: None, CPU) == 0.0 and batches[-1] == M.SIZING_MAX_CALLS


def test_block_calls_refuses_bad_bounds():
    with pytest.raises(ValueError, match="min_calls"):
        M.block_calls(0.1, 0.05, min_calls=0)
    with pytest.raises(ValueError, match="min_calls"):
        M.block_calls(0.1, 0.05, min_calls=5, max_calls=2)


def test_calls_for_sizes_from_one_timed_call(monkeypatch):
    seen = []

    def fake_block(fn, device, calls, stream=None):
        seen.append(calls)
        return B.BlockTiming(0.002, calls)

    monkeypatch.setattr(M, "time_block", fake_block)
    assert M.calls_for(lambda: None, CPU, target_s=0.1) == 50
    assert seen == [1]


def test_measurement_keeps_every_block_and_gives_median_and_spread():
    m = M.Measurement((1.0, 2.0, 3.0, 4.0, 100.0), calls=10)
    assert m.median == 3.0
    assert M.spread_of(m.per_call) == pytest.approx(2 / 3)  # IQR (2 to 4) over the median
    assert M.spread_note(m.per_call) and M.spread_note((1.0, 1.02, 0.99)) is None
    assert m.rate(6.0) == 2.0
    both = m + M.Measurement((3.0,), calls=5)
    assert both.per_call == (1.0, 2.0, 3.0, 4.0, 100.0, 3.0) and both.median == 3.0
    assert M.spread_of((2.0,)) == 0.0
    with pytest.raises(ValueError, match="at least one block"):
        M.Measurement((), calls=1)


def test_measure_times_the_blocks_it_is_asked_for():
    calls = []
    m = M.measure(lambda: calls.append(1), CPU, calls=3, blocks=4)
    assert len(m.per_call) == 4 and m.calls == 3 and len(calls) == 12
    assert all(t > 0 for t in m.per_call)
    with pytest.raises(ValueError, match="blocks"):
        M.measure(lambda: None, CPU, calls=1, blocks=0)


def test_lanes_run_every_lane_at_once_and_time_each():
    barrier = threading.Barrier(2, timeout=60)  # BrokenBarrierError if the lanes ran one by one
    counts = [0, 0]

    def lane(i):
        def fn():
            counts[i] += 1
            if counts[i] == 1:
                barrier.wait()

        return fn

    t = L.Lanes([CPU, CPU]).run([lane(0), lane(1)], calls=5)
    assert counts == [5, 5]
    assert len(t.lanes) == 2 and all(s > 0 for s in t.lanes) and t.wall > 0


def test_lanes_name_the_device_that_failed():
    def bad():
        raise RuntimeError("out of memory")

    with pytest.raises(L.LaneError, match="on meta: RuntimeError: out of memory") as err:
        L.Lanes([CPU, "meta"]).run([lambda: None, bad])
    assert err.value.device == torch.device("meta")


def test_lanes_refuse_bad_arguments():
    with pytest.raises(ValueError, match="at least one"):
        L.Lanes([])
    with pytest.raises(ValueError, match="2 functions for 3 lanes"):
        L.Lanes([CPU, CPU, CPU]).run([lambda: None, lambda: None])
    with pytest.raises(ValueError, match="calls"):
        L.Lanes([CPU]).run([lambda: None], calls=0)
    with pytest.raises(ValueError, match="mix CUDA"):
        L.Lanes([CPU, "cuda:0"])


def test_lanes_synchronize_every_thread_lane(monkeypatch):
    synced = []
    monkeypatch.setattr(L, "synchronize", lambda d: synced.append(str(d)))
    L.Lanes([CPU, "meta"]).run([lambda: None, lambda: None])
    assert sorted(synced) == ["cpu", "meta"]


def test_cuda_lanes_make_their_streams_once(monkeypatch):
    """A stream per lane at construction, none per run (no CUDA needed: streams are faked)."""
    made = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: made.append(device) or object())
    lanes = L.Lanes(["cuda:0", "cuda:0"])
    assert lanes.cuda and len(lanes.streams) == 2 and made == [torch.device("cuda", 0)] * 2


def test_sequential_runs_each_function_in_turn():
    order = []
    seconds = L.Lanes([CPU, CPU]).sequential([lambda: order.append("a"), lambda: order.append("b")], calls=2)
    assert order == ["a", "a", "b", "b"] and seconds > 0


# --- Held stream (CUDA's spin kernel): the logic on fakes, the CUDA path where a GPU is ----------------------


def test_hold_is_refused_where_every_launch_waits_for_its_kernel(monkeypatch):
    """Under ``CUDA_LAUNCH_BLOCKING=1`` the spin kernel has run before the calls are queued: no block could be held,
    so the figures time plain blocks instead of failing after their tries."""
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    assert B.hold_reason(torch.device("cuda", 0)) is None
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    assert "CUDA_LAUNCH_BLOCKING=1" in B.hold_reason(torch.device("cuda", 0))


def test_hold_is_refused_on_the_cpu_with_a_reason(monkeypatch):
    reason = B.hold_reason(CPU)
    assert reason and "cpu" in reason and "dispatch" in reason
    with pytest.raises(ValueError, match="dispatch"):
        M.time_block(lambda: None, CPU, 3, hold=True)
    # a call far below HOLD_BELOW_S, which a GPU would hold: the CPU times it plainly
    monkeypatch.setattr(M, "time_block", lambda fn, device, calls, stream=None, hold=False: B.BlockTiming(1e-6, 1))
    assert M.plan_blocks(lambda: None, CPU) == M.BlockPlan(M.block_calls(1e-6, M.COPY_BLOCK_S), hold=False)


def test_hold_retries_with_longer_spins_until_the_spin_outlasts_the_queueing():
    tried = []

    def attempt(spin):
        tried.append(spin)
        queued = 0.010  # the host needs 10 ms to queue the block
        return B.HeldAttempt(held=spin > queued, queued_s=queued, seconds=0.004)

    assert B.hold_until_queued(attempt, calls=100, first_spin_s=0.002) == 0.004
    assert tried == [0.002, 0.020]  # doubled past what the queueing took, then held
    # twice what the held block's queueing took starts the next block of its kind: none runs whole for nothing
    tried.clear()
    spins = {}
    for _ in range(3):
        B.hold_until_queued(attempt, calls=100, first_spin_s=0.002, spins=spins, key=("cuda:0", 100))
    assert tried == [0.002, 0.020, 0.020, 0.020] and spins == {("cuda:0", 100): 0.020}
    # one slow queueing (the host busy for 80 ms) lengthens that block's spin, not every later one's
    queueing = iter([0.080] * 3 + [0.003] * 9)

    def busy_once(spin):
        tried.append(spin)
        queued = next(queueing)
        return B.HeldAttempt(held=spin > queued, queued_s=queued, seconds=0.004)

    tried.clear()
    spins = {}
    for _ in range(4):
        B.hold_until_queued(busy_once, calls=100, first_spin_s=0.002, spins=spins, key=("cuda:0", 100))
    assert tried == [0.002, 0.16, 0.16, 0.16, 0.006] and spins == {("cuda:0", 100): 0.006}


def test_hold_gives_up_with_a_reason_when_no_spin_outlasts_the_host():
    attempts = []

    def attempt(spin):
        attempts.append(spin)
        return B.HeldAttempt(held=False, queued_s=spin * 3, seconds=1.0)

    with pytest.raises(RuntimeError, match="could not hold the stream while 7 calls"):
        B.hold_until_queued(attempt, calls=7)
    assert len(attempts) == B.HOLD_ATTEMPTS and attempts == sorted(attempts)


def test_plan_blocks_holds_short_calls_on_a_gpu_and_caps_the_queue(monkeypatch):
    monkeypatch.setattr(M, "hold_reason", lambda device: None)  # pretend the device can be held
    monkeypatch.setattr(M, "time_block", lambda fn, device, calls, stream=None, hold=False: B.BlockTiming(5e-6, 1))
    assert M.plan_blocks(lambda: None, CPU, target_s=0.05) == M.BlockPlan(M.HELD_MAX_CALLS, hold=True)
    assert M.plan_blocks(lambda: None, CPU, target_s=0.05, may_hold=False) == M.BlockPlan(10_000)
    monkeypatch.setattr(M, "time_block", lambda fn, device, calls, stream=None, hold=False: B.BlockTiming(2e-3, 1))
    assert M.plan_blocks(lambda: None, CPU, target_s=0.05) == M.BlockPlan(25)  # long calls: dispatch is hidden


def test_measure_takes_a_plan_and_says_whether_it_held(monkeypatch):
    seen = []

    def fake_block(fn, device, calls, stream=None, hold=False):
        seen.append((calls, hold))
        return B.BlockTiming(1e-3 * calls, calls)

    monkeypatch.setattr(M, "time_block", fake_block)
    m = M.measure(lambda: None, CPU, M.BlockPlan(8, hold=True), blocks=3)
    assert seen == [(8, True)] * 3 and m.held and m.calls == 8 and m.median == pytest.approx(1e-3)
    assert not M.measure(lambda: None, CPU, 4, blocks=1).held


@pytest.mark.cuda
def test_held_block_times_device_work_on_a_gpu():
    dev = torch.device("cuda", 0)
    x = torch.ones(1000, device=dev)
    out = torch.empty_like(x)
    M.warm_up(lambda: torch.add(x, x, out=out), dev)
    t = M.time_block(lambda: torch.add(x, x, out=out), dev, 64, hold=True)
    assert t.calls == 64 and t.seconds > 0
    assert out.eq(2).all()


class _FakeClock:
    """A call "takes" ``call_s`` by construction: the test never reads a live timing."""

    def __init__(self, call_s: float) -> None:
        self.now, self.call_s, self.calls = 0.0, call_s, 0

    def __call__(self) -> None:
        self.calls += 1
        self.now += self.call_s


def test_warm_up_stops_after_one_call_that_took_long_enough(monkeypatch):
    cpu = torch.device("cpu")
    for call_s, want in ((1.0, 1), (0.001, 3)):
        fn = _FakeClock(call_s)
        monkeypatch.setattr(M.time, "perf_counter", lambda fn=fn: fn.now)
        M.warm_up(fn, cpu, repeats=3, enough_s=0.1)
        assert fn.calls == want
    fn = _FakeClock(1.0)
    M.warm_up(fn, cpu, repeats=2)  # without enough_s: every repeat
    assert fn.calls == 2


def test_plan_blocks_spends_no_call_when_one_warm_call_is_known():
    fn = _FakeClock(0.5)
    assert M.plan_blocks(fn, torch.device("cpu"), target_s=0.1, one_s=0.5) == M.BlockPlan(1)
    assert M.plan_blocks(fn, torch.device("cpu"), target_s=0.1, one_s=0.01) == M.BlockPlan(10)
    assert fn.calls == 0


def test_a_large_draw_is_kept_for_the_next_workload_of_its_size_and_each_caller_owns_its_copy(monkeypatch):
    """MatmulSquare's dtypes and ParallelMatmul's lanes draw the same seeded normals: a large draw converted or moved
    is made once and kept (the newest, up to a cap); the values are the draw's whatever the cache holds, writing
    into what one caller got changes nothing another gets, and a CPU float32 tensor is drawn afresh as before."""
    from devbench.engine import measure as M

    monkeypatch.setattr(M, "_DRAWN", {})
    monkeypatch.setattr(M, "DRAWN_MIN_BYTES", 1024)
    fresh = torch.randn((64, 64), generator=torch.Generator().manual_seed(7), dtype=torch.float32)
    plain = M.randn((64, 64), seed=7)  # a CPU float32 tensor: drawn, not kept
    assert torch.equal(plain, fresh) and not M._DRAWN
    half = M.randn((64, 64), seed=7, dtype=torch.bfloat16)
    assert torch.equal(half, fresh.to(torch.bfloat16)) and list(M._DRAWN) == [((64, 64), 7)]
    half.mul_(0)  # the caller's own tensor
    assert torch.equal(M.randn((64, 64), seed=7, dtype=torch.float16), fresh.to(torch.float16))
    assert torch.equal(M.randn((64, 64), seed=7, dtype=torch.float64), fresh.double())
    M.randn((8, 8), seed=1, dtype=torch.bfloat16)  # under the size kept: made again each time
    assert list(M._DRAWN) == [((64, 64), 7)]
    monkeypatch.setattr(M, "_drawn_cap", lambda: 64 * 64 * 4 * 2)  # room for two: the oldest goes
    for seed in (1, 2, 3):
        M.randn((64, 64), seed=seed, dtype=torch.bfloat16)
    assert list(M._DRAWN) == [((64, 64), 2), ((64, 64), 3)]
    M.randn((128, 128), seed=4, dtype=torch.bfloat16)  # larger than the cap alone: not kept
    assert list(M._DRAWN) == [((64, 64), 2), ((64, 64), 3)]
    unconverted = M.randn((64, 64), seed=3, dtype=None)  # no conversion asked: a copy all the same
    assert all(unconverted.data_ptr() != d.data_ptr() for d in M._DRAWN.values())
    M.drop_draws()
    assert not M._DRAWN and 0 < M._drawn_cap() <= M.DRAWN_BYTES


def test_the_suites_whole_number_switches_name_a_bad_value(monkeypatch):
    """``whole_env`` reads DEVBENCH_BLOCKS, DEVBENCH_CPU_CACHE and DEVBENCH_SEARCH_BYTES: unset or empty is None (the
    caller's default), a whole number >= 1 is itself, anything else names the variable and what it should hold."""
    monkeypatch.delenv(M.BLOCKS_ENV, raising=False)
    assert M.whole_env(M.BLOCKS_ENV, "blocks") is None and M.blocks_per_figure(7) == 7
    monkeypatch.setenv(M.BLOCKS_ENV, "")
    assert M.blocks_per_figure(7) == 7
    monkeypatch.setenv(M.BLOCKS_ENV, "3")
    assert M.blocks_per_figure(7) == 3
    for bad in ("0", "-2", "1.5", "two"):
        monkeypatch.setenv(M.BLOCKS_ENV, bad)
        with pytest.raises(ValueError, match=f"DEVBENCH_BLOCKS='{bad}': expected the blocks of a figure"):
            M.blocks_per_figure()


def test_a_held_blocks_spin_is_sized_by_the_clock_it_last_ran_at(monkeypatch):
    """The spin counts SM cycles: timed once at a low clock, a spin of the same cycles is shorter at boost. Each held
    block's own spin (the event before it to the block's start) gives the rate the next spin is sized by. A fake
    CUDA stream whose spin runs at 2e9 cycles/s stands in for the GPU; the process first timed it at 1e9."""
    import contextlib

    import devbench.engine.blocks as B

    gpu = {"now": 0.0}
    rate = 2e9

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            self.t = gpu["now"]

        def query(self):
            return False  # the spin still runs when the last call is queued: the hold held

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    def sleep(cycles):
        gpu["now"] += cycles / rate

    def work():
        gpu["now"] += 1e-6

    for name, value in (("Event", Event), ("_sleep", sleep), ("device", lambda d: contextlib.nullcontext()),
                        ("stream", lambda s: contextlib.nullcontext()), ("current_stream", lambda d=None: object())):
        monkeypatch.setattr(B.torch.cuda, name, value, raising=False)
    device = torch.device("cuda", 0)
    monkeypatch.setitem(B._SPIN_CYCLES_PER_S, device, 1e9)
    monkeypatch.setattr(B, "_HELD_SPINS", {})
    timing = B._held_block(work, device, 10, None)
    assert timing.seconds == pytest.approx(10e-6) and timing.calls == 10
    assert B._SPIN_CYCLES_PER_S[device] == pytest.approx(rate)
