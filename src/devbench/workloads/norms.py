"""Exercise 3: log the Frobenius norm of each of many matmul results, four ways."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from devbench.engine.measure import SEED, block_calls, one_call_s, randn, sampled
from devbench.logger import DeviceLogger

STRATEGIES = ["per_step_item", "per_step_numpy", "on_device", "periodic"]

#: Steps between flushes for the ``periodic`` strategy.
FLUSH_EVERY = 100

#: Distinct left operands the loop cycles through, so each step's product differs.
INPUT_SETS = 8


class NormLoop:
    """``steps`` products of n x n matrices on ``device``, each one's norm logged."""

    def __init__(self, n: int, steps: int, device: torch.device, flush_every: int = FLUSH_EVERY) -> None:
        if steps < 1 or n < 1:
            raise ValueError(f"steps and n must be >= 1, got steps={steps}, n={n}")
        self.n, self.steps, self.device, self.flush_every = n, steps, torch.device(device), flush_every
        self.a = randn((INPUT_SETS, n, n), device=self.device)
        self.b = randn((n, n), device=self.device, seed=SEED + 1)
        self.c = torch.empty((n, n), device=self.device)
        self._reference: np.ndarray | None = None

    def _norm(self, i: int) -> torch.Tensor:
        torch.mm(self.a[i % INPUT_SETS], self.b, out=self.c)
        return torch.linalg.matrix_norm(self.c)  # Frobenius by default, a 0-d device tensor

    def per_step_item(self) -> np.ndarray:
        """The chapter's mistake: ``.item()`` each step waits for the device."""
        out = []
        for i in range(self.steps):
            out.append(self._norm(i).item())
        return np.asarray(out, dtype=np.float32)

    def per_step_numpy(self) -> np.ndarray:
        """``.cpu().numpy()`` each step: a device->host copy and a wait per step."""
        out = np.empty(self.steps, dtype=np.float32)
        for i in range(self.steps):
            out[i] = self._norm(i).cpu().numpy()
        return out

    def on_device(self) -> np.ndarray:
        """Norms into a preallocated device tensor; one transfer at the end."""
        log = torch.empty(self.steps, device=self.device)
        for i in range(self.steps):
            log[i] = self._norm(i)
        return log.cpu().numpy()

    def periodic(self) -> np.ndarray:
        """``DeviceLogger``: on the device, flushed every k steps, non-blocking into pinned memory."""
        log = DeviceLogger(self.device, capacity=self.steps, flush_every=self.flush_every)
        for i in range(self.steps):
            log.log(self._norm(i))
        return log.values()

    def strategy(self, name: str) -> Callable[[], np.ndarray]:
        if name not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r}; expected one of {STRATEGIES}")
        return getattr(self, name)

    def pairs(self, name: str, block_s: float, count: int | None = None) -> tuple[list[tuple[float, float]], int]:
        """(``name``'s, ``on_device``'s) seconds per loop in pairs of blocks of at least ``block_s`` each (one loop
        where a loop is longer), the two in turns, who goes first alternating: ``count`` pairs, or ``DEVBENCH_BLOCKS``,
        else until asv's 99% interval of their ratio is within 0.5% of its median or the benchmark's cap has passed
        (``measure.sampled``). A strategy's time and its cost over ``on_device`` are counted from the same pairs.
        Every loop ends with its norms on the host: each is waited for. Returns the pairs and the loops in each of
        ``name``'s blocks."""
        sides = [self.strategy(name), self.on_device]
        calls = [block_calls(one_call_s(fn, torch.device("cpu")), block_s) for fn in sides]
        got: list[tuple[float, float]] = []

        def block(i: int) -> float:
            fn, n = sides[i], calls[i]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            return (time.perf_counter() - start) / n

        def one() -> float:
            order = (0, 1) if len(got) % 2 == 0 else (1, 0)
            took = {i: block(i) for i in order}
            got.append((took[0], took[1]))
            return took[0] / took[1]

        sampled(one, count)
        return got, calls[0]

    def reference(self) -> np.ndarray:
        """The norms in float64 on the CPU: each of the ``INPUT_SETS`` distinct products once, in step order.

        Computed on first use and kept: a check of two strategies reads it twice."""
        if self._reference is None:
            a, b = self.a.double().cpu(), self.b.double().cpu()
            distinct = np.array([float(torch.linalg.matrix_norm(a[i] @ b)) for i in range(min(INPUT_SETS, self.steps))])
            self._reference = distinct[np.arange(self.steps) % INPUT_SETS]
        return self._reference

    def check(self, name: str, rtol: float = 1e-4) -> np.ndarray:
        """Run strategy ``name`` once; raise unless its norms match float64. Return them."""
        got = self.strategy(name)()
        want = self.reference()
        if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=0):
            worst = float(np.max(np.abs(got - want) / want)) if got.shape == want.shape else float("nan")
            raise AssertionError(
                f"{name} on {self.device}: norms differ from float64 (worst relative error {worst:.2e})"
            )
        return got
