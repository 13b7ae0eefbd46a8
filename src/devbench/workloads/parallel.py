"""Exercise 4: independent matmuls on several lanes at once vs one after another on one lane."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from devbench.engine.lanes import Lanes
from devbench.engine.measure import sampled
from devbench.workloads.matmul import Matmul, tf32

#: products issued back to back to time the host's share of one (its dispatch and launch)
ISSUE_CALLS = 32
#: seconds the sequential run of a pair lasts, whatever the lanes: each of N lanes' works about a 1/N share, so a
#: pair (the sequential run, then the parallel one) lasts about (N + 1) / N of it: 0.6 s on two lanes (a lane of 0.2
#: s, as it was), 0.45 s on eight GPUs, where a lane of 0.2 s made the sequential run 1.6 s and a pair 1.8 s. The
#: lanes' works are sized from a parallel run, so where the lanes cannot overlap (two streams on one GPU, each
#: product large enough to fill it) the parallel run lasts as long as the sequential one and both last about 1/N of it
RUN_S = 0.4
#: CUDA lanes are issued from one thread: when issuing one product on every lane takes this share of one
#: product's device time or more, the lanes wait on the host and a speedup would time the thread
HOST_BOUND_SHARE = 0.5


def host_bound_reason(lanes: int, issue_s: float, product_s: float, share: float = HOST_BOUND_SHARE) -> str | None:
    """Why ``lanes`` CUDA lanes fed by one thread would measure that thread, or None when they would not."""
    if lanes * issue_s < share * product_s:
        return None
    return (f"one product lasts {product_s * 1e6:.0f} us on the device and issuing one takes {issue_s * 1e6:.0f} us "
            f"on the host: {lanes} lanes fed by one thread would time the thread, not the devices")  # fmt: skip


class ParallelPair:
    """The same N works of float32 products, run at once on N lanes and in sequence on lane 0.

    ``devbench.engine.lanes.Lanes`` runs the lanes: N GPUs (a stream each), one GPU given N
    times (N streams on it), or CPU threads. Each lane owns its ``Matmul`` so no two lanes
    write one output; the sequential twin runs N ``Matmul`` on lane 0. Every product is
    checked once; a lane's work is then sized, after a warm-up of both runs (threads,
    cuBLAS handles and per-stream workspaces), to last about ``run_s / N`` seconds: the sequential run
    lasts about ``run_s`` however many lanes there are (``RUN_S``).
    """

    def __init__(self, n: int, lanes: Sequence[torch.device | str], run_s: float = RUN_S) -> None:
        if len(lanes) < 2:
            raise ValueError(f"parallel work needs at least 2 lanes, got {len(lanes)}")
        self.lanes = Lanes(lanes)
        devices = self.lanes.devices
        self.par = [Matmul(n, "float32", d) for d in devices]
        self.seq = [Matmul(n, "float32", devices[0]) for _ in devices]
        for mm in (*self.par, *self.seq):
            mm.check()
        self.reps = 1
        self.issue_s = self.product_s = 0.0
        with tf32(False):  # float32 products, whatever a workload before this one in the process left set
            self.run_parallel()
            self.run_sequential()
            warm = self.run_parallel()
            self.reps = max(1, math.ceil(run_s / len(devices) / max(warm, 1e-6)))
            if self.lanes.cuda:
                self.issue_s = self._issue_s()
                self.product_s = self.run_sequential() / (len(self.seq) * self.reps)

    def _issue_s(self) -> float:
        """Host seconds to issue one product on a lane, queued as the parallel run queues them (each under its
        lane's stream, the lanes in turn): the stream switches are the host's work too."""
        return self.lanes.issue_s(self.par, ISSUE_CALLS)

    def host_bound(self) -> str | None:
        """Why this pair's speedup would time the issuing thread (CUDA lanes only), or None."""
        if not self.lanes.cuda:
            return None
        return host_bound_reason(len(self.lanes), self.issue_s, self.product_s)

    def run_parallel(self) -> float:
        """Seconds for every lane's ``reps`` products at once, every device synchronized."""
        return self.lanes.run(self.par, self.reps).wall

    def run_sequential(self) -> float:
        """Seconds for the same works one after another on lane 0."""
        return self.lanes.sequential(self.seq, self.reps)

    def pairs(self, count: int | None = None) -> list[tuple[float, float]]:
        """(sequential, parallel) seconds of pairs run back to back, each run first in every other pair (drift hits
        both alike): ``count`` of them, or
        ``DEVBENCH_BLOCKS``, else until asv's 99% interval of their speedup is within 0.5% of its median or the
        benchmark's cap has passed (``measure.sampled``): the speedup, its efficiency and both times are counted
        from the same pairs."""
        got: list[tuple[float, float]] = []

        def one() -> float:
            # the two runs take turns going first: the lanes idle through a sequential run (only lane 0 works), so
            # a parallel run always after one would always start them cold
            if len(got) % 2:
                par = self.run_parallel()
                seq = self.run_sequential()
            else:
                seq = self.run_sequential()
                par = self.run_parallel()
            got.append((seq, par))
            return seq / par

        with tf32(False):
            sampled(one, count)
        return got
