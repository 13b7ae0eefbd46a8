"""One block of calls timed: by CUDA events on a GPU (with the calls held behind a spin kernel until they are
all queued, where a call is shorter than its launch), by the host clock elsewhere."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

#: On CUDA, a call shorter than this is timed with the stream held (``time_block``'s
#: ``hold``): launching a kernel or copy costs the host 5-10 us, so below ~100 us
#: back-to-back calls measure how fast Python dispatches, not what the GPU does.
HOLD_BELOW_S = 100e-6

#: Most calls in one held block: CUDA queues about 1,024 launches per stream; past that
#: the host waits for the spinning GPU and the hold is lost.
HELD_MAX_CALLS = 256

#: Attempts at a held block, the spin doubling each time, before giving up.
HOLD_ATTEMPTS = 6


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


def hold_reason(device: torch.device) -> str | None:
    """Why a block on ``device`` cannot be timed with its stream held, or ``None``."""
    if device.type != "cuda":
        return (
            f"{device.type}: a held stream separates a GPU's work from the host's dispatch; "
            "on the CPU a call's time is its work, dispatch included"
        )
    if not hasattr(torch.cuda, "_sleep"):
        return f"torch {torch.__version__} has no torch.cuda._sleep spin kernel"
    if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1":
        return "CUDA_LAUNCH_BLOCKING=1: every launch, the spin's too, returns only when its kernel has run"
    return None


@dataclass(frozen=True)
class HeldAttempt:
    """One try at a held block: did the spin outlast the queueing, and the times seen."""

    held: bool
    queued_s: float
    seconds: float


#: First spin, before anything is known about the host's dispatch speed.
FIRST_SPIN_S = 2e-3


def hold_until_queued(attempt: Callable[[float], HeldAttempt], calls: int, first_spin_s: float = FIRST_SPIN_S,
                      spins: dict | None = None, key: object = None) -> float:  # fmt: skip
    """Seconds of the block, from ``attempt(spin_s)`` tried with longer spins until the hold held.

    A hold holds when the spin kernel was still running after the last call was queued
    (its end event not yet reached). Otherwise the GPU caught up with the host and the
    block timed dispatch: the spin is made twice as long as both the last spin and the
    queueing seen, and the block is timed again. Raises ``RuntimeError`` after
    ``HOLD_ATTEMPTS`` tries (a host so slow or busy that no spin outlasts it). ``spins``: for each ``key`` (a
    device and a block's calls), twice what the last held block's queueing took (at least ``first_spin_s``), where
    the next block of that kind starts: a block that did not hold ran whole for nothing (256 calls take the host
    2-4 ms to queue, past the first spin's 2 ms), and one slow queueing does not lengthen every later spin.
    """
    spin = spins.get(key, first_spin_s) if spins is not None else first_spin_s
    for _ in range(HOLD_ATTEMPTS):
        got = attempt(spin)
        if got.held:
            if spins is not None:  # what this block's queueing asked, not the spin: a hiccup's long spin goes
                spins[key] = max(first_spin_s, 2 * got.queued_s)
            return got.seconds
        spin = 2 * max(spin, got.queued_s)
    raise RuntimeError(
        f"could not hold the stream while {calls} calls were queued ({HOLD_ATTEMPTS} tries, last spin {spin / 2:.3g} s)"
    )


#: a device's spin-kernel cycles per second: timed once per process, then taken from each held block's own spin
#: (the spin counts SM clock cycles, and the clock a long-lived process first timed may not be the clock it runs at)
_SPIN_CYCLES_PER_S: dict[torch.device, float] = {}
#: (device, calls) -> where the next held block of that many calls there starts its spin: twice what the last held
#: one took to queue (``hold_until_queued``)
_HELD_SPINS: dict[tuple[torch.device, int], float] = {}


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
            spun = torch.cuda.Event(enable_timing=True)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            cycles = max(1, int(spin_s * _SPIN_CYCLES_PER_S.get(device, cycles_per_s)))
            with torch.cuda.stream(s):
                spun.record(s)
                torch.cuda._sleep(cycles)
                start.record(s)
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                end.record(s)
                queued_s = time.perf_counter() - t0
                held = not start.query()  # the spin still runs: nothing of the block has started
            end.synchronize()
            spin_took = spun.elapsed_time(start) / 1e3
            if held and spin_took > 0:  # the clock the spin ran at now: the next spin is sized by it
                _SPIN_CYCLES_PER_S[device] = cycles / spin_took
            return HeldAttempt(held, queued_s, start.elapsed_time(end) / 1e3)

    return BlockTiming(hold_until_queued(attempt, calls, spins=_HELD_SPINS, key=(device, calls)), calls)
