"""One comparison's measurement: both sides' workers, the figures asked for, passes until each stops.

``measure`` takes the exported sides and returns every figure with what its passes measured, and the
run's record (sides, options, what each pass and figure cost) that ``record`` writes as ``run.json``.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from devbench.compare import deps, stopping
from devbench.compare.export import Side, benchmark_code
from devbench.compare.options import ABError, Options
from devbench.compare.runner import Figure, Passes, run_passes, start_both
from devbench.compare.selection import GPU_VALUES, bench_pattern, plan_figures, sees_cuda
from devbench.compare.session import Worker


def _worker_env(opts: Options) -> dict[str, str]:
    env = dict(os.environ)
    env["DEVBENCH_BLOCKS"] = str(opts.track_blocks)
    env.pop("DEVBENCH_BENCH", None)  # set per combination by the worker
    env["PYTHONUNBUFFERED"] = "1"
    # every pass starts a worker per side and the collectives start worlds of ranks, each importing torch:
    # without bytecode on disk each import compiles torch from source again (as the Makefile says)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def busy_host_note(load: float, cores: int, threads_env: str | None) -> str | None:
    """What to tell a user who compares on a host where other work holds a core, or ``None``.

    ``load``: the one-minute load average; ``cores``: the cores this process may use;
    ``threads_env``: ``$DEVBENCH_THREADS``. Each benchmark process otherwise runs one torch
    thread per core, and a pool with a thread on a busy core waits for it at every parallel
    region (docs/noise.md, "Threads"). A note only: the verdicts are paired either way.
    """
    if threads_env or cores < 2 or load < 1.0:
        return None
    return (f"the host is busy (load {load:.1f} on {cores} cores): each benchmark process runs "
            f"{cores} torch threads, which wait for busy cores; set DEVBENCH_THREADS to the free "
            "cores for a faster run (docs/noise.md, \"Threads\")")  # fmt: skip


#: a figure whose code cannot have changed (``deps``): not measured, and said so
SAME_CODE = ("same code: its benchmark module and every file it depends on are byte-identical on both sides, run by "
             "the same Python (docs/compare.md, \"What can have changed\"); --measure-all measures it")  # fmt: skip


def mark_same_code(figures: list[Figure], opts: Options, trees: dict[str, Path]) -> int:
    """Set every running figure whose code cannot differ between the sides to ``same code``; how many. None in
    two environments (the environment is what changed) or with ``--measure-all``."""
    if opts.measure_all or opts.python_of("base") != opts.python_of("head"):
        return 0
    unchanged = deps.unchanged_modules(trees["base"], trees["head"])
    count = 0
    for f in figures:
        if f.state == "running" and unchanged.get(f.combo.benchmark.split(".", 1)[0], False):
            f.state, f.reason = "same code", SAME_CODE
            count += 1
    return count


def measure(opts: Options, sides: list[Side], work: Path, log_path: Path) -> tuple[list[Figure], dict[str, Any]]:
    """Every selected figure, measured in passes of paired processes; the figures and the run's record."""
    note = busy_host_note(os.getloadavg()[0], len(os.sched_getaffinity(0)), os.environ.get("DEVBENCH_THREADS"))
    if note:
        print(note, flush=True)
    env = _worker_env(opts)
    trees = {s.name: s.tree for s in sides}
    started: list[Worker] = []
    with open(log_path, "ab") as log:

        def start() -> tuple[Worker, Worker]:
            pair = [Worker(side, opts.python_of(side), trees[side], log, env, timeout_s=opts.request_timeout_s)
                    for side in ("base", "head")]  # fmt: skip
            started.extend(pair)  # before they start: a kill during their start still stops them
            return start_both(*pair)

        try:
            first = start()
            environments = {w.side: {"python": w.python, **w.environment} for w in first}
            gpu = sees_cuda([w.cuda_devices for w in first])
            if not gpu:
                pythons = " or ".join(sorted({w.python for w in first}))
                print(f"no CUDA device for {pythons}: combinations on {' or '.join(GPU_VALUES)} are left out "
                      "(each would skip)", flush=True)  # fmt: skip
            pattern = bench_pattern(opts.bench, opts.twins, gpu)
            figures = plan_figures(first[0].benchmarks, first[1].benchmarks, pattern)
            same = mark_same_code(figures, opts, trees)
            if same:
                print(f"{same} figures run byte-identical code on both sides in one environment: listed as "
                      "'same code', not measured (--measure-all measures them)", flush=True)  # fmt: skip
            running = sum(f.state == "running" for f in figures)
            if opts.bench and not figures:
                raise ABError(f"--bench {opts.bench!r} selects no benchmark combination (of either side)")
            limit = stopping.limit(opts, figures)
            cached = max((limit(f) for f in figures if f.combo.in_cache), default=0)
            swept = f"; a sweep's figures, judged as one family, up to {cached}" if cached > opts.max_passes else ""
            print(f"{running} figures to measure, {len(figures) - running} not measured (same code, or new, gone, "
                  "changed or skipped on a side); "
                  f"up to {opts.max_passes} pairs of processes each (a verdict from {opts.min_passes}{swept}), "
                  f"up to {opts.pairs} pairs of blocks in each ({opts.figure_s:g} s of turns at most)",
                  flush=True)  # fmt: skip
            passes = Passes(opts.min_passes, opts.max_passes, opts.pairs, opts.block_s, opts.figure_s, limit,
                            opts.all_passes)  # fmt: skip
            t0 = time.monotonic()
            stop = stopping.stopper(opts, figures)
            took = run_passes(start, figures, passes, stop, log, first=first) if running else []
        finally:
            for w in started:
                w.stop()
    record = {
        "machine": opts.machine or socket.gethostname(),
        "sides": {s.name: {"rev": s.rev, "sha": s.sha, "benchmark_code": benchmark_code(opts.repo, s.sha),
                           "environment": environments.get(s.name, {"python": opts.python_of(s.name)})}
                  for s in sides},  # fmt: skip
        "bench": pattern,
        "cuda": gpu,
        "seconds": round(time.monotonic() - t0, 1),
        "passes": took,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()},
        "figures": {f.combo.selector: {"state": f.state, "reason": f.reason, "stopped_after": f.stopped_after,
                                       "benchmark": f.combo.benchmark, "idx": f.combo.idx,
                                       "values": list(f.combo.values), "names": list(f.combo.names),
                                       "unit": f.combo.unit, "setup_cache": f.combo.setup_cache,
                                       "in_cache": f.combo.in_cache, "seconds": round(f.seconds, 2),
                                       "setup_seconds": round(f.setup_seconds, 2), "pass_seconds": f.pass_seconds}
                    for f in figures},  # fmt: skip
    }
    return figures, record
