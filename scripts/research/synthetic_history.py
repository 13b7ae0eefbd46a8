#!/usr/bin/env python3
"""Make a synthetic asv result history and time the report (and ``asv publish``) on it.

    python scripts/research/synthetic_history.py /tmp/hist                 # 10 machines x 50 commits x 2 envs
    python scripts/research/synthetic_history.py /tmp/hist --publish       # also time `asv publish` on it
    python scripts/research/synthetic_history.py /tmp/hist --machines 2 --commits 5 --benchmarks 10

The files are written by asv's own ``Results.add_result``/``save`` (statistics computed
by asv from the samples), into a git repository whose commits they name, so asv can
publish them. Half the machines have no GPU (their ``cuda`` combinations are skipped),
one benchmark in ten fails on one machine, and every fifth benchmark gets 30% slower
halfway through the history, so the comparisons have something to find.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from asv.results import Results
from asv.runner import BenchmarkResult

DEVICES = ["'cpu'", "'cuda'"]
SIZES = ["16", "64", "256", "1024", "4096"]


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {"GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.com", "GIT_COMMITTER_NAME": "s",
           "GIT_COMMITTER_EMAIL": "s@example.com", "PATH": "/usr/bin:/bin:/usr/local/bin"}  # fmt: skip
    if date:
        env.update({"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def benchmarks(count: int) -> dict[str, dict]:
    out = {}
    for i in range(count):
        kind = "track" if i % 4 == 3 else "time"
        name = f"bench_syn.Family{i // 5}.{kind}_op{i % 5}"
        out[name] = {
            "name": name,
            "type": kind,
            "unit": "GB/s" if kind == "track" else "seconds",
            "params": [DEVICES, SIZES],
            "param_names": ["device", "n"],
            "version": f"{i:064x}",
            "timeout": 60.0,
            "code": "",
        }
    return out


def make(out: Path, machines: int, commits: int, envs: int, nbench: int, seed: int = 1) -> Path:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = random.Random(seed)
    conf = {"version": 1, "project": "synthetic", "repo": ".", "branches": ["main"], "benchmark_dir": "benchmarks",
            "results_dir": "results", "html_dir": "html", "environment_type": "existing"}  # fmt: skip
    (out / "asv.conf.json").write_text(json.dumps(conf))
    (out / "benchmarks").mkdir()
    _git(out, "init", "-q", "-b", "main")
    _git(out, "add", "-A")
    hashes, dates = [], []
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    for c in range(commits):
        when = start + datetime.timedelta(hours=c)
        _git(out, "commit", "-q", "--allow-empty", "-m", f"c{c}", date=when.isoformat())
        hashes.append(_git(out, "rev-parse", "HEAD"))
        dates.append(int(when.timestamp() * 1000))
    bench = benchmarks(nbench)
    results = out / "results"
    results.mkdir()
    (results / "benchmarks.json").write_text(json.dumps({**bench, "version": 2}))
    for m in range(machines):
        name = f"machine{m:02d}"
        has_gpu = m % 2 == 0
        info = {"machine": name, "arch": "x86_64", "cpu": f"Synthetic CPU {m}", "num_cpu": "16", "os": "Linux",
                "ram": "128000000000", "gpu": "NVIDIA H100 80GB HBM3" if has_gpu else "none",
                "gpu_count": "1" if has_gpu else "0", "cuda": "12.8" if has_gpu else "none", "version": 1}  # fmt: skip
        (results / name).mkdir()
        (results / name / "machine.json").write_text(json.dumps(info))
        speed = 1.0 + 0.1 * m
        for e in range(envs):
            torch = f"2.{12 + e}.0"
            env_name = f"virtualenv-py3.11-torch{torch}"
            for c, (commit, date) in enumerate(zip(hashes, dates, strict=True)):
                params = {k: v for k, v in info.items() if k != "version"}
                params.update({"python": "3.11", "torch": torch})
                res = Results(params, {"torch": torch}, commit, date, "3.11", env_name, {})
                for i, b in enumerate(bench.values()):
                    values, samples = [], []
                    for d in DEVICES:
                        for n in SIZES:
                            if d == "'cuda'" and not has_gpu:
                                values.append(float("nan"))
                                samples.append(None)
                                continue
                            if i % 10 == 9 and m == 1 and c >= commits // 2:
                                values.append(None)  # failed
                                samples.append(None)
                                continue
                            base = int(n) ** 1.5 * 1e-9 * (0.1 if d == "'cuda'" else 1.0) * speed * (1 + 0.05 * e)
                            if i % 5 == 0 and c >= commits // 2:
                                base *= 1.3
                            if b["type"] == "track":
                                base = 1.0 / base / 1e6
                            s = [base * (1 + rng.gauss(0, 0.01)) for _ in range(5)]
                            values.append(sorted(s)[2])
                            samples.append(s)
                    r = BenchmarkResult(result=values, samples=samples, number=[1] * len(values), errcode=0,
                                        stderr="", profile=None)  # fmt: skip
                    res.add_result(b, r, started_at=start + datetime.timedelta(hours=c), duration=1.0)
                res.save(str(results))
    return out


def time_report(project: Path) -> float:
    from devbench.report.cli import main

    t0 = time.perf_counter()
    code = main(["--results", str(project / "results"), "--out", str(project / "report"), "--quiet"])
    if code != 0:
        raise SystemExit(f"report failed with exit status {code}")
    return time.perf_counter() - t0


def time_publish(project: Path) -> float:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "asv", "publish"], cwd=project, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"asv publish failed:\n{out.stdout}\n{out.stderr}")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="folder to create (replaced if it exists)")
    p.add_argument("--machines", type=int, default=10)
    p.add_argument("--commits", type=int, default=50)
    p.add_argument("--envs", type=int, default=2)
    p.add_argument("--benchmarks", type=int, default=50)
    p.add_argument("--publish", action="store_true", help="also time `asv publish` on the same directory")
    args = p.parse_args(argv)
    for name in ("machines", "commits", "envs", "benchmarks"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    t0 = time.perf_counter()
    project = make(args.out, args.machines, args.commits, args.envs, args.benchmarks)
    files = args.machines * args.commits * args.envs
    print(f"wrote {files} result files ({args.benchmarks} benchmarks x 10 params) in {time.perf_counter() - t0:.1f} s")
    report_s = time_report(project)
    print(f"devbench report (load + write md/html/csv/png): {report_s:.2f} s")
    if args.publish:
        publish_s = time_publish(project)
        print(f"asv publish: {publish_s:.2f} s  (report is {publish_s / report_s:.1f}x faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
