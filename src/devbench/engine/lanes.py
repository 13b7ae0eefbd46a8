"""Work side by side: several callables at once, one per lane, timed as a whole and lane by lane.

Part of the measuring engine (with ``devbench.engine.measure``, whose block timer it uses): the
parallel benchmarks, copy/compute overlap and the CPU thread analog all run on ``Lanes``.
No asv, and nothing touches CUDA at import time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from devbench.engine.blocks import time_block
from devbench.engine.devices import as_device, synchronize


@dataclass(frozen=True)
class LaneTimes:
    """Seconds for a set of lanes run at once: the whole, and each lane's own span."""

    wall: float
    lanes: tuple[float, ...]


class LaneError(RuntimeError):
    """A callable run on one lane raised; the message names the lane's device."""

    def __init__(self, device: torch.device, exc: BaseException) -> None:
        super().__init__(f"on {device}: {type(exc).__name__}: {exc}")
        self.device = device


class Lanes:
    """Run several callables at once, one per lane, and time them.

    A lane is a device: on CUDA it gets its own stream, made here once (a new stream
    per run would put cuBLAS's per-stream workspace allocation inside the timed run),
    and calls are issued from this thread alternately, lane after lane, so every stream
    always has work queued. Each lane's span lies between events on its stream. One
    GPU: the whole lies between events on the current stream, which waits for every
    lane; several GPUs: a monotonic clock between full synchronizations of all of them.
    On CPU (or meta) devices a lane is a Python thread (torch releases the GIL in its
    kernels), timed with a monotonic clock.
    """

    def __init__(self, devices: Sequence[torch.device | str]) -> None:
        if not devices:
            raise ValueError("Lanes needs at least one device")
        self.devices = [as_device(d) for d in devices]
        kinds = {d.type == "cuda" for d in self.devices}
        if len(kinds) > 1:
            raise ValueError(f"lanes mix CUDA and other devices: {[str(d) for d in self.devices]}")
        self.cuda = kinds == {True}
        self.streams = [torch.cuda.Stream(d) for d in self.devices] if self.cuda else []

    def __len__(self) -> int:
        return len(self.devices)

    def run(self, fns: Sequence[Callable[[], object]], calls: int = 1) -> LaneTimes:
        """Call each of ``fns`` ``calls`` times, ``fns[i]`` on lane ``i``, all lanes at once."""
        if calls < 1:
            raise ValueError(f"calls must be >= 1, got {calls}")
        if len(fns) != len(self.devices):
            raise ValueError(f"got {len(fns)} functions for {len(self.devices)} lanes")
        return self._on_streams(fns, calls) if self.cuda else self._on_threads(fns, calls)

    def sequential(self, fns: Sequence[Callable[[], object]], calls: int = 1) -> float:
        """Seconds to run each of ``fns`` ``calls`` times, one after the other, on lane 0's device."""

        def all_of_them() -> None:
            for fn in fns:
                for _ in range(calls):
                    fn()

        return time_block(all_of_them, self.devices[0], 1).seconds

    def _on_streams(self, fns: Sequence[Callable[[], object]], calls: int) -> LaneTimes:
        def event() -> torch.cuda.Event:
            return torch.cuda.Event(enable_timing=True)

        one_gpu = len(set(self.devices)) == 1
        begins, ends = [event() for _ in fns], [event() for _ in fns]
        if not one_gpu:
            synchronize(self.devices)
            t0 = time.perf_counter()
        main = torch.cuda.current_stream(self.devices[0])
        start, end = event(), event()
        if one_gpu:
            start.record(main)
        for dev, s, b in zip(self.devices, self.streams, begins, strict=True):
            s.wait_stream(torch.cuda.current_stream(dev))  # inputs made on the current stream are ready
            b.record(s)
        self._issue(fns, calls)
        for s, e in zip(self.streams, ends, strict=True):
            e.record(s)
            torch.cuda.current_stream(s.device).wait_stream(s)  # later work on the current stream sees the results
        if one_gpu:
            end.record(main)
            end.synchronize()
            wall = start.elapsed_time(end) / 1e3
        else:
            synchronize(self.devices)
            wall = time.perf_counter() - t0
        return LaneTimes(wall, tuple(b.elapsed_time(e) / 1e3 for b, e in zip(begins, ends, strict=True)))

    def _issue(self, fns: Sequence[Callable[[], object]], calls: int) -> None:
        """Queue ``calls`` rounds of ``fns``, ``fns[i]`` on lane ``i``'s stream (CUDA lanes)."""
        for _ in range(calls):
            for fn, s in zip(fns, self.streams, strict=True):
                with torch.cuda.stream(s):
                    fn()

    def issue_s(self, fns: Sequence[Callable[[], object]], calls: int) -> float:
        """Host seconds to queue one call of ``fns`` on its lane, as ``run`` queues them (each under its lane's
        stream, the lanes in turn), timed before any device is waited on (CUDA lanes)."""
        if not self.cuda:
            raise ValueError("the issue of calls is timed on CUDA lanes only")
        synchronize(self.devices)
        for dev, s in zip(self.devices, self.streams, strict=True):
            s.wait_stream(torch.cuda.current_stream(dev))
        start = time.perf_counter()
        self._issue(fns, calls)
        took = time.perf_counter() - start
        for s in self.streams:
            torch.cuda.current_stream(s.device).wait_stream(s)
        synchronize(self.devices)
        return took / (calls * len(fns))

    def _on_threads(self, fns: Sequence[Callable[[], object]], calls: int) -> LaneTimes:
        spans = [0.0] * len(fns)
        errors: list[BaseException | None] = [None] * len(fns)
        barrier = threading.Barrier(len(fns) + 1)

        def lane(i: int) -> None:
            try:
                barrier.wait()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fns[i]()
                synchronize(self.devices[i])
                spans[i] = time.perf_counter() - t0
            except BaseException as exc:  # re-raised below, named by device
                errors[i] = exc

        threads = [threading.Thread(target=lane, args=(i,), name=f"devbench-lane{i}") for i in range(len(fns))]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        for dev, exc in zip(self.devices, errors, strict=True):
            if exc is not None:
                raise LaneError(dev, exc) from exc
        return LaneTimes(wall, tuple(spans))
