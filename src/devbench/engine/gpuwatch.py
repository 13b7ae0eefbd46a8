"""The GPU state recorded around each benchmark: NVML read at set-up and tear-down, and sampled while a figure
is timed (devbench.records.gpustate), keyed by the class, its params and the figure."""

from __future__ import annotations

import functools
import math
import sys
import time
from pathlib import Path

import torch


def _short(cls: type) -> str:
    """A benchmark class's name as asv's benchmark names spell it: "bench_transfer.HostDevice"."""
    return f"{cls.__module__.removeprefix('benchmarks.')}.{cls.__name__}"


#: asv re-runs setup and teardown around every sample (up to 40 a round): the GPU state is
#: read at the first of them and then at most every GPU_STATE_EVERY_S seconds per phase
GPU_STATE_EVERY_S = 0.5

_last_gpu_state: dict[tuple[str, str, str], float] = {}


def cpu_point(bench: object, args: tuple) -> bool:
    """Whether the point ``args`` of ``bench`` runs on the CPU by its params: a ``device`` other than ``cuda``, or a
    value the class's ``plan_gpus`` gives no GPU. Its process may have CUDA in use all the same (the measuring
    process serves GPU and CPU points): no GPU state is recorded or sampled around it."""
    names = list(getattr(bench, "param_names", []))
    if len(args) < len(names):
        return False
    values = args[len(args) - len(names) :] if names else ()
    if "device" in names:
        return values[names.index("device")] != "cuda"
    declared = getattr(bench, "plan_gpus", None)  # as gpu.declared.gpus_needed reads it: the most any param asks
    if not isinstance(declared, dict) or any(v in ("cuda", "nccl") for v in values):
        return False
    return max((by_value.get(values[names.index(p)], 0) for p, by_value in declared.items() if p in names),
               default=0) < 1  # fmt: skip


def _record_gpu_state(bench: object, args: tuple, phase: str) -> None:
    """Append the GPUs' NVML state for this benchmark and params (only once CUDA is in use, for a GPU point)."""
    if not torch.cuda.is_initialized() or cpu_point(bench, args):
        return
    from devbench.records import gpustate

    name, params, folder = _who(bench, args)
    key, now = (name, repr(params), phase), time.monotonic()
    if now - _last_gpu_state.get(key, -math.inf) < GPU_STATE_EVERY_S:
        return
    _last_gpu_state[key] = now
    gpustate.record(name, params, phase, folder, gpus=gpustate.snapshot(_cuda_identities()))


def _who(bench: object, args: tuple) -> tuple[str, dict, Path]:
    """A benchmark's GPU-state identity: ``module.Class``, its params by name, and the folder for its records."""
    from devbench.records import gpustate

    cls = type(bench)
    names = list(getattr(cls, "param_names", []))
    values = args[len(args) - len(names) :] if names else ()
    module = sys.modules.get(cls.__module__)
    folder = gpustate.gpustate_dir(getattr(module, "__file__", None))
    return _short(cls), dict(zip(names, values, strict=True)), folder


@functools.cache
def _cuda_identities() -> list[dict]:
    """This process's CUDA devices by UUID and PCI bus id (fixed for its life)."""
    from devbench.engine.devices import cuda_identities

    return cuda_identities()


def _start_sampler(bench: object, args: tuple) -> None:
    """Sample the GPUs' clocks and power from the end of set-up to tear-down (in the measuring process, around
    each figure): the timed part; one already sampling goes on.

    Not for a class with ``samples_gpu_state = False``, nor for a CPU point (``cpu_point``): its figures are
    microseconds long, or host work, and a thread that wakes every 50 ms for ctypes calls under the GIL would
    be timed with them. A class that samples does so at every GPU point, its small ones too (a 4 KiB copy's
    waited time, a 16x16 product's): there the thread's wakes, tens of microseconds of Python each 50 ms, are
    expected to cost about a thousandth of a block (not measured on a GPU)."""
    if not torch.cuda.is_initialized() or not getattr(bench, "samples_gpu_state", True) or cpu_point(bench, args):
        return
    if "_devbench_sampler" in bench.__dict__:
        return
    from devbench.records import gpustate

    sampler = gpustate.Sampler()
    bench._devbench_sampler = sampler.__enter__()


def _stop_sampler(bench: object, args: tuple, figure: str | None = None) -> None:
    """Stop the sampler and record what it saw as the ``during`` phase (median clock and power), for ``figure``
    where one figure was timed under it (the measuring process's; asv's own process times one per point)."""
    sampler = bench.__dict__.pop("_devbench_sampler", None)
    if sampler is None:
        return
    sampler.__exit__(None, None, None)
    record_sampled(bench, args, sampler.summary(), "during", figure)


def record_sampled(bench: object, args: tuple, summary: list[dict], phase: str = "timed",
                   figure: str | None = None) -> None:  # fmt: skip
    """Record a ``gpustate.Sampler`` summary for this benchmark and params, and the figure (its method's name)
    it was sampled under where known: a figure's twin does not overwrite its state.

    A benchmark that samples its own measured blocks (burst, sustained) records them as
    ``timed``; the report prefers those over ``during`` (all of set-up to tear-down).
    """
    if not summary:
        return
    from devbench.records import gpustate

    name, params, folder = _who(bench, args)
    ident = {g["index"]: g for g in gpustate.snapshot(_cuda_identities())}
    keep = ("index", "cuda_index", "uuid", "pci_bus_id", "name", "power_limit_w", "default_power_limit_w",
            "max_sm_clock_mhz")  # fmt: skip
    gpus = [{**{k: ident.get(g["index"], {}).get(k) for k in keep}, **g} for g in summary]
    gpustate.record(name, params, phase, folder, gpus=gpus, figure=figure)
