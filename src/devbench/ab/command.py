"""``devbench compare``: the command line, and the run from exported sides to written verdicts."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from devbench import verdict as V
from devbench.ab import judge, output
from devbench.ab.export import Side, benchmark_code, export_sides
from devbench.ab.options import (
    BLOCK_S,
    CONFIDENCE,
    FIGURE_S,
    FLOOR,
    MAX_PASSES,
    MIN_PASSES,
    PAIRS,
    SCREEN,
    TRACK_BLOCKS,
    ABError,
    Options,
    Terminated,
)
from devbench.ab.runner import Combination, Figure, Passes, run_passes, start_both
from devbench.ab.selection import GPU_VALUES, bench_pattern, has_cuda, plan_figures
from devbench.ab.session import Worker, WorkerError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", nargs="?", help="the commit to compare against (branch, tag or hash)")
    p.add_argument("head", nargs="?", default="HEAD", help="the commit to judge (default HEAD)")
    p.add_argument("--bench", help="regular expression over asv's name(params), e.g. 'MatmulSquare' or \"'cpu'\"")
    p.add_argument("--out", default=".asv/compare", help="folder for the verdicts (default .asv/compare)")
    p.add_argument("--python", help="Python whose packages run the benchmarks (default: this one)")
    p.add_argument("--repo", default=".", help="the git repository (default: .)")
    p.add_argument("--machine", help="a name for this machine in the title (default: the host name)")
    p.add_argument("--confidence", type=float, default=CONFIDENCE,
                   help=f"interval confidence (default {CONFIDENCE}); a sweep's m figures split it, "
                   "1 - (1 - confidence) / m each")  # fmt: skip
    p.add_argument("--floor", type=float, default=FLOOR,
                   help=f"smallest change given a verdict, relative (default {FLOOR}: 2%%)")  # fmt: skip
    p.add_argument("--min-passes", type=int, default=MIN_PASSES,
                   help=f"pairs of processes per figure before the first verdicts (default {MIN_PASSES}); a "
                   "figure that can no longer be faster or slower (with --same: decided at all) stops earlier, "
                   "after any even number")  # fmt: skip
    p.add_argument("--max-passes", type=int, default=MAX_PASSES,
                   help=f"pairs of processes per figure at most (default {MAX_PASSES}); the figures of one "
                   "setup_cache sweep (the collectives), judged as one family, get as many more as their "
                   "split confidence needs")  # fmt: skip
    p.add_argument("--screen", type=int, default=SCREEN, metavar="N",
                   help=f"through the first N passes (default {SCREEN}; 0: none), after each even one, stop every "
                   "figure whose pairs of processes already disagree, one beyond the floor's edge where another is "
                   "not: it could no longer be decided after --min-passes, and the passes beyond are kept for the "
                   "figures that agree")  # fmt: skip
    p.add_argument("--same", action="store_true",
                   help="also bound the figures that did not change: one that may still end same (its interval "
                   "inside the floor) runs on until it does or no longer can. By default compare looks for faster "
                   "and slower only, and a figure stops as soon as neither can be reached; --same costs more where "
                   "many figures could end same (docs/design.md, \"Verdicts\")")  # fmt: skip
    p.add_argument("--pairs", type=int, default=PAIRS,
                   help=f"pairs of adjacent blocks per pair of processes (default {PAIRS})")  # fmt: skip
    p.add_argument("--figure-s", type=float, default=FIGURE_S,
                   help=f"seconds one figure's turns may take per pair of processes: a figure whose call is long "
                   f"gets fewer pairs of blocks, at least 1 (default {FIGURE_S})")  # fmt: skip
    p.add_argument("--block-s", type=float, default=BLOCK_S,
                   help=f"a time_ benchmark's block lasts at least this long, seconds (default {BLOCK_S})")  # fmt: skip
    p.add_argument("--track-blocks", type=int, default=TRACK_BLOCKS,
                   help=f"blocks inside each track_ figure (DEVBENCH_BLOCKS; default {TRACK_BLOCKS})")  # fmt: skip
    p.add_argument("--twins", action="store_true",
                   help="also measure the twins (spec.TWINS: time_ figures of a track_ figure's work, and figures "
                   "that are another's in other units); left out by default")  # fmt: skip
    p.add_argument("--all-passes", action="store_true",
                   help="run every figure to --min-passes, even one already certain to stay undecided: for an A/A "
                   "run that measures what each figure can detect (slower)")  # fmt: skip
    p.add_argument("--keep", action="store_true", help="keep the work folder (exported sides, the processes' log)")
    p.add_argument("--from", dest="from_dir", metavar="DIR",
                   help="judge a finished compare (its --out) again, e.g. with another --floor; "
                   "measures nothing")  # fmt: skip


def options(args: argparse.Namespace) -> Options:
    return Options(
        base=args.base, head=args.head, repo=Path(args.repo).resolve(), out=Path(args.out),
        python=args.python or sys.executable, bench=args.bench, machine=args.machine,
        confidence=args.confidence, floor=args.floor, min_passes=args.min_passes, max_passes=args.max_passes,
        screen=args.screen, same=args.same,
        pairs=args.pairs, block_s=args.block_s, figure_s=args.figure_s, track_blocks=args.track_blocks,
        twins=args.twins, keep=args.keep, all_passes=args.all_passes,
        from_dir=Path(args.from_dir) if args.from_dir else None,
    )  # fmt: skip


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


def measure(opts: Options, sides: list[Side], work: Path, log_path: Path) -> tuple[list[Figure], dict[str, Any]]:
    """Every selected figure, measured in passes of paired processes; the figures and the run's record."""
    note = busy_host_note(os.getloadavg()[0], len(os.sched_getaffinity(0)), os.environ.get("DEVBENCH_THREADS"))
    if note:
        print(note, flush=True)
    gpu = has_cuda(opts.python)
    if not gpu:
        print(f"no CUDA device for {opts.python}: combinations on {' or '.join(GPU_VALUES)} are left out "
              "(each would skip)", flush=True)  # fmt: skip
    pattern = bench_pattern(opts.bench, opts.twins, gpu)
    env = _worker_env(opts)
    trees = {s.name: s.tree for s in sides}
    started: list[Worker] = []
    with open(log_path, "ab") as log:

        def start() -> tuple[Worker, Worker]:
            pair = [Worker(side, opts.python, trees[side], log, env, timeout_s=opts.request_timeout_s)
                    for side in ("base", "head")]  # fmt: skip
            started.extend(pair)  # before they start: a kill during their start still stops them
            return start_both(*pair)

        try:
            first = start()
            figures = plan_figures(first[0].benchmarks, first[1].benchmarks, pattern)
            running = sum(f.state == "running" for f in figures)
            if opts.bench and not figures:
                raise ABError(f"--bench {opts.bench!r} selects no benchmark combination (of either side)")
            limit = _cached_limit(opts, figures)
            cached = max((limit(f) for f in figures if f.combo.in_cache), default=0)
            swept = f"; a sweep's figures, judged as one family, up to {cached}" if cached > opts.max_passes else ""
            print(f"{running} figures to measure, {len(figures) - running} not measurable on both sides; "
                  f"up to {opts.max_passes} pairs of processes each (a verdict from {opts.min_passes}{swept}), "
                  f"up to {opts.pairs} pairs of blocks in each ({opts.figure_s:g} s of turns at most)",
                  flush=True)  # fmt: skip
            passes = Passes(opts.min_passes, opts.max_passes, opts.pairs, opts.block_s, opts.figure_s, limit,
                            opts.all_passes)  # fmt: skip
            t0 = time.monotonic()
            took = run_passes(start, figures, passes, _settled(opts, figures), log, first=first) if running else []
        finally:
            for w in started:
                w.stop()
    record = {
        "machine": opts.machine or socket.gethostname(),
        "sides": {s.name: {"rev": s.rev, "sha": s.sha, "benchmark_code": benchmark_code(opts.repo, s.sha)}
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


def _own_confidence(opts: Options, figures: list[Figure]) -> Callable[[Figure], float]:
    """A figure's own confidence as the run stands (``judge.confidence_of``): asked anew after each pass, since
    the figures of a sweep that skip (known after the first) do not split it."""
    return lambda fig: judge.confidence_of(fig, judge.sweep_sizes(figures), opts.confidence)


def _cached_limit(opts: Options, figures: list[Figure]) -> Callable[[Figure], int]:
    """The passes a figure measured in ``setup_cache`` may get: as many beyond the fewest its interval needs
    (14 for one of 45 figures of a sweep at 99%) as the others get beyond ``--min-passes``."""
    own = _own_confidence(opts, figures)
    return lambda fig: judge.most_passes(own(fig), opts.min_passes, opts.max_passes)


def _settled(opts: Options, figures: list[Figure]) -> Callable[..., bool]:
    own = _own_confidence(opts, figures)
    return lambda fig, left, decide=True: judge.settled(fig, left, opts.floor, own(fig), decide, opts.screen,
                                                      not opts.same)


def _screen_note(opts: Options) -> str:
    if not opts.screen or opts.all_passes:
        return ""
    return (f", and through pass {opts.screen} one whose pairs of processes already disagree (one beyond the "
            f"floor's edge where another is not: no longer decidable after {opts.min_passes})")


def read_finished(folder: Path) -> tuple[list[Figure], dict[str, Any]]:
    """A finished compare's figures and record (``--from``)."""
    import pandas as pd

    run_file, data = folder / "run.json", folder / "pairs.csv"
    if not run_file.is_file() or not data.is_file():
        raise ABError(f"--from {folder}: no run.json and pairs.csv of a devbench compare there")
    try:
        record = json.loads(run_file.read_text())
        frame = pd.read_csv(data, keep_default_na=False, dtype={"params": str})
        figures = []
        for f in record["figures"].values():
            combo = Combination(f["benchmark"], int(f["idx"]), tuple(f["values"]), tuple(f["names"]), f["unit"],
                                f.get("setup_cache"), bool(f.get("in_cache", False)))  # fmt: skip
            fig = Figure(combo, state=f["state"], reason=f["reason"], stopped_after=f["stopped_after"])
            rows = frame[(frame["benchmark"] == combo.benchmark) & (frame["params"] == combo.label)]
            for _, g in rows.groupby("process_pair", sort=True):
                g = g.sort_values("pair")
                fig.a.append([float(x) for x in g["base"]])
                fig.b.append([float(y) for y in g["head"]])
            figures.append(fig)
    except (ValueError, KeyError, TypeError) as exc:
        raise ABError(f"--from {folder}: not a devbench compare record ({exc})") from None
    return figures, record


def write(opts: Options, figures: list[Figure], record: dict[str, Any]) -> int:
    """Verdicts on the terminal and in ``--out``; exit 1 when a figure is slower."""
    table = judge.judge_all(figures, opts.floor, opts.confidence)
    base, head = record["sides"]["base"], record["sides"]["head"]
    title = (f"devbench compare {base['rev']} ({base['sha'][:8]}) -> {head['rev']} ({head['sha'][:8]}) "
             f"on {record['machine']}")  # fmt: skip
    notes = [
        f"Each figure: up to {opts.max_passes} pairs of processes, one per side, taking strict turns "
        f"(A B A B ..., the side first alternating by pass), up to {opts.pairs} pairs of adjacent blocks in each; "
        f"a verdict after {opts.min_passes} or more, and a figure certain to stay undecided"
        f"{'' if opts.same else ' (neither faster nor slower)'} stops "
        f"{'there' if opts.all_passes else 'after any even number'}"
        f"{_screen_note(opts)}; "
        "change = head / base, the Hodges-Lehmann "
        "estimate over the pairs of processes (each the median of its pairs of blocks) with its "
        f"{round(100 * opts.confidence)}% distribution-free interval; "
        f"a verdict needs the interval beyond (or, for same, inside) a {100 * opts.floor:g}% floor.",
    ]
    if not opts.same:
        notes.append("Looked for faster and slower only (the default): a figure stopped as soon as neither could be "
                     "reached any more, so an unchanged figure ends undecided, not same: undecided says no change was "
                     "found, not that one was bounded within the floor (--same seeks that too).")  # fmt: skip
    notes += _sweep_notes(figures, opts)
    if base["sha"] == head["sha"]:
        notes.append("Both sides are the same commit: an A/A run, where every faster or slower is a false verdict.")
    elif base["benchmark_code"] == head["benchmark_code"]:
        notes.append("Both sides run the same benchmark code: an A/A run, where every faster or slower is false.")
    stopped = int(table["stopped_after"].astype(str).str.len().astype(bool).sum()) if len(table) else 0
    if stopped:
        import pandas as pd

        after = pd.to_numeric(table["stopped_after"], errors="coerce")
        early = int((after < opts.min_passes).sum())
        screened = int((after <= opts.screen).sum()) if opts.screen and not opts.all_passes else 0
        why = f", {screened} of those by pass {opts.screen}" if screened else ""
        notes.append(f"{stopped} figure(s) stopped before their last pair of processes: decided, or no longer "
                     f"decidable ({early} of them, all undecided, before {opts.min_passes}{why}).")  # fmt: skip
    det = table.loc[~table["note"].astype(bool), "detectable"] if len(table) else table
    if len(det):
        finite = det[det.map(lambda x: x < math.inf)]
        if len(finite):
            notes.append(f"Smallest change each figure could be called (floor + half its interval): median "
                         f"{100 * finite.median():.1f}% over the {len(finite)} with a bounded interval, "
                         f"{int((finite <= 0.10).sum())} of {len(det)} figures at 10% or less.")  # fmt: skip
        else:
            notes.append(f"No figure ran the {judge.fewest_passes(opts.confidence)} pairs of processes a bounded "
                         "interval needs, so none says what change it could have seen: --all-passes measures "
                         "that.")  # fmt: skip
    cost = output.cost_note(record)
    if cost:
        notes.append(cost)
    print()
    print(output.to_text(table, title) if len(table) else f"{title}\nnothing to judge\n")
    output.publish(
        opts.out,
        {
            "compare.csv": table.to_csv(index=False),
            "compare.md": output.to_markdown(table, title, notes, opts.confidence),
            "pairs.csv": output.blocks_frame(figures).to_csv(index=False),
            "run.json": json.dumps({**record, "confidence": opts.confidence, "floor": opts.floor}, indent=1),
        },
    )
    if cost:
        print(cost)
    print(f"wrote {opts.out}/compare.csv, compare.md, pairs.csv, run.json")
    return 1 if len(table) and (table["verdict"] == V.SLOWER).any() else 0


def _sweep_notes(figures: list[Figure], opts: Options) -> list[str]:
    """A line for each sweep whose figures are judged as one family (``judge.confidence_of``)."""
    notes = []
    for key, m in judge.sweep_sizes(figures).items():
        if m < 2:
            continue
        names = sorted({f.combo.benchmark.rsplit(".", 1)[0] for f in figures if f.combo.setup_cache == key})
        own = 1 - (1 - opts.confidence) / m
        notes.append(f"The {m} figures of {', '.join(names)} are measured together, by one setup_cache a pass on each "
                     f"side, and judged as one family: each interval at {100 * own:.2f}%, so that all {m} hold "
                     f"together at {round(100 * opts.confidence)}% (Bonferroni); a verdict among them needs "
                     f"{judge.fewest_passes(own)} or more passes.")  # fmt: skip
    return notes


def compare(opts: Options) -> int:
    opts.check()
    if opts.from_dir is not None:
        figures, record = read_finished(opts.from_dir)
        return write(opts, figures, record)
    if not opts.base:
        raise ABError("name the BASE commit (or --from DIR of a finished compare)")
    if not (opts.repo / ".git").exists():
        raise ABError(f"--repo {opts.repo} is not a git repository")
    if not shutil.which(opts.python) and not Path(opts.python).is_file():
        raise ABError(f"--python {opts.python} does not exist")
    work = Path(tempfile.mkdtemp(prefix="devbench-ab-"))
    log_path = work / "processes.log"
    try:
        sides = export_sides(opts.repo, [("base", opts.base), ("head", opts.head)], work)
        if sides[0].sha == sides[1].sha:
            print(f"base and head are the same commit ({sides[0].sha[:8]}): an A/A run, every difference is noise")
        try:
            figures, record = measure(opts, sides, work, log_path)
        except WorkerError as exc:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:] if log_path.exists() else []
            keep = work.parent / f"{work.name}.log"
            if log_path.exists():
                shutil.copy(log_path, keep)
            last = "".join(f"\n  {t}" for t in tail)
            raise ABError(f"{exc}; the benchmark processes' log is {keep}{last}") from None
        return write(opts, figures, record)
    finally:
        if opts.keep:
            print(f"kept the exported sides and the processes' log in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``compare``: exit 2 with a reason on bad input, 130 on Ctrl-C, 143 on SIGTERM."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return compare(options(args))
    except ABError as exc:
        print(f"\ndevbench compare: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        print("\ndevbench compare: interrupted; nothing written", file=sys.stderr)
        return 130
    except Terminated:
        print("\ndevbench compare: terminated; nothing written", file=sys.stderr)
        return 143
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
