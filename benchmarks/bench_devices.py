"""Cost of the chapter's device helpers, and the versions a run really used.

Moves and copies are in bench_transfer (``SameDeviceMove``, ``HostDevice``).
"""

from pathlib import Path

from devbench.engine.devices import initialise_cuda, num_gpus, run_info, try_all_gpus, try_gpu
from devbench.engine.suite import Benchmark
from devbench.records import runinfo


class RunInfo:
    """Records the torch, CUDA and driver versions this environment really runs.

    ``setup_cache`` runs once per environment and run, in the benchmark's own Python, and
    appends a line to ``.asv/runinfo/<env>.jsonl`` for ``devbench report``.
    """

    def setup_cache(self):
        # asv's "existing" environments pass no ASV_* variables and run setup_cache in a
        # temporary folder: locate .asv/ from this file (benchmark_dir is never copied).
        return str(runinfo.record(run_info(), Path(__file__).resolve().parents[1] / runinfo.RUNINFO_DIR))

    def track_gpu_count(self, record_path):
        return num_gpus()

    track_gpu_count.unit = "GPUs"


class TryGpu(Benchmark):
    """``try_gpu()`` asks the driver how many GPUs there are; code calls it per batch.

    A call takes microseconds: the class's sampling (``sample_time``, at least 0.2 s of
    calls a sample) is what keeps its samples from spanning a fraction of a millisecond
    (docs/noise.md, "Where a figure's spread comes from").
    """

    samples_gpu_state = False  # microseconds a call: no sampling thread beside it
    #: a sample (and a block of devbench compare) of 0.2 s of calls: at 0.05 s, on the 2-vCPU VM with both cores
    #: busy, pairs of blocks of microsecond calls spread so that compare could not see a change under 27-38%
    #: (median), at 0.2 s 5-7%; idle, alike (reports/compare-power, "The block length of the microsecond figures")
    sample_time = 0.2
    #: 2: CUDA is initialised first where it can be, as in a training loop: torch then keeps the device count,
    #: where before each call loaded NVML and counted the devices again; 3: samples of 0.2 s, not 0.05
    work_version = 3

    def setup(self):
        initialise_cuda()

    def time_try_gpu(self):
        try_gpu()

    def time_try_all_gpus(self):
        try_all_gpus()
