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
from pathlib import Path

import torch

from devbench.engine import precision
from devbench.engine.blocks import HELD_MAX_CALLS, HOLD_BELOW_S, hold_reason, time_block
from devbench.engine.devices import synchronize

#: Seed for every input tensor: the same inputs in every run; on the host, on every machine too (a GPU's own
#: generator gives its values for the seed on every GPU of its model: ``Matmul.drawn_on_device``).
SEED = 20260101

#: Environment variable that overrides the CPU thread count benchmarks pin.
THREADS_ENV = "DEVBENCH_THREADS"

#: Environment variable that overrides the blocks per figure (``devbench compare`` sets it:
#: there the rounds carry the evidence, and fewer blocks per process keep its cost down).
BLOCKS_ENV = "DEVBENCH_BLOCKS"


def whole_env(name: str, what: str) -> int | None:
    """The whole number >= 1 the environment variable ``name`` holds, None where it is unset or empty; any other
    value raises ``ValueError`` naming it and ``what`` it should be (the suite's make-test and compare switches)."""
    text = os.environ.get(name, "")
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}={text!r}: expected {what}, a whole number >= 1")
    return int(text)


def blocks_per_figure(default: int = 11) -> int:
    """``default``, or the blocks per figure ``DEVBENCH_BLOCKS`` asks for (a whole number >= 1)."""
    asked = whole_env(BLOCKS_ENV, "the blocks of a figure")
    return default if asked is None else asked


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


# --- Inputs and threads ----------------------------------------------------------------------------------


#: Seeded draws kept for the next workload of the same size and seed that converts or moves them (a CPU product
#: of another dtype, the norms' and the model's inputs on a GPU; a GPU product draws its own there:
#: ``Matmul.drawn_on_device``). The newest are kept, up to this many bytes, at most an eighth of the memory the
#: process may use; draws under ``DRAWN_MIN_BYTES`` are made again (they take microseconds). A float32 tensor on the
#: CPU is drawn afresh: a copy of a kept draw would place its pages as the copy's threads touch them, not as the
#: draw's one thread did, and a CPU product's figure could move with that.
DRAWN_BYTES = 3 << 29
DRAWN_MIN_BYTES = 4 << 20
_DRAWN: dict[tuple[tuple[int, ...], int], torch.Tensor] = {}


def _drawn_cap() -> int:
    """``DRAWN_BYTES``, at most an eighth of the memory this process may use (its cgroup's limit, else the RAM)."""
    limits = [DRAWN_BYTES * 8]
    with contextlib.suppress(ValueError, OSError, AttributeError):
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(ValueError, OSError):
        limits.append(int(Path("/sys/fs/cgroup/memory.max").read_text().strip()))  # "max" where unlimited: skipped
    return min(limits) // 8


def drop_draws() -> None:
    """Forget the kept draws (``randn``): a measuring process idle for a while gives their memory back."""
    _DRAWN.clear()


def randn(
    shape: Sequence[int] | int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = SEED,
) -> torch.Tensor:
    """Seeded standard-normal tensor, made on the CPU (same values on every device); a large draw is kept for the
    next call with the same shape and seed that converts or moves it (``DRAWN_BYTES``). The caller owns what it
    gets."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    fresh = dtype == torch.float32 and torch.device(device).type == "cpu"
    key = (shape, seed)
    t = None if fresh else _DRAWN.pop(key, None)
    if t is None:
        gen = torch.Generator().manual_seed(seed)
        t = torch.randn(shape, generator=gen, dtype=torch.float32)
    if fresh:
        return t
    cap = _drawn_cap()
    if DRAWN_MIN_BYTES <= t.nbytes <= cap:  # kept, the newest last; the oldest go past the cap
        _DRAWN[key] = t
        while sum(d.nbytes for d in _DRAWN.values()) > cap:
            del _DRAWN[next(iter(_DRAWN))]
    out = t.to(device=device, dtype=dtype)  # a conversion or a copy to the device
    return out.clone() if out is t else out  # never the kept tensor itself (a dtype of None keeps float32)


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


def sampled(take: Callable[[], float], blocks: int | None = None) -> tuple[float, ...]:
    """Samples of ``take()`` as the engine takes its blocks (``blocks``, else ``DEVBENCH_BLOCKS``, else to asv's
    0.5% or the benchmark's cap), for a sample that is not one timed block: a pair of runs."""
    return _blocks(take, blocks)


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


def measure_clocks(fn: Callable[[], object], device: torch.device, calls: int,
                   blocks: int | None = None) -> tuple[Measurement, Measurement]:  # fmt: skip
    """Blocks of ``calls`` calls of ``fn``, each block read on the host's clock (launch to the end's sync) and on
    ``device``'s (``time_block``): (host, device) seconds per call, one set of blocks, sampled as ``measure``'s
    until both are precise. For a call that returns with its work done (a blocking host<->device copy: CUDA
    synchronizes the stream inside it), the host's reading is ``measure_synced``'s figure and the device's is
    ``measure``'s, with no sync of their own between the calls to tell them apart."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")

    def block() -> tuple[float, float]:
        t0 = time.perf_counter()
        on_device = time_block(fn, device, calls).per_call
        return (time.perf_counter() - t0) / calls, on_device

    host, dev = zip(*_blocks(block, blocks), strict=True)
    return Measurement(tuple(host), calls), Measurement(tuple(dev), calls)


def median_block(fn: Callable[[], object], device: torch.device, calls: int, samples: int = SAMPLES) -> float:
    """Median seconds per call over ``samples`` blocks (``measure(...).median``)."""
    return measure(fn, device, calls, samples).median
