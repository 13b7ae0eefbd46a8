"""``devbench compare`` and ``devbench calibrate``: two commits (or one, twice) measured interleaved.

How a comparison runs (docs/design.md, "Verdicts"):

1. Each commit's ``benchmarks/`` and ``src/`` are exported with ``git archive`` into a work
   folder: nothing is installed and no package index is needed. asv runs them in the local
   Python's environment (``-E existing:PYTHON``) with the commit's ``src`` first on the
   path (asv's ``ASV_PYTHONPATH``), so each side runs its own devbench with the torch
   already installed.
2. Rounds alternate the sides, ABBA (A B, B A, A B, ...): a host that drifts over minutes
   favours neither side. Each round is one ``asv run`` of every selected benchmark with
   ``rounds=1``: every benchmark in a fresh process, as asv samples.
3. Each round writes its own asv results folder, so each (side, round, figure) is one
   process's figure. Those per-process figures are the evidence ``devbench.verdict``
   judges; the samples inside a process are kept too (``--record-samples``).

``calibrate`` is the same with one commit on both sides (an A/A run): every difference it
sees is noise. It learns each figure's noise floor, stores it beside the results
(``.asv/noise/<machine>.json``), and reports the false-positive rate at the default gate
and each figure's minimum detectable change. ``compare`` and the report use the floors.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devbench import hostprobe
from devbench import verdict as V
from devbench.files import write_atomic
from devbench.spec import direction

#: rounds per side: 5 give a 99% interval from the smallest and largest of 25 differences
#: (verdict.order_statistic_k; at 95% it would be the 3rd)
ROUNDS = 5
#: asv sampling inside each process of a comparison: fewer samples than a full run's (the
#: rounds carry the evidence); a user trades rounds for time in benchmarks/README.md
REPEAT = "(2, 10, 0.25)"
#: blocks per track_ figure inside each process (devbench.measure reads DEVBENCH_BLOCKS)
BLOCKS = 3
#: more rounds per side, after the first ``ROUNDS``, for the figures (parameter combinations) that lean to a
#: change (estimate beyond the noise floor) but are undecided: the evidence goes where a change may be
EXTRA_ROUNDS = 5
#: asv compare's own 99%: across ~220 figures a 95% interval gave one false "faster" in three A/A runs on
#: the 2-vCPU VM, 99% none (reports/compare-aa-twins/README.md); the price is power (benchmarks/README.md)
CONFIDENCE = 0.99
NOISE_DIR = Path(".asv") / "noise"


class ABError(Exception):
    """Bad input or a failed step, with a one-line reason (exit 2)."""


class Terminated(Exception):
    """SIGTERM (``kill``, a CI job's timeout): the run stops and cleans up as on Ctrl-C (exit 143)."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


@dataclass
class Side:
    name: str  # "base" or "head" (calibrate: "A" and "B")
    rev: str  # what the user typed
    sha: str
    tree: Path  # exported benchmarks/ and src/
    config: Path


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if out.returncode != 0:
        raise ABError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"git {' '.join(args)} failed")
    return out.stdout.strip()


def resolve(repo: Path, rev: str) -> str:
    """The full hash of ``rev`` (a branch, tag or hash), or ``ABError`` naming it."""
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        raise ABError(f"{rev!r} is not a commit of the repository at {repo}") from None


#: what the benchmarks run: two commits with the same Python files here (and the same asv
#: configuration) measure the same code; documentation beside them does not count
BENCHMARK_CODE = (
    "asv.conf.json",
    "benchmarks",
    "src/devbench/workloads",
    "src/devbench/measure.py",
    "src/devbench/suite.py",
    "src/devbench/spec.py",
    "src/devbench/devices.py",
)


def benchmark_code(repo: Path, sha: str) -> str:
    """The git blob ids of the code the benchmarks run at ``sha`` (Python files and asv.conf.json), as one string."""
    listing = _git(repo, "ls-tree", "-r", sha, "--", *BENCHMARK_CODE)
    blobs = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        if path.endswith(".py") or path == "asv.conf.json":
            blobs.append(f"{path}={meta.split()[2]}")
    return " ".join(sorted(blobs))


def export(repo: Path, sha: str, dest: Path) -> None:
    """The commit's ``benchmarks/``, ``src/`` and ``asv.conf.json`` under ``dest`` (git archive)."""
    listed = _git(repo, "ls-tree", "--name-only", sha).split("\n")
    wanted = [p for p in ("benchmarks", "src", "asv.conf.json") if p in listed]
    if "benchmarks" not in wanted or "asv.conf.json" not in wanted:
        raise ABError(f"commit {sha[:8]} has no benchmarks/ or asv.conf.json: not a devbench (asv) commit")
    dest.mkdir(parents=True)
    with tempfile.TemporaryFile() as tar:
        subprocess.run(["git", "archive", "--format=tar", sha, *wanted], cwd=repo, stdout=tar, check=True)
        tar.seek(0)
        with tarfile.open(fileobj=tar) as t:
            t.extractall(dest, filter="data")


def write_config(repo: Path, tree: Path, work: Path) -> Path:
    """The commit's asv.conf.json pointed at its exported benchmarks and at per-round results."""
    from asv.util import load_json

    conf = load_json(str(tree / "asv.conf.json"), js_comments=True)
    conf.update(
        repo=str(repo),
        benchmark_dir=str(tree / "benchmarks"),
        results_dir=str(tree / "results"),  # replaced per round on the command line
        env_dir=str(work / "env"),
        html_dir=str(work / "html"),
    )
    path = tree / "asv.ab.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def _round_config(side: Side, results: Path) -> Path:
    conf = json.loads(side.config.read_text())
    conf["results_dir"] = str(results)
    path = results.parent / f"{results.name}.asv.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def run_round(
    side: Side,
    results: Path,
    python: str,
    bench: str | None,
    machine: str | None,
    log: Path,
    repeat: str = REPEAT,
    blocks: int = BLOCKS,
) -> None:
    """One ``asv run`` of ``side`` into ``results``: every selected benchmark once, each in a fresh process."""
    cmd = [
        python, "-m", "asv", "run", "--config", str(_round_config(side, results)),
        "-E", f"existing:{python}", "--set-commit-hash", side.sha, "--record-samples",
        "-a", "rounds=1", "-a", f"repeat={repeat}", "--show-stderr",
    ]  # fmt: skip
    if bench:
        cmd += ["--bench", bench]
    if machine:
        cmd += ["--machine", machine]
    env = {**os.environ, "ASV_PYTHONPATH": str(side.tree / "src"), "DEVBENCH_BLOCKS": str(blocks)}
    # asv does not tell a setup_cache which combinations --bench selected; one that measures many figures
    # at once (the collectives' sweep) reads the pattern here and measures only those (suite.selected)
    env.pop("DEVBENCH_BENCH", None)
    if bench:
        env["DEVBENCH_BENCH"] = bench
    # every benchmark process probes the host before and after its timed work (devbench.hostprobe)
    env[hostprobe.ENV] = str(probe_file(results))
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        rc = subprocess.run(cmd, cwd=side.tree, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    # asv exits 2 when a benchmark failed; its results are still written and the failure is in the log
    if rc not in (0, 2) or not any(results.glob("*/*.json")):
        raise ABError(f"asv run of {side.name} ({side.sha[:8]}) failed with exit {rc}; see {log}")


def probe_file(results: Path) -> Path:
    """Where the benchmark processes of the round writing ``results`` append their host probes."""
    return results.parent / f"{results.name}.hostprobe.jsonl"


def with_probes(frame: Any, lines: Sequence[dict]) -> Any:
    """``frame`` (one round of one side) with ``host_probe_us``: the slowest host probe around each
    figure's process (NaN where the process recorded none: a benchmark outside ``suite.Benchmark``)."""
    worst = hostprobe.worst_by_figure(lines)
    keys = zip(frame["benchmark"].astype(str), frame["params"].astype(str), strict=True)
    return frame.assign(host_probe_us=[worst.get(k, math.nan) for k in keys])


def collect(work: Path, sides: Sequence[Side], rounds: int) -> Any:
    """One row per (side, round, figure): the figure of that process and the host probe around it (pandas frame)."""
    import pandas as pd

    from devbench.report.load import load_results

    frames = []
    for side in sides:
        for r in range(rounds):
            root = work / side.name / f"r{r}"
            if not root.is_dir():
                continue
            loaded = load_results(root)
            f = loaded.frame
            f = f[(f["status"] == "ok") & f["value"].notna()]
            keep = ["side", "round", "machine", "benchmark", "params", "unit", "value", "version"]
            f = f.assign(side=side.name, round=r, version=f["version"].astype(object))[keep]
            frames.append(with_probes(f, hostprobe.read([probe_file(root)])))
    if not frames:
        raise ABError("no results: every round failed (see the log)")
    return pd.concat(frames, ignore_index=True)  # asv's --bench already selected


def judge_all(per_process: Any, a: str, b: str, floors: dict[str, float], confidence: float) -> Any:
    """One verdict per figure: side ``b`` against side ``a``."""
    import pandas as pd

    rows = []
    for (bench, params, unit), g in per_process.groupby(["benchmark", "params", "unit"], sort=True, dropna=False):
        way = direction(bench, unit)
        if not way:
            continue  # a record of the machine, not a measurement
        floor = floors.get(V.figure_key(bench, params), V.DEFAULT_FLOOR)
        base = g.loc[g["side"] == a, "value"].tolist()
        head = g.loc[g["side"] == b, "value"].tolist()
        v = V.judge(base, head, higher_is_better=way == "higher", floor=floor, confidence=confidence)
        note = one_side_note(v.n_base, v.n_head, a, b) or changed_note(g, a, b)
        rows.append(
            {
                "benchmark": bench, "params": params, "unit": unit, "better": way,
                "base": v.base, "head": v.head, "ratio": v.ratio, "ratio_lo": v.ratio_lo, "ratio_hi": v.ratio_hi,
                "floor": floor, "verdict": V.UNDECIDED if note else v.verdict, "n_base": v.n_base,
                "n_head": v.n_head, "note": note,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def one_side_note(n_a: int, n_b: int, a: str = "base", b: str = "head") -> str:
    """Why a figure cannot be judged when one side has no result: it failed or skipped there (the log says
    which), or it is new or gone; empty when both sides measured it."""
    if n_a and not n_b:
        return f"no result on {b}: failed or skipped there (see the log), or the benchmark is gone"
    if n_b and not n_a:
        return f"no result on {a}: failed or skipped there (see the log), or the benchmark is new"
    return ""


def changed_note(g: Any, a: str = "base", b: str = "head") -> str:
    """Why a figure measured on both sides is not judged: its benchmark's asv version differs between
    them (its method, set-up or ``work_version`` changed), so the sides timed different work, as
    ``asv compare`` marks with ``x``; empty when the versions agree or were not recorded."""
    if "version" not in g:
        return ""
    seen = [set(g.loc[(g["side"] == s) & g["version"].notna() & (g["version"] != ""), "version"]) for s in (a, b)]
    if not seen[0] or not seen[1] or seen[0] == seen[1]:
        return ""
    return (f"benchmark changed: its asv version differs between {a} and {b} (its code or work_version changed), "
            "so the sides timed different work")  # fmt: skip


# --- noise floors stored beside the results ---------------------------------------------------------------


def noise_path(asv_dir: Path, machine: str) -> Path:
    return asv_dir / "noise" / f"{machine}.json"


def _noise_figures(asv_dir: Path, machine: str) -> dict[str, dict[str, Any]]:
    """The per-figure entries of ``machine``'s noise file ({} when it was never calibrated)."""
    path = noise_path(asv_dir, machine)
    if not path.is_file():
        return {}
    try:
        figures = json.loads(path.read_text())["figures"]
        if not all(isinstance(v, dict) for v in figures.values()):
            raise TypeError("a figure's entry is not an object")
        return figures
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ABError(f"{path}: not a devbench noise file ({exc}); run devbench calibrate again") from None


def load_floors(asv_dir: Path, machine: str) -> dict[str, float]:
    """The learned floors of ``machine`` ({} when it was never calibrated)."""
    figures = _noise_figures(asv_dir, machine)
    try:
        return {k: float(v["floor"]) for k, v in figures.items()}
    except (ValueError, KeyError, TypeError) as exc:
        path = noise_path(asv_dir, machine)
        raise ABError(f"{path}: not a devbench noise file ({exc}); run devbench calibrate again") from None


def load_sensitive(asv_dir: Path, machine: str) -> set[str]:
    """The figures ``calibrate`` found the host's slow stretches move on ``machine`` (``hostprobe.sensitive``)."""
    return {k for k, v in _noise_figures(asv_dir, machine).items() if v.get("host_sensitive")}


def learn(per_process: Any, confidence: float) -> Any:
    """Per figure: the learned floor and the minimum detectable change from an A/A run."""
    import pandas as pd

    rows = []
    for (bench, params, unit), g in per_process.groupby(["benchmark", "params", "unit"], sort=True, dropna=False):
        if not direction(bench, unit):
            continue
        a = g.loc[g["side"] == "A", "value"].tolist()
        b = g.loc[g["side"] == "B", "value"].tolist()
        floor = V.learned_floor(a, b)
        rows.append(
            {
                "benchmark": bench, "params": params, "unit": unit, "floor": floor,
                "sigma": V.process_sigma([*a, *b]), "detectable": V.detectable_change(floor, a, b, confidence),
                "rounds": min(len(a), len(b)),
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


# --- output -----------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * (x - 1):+.1f}%"


def _interval(row: Any) -> str:
    return V.interval_text(row.ratio_lo, row.ratio_hi, getattr(row, "stopped_after", None))


def _md_escape(text: str) -> str:
    from devbench.report.writers import md_escape

    return md_escape(text)


def summary_counts(table: Any) -> dict[str, int]:
    return {v: int((table["verdict"] == v).sum()) for v in V.VERDICTS}


def to_text(table: Any, title: str) -> str:
    counts = summary_counts(table)
    lines = [title, ", ".join(f"{n} {v}" for v, n in counts.items()), ""]
    order = {V.SLOWER: 0, V.FASTER: 1, V.UNDECIDED: 2, V.SAME: 3}
    shown = table.assign(
        o=table["verdict"].map(order), size=(table["ratio"].apply(lambda r: abs(math.log(r)) if r > 0 else 0))
    )
    shown = shown.sort_values(["o", "size"], ascending=[True, False])
    width = min(70, max((len(f"{r.benchmark} {r.params}") for r in shown.itertuples()), default=10))
    one_side = []
    for r in shown.itertuples():
        if r.verdict == V.SAME:
            continue
        name = f"{r.benchmark} {r.params}"[:width]
        if getattr(r, "note", ""):
            one_side.append(f"{r.verdict:>9}  {name}: {r.note}")
            continue
        lines.append(f"{r.verdict:>9}  {_pct(r.ratio):>8} {_interval(r):>20}  floor {100 * r.floor:4.1f}%  {name}")
    if one_side:
        lines += ["", f"not judged ({len(one_side)}):", *one_side]
    if counts[V.SAME]:
        lines.append(f"     same  {counts[V.SAME]} figures within their noise floor")
    return "\n".join(lines) + "\n"


def to_markdown(table: Any, title: str, notes: Sequence[str], confidence: float = CONFIDENCE) -> str:
    counts = summary_counts(table)
    out = [f"### {_md_escape(title)}", "", " · ".join(f"**{n}** {v}" for v, n in counts.items()), ""]
    out += [f"> {_md_escape(n)}" for n in notes] + [""]
    level = f"{round(100 * confidence)}% interval"
    head = f"| verdict | benchmark | params | change | {level} | floor | base | head | unit |"
    rule = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"

    def rows(sel):
        return [
            f"| {r.verdict} | {_md_escape(r.benchmark)} | {_md_escape(str(r.params))} | {_pct(r.ratio)} | "
            f"{_interval(r)} | {100 * r.floor:.1f}% | {r.base:.4g} | {r.head:.4g} | {_md_escape(r.unit)} |"
            for r in sel.itertuples()
        ]

    flagged = table[table["verdict"].isin([V.SLOWER, V.FASTER])]
    if len(flagged):
        out += [head, rule, *rows(flagged), ""]
    else:
        out += ["No figure is faster or slower beyond its noise floor.", ""]
    noted = table["note"].astype(bool) if "note" in table else table["verdict"].map(lambda _: False)
    if noted.any():
        out += [f"**Not judged ({int(noted.sum())})**: measured on one side only, or the benchmark changed.", ""]
        out += [f"- {_md_escape(V.figure_key(r.benchmark, r.params))}: {_md_escape(r.note)}"
                for r in table[noted].itertuples()]  # fmt: skip
        out += [""]
    for verdict, what in ((V.UNDECIDED, "the data cannot tell"), (V.SAME, "within the noise floor")):
        sel = table[(table["verdict"] == verdict) & ~noted]
        if len(sel):
            out += [
                f"<details><summary>{len(sel)} {verdict} ({what})</summary>",
                "",
                head,
                rule,
                *rows(sel),
                "",
                "</details>",
                "",
            ]
    return "\n".join(out)


def publish(out_dir: Path, files: dict[str, bytes | str]) -> None:
    """Write ``files`` as the whole of ``out_dir`` (swapped in at once; ``--out`` problems are ``ABError``)."""
    from devbench.files import OutputError, staged_dir

    try:
        with staged_dir(Path(out_dir)) as tmp:
            for name, data in files.items():
                write_atomic(tmp / name, data)
    except OutputError as exc:
        raise ABError(str(exc)) from None


# --- the commands -----------------------------------------------------------------------------------------


@dataclass
class Plan:
    repo: Path
    work: Path
    sides: list[Side]
    rounds: int
    python: str
    bench: str | None
    machine: str | None
    repeat: str
    blocks: int
    log: Path
    #: whether the benchmarks' Python sees a CUDA device (False: GPU combinations were left out)
    cuda: bool = True


#: parameter values that need CUDA (a device, a backend): on a machine without it every such combination skips
GPU_VALUES = ("cuda", "nccl")


def bench_pattern(bench: str | None, twins: bool, gpu: bool = True) -> str:
    """asv's ``--bench`` for a compare: ``bench`` (all when None), without what a compare never judges.

    Left out: the twins (``spec.TWINS``) unless ``twins``; the records of the machine
    (``spec.RECORDS``: never judged, and one of them is a ``setup_cache``, a fresh interpreter
    a round); and, when ``gpu`` is false (no CUDA device for the benchmarks' Python), every
    parameter combination with a value of ``GPU_VALUES``, each of which would cost a forked
    process to skip. asv matches ``--bench`` against ``name('value', ...)`` and ORs several
    ``--bench``, so all of it is one regular expression.
    """
    from devbench.spec import RECORDS, TWINS

    left_out = set(RECORDS) | (set() if twins else set(TWINS))
    skip = "|".join(re.escape(k) for k in sorted(left_out))
    keep = f"(?=.*(?:{bench}))" if bench else ""
    no_gpu = "" if gpu else "(?!.*'(?:" + "|".join(GPU_VALUES) + ")')"
    return f"^{keep}{no_gpu}(?!(?:{skip})(?:\\(|$))"


def has_cuda(python: str) -> bool:
    """Whether ``python``'s torch sees a CUDA device (True when that cannot be told: nothing is left out)."""
    probe = "import torch; print(torch.cuda.device_count())"
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
        return out.returncode != 0 or int(out.stdout.strip().splitlines()[-1]) > 0
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return True


def _prepare(args: argparse.Namespace, revs: Sequence[tuple[str, str]]) -> Plan:
    repo = Path(args.repo).resolve()
    if not (repo / ".git").exists():
        raise ABError(f"--repo {repo} is not a git repository")
    if args.rounds < 2:
        raise ABError(f"--rounds must be at least 2, got {args.rounds}")
    if V.order_statistic_k(args.rounds, args.rounds, args.confidence) == 0:
        least = next(r for r in range(args.rounds, 50) if V.order_statistic_k(r, r, args.confidence) > 0)
        raise ABError(
            f"--rounds {args.rounds} cannot give a {args.confidence:.0%} interval (every figure would be undecided); "
            f"use at least {least} rounds, or a lower --confidence"
        )
    if args.bench:
        import re

        try:
            re.compile(args.bench)
        except re.error as exc:
            raise ABError(f"--bench {args.bench!r} is not a regular expression: {exc}") from None
    python = args.python or sys.executable
    if not shutil.which(python) and not Path(python).is_file():
        raise ABError(f"--python {python} does not exist")
    shas = [(name, rev, resolve(repo, rev)) for name, rev in revs]
    work = Path(tempfile.mkdtemp(prefix="devbench-ab-"))
    sides = []
    for name, rev, sha in shas:
        tree = work / name / "tree"
        export(repo, sha, tree)
        sides.append(Side(name, rev, sha, tree, write_config(repo, tree, work)))
    gpu = has_cuda(python)
    if not gpu:
        print(f"no CUDA device for {python}: parameter combinations on {' or '.join(GPU_VALUES)} are left out "
              "(each would skip)", flush=True)  # fmt: skip
    bench = bench_pattern(args.bench, getattr(args, "twins", False), gpu)
    return Plan(repo, work, sides, args.rounds, python, bench, args.machine, args.repeat, args.blocks, work / "asv.log",
                gpu)  # fmt: skip


def _run_rounds(
    plan: Plan,
    rounds: range | None = None,
    figures: Sequence[str] | None = None,
    stop: Callable[[Any, int], dict[str, int]] | None = None,
) -> dict[str, int]:
    """Rounds ``rounds`` (default: the plan's first ones) of every side, ABBA, of ``figures`` (names, see
    ``figure_name``; default every figure of the plan's pattern).

    The first rounds (``rounds`` from 0) run every selected figure once per side, then only those that
    measured on either side: a figure that skipped (no GPU here) or failed on both is not run again.
    On a CPU machine that is most of the suite's parameter combinations; each costs a forked process.
    ``stop(per_process, left)``, after each round of both sides from the second on, names the figures
    settled with ``left`` rounds to go (``settled_figures``); they are not run again. Returns those,
    with the rounds per side each had.
    """
    rounds = rounds if rounds is not None else range(plan.rounds)
    running = list(figures) if figures is not None else None
    bench = names_pattern(running) if running is not None else plan.bench
    stopped: dict[str, int] = {}
    t0 = time.monotonic()
    planned = len(rounds) * len(plan.sides)
    done = 0
    for r in rounds:
        order = plan.sides if r % 2 == 0 else plan.sides[::-1]  # ABBA: drift over minutes favours neither
        for side in order:
            done += 1
            started = time.monotonic()
            print(f"round {r + 1}/{rounds.stop}: {side.name} ({side.rev} = {side.sha[:8]}) ...", end="", flush=True)
            run_round(side, plan.work / side.name / f"r{r}", plan.python, bench, plan.machine, plan.log,
                      plan.repeat, plan.blocks)  # fmt: skip
            elapsed = time.monotonic() - t0
            left = elapsed / done * (planned - done)  # an upper bound once figures stop early
            print(f" {time.monotonic() - started:.0f} s (about {left / 60:.0f} min left at most)", flush=True)
        if r == rounds.stop - 1:
            break
        if running is None:
            running = measured_figures(collect(plan.work, plan.sides, r + 1))
            print(f"{len(running)} figures measured in the first round; the next rounds run those", flush=True)
        elif stop is not None:
            now = stop(collect(plan.work, plan.sides, r + 1), rounds.stop - r - 1)
            new = {name: n for name, n in now.items() if name in running and name not in stopped}
            if new:
                stopped.update(new)
                running = [name for name in running if name not in new]
                print(f"{len(new)} figure(s) settled after {r + 1} rounds per side (undecided whatever the "
                      f"{rounds.stop - r - 1} rounds left bring); {len(running)} run on", flush=True)  # fmt: skip
        if not running:
            print("every figure is settled: no more rounds", flush=True)
            break
        bench = names_pattern(running)
    return stopped


def measured_figures(per_process: Any) -> list[str]:
    """The figures (``figure_name``) with a value on some side: what later rounds need to run."""
    pairs = per_process[["benchmark", "params"]].drop_duplicates()
    return sorted({figure_name(b, p) for b, p in zip(pairs["benchmark"], pairs["params"], strict=True)})


def _machine_of(per_process: Any) -> str:
    machines = sorted(set(per_process["machine"]))
    if len(machines) != 1:
        raise ABError(f"the rounds ran on several asv machines {machines}; pass --machine")
    return machines[0]


def cmd_compare(args: argparse.Namespace) -> int:
    if args.from_compare:
        per_process, record = _read_compare(Path(args.from_compare))
        return _judge_and_write(args, per_process, record)
    if args.extra_rounds < 0:
        raise ABError(f"--extra-rounds must be >= 0, got {args.extra_rounds}")
    plan = _prepare(args, [("base", args.base), ("head", args.head)])
    try:
        stop = None
        if not args.all_rounds:

            def stop(per_process: Any, left: int, lean: bool = args.extra_rounds > 0) -> dict[str, int]:
                machine = _machine_of(per_process)
                floors = load_floors(Path(args.asv_dir), machine)
                usable = host_filter(per_process, args.keep_slowed, load_sensitive(Path(args.asv_dir), machine))[0]
                return settled_figures(usable, "base", "head", floors, args.confidence, left, lean)

        stopped = _run_rounds(plan, stop=stop)
        per_process = collect(plan.work, plan.sides, plan.rounds)
        machine = _machine_of(per_process)
        extra: list[str] = []
        if args.extra_rounds:
            floors = load_floors(Path(args.asv_dir), machine)
            usable = host_filter(per_process, args.keep_slowed, load_sensitive(Path(args.asv_dir), machine))[0]
            extra = leaning(judge_all(usable, "base", "head", floors, args.confidence))
        if extra:
            print(f"\n{len(extra)} figure(s) lean to a change but are undecided; "
                  f"{args.extra_rounds} more rounds per side of those: {', '.join(extra)}")  # fmt: skip
            end = plan.rounds + args.extra_rounds
            # nothing follows the extra rounds: a settled figure stops whatever its estimate
            last = functools.partial(stop, lean=False) if stop is not None else None
            stopped.update(_run_rounds(plan, range(plan.rounds, end), extra, last))
            per_process = collect(plan.work, plan.sides, end)
        record = {**_run_record(plan, machine, args), "extra_rounds": args.extra_rounds if extra else 0,
                  "extra_bench": extra, "all_rounds": bool(args.all_rounds), "stopped": stopped}  # fmt: skip
        return _judge_and_write(args, per_process, record)
    finally:
        _keep_or_clean(plan, args)


def leaning(table: Any) -> list[str]:
    """Figures (asv's ``name(params)``, see ``figure_name``) that are undecided while their estimate lies
    beyond their floor.

    Such a figure's data point to a change that its interval cannot yet separate from the floor:
    more rounds are where they can decide it. Figures judged, or undecided with an estimate inside
    the floor, get none (in an A/A run that is nearly every figure).
    """
    ratio = table["ratio"].astype(float)
    beyond = ratio.map(lambda r: abs(math.log(r)) if r > 0 else 0.0) > table["floor"].map(math.log1p)
    noted = table["note"].astype(bool) if "note" in table else table["verdict"].map(lambda _: False)
    chosen = table.loc[(table["verdict"] == V.UNDECIDED) & beyond & ~noted]
    return sorted({figure_name(b, p) for b, p in zip(chosen["benchmark"], chosen["params"], strict=True)})


#: In the first rounds (when extra rounds follow), a settled figure runs on while its estimate lies
#: beyond this share of its floor (log scale): it may yet lean (``settled_figures``).
LEAN_SHARE = 0.5


def settled_figures(
    per_process: Any, a: str, b: str, floors: dict[str, float], confidence: float, left: int, lean: bool
) -> dict[str, int]:
    """Figures whose verdict is certain to be undecided after ``left`` more rounds per side (``V.settled``),
    each with the rounds per side it has: later rounds need not run them.

    ``lean``: keep a figure even so while its estimate lies beyond ``LEAN_SHARE`` of its floor: it may
    lean to a change after the first rounds, and extra rounds (``leaning``), which judge on more
    rounds, may still decide it. Only half the floor, because an estimate from two or three rounds
    is itself noisy: with the whole floor, a planted 2x change in a small CPU product whose first
    rounds happened to look like +34% against a 36% floor stopped there (session 19).
    """
    out: dict[str, int] = {}
    for (bench, params, unit), g in per_process.groupby(["benchmark", "params", "unit"], sort=True, dropna=False):
        if not direction(bench, unit):
            continue
        floor = floors.get(V.figure_key(bench, params), V.DEFAULT_FLOOR)
        base = V.positive(g.loc[g["side"] == a, "value"].tolist())
        head = V.positive(g.loc[g["side"] == b, "value"].tolist())
        if changed_note(g, a, b):  # never judged, however many rounds
            out[figure_name(bench, params)] = min(len(base), len(head))
            continue
        if not V.settled(base, head, floor, len(base) + left, len(head) + left, confidence):
            continue
        if lean and abs(V.shift_interval(base, head, confidence)[0]) > LEAN_SHARE * math.log1p(floor):
            continue
        out[figure_name(bench, params)] = min(len(base), len(head))
    return out


def figure_name(benchmark: str, params: Any) -> str:
    """``"bench.Cls.track_x(cpu, 16)"`` from the report's label ``"device=cpu, n=16"`` (the bare name when
    there are no params): how the progress output and ``run.json`` name a figure."""
    if not isinstance(params, str) or not params:
        return benchmark
    values = [part.split("=", 1)[-1] for part in params.split(", ")]
    return f"{benchmark}({', '.join(values)})"


def names_pattern(names: Sequence[str]) -> str:
    """asv's ``--bench`` for exactly these figures (``figure_name``s) and no others.

    asv matches ``--bench`` against ``name(repr(param), ...)`` of every parameter combination, so a
    figure is its name with each value matched with or without repr's quotes; a bare name selects
    every combination.
    """

    def one(name: str) -> str:
        if not name.endswith(")") or "(" not in name:
            return re.escape(name) + "(?:\\(|$)"
        bench, inner = name[:-1].split("(", 1)
        values = ", ".join(f"'?{re.escape(v)}'?" for v in inner.split(", "))
        return f"{re.escape(bench)}\\({values}\\)$"

    return "^(?:" + "|".join(one(n) for n in names) + ")"


#: the host probe's typical time (10th percentile) may differ this much between the sides before leaving
#: slowed processes out stops: more means the code under test changes the probe itself (a thread left
#: spinning slows every process of its side, the fastest too), not the host. Not the median: with a third
#: of the processes slowed, one side's median can land in the slow state and the other's not (session 21)
SIDE_TOLERANCE = 0.2


def slowed_mask(per_process: Any) -> tuple[Any, dict[str, Any] | None]:
    """Which processes ran while the host slowed parallel work, and how the host ran.

    A process is slowed when its host probe (``devbench.hostprobe``) took ``SLOW_FACTOR`` times the
    run's typical probe or more (NaN, not probed, never is). ``None`` for the info when no process
    probed (a run before session 21).
    """
    if "host_probe_us" not in per_process:
        return None, None
    probes = per_process["host_probe_us"].astype(float)
    info = hostprobe.summary(probes.tolist())
    if info is None:
        return None, None
    slowed = probes >= info["slow_factor"] * info["typical_us"]
    info["sides"] = {}
    for side, rows in per_process.groupby("side", sort=False).groups.items():
        own = hostprobe.summary(probes[rows].tolist())
        info["sides"][str(side)] = {"typical_us": own["typical_us"] if own else None, "slowed": int(slowed[rows].sum())}
    return slowed, info


def host_ratios(per_process: Any) -> dict[str, float]:
    """Per figure (``figure_key``): its slowed processes against the others (``hostprobe.slowed_ratio``)."""
    slowed, _ = slowed_mask(per_process)
    if slowed is None:
        return {}
    out = {}
    for (bench, params), g in per_process.groupby(["benchmark", "params"], sort=True, dropna=False):
        s = slowed.loc[g.index]
        ratio = hostprobe.slowed_ratio(g.loc[s, "value"].tolist(), g.loc[~s, "value"].tolist())
        if ratio is not None:
            out[V.figure_key(bench, params)] = ratio
    return out


def host_filter(per_process: Any, keep: bool = False, only: Any = None) -> tuple[Any, dict[str, Any] | None]:
    """``per_process`` without the processes of host-sensitive figures that ran while the host slowed
    parallel work, and what was done.

    ``only``: the figures (``figure_key``) whose slowed processes go, those ``calibrate`` found the host's
    slow stretches move (``hostprobe.sensitive``); ``None``: every figure's. Which processes ran slowed
    is the host's doing, not either commit's (the probe is torch's product, not a workload), so leaving
    them out biases neither side; it costs evidence, which extra rounds may make up. Nothing is left
    out when ``keep`` (``--keep-slowed``), when no process probed, or when the probe's typical time
    differs between the sides by more than ``SIDE_TOLERANCE``: then the code under test changes the
    probe and it no longer tells the host's state apart from the change.
    """
    slowed, info = slowed_mask(per_process)
    if info is None:
        return per_process, None
    if only is not None:
        import pandas as pd

        keys = [V.figure_key(b, p) for b, p in zip(per_process["benchmark"], per_process["params"], strict=True)]
        slowed = slowed & pd.Series([k in only for k in keys], index=per_process.index)
        info["sensitive_figures"] = len(set(keys) & set(only))  # of this run's (the noise file has twins too)
    typical = [v["typical_us"] for v in info["sides"].values() if v["typical_us"]]
    if keep:
        info.update(left_out=0, kept_because="--keep-slowed")
    elif len(typical) > 1 and max(typical) > (1 + SIDE_TOLERANCE) * min(typical):
        info.update(left_out=0, kept_because="the probe's typical time differs between the sides by more than "
                    f"{100 * SIDE_TOLERANCE:.0f}%: the code under test changes it")  # fmt: skip
    else:
        info.update(left_out=int(slowed.sum()), kept_because="")
        per_process = per_process[~slowed]
    return per_process, info


def host_note(host: dict[str, Any]) -> str:
    """How the host ran: the probe's typical time, the processes that ran slowed, and what became of them."""
    sides = ", ".join(f"{side} {v['slowed']}" for side, v in host.get("sides", {}).items())
    scope = (
        f"the {host['sensitive_figures']} figures calibrate found the host's slow stretches move"
        if "sensitive_figures" in host
        else "every figure"
    )
    if host.get("left_out"):
        fate = f"those of {scope} left out ({host['left_out']} processes)"
    elif host.get("kept_because"):
        fate = f"kept: {host['kept_because']}"
    else:
        fate = "none to leave out"
    return (
        f"host: a {hostprobe.N}x{hostprobe.N} float32 product took {host['typical_us']:.1f} us typically "
        f"(10th percentile of the processes' probes); {host['slow']} of {host['processes']} benchmark "
        f"processes ran while it took {host['slow_factor']:g}x that or more{f' ({sides})' if sides else ''}: "
        f"{fate} (host_probe_us in per-process.csv)."
    )


def _judge_and_write(args: argparse.Namespace, per_process: Any, record: dict[str, Any]) -> int:
    """Verdicts with this machine's floors; the table on stdout, the files in ``--out``; exit 1 if slower."""
    machine = record["machine"]
    floors = load_floors(Path(args.asv_dir), machine)
    usable, host = host_filter(per_process, args.keep_slowed, load_sensitive(Path(args.asv_dir), machine))
    table = judge_all(usable, "base", "head", floors, args.confidence)
    stopped = record.get("stopped") or {}
    names = [figure_name(b, p) for b, p in zip(table["benchmark"], table["params"], strict=True)]
    table["stopped_after"] = [stopped.get(n, "") for n in names]
    base, head = record["sides"]["base"], record["sides"]["head"]
    title = f"devbench compare {base['rev']} ({base['sha'][:8]}) -> {head['rev']} ({head['sha'][:8]}) on {machine}"
    learned = sum(k in floors for k in _keys(table))
    more = record.get("extra_rounds") or 0
    notes = [
        f"{record['rounds']} rounds per side, interleaved ABBA, each benchmark in a fresh process per round; "
        f"ratio = head / base, a {round(100 * args.confidence)}% distribution-free interval.",
        *(
            [
                f"{more} more rounds per side for the figures that leaned to a change but were undecided "
                f"after {record['rounds']}: {', '.join(record['extra_bench'])} (n_base, n_head: rounds per figure)."
            ]
            if more
            else []
        ),  # fmt: skip
        *(
            [
                f"{len(stopped)} figure(s) stopped early (stopped_after: rounds per side): each was certain to end "
                "undecided whatever the remaining rounds brought, its interval already reaching past its noise "
                "floor on one side and inside it on the other (--all-rounds runs every round)."
            ]
            if stopped
            else []
        ),  # fmt: skip
        f"noise floors: learned by devbench calibrate on {machine} for {learned} of {len(table)} figures, "
        f"{100 * V.DEFAULT_FLOOR:.0f}% for the rest"
        if floors
        else f"noise floors: {100 * V.DEFAULT_FLOOR:.0f}% (run devbench calibrate on {machine} to learn them)",
    ]
    if host:
        notes.append(host_note(host))
        record = {**record, "host_probe": host}
    print()
    print(to_text(table, title))
    if host:
        print(host_note(host))
    publish(
        Path(args.out),
        {
            "compare.csv": table.to_csv(index=False),
            "compare.md": to_markdown(table, title, notes, args.confidence),
            "per-process.csv": per_process.to_csv(index=False),
            "run.json": json.dumps({**record, "confidence": args.confidence}, indent=1),
        },
    )
    print(f"wrote {args.out}/compare.csv, compare.md, per-process.csv, run.json")
    return 1 if (table["verdict"] == V.SLOWER).any() else 0


def _read_compare(folder: Path) -> tuple[Any, dict[str, Any]]:
    """A finished compare's per-process figures and run record (``--from``)."""
    import pandas as pd

    run_file, data = folder / "run.json", folder / "per-process.csv"
    if not run_file.is_file() or not data.is_file():
        raise ABError(f"--from {folder}: no run.json and per-process.csv of a devbench compare there")
    try:
        record = json.loads(run_file.read_text())
        record["sides"]["base"]["sha"], record["sides"]["head"]["benchmark_code"], record["machine"]  # noqa: B018
        frame = pd.read_csv(data, keep_default_na=False, dtype={"params": str})
        frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
        if "host_probe_us" in frame:  # compares before session 21 have no probes
            frame["host_probe_us"] = pd.to_numeric(frame["host_probe_us"], errors="coerce")
    except (ValueError, KeyError, TypeError) as exc:
        raise ABError(f"--from {folder}: not a devbench compare record ({exc})") from None
    return frame, record


def _run_record(plan: Plan, machine: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "machine": machine,
        "sides": {
            s.name: {"rev": s.rev, "sha": s.sha, "benchmark_code": benchmark_code(plan.repo, s.sha)} for s in plan.sides
        },
        "rounds": plan.rounds,
        "confidence": args.confidence,
        "repeat": plan.repeat,
        "blocks": plan.blocks,
        "bench": plan.bench,
        "cuda": plan.cuda,
    }


def _keys(table: Any) -> list[str]:
    return [V.figure_key(b, p) for b, p in zip(table["benchmark"], table["params"], strict=True)]


def _from_compare(folder: Path) -> tuple[Any, str, int, dict[str, Any]]:
    """Per-process figures of a kept A/A ``compare`` (two commits, identical benchmark code) as A and B."""
    frame, run = _read_compare(folder)
    base, head = run["sides"]["base"], run["sides"]["head"]
    if base["benchmark_code"] != head["benchmark_code"]:
        raise ABError(
            f"--from {folder}: {base['sha'][:8]} and {head['sha'][:8]} run different benchmark code; "
            "only an A/A comparison (identical code) measures noise"
        )
    if run.get("stopped"):
        raise ABError(
            f"--from {folder}: that compare stopped {len(run['stopped'])} figures early, so they lack rounds a "
            "noise floor is learned from; run the A/A compare with --all-rounds, or devbench calibrate"
        )
    frame["side"] = frame["side"].replace({"base": "A", "head": "B"})  # a calibration's are A and B already
    return frame, head["sha"], int(run["rounds"]), run


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.from_compare:
        source = Path(args.from_compare)
        per_process, sha, rounds, run = _from_compare(source)
        what = "a calibration" if run.get("calibrate") else "an A/A compare"
        _learn_and_store(args, per_process, sha, rounds, f"{what} kept in {source.name}/", run)
        return 0
    plan = _prepare(args, [("A", args.commit), ("B", args.commit)])
    try:
        _run_rounds(plan)
        per_process = collect(plan.work, plan.sides, plan.rounds)
        # run.json in compare's shape (base and head the one commit), so that calibrate --from can learn
        # from this run again, e.g. with or without --keep-slowed
        run = _run_record(plan, _machine_of(per_process), args)
        side = run["sides"]["A"]
        run.update(sides={"base": side, "head": side}, all_rounds=True, stopped={}, calibrate=True)
        _learn_and_store(args, per_process, plan.sides[0].sha, plan.rounds, f"{args.commit} measured twice", run)
    finally:
        _keep_or_clean(plan, args)
    return 0


def _with_twins(figures: dict[str, dict[str, Any]], learned: Any) -> dict[str, dict[str, Any]]:
    """``figures`` and, for each twin left out of the rounds (``spec.TWINS``), its partner's floor.

    A twin is the partner's evidence in other units (or its work timed by asv's loop), so its
    relative noise is the partner's: the report's step detection then judges the twin's history
    against the same floor. Each copied entry names the figure it comes from (``twin_of``).
    """
    from devbench.spec import TWINS

    partners: dict[str, list[str]] = {}
    for twin, partner in TWINS.items():
        partners.setdefault(partner, []).append(twin)
    out = dict(figures)
    for r in learned.itertuples():
        key = V.figure_key(r.benchmark, r.params)
        for twin in partners.get(r.benchmark, []):
            out.setdefault(V.figure_key(twin, r.params), {**figures[key], "twin_of": key})
    return out


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _learn_and_store(
    args: argparse.Namespace, per_process: Any, sha: str, rounds: int, what: str, run: dict[str, Any]
) -> None:
    machine = _machine_of(per_process)
    # a figure the host's slow stretches move is learned (and judged) without its slowed processes
    ratios = host_ratios(per_process)
    sensitive = {k for k, r in ratios.items() if hostprobe.sensitive(r)}
    usable, host = host_filter(per_process, args.keep_slowed, sensitive)
    learned = learn(usable, args.confidence)
    at_default = judge_all(usable, "A", "B", {}, args.confidence)
    false = at_default["verdict"].isin([V.FASTER, V.SLOWER])
    record = {
        "machine": machine,
        "commit": sha,
        "source": what,
        "rounds": rounds,
        "confidence": args.confidence,
        "default_floor": V.DEFAULT_FLOOR,
        "false_positives_at_default": int(false.sum()),
        "figures_judged": len(at_default),
        "host_probe": host,
        "figures": _with_twins(
            {
                V.figure_key(r.benchmark, r.params): {
                    "floor": round(r.floor, 5),
                    "sigma": round(r.sigma, 5),
                    "detectable": None if not math.isfinite(r.detectable) else round(r.detectable, 5),
                    "host_ratio": _rounded(ratios.get(V.figure_key(r.benchmark, r.params))),
                    "host_sensitive": V.figure_key(r.benchmark, r.params) in sensitive,
                }
                for r in learned.itertuples()
            },
            learned,
        ),
    }
    write_atomic(noise_path(Path(args.asv_dir), machine), json.dumps(record, indent=1, sort_keys=True))
    det = learned["detectable"].replace(math.inf, float("nan"))
    lines = [
        f"devbench calibrate on {machine}: {what} ({sha[:8]}), {rounds} rounds per side",
        f"false positives at the default gate ({100 * V.DEFAULT_FLOOR:.0f}% floor): {int(false.sum())} of "
        f"{len(at_default)} figures ({100 * false.mean():.1f}%)",
        f"learned floors: median {100 * learned['floor'].median():.1f}%, max {100 * learned['floor'].max():.1f}%",
        f"minimum detectable change: median {100 * det.median():.1f}%, "
        f"{int((det < 0.2).sum())} of {len(det)} figures below 20%",
        f"stored in {noise_path(Path(args.asv_dir), machine)}",
    ]
    if host:
        lines.append(host_note(host))
        moved = sorted(sensitive)
        lines.append(
            f"figures the host's slow stretches move (slowed processes off by more than "
            f"{100 * hostprobe.SENSITIVE:.0f}%; compare leaves their slowed processes out): {len(moved)}"
            + "".join(f"\n  {ratios[k]:.2f}x  {k}" for k in moved)
        )
    print()
    print("\n".join(lines))
    worst = learned.sort_values("floor", ascending=False).head(10)
    print("\nnoisiest figures (floor, minimum detectable change):")
    for r in worst.itertuples():
        mdc = f"{100 * r.detectable:.1f}%" if math.isfinite(r.detectable) else "n/a"
        print(f"  {100 * r.floor:5.1f}%  {mdc:>8}  {r.benchmark} {r.params}")
    publish(
        Path(args.out),
        {
            "calibrate.csv": learned.to_csv(index=False),
            "calibrate.txt": "\n".join(lines) + "\n",
            "aa-verdicts.csv": at_default.to_csv(index=False),
            "per-process.csv": per_process.to_csv(index=False),
            "run.json": json.dumps({**run, "confidence": args.confidence, "keep_slowed": args.keep_slowed}, indent=1),
        },
    )
    print(f"wrote {args.out}/calibrate.csv, calibrate.txt, aa-verdicts.csv, per-process.csv, run.json")


def _keep_or_clean(plan: Plan, args: argparse.Namespace) -> None:
    if args.keep:
        print(f"kept the rounds' asv results and log in {plan.work}")
    else:
        shutil.rmtree(plan.work, ignore_errors=True)


def add_common(p: argparse.ArgumentParser, out: str) -> None:
    p.add_argument("--bench", help="regular expression of benchmarks to run (asv's --bench)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per side (default {ROUNDS})")
    p.add_argument("--out", default=out, help=f"folder for the CSV and Markdown (default {out})")
    p.add_argument("--machine", help="asv machine name (default: asv's, from ~/.asv-machine.json)")
    p.add_argument("--python", help="Python whose packages run the benchmarks (default: this one)")
    p.add_argument("--repo", default=".", help="the git repository (default: .)")
    p.add_argument("--asv-dir", default=".asv", help="where the noise floors live (default .asv: .asv/noise/)")
    p.add_argument("--confidence", type=float, default=CONFIDENCE, help=f"interval confidence (default {CONFIDENCE})")
    p.add_argument("--repeat", default=REPEAT, help=f"asv repeat inside each process (default {REPEAT})")
    p.add_argument(
        "--blocks", type=int, default=BLOCKS, help=f"blocks per track_ figure per process (default {BLOCKS})"
    )
    p.add_argument("--keep", action="store_true", help="keep the work folder (exported trees, per-round results, log)")
    p.add_argument(
        "--keep-slowed",
        action="store_true",
        help="judge every process, also those that ran while the host slowed parallel work (by default they are "
        "left out: every benchmark process probes the host with a small two-thread product, see devbench.hostprobe)",
    )
    p.add_argument(
        "--twins",
        action="store_true",
        help="also run the twins (spec.TWINS: time_ figures of a track_ figure's work, and track_ figures that "
        "are another's in other units, e.g. a collective's bus bandwidth); left out by default",
    )


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``compare``/``calibrate``: exit 2 with a reason on bad input, 130 on Ctrl-C, 143 on SIGTERM."""
    if not 0 < args.confidence < 1:
        print(f"devbench {args.command}: --confidence must be in (0, 1), got {args.confidence}", file=sys.stderr)
        return 2
    if args.command == "compare" and not args.base and not args.from_compare:
        print("devbench compare: name the BASE commit (or --from DIR of a finished compare)", file=sys.stderr)
        return 2
    # a plain kill would end the process without its finally blocks: the work folder and the
    # running asv would be left behind; raised as an exception, both go as they do on Ctrl-C
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return cmd_compare(args) if args.command == "compare" else cmd_calibrate(args)
    except ABError as exc:
        print(f"\ndevbench {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        print(f"\ndevbench {args.command}: interrupted; nothing written", file=sys.stderr)
        return 130
    except Terminated:
        print(f"\ndevbench {args.command}: terminated; nothing written", file=sys.stderr)
        return 143
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
