"""The host's state around each benchmark process: how long a small parallel product takes.

On a shared machine the host sometimes slows parallel work for seconds to a minute at a
time. Measured on the 2-vCPU VM (session 21, benchmarks/README.md): in such a stretch a
two-thread 64x64 float32 product takes 12-15 us instead of 6.4-7.1, a two-thread
1M-element add does not change, and every figure that is a small two-thread product reads
up to 2.5x slow for the whole process (a one-thread product was slow in 1 of 30 processes
against 3 of 30 on two threads, interleaved). Which processes of an A/B
run fell into such a stretch is a fact about the host, not about either commit, in the way
a throttled GPU is; so ``devbench compare`` and ``calibrate`` ask every benchmark process
to record it.

``probe_us`` times a 64x64 float32 product of its own tensors (torch only, no devbench
workload: a change under test cannot change it) on the thread count the benchmarks pin.
When ``DEVBENCH_HOSTPROBE`` names a file, ``record`` appends one JSON line per probe with
the asv benchmark and parameters of the process, and ``devbench.ab`` joins them to that
process's figure (``host_probe_us`` in per-process.csv). Without the variable (a plain
``asv run``) nothing is probed or written.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: the JSON-lines file a probe is appended to; unset, nothing is probed
ENV = "DEVBENCH_HOSTPROBE"
#: the probe's product: n x n float32
N = 64
#: calls per timed batch (about 1.4 ms at 7 us) and batches; the probe is their median
CALLS, BATCHES = 200, 3


@functools.cache
def _product() -> Any:
    """The probe's product of its own seeded tensors, checked once against float64 (a probe that timed
    a wrong product would say nothing of the host)."""
    import torch

    from devbench.measure import randn

    a, b = randn((N, N)), randn((N, N), seed=1)
    out = torch.empty(N, N)

    def product() -> Any:
        return torch.mm(a, b, out=out)

    want = a.double() @ b.double()
    err = float((product().double() - want).norm() / want.norm())
    if not err < 1e-5:
        raise AssertionError(f"host probe: 64x64 float32 product off by {err:.1e} against float64")
    return product


def probe_us() -> float:
    """Microseconds per 64x64 float32 product on this process's torch thread count: the median of
    ``BATCHES`` blocks of ``CALLS`` calls, timed by the measuring engine (``devbench.measure``)."""
    import torch

    from devbench.measure import median_block, warm_up

    cpu = torch.device("cpu")
    product = _product()
    warm_up(product, cpu, repeats=20)
    return median_block(product, cpu, CALLS, samples=BATCHES) * 1e6


def asv_benchmark_name(depth: int = 8) -> str | None:
    """The full asv name (``module.Class.method``) of the benchmark whose set-up or tear-down is running.

    asv_runner calls ``setup``/``teardown`` from its benchmark object's ``do_setup``/``do_teardown``;
    that object (a local ``self`` with ``name`` and ``_current_params``) is found up the stack.
    ``None`` when called from elsewhere.
    """
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        name = getattr(owner, "name", None)
        if isinstance(name, str) and hasattr(owner, "_current_params"):
            return name
        frame = frame.f_back
    return None


def record(benchmark: str, params: str, phase: str, path: str | os.PathLike[str] | None = None) -> dict | None:
    """Probe and append one line to ``path`` (default: the file ``DEVBENCH_HOSTPROBE`` names); ``None`` when unset."""
    target = path if path is not None else os.environ.get(ENV)
    if not target:
        return None
    import torch

    line = {
        "benchmark": benchmark,
        "params": params,
        "phase": phase,
        "probe_us": round(probe_us(), 3),
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
        "time": time.time(),
    }
    with open(target, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return line


def read(paths: Sequence[str | os.PathLike[str]]) -> list[dict]:
    """Every well-formed probe line of ``paths`` (missing files and torn lines are skipped)."""
    lines: list[dict] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            continue
        for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                item = json.loads(text)
            except ValueError:
                continue  # a process killed mid-write
            if isinstance(item, dict) and isinstance(item.get("probe_us"), (int, float)):
                lines.append(item)
    return lines


def worst_by_figure(lines: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """The slowest probe of each (benchmark, params): the host at its worst around that process."""
    worst: dict[tuple[str, str], float] = {}
    for item in lines:
        key = (str(item.get("benchmark")), str(item.get("params")))
        worst[key] = max(worst.get(key, 0.0), float(item["probe_us"]))
    return worst


#: a probe this many times the run's typical one marks a process run while the host slowed parallel work
#: (the two states measured on the VM are 6.4-7.1 us and 12-15 us)
SLOW_FACTOR = 1.5


def summary(values: Sequence[float]) -> dict | None:
    """How the host ran during an A/B run: the typical probe (10th percentile of the processes', so that
    a run spent mostly in a slow stretch still has its fast state as reference) and how many processes
    ran with a probe of at least ``SLOW_FACTOR`` times it. ``None`` when no process probed."""
    probes = sorted(float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0)
    if not probes:
        return None
    typical = probes[int(0.1 * (len(probes) - 1))]
    return {
        "typical_us": round(typical, 3),
        "slow_factor": SLOW_FACTOR,
        "slow": sum(v >= SLOW_FACTOR * typical for v in probes),
        "processes": len(probes),
    }


#: a figure is host-sensitive when its slowed processes' median lies this far (relative) from its other
#: processes' median in a calibration: on the VM 47-99% for small two-thread products and loops of them,
#: within 15% for most figures (session 21); only a sensitive figure's slowed processes are left out
SENSITIVE = 0.25


def slowed_ratio(slowed: Sequence[float], clean: Sequence[float]) -> float | None:
    """How a figure reads in processes the host slowed against the others: the ratio of their medians (of
    the logs), or ``None`` without a slowed process or two others. One slowed process is enough to ask:
    calling a figure sensitive by mistake costs it a few processes, calling it insensitive by mistake
    keeps its slow processes in every verdict."""
    s = [math.log(v) for v in slowed if v > 0]
    c = [math.log(v) for v in clean if v > 0]
    if not s or len(c) < 2:
        return None
    return math.exp(statistics.median(s) - statistics.median(c))


def sensitive(ratio: float | None) -> bool:
    """Whether a figure with this ``slowed_ratio`` is moved by the host's slow stretches (``SENSITIVE``)."""
    return ratio is not None and abs(math.log(ratio)) > math.log1p(SENSITIVE)
