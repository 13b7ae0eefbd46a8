"""A product timed the ways a GPU's clocks make it differ: from idle (a burst, before the clock falls), briefly
after a short warm-up, and sustained (after the board settles at its power limit)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

import torch

from devbench.engine.devices import synchronize
from devbench.engine.measure import Measurement, block_calls, measure, time_block

#: Burst: the device idles this long, then a short run of small blocks (mamf-finder's "burst").
BURST_IDLE_S = 1.0
BURST_S = 0.25

#: Sustained: back-to-back work for this long before the blocks that count, then SUSTAINED_S of
#: blocks: the clocks and power a long training step settles at (power capping, heat).
SUSTAIN_FIRST_S = 5.0
SUSTAINED_S = 2.0

#: Most seconds a burst idles, or a sustained product loads, before the blocks that count (unset: as asked).
#: ``make test``'s dry run sets it: the same code, without twelve seconds of waiting on the CPU.
HOLD_ENV = "DEVBENCH_HOLD_S"


def held(seconds: float) -> float:
    """``seconds`` of idle or load before a figure's blocks, at most ``DEVBENCH_HOLD_S`` where that is set."""
    text = os.environ.get(HOLD_ENV, "")
    if not text:
        return seconds
    try:
        most = float(text)
    except ValueError:
        most = -1.0
    if not most >= 0:  # also NaN
        raise ValueError(f"{HOLD_ENV}={text!r}: expected a number of seconds >= 0")
    return min(seconds, most)


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
    time.sleep(held(idle_s))
    return _sampled(fn, device, block_calls(one_call_s, burst_s / blocks), blocks, sampler)


#: Brief: mamf-finder's figure (its table of achievable TFLOP/s) is the mean of a short run of back-to-back calls
#: after a short warm-up, with no idle before it; here the same run is five blocks, and the figure their median.
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
    run_for(fn, device, held(first_s), calls)
    return _sampled(fn, device, calls, blocks, sampler)


def _sampled(fn, device, calls, blocks, sampler) -> tuple[Measurement, list]:
    if sampler is None:
        return measure(fn, device, calls, blocks), []
    with sampler() as s:
        m = measure(fn, device, calls, blocks)
    return m, s.summary()
