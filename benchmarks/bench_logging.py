"""Exercise 3: logging the Frobenius norm of each matmul per step vs on the device."""

import time

import numpy as np

from devbench.measure import pin_threads
from devbench.suite import DEVICES, Benchmark, require_device
from devbench.workloads.norms import STRATEGIES, NormLoop

#: Samples of each loop for the in-process ratio (median of each side).
RATIO_SAMPLES = 5


class LogNorms(Benchmark):
    """``steps`` products of n x n matrices, each one's norm logged by ``strategy``.

    ``per_step_item`` and ``per_step_numpy`` wait for the device every step (the mistake
    the chapter warns about); ``on_device`` moves one tensor at the end; ``periodic`` is
    ``devbench.logger.DeviceLogger`` flushing every 100 steps. n = 1,024 keeps the GPU
    busy, so the per-step sync costs idle time rather than only latency.
    """

    params = [DEVICES, STRATEGIES, [100, 1000], [100, 1024]]
    param_names = ["device", "strategy", "steps", "n"]

    def setup(self, device, strategy, steps, n):
        pin_threads()
        self.device = require_device(device)
        if self.device.type == "cpu" and n > 100:
            raise NotImplementedError(f"n={n} exists to keep a GPU busy; on the CPU a loop takes seconds")
        self.loop = NormLoop(n, steps, self.device)
        self.run = self.loop.strategy(strategy)
        self.loop.check(strategy)  # also the warm-up
        if strategy != "on_device":
            self.loop.check("on_device")

    def time_loop(self, device, strategy, steps, n):
        self.run()  # every strategy ends with its norms on the host: synchronized

    def track_vs_on_device(self, device, strategy, steps, n):
        base, mine = [], []
        for _ in range(RATIO_SAMPLES):  # interleaved, so drift hits both sides alike
            for fn, out in ((self.loop.on_device, base), (self.run, mine)):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
        return float(np.median(mine) / np.median(base))

    track_vs_on_device.unit = "x"
