"""Small tasks for the launch-overhead split: an add and small matmuls, checked however they ran.

The chapter's exercise 1 asks about "a task with a small number of calculations": on a
GPU its time is mostly the host launching it and waiting for it. ``bench_launch`` times
one such task per call with a sync, as back-to-back queued calls, with the stream held
(the device's own time) and replayed from a CUDA graph (triton's ``do_bench_cudagraph``,
nccl-tests' ``-G``); the differences are launch and synchronization.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from devbench.engine.measure import SEED, randn
from devbench.workloads.matmul import Matmul

#: The small tasks: an elementwise add of 1 and 1,000 elements, float32 products of 64 and 256.
TASKS = ["add 1", "add 1000", "matmul 64", "matmul 256"]

#: Calls of the task captured into one CUDA graph (one replay launches them all).
GRAPH_CALLS = 32


class SmallTask:
    """One small task on one device; ``check()`` verifies its outputs, however they were computed."""

    def __init__(self, task: str, device: torch.device) -> None:
        kind, _, size = task.partition(" ")
        if kind not in ("add", "matmul") or not size.isdigit():
            raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
        self.task, self.device = task, device
        if kind == "add":
            self.x = randn(int(size), device=device)
            self.y = randn(int(size), device=device, seed=SEED + 1)
            self.out = torch.empty_like(self.x)
            self.mm = None
        else:
            self.mm = Matmul(int(size), "float32", device)

    def __call__(self) -> torch.Tensor:
        if self.mm is not None:
            return self.mm()
        return torch.add(self.x, self.y, out=self.out)

    def clear(self) -> None:
        """Zero the outputs, so that a check after a run sees what that run computed."""
        for t in self.mm.outputs if self.mm is not None else [self.out]:
            t.zero_()

    def check(self) -> None:
        """Raise ``AssertionError`` naming the task and device if an output is not what it computes."""
        torch.cuda.synchronize(self.device) if self.device.type == "cuda" else None
        if self.mm is None:
            want = self.x.cpu() + self.y.cpu()
            if not torch.allclose(self.out.cpu(), want):
                raise AssertionError(f"{self.task} on {self.device}: output differs from x + y")
            return
        for (a, b), out in zip(self.mm.inputs, self.mm.outputs, strict=True):
            want = a.cpu().double() @ b.cpu().double()
            err = float((out.cpu().double() - want).norm() / want.norm())
            if not err < 1e-5:
                raise AssertionError(f"{self.task} on {self.device}: relative error {err:.2e} against float64")


def graph_reason(device: torch.device) -> str | None:
    """Why ``device`` cannot replay a CUDA graph, or ``None``."""
    if device.type != "cuda":
        return f"{device.type}: CUDA graphs replay GPU work; a CPU runs each call as it is made"
    return None


def graphed(task: SmallTask, calls: int = GRAPH_CALLS) -> Callable[[], None]:
    """``calls`` calls of ``task`` captured into one CUDA graph; the returned function replays it.

    The graph's outputs are checked after a first replay (outputs cleared before it).
    """
    reason = graph_reason(task.device)
    if reason:
        raise ValueError(reason)
    dev = task.device
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(3):  # capture needs the kernels (and cuBLAS's workspace) made beforehand
            task()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            task()
    task.clear()
    graph.replay()
    task.check()
    return graph.replay
