"""The asv side of the suite: the device param, skips with a reason, and the base class.

Benchmarks import these so that the rules of docs/design.md live in one place:

* ``DEVICES`` is the device param, the same on every machine (rule 1);
* ``require_device`` / ``require_gpus`` turn param values into devices or raise
  ``NotImplementedError`` with the reason, which asv records as a skip (rule 1);
* ``Benchmark`` holds the suite's sampling settings and the work version; ``@instrumented``
  above a class wraps its set-up: its declared ``skips`` raised first, the CPU threads pinned,
  the GPUs' NVML state recorded around each benchmark that uses CUDA (``devbench.records.gpustate``).

Timing, inputs and threads are ``devbench.engine.measure``'s (no asv there, so workloads can
use it); a swept class's points are routed by ``devbench.engine.swept``. Nothing here touches CUDA at import time
(rule 2).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import inspect
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch

from devbench.engine import sweep
from devbench.engine.devices import no_cuda_reason, num_gpus  # noqa: F401 - the suite's name for it
from devbench.engine.gpuwatch import _record_gpu_state, _start_sampler, _stop_sampler
from devbench.engine.prepare import CHECKED_ENV, check_once, forget_built, once, ready  # noqa: F401 - the suite's names
from devbench.engine.sweep import SELECT_ENV, figures_of, selected  # noqa: F401 - the suite's names for them
from devbench.engine.swept import (  # noqa: F401 - the suite's names for them
    BENCHMARK_PREFIXES,
    TURNS_ENV,
    _ask,
    _on_sweep,
    _own,
    declared_skip,
    route,
)

DEVICES: list[str] = ["cpu", "cuda"]


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


#: TF32 as this process started: a workload that switches it on (``workloads.matmul.tf32``) and is let go without
#: its tear-down (one that failed) must not leave the measuring process's later float32 figures on TF32
_TF32_AT_START = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)


def _return_memory() -> None:
    """When the measuring process lets a workload go: TF32 back as the process started, and the CUDA caching
    allocators' free blocks back to the device and the host (the process outlives an asv call under gpu-run, and another
    process, a search sizing its grid by the memory free or a point of its own, should find the device as a
    fresh process would)."""
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = _TF32_AT_START
    if torch.cuda.is_initialized():
        gc.collect()  # tensors held in reference cycles too
        # what survives that with no workload held (torch, the suite, their caches) lives as long as the process:
        # frozen, the next collection passes over it (a full one took 40-60 ms with torch loaded, before each build)
        gc.freeze()
        torch.cuda.empty_cache()
        # pinned host buffers go back to torch's host caching allocator, which keeps them locked (a block is reused
        # only for its own size class): across the copy sizes gigabytes of host memory, and what the host has
        # available is what the next search and copies size themselves by
        empty_host = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None) or getattr(
            torch._C, "_host_emptyCache", None)  # fmt: skip
        if empty_host is not None:
            empty_host()


sweep.on_evict(forget_built)
sweep.on_evict(_return_memory)
#: in the measuring process, the GPU's state is sampled while each figure is timed and recorded for that figure
sweep.on_figure(lambda bench, params: _start_sampler(bench, tuple(params)),
                lambda bench, params, figure: _stop_sampler(bench, tuple(params), figure))  # fmt: skip


def with_samples(samples: Iterable[float], number: int = 1) -> dict:
    """A ``track_`` figure with its samples, in the form asv keeps for timing results.

    asv's runner reads any benchmark result shaped ``{"samples": [...], "number": n}``
    as a sampled one: it stores the median as the figure with quartiles and a 99%
    interval (``asv_runner.statistics.compute_stats``), keeps the samples under
    ``--record-samples`` and appends them under ``--append-samples``, so ``asv compare``
    shows the spread and its Mann-Whitney test, and ``asv publish`` draws error bars.
    ``tests/test_suite.py::test_track_figures_with_samples_keep_them_in_asv`` runs asv itself on it.
    ``number`` is the calls per
    sample (1 for a ratio of two runs).
    """
    values = [float(v) for v in samples]
    if not values:
        raise ValueError("a figure needs at least one sample")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ValueError(f"samples must be finite, got {bad[:3]}")
    if number < 1:
        raise ValueError(f"number must be >= 1, got {number}")
    from devbench.engine.measure import spread_note

    note = spread_note(values)
    if note:  # beside the figure in asv's output (--show-stderr), as torch.utils.benchmark warns
        print(f"devbench: {note}", file=sys.stderr, flush=True)
    return {"samples": values, "number": int(number)}


def shared(bench: object, figure: str, take: Callable[[], object]) -> object:
    """``take()``'s result, read by each figure of ``bench`` once: figures that count the same blocks another way
    (GB/s copied and read+write, a run's total and each direction, a speedup and its efficiency) read one
    measurement; a figure that has read it already (asked again: asv's next round) measures anew. Name such a
    figure in ``spec.SAME_BLOCKS`` so that gpu-run prices it no sampling of its own."""
    held = bench.__dict__.get("_shared_runs")
    if held is None or figure in held[1]:
        held = (take(), set())
        bench._shared_runs = held
    held[1].add(figure)
    return held[0]


def waited(fn: Callable[[], object], sync: Callable[[], object] | None, block_s: float, device: torch.device,
           one_s: float | None = None) -> dict:  # fmt: skip
    """A ``track_time`` figure: seconds per call of ``fn()`` then ``sync()`` on the host's clock, as asv times a
    ``time_`` benchmark (launch, work and the wait for it), in blocks of at least ``block_s`` (asv's
    ``sample_time``), as many as ``devbench.engine.precision`` asks. On the CPU, where 0.5% is rarely reached, the cap's
    seconds are at least asv's ``repeat[2]`` (2 s): the samples a ``time_`` figure had. ``one_s``: one waited call's
    seconds when known."""
    from devbench.engine.measure import block_calls, measure_synced, one_call_s

    sync = sync or (lambda: None)
    if one_s is None:
        one_s = one_call_s(lambda: (fn(), sync()), torch.device("cpu"))
    calls = block_calls(one_s, block_s)
    with host_clock_cap(device):
        return with_samples(measure_synced(fn, sync, calls).per_call, calls)


def host_clock_cap(device: torch.device):
    """The benchmark's sampling cap for a figure on the host's clock (``precision.capped``): on the CPU, where 0.5%
    is rarely reached, its seconds at least asv's ``repeat[2]`` (2 s), the samples a ``time_`` figure had."""
    from devbench.engine import precision

    seconds, blocks = precision.current_cap()
    if torch.device(device).type == "cpu":
        seconds = max(seconds, float(Benchmark.repeat[2]))
    return precision.capped((seconds, blocks))


def _after_setup(setup: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(setup)
    def wrapped(self, *args):
        reason = declared_skip(self, args)
        if reason:
            raise NotImplementedError(reason)
        if getattr(self, "pins_threads", False):
            from devbench.engine.measure import pin_threads

            pin_threads()
        setup(self, *args)
        if getattr(self, "gpu_state", True):
            _record_gpu_state(self, args, "before")
            _start_sampler(self, args)

    wrapped.devbench_gpu_state = True
    return wrapped


def _pinned_cache(setup_cache: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(setup_cache)
    def wrapped(self, *args):
        if getattr(self, "pins_threads", False):
            from devbench.engine.measure import pin_threads

            pin_threads()
        return setup_cache(self, *args)

    wrapped.devbench_gpu_state = True
    return wrapped


def _before_teardown(teardown: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(teardown)
    def wrapped(self, *args):
        if declared_skip(self, args):
            return  # the class's own setup never ran: nor does its teardown
        if getattr(self, "gpu_state", True):
            _stop_sampler(self, args)
            _record_gpu_state(self, args, "after")
        teardown(self, *args)

    wrapped.devbench_gpu_state = True
    return wrapped


def _source(func: Callable) -> str:
    """The source asv would hash (a wrapped set-up's own), or its bytecode where there is no source file."""
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):
        code = getattr(inspect.unwrap(func), "__code__", None)
        return code.co_code.hex() if code is not None else repr(func)


def _work_versions(cls: type, work: int) -> None:
    """Give each benchmark method of ``cls`` an asv ``version`` that also names ``work``.

    asv versions a benchmark by the source of its method, set-ups and ``setup_cache``
    (asv_runner's default), so a change to the work in ``devbench.workloads`` or the
    engine leaves it unchanged and the history runs on across it: a lane's work made 4x
    longer shows as a 4x regression. ``work_version`` N > 1 makes the version that same
    kind of hash of the source followed by ``-workN``: an edit of the benchmark still
    starts a new series, as with asv's own, and raising N starts one too. asv compare,
    ``asv publish``, ``devbench report`` and ``devbench compare`` keep the series apart.
    ``benchmarks/work-lock.json`` makes the decision explicit (``devbench.engine.worklock``).
    """
    if isinstance(work, bool) or not isinstance(work, int) or work < 1:
        raise TypeError(f"{cls.__name__}.work_version must be an int >= 1, got {work!r}")
    if work == 1:
        return  # asv's own version: the history measured before work versions existed stays current
    # a figure inherited from another benchmark class gets a method of this class's own to carry this version
    for name in dir(cls):
        if name.startswith(BENCHMARK_PREFIXES) and name not in cls.__dict__ and callable(getattr(cls, name)):
            setattr(cls, name, _own(getattr(cls, name)))
    # as asv: the set-up and setup_cache the class has, its own or inherited
    parts = [getattr(cls, "setup", None), getattr(cls, "setup_cache", None)]
    for name, func in list(cls.__dict__.items()):
        if not name.startswith(BENCHMARK_PREFIXES) or not callable(func):
            continue
        code = "\n".join(_source(f) for f in (func, *parts) if f is not None)
        func.version = f"{hashlib.sha256(code.encode()).hexdigest()}-work{work}"


class Benchmark:
    """asv settings the suite shares (the reasons are in benchmarks/README.md).

    ``setup`` warms up explicitly, so asv's own warm-up is off. A sample lasts at least
    ``sample_time`` and a round samples for up to ``repeat[2]`` seconds, so that a
    short benchmark's samples span seconds of the host's ups and downs rather than a
    tenth of one (see docs/noise.md, "Where a figure's spread comes from").

    Subclassing it is all a benchmark class does to get what asv runs around it (``instrumented``, applied
    to every subclass as it is made): its set-up and tear-down wrapped (torch's CPU threads pinned, declared
    skips raised, the GPUs' NVML state recorded around the timing) and ``work_version`` (below) folded into
    the version asv records.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        instrumented(cls)

    #: pin torch's intra-op CPU threads (``measure.pin_threads``: DEVBENCH_THREADS or one per core)
    #: before ``setup`` and ``setup_cache``, so that every figure runs with the same count
    pins_threads = True
    #: record the GPUs' NVML state right after set-up and before tear-down (only where CUDA was used)
    gpu_state = True
    #: points that never run, with the reason asv records (``declared_skip``; the plan reads them too)
    skips: list[dict] = []

    #: the version of the work this class times: raise it when that work changes (its sizes, durations,
    #: what is computed or copied, how it is timed), so that asv keeps the figures from before apart
    #: (``_work_versions``; ``benchmarks/work-lock.json`` records every class's)
    work_version = 1
    #: whether clocks and power are sampled on a thread while the benchmark is timed (@instrumented's wrappers); False
    #: for figures of microseconds (a launch, a no-op move), where the thread would be part of what is timed
    samples_gpu_state = True
    #: whether the figures are measured in ``setup_cache`` (a sweep) and the benchmark methods only read
    #: them: ``devbench compare`` then takes one pair of figures per pair of processes, not one per block
    figures_in_setup_cache = False
    #: whether a GPU point asks the run's measuring process (``devbench.engine.sweep``): one CUDA context and one build
    #: of each workload for all its figures, instead of a process, a context and a build per figure
    swept = False
    #: (seconds, samples): a figure that ``devbench.engine.precision`` has not found precise stops when both have passed
    sample_cap: tuple[float, int] | None = None
    warmup_time = 0.0
    sample_time = 0.05
    repeat = (3, 40, 2.0)
    rounds = 2
    timeout = 300.0

    def teardown(self, *args) -> None:
        pass


def instrumented(cls: type) -> type:
    """What asv runs around a benchmark class of the suite, applied to every subclass of ``Benchmark`` as it is
    made (once; applying it again changes nothing):

    * ``setup``: the class's declared ``skips`` raised first (asv's n/a, with the reason); torch's CPU threads
      pinned (``pins_threads``); the class's own ``setup``; then, where CUDA is in use, the GPUs' NVML state
      recorded and a sampler started that reads clocks and power while the benchmark is timed (``gpu_state``,
      ``samples_gpu_state``);
    * ``teardown``: the sampler stopped and the state recorded, then the class's own ``teardown``;
    * ``setup_cache``: the threads pinned first;
    * ``work_version`` > 1: folded into the version asv records for every benchmark method.

    The wrappers keep the source asv versions a benchmark by. A class opts out of a part by setting its
    attribute to False; nothing else changes what asv runs."""
    if cls.__dict__.get("_devbench_instrumented"):
        return cls
    records_gpu_state(cls)
    if getattr(cls, "swept", False):
        route(cls)
    if "work_version" in cls.__dict__:
        _work_versions(cls, cls.__dict__["work_version"])
    cls._devbench_instrumented = True
    return cls


def records_gpu_state(cls: type) -> type:
    """Wrap ``cls``'s set-up and tear-down (``instrumented``'s first part):
    record the GPUs' NVML state around each benchmark of ``cls`` that uses CUDA, and pin the threads first.

    Its ``setup`` and ``teardown`` are wrapped: right after set-up and before tear-down the state
    (clocks, temperature, power, throttle reasons) is appended to ``.asv/gpustate``
    (``devbench.records.gpustate``), and between them, while the benchmark is timed, a ``gpustate.Sampler``
    reads clocks and power every 50 ms (the ``during`` phase: median SM clock and watts of the timed
    work). Nothing is recorded where CUDA was not used. asv calls ``teardown`` after every benchmark,
    even one whose set-up skipped. The wrappers keep the source asv versions the class by.
    """
    setup = getattr(cls, "setup", None)
    if setup is not None and not getattr(setup, "devbench_gpu_state", False):
        cls.setup = _after_setup(setup)
    teardown = getattr(cls, "teardown", None)
    if teardown is not None and not getattr(teardown, "devbench_gpu_state", False):
        cls.teardown = _before_teardown(teardown)
    setup_cache = cls.__dict__.get("setup_cache")
    if setup_cache is not None and not getattr(setup_cache, "devbench_gpu_state", False):
        cls.setup_cache = _pinned_cache(setup_cache)
    return cls
