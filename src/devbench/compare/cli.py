"""``devbench compare``: the command line, and the run from exported sides to written verdicts."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from devbench.compare import record
from devbench.compare.export import export_sides
from devbench.compare.options import (
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
from devbench.compare.run import measure
from devbench.compare.session import WorkerError
from devbench.records.files import OutputError, check_out_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", nargs="?", help="the commit to compare against (branch, tag or hash)")
    p.add_argument("head", nargs="?", default="HEAD", help="the commit to judge (default HEAD)")
    p.add_argument("--bench", help="regular expression over asv's name(params), e.g. 'MatmulSquare' or \"'cpu'\"")
    p.add_argument("--out", default=".asv/compare", help="folder for the verdicts (default .asv/compare)")
    p.add_argument("--python", help="Python whose packages run the benchmarks, both sides (default: this one)")
    p.add_argument("--base-python", metavar="PYTHON",
                   help="the base side's Python (another environment: another torch, CUDA build, driver stack); "
                        "with --head-python, compares two environments, on one commit or two")  # fmt: skip
    p.add_argument("--head-python", metavar="PYTHON", help="the head side's Python (default: --python)")
    p.add_argument("--measure-all", action="store_true",
                   help="also measure figures whose code and every file it depends on are identical on both "
                        "sides in one environment (listed as 'same code' otherwise; an A/A run tests the method "
                        "with it)")  # fmt: skip
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
                   help=f"pairs of processes per figure at most, an even number (default {MAX_PASSES}): each side "
                   "sets up first in half of them; the figures of one setup_cache sweep (the collectives), judged as "
                   "one family, get as many more as their split confidence needs, rounded up to even")  # fmt: skip
    p.add_argument("--screen", type=int, default=SCREEN, metavar="N",
                   help=f"through the first N passes (default {SCREEN}; 0: none), after each even one, stop every "
                   "figure that could no longer be decided after 9 pairs of processes (at 99%%: where one odd pair "
                   "is never the interval's bound), or, looking for changes only, in which no pair of processes "
                   "shows a change on its own pairs of blocks; a stopped figure is undecided")  # fmt: skip
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
                   help=f"a time_ benchmark's block lasts at least this long, seconds, or its class's own asv "
                   f"sample_time where that is longer (default {BLOCK_S})")  # fmt: skip
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


def _resolved(python: str | None) -> str | None:
    """A path to an interpreter made absolute (the workers run it from inside the exported trees); a bare name
    (``python3.12``) is left to the PATH."""
    return str(Path(python).absolute()) if python and os.sep in python else python


def options(args: argparse.Namespace) -> Options:
    return Options(
        base=args.base, head=args.head, repo=Path(args.repo).resolve(), out=Path(args.out),
        python=_resolved(args.python) or sys.executable, bench=args.bench, machine=args.machine,
        confidence=args.confidence, floor=args.floor, min_passes=args.min_passes, max_passes=args.max_passes,
        screen=args.screen, same=args.same,
        pairs=args.pairs, block_s=args.block_s, figure_s=args.figure_s, track_blocks=args.track_blocks,
        twins=args.twins, keep=args.keep, all_passes=args.all_passes,
        from_dir=Path(args.from_dir) if args.from_dir else None,
        base_python=_resolved(args.base_python), head_python=_resolved(args.head_python),
        measure_all=args.measure_all,
    )  # fmt: skip


def compare(opts: Options) -> int:
    opts.check()
    try:  # before any measuring: an --out that cannot be written would lose every pass
        check_out_dir(opts.out)
    except OutputError as exc:
        raise ABError(str(exc)) from None
    if opts.from_dir is not None:
        figures, run = record.read_finished(opts.from_dir, written=True)
        return record.write(opts, figures, run)
    if not opts.base:
        raise ABError("name the BASE commit (or --from DIR of a finished compare)")
    if not (opts.repo / ".git").exists():
        raise ABError(f"--repo {opts.repo} is not a git repository")
    for flag, python in (("--python", opts.python), ("--base-python", opts.base_python),
                         ("--head-python", opts.head_python)):  # fmt: skip
        if python and not shutil.which(python) and not Path(python).is_file():
            raise ABError(f"{flag} {python} does not exist")
    work = Path(tempfile.mkdtemp(prefix="devbench-ab-"))
    log_path = work / "processes.log"
    try:
        sides = export_sides(opts.repo, [("base", opts.base), ("head", opts.head)], work)
        same_env = opts.python_of("base") == opts.python_of("head")
        if sides[0].sha == sides[1].sha and same_env:
            print(f"base and head are the same commit ({sides[0].sha[:8]}): an A/A run, every difference is noise")
        elif not same_env:
            print(f"environments: base {opts.python_of('base')}, head {opts.python_of('head')}", flush=True)
        try:
            figures, run = measure(opts, sides, work, log_path)
        except WorkerError as exc:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:] if log_path.exists() else []
            keep = work.parent / f"{work.name}.log"
            if log_path.exists():
                shutil.copy(log_path, keep)
            last = "".join(f"\n  {t}" for t in tail)
            raise ABError(f"{exc}; the benchmark processes' log is {keep}{last}") from None
        return record.write(opts, figures, run)
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
