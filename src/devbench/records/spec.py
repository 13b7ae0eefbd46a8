"""What the suite's figures are: units, sizes, work formulas, and the identity of every figure read back.

Torch-free and asv-free, so the report, validate and the workloads share one source:
the benchmarks compute their figures with these formulas, and the report and
``devbench validate`` find them by these identities. ``tests/test_spec.py`` fails when
an identity names a benchmark, a parameter or a unit that ``benchmarks/`` does not define.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# --- Units -----------------------------------------------------------------------------------------------

SECONDS = "seconds"
MICROSECONDS = "us"
GBPS = "GB/s"  # decimal, 1e9 bytes/s (nvbandwidth, nccl-tests)
TFLOPS = "TFLOP/s"  # decimal, 1e12 floating-point operations/s
RATIO = "x"
PERCENT = "%"

#: Units where a larger value is better; seconds and bytes are smaller-is-better; a ratio says larger/smaller.
HIGHER_IS_BETTER = frozenset({GBPS, TFLOPS, "GFLOP/s", PERCENT})
LOWER_IS_BETTER = frozenset({SECONDS, MICROSECONDS, "bytes"})


def better(unit: str) -> str:
    """``"higher"``, ``"lower"`` or ``""`` (a ratio or an unknown unit: no direction)."""
    return "higher" if unit in HIGHER_IS_BETTER else "lower" if unit in LOWER_IS_BETTER else ""


#: which way is better for figures whose unit does not say (ratios), by benchmark key
RATIO_BETTER = {
    "bench_matmul.MatmulSpeedup.track_gpu_over_cpu": "higher",
    "bench_parallel.ParallelMatmul.track_speedup": "higher",
    "bench_transfer.CopyComputeOverlap.track_overlap": "higher",
    "bench_logging.LogNorms.track_vs_on_device": "lower",  # cost relative to logging on the device
}

#: records of the machine, not measurements: never judged as faster or slower
RECORDS = frozenset({
    "bench_transfer.PeerCopy.track_peer_access",
    "bench_transfer.PeerCopy.track_nvlink_share",
    "bench_devices.RunInfo.track_gpu_count",
})  # fmt: skip


#: Figures that repeat another figure's evidence (its twin), by benchmark key -> the key judged instead.
#: ``time_`` figures (and swept classes' ``track_time``) that time the very work of a ``track_`` figure, and
#: ``track_`` figures that are
#: another in other units (bandwidth of a collective's time, read+write bytes of a copy's, efficiency of
#: a speedup). asv keeps both; ``devbench compare`` judges the twin's partner (per-block samples) and leaves
#: the twin out unless asked (``--twins``): the same evidence measured twice costs twice and is judged twice.
TWINS = {
    "bench_matmul.MatmulSquare.track_time": "bench_matmul.MatmulSquare.track_tflops",
    "bench_transfer.DeviceCopy.track_time": "bench_transfer.DeviceCopy.track_gbps_copied",
    "bench_transfer.DeviceCopy.track_gbps_read_write": "bench_transfer.DeviceCopy.track_gbps_copied",
    "bench_transfer.HostDevice.track_time": "bench_transfer.HostDevice.track_gbps",
    "bench_parallel.ParallelMatmul.track_efficiency": "bench_parallel.ParallelMatmul.track_speedup",
    "bench_collectives.Collectives.track_algbw": "bench_collectives.Collectives.track_time",
    "bench_collectives.Collectives.track_busbw": "bench_collectives.Collectives.track_time",
    "bench_transfer.PeerCopy.track_time": "bench_transfer.PeerCopy.track_gbps",
}

#: Figures counted from the blocks (or the trace) another figure of the same workload measured (``suite.shared``,
#: ``suite.once``): gpu-run
#: prices them no sampling of their own (``devbench.gpu.plan``). A pair ``(figure, {param: [values]})`` holds at
#: those points only (a blocking copy's waited time is its GB/s blocks on the host's clock; a non-blocking
#: copy's is a loop of its own).
SAME_BLOCKS = {
    "bench_transfer.HostDevice.track_time": ("bench_transfer.HostDevice.track_gbps", {"mode": ["blocking"]}),
    "bench_logging.LogNorms.track_vs_on_device": "bench_logging.LogNorms.track_time",
    "bench_transfer.DeviceCopy.track_gbps_read_write": "bench_transfer.DeviceCopy.track_gbps_copied",
    "bench_transfer.HostDeviceBidirectional.track_h2d_gbps": "bench_transfer.HostDeviceBidirectional.track_total_gbps",
    "bench_transfer.HostDeviceBidirectional.track_d2h_gbps": "bench_transfer.HostDeviceBidirectional.track_total_gbps",
    "bench_transfer.CopyComputeOverlap.track_hidden": "bench_transfer.CopyComputeOverlap.track_overlap",
    "bench_parallel.ParallelMatmul.track_efficiency": "bench_parallel.ParallelMatmul.track_speedup",
    "bench_parallel.ParallelMatmul.track_parallel_time": "bench_parallel.ParallelMatmul.track_speedup",
    "bench_parallel.ParallelMatmul.track_sequential_time": "bench_parallel.ParallelMatmul.track_speedup",
    # one trace of the copy's path (``PeerCopy._path``, once per process) gives both
    "bench_transfer.PeerCopy.track_peer_access": "bench_transfer.PeerCopy.track_nvlink_share",
}


def direction(benchmark: str, unit: str) -> str:
    """``"higher"``/``"lower"`` is better for this figure, ``""`` for a record or an unknown ratio."""
    if benchmark in RECORDS:
        return ""
    return RATIO_BETTER.get(benchmark) or better(unit)


# --- Sizes -----------------------------------------------------------------------------------------------

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def size_label(nbytes: float) -> str:
    """``4096`` -> ``"4 KiB"``: the largest binary unit that divides the size exactly."""
    n = int(nbytes)
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


# --- Work formulas ---------------------------------------------------------------------------------------


def matmul_flops(n: float) -> float:
    """Floating-point operations of one n x n by n x n product (n^2 dot products of length n)."""
    return 2 * n**3


def gbps(nbytes: float, seconds: float) -> float:
    """Decimal GB/s."""
    return nbytes / seconds / 1e9


def tflops(flop: float, seconds: float) -> float:
    """Decimal TFLOP/s."""
    return flop / seconds / 1e12


COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' factor from algorithm bandwidth to bus bandwidth for ``world`` ranks."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    if op == "all_reduce":
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter"):
        return (world - 1) / world
    if op in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}; expected one of {COLLECTIVE_OPS}")


def parallel_ideal(mode: str, lanes: int) -> int:
    """The speedup ``ParallelMatmul`` would reach with no loss: one per device the lanes run on. ``streams``
    puts both lanes on one GPU, whose SMs a product that fills it already uses: its ideal is 1, not 2."""
    return 1 if mode == "streams" else lanes


# --- Parameter labels ------------------------------------------------------------------------------------


def params_label(names: Sequence[str], values: Sequence[Any]) -> str:
    """``"device=cpu, dtype=float32, n=256"``: how the report labels a parameter combination."""
    return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))


# --- Figure identities -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One figure as asv stores it: benchmark key, the params read from it, and its unit."""

    benchmark: str  # asv's key: "<module>.<Class>.<method>"
    params: tuple[str, ...]  # asv param_names, in order
    unit: str

    @property
    def better(self) -> str:
        return better(self.unit)

    def label(self, **values: Any) -> str:
        """The report's params label of one combination; every param must be given."""
        if set(values) != set(self.params):
            raise ValueError(f"{self.benchmark} takes params {self.params}, got {sorted(values)}")
        return params_label(self.params, [values[p] for p in self.params])


MATMUL_TFLOPS = Figure("bench_matmul.MatmulSquare.track_tflops", ("device", "dtype", "n"), TFLOPS)
MATMUL_TIME = Figure("bench_matmul.MatmulSquare.track_time", ("device", "dtype", "n"), SECONDS)
MATMUL_SPEEDUP = Figure("bench_matmul.MatmulSpeedup.track_gpu_over_cpu", ("dtype", "n"), RATIO)
LAUNCH_US = Figure("bench_launch.LaunchOverhead.track_us", ("device", "task", "mode"), MICROSECONDS)
ACHIEVABLE_TFLOPS = Figure("bench_achievable.MatmulAchievable.track_tflops", ("device", "dtype", "run"), TFLOPS)

HOST_DEVICE_GBPS = Figure("bench_transfer.HostDevice.track_gbps", ("direction", "memory", "mode", "nbytes"), GBPS)
HOST_DEVICE_TIME = Figure("bench_transfer.HostDevice.track_time", ("direction", "memory", "mode", "nbytes"), SECONDS)
DEVICE_COPY_GBPS = Figure("bench_transfer.DeviceCopy.track_gbps_copied", ("device", "nbytes"), GBPS)
DEVICE_COPY_RW_GBPS = Figure("bench_transfer.DeviceCopy.track_gbps_read_write", ("device", "nbytes"), GBPS)
DEVICE_COPY_TIME = Figure("bench_transfer.DeviceCopy.track_time", ("device", "nbytes"), SECONDS)
PEER_COPY_GBPS = Figure("bench_transfer.PeerCopy.track_gbps", ("route", "nbytes"), GBPS)
PEER_COPY_TIME = Figure("bench_transfer.PeerCopy.track_time", ("route", "nbytes"), SECONDS)
PEER_ACCESS = Figure("bench_transfer.PeerCopy.track_peer_access", ("route", "nbytes"), "bool")
PEER_NVLINK_SHARE = Figure("bench_transfer.PeerCopy.track_nvlink_share", ("route", "nbytes"), "fraction")
PEER_MATRIX_SLOWEST = Figure("bench_transfer.PeerMatrix.track_slowest_gbps", ("nbytes",), GBPS)
PEER_MATRIX_MEDIAN = Figure("bench_transfer.PeerMatrix.track_median_gbps", ("nbytes",), GBPS)

LOG_NORMS_TIME = Figure("bench_logging.LogNorms.track_time", ("device", "strategy", "steps", "n"), SECONDS)

PARALLEL_SEQUENTIAL = Figure("bench_parallel.ParallelMatmul.track_sequential_time", ("mode", "n"), SECONDS)
PARALLEL_PARALLEL = Figure("bench_parallel.ParallelMatmul.track_parallel_time", ("mode", "n"), SECONDS)

_COLLECTIVE_PARAMS = ("backend", "world", "op", "nbytes")
COLLECTIVE_BUSBW = Figure("bench_collectives.Collectives.track_busbw", _COLLECTIVE_PARAMS, GBPS)
COLLECTIVE_ALGBW = Figure("bench_collectives.Collectives.track_algbw", _COLLECTIVE_PARAMS, GBPS)
COLLECTIVE_TIME = Figure("bench_collectives.Collectives.track_time", _COLLECTIVE_PARAMS, SECONDS)

#: How the report names each copy benchmark's rows (the params that tell the copies apart).
COPY_KINDS: Mapping[Figure, tuple[str, ...]] = {
    HOST_DEVICE_GBPS: ("direction", "memory", "mode"),
    HOST_DEVICE_TIME: ("direction", "memory", "mode"),
    DEVICE_COPY_GBPS: ("device",),
    DEVICE_COPY_TIME: ("device",),
    PEER_COPY_GBPS: ("route",),
    PEER_COPY_TIME: ("route",),
}

#: Every figure the report or validate reads by name.
FIGURES: tuple[Figure, ...] = (
    MATMUL_TFLOPS, MATMUL_TIME, MATMUL_SPEEDUP, ACHIEVABLE_TFLOPS, LAUNCH_US,
    HOST_DEVICE_GBPS, HOST_DEVICE_TIME, DEVICE_COPY_GBPS, DEVICE_COPY_RW_GBPS, DEVICE_COPY_TIME, PEER_COPY_GBPS,
    PEER_COPY_TIME, PEER_ACCESS, PEER_NVLINK_SHARE, PEER_MATRIX_SLOWEST, PEER_MATRIX_MEDIAN, LOG_NORMS_TIME,
    PARALLEL_SEQUENTIAL, PARALLEL_PARALLEL,
    COLLECTIVE_BUSBW, COLLECTIVE_ALGBW, COLLECTIVE_TIME,
)  # fmt: skip


# --- Points read by name -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One combination of one figure that devbench reads by name: gpu-run's health lines, validate, the plan."""

    figure: Figure
    values: Mapping[str, Any] = field(hash=False, compare=False)
    label: str = ""

    def __post_init__(self) -> None:
        if set(self.values) != set(self.figure.params):
            raise ValueError(f"{self.figure.benchmark} takes params {self.figure.params}, got {sorted(self.values)}")

    @property
    def params(self) -> tuple[Any, ...]:
        """The values in asv's parameter order."""
        return tuple(self.values[p] for p in self.figure.params)

    @property
    def selector(self) -> str:
        """asv's name of the point, ``module.Class.method(repr(value), ...)``, as ``--bench`` matches it."""
        return f"{self.figure.benchmark}({', '.join(repr(v) for v in self.params)})"


#: The pinned host<->device copies that stand for the link: validate cross-checks them and gpu-run judges them
#: against the link (one mode for both, so that one figure serves both).
LINK_COPY = {"memory": "pinned", "mode": "non_blocking", "nbytes": 256 * MiB}

#: Each headline GPU figure gpu-run judges against what the machine should do, with the kind of expected figure
#: (``devbench.records.expected.expected``).
HEALTH_POINTS: tuple[tuple[Point, str], ...] = (
    (Point(HOST_DEVICE_GBPS, {"direction": "h2d", **LINK_COPY}, "pinned h2d 256 MiB"), "h2d"),
    (Point(HOST_DEVICE_GBPS, {"direction": "d2h", **LINK_COPY}, "pinned d2h 256 MiB"), "d2h"),
    (Point(DEVICE_COPY_RW_GBPS, {"device": "cuda", "nbytes": GiB}, "device copy 1 GiB, r+w"), "device_copy"),
    (Point(ACHIEVABLE_TFLOPS, {"device": "cuda", "dtype": "bfloat16", "run": "best"}, "achievable bf16, best shape"),
     "achievable:bfloat16"),
    (Point(ACHIEVABLE_TFLOPS, {"device": "cuda", "dtype": "bfloat16", "run": "sustained"},
           "achievable bf16, sustained"), "achievable:bfloat16"),
    (Point(MATMUL_TFLOPS, {"device": "cuda", "dtype": "bfloat16", "n": 8192}, "bfloat16 n=8192"), "matmul:bfloat16"),
    (Point(MATMUL_TFLOPS, {"device": "cuda", "dtype": "float32", "n": 8192}, "float32 n=8192"), "matmul:float32"),
    (Point(PEER_COPY_GBPS, {"route": "0->1", "nbytes": 256 * MiB}, "GPU 0->1 256 MiB"), "peer"),
    (Point(PEER_MATRIX_SLOWEST, {"nbytes": 256 * MiB}, "peer matrix, slowest pair"), "peer"),
    (Point(COLLECTIVE_BUSBW, {"backend": "nccl", "world": 2, "op": "all_reduce", "nbytes": 256 * MiB},
           "all_reduce busbw, 2 GPUs"), "busbw"),
)  # fmt: skip

#: The figures ``devbench validate`` cross-checks on every machine (the CPU's), and on a GPU too (``VALIDATED_GPU``).
VALIDATED_CPU: tuple[Point, ...] = (
    *(Point(MATMUL_TFLOPS, {"device": "cpu", "dtype": "float32", "n": n}, f"matmul float32 n={n} cpu")
      for n in (256, 1024, 4096)),
    *(Point(DEVICE_COPY_GBPS, {"device": "cpu", "nbytes": nbytes}, f"host copy {size_label(nbytes)}")
      for nbytes in (MiB, 64 * MiB)),
)  # fmt: skip

#: ``devbench validate``'s row of the bf16 product of ``VALIDATED_GPU`` timed again as a plain ``torch.mm`` loop
VALIDATED_PLAIN_MM = "vs plain torch.mm (sustained)"

#: The GPU figures ``devbench validate`` cross-checks.
VALIDATED_GPU: tuple[Point, ...] = (
    *(Point(MATMUL_TFLOPS, {"device": "cuda", "dtype": "float32", "n": n}, f"matmul float32 n={n} cuda")
      for n in (256, 1024, 4096)),
    *(Point(HOST_DEVICE_GBPS, {"direction": d, **LINK_COPY}, f"pinned {d} 256 MiB") for d in ("h2d", "d2h")),
    Point(DEVICE_COPY_GBPS, {"device": "cuda", "nbytes": GiB}, "device copy 1 GiB cuda"),
    Point(MATMUL_TFLOPS, {"device": "cuda", "dtype": "bfloat16", "n": 8192}, "matmul bfloat16 n=8192 cuda"),
)  # fmt: skip


#: the product of ``VALIDATED_GPU`` that validate times again as a plain ``torch.mm`` loop (``VALIDATED_PLAIN_MM``)
VALIDATED_PLAIN_OF: Point = next(p for p in VALIDATED_GPU if p.values.get("dtype") == "bfloat16")


def validated(gpus: bool, gpu_only: bool = False) -> tuple[Point, ...]:
    """The points ``devbench validate`` reads on a machine with or without a GPU (``gpu_only``: the GPU's alone)."""
    return (*(() if gpu_only else VALIDATED_CPU), *(VALIDATED_GPU if gpus else ()))


def kept_points(validating: bool = True, gpus: bool = True, gpu_only: bool = False) -> tuple[Point, ...]:
    """The points a time-boxed run never drops (``devbench.gpu.plan``): what the health lines read, and what its
    validate reads where it runs one (``validated``)."""
    seen: dict[str, Point] = {}
    for p in (*(p for p, _ in HEALTH_POINTS), *(validated(gpus, gpu_only) if validating else ())):
        seen.setdefault(p.selector, p)
    return tuple(seen.values())


def call_flop(benchmark: str, params: dict[str, str]) -> float | None:
    """Floating-point operations of one call of ``benchmark`` at ``params`` (its values as text), where a call is one
    square product (``MATMUL_TFLOPS``, ``MATMUL_TIME``); None for any other figure. What gpu-run's plan prices a CPU
    product's block with (``devbench.gpu.declared.call_s``)."""
    if benchmark not in (MATMUL_TFLOPS.benchmark, MATMUL_TIME.benchmark) or not str(params.get("n", "")).isdigit():
        return None
    return float(matmul_flops(int(params["n"])))
