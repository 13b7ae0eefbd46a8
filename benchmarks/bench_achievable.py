"""Maximum achievable matmul per device and dtype: the best searched shape, burst and sustained.

``setup_cache`` searches shapes once per run (``devbench.workloads.achievable``: a grid
around the sizes cuBLAS and MKL favour, bounded in time, every product checked against
float64) and writes what it timed to ``.asv/achievable/<machine>.jsonl``; the report
shows the best shape beside the datasheet and divides by it for the fraction of peak.
The benchmarks then time that shape twice: ``burst`` (after a second of idling, a
quarter of a second of work) and ``sustained`` (after five seconds of back-to-back
work), with the GPU's clock and power sampled during the measured blocks.

A search is cached per user (``~/.cache/devbench/achievable.json``, keyed by machine,
torch, device name, dtype, grid and budget; ``DEVBENCH_SEARCH=fresh`` searches again),
so repeated runs and ``devbench compare`` time one shape.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch

from devbench.measure import burst, one_call_s, sustained
from devbench.suite import (
    DEVICES,
    Benchmark,
    no_cuda_reason,
    once,
    record_sampled,
    require_device,
    selected,
    with_samples,
)
from devbench.workloads.achievable import (
    CPU_BUDGET_S,
    FINAL_BLOCK_S,
    FINAL_BLOCKS,
    FINALISTS,
    GPU_BUDGET_S,
    candidates,
    search,
    search_reason,
)
from devbench.workloads.matmul import Matmul, checked, tf32

DTYPES = ["float32", "tf32", "bfloat16"]

#: Where the searches are written, beside asv's results (the report reads it).
ACHIEVABLE_DIR = Path(".asv") / "achievable"

#: Set to "fresh" to search again even when this machine, torch, device and grid were searched before.
SEARCH_ENV = "DEVBENCH_SEARCH"


def _cache_file() -> Path:
    """Found shapes, per user: the search is a property of the hardware and library, not of a commit, so
    `devbench compare` (two exported trees, many rounds) and repeated runs time the same shape."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "devbench" / "achievable.json"


def _cache_key(device: torch.device, dtype: str, shapes: list, budget: float) -> str:
    from devbench.files import default_machine

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    method = [FINALISTS, FINAL_BLOCK_S, FINAL_BLOCKS]  # a search made another way is searched again
    return json.dumps([default_machine(), torch.__version__, name, dtype, shapes, budget, method])


def _searched(device: torch.device, dtype: str, shapes: list, budget: float) -> dict:
    """The search record for this device and dtype: from the cache, else searched now (and cached)."""
    path, key = _cache_file(), _cache_key(device, dtype, [list(s) for s in shapes], budget)
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    if os.environ.get(SEARCH_ENV) != "fresh" and isinstance(cache.get(key), dict):
        print(f"{device} {dtype}: shape from an earlier search ({path}; {SEARCH_ENV}=fresh searches again)",
              file=sys.stderr)  # fmt: skip
        return {**cache[key], "cached": True}
    print(f"searching {len(shapes)} shapes on {device} {dtype} ({budget:g} s at most)", file=sys.stderr)
    record = search(device, dtype, shapes, budget).as_record()
    cache[key] = record
    try:
        from devbench.files import write_atomic

        write_atomic(path, json.dumps(cache) + "\n")
    except OSError as exc:  # a read-only home: search again next time
        print(f"could not cache the search in {path}: {exc}", file=sys.stderr)
    return {**record, "cached": False}


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    from devbench.workloads.transfer import host_available

    return host_available()


def _write(records: list[dict]) -> None:
    from devbench.files import append_jsonl, default_machine

    machine = default_machine()
    stamp = {"time": time.time(), "machine": machine, "torch": torch.__version__}
    append_jsonl(Path(__file__).resolve().parents[1] / ACHIEVABLE_DIR, machine, [{**stamp, **r} for r in records])


def _read(device: str, dtype: str) -> bool:
    """Whether this run reads a figure of (device, dtype): asv's --bench as ``suite.selected`` sees it."""
    name = f"{__name__.rsplit('.', 1)[-1]}.MatmulAchievable.track_tflops"
    return any(selected(name, (device, dtype, run)) for run in ("burst", "sustained"))


class MatmulAchievable(Benchmark):
    """TFLOP/s of the fastest matmul shape found on this device, burst and sustained.

    mamf-finder's question: how close to the datasheet can a matmul get here? The
    search runs in ``setup_cache`` (once per run, every device and dtype); a skipped
    combination carries its reason. ``run``: ``burst`` is the figure a short job sees
    on an idle GPU, ``sustained`` the one a long training step settles at (power and
    heat).
    """

    params = [DEVICES, DTYPES, ["burst", "sustained"]]
    param_names = ["device", "dtype", "run"]
    #: devbench gpu-run (devbench.plan): bf16 on the GPU first; setup_cache searches each selected device and
    #: dtype (its budget, and its finalists timed again), then a burst (~1.3 s) or a sustained (~7 s) figure
    headline = [{"device": ["cuda"], "dtype": ["bfloat16"]}]
    plan_cache_s = {"per": ["device", "dtype"], "s": {"cpu": CPU_BUDGET_S + 15.0, "cuda": GPU_BUDGET_S + 10.0}}
    plan_s = 4.5
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
                budget = GPU_BUDGET_S if device == "cuda" else CPU_BUDGET_S
                record = _searched(dev, dtype, candidates(dev, dtype, _free_bytes(dev)), budget)
                best = record["best"]
                found[(device, dtype)] = (best["m"], best["k"], best["n"])
                records.append(record)
        if records:
            _write(records)
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
        from devbench.gpustate import Sampler

        timed = burst if run == "burst" else sustained
        m, seen = timed(self.mm, self.device, self.one_call_s, sampler=Sampler if self.device.type == "cuda" else None)
        record_sampled(self, (device, dtype, run), seen)
        return with_samples(m.rates(self.mm.flops / 1e12), m.calls)

    track_tflops.unit = "TFLOP/s"
