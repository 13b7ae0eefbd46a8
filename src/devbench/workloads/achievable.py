"""The maximum achievable matmul: a bounded search over shapes for the fastest product.

A datasheet peak is what the tensor cores could do; what a matmul reaches depends on
the shape cuBLAS or MKL gets (tiles, waves, k long enough to hide the loads).
mamf-finder (stas00/ml-engineering) searches m, n and k for the best one; this does
the same over a small grid around the sizes the libraries favour, bounded in time, and
checks every product it times against float64 (``Matmul.check``), so a shape that
computes garbage fast never wins. The grid's best few are then timed again, longer, and
the best of that second look is the search's answer: the fastest of 28 brief figures
reads high, and may only have been lucky.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from devbench.engine.measure import BLOCKS_ENV, measure, plan_blocks, warm_up, whole_env
from devbench.workloads.matmul import DTYPES, Matmul, cpu_skip_reason, tf32

#: The grid: m and n from DIMS, k from K_DIMS; the square sizes first (the suite's
#: MatmulSquare sizes that are searched too, so the best is at least the best square).
GPU_DIMS = (2048, 4096, 8192)
GPU_K = (4096, 8192, 12288, 16384)
GPU_SQUARES = (4096, 8192)
CPU_DIMS = (512, 1024, 2048)
CPU_K = (1024, 2048, 4096)
CPU_SQUARES = (1024, 4096)

#: the dtypes ``bench_achievable`` searches (float16 is the suite's too, but no GPU's headline)
SEARCHED = ("float32", "tf32", "bfloat16")

#: Seconds a search may spend per device and dtype (it stops between shapes).
GPU_BUDGET_S = 45.0
#: seconds for a known model's best shape and its neighbours (a handful of shapes and their finalists)
KNOWN_BUDGET_S = 10.0
CPU_BUDGET_S = 60.0

#: Each searched shape: blocks of about this many seconds (its median is its figure).
SEARCH_BLOCK_S = 0.02
SEARCH_BLOCKS = 3

#: Memory a search may use on its device: this fraction of what is free.
MEMORY_SHARE = 0.5

#: After the grid, its best FINALISTS shapes are timed again in FINAL_BLOCKS blocks of about
#: FINAL_BLOCK_S (outside the budget: a few seconds), and the best of those wins. On the
#: 2-vCPU VM the grid's bf16 winner read 0.426 TFLOP/s and 0.353-0.358 when the benchmark
#: timed it again: the maximum of 28 noisy 60 ms figures is biased up.
FINALISTS = 3
FINAL_BLOCK_S = 0.1
FINAL_BLOCKS = 5
#: what the finalists add to a search's budget where a product is far shorter than a block (a GPU's)
FINALS_S = FINALISTS * FINAL_BLOCKS * FINAL_BLOCK_S


Shape = tuple[int, int, int]


def search_reason(device: torch.device, dtype: str) -> str | None:
    """Why this device and dtype are not searched here, or ``None``."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {list(DTYPES)}")
    if device.type == "cpu":
        return cpu_skip_reason(dtype, max(CPU_K))
    return None


def shape_bytes(shape: Shape, dtype: str, sets: int = 2) -> int:
    """Bytes of ``sets`` input pairs and outputs of an (m x k) @ (k x n) product."""
    m, k, n = shape
    itemsize = torch.empty((), dtype=DTYPES[dtype][0]).element_size()
    return sets * (m * k + k * n + m * n) * itemsize


def candidates(device: torch.device, dtype: str, free_bytes: int | None = None,
               known: Sequence[Shape] = ()) -> list[Shape]:  # fmt: skip
    """Shapes to search, squares first, each of which fits ``MEMORY_SHARE`` of ``free_bytes``; with ``known`` (the
    best shapes earlier searches found on this model, this dtype's first: ``devbench.records.expected.known_shapes``),
    the squares, those shapes and their neighbours in the grid (one of m, k, n one step up or down) alone.

    (m, k, n): A is m x k, B is k x n. ``free_bytes`` None: no memory bound.
    """
    gpu = device.type == "cuda"
    squares = GPU_SQUARES if gpu else CPU_SQUARES
    dims, ks = (GPU_DIMS, GPU_K) if gpu else (CPU_DIMS, CPU_K)
    out = [(s, s, s) for s in squares]
    if known:
        for shape in known:
            out += [s for s in (tuple(shape), *neighbours(tuple(shape), dims, ks)) if s not in out]
    else:
        out += [(m, k, n) for m, n, k in itertools.product(dims, dims, ks) if (m, k, n) not in out]
    if free_bytes is not None:
        out = [s for s in out if shape_bytes(s, dtype) <= MEMORY_SHARE * free_bytes]
    return out


def neighbours(shape: Shape, dims: Sequence[int], ks: Sequence[int]) -> list[Shape]:
    """The shapes one grid step from ``shape`` in one of m, k, n (a value off the grid: its nearest grid values)."""
    out: list[Shape] = []
    for axis, grid in ((0, dims), (1, ks), (2, dims)):
        values = sorted(set(grid))
        here = shape[axis]
        below = [v for v in values if v < here][-1:]
        above = [v for v in values if v > here][:1]
        for v in below + above:
            moved = list(shape)
            moved[axis] = v
            if tuple(moved) not in out:
                out.append(tuple(moved))
    return out


def known_shapes(device: torch.device, dtype: str) -> list[Shape]:
    """The best shapes earlier searches found on this GPU's model, ``dtype``'s first
    (``devbench.records.expected``); none
    for the CPU or a model never searched."""
    if device.type != "cuda":
        return []
    from devbench.records.expected import known_shapes as of_model

    return of_model(torch.cuda.get_device_name(device), dtype)


@dataclass(frozen=True)
class ShapeResult:
    """One searched shape: its TFLOP/s (median of its blocks) and its checked error against float64."""

    m: int
    k: int
    n: int
    tflops: float
    error: float

    @property
    def shape(self) -> Shape:
        return (self.m, self.k, self.n)

    @property
    def label(self) -> str:
        return f"{self.m}x{self.k}x{self.n}"


@dataclass
class Search:
    """What a search found: every shape it timed, in order, how many it left for lack of time, and
    its finalists timed again (``final``; empty when the grid timed one shape)."""

    device: str
    dtype: str
    results: list[ShapeResult] = field(default_factory=list)
    left: int = 0
    seconds: float = 0.0
    budget_s: float = 0.0
    final: list[ShapeResult] = field(default_factory=list)

    @property
    def best(self) -> ShapeResult:
        """The fastest finalist on its second look, or the grid's fastest where there was none."""
        if not self.results:
            raise ValueError(f"the search on {self.device} {self.dtype} timed no shape")
        return max(self.final or self.results, key=lambda r: r.tflops)

    def as_record(self) -> dict:
        best = self.best
        return {
            "device": self.device,
            "dtype": self.dtype,
            "best": {"m": best.m, "k": best.k, "n": best.n, "tflops": best.tflops},
            "searched": [{"m": r.m, "k": r.k, "n": r.n, "tflops": r.tflops, "error": r.error} for r in self.results],
            "final": [{"m": r.m, "k": r.k, "n": r.n, "tflops": r.tflops, "error": r.error} for r in self.final],
            "left": self.left,
            "seconds": round(self.seconds, 2),
            "budget_s": self.budget_s,
        }


def time_shape(
    shape: Shape, dtype: str, device: torch.device, block_s: float = SEARCH_BLOCK_S, blocks: int = SEARCH_BLOCKS
) -> ShapeResult:
    """Build, check against float64, warm and time one shape (the median of ``blocks`` of ``block_s``)."""
    m, k, n = shape
    mm = Matmul(n, dtype, device, m=m, k=k, on_device=True)  # inputs and reference drawn there: ms, not s
    with tf32(mm.allow_tf32):
        error = mm.check()
        warm_up(mm, device, repeats=2)
        plan = plan_blocks(mm, device, target_s=block_s)
        seconds = measure(mm, device, plan, blocks=blocks).median
    return ShapeResult(m, k, n, mm.flops / seconds / 1e12, error)


def search(
    device: torch.device,
    dtype: str,
    shapes: Sequence[Shape],
    budget_s: float,
    time_one: Callable[..., ShapeResult] = time_shape,
    progress: Callable[[ShapeResult], None] | None = None,
    finalists: int = FINALISTS,
) -> Search:
    """Time ``shapes`` in order until ``budget_s`` is spent (at least one is always timed), then the
    ``finalists`` fastest again with longer blocks (``FINAL_BLOCK_S``, ``FINAL_BLOCKS``).

    ``time_one(shape, dtype, device, block_s=..., blocks=...)`` builds, checks and times one shape
    (``time_shape``; tests pass a fake).
    """
    if budget_s <= 0:
        raise ValueError(f"budget_s must be > 0, got {budget_s}")
    if not shapes:
        raise ValueError(f"no shape to search on {device} {dtype}")
    out = Search(str(device), dtype, budget_s=budget_s)
    t0 = time.perf_counter()
    for i, shape in enumerate(shapes):
        if i and time.perf_counter() - t0 > budget_s:
            out.left = len(shapes) - i
            break
        result = time_one(shape, dtype, device)
        out.results.append(result)
        if progress:
            progress(result)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the next shape's buffers, not this one's, should fill the memory
    if len(out.results) > 1 and finalists > 0:
        top = sorted(out.results, key=lambda r: r.tflops, reverse=True)[:finalists]
        for r in top:
            out.final.append(time_one(r.shape, dtype, device, block_s=FINAL_BLOCK_S, blocks=FINAL_BLOCKS))
            if device.type == "cuda":
                torch.cuda.empty_cache()
    out.seconds = time.perf_counter() - t0
    return out


# --- the searches a user's runs share ----------------------------------------------------------------------

#: Set to "fresh" to search again even where this machine, torch, device and grid were searched before.
SEARCH_ENV = "DEVBENCH_SEARCH"
#: bytes a searched shape may take at most (``search_room``)
SEARCH_BYTES_ENV = "DEVBENCH_SEARCH_BYTES"


def cache_file() -> Path:
    """Found shapes, per user: a search is a property of the hardware and library, not of a commit, so
    ``devbench compare`` (two exported trees, many passes) and repeated runs time the same shape."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "devbench" / "achievable.json"


def made_where(device: torch.device) -> dict:
    """What a search depends on beyond its grid: the machine, torch, the device, the CPU threads, and whether
    the run was a quick one (``DEVBENCH_BLOCKS``: asv --quick in make test, devbench compare's passes), whose
    search shares the machine with other work and must never stand for a real run's."""
    from devbench.engine.devices import _cpu_model
    from devbench.records.files import default_machine

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_model()
    return {"machine": default_machine(), "torch": torch.__version__, "device": name,
            "threads": torch.get_num_threads(), "quick": bool(os.environ.get(BLOCKS_ENV))}  # fmt: skip


def _cache_key(device: torch.device, dtype: str, shapes: list, budget: float) -> str:
    method = [FINALISTS, FINAL_BLOCK_S, FINAL_BLOCKS]  # a search made another way is searched again
    return json.dumps([made_where(device), dtype, shapes, budget, method], sort_keys=True)


def searched(device: torch.device, dtype: str, shapes: list[Shape], budget: float) -> dict:
    """The search record for this device and dtype: from the cache where the same machine, torch, threads,
    kind of run, grid and budget made one, else searched now (and cached, with where and when)."""
    from devbench.records.files import write_atomic

    path, key = cache_file(), _cache_key(device, dtype, [list(s) for s in shapes], budget)
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    if os.environ.get(SEARCH_ENV) != "fresh" and isinstance(cache.get(key), dict):
        made = cache[key].get("made", {})
        print(f"{device} {dtype}: shape from an earlier search ({path}, made {made.get('when', 'at an unknown time')}; "
              f"{SEARCH_ENV}=fresh searches again)", file=sys.stderr)  # fmt: skip
        return {**cache[key], "cached": True}
    print(f"searching {len(shapes)} shapes on {device} {dtype} ({budget:g} s at most)", file=sys.stderr)
    record = search(device, dtype, shapes, budget).as_record()
    made = {**made_where(device), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    cache[key] = {**record, "made": made}
    try:
        write_atomic(path, json.dumps(cache) + "\n")
    except OSError as exc:  # a read-only home: search again next time
        print(f"could not cache the search in {path}: {exc}", file=sys.stderr)
    return {**record, "made": made, "cached": False}


def search_room() -> int | None:
    """Bytes a searched shape's operands may take at most (``shape_bytes``), where ``DEVBENCH_SEARCH_BYTES`` sets it
    (make test's dry run: the same search over the grid's smaller shapes), else None: what the device has free
    bounds them (``candidates``)."""
    return whole_env(SEARCH_BYTES_ENV, "the bytes a shape may take")


def search_inputs(device: torch.device, dtype: str) -> tuple[list[Shape], float]:
    """The shapes and budget ``bench_achievable``'s ``setup_cache`` searches on ``device`` for ``dtype``: a model
    searched before, its best shapes, their neighbours and the squares in ``KNOWN_BUDGET_S``; else the grid; each
    shape within ``search_room`` where that is set."""
    known = known_shapes(device, dtype)
    shapes = candidates(device, dtype, free_bytes(device), known)
    room = search_room()
    if room is not None and shapes:  # the shapes within it, else the smallest: a search times one at least
        size = functools.partial(shape_bytes, dtype=dtype)
        shapes = [s for s in shapes if size(s) <= room] or [min(shapes, key=size)]
    budget = KNOWN_BUDGET_S if known else GPU_BUDGET_S if device.type == "cuda" else CPU_BUDGET_S
    return shapes, budget


def cached_searches(gpus: int) -> list[str]:
    """``device:dtype`` of every search a run's ``setup_cache`` would read from this user's cache rather than make
    (none under ``DEVBENCH_SEARCH=fresh``), with its threads pinned as there: gpu-run prices those as a read."""
    from devbench.engine.measure import pin_threads

    if os.environ.get(SEARCH_ENV) == "fresh":
        return []
    pin_threads()
    try:
        cache = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = []
    for device in [torch.device("cpu")] + ([torch.device("cuda", 0)] if gpus else []):
        for dtype in SEARCHED:
            if search_reason(device, dtype):
                continue
            shapes, budget = search_inputs(device, dtype)
            if isinstance(cache.get(_cache_key(device, dtype, [list(s) for s in shapes], budget)), dict):
                found.append(f"{device.type}:{dtype}")
    return found


#: calls of a searched shape's product beside its timed blocks (``time_shape``): its check's, one per input set
#: (two), two to warm it and at least one to size its blocks
CALLS_BESIDE_BLOCKS = 5


def search_s(shapes: Sequence[Shape], budget_s: float, shape_s: Callable[[Shape, float, int], float]) -> float:
    """Seconds ``search`` is expected to take over ``shapes`` where ``shape_s(shape, block_s, blocks)`` prices one
    shape: the grid in order until the budget is spent (a shape started before it ends is timed whole), then its
    finalists, priced as its largest shapes (the fastest are not known before; a host's throughput grows with
    the product's size, so its winners tend to be its largest)."""
    spent, timed = 0.0, []
    for i, shape in enumerate(shapes):
        if i and spent > budget_s:
            break
        spent += shape_s(shape, SEARCH_BLOCK_S, SEARCH_BLOCKS)
        timed.append(shape)
    if len(timed) > 1:
        largest = sorted(timed, key=lambda s: s[0] * s[1] * s[2], reverse=True)[:FINALISTS]
        spent += sum(shape_s(s, FINAL_BLOCK_S, FINAL_BLOCKS) for s in largest)
    return spent


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _rate(dtype: str, n: int = 1024) -> float:
    """FLOP per second of an n x n product of ``dtype`` on the CPU (the best of three warm calls)."""
    a = torch.randn(n, n).to(DTYPES[dtype][0] if dtype in DTYPES else getattr(torch, dtype))
    a @ a
    return 2.0 * n**3 / min(_timed(lambda: a @ a) for _ in range(3))


def cpu_rates() -> dict[str, float]:
    """FLOP per second of an n=1,024 product on this host's CPU, for each dtype a CPU search would search, for
    float64, and for each other dtype this CPU measures products of at n=1,024 (``cpu_skip_reason``: float16 where
    it has a fast path) (``_rate``): what the probe prices a CPU search (``expected_cpu_searches_s``) and a CPU
    product's call (``devbench.gpu.declared.call_s``) with."""
    from devbench.engine.measure import pin_threads

    pin_threads()
    cpu = torch.device("cpu")
    dtypes = [d for d in SEARCHED if not search_reason(cpu, d)]
    others = [d for d in DTYPES if d not in dtypes and d not in SEARCHED and not cpu_skip_reason(d, 1024)]
    return {d: _rate(d) for d in (*dtypes, *others, "float64")} if dtypes else {}


def expected_cpu_searches_s(rates: dict[str, float] | None = None) -> dict[str, float]:
    """``cpu:dtype`` -> the seconds each CPU search a run would make is expected to take on this host: its grid
    (``search_inputs``) priced with what is timed here now: one product of each searched dtype and of float64
    at 1,024, a draw of a million normals, and the grid's smallest shape searched whole (``time_shape``: what a
    shape costs beside its products). A shape is then its inputs drawn, its float64 reference of
    ``CHECK_ROWS`` rows per input set, its calls beside the blocks (``CALLS_BESIDE_BLOCKS``) and its blocks (each
    at least one call), plus that fixed part. About a second on two cores; gpu-run's probe prices a search with
    it, where the time bound says only how long a search may take. ``rates``: ``cpu_rates`` timed already."""
    from devbench.engine.measure import pin_threads
    from devbench.workloads.matmul import CHECK_ROWS

    pin_threads()
    cpu = torch.device("cpu")
    dtypes = [d for d in SEARCHED if not search_reason(cpu, d)]
    rates = rates if rates is not None else cpu_rates()
    draw = min(_timed(lambda: torch.randn(1 << 20)) for _ in range(3)) / (1 << 20)
    out, sets = {}, 2  # Matmul's rotating input sets
    for dtype in dtypes:

        def work_s(shape: Shape, block_s: float, blocks: int, rate: float = rates[dtype]) -> float:
            m, k, n = shape
            call = 2.0 * m * k * n / rate
            reference = sets * 2.0 * min(m, CHECK_ROWS) * k * n / rates["float64"]
            return sets * (m * k + k * n) * draw + reference + CALLS_BESIDE_BLOCKS * call + blocks * max(block_s, call)

        shapes, budget = search_inputs(cpu, dtype)
        smallest = min(shapes, key=lambda s: s[0] * s[1] * s[2])
        fixed = max(0.0, _timed(lambda s=smallest, d=dtype: time_shape(s, d, cpu)) - work_s(smallest, SEARCH_BLOCK_S,
                                                                                          SEARCH_BLOCKS))  # fmt: skip
        out[f"cpu:{dtype}"] = round(search_s(shapes, budget, lambda s, b, n, w=work_s, f=fixed: w(s, b, n) + f), 2)
    return out


def free_bytes(device: torch.device) -> int:
    """Bytes free for a search's buffers on ``device`` (the host's available memory for the CPU)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    from devbench.workloads.transfer import host_available

    return host_available()


def write_records(folder: Path, records: list[dict]) -> None:
    """Append what the searches timed to ``folder/<machine>.jsonl`` (the report reads it)."""
    from devbench.records.files import append_jsonl, default_machine

    machine = default_machine()
    stamp = {"time": time.time(), "machine": machine, "torch": torch.__version__}
    append_jsonl(folder, machine, [{**stamp, **r} for r in records])
