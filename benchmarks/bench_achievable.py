"""Maximum achievable matmul per device and dtype: the best searched shape, burst and sustained.

``setup_cache`` searches shapes once per run (``devbench.workloads.achievable``: a grid
around the sizes cuBLAS and MKL favour, bounded in time, every product checked against
float64) and writes what it timed to ``.asv/achievable/<machine>.jsonl``; the report
shows the best shape beside the datasheet and divides by it for the fraction of peak.
The benchmarks then time that shape twice: ``burst`` (after a second of idling, a
quarter of a second of work) and ``sustained`` (after five seconds of back-to-back
work), with the GPU's clock and power sampled during the measured blocks.

A search is cached per user (``devbench.workloads.achievable.searched``: keyed by machine,
torch, device, CPU threads, dtype, grid, budget and whether the run was a quick one;
``DEVBENCH_SEARCH=fresh`` searches again), so repeated runs and ``devbench compare`` time
one shape, and a search made by ``make test``'s quick run never stands for a real one.
"""

from pathlib import Path

import torch

from devbench.engine.bursts import brief, burst, sustained
from devbench.engine.gpuwatch import record_sampled
from devbench.engine.measure import one_call_s
from devbench.engine.suite import DEVICES, Benchmark, no_cuda_reason, once, require_device, selected, with_samples
from devbench.workloads.achievable import (
    CPU_BUDGET_S,
    FINALS_S,
    GPU_BUDGET_S,
    KNOWN_BUDGET_S,
    SEARCHED,
    search_inputs,
    search_reason,
    searched,
    write_records,
)
from devbench.workloads.matmul import Matmul, checked, tf32

DTYPES = list(SEARCHED)
#: how the best shape is timed: ``best`` as mamf-finder's table is made (a brief figure: a short warm-up, then a
#: tenth of a second of calls), ``burst`` fresh from a second of idle, ``sustained`` after five seconds of load
RUNS = ["best", "burst", "sustained"]
TIMED = {"best": brief, "burst": burst, "sustained": sustained}

#: Where the searches are written, beside asv's results (the report reads it).
ACHIEVABLE_DIR = Path(".asv") / "achievable"


def _read(device: str, dtype: str) -> bool:
    """Whether this run reads a figure of (device, dtype): asv's --bench as ``suite.selected`` sees it."""
    name = f"{__name__.rsplit('.', 1)[-1]}.MatmulAchievable.track_tflops"
    return any(selected(name, (device, dtype, run)) for run in RUNS)


class MatmulAchievable(Benchmark):
    """TFLOP/s of the fastest matmul shape found on this device: best (brief), burst and sustained.

    mamf-finder's question: how close to the datasheet can a matmul get here? The
    search runs in ``setup_cache`` (once per run, every device and dtype); a skipped
    combination carries its reason. ``run``: ``best`` is the figure mamf-finder's table
    gives (the best shape, warm, timed briefly: compare it with that table), ``burst``
    the figure a short job sees on an idle GPU, ``sustained`` the one a long training
    step settles at (power and heat).
    """

    params = [DEVICES, DTYPES, RUNS]
    param_names = ["device", "dtype", "run"]
    #: devbench gpu-run (devbench.gpu.plan): bf16 on the GPU first; setup_cache searches each selected device and
    #: dtype (its budget, and its finalists timed again), then a best (~0.2 s), burst (~1.3 s) or sustained (~7 s)
    #: figure; the CPU's search is long, so the plan runs it after every other point (``plan_last``); a GPU
    #: model searched before times a handful of shapes and runs with the rest
    headline = [{"device": ["cuda"], "dtype": ["bfloat16"]}]
    #: this CPU's dtypes without a fast path are not searched (read from its flags, no CUDA touched)
    skips = [{"where": {"device": ["cpu"], "dtype": [d]}, "reason": search_reason(torch.device("cpu"), d)}
             for d in DTYPES if search_reason(torch.device("cpu"), d)]  # fmt: skip
    #: a search's bound and its finalists; a GPU model searched before (``devbench.records.expected.known_shapes``):
    #: its best shapes, neighbours and squares; a search this user's cache holds (``achievable.cached_searches``):
    #: read, not made. The process asv starts for ``setup_cache`` in each call is priced apart (``gpu.plan``).
    plan_cache_s = {"per": ["device", "dtype"], "s": {"cpu": CPU_BUDGET_S + 15.0, "cuda": GPU_BUDGET_S + FINALS_S},
                    "known_s": KNOWN_BUDGET_S + FINALS_S, "cached_s": 1.0}  # fmt: skip
    #: a figure's seconds by its run (the comment above): the sustained one is its five seconds of work
    plan_s = {"per": "run", "s": {"best": 0.5, "burst": 1.5, "sustained": 7.0}}
    plan_last = [{"device": ["cpu"]}]
    #: a GPU point asks the measuring process (one CUDA context and cuBLAS start for the run): the search's shape,
    #: from ``setup_cache``, goes with the request
    swept = True
    #: 2: the search's best is the fastest of its finalists timed again, longer; it was
    #: the fastest of the grid's brief figures, which read high and could pick a shape that was lucky
    work_version = 2
    rounds = 1
    timeout = 600.0

    def setup_cache(self):
        found, records = {}, []
        for device in DEVICES:
            reason = no_cuda_reason() if device == "cuda" else None
            for dtype in DTYPES:
                if not _read(device, dtype):  # asv --bench (devbench gpu-run, compare): no figure reads it
                    found[(device, dtype)] = f"{device} {dtype} not selected in this run"
                    continue
                why = reason or search_reason(torch.device(device), dtype)
                if why:
                    found[(device, dtype)] = why
                    continue
                dev = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
                # a model searched before: its best shapes and neighbours alone, in a shorter budget
                record = searched(dev, dtype, *search_inputs(dev, dtype))
                best = record["best"]
                found[(device, dtype)] = (best["m"], best["k"], best["n"])
                records.append(record)
        if records:
            write_records(Path(__file__).resolve().parents[1] / ACHIEVABLE_DIR, records)
        return found

    def setup(self, found, device, dtype, run):
        self.device = require_device(device)
        best = found.get((device, dtype))
        if isinstance(best, str) or best is None:
            raise NotImplementedError(best or f"no search for {device} {dtype}")
        m, k, n = best
        self.mm = once(
            ("MatmulAchievable", device, dtype, best), lambda: checked(Matmul(n, dtype, self.device, m=m, k=k))
        )
        self._tf32 = tf32(self.mm.allow_tf32)
        self._tf32.__enter__()
        self.one_call_s = self.mm.warm_call_s or one_call_s(self.mm, self.device)

    def teardown(self, found, device, dtype, run):
        if hasattr(self, "_tf32"):
            self._tf32.__exit__(None, None, None)

    def track_tflops(self, found, device, dtype, run):
        from devbench.records.gpustate import Sampler

        timed = TIMED[run]
        m, seen = timed(self.mm, self.device, self.one_call_s, sampler=Sampler if self.device.type == "cuda" else None)
        record_sampled(self, (device, dtype, run), seen, figure="track_tflops")
        return with_samples(m.rates(self.mm.flops / 1e12), m.calls)

    track_tflops.unit = "TFLOP/s"
