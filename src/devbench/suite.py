"""Conventions every devbench benchmark follows (DESIGN.md, "Rules for every benchmark").

Benchmarks import these so that the rules live in one place:

* ``DEVICES`` is the device param, the same on every machine (rule 1);
* ``require_device`` turns a device name into a ``torch.device`` or raises
  ``NotImplementedError`` with the reason, which asv records as a skip (rule 1);
* ``pin_threads`` fixes and returns the CPU thread count (rule 6);
* ``randn`` makes seeded, never-zero inputs (rules 4 and 5);
* ``warm_up`` runs a callable a few times and synchronizes (rule 4);
* ``Block`` times a block of calls with CUDA events or a monotonic clock (rules 3, 7).

Nothing here touches CUDA at import time (rule 2).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from devbench.devices import num_gpus, synchronize

DEVICES: list[str] = ["cpu", "cuda"]

#: Seed for every input tensor; the same inputs on every machine and run.
SEED = 20260101

#: Environment variable that overrides the CPU thread count benchmarks pin.
THREADS_ENV = "DEVBENCH_THREADS"


def no_cuda_reason() -> str | None:
    """Why CUDA cannot be used here, or ``None`` when a GPU is visible."""
    if not torch.backends.cuda.is_built():
        return f"no CUDA: torch {torch.__version__} is a CPU-only build"
    if num_gpus() == 0:
        return "no CUDA GPU visible to this process"
    return None


def require_device(name: str, index: int = 0) -> torch.device:
    """The ``torch.device`` for param value ``name``, or skip with the reason.

    Raises ``NotImplementedError`` (asv's skip) when the device does not exist here.
    """
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        reason = no_cuda_reason()
        if reason:
            raise NotImplementedError(reason)
        if index >= num_gpus():
            raise NotImplementedError(f"needs GPU {index}, this machine has {num_gpus()}")
        return torch.device("cuda", index)
    raise ValueError(f"unknown device param {name!r}; expected one of {DEVICES}")


def require_gpus(count: int) -> list[torch.device]:
    """``count`` distinct GPUs, or skip saying how many there are."""
    reason = no_cuda_reason()
    if reason:
        raise NotImplementedError(reason)
    have = num_gpus()
    if have < count:
        raise NotImplementedError(f"needs {count} GPUs, this machine has {have}")
    return [torch.device("cuda", i) for i in range(count)]


def pin_threads(threads: int | None = None) -> int:
    """Fix torch's intra-op CPU thread count and return it.

    Default: ``$DEVBENCH_THREADS`` or the number of CPUs this process may run on, so a
    run is comparable with the next one on the same machine whatever torch guessed.
    """
    if threads is None:
        env = os.environ.get(THREADS_ENV)
        if env:
            try:
                threads = int(env)
            except ValueError:
                raise ValueError(f"{THREADS_ENV} must be an integer, got {env!r}") from None
        else:
            threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if threads < 1:
        raise ValueError(f"thread count must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    return threads


def randn(
    shape: Sequence[int] | int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = SEED,
) -> torch.Tensor:
    """Seeded standard-normal tensor, made on the CPU (same values on every device)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    t = torch.randn(shape, generator=gen, dtype=torch.float32)
    return t.to(device=device, dtype=dtype)


def warm_up(fn: Callable[[], object], device: torch.device, repeats: int = 3) -> None:
    """Run ``fn`` a few times and wait for it: context, handles, allocator, autotuning."""
    for _ in range(repeats):
        fn()
    synchronize(device)


@dataclass(frozen=True)
class BlockTiming:
    """Seconds for ``calls`` calls of one function, timed as one block."""

    seconds: float
    calls: int

    @property
    def per_call(self) -> float:
        return self.seconds / self.calls


def time_block(fn: Callable[[], object], device: torch.device, calls: int) -> BlockTiming:
    """Time ``calls`` back-to-back calls of ``fn`` on ``device`` as one block.

    On a GPU the block lies between two CUDA events on the current stream, so launch
    gaps count but the host's sync latency is paid once, not per call; on the CPU a
    monotonic clock brackets the loop.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    if device.type == "cuda":
        with torch.cuda.device(device):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return BlockTiming(start.elapsed_time(end) / 1e3, calls)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return BlockTiming(time.perf_counter() - t0, calls)


def calls_for(
    fn: Callable[[], object],
    device: torch.device,
    target_s: float = 0.05,
    max_calls: int = 10_000,
    min_calls: int = 1,
) -> int:
    """How many calls of ``fn`` fill about ``target_s`` seconds (at least ``min_calls``).

    With a block of >= 50 ms, a CUDA sync (~10 us) or clock read stays well under 1%. A
    call that alone lasts longer than ``target_s`` (a CPU product at n = 4,096) makes a
    block of its own: a second call would double the time, not the accuracy.
    """
    if min_calls < 1 or max_calls < min_calls:
        raise ValueError(f"need 1 <= min_calls <= max_calls, got {min_calls} and {max_calls}")
    one = time_block(fn, device, 1).seconds
    if one <= 0:
        return max_calls
    return int(max(min_calls, min(max_calls, target_s / one)))


#: Blocks per ``track_`` figure: its median is the figure
SAMPLES = 11


def median_block(fn: Callable[[], object], device: torch.device, calls: int, samples: int = SAMPLES) -> float:
    """Median over ``samples`` blocks of the seconds per call (nvbandwidth-style)."""
    per_call = sorted(time_block(fn, device, calls).per_call for _ in range(samples))
    return per_call[len(per_call) // 2]


#: Block lengths of the suite's ``track_`` figures (``calls_for`` targets): 0.1 s of products, 0.05 s of copies
MATMUL_BLOCK_S = 0.1
COPY_BLOCK_S = 0.05


#: asv re-runs setup and teardown around every sample (up to 40 a round): the GPU state is
#: read at the first of them and then at most every GPU_STATE_EVERY_S seconds per phase
GPU_STATE_EVERY_S = 0.5
_last_gpu_state: dict[tuple[str, str, str], float] = {}


def _record_gpu_state(bench: object, args: tuple, phase: str) -> None:
    """Append the GPUs' NVML state for this benchmark and params (only once CUDA is in use)."""
    if not torch.cuda.is_initialized():
        return
    from devbench import gpustate

    cls = type(bench)
    names = list(getattr(cls, "param_names", []))
    values = args[len(args) - len(names) :] if names else ()
    name = f"{cls.__module__.removeprefix('benchmarks.')}.{cls.__name__}"
    key, now = (name, repr(values), phase), time.monotonic()
    if now - _last_gpu_state.get(key, -math.inf) < GPU_STATE_EVERY_S:
        return
    _last_gpu_state[key] = now
    module = sys.modules.get(cls.__module__)
    folder = gpustate.gpustate_dir(getattr(module, "__file__", None))
    gpustate.record(name, dict(zip(names, values, strict=True)), phase, folder)


def _after_setup(setup: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(setup)
    def wrapped(self, *args):
        setup(self, *args)
        _record_gpu_state(self, args, "before")

    wrapped.devbench_gpu_state = True
    return wrapped


def _before_teardown(teardown: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(teardown)
    def wrapped(self, *args):
        _record_gpu_state(self, args, "after")
        teardown(self, *args)

    wrapped.devbench_gpu_state = True
    return wrapped


class Benchmark:
    """asv settings the suite shares (the reasons are in benchmarks/README.md).

    ``setup`` warms up explicitly, so asv's own warm-up is off. A sample lasts at least
    ``sample_time`` and a round samples for up to ``repeat[2]`` seconds, so that a
    short benchmark's samples span seconds of the host's ups and downs rather than a
    tenth of one (see benchmarks/README.md, "Noise").

    Every subclass's ``setup`` and ``teardown`` are wrapped to record the GPUs' NVML
    state (clocks, temperature, power, throttle reasons) right after set-up and before
    tear-down of a benchmark that uses CUDA (``devbench.gpustate``); asv calls
    ``teardown`` after every benchmark, even one whose setup skipped.
    """

    warmup_time = 0.0
    sample_time = 0.05
    repeat = (3, 40, 2.0)
    rounds = 2
    timeout = 300.0

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        setup = cls.__dict__.get("setup")
        if setup is not None and not getattr(setup, "devbench_gpu_state", False):
            cls.setup = _after_setup(setup)
        teardown = cls.__dict__.get("teardown")
        if teardown is not None and not getattr(teardown, "devbench_gpu_state", False):
            cls.teardown = _before_teardown(teardown)

    @_before_teardown
    def teardown(self, *args) -> None:
        pass
