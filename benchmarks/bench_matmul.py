"""CPU vs GPU square matmul across sizes and dtypes: time, TFLOP/s, GPU/CPU speedup, tiny ops."""

import contextlib

import torch

from devbench.engine.devices import synchronize
from devbench.engine.measure import MATMUL_BLOCK_S, measure, plan_blocks, warm_up
from devbench.engine.suite import DEVICES, Benchmark, check_once, once, require_device, waited, with_samples
from devbench.records.spec import matmul_flops as flops
from devbench.workloads.matmul import DTYPES, Matmul, checked, cpu_skip_reason, tf32, tiny_add, warmed

SIZES = [16, 64, 256, 1024, 4096, 8192]

#: Each throughput block lasts at least this long, so a CUDA sync or clock read
#: (~10 us) stays far under 1% of it (shared with `devbench validate`).
BLOCK_S = MATMUL_BLOCK_S

#: CPU/GPU block pairs behind one speedup figure (each pair is one sample)
SPEEDUP_PAIRS = 7


def _skip_reason(device: torch.device, dtype: str, n: int) -> str | None:
    if device.type == "cpu":
        return cpu_skip_reason(dtype, n)
    major, _ = torch.cuda.get_device_capability(device)
    if dtype in ("tf32", "bfloat16") and major < 8:
        return f"{dtype} matmul units need compute capability 8.0+, this GPU is {major}.x"
    return None


def _ready(key: tuple, mm: Matmul) -> Matmul:
    """``mm`` checked and warm (warm only where this side of a compare has checked it: ``check_once``)."""
    check_once(key, lambda: checked(mm), lambda: warmed(mm))
    return mm


class MatmulSquare(Benchmark):
    """C = A @ B for n x n matrices: wall time of one product and throughput in TFLOP/s.

    Inputs are seeded random normals in two rotating sets, checked once against float64.
    ``tf32`` is float32 storage with TF32 tensor cores allowed (restored in teardown).
    ``time``: seconds per product as a user waits for it (launch, work, sync), on the host's clock;
    ``tflops``: back-to-back products between CUDA events. On a GPU both are timed by the run's
    measuring process from one built workload (``swept``).
    """

    params = [DEVICES, list(DTYPES), SIZES]
    param_names = ["device", "dtype", "n"]
    #: devbench gpu-run runs these first (devbench.gpu.plan)
    headline = [{"device": ["cuda"], "n": [1024, 8192]}, {"device": ["cpu"], "dtype": ["float32"], "n": [1024]}]
    skips = [{"where": {"device": ["cpu"], "n": [8192]}, "reason": cpu_skip_reason("float32", 8192)},
             {"where": {"device": ["cpu"], "dtype": ["tf32"]}, "reason": cpu_skip_reason("tf32", 1024)}]  # fmt: skip
    swept = True
    #: a block of products lasts at least this long (both figures)
    sample_time = BLOCK_S
    #: 2: time_matmul (asv's clock, a process of its own) became track_time, timed beside track_tflops
    work_version = 2

    def setup(self, device, dtype, n):
        self._tf32 = contextlib.nullcontext()  # asv calls teardown after a skip too
        self.device = require_device(device)
        reason = _skip_reason(self.device, dtype, n)
        if reason:
            raise NotImplementedError(reason)
        self.mm = once(("MatmulSquare", device, dtype, n), lambda: _ready(("MatmulSquare", device, dtype, n),
                                                                          Matmul(n, dtype, self.device)))
        self._tf32 = tf32(self.mm.allow_tf32)
        self._tf32.__enter__()

    def teardown(self, device, dtype, n):
        self._tf32.__exit__(None, None, None)

    def track_time(self, device, dtype, n):
        return waited(self.mm, lambda: synchronize(self.device), self.sample_time, self.device)

    track_time.unit = "seconds"

    def track_tflops(self, device, dtype, n):
        # small GPU products: stream held; a product that fills a block alone was sized by its check
        plan = plan_blocks(self.mm, self.device, target_s=BLOCK_S, one_s=self.mm.warm_call_s)
        return with_samples(measure(self.mm, self.device, plan).rates(flops(n) / 1e12), plan.calls)

    track_tflops.unit = "TFLOP/s"


class MatmulSpeedup(Benchmark):
    """GPU throughput over CPU throughput for one product, both measured in this process.

    The CPU side of ``tf32`` is float32 (the CPU has no TF32). The size where the ratio
    crosses 1 is where the GPU starts to win.
    """

    params = [list(DTYPES), SIZES]
    param_names = ["dtype", "n"]
    rounds = 1
    swept = True
    #: 7 pairs of a CPU block and a GPU block of 0.1 s each
    plan_s = 1.6
    headline = [{"dtype": ["float32", "bfloat16"], "n": [1024, 4096]}]
    plan_gpus = 1
    #: the CPU side stops where the CPU curve does (declared: gpu-run neither starts nor prices these)
    skips = [{"where": {"n": [8192]}, "reason": cpu_skip_reason("float32", 8192)}]

    def setup(self, dtype, n):
        self._tf32 = contextlib.nullcontext()  # asv calls teardown after a skip too
        self.gpu = require_device("cuda")
        cpu_dtype = "float32" if dtype == "tf32" else dtype
        reason = _skip_reason(self.gpu, dtype, n) or cpu_skip_reason(cpu_dtype, n)
        if reason:
            raise NotImplementedError(reason)
        self.cpu_mm = checked(Matmul(n, cpu_dtype, torch.device("cpu")))
        self.gpu_mm = checked(Matmul(n, dtype, self.gpu))
        self._tf32 = tf32(self.gpu_mm.allow_tf32)
        self._tf32.__enter__()

    def teardown(self, dtype, n):
        self._tf32.__exit__(None, None, None)

    def track_gpu_over_cpu(self, dtype, n):
        plans = {mm.device.type: plan_blocks(mm, mm.device, target_s=BLOCK_S) for mm in (self.cpu_mm, self.gpu_mm)}
        ratios = []
        for _ in range(SPEEDUP_PAIRS):  # a CPU block then a GPU block: drift hits both sides of a pair
            cpu, gpu = (measure(mm, mm.device, plans[mm.device.type], blocks=1) for mm in (self.cpu_mm, self.gpu_mm))
            ratios.append(cpu.median / gpu.median)
        return with_samples(ratios)

    track_gpu_over_cpu.unit = "x"


class TinyOp(Benchmark):
    """One elementwise add on 1 and 1,000 elements, with the launch and the sync.

    The exercise's "task with a small number of calculations": here the GPU pays a
    kernel launch and a host-device round trip for nanoseconds of arithmetic.
    """

    params = [DEVICES, [1, 1000]]
    param_names = ["device", "numel"]
    samples_gpu_state = False  # microseconds a call: no sampling thread beside it
    #: a sample (and a block of devbench compare) of 0.2 s of calls, as TryGpu's
    sample_time = 0.2
    swept = True
    #: launches and syncs: host-bound, up to 1 s of blocks for 0.5%
    sample_cap = (1.0, 11)
    #: 2: samples of 0.2 s, not 0.05; 3: time_add became track_time, timed by the run's measuring process
    work_version = 3

    def setup(self, device, numel):
        self.device = require_device(device)
        self.add = tiny_add(numel, self.device)
        warm_up(self.add, self.device)

    def track_time(self, device, numel):
        return waited(self.add, lambda: synchronize(self.device), self.sample_time, self.device)

    track_time.unit = "seconds"
