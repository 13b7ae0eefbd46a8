"""Exercise 4: independent work on several devices at once vs one after another."""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from devbench.devices import synchronize
from devbench.workloads.matmul import Matmul

R = TypeVar("R")


class DeviceRunError(RuntimeError):
    """A function run by ``run_on_devices`` raised on one device."""

    def __init__(self, device: torch.device, exc: BaseException) -> None:
        super().__init__(f"on {device}: {type(exc).__name__}: {exc}")
        self.device = device


Fn = Callable[[torch.device], R]


def _per_device(fn: Fn | Sequence[Fn], count: int) -> list[Fn]:
    fns = list(fn) if isinstance(fn, Sequence) else [fn] * count
    if len(fns) != count:
        raise ValueError(f"got {len(fns)} functions for {count} devices")
    return fns


def run_on_devices(fn: Fn | Sequence[Fn], devices: Sequence[torch.device | str]) -> list[R]:
    """Call ``fn(device)`` for every device at the same time; wait for all of them.

    ``fn`` may be one callable or one per device (two lanes on the same CPU "device"
    need their own buffers).

    One Python thread per device: GPU work is queued from each thread and every device
    is synchronized before returning (``torch.cuda.synchronize()`` alone would wait for
    the current device only); on CPU "devices" the threads themselves run in parallel
    (torch releases the GIL inside its kernels). Results come back in device order. If
    ``fn`` raises on any device, the others are still waited for and a
    ``DeviceRunError`` naming the first failing device is raised.
    """
    devs = [torch.device(d) for d in devices]
    if not devs:
        raise ValueError("run_on_devices needs at least one device")
    fns = _per_device(fn, len(devs))
    results: list[R | None] = [None] * len(devs)
    errors: list[BaseException | None] = [None] * len(devs)
    start = threading.Barrier(len(devs))

    def work(i: int, dev: torch.device) -> None:
        try:
            start.wait()
            if dev.type == "cuda":
                with torch.cuda.device(dev):
                    results[i] = fns[i](dev)
            else:
                results[i] = fns[i](dev)
            synchronize(dev)
        except BaseException as exc:  # re-raised below, named by device
            errors[i] = exc

    threads = [threading.Thread(target=work, args=(i, d), name=f"devbench-{d}") for i, d in enumerate(devs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for dev, exc in zip(devs, errors, strict=True):
        if exc is not None:
            raise DeviceRunError(dev, exc) from exc
    return results  # type: ignore[return-value]


def run_in_sequence(fn: Fn | Sequence[Fn], devices: Sequence[torch.device | str]) -> list[R]:
    """The same calls one after another in this thread, every device synchronized at the end."""
    devs = [torch.device(d) for d in devices]
    results = [f(d) for f, d in zip(_per_device(fn, len(devs)), devs, strict=True)]
    synchronize(devs)
    return results


def run_on_streams(fn: Fn | Sequence[Fn], device: torch.device, count: int) -> list[R]:
    """``count`` calls of ``fn`` on one GPU, each on its own CUDA stream; waits for all."""
    main = torch.cuda.current_stream(device)
    streams = [torch.cuda.Stream(device) for _ in range(count)]
    results = []
    for f, s in zip(_per_device(fn, count), streams, strict=True):
        s.wait_stream(main)  # inputs made on the main stream are ready
        with torch.cuda.stream(s):
            results.append(f(device))
    for s in streams:
        main.wait_stream(s)
    synchronize(device)
    return results


class MatmulWork:
    """``reps`` float32 products of size n on a device: the unit of independent work.

    Each lane (a device, a stream or a CPU thread) owns its own ``Matmul`` so that no two
    lanes write one output.
    """

    def __init__(self, n: int, lanes: Sequence[torch.device], reps: int = 1) -> None:
        self.n, self.reps = n, reps
        self.mms = [Matmul(n, "float32", d) for d in lanes]

    def lanes(self) -> list[Callable[[torch.device], torch.Tensor]]:
        return [self.lane(i) for i in range(len(self.mms))]

    def lane(self, i: int) -> Callable[[torch.device], torch.Tensor]:
        mm = self.mms[i]

        def fn(_dev: torch.device) -> torch.Tensor:
            out = mm()
            for _ in range(self.reps - 1):
                out = mm()
            return out

        return fn

    def check(self) -> None:
        for mm in self.mms:
            mm.check()


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call (the callable synchronizes what it used)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class ParallelPair:
    """The same N works of matmuls run in parallel on N lanes and in sequence on lane 0.

    ``mode`` is how the lanes run at once: ``"threads"`` (``run_on_devices``: one thread
    per device, GPUs or CPU) or ``"streams"`` (``run_on_streams`` on one GPU). Each lane's
    work is sized to last about ``lane_s`` seconds.
    """

    def __init__(self, n: int, lanes: Sequence[torch.device], mode: str = "threads", lane_s: float = 0.2) -> None:
        if mode not in ("threads", "streams"):
            raise ValueError(f"unknown mode {mode!r}; expected 'threads' or 'streams'")
        if len(lanes) < 2:
            raise ValueError(f"parallel work needs at least 2 lanes, got {len(lanes)}")
        self.lanes, self.mode = [torch.device(d) for d in lanes], mode
        self.par = MatmulWork(n, self.lanes)
        self.seq = MatmulWork(n, [self.lanes[0]] * len(self.lanes))
        self.par.check()
        self.seq.check()
        one = self.run_parallel()  # warm: one product per lane
        reps = max(1, math.ceil(lane_s / max(one, 1e-6)))
        self.par.reps = self.seq.reps = reps
        self.run_parallel()
        self.run_sequential()

    def run_parallel(self) -> float:
        """Wall seconds of all lanes at once, every device synchronized."""
        if self.mode == "streams":
            return timed(lambda: run_on_streams(self.par.lanes(), self.lanes[0], len(self.lanes)))
        return timed(lambda: run_on_devices(self.par.lanes(), self.lanes))

    def run_sequential(self) -> float:
        """Wall seconds of the same works one after another on lane 0."""
        return timed(lambda: run_in_sequence(self.seq.lanes(), [self.lanes[0]] * len(self.lanes)))

    def speedup(self, samples: int = 5) -> float:
        """Median sequential over median parallel time, interleaved samples."""
        seq, par = [], []
        for _ in range(samples):
            seq.append(self.run_sequential())
            par.append(self.run_parallel())
        return statistics.median(seq) / statistics.median(par)
