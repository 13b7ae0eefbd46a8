#!/usr/bin/env python3
"""What torch's CPU thread count costs when other work holds cores: one table, measured in turns.

Times two CPU workloads at each thread count from 1 to the cores this process may use, with 0
to --busy-max other processes spinning beside it (``yes > /dev/null``, started and stopped by
this script). The settings take turns, round after round, so the host's drift over minutes
falls on every setting alike. Each cell is the median over rounds of a round's median call.

- ``step``: one logging step of a small model, a 100x100 product and its Frobenius norm read
  back with ``.item()`` (what ``LogNorms`` does per step);
- ``matmul``: one float32 1,024 x 1,024 product.

    python scripts/research/threads_probe.py --out reports/noise/threads    # table on stdout, data in --out
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from devbench.engine.measure import pin_threads
from devbench.workloads.matmul import Matmul


def _step_fn():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(100, 100, generator=gen)
    b = torch.randn(100, 100, generator=gen)

    def step():
        return torch.linalg.matrix_norm(a @ b).item()

    want = float(torch.linalg.matrix_norm(a.double() @ b.double()))
    got = step()
    if abs(got - want) > 1e-5 * want:  # the timed step is checked once against float64
        raise AssertionError(f"step: Frobenius norm {got} against {want} in float64")
    return step


def _matmul_fn():
    mm = Matmul(1024, "float32", torch.device("cpu"))
    mm.check()
    return mm


WORKLOADS = {"step": (_step_fn, 0.05), "matmul": (_matmul_fn, 0.2)}


def _median_call(fn, window_s: float) -> float:
    """Seconds per call: the median over calls in one window of about ``window_s``."""
    times = []
    end = time.perf_counter() + window_s
    while time.perf_counter() < end or len(times) < 3:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@contextlib.contextmanager
def _busy(count: int):
    """``count`` processes spinning on a core each, stopped on leaving (also on Ctrl-C)."""
    procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(count)]
    try:
        time.sleep(0.2 if count else 0.0)
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12, help="turns of every setting (default: 12)")
    p.add_argument("--busy-max", type=int, default=1, help="most spinning processes beside (default: 1)")
    p.add_argument("--out", type=Path, help="folder for threads.csv and threads.json")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.busy_max < 0:
        p.error("--rounds >= 1 and --busy-max >= 0")
    if a.busy_max and shutil.which("yes") is None:
        p.error("--busy-max needs the 'yes' command, which is not on PATH")
    # a kill still stops the spinning processes (SystemExit runs _busy's cleanup)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return _run(a)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(a: argparse.Namespace) -> int:
    cores = len(os.sched_getaffinity(0))
    threads = list(range(1, cores + 1))
    fns = {name: make() for name, (make, _) in WORKLOADS.items()}
    cells: dict[tuple[str, int, int], list[float]] = {}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        for r in range(a.rounds):
            for busy in range(a.busy_max + 1):
                with _busy(busy):
                    for t in threads if r % 2 == 0 else reversed(threads):
                        pin_threads(t)
                        for name, fn in fns.items():
                            _median_call(fn, 0.02)  # the pool wakes up
                            cells.setdefault((name, busy, t), []).append(_median_call(fn, WORKLOADS[name][1]))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted: nothing written", file=sys.stderr)
        return 130
    except SystemExit:
        print("terminated: nothing written", file=sys.stderr)
        raise
    rows = [
        {"workload": n, "busy": b, "threads": t, "median_us": statistics.median(v) * 1e6, "rounds": len(v)}
        for (n, b, t), v in sorted(cells.items())
    ]
    print(f"{'workload':8} {'busy':>4} {'threads':>7} {'median us':>10}")
    for row in rows:
        print(f"{row['workload']:8} {row['busy']:>4} {row['threads']:>7} {row['median_us']:>10.1f}")
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        with open(a.out / "threads.csv.tmp", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        os.replace(a.out / "threads.csv.tmp", a.out / "threads.csv")
        meta = {
            "started_utc": started,
            "cores": cores,
            "cpu": platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "rounds": a.rounds,
        }
        (a.out / "threads.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
