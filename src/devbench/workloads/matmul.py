"""Square matrix products on any device, with their float64 check (exercise 1)."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from devbench.engine.devices import synchronize
from devbench.engine.measure import MATMUL_BLOCK_S, SEED, randn, warm_up

#: Param value -> (storage dtype, TF32 allowed for float32 matmul).
DTYPES: dict[str, tuple[torch.dtype, bool]] = {
    "float32": (torch.float32, False),
    "tf32": (torch.float32, True),
    "bfloat16": (torch.bfloat16, False),
    "float16": (torch.float16, False),
}

#: Relative Frobenius error allowed against float64, by dtype: a few units of the
#: format's rounding times sqrt(n) growth is below these for random normal inputs, far below
#: but for tf32 (its inputs rounded to 10 mantissa bits give about 3e-4 at k up to 8,192,
#: truncated about 8e-4, in a simulation on the CPU; the H200's tf32 products passed at n=8,192).
TOLERANCE: dict[str, float] = {"float32": 1e-5, "tf32": 1e-3, "bfloat16": 1e-2, "float16": 1e-2}

#: Rows of the product checked against float64 when n is large (the full float64
#: reference at 8192 would cost more than the benchmark).
CHECK_ROWS = 128


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Allow (or forbid) TF32 for float32 matmul on CUDA, restoring the setting after."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


#: set (to 1) in NVIDIA's NGC PyTorch images: cuBLAS then runs float32 products in TF32 whatever torch asks
TF32_OVERRIDE_ENV = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"
#: NVIDIA's own switch: 0 turns TF32 off in every NVIDIA library (cuBLAS, cuDNN) whatever torch asks
NVIDIA_TF32_ENV = "NVIDIA_TF32_OVERRIDE"


def tf32_override_reason(device: torch.device, dtype: str) -> str | None:
    """Why a float32 or tf32 product on ``device`` would not be what its name says here (an override of TF32 in
    the environment), or None. A check cannot tell: float32 passes TF32's looser tolerance."""
    if torch.device(device).type != "cuda":
        return None
    value, off = os.environ.get(TF32_OVERRIDE_ENV, ""), os.environ.get(NVIDIA_TF32_ENV, "")
    if dtype == "float32" and value.strip() not in ("", "0"):
        return (f"{TF32_OVERRIDE_ENV}={value} forces TF32 in cuBLAS under float32, so a float32 figure would be a "
                f"TF32 one: unset it to measure float32 (the tf32 figures measure TF32)")  # fmt: skip
    if dtype == "tf32" and off.strip() == "0":
        return (f"{NVIDIA_TF32_ENV}=0 turns TF32 off in NVIDIA's libraries, so a tf32 figure would be a float32 one: "
                "unset it to measure TF32")  # fmt: skip
    return None


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_skip_reason(dtype: str, n: int) -> str | None:
    """Why a CPU product of this dtype and size is not measured, or ``None``."""
    flags = _cpu_flags()
    if dtype == "tf32":
        return "TF32 is a GPU tensor-core mode; on the CPU it is float32"
    if n > 4096:
        return f"n={n} on the CPU takes seconds per product; the CPU curve stops at 4096"
    if dtype == "float16" and not flags & {"avx512_fp16", "amx_fp16"}:
        return "no float16 fast path on this CPU (needs AVX512-FP16 or AMX-FP16): emulated, ~100x slower"
    if dtype == "bfloat16" and n >= 1024 and not flags & {"avx512_bf16", "amx_bf16"}:
        # emulated, a 1,024 product takes seconds on two cores (2.4 s on the 2-vCPU AMD EPYC without it)
        return "no bfloat16 fast path on this CPU (needs AVX512-BF16 or AMX): emulated, the curve stops at 256"
    return None


@dataclass
class Matmul:
    """``sets`` seeded input pairs and outputs of one size and dtype on one device.

    Square (n x n times n x n) unless ``m`` and ``k`` are given: then an (m x k) times
    (k x n) product. Calling it computes the next product in rotation, so consecutive
    calls do not reuse the last call's operands. Where the sets together fit in a cache
    (float32 up to n=1,024 in an H100's or H200's 50 MB L2, or a CPU's L3), every call's
    operands are in it: the figure there is a product from cache, as in cuBLAS's and
    mamf-finder's loops over one pair.
    """

    n: int
    dtype: str
    device: torch.device
    sets: int = 2
    m: int | None = None
    k: int | None = None
    #: inputs drawn by the device's own seeded generator on the CPU too (``drawn_on_device``: a CUDA device's always
    #: are); the check's float64 reference is computed where they are (``reference_on_device``)
    on_device: bool = False
    #: seconds of one warm call when ``checked`` learned it from the check (a call long enough to
    #: fill a block on its own), else ``None``: what block sizing can start from without a call
    warm_call_s: float | None = field(default=None, init=False, repr=False)
    #: seconds of each call the last ``check`` made, in order (the first is cold)
    check_call_s: list[float] = field(default_factory=list, init=False, repr=False)

    @property
    def drawn_on_device(self) -> bool:
        """Whether the inputs are drawn by the device's own seeded generator: on a CUDA device (a host's draw of one
        8,192 x 8,192 float32 normal matrix took 0.7 s on one core, and a product at n=8192 draws four: most of
        its set-up), or where asked (``on_device``). Else seeded on the host (``randn``: the same values on every
        device), as a CPU product's are."""
        return self.on_device or self.device.type == "cuda"

    @property
    def reference_on_device(self) -> bool:
        """Whether the check's float64 product runs where the inputs are (``drawn_on_device``): on a CUDA device its
        float64 units are IEEE's, and a product of 128 rows there takes milliseconds where copying B back and
        converting it on the host took about half a second a set at n=8192. A CPU product's reference is the
        host's own."""
        return self.drawn_on_device

    @property
    def shape(self) -> tuple[int, int, int]:
        """(m, k, n): A is m x k, B is k x n."""
        m = self.n if self.m is None else self.m
        k = self.n if self.k is None else self.k
        return (m, k, self.n)

    @property
    def flops(self) -> int:
        """Floating-point operations of one product: 2 m k n."""
        m, k, n = self.shape
        return 2 * m * k * n

    @property
    def label(self) -> str:
        m, k, n = self.shape
        return f"n={n}" if m == k == n else f"{m}x{k}x{n}"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {list(DTYPES)}")
        if self.sets < 1:
            raise ValueError(f"sets must be >= 1, got {self.sets}")
        if min(self.shape) < 1:
            raise ValueError(f"matmul dimensions must be >= 1, got m, k, n = {self.shape}")
        reason = tf32_override_reason(self.device, self.dtype)
        if reason:
            raise NotImplementedError(reason)  # asv records it as a skip with this reason
        torch_dtype, self.allow_tf32 = DTYPES[self.dtype]
        m, k, n = self.shape
        draw = self._drawn if self.drawn_on_device else randn
        self.inputs = [
            (
                draw((m, k), dtype=torch_dtype, device=self.device, seed=SEED + 2 * i),
                draw((k, n), dtype=torch_dtype, device=self.device, seed=SEED + 2 * i + 1),
            )
            for i in range(self.sets)
        ]
        self.outputs = [torch.empty((m, n), dtype=torch_dtype, device=self.device) for _ in self.inputs]
        self._next = 0

    @staticmethod
    def _drawn(shape: tuple[int, int], *, dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
        """Seeded standard normals drawn on ``device`` itself by its own generator: on the CPU ``randn``'s values, on a
        GPU values of its own, the same on every GPU of one model (its launch grid sets which thread draws which)."""
        gen = torch.Generator(device=device).manual_seed(seed)
        return torch.randn(shape, generator=gen, dtype=torch.float32, device=device).to(dtype)

    def __call__(self) -> torch.Tensor:
        i = self._next
        self._next = (i + 1) % self.sets
        a, b = self.inputs[i]
        return torch.mm(a, b, out=self.outputs[i])

    def check(self) -> float:
        """Run every input set once and compare with float64; return the worst error.

        Raises ``AssertionError`` naming the size, dtype and device when the relative
        Frobenius error exceeds ``TOLERANCE[dtype]``.
        """
        worst = 0.0
        gen = torch.Generator().manual_seed(SEED)
        m = self.shape[0]
        rows = torch.randperm(m, generator=gen)[: min(m, CHECK_ROWS)].sort().values
        self.check_call_s = []
        with tf32(self.allow_tf32):
            for _ in range(self.sets):
                i = self._next
                # NaN first: a call that wrote nothing would otherwise pass on what an earlier product left there
                # (a measuring process reuses memory across workloads, and cudaMalloc does not clear it)
                self.outputs[i].fill_(float("nan"))
                synchronize(self.device)  # the fill is not the checked call's time (its first sizes the blocks)
                # The very call that is timed, checked on a sample of its output rows.
                start = time.perf_counter()
                out = self()
                synchronize(self.device)
                self.check_call_s.append(time.perf_counter() - start)
                a, b = self.inputs[i]
                picked = rows.to(self.device)
                got = out[picked].double().cpu()
                if self.reference_on_device:  # where the inputs are; the sampled rows alone come back
                    want = (a[picked].double() @ b.double()).cpu()
                else:
                    want = a[picked].cpu().double() @ b.cpu().double()
                if not torch.isfinite(got).all():
                    raise AssertionError(f"matmul {self.label} {self.dtype} on {self.device}: non-finite output")
                worst = max(worst, float((got - want).norm() / want.norm()))
        if worst > TOLERANCE[self.dtype]:
            raise AssertionError(
                f"matmul {self.label} {self.dtype} on {self.device}: relative error {worst:.2e} "
                f"exceeds {TOLERANCE[self.dtype]:.0e}"
            )
        return worst


def checked(mm: Matmul) -> Matmul:
    """``mm`` checked against float64 and warm, both under its TF32 setting: ready to be timed.

    The check's calls are the first. When its last call (after at least one other) alone took a
    block's time (a 4096 product on two CPU cores, about a second), that call was warm: it is kept
    as ``warm_call_s`` and no more calls are spent warming up or sizing blocks. Otherwise ``mm``
    is warmed up as any timed function is.
    """
    with tf32(mm.allow_tf32):
        mm.check()
        last = mm.check_call_s[-1]
        if mm.sets > 1 and last >= MATMUL_BLOCK_S:
            mm.warm_call_s = last
        else:
            warm_up(mm, mm.device, repeats=2, enough_s=MATMUL_BLOCK_S)
    return mm


def warmed(mm: Matmul) -> Matmul:
    """``mm`` warm under its TF32 setting, unchecked: for a process whose workload another process of the same
    code and inputs has checked (``devbench.engine.prepare.check_once``)."""
    with tf32(mm.allow_tf32):
        warm_up(mm, mm.device, repeats=2, enough_s=MATMUL_BLOCK_S)
    return mm


def tiny_add(numel: int, device: torch.device) -> Callable[[], torch.Tensor]:
    """An elementwise add of two ``numel``-element tensors into a preallocated output."""
    x = randn(numel, device=device)
    y = randn(numel, device=device, seed=SEED + 1)
    out = torch.empty_like(x)

    def add() -> torch.Tensor:
        return torch.add(x, y, out=out)

    got = add().cpu()
    if not torch.allclose(got, x.cpu() + y.cpu()):
        raise AssertionError(f"add of {numel} elements on {device} is wrong")
    return add
