"""A copy's figures from blocks of copies back to back: GB/s per block on the device's clock (``block_gbps``), and a
copy whose call returns with it done read on two clocks from one set of blocks (``clocked``). A copy is any
callable with ``nbytes``, ``timing_device`` and ``host_waits`` (``devbench.workloads.transfer.Copy``)."""

from __future__ import annotations

from typing import Any

from devbench.engine.measure import measure, measure_clocks, plan_blocks
from devbench.engine.suite import host_clock_cap, shared, with_samples
from devbench.records.spec import gbps


def block_gbps(copy: Any, block_s: float, scale: float = 1.0) -> tuple[list[float], int]:
    """GB/s of bytes copied (times ``scale``) in every block of back-to-back copies of ``block_s`` at least, and the
    copies per block.

    On a GPU, copies shorter than ``HOLD_BELOW_S`` are timed with the stream held
    (``devbench.engine.measure.plan_blocks``), unless the host waits for them (pageable or blocking).
    """
    dev = copy.timing_device
    plan = plan_blocks(copy, dev, target_s=block_s, may_hold=not copy.host_waits)
    return [scale * gbps(copy.nbytes, t) for t in measure(copy, dev, plan).per_call], plan.calls


def clocked(bench: Any, figure: str, block_s: float) -> dict:
    """``bench.copy``'s ``figure``, "time" (seconds per copy on the host's clock) or "gbps" (GB/s on the device's),
    both read from one set of blocks of copies back to back (``measure_clocks``): for a copy whose call returns
    with it done (``Copy.returns_done``) the waited figure's loop and the GB/s figure's are the same calls."""
    copy, dev = bench.copy, bench.copy.timing_device

    def take() -> tuple:
        calls = plan_blocks(copy, dev, target_s=block_s, may_hold=False).calls
        with host_clock_cap(dev):
            host, on_device = measure_clocks(copy, dev, calls)
        return host.per_call, [gbps(copy.nbytes, t) for t in on_device.per_call], calls

    seconds, rates, calls = shared(bench, figure, take)
    return with_samples(seconds if figure == "time" else rates, calls)
