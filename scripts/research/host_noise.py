#!/usr/bin/env python3
"""Is this host quiet enough to benchmark? Time one tiny CPU matmul, window after window.

Prints the median time of a 16x16 matmul (or --n) in each of --windows windows of
--window-ms, --gap-ms apart, then the spread. On a quiet machine the windows agree to a
few percent; on a shared VM they jump between levels (devbench's 2-vCPU VM: 5.8 us and
10-13 us, switching every few hundred milliseconds), and no benchmark setting removes
that from run-to-run comparisons (docs/noise.md, "Where a figure's spread comes from").

    python scripts/research/host_noise.py                 # 40 windows of 20 ms, 100 ms apart
    python scripts/research/host_noise.py --dtype float32 --n 64 --windows 100
"""

import argparse
import statistics
import sys
import time

import torch

from devbench.engine.measure import pin_threads
from devbench.workloads.matmul import Matmul


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=16, help="matrix size (default: 16)")
    p.add_argument("--dtype", default="bfloat16", help="float32, bfloat16, ... (default: bfloat16)")
    p.add_argument("--windows", type=int, default=40, help="number of windows (default: 40)")
    p.add_argument("--window-ms", type=float, default=20.0, help="length of one window (default: 20)")
    p.add_argument("--gap-ms", type=float, default=100.0, help="pause between windows (default: 100)")
    a = p.parse_args(argv)
    if a.n < 1 or a.windows < 2 or a.window_ms <= 0 or a.gap_ms < 0:
        p.error("--n >= 1, --windows >= 2, --window-ms > 0 and --gap-ms >= 0")
    pin_threads()
    mm = Matmul(a.n, a.dtype, torch.device("cpu"))
    mm.check()
    for _ in range(100):
        mm()
    medians = []
    for _ in range(a.windows):
        times, end = [], time.perf_counter() + a.window_ms / 1e3
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            mm()
            times.append(time.perf_counter() - t0)
        medians.append(statistics.median(times) * 1e6)
        time.sleep(a.gap_ms / 1e3)
    print(" ".join(f"{m:.1f}" for m in medians))
    lo, mid, hi = min(medians), statistics.median(medians), max(medians)
    print(
        f"{a.dtype} {a.n}x{a.n} matmul, us per product: min {lo:.2f}, median {mid:.2f}, max {hi:.2f} "
        f"(max/min {hi / lo:.2f}) over {a.windows} windows"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
