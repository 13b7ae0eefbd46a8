"""The measuring engine: seeded inputs, CPU threads, warm-up, block timing, and work run side by side.

Everything devbench times goes through here: the asv benchmarks, the workloads that
time pieces of their own work (lanes, overlap), ``devbench validate`` and the collectives.
No asv, and nothing touches CUDA at import time (docs/design.md, rules 2 and 3).

How a figure is timed (docs/design.md, "How a figure is timed"):

* ``calls_for`` sizes a block: enough back-to-back calls to fill ``target_s``, so a
  CUDA sync or a clock read (about 10 us) stays far under 1% of it; a call that alone
  is longer than the target is a block of its own.
* ``time_block`` times one block: between two CUDA events recorded on the stream that
  runs the work, or between two reads of a monotonic clock on the CPU.
* ``time_block(..., hold=True)`` (CUDA) first queues a spin kernel, then the block,
  so the GPU starts the block only once every call is queued: the events time the
  device's work, not the host's dispatch (nvbandwidth's method). ``plan_blocks`` asks
  for it when one call is shorter than ``HOLD_BELOW_S``.
* ``measure`` times several blocks and keeps every one in a ``Measurement``, which
  gives the median (the figure); ``spread_of`` the spread, which ``with_samples`` flags.
* ``devbench.engine.lanes`` (the engine's other half) runs several callables at once, one per lane
  (a CUDA stream made once, or a CPU thread), and times the whole and each lane.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from devbench.engine import precision
from devbench.engine.devices import synchronize

#: Seed for every input tensor: the same inputs on every machine and run.
SEED = 20260101

#: Environment variable that overrides the CPU thread count benchmarks pin.
THREADS_ENV = "DEVBENCH_THREADS"

#: Environment variable that overrides the blocks per figure (``devbench compare`` sets it:
#: there the rounds carry the evidence, and fewer blocks per process keep its cost down).
BLOCKS_ENV = "DEVBENCH_BLOCKS"


def blocks_per_figure(default: int = 11) -> int:
    """``default``, or the blocks per figure ``DEVBENCH_BLOCKS`` asks for (a whole number >= 1)."""
    text = os.environ.get(BLOCKS_ENV, "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{BLOCKS_ENV}={text!r}: expected a whole number of blocks >= 1")
    return int(text)


#: Blocks per figure: its median is the figure (11, or DEVBENCH_BLOCKS).
SAMPLES = blocks_per_figure()

#: Block lengths (``calls_for`` targets) of the suite's throughput figures.
MATMUL_BLOCK_S = 0.1
COPY_BLOCK_S = 0.05

#: Most calls in one block: only a guard against a clock that saw nothing (a no-op call must not
#: make a block endless), high enough that a 1 us call still fills its block. With the sizing of
#: ``one_call_s`` it is what lets a short call's blocks last their target (docs/design.md, "Block
#: sizing"): on the 2-vCPU VM the host slows a process for 50-100 ms at a time, and blocks of a few
#: milliseconds let one such stretch set a whole process's figure.
MAX_CALLS = 1_000_000

#: Block sizing times a short call in batches until one lasts this long (``one_call_s``), and
#: stops at this many calls (a no-op that the clock hardly sees).
SIZING_S = 2e-3
SIZING_MAX_CALLS = 100_000

#: torch.utils.benchmark warns when IQR / median passes this; so does devbench (``spread_note``, printed by
#: ``suite.with_samples`` beside the figure: asv shows it under ``--show-stderr``, as ``make bench`` runs it).
SPREAD_WARN = 0.1


def spread_of(values: Sequence[float]) -> float:
    """IQR / median of ``values`` (inclusive quartiles; 0 for one value, inf for a median of 0)."""
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    mid = statistics.median(values)
    return (q[2] - q[0]) / mid if mid > 0 else float("inf")


def spread_note(values: Sequence[float], warn: float = SPREAD_WARN) -> str | None:
    """What to tell a user whose figure's samples disagree by more than ``warn`` (IQR / median), or None."""
    spread = spread_of(values)
    if spread <= warn:
        return None
    return (f"the samples' interquartile range is {spread:.0%} of their median (over {warn:.0%}, where "
            "torch.utils.benchmark warns too): the host was busy or the work varies; read the figure with care")

#: On CUDA, a call shorter than this is timed with the stream held (``time_block``'s
#: ``hold``): launching a kernel or copy costs the host 5-10 us, so below ~100 us
#: back-to-back calls measure how fast Python dispatches, not what the GPU does.
HOLD_BELOW_S = 100e-6

#: Most calls in one held block: CUDA queues about 1,024 launches per stream; past that
#: the host waits for the spinning GPU and the hold is lost.
HELD_MAX_CALLS = 256

#: Attempts at a held block, the spin doubling each time, before giving up.
HOLD_ATTEMPTS = 6


# --- Inputs and threads ----------------------------------------------------------------------------------


def randn(
    shape: Sequence[int] | int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = SEED,
) -> torch.Tensor:
    """Seeded standard-normal tensor, made on the CPU (same values on every device)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    t = torch.randn(shape, generator=gen, dtype=torch.float32)
    return t.to(device=device, dtype=dtype)


def default_threads() -> int:
    """``$DEVBENCH_THREADS``, or the number of CPUs this process may run on."""
    env = os.environ.get(THREADS_ENV)
    if env:
        try:
            return int(env)
        except ValueError:
            raise ValueError(f"{THREADS_ENV} must be an integer, got {env!r}") from None
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pin_threads(threads: int | None = None) -> int:
    """Fix torch's intra-op CPU thread count (default: ``default_threads()``) and return it.

    A run is then comparable with the next one on the same machine, whatever torch
    guessed. ``threads_pinned`` does the same for a block of code and restores the count.
    """
    if threads is None:
        threads = default_threads()
    if threads < 1:
        raise ValueError(f"thread count must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    return threads


@contextlib.contextmanager
def threads_pinned(threads: int | None = None) -> Iterator[int]:
    """``pin_threads`` inside the block; the previous count is restored after it."""
    before = torch.get_num_threads()
    try:
        yield pin_threads(threads)
    finally:
        torch.set_num_threads(before)


def warm_up(fn: Callable[[], object], device: torch.device, repeats: int = 3, enough_s: float | None = None) -> None:
    """Run ``fn`` a few times and wait for it: context, handles, allocator, autotuning.

    ``enough_s``: stop after the first call when it alone took that long (a 4096 matmul on two
    CPU cores, about a second): one such call has warmed what the next will use.
    """
    if enough_s is not None and repeats > 0:
        start = time.perf_counter()
        fn()
        synchronize(device)
        if time.perf_counter() - start >= enough_s:
            return
        repeats -= 1
    for _ in range(repeats):
        fn()
    synchronize(device)


# --- One block of calls ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockTiming:
    """Seconds for ``calls`` calls of one function, timed as one block."""

    seconds: float
    calls: int

    @property
    def per_call(self) -> float:
        return self.seconds / self.calls


def time_block(
    fn: Callable[[], object],
    device: torch.device,
    calls: int,
    stream: torch.cuda.Stream | None = None,
    hold: bool = False,
) -> BlockTiming:
    """Time ``calls`` back-to-back calls of ``fn`` on ``device`` as one block.

    On a GPU the calls run on ``stream`` (default: the device's current stream) and the
    block lies between two CUDA events recorded on that same stream, so launch gaps
    count but the host's sync latency is paid once, not per call. With ``hold`` a spin
    kernel occupies the stream while the calls are queued, so no launch gap counts: the
    block is the device's own time (``hold_reason`` says where that cannot be done). On
    the CPU (or the meta device) a monotonic clock brackets the loop.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    if hold:
        reason = hold_reason(device)
        if reason:
            raise ValueError(reason)
        if calls > HELD_MAX_CALLS:
            raise ValueError(f"a held block queues at most {HELD_MAX_CALLS} calls, got {calls}")
        return _held_block(fn, device, calls, stream)
    if device.type == "cuda":
        with torch.cuda.device(device):
            stream = stream if stream is not None else torch.cuda.current_stream(device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record(stream)
                for _ in range(calls):
                    fn()
                end.record(stream)
            end.synchronize()
            return BlockTiming(start.elapsed_time(end) / 1e3, calls)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return BlockTiming(time.perf_counter() - t0, calls)


# --- Holding a CUDA stream while a block is queued ----------------------------------------------------


def hold_reason(device: torch.device) -> str | None:
    """Why a block on ``device`` cannot be timed with its stream held, or ``None``."""
    if device.type != "cuda":
        return (
            f"{device.type}: a held stream separates a GPU's work from the host's dispatch; "
            "on the CPU a call's time is its work, dispatch included"
        )
    if not hasattr(torch.cuda, "_sleep"):
        return f"torch {torch.__version__} has no torch.cuda._sleep spin kernel"
    return None


@dataclass(frozen=True)
class HeldAttempt:
    """One try at a held block: did the spin outlast the queueing, and the times seen."""

    held: bool
    queued_s: float
    seconds: float


#: First spin, before anything is known about the host's dispatch speed.
FIRST_SPIN_S = 2e-3


def hold_until_queued(attempt: Callable[[float], HeldAttempt], calls: int, first_spin_s: float = FIRST_SPIN_S) -> float:
    """Seconds of the block, from ``attempt(spin_s)`` tried with longer spins until the hold held.

    A hold holds when the spin kernel was still running after the last call was queued
    (its end event not yet reached). Otherwise the GPU caught up with the host and the
    block timed dispatch: the spin is made twice as long as both the last spin and the
    queueing seen, and the block is timed again. Raises ``RuntimeError`` after
    ``HOLD_ATTEMPTS`` tries (a host so slow or busy that no spin outlasts it).
    """
    spin = first_spin_s
    for _ in range(HOLD_ATTEMPTS):
        got = attempt(spin)
        if got.held:
            return got.seconds
        spin = 2 * max(spin, got.queued_s)
    raise RuntimeError(
        f"could not hold the stream while {calls} calls were queued ({HOLD_ATTEMPTS} tries, last spin {spin / 2:.3g} s)"
    )


_SPIN_CYCLES_PER_S: dict[torch.device, float] = {}


def _spin_cycles_per_s(device: torch.device) -> float:
    """Clock cycles ``torch.cuda._sleep`` spins per second on ``device`` (timed once)."""
    if device not in _SPIN_CYCLES_PER_S:
        cycles = 2_000_000
        with torch.cuda.device(device):
            torch.cuda._sleep(cycles)  # the first launch loads the kernel
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
        _SPIN_CYCLES_PER_S[device] = cycles / max(start.elapsed_time(end) / 1e3, 1e-6)
    return _SPIN_CYCLES_PER_S[device]


def _held_block(
    fn: Callable[[], object], device: torch.device, calls: int, stream: torch.cuda.Stream | None
) -> BlockTiming:
    cycles_per_s = _spin_cycles_per_s(device)

    def attempt(spin_s: float) -> HeldAttempt:
        with torch.cuda.device(device):
            s = stream if stream is not None else torch.cuda.current_stream(device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(s):
                torch.cuda._sleep(int(spin_s * cycles_per_s))
                start.record(s)
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                end.record(s)
                queued_s = time.perf_counter() - t0
                held = not start.query()  # the spin still runs: nothing of the block has started
            end.synchronize()
            return HeldAttempt(held, queued_s, start.elapsed_time(end) / 1e3)

    return BlockTiming(hold_until_queued(attempt, calls), calls)


def one_call_s(fn: Callable[[], object], device: torch.device, at_least_s: float = SIZING_S) -> float:
    """Seconds per call of ``fn`` (warm it first): what block sizes and burst lengths start from.

    Calls are timed in batches of 1, 10, 100, ... until a batch lasts ``at_least_s`` (timeit's
    autorange), and its time per call is the answer. One microsecond-scale call timed alone reads
    3-14x its time (the clock read, a cold cache line, Python's call, measured on the 2-vCPU VM), which
    made the blocks of a 1.5 us product or a 4 KiB copy a third to a fourteenth of their target.
    A call that lasts ``at_least_s`` alone costs no more than before: one call.
    """
    calls = 1
    while True:
        timing = time_block(fn, device, calls)
        if timing.seconds >= at_least_s or calls >= SIZING_MAX_CALLS:
            return timing.per_call
        calls *= 10


def block_calls(one_call_s: float, target_s: float, min_calls: int = 1, max_calls: int = MAX_CALLS) -> int:
    """Calls that fill about ``target_s`` when one call takes ``one_call_s`` (at least ``min_calls``).

    The one sizing rule, also for collectives, where every rank first agrees on
    ``one_call_s``. A call longer than the target makes a block of its own: a second
    call would double the time, not the accuracy.
    """
    if min_calls < 1 or max_calls < min_calls:
        raise ValueError(f"need 1 <= min_calls <= max_calls, got {min_calls} and {max_calls}")
    if one_call_s <= 0:
        return max_calls
    return int(max(min_calls, min(max_calls, target_s / one_call_s)))


def calls_for(
    fn: Callable[[], object],
    device: torch.device,
    target_s: float = COPY_BLOCK_S,
    max_calls: int = MAX_CALLS,
    min_calls: int = 1,
) -> int:
    """How many calls of ``fn`` fill about ``target_s`` seconds (``block_calls`` on ``one_call_s``).

    Call it after warm-up: a cold first call (context, handles, workspaces) would make
    the blocks far too short.
    """
    return block_calls(one_call_s(fn, device), target_s, min_calls, max_calls)


@dataclass(frozen=True)
class BlockPlan:
    """How to time a figure's blocks: calls per block, and whether the stream is held."""

    calls: int
    hold: bool = False


def plan_blocks(
    fn: Callable[[], object],
    device: torch.device,
    target_s: float = COPY_BLOCK_S,
    min_calls: int = 1,
    max_calls: int = MAX_CALLS,
    may_hold: bool = True,
    one_s: float | None = None,
) -> BlockPlan:
    """``calls_for``, and on CUDA a held stream when one call is shorter than ``HOLD_BELOW_S``.

    A held block queues at most ``HELD_MAX_CALLS`` calls; a short call that would fill
    the target with more is timed in shorter blocks (still thousands of times the
    events' 0.5 us resolution). ``may_hold=False`` for work the host waits for (a
    blocking or pageable copy): queued behind a spin it would wait for the spin itself.
    Call it after warm-up. ``one_s``: one warm call's seconds when already known (a check's
    warm call, ``Matmul.warm_call_s``); then no call is spent timing it.
    """
    one = one_call_s(fn, device) if one_s is None else one_s
    calls = block_calls(one, target_s, min_calls, max_calls)
    if may_hold and hold_reason(device) is None and one < HOLD_BELOW_S and min_calls <= HELD_MAX_CALLS:
        return BlockPlan(min(calls, HELD_MAX_CALLS), hold=True)
    return BlockPlan(calls)


# --- Several blocks: a Measurement -----------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """Seconds per call of every block timed for one figure.

    The figure is the median; the spread (inter-quartile range over the median) says how
    much the blocks disagreed. Rates (GB/s, TFLOP/s) are ``work / median``.
    """

    per_call: tuple[float, ...]
    calls: int
    held: bool = False

    def __post_init__(self) -> None:
        if not self.per_call:
            raise ValueError("a Measurement needs at least one block")

    @property
    def median(self) -> float:
        return statistics.median(self.per_call)

    def rate(self, work: float) -> float:
        """``work`` per second at the median (work: bytes, FLOP, ...)."""
        return work / self.median

    def rates(self, work: float) -> tuple[float, ...]:
        """``work`` per second in every block: the samples of a throughput figure."""
        return tuple(work / t for t in self.per_call)

    def __add__(self, other: Measurement) -> Measurement:
        """The blocks of both (measurements of one figure taken in rounds)."""
        return Measurement(self.per_call + other.per_call, max(self.calls, other.calls), self.held and other.held)


def measure(
    fn: Callable[[], object],
    device: torch.device,
    calls: int | BlockPlan,
    blocks: int | None = None,
    stream: torch.cuda.Stream | None = None,
) -> Measurement:
    """``blocks`` blocks of ``calls`` calls each (nvbandwidth-style: the median is the figure).

    ``calls`` is a number, or a ``BlockPlan`` (``plan_blocks``), which may hold the stream. ``blocks``
    unset: ``DEVBENCH_BLOCKS`` where set, else blocks until asv's 99% interval of their median is within
    0.5% of it or the benchmark's cap has passed (``devbench.engine.precision``: nvbench's noise-based stopping).
    """
    plan = calls if isinstance(calls, BlockPlan) else BlockPlan(calls)
    return Measurement(_blocks(lambda: time_block(fn, device, plan.calls, stream, hold=plan.hold).per_call,
                               blocks), plan.calls, plan.hold)  # fmt: skip


def _blocks(take: Callable[[], float], blocks: int | None) -> tuple[float, ...]:
    """``blocks`` values of ``take()``, or (None) ``DEVBENCH_BLOCKS`` of them, or as many as precision asks."""
    if blocks is None and os.environ.get(BLOCKS_ENV):
        blocks = blocks_per_figure()
    if blocks is None:
        return precision.sample(take).values
    if blocks < 1:
        raise ValueError(f"blocks must be >= 1, got {blocks}")
    return tuple(take() for _ in range(blocks))


def measure_synced(fn: Callable[[], object], sync: Callable[[], object], calls: int,
                   blocks: int | None = None) -> Measurement:  # fmt: skip
    """Seconds per call of ``fn(); sync()`` on the host's clock, as asv times a ``time_`` benchmark (each call
    waited for: launch, work and the wait), in blocks of ``calls`` sampled as ``measure``'s."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
            sync()
        return (time.perf_counter() - t0) / calls

    return Measurement(_blocks(block, blocks), calls)


def median_block(fn: Callable[[], object], device: torch.device, calls: int, samples: int = SAMPLES) -> float:
    """Median seconds per call over ``samples`` blocks (``measure(...).median``)."""
    return measure(fn, device, calls, samples).median


# --- Burst and sustained ---------------------------------------------------------------------------------

#: Burst: the device idles this long, then a short run of small blocks (mamf-finder's "burst").
BURST_IDLE_S = 1.0
BURST_S = 0.25
#: Sustained: back-to-back work for this long before the blocks that count, then SUSTAINED_S of
#: blocks: the clocks and power a long training step settles at (power capping, heat).
SUSTAIN_FIRST_S = 5.0
SUSTAINED_S = 2.0


def run_for(fn: Callable[[], object], device: torch.device, seconds: float, calls: int) -> float:
    """Keep ``device`` busy with blocks of ``calls`` calls for about ``seconds``; return the seconds run."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        time_block(fn, device, calls)
    return time.perf_counter() - t0


def burst(
    fn: Callable[[], object],
    device: torch.device,
    one_call_s: float,
    idle_s: float = BURST_IDLE_S,
    burst_s: float = BURST_S,
    blocks: int = 5,
    sampler: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> tuple[Measurement, list]:
    """``fn`` fresh from idle: ``idle_s`` of nothing, then ``blocks`` blocks lasting about ``burst_s`` in all.

    ``one_call_s`` is one warm call's time. ``sampler()`` (``gpustate.Sampler``) is entered
    around the blocks only; its ``summary()`` is returned beside the measurement.
    """
    synchronize(device)
    time.sleep(idle_s)
    return _sampled(fn, device, block_calls(one_call_s, burst_s / blocks), blocks, sampler)


#: Brief: mamf-finder's figure (its table of achievable TFLOP/s): a short warm-up, then the mean of a short
#: run of back-to-back calls, with no idle before it.
BRIEF_WARM_S = 0.05
BRIEF_S = 0.1


def brief(
    fn: Callable[[], object],
    device: torch.device,
    one_call_s: float,
    warm_s: float = BRIEF_WARM_S,
    brief_s: float = BRIEF_S,
    blocks: int = 5,
    sampler: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> tuple[Measurement, list]:
    """``fn`` as mamf-finder times a shape: ``warm_s`` of calls, then ``blocks`` blocks over about ``brief_s``
    right after (no idle, no long load before: the clocks of a short job on a warm GPU)."""
    run_for(fn, device, warm_s, block_calls(one_call_s, warm_s))
    return _sampled(fn, device, block_calls(one_call_s, brief_s / blocks), blocks, sampler)


def sustained(
    fn: Callable[[], object],
    device: torch.device,
    one_call_s: float,
    first_s: float = SUSTAIN_FIRST_S,
    sustained_s: float = SUSTAINED_S,
    blocks: int = 5,
    sampler: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> tuple[Measurement, list]:
    """``fn`` under load: ``first_s`` of back-to-back work, then ``blocks`` blocks over about ``sustained_s``."""
    calls = block_calls(one_call_s, sustained_s / blocks)
    run_for(fn, device, first_s, calls)
    return _sampled(fn, device, calls, blocks, sampler)


def _sampled(fn, device, calls, blocks, sampler) -> tuple[Measurement, list]:
    if sampler is None:
        return measure(fn, device, calls, blocks), []
    with sampler() as s:
        m = measure(fn, device, calls, blocks)
    return m, s.summary()
