"""Where the noise of a figure comes from on this host, and how much pairing removes (docs/noise.md).

Measures a few representative figures in A/A worker pairs (two processes of the same code taking
strict turns, as ``devbench compare`` runs them) spread over several minutes, and splits the spread
of the log figure into: within a process (block to block), between two processes started at the
same moment (a process's own layout), and over time (seconds within a pass, minutes between passes).
The last is what pairing cancels; the second is what only more process pairs average out.

    python scripts/research/pairing_noise.py --out reports/noise/pairing [--passes 10 --pairs 16 --minutes 8]

Writes ``blocks.csv`` (every block: figure, pass, pair, side, value, time) and ``summary.md``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from devbench.compare.export import export, resolve  # noqa: E402
from devbench.compare.session import Worker, close_combination, open_combination, turn  # noqa: E402

#: (label, benchmark, params): a small and a large product, a small and a large copy, per-step logging
FIGURES = [
    ("matmul float32 n=64", "bench_matmul.MatmulSquare.track_tflops", ("'cpu'", "'float32'", "64")),
    ("matmul float32 n=1024", "bench_matmul.MatmulSquare.track_tflops", ("'cpu'", "'float32'", "1024")),
    ("host copy 1 MiB", "bench_transfer.DeviceCopy.track_gbps_copied", ("'cpu'", str(1 << 20))),
    ("host copy 64 MiB", "bench_transfer.DeviceCopy.track_gbps_copied", ("'cpu'", str(64 << 20))),
    ("per-step .item() logging", "bench_logging.LogNorms.time_loop", ("'cpu'", "'per_step_item'", "100", "100")),
]


def index_of(params: list[list[str]], values: tuple[str, ...]) -> int:
    idx = 0
    for choices, value in zip(params, values, strict=True):
        idx = idx * len(choices) + choices.index(value)
    return idx


def measure(tree: Path, passes: int, pairs: int, minutes: float, log) -> list[dict]:
    rows = []
    t0 = time.monotonic()
    env = {"DEVBENCH_BLOCKS": "1", "PATH": "/usr/bin:/bin"}
    for p in range(passes):
        a = Worker("A", sys.executable, tree, log, env).start()
        b = Worker("B", sys.executable, tree, log, env).start()
        try:
            for label, name, values in FIGURES:
                idx = index_of(a.benchmarks[name]["params"], values)
                oa, ob = open_combination(a, name, idx, 0.05), open_combination(b, name, idx, 0.05)
                if oa.state != "ready" or ob.state != "ready":
                    raise SystemExit(f"{label}: {oa} {ob}")
                for i in range(-1, pairs):  # pair -1: the turn-taking's warm-up, not kept
                    for side, w in ((("A", a), ("B", b)) if i % 2 == 0 else (("B", b), ("A", a))):
                        value = turn(w)
                        rows.append({"figure": label, "pass": p, "pair": i, "side": side, "value": value,
                                     "t": round(time.monotonic() - t0, 3)})  # fmt: skip
                close_combination(a)
                close_combination(b)
        finally:
            a.stop()
            b.stop()
        print(f"pass {p + 1}/{passes} at {time.monotonic() - t0:.0f} s", flush=True)
        wait = t0 + (p + 1) * minutes * 60 / passes - time.monotonic()
        if wait > 0 and p + 1 < passes:
            time.sleep(wait)
    return rows


def sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else math.nan


def summarize(rows: list[dict], pairs: int) -> list[dict]:
    out = []
    for label, *_ in FIGURES:
        mine = [r for r in rows if r["figure"] == label and r["value"] > 0 and r["pair"] >= 0]
        by = {}
        for r in mine:
            by.setdefault((r["pass"], r["side"]), []).append(math.log(r["value"]))
        passes = sorted({p for p, _ in by})
        # within a process: successive blocks of one process (drift over one block removed)
        within = [(y - x) / math.sqrt(2) for logs in by.values() for x, y in zip(logs, logs[1:], strict=False)]
        within_sd = math.sqrt(statistics.fmean(d * d for d in within))
        # pairs: log(B/A) of adjacent blocks
        pair_logs, pass_diffs, pass_levels = [], [], []
        for p in passes:
            la, lb = by[(p, "A")], by[(p, "B")]
            diffs = [y - x for x, y in zip(la, lb, strict=False)]
            pair_logs += diffs
            pass_diffs.append(statistics.fmean(diffs))
            pass_levels.append(statistics.fmean(la + lb))
        pair_sd = sd(pair_logs)
        # between processes of one moment: the pass's mean A-B offset beyond what its pairs' noise gives
        between_var = statistics.variance(pass_diffs) - pair_sd**2 / pairs if len(passes) > 1 else math.nan
        between_sd = math.sqrt(max(0.0, between_var) / 2)
        # over minutes: the level of each pass (both processes), beyond the processes' own offsets
        spread = statistics.variance(pass_levels) if len(passes) > 1 else math.nan
        minutes_sd = math.sqrt(max(0.0, spread - between_sd**2 / 2))
        # a single block against one of another process minutes away: what unpaired comparison sees
        unpaired = [math.log(r["value"]) for r in mine]
        out.append({
            "figure": label, "blocks": len(mine), "passes": len(passes),
            "within_pct": 100 * within_sd, "pair_pct": 100 * pair_sd, "between_pct": 100 * between_sd,
            "minutes_pct": 100 * minutes_sd, "all_blocks_pct": 100 * sd(unpaired),
        })  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for blocks.csv and summary.md")
    ap.add_argument("--passes", type=int, default=10, help="worker pairs, each a fresh pair of processes (default 10)")
    ap.add_argument("--pairs", type=int, default=16, help="pairs of blocks per figure per pass (default 16)")
    ap.add_argument("--commit", default="HEAD", help="the commit whose benchmarks are measured (default HEAD)")
    ap.add_argument("--minutes", type=float, default=8.0, help="spread the passes over this long (default 8)")
    args = ap.parse_args()
    import pandas as pd

    repo = Path(__file__).resolve().parents[1]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "worker.log", "ab") as log:
        tree = Path(tmp) / "tree"  # the committed code, not a working tree that may change meanwhile
        export(repo, resolve(repo, args.commit), tree)
        rows = measure(tree, args.passes, args.pairs, args.minutes, log)
    pd.DataFrame(rows).to_csv(out / "blocks.csv", index=False)
    table = pd.DataFrame(summarize(rows, args.pairs)).round(2)
    (out / "summary.md").write_text(table.to_markdown(index=False) + "\n")
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
