"""Exercise 3: logging the Frobenius norm of each matmul per step vs on the device."""

import contextlib

from devbench.engine.suite import (
    DEVICES,
    Benchmark,
    check_once,
    host_clock_cap,
    once,
    require_device,
    shared,
    with_samples,
)
from devbench.workloads.norms import STRATEGIES, NormLoop

#: a block of loops lasts at least this long (one loop where a loop is longer), as asv's samples of 0.05 s
LOOP_BLOCK_S = 0.05


class LogNorms(Benchmark):
    """``steps`` products of n x n matrices, each one's norm logged by ``strategy``.

    ``per_step_item`` and ``per_step_numpy`` wait for the device every step (the mistake
    the chapter warns about); ``on_device`` moves one tensor at the end; ``periodic`` is
    ``devbench.logger.DeviceLogger`` flushing every 100 steps. n = 1,024 keeps the GPU
    busy, so the per-step sync costs idle time rather than only latency.
    """

    params = [DEVICES, STRATEGIES, [100, 1000], [100, 1024]]
    param_names = ["device", "strategy", "steps", "n"]
    #: devbench gpu-run runs these first (devbench.gpu.plan)
    headline = [{"steps": [1000], "n": [1024]}]
    skips = [{"where": {"device": ["cpu"], "n": [1024]},
              "reason": "n=1024 exists to keep a GPU busy; on the CPU a loop takes seconds"}]  # fmt: skip
    swept = True
    #: a sample is a pair of blocks, the strategy's loops and on_device's, each at least ``LOOP_BLOCK_S``
    sample_time = 2 * LOOP_BLOCK_S
    #: per-step logging waits on the host every step: up to 1 s of pairs for 0.5%
    sample_cap = (1.0, 11)
    #: 2: time_loop (asv's clock, a process of its own) became track_time, timed beside the ratio; 3: both
    #: figures count one set of pairs (a block of the strategy's loops, one of on_device's, in turns)
    work_version = 3

    def setup(self, device, strategy, steps, n):
        self.device = require_device(device)
        # asv runs setup before every sample: the loop is built and checked once per process (suite.once);
        # checked again each sample, 1,000 float64-checked steps cost the H200 36 s a point
        key = ("LogNorms", device, strategy, steps, n)
        self.loop = once(key, lambda: self._checked(key, strategy, steps, n))
        self.logged = strategy

    def _checked(self, key, strategy, steps, n):
        loop = NormLoop(n, steps, self.device)

        def check():
            loop.check(strategy)  # also the warm-up
            if strategy != "on_device":
                loop.check("on_device")

        check_once(key, check, lambda: (loop.strategy(strategy)(), loop.strategy("on_device")()))
        return loop

    def _pairs(self, figure):
        """The pairs every figure counts (``shared``), sampled as the figure that takes them: the time on the host's
        clock (on the CPU at least asv's 2 s), the ratio to its class's cap (a pair's drift cancels in it)."""
        with host_clock_cap(self.device) if figure == "time" else contextlib.nullcontext():
            return shared(self, figure, lambda: self.loop.pairs(self.logged, LOOP_BLOCK_S))

    def track_time(self, device, strategy, steps, n):
        # every strategy ends with its norms on the host: each loop is waited for
        pairs, calls = self._pairs("time")
        return with_samples((own for own, _ in pairs), calls)

    track_time.unit = "seconds"

    def track_vs_on_device(self, device, strategy, steps, n):
        return with_samples(own / ref for own, ref in self._pairs("vs_on_device")[0])

    track_vs_on_device.unit = "x"
