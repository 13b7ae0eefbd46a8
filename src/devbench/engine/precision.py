"""When a figure has samples enough: asv's 99% interval of its median within a share of it, or a cap.

nvbench's rule, with asv's interval: a figure takes samples until the half-width of the 99% interval asv
will report for its median (``asv_runner.statistics.compute_stats``: the order statistics a binomial
distribution puts around the median) is within ``REL`` of the median, or until the cap the benchmark class
sets (``Benchmark.sample_cap``: seconds and samples, whichever ends later), or until the samples the cap leaves
cannot bring it within ``REL`` (``TRIMMED_SAMPLES``). The interval exists, as asv
computes it without its fallback, from ``MIN_SAMPLES`` samples: the range of 8 covers 99.2%.
``tests/test_precision.py`` holds ``ci99`` to asv's own function. No torch, no asv: plain arithmetic.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the half-width of asv's 99% interval, over the median, under which a figure stops (a 2% change stays visible)
REL = 0.005
#: the fewest samples whose 99% interval of the median asv gives from the samples alone
MIN_SAMPLES = 8
#: a class's cap when it sets none: 11 samples and 0.5 s, whichever ends later
DEFAULT_CAP = (0.5, 11)
#: the fewest samples whose 99% interval of the median asv gives inside their range: from 8 to 11 samples it is
#: their range (the smallest to the largest), which another sample can only widen
TRIMMED_SAMPLES = 12


def ci99(values: Sequence[float]) -> tuple[float, float] | None:
    """The 99% interval of the median asv reports for ``values`` (order statistics), or None where asv has
    none from the samples alone (it then extends a Laplace posterior beyond them: not a precision to stop on)."""
    y = sorted(values)
    n = len(y)
    lo = hi = None
    below = 0.0  # P[K <= k] for K ~ Bin(n, 1/2)
    for k, v in enumerate(y):
        below += math.comb(n, k) / (1 << n)  # exact integers: 2.0**n overflows a float from n = 1,024
        if below <= 0.005:
            lo = v
        if below >= 0.995:
            hi = v
            break
    return (lo, hi) if lo is not None and hi is not None else None


def half_width(values: Sequence[float]) -> float:
    """Half of asv's 99% interval over the median; ``inf`` where there is none yet."""
    ci = ci99(values)
    mid = statistics.median(values) if values else 0.0
    if ci is None or mid <= 0:
        return math.inf
    return (ci[1] - ci[0]) / 2 / mid


def widest(values: Sequence[float] | Sequence[tuple[float, ...]]) -> float:
    """``half_width`` of ``values``; of samples that are tuples (one block read on two clocks), the widest of their
    columns' (each figure they make must be precise)."""
    if values and isinstance(values[0], tuple):
        return max(half_width(column) for column in zip(*values, strict=True))
    return half_width(values)


@dataclass(frozen=True)
class Sampled:
    """A figure's samples (or tuples of samples, read together: ``widest``), and whether the cap stopped them
    before they were precise enough."""

    values: tuple
    capped: bool

    @property
    def half_width(self) -> float:
        return widest(self.values)


def sample(
    take: Callable[[], float | tuple[float, ...]],
    cap: tuple[float, int] | None = None,
    rel: float = REL,
    clock: Callable[[], float] = time.monotonic,
) -> Sampled:
    """``take()`` until asv's interval is within ``rel`` of the median (``MIN_SAMPLES`` at least) or the cap
    (seconds, samples) has passed on both counts, or until no sample the cap leaves can bring it within ``rel``:
    from ``MIN_SAMPLES`` to ``TRIMMED_SAMPLES - 1`` samples asv's interval is their range, so a figure not within
    ``rel`` at ``MIN_SAMPLES`` whose cap ends before ``TRIMMED_SAMPLES`` (its seconds at the pace of the samples so
    far) stops there, capped: the samples it would add cannot narrow its interval (on the H200 a bf16 product's
    interval at its 11 blocks was their range, 593-720 TFLOP/s about a median of 677: one block at the clock before
    the power limit held, one at a throttle's dip). A ``take()`` that returns a tuple (one block on two clocks)
    stops when every column is within ``rel``."""
    cap_s, cap_n = cap if cap is not None else current_cap()
    if cap_n < 1 or cap_s < 0:
        raise ValueError(f"a cap is (seconds >= 0, samples >= 1), got {(cap_s, cap_n)}")
    start = last = clock()
    values: list[float] = []
    took: list[float] = []  # each sample's seconds: their median is the pace (a slow first block does not set it)
    while True:
        values.append(take())
        now = clock()
        took.append(now - last)
        last = now
        n = len(values)
        if n >= MIN_SAMPLES and widest(values) <= rel:
            return Sampled(tuple(values), capped=False)
        if n >= cap_n and now - start >= cap_s:
            return Sampled(tuple(values), capped=n < MIN_SAMPLES or widest(values) > rel)
        if MIN_SAMPLES <= n < TRIMMED_SAMPLES and cap_end(cap_s, cap_n, statistics.median(took)) < TRIMMED_SAMPLES:
            return Sampled(tuple(values), capped=True)


def cap_end(cap_s: float, cap_n: int, sample_s: float) -> float:
    """The samples at which a cap of ``cap_s`` seconds and ``cap_n`` samples ends, at ``sample_s`` a sample: the
    first whole sample past both (a cap of 0.5 s at 0.0435 s a sample ends at the 12th)."""
    if sample_s <= 0:
        return math.inf
    return float(max(cap_n, math.ceil(cap_s / sample_s - 1e-9)))


def capped_samples(cap_s: float, cap_n: int, sample_s: float) -> float:
    """The samples ``sample`` takes of a figure that is not within ``REL`` by its cap's end, at ``sample_s`` a
    sample under a cap of ``cap_s`` seconds and ``cap_n`` samples: ``MIN_SAMPLES`` where its cap ends before
    ``TRIMMED_SAMPLES`` (or the cap's end, if sooner), else the cap's end. What gpu-run's plan prices a figure its
    record or its class says stops at its cap (``devbench.gpu.declared``, ``devbench.gpu.recorded``)."""
    end = cap_end(cap_s, cap_n, sample_s)
    return min(float(MIN_SAMPLES), end) if end < TRIMMED_SAMPLES else end


_CAP: list[tuple[float, int]] = []


def current_cap() -> tuple[float, int]:
    """The cap of the benchmark now measuring (``capped``), else ``DEFAULT_CAP``."""
    return _CAP[-1] if _CAP else DEFAULT_CAP


@contextlib.contextmanager
def capped(cap: tuple[float, int] | None) -> Iterator[None]:
    """Figures sampled inside stop at ``cap`` (seconds, samples) when not precise before (None: the default)."""
    _CAP.append(tuple(cap) if cap is not None else DEFAULT_CAP)
    try:
        yield
    finally:
        _CAP.pop()


def of_result(result: dict) -> dict:
    """What the measuring process's journal keeps of a figure's reply: its error, or its samples' count and asv's
    interval over its median."""
    if "error" in result:
        return {"error": result["error"]}
    value = result.get("result")
    if not isinstance(value, dict) or not value.get("samples"):
        return {}
    width = half_width(value["samples"])
    return {"samples": len(value["samples"]), "half_width": round(width, 5) if width != float("inf") else None,
            "precise": width <= REL}  # fmt: skip


def imprecise(journal: Path) -> list[dict]:
    """The figures of a measuring process's ``journal`` whose samples stopped before asv's interval came within
    ``REL``."""
    if not journal.exists():
        return []
    rows = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return [r for r in rows if "figure" in r and r.get("precise") is False]
