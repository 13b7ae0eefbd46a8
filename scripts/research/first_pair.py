"""Does a long call's first turn read apart from its later ones? (reports/compare-aa/first-pair)

A/A worker pairs, as ``devbench compare`` runs them: for each figure below, both sides set up in
turn (the side first alternating by pass), then three pairs of turns, every call kept with its
duration, the first pair included (compare keeps it only when it alone outlasts ``--figure-s``).

    python scripts/research/first_pair.py TREE --passes 6 --out turns.csv [--only burst]

``TREE`` holds the ``src/`` and ``benchmarks/`` to run (a checkout or ``git worktree``).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pairing_noise import index_of  # noqa: E402  (this folder is first on sys.path when run by path)

from devbench.compare.session import Worker, close_combination, open_combination, turn  # noqa: E402

#: the CPU figures whose one call lasts a second or more, and a product just under that
FIGURES = [
    ("bench_achievable.MatmulAchievable.track_tflops", ("'cpu'", "'float32'", "'sustained'")),
    ("bench_achievable.MatmulAchievable.track_tflops", ("'cpu'", "'bfloat16'", "'sustained'")),
    ("bench_achievable.MatmulAchievable.track_tflops", ("'cpu'", "'float32'", "'burst'")),
    ("bench_achievable.MatmulAchievable.track_tflops", ("'cpu'", "'bfloat16'", "'burst'")),
    ("bench_parallel.ParallelMatmul.track_speedup", ("'cpu_threads'", "1024")),
    ("bench_matmul.MatmulSquare.track_tflops", ("'cpu'", "'float32'", "4096")),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tree", type=Path, help="a checkout whose src/ and benchmarks/ run on both sides")
    p.add_argument("--passes", type=int, default=6, help="pairs of processes per figure (default 6)")
    p.add_argument("--out", type=Path, default=Path("turns.csv"), help="the CSV to write (default turns.csv)")
    p.add_argument("--only", metavar="REGEX", help="the figures whose name(params) this matches (default: all)")
    args = p.parse_args(argv)
    try:
        figures = [(n, v) for n, v in FIGURES if re.search(args.only or "", f"{n}({', '.join(v)})")]
    except re.error as exc:
        print(f"first_pair: --only {args.only!r}: {exc}", file=sys.stderr)
        return 2
    if not figures:
        print(f"first_pair: --only {args.only!r} matches none of the figures", file=sys.stderr)
        return 2
    if not (args.tree / "benchmarks").is_dir():
        print(f"first_pair: {args.tree} has no benchmarks/ folder", file=sys.stderr)
        return 2
    env = {"DEVBENCH_BLOCKS": "1", "PATH": "/usr/bin:/bin"}
    rows = []
    with open(args.out.with_suffix(".log"), "wb") as log:
        for n in range(args.passes):
            a = Worker("A", sys.executable, args.tree, log, env).start()
            b = Worker("B", sys.executable, args.tree, log, env).start()
            try:
                for name, values in figures:
                    idx = index_of(a.benchmarks[name]["params"], values)
                    first, second = ((a, "A"), (b, "B")) if n % 2 == 0 else ((b, "B"), (a, "A"))
                    for w, _ in (first, second):
                        opened = open_combination(w, name, idx, 0.05)
                        if opened.state != "ready":
                            print(f"first_pair: {name}{values}: {opened.state}: {opened.reason}", file=sys.stderr)
                            return 1
                    for i in range(3):
                        for w, side in (first, second):
                            started = time.monotonic()
                            value = turn(w)
                            rows.append([f"{name.split('.')[-2]} {' '.join(values)}", n, i, side, value,
                                         round(time.monotonic() - started, 3)])  # fmt: skip
                    close_combination(a)
                    close_combination(b)
            finally:
                a.stop()
                b.stop()
            print(f"pass {n + 1}/{args.passes} done", flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["figure", "pass", "pair", "side", "value", "seconds"])
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
