"""Exercise 4: independent matmuls on N GPUs at once vs one after another, and analogs."""

import torch

from devbench.engine.devices import num_gpus
from devbench.engine.measure import pin_threads
from devbench.engine.suite import Benchmark, once, require_device, require_gpus, shared, with_samples
from devbench.records.spec import parallel_ideal
from devbench.workloads.parallel import ParallelPair

MODES = ["gpus", "streams", "cpu_threads"]
SIZES = [1024, 4096, 8192]


class ParallelMatmul(Benchmark):
    """N lanes of float32 matmuls at once vs the same work one after another on one lane.

    ``gpus``: every GPU (at least two), ideal speedup N; the sequential twin runs all N
    works on GPU 0. ``streams``: two CUDA streams on one GPU (overlap on one device; a
    large product already fills the GPU: ideal 1, and efficiency is measured against it). ``cpu_threads``: two Python
    threads with one intra-op thread each (torch releases the GIL), ideal 2 on 2 cores,
    and sensitive to a noisy host (figures in benchmarks/README.md). The sequential run is
    sized to last about 0.4 s (a lane's work 0.4 s / N: 0.2 s on two lanes).
    """

    params = [MODES, SIZES]
    param_names = ["mode", "n"]
    #: devbench gpu-run (devbench.gpu.plan): n=4096 first; two GPUs for "gpus", one for "streams"
    headline = [{"n": [4096]}]
    plan_gpus = {"mode": {"gpus": 2, "streams": 1}}
    skips = [{"where": {"mode": ["cpu_threads"], "n": [4096, 8192]},
              "reason": "the CPU analog runs at n=1024: a larger product takes seconds on one core"}]  # fmt: skip
    swept = True
    #: 2: each lane's work lasts 0.2 s (0.05 s before); 3: efficiency over the ideal (``spec.parallel_ideal``:
    #: 1 for two streams on one GPU), not over the lanes; 4: the times became track_ figures of the measuring
    #: process's; 5: the four figures count one set of pairs (a sequential run, then a parallel one), taken until
    #: the speedup is within 0.5% or the cap; 6: N lanes share the sequential run's 0.4 s (a lane 0.4 s / N; two
    #: lanes' work is as it was, more GPUs' lanes are shorter); 7: the two runs of a pair take turns going first,
    #: float32 without TF32 whatever the process had set
    work_version = 7
    #: a sample is a pair of runs, about 0.6 s on two lanes and less on more (all lanes' works in turn, 0.4 s, then at
    #: once): what gpu-run prices
    sample_time = 0.6
    #: 8 pairs, or 2 s, for 0.5%
    sample_cap = (2.0, 8)

    def setup(self, mode, n):
        if mode == "gpus":
            devices = require_gpus(max(2, num_gpus()))
        elif mode == "streams":
            dev = require_device("cuda")
            devices = [dev, dev]
        elif mode == "cpu_threads":
            pin_threads(1)
            devices = [torch.device("cpu")] * 2
        else:
            raise ValueError(f"unknown mode {mode!r}")
        # sized and checked once per process: asv runs setup again before every sample
        self.pair = once(("ParallelMatmul", mode, n), lambda: ParallelPair(n, devices))
        reason = self.pair.host_bound()
        if reason:
            raise NotImplementedError(reason)

    def _pairs(self, figure):
        return shared(self, figure, self.pair.pairs)  # every figure counts the same pairs of runs

    def track_parallel_time(self, mode, n):
        return with_samples(par for _, par in self._pairs("parallel_time"))

    def track_sequential_time(self, mode, n):
        return with_samples(seq for seq, _ in self._pairs("sequential_time"))

    track_parallel_time.unit = track_sequential_time.unit = "seconds"

    def track_speedup(self, mode, n):
        return with_samples(seq / par for seq, par in self._pairs("speedup"))

    track_speedup.unit = "x"

    def track_efficiency(self, mode, n):
        ideal = parallel_ideal(mode, len(self.pair.lanes))  # two streams on one GPU: 1
        return with_samples(100.0 * seq / par / ideal for seq, par in self._pairs("efficiency"))

    track_efficiency.unit = "%"
