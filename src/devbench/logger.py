"""A metric logger that keeps values on the device and moves them to the host rarely.

The chapter's summary: logging a loss with ``.item()`` every step makes the host wait for
the GPU each time (and holds the GIL while it waits). ``DeviceLogger`` writes each value
into a preallocated device tensor (an asynchronous kernel, no sync) and copies new
values to pinned host memory every ``flush_every`` steps with ``non_blocking=True``;
only ``values()`` waits.

    log = DeviceLogger(device, capacity=steps, flush_every=100)
    for batch in loader:
        loss = step(batch)
        log.log(loss.detach())
    losses = log.values()          # numpy array, one sync here
"""

from __future__ import annotations

import numpy as np
import torch

from devbench.engine.devices import as_device


class DeviceLogger:
    """Scalar metrics logged on ``device``, flushed to the host every ``flush_every`` steps."""

    def __init__(
        self,
        device: torch.device | str,
        capacity: int = 1024,
        flush_every: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if flush_every is not None and flush_every < 1:
            raise ValueError(f"flush_every must be >= 1 or None, got {flush_every}")
        self.device = as_device(device)
        self.flush_every = flush_every
        self.dtype = dtype
        self._device_buf = torch.empty(capacity, dtype=dtype, device=self.device)
        self._host_buf = self._new_host(capacity)
        self._count = 0
        self._flushed = 0
        self._copy_done: torch.cuda.Event | None = None

    def _new_host(self, capacity: int) -> torch.Tensor:
        # Pinned memory lets the device->host copy run asynchronously (DMA engine).
        pin = self.device.type == "cuda"
        return torch.empty(capacity, dtype=self.dtype, pin_memory=pin)

    def __len__(self) -> int:
        return self._count

    def log(self, value: torch.Tensor) -> None:
        """Record a 0-d tensor (e.g. ``loss.detach()``); no host-device sync."""
        if value.device != self.device:
            raise ValueError(f"DeviceLogger on {self.device} got a value on {value.device}")
        if self._count == self._device_buf.numel():
            self._grow()
        self._device_buf[self._count] = value
        self._count += 1
        if self.flush_every and self._count - self._flushed >= self.flush_every:
            self.flush()

    def _grow(self) -> None:
        self._wait()
        capacity = 2 * self._device_buf.numel()
        device_buf = torch.empty(capacity, dtype=self.dtype, device=self.device)
        device_buf[: self._count] = self._device_buf[: self._count]
        host_buf = self._new_host(capacity)
        host_buf[: self._flushed] = self._host_buf[: self._flushed]
        self._device_buf, self._host_buf = device_buf, host_buf

    def flush(self) -> None:
        """Start copying the values logged since the last flush to the host (async on CUDA)."""
        lo, hi = self._flushed, self._count
        if hi == lo:
            return
        self._host_buf[lo:hi].copy_(self._device_buf[lo:hi], non_blocking=True)
        self._flushed = hi
        if self.device.type == "cuda":
            self._copy_done = torch.cuda.Event()
            self._copy_done.record(torch.cuda.current_stream(self.device))  # the copy's stream, not the current GPU's

    def _wait(self) -> None:
        if self._copy_done is not None:
            self._copy_done.synchronize()
            self._copy_done = None

    def values(self) -> np.ndarray:
        """Every logged value as a NumPy array (flushes and waits once)."""
        self.flush()
        self._wait()
        return self._host_buf[: self._count].numpy().copy()
