"""One side's benchmark process of a paired comparison: it times one block when the coordinator says so.

Run by path, not as ``devbench.compare.worker``: the side's own ``src/`` and ``benchmarks/`` come first
on ``PYTHONPATH``, so this file imports nothing of devbench and only the standard library and
``asv_runner`` (asv's own discovery, parameters, set-up and tear-down). The benchmarks are imported
once (torch with them); each benchmark combination then runs in a child forked for it, as asv's
``forkserver`` does, so every combination starts from a fresh process (importing the suite never
touches CUDA: docs/design.md, rule 2).

Protocol: JSON lines. Requests on stdin; replies on the file descriptor the ``--reply-fd``
argument names (stdout is the benchmarks' own, sent to stderr with the rest of their output). Each
request carries an ``id`` and its reply the same ``id``: when a combination's process dies (an OOM
kill, a segfault, a CUDA abort), the worker answers the last request that process read, which it may
have answered already; the coordinator drops a reply to a request it no longer waits for.

* at start the worker replies ``{"benchmarks": [...], "cuda_devices": n}`` (name, kind, unit, params, param
  names; the CUDA devices its torch sees, counted in a forked child, ``null`` when that failed or the
  suite imports no torch);
* ``{"op": "open", "name": N, "idx": I, "block_s": S}``: fork, set up the combination and, for a
  ``time_`` benchmark, size a block to at least ``S`` seconds: ``{"ready": true, "number": n}``,
  ``{"skip": reason}`` or ``{"error": reason}``;
* ``{"op": "cache", "name": N, "select": P}``: run the benchmark's ``setup_cache`` once, in a forked
  process (it may touch CUDA, which the parent never does), for the combinations ``P`` selects;
  the combinations opened after it read that result, as asv's do: ``{"cached": true}``. A result
  that is no figure is kept in ``KEEP_DIR`` (the third argument) and read by later workers of the
  same side (``{"cached": true, "kept": true}``);
* ``{"op": "turn"}``: one block: ``{"value": v}`` (seconds per call, or the ``track_`` figure);
* ``{"op": "close"}``: tear down, the child exits: ``{"closed": true}``;
* ``{"op": "quit"}``, or the end of stdin: the worker exits.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import mmap
import os
import pickle
import shutil
import statistics
import struct
import sys
import tempfile
import time
import traceback


def _reply(fd: int, message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _reply_to(fd: int, request_id: int, message: dict) -> None:
    _reply(fd, {**message, "id": request_id})


def _figure(value: object) -> float:
    """A ``track_`` benchmark's result as one number: the median of its samples when it returns them."""
    if isinstance(value, dict) and "samples" in value:
        return float(statistics.median(value["samples"]))
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a track_ benchmark returned {type(value).__name__}, not a number")
    return float(value)


def _last_line(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]


def _timed(call, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        call()
    return time.perf_counter() - start


def _turn(call, kind: str, number: int) -> float:
    """One block: seconds per call of a ``time_`` benchmark, or a ``track_`` benchmark's figure."""
    return _timed(call, number) / number if kind == "time" else _figure(call())


def _block_calls(call, block_s: float) -> int:
    """Calls per block of a ``time_`` benchmark: batches of doubling size until one lasts a tenth of
    ``block_s`` (timeit's autorange), then enough to fill ``block_s``."""
    call()  # a first call pays for lazy set-up
    number = 1
    while True:
        took = _timed(call, number)
        if took >= block_s / 10 or number >= 1 << 20:
            return max(1, math.ceil(block_s / max(took / number, 1e-9)))
        number *= 2


class _Answer:
    """Replies of one combination's process, each with the ``id`` of the request it answers; the id of the
    last request the process read is kept in memory shared with the worker, which answers it for a process
    that died (``main``)."""

    def __init__(self, reply_fd: int, shared: mmap.mmap, request_id: int) -> None:
        self.reply_fd, self.shared = reply_fd, shared
        self.read(request_id)

    def read(self, request_id: int) -> None:
        self.request_id = request_id
        self.shared[:8] = struct.pack("q", request_id)

    def __call__(self, message: dict) -> None:
        _reply_to(self.reply_fd, self.request_id, message)


def _last_read(shared: mmap.mmap) -> int:
    return struct.unpack("q", shared[:8])[0]


def _child(bench, answer: _Answer, block_s: float, requests, cache_file: str | None) -> None:
    """Serve one combination in the forked child until ``close``."""
    kind = bench.name.rsplit(".", 1)[-1].split("_", 1)[0]
    try:
        if tuple(bench._current_params) in bench._skip_tuples:
            answer({"skip": "in the benchmark's skip_params"})
            return
        if cache_file is not None:
            with open(cache_file, "rb") as f:
                bench.set_cache(pickle.load(f))
        elif bench._setup_cache is not None:
            bench.set_cache(bench.do_setup_cache())
        for setup in bench._setups:  # asv_runner's do_setup, keeping the reason of a skip
            setup(*bench._build_params())
    except NotImplementedError as exc:
        answer({"skip": str(exc)})
        return
    except Exception as exc:  # the benchmark's own failure: named, the run goes on
        answer({"error": _last_line(exc)})
        return
    params = bench._build_params()

    def call():
        return bench.func(*params)

    try:
        # no block is timed here: the coordinator's first pair, not kept, is each side's first call
        number = _block_calls(call, block_s) if kind == "time" else 1
    except Exception as exc:
        answer({"error": _last_line(exc)})
        return
    answer({"ready": True, "number": number})
    for line in requests:
        request = json.loads(line)
        answer.read(int(request.get("id", 0)))
        op = request.get("op")
        if op == "turn":
            try:
                value = _turn(call, kind, number)
                answer({"value": value})
            except Exception as exc:
                answer({"error": _last_line(exc)})
        elif op == "close":
            try:
                bench.do_teardown()
            finally:
                answer({"closed": True})
            return
        else:
            answer({"error": f"unknown request {op!r} inside a combination"})


def _in_child(select: str, work) -> int:
    """Run ``work()`` in a forked process (the parent never touches CUDA, so the child may) and return its
    exit code. ``select`` (a regular expression of asv's ``name(params)``) is set as ``DEVBENCH_BENCH``
    there: what a ``setup_cache`` sweep measures (``devbench.engine.suite.selected``)."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if select:
                os.environ["DEVBENCH_BENCH"] = select
            work()
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _run_cache(bench, request: dict, cache_dir: str, cached: dict[str, str], keep_dir: str | None) -> dict:
    """``setup_cache`` of ``bench`` in a forked process, its result pickled for the combinations to come.

    A result that is no figure (``figures_in_setup_cache`` unset: a search, a shared input) is kept in
    ``keep_dir`` for the workers of later passes of the same side, which read it instead of running it
    again; a sweep that measures its figures there runs in every pass (it is that pass's pair of values)."""
    if bench is None or bench._setup_cache is None:
        return {"error": f"no setup_cache in {request.get('name')!r}"}
    select = request.get("select", "")
    keep = None
    if keep_dir and not _figures_in_cache(bench):
        digest = hashlib.sha1(f"{bench.setup_cache_key}\n{select}".encode()).hexdigest()
        keep = os.path.join(keep_dir, f"{digest}.pickle")
        if os.path.exists(keep):
            cached[bench.setup_cache_key] = keep
            return {"cached": True, "kept": True}
    path = os.path.join(cache_dir, f"{len(cached)}.pickle")

    def run() -> None:
        with open(path, "wb") as f:
            pickle.dump(bench.do_setup_cache(), f)

    code = _in_child(select, run)
    if code != 0:
        return {"error": f"setup_cache of {bench.name} ended with {code} (its traceback is in the log)"}
    if keep is not None:
        os.makedirs(keep_dir, exist_ok=True)
        shutil.copyfile(path, keep + ".tmp")
        os.replace(keep + ".tmp", keep)  # whole or absent: a worker killed here leaves no half file
    cached[bench.setup_cache_key] = path
    return {"cached": True}


def _figures_in_cache(bench) -> bool:
    return any(getattr(s, "figures_in_setup_cache", False) for s in bench._attr_sources)


def _attr(bench, name: str, default=None):
    """A benchmark attribute as asv_runner reads it: the method's own, else its class's, else ``default``."""
    return next((getattr(s, name) for s in bench._attr_sources if hasattr(s, name)), default)


#: what ``devbench gpu-run`` plans with: asv's timing attributes and the suite's plan declarations
#: (``devbench.gpu.plan``): its headline points and its own estimates of set-up and figure time
_PLANNED = ("rounds", "repeat", "sample_time", "warmup_time", "timeout", "headline", "plan_gpus", "plan_setup_s",
            "plan_s", "plan_cache_s", "plan_needs", "plan_last", "plan_min_stage_s", "skips", "swept", "sample_cap",
            "built_by")  # fmt: skip


def _describe(bench) -> dict:
    return {
        **{k: v for k in _PLANNED if (v := _attr(bench, k)) is not None},
        "name": bench.name,
        "unit": getattr(bench, "unit", ""),
        "params": [list(p) for p in bench.params],
        "param_names": list(bench.param_names),
        "version": bench.version,
        "setup_cache": bench.setup_cache_key if bench._setup_cache is not None else None,
        # the figure is measured in setup_cache itself (a sweep), so a turn reads the same value again
        "figures_in_setup_cache": _figures_in_cache(bench),
    }


def _cuda_devices() -> int | None:
    """The CUDA devices this side's torch sees, counted in a forked child (counting may start the driver,
    after which this process's later children could not use CUDA); ``None`` when it cannot be told, or when
    the suite did not import torch (importing it only to count would cost every pass seconds)."""
    if "torch" not in sys.modules:
        return None
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            import torch

            os.write(write_fd, str(torch.cuda.device_count()).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        said = f.read().decode()
    os.waitpid(pid, 0)
    return int(said) if said.isdigit() else None


def _environment() -> dict:
    """What this side runs on: Python, and the torch the suite imported with its CUDA and cuDNN builds (read from
    the module already loaded: nothing is imported or initialized for it)."""
    import platform

    out: dict = {"python_version": platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = getattr(torch, "__version__", None)
        out["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
        try:
            out["cudnn"] = torch.backends.cudnn.version()
        except Exception:  # noqa: BLE001 - a build without cuDNN
            out["cudnn"] = None
    return out


#: set in this worker for the benchmarks it runs (``devbench.engine.swept.TURNS_ENV``): a set-up's figure is asked
#: turn after turn here, with no asv clock counting from the set-up
TURNS_ENV = "DEVBENCH_TURNS"
#: a file where this worker also writes asv's own discovery of the suite (what ``asv run`` would import the suite
#: once more to find): ``devbench gpu-run`` hands it to each asv stage (``devbench.gpu.asvrun``)
ASV_DISCOVERY_ENV = "DEVBENCH_ASV_DISCOVERY"


def write_discovery(benchmark_dir: str, path: str) -> None:
    """asv_runner's listing of the suite (``asv run``'s discovery output, the suite already imported here), with the
    folder it lists and the devbench package the suite imported (its params come from there), written whole at
    ``path``."""
    import importlib.util
    import io

    from asv_runner.discovery import list_benchmarks

    listing = io.StringIO()
    list_benchmarks(os.path.abspath(benchmark_dir), listing)
    package = importlib.util.find_spec("devbench")  # the one the suite imported, else the one it would
    record = {"benchmark_dir": os.path.abspath(benchmark_dir), "benchmarks": json.loads(listing.getvalue()),
              "devbench": os.path.realpath(package.origin) if package and package.origin else None}  # fmt: skip
    fd, part = tempfile.mkstemp(prefix=".discovery-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fp:
            json.dump(record, fp)
        os.replace(part, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise


def main(benchmark_dir: str, reply_fd: int, keep_dir: str | None = None) -> int:
    from asv_runner.discovery import disc_benchmarks

    os.environ[TURNS_ENV] = "1"

    sys.path.insert(0, os.path.dirname(os.path.abspath(benchmark_dir)))
    benchmarks = {b.name: b for b in disc_benchmarks(os.path.abspath(benchmark_dir))}
    if os.environ.get(ASV_DISCOVERY_ENV):
        write_discovery(benchmark_dir, os.environ[ASV_DISCOVERY_ENV])
    _reply(reply_fd, {"benchmarks": [_describe(b) for b in benchmarks.values()], "pid": os.getpid(),
                      "cuda_devices": _cuda_devices(), "environment": _environment()})  # fmt: skip
    requests = iter(sys.stdin.readline, "")
    # beside the side's tree, in the comparison's work folder, which goes when it ends
    cache_dir = tempfile.mkdtemp(prefix=".cache-", dir=os.path.dirname(os.path.abspath(benchmark_dir)))
    cached: dict[str, str] = {}
    ended = ""  # why the open combination's process ended mid-turns: its later turns and its close are answered
    shared = mmap.mmap(-1, 8)  # the id of the last request the combination's process read (``_Answer``)
    for line in requests:
        request = json.loads(line)
        op, request_id = request.get("op"), int(request.get("id", 0))
        answer = functools.partial(_reply_to, reply_fd, request_id)
        if op == "quit":
            return 0
        if ended and op in ("turn", "close"):  # the coordinator ends the figure, not the compare
            answer({"closed": True} if op == "close" else {"error": ended, "ended": True})
            ended = "" if op == "close" else ended
            continue
        if op == "cache":
            answer(_run_cache(benchmarks.get(request.get("name", "")), request, cache_dir, cached, keep_dir))
            continue
        if op != "open":
            answer({"error": f"unknown request {op!r}"})
            continue
        ended = ""
        bench = benchmarks.get(request["name"])
        if bench is None:
            answer({"skip": f"no benchmark {request['name']} on this side"})
            continue
        bench.set_param_idx(int(request["idx"]))
        cache_file = cached.get(bench.setup_cache_key) if bench._setup_cache is not None else None
        block_s = float(request.get("block_s", 0.05))
        child = functools.partial(_child, bench, _Answer(reply_fd, shared, request_id), block_s, requests, cache_file)
        code = _in_child(request.get("select", ""), child)
        if code != 0:
            # the last request it read may be answered already (it died between turns, or in its tear-down after
            # ``closed``): the coordinator then drops this reply by its id, and a later turn or close is told here
            last = _last_read(shared)
            ended = f"the process of {bench.name} ended with {code} (its traceback is in the log)"
            _reply(reply_fd, {"error": ended, "ended": True, "id": last})
    return 0


if __name__ == "__main__":
    # usage: python worker.py BENCHMARK_DIR REPLY_FD [KEEP_DIR]
    # this file's folder is no path the side should import from: its devbench comes from PYTHONPATH
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    os.dup2(2, 1)  # the benchmarks' prints go to stderr; replies have their own descriptor
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
