"""Passes of paired measurement over every selected combination, and when a figure may stop.

A **pass** starts one fresh worker per side and walks the combinations still running: for each,
both sides fork a process, set it up and check the workload, then take strict turns
(``session.paired_turns``), then tear down. Each pass is therefore one *process pair* per
combination, and its pairs of blocks give that pair's figure: the median of their log ratios.
Several passes sample what a process's own layout does to a figure (docs/design.md, "Verdicts").

After ``min_passes`` passes (and each pass after), the figures whose interval is decided stop,
and so do those that cannot decide within ``max_passes`` (``judge.settled``); the rest run on.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from devbench.ab.session import Worker, WorkerError, close_combination, open_combination, paired_turns


@dataclass(frozen=True)
class Combination:
    """One benchmark at one parameter combination, named as asv's ``--bench`` sees it: ``name(p1, p2)``."""

    benchmark: str
    idx: int
    values: tuple[str, ...]  # each parameter's repr, as asv lists it
    names: tuple[str, ...]
    unit: str

    @property
    def label(self) -> str:
        """``device=cpu, n=64``: the params as the report and compare.csv write them."""
        return ", ".join(f"{k}={v.strip(chr(39))}" for k, v in zip(self.names, self.values, strict=True))

    @property
    def selector(self) -> str:
        return f"{self.benchmark}({', '.join(self.values)})" if self.values else self.benchmark


def combinations(listing: dict[str, dict[str, Any]], pattern: str) -> list[Combination]:
    """Every combination of the listed benchmarks that ``pattern`` selects, in asv's order."""
    out = []
    regex = re.compile(pattern)
    for name in sorted(listing):
        b = listing[name]
        product = list(itertools.product(*b["params"])) if b["params"] else [()]
        for idx, values in enumerate(product):
            combo = Combination(name, idx, tuple(values), tuple(b["param_names"]), b.get("unit") or "")
            if regex.search(combo.selector):
                out.append(combo)
    return out


@dataclass
class Figure:
    """What the passes measured of one combination: per pass, each side's blocks in pair order."""

    combo: Combination
    a: list[list[float]] = field(default_factory=list)
    b: list[list[float]] = field(default_factory=list)
    state: str = "running"  # running, skip, error, stopped, done
    reason: str = ""
    stopped_after: int | None = None
    versions: tuple[str, str] = ("", "")


@dataclass(frozen=True)
class Passes:
    """How many passes, how many pairs of blocks in each (at most), how long a ``time_`` block lasts, and the
    time one figure's turns may take in a pass."""

    min_passes: int
    max_passes: int
    pairs: int
    block_s: float
    figure_s: float = float("inf")


def measure_pass(
    a: Worker, b: Worker, figures: Sequence[Figure], passes: Passes, log: IO[bytes], progress: Callable[[str], None]
) -> None:
    """One pass over ``figures`` (those still running) with the workers ``a`` and ``b``."""
    for n, fig in enumerate(figures, 1):
        combo = fig.combo
        progress(f"{n}/{len(figures)} {combo.selector}")
        opened = []
        for w in (a, b):
            o = open_combination(w, combo.benchmark, combo.idx, passes.block_s, select=re.escape(combo.selector))
            opened.append(o)
            if o.state != "ready":
                break
        states = [o.state for o in opened]
        if states != ["ready", "ready"]:
            for w, o in zip((a, b), opened, strict=False):
                if o.state == "ready":
                    close_combination(w)
            bad = next(o for o in opened if o.state != "ready")
            side = "base" if len(opened) == 1 else "head"
            fig.state, fig.reason = bad.state, f"{side}: {bad.reason}"
            continue
        try:
            pairs = paired_turns(a, b, passes.pairs, passes.figure_s)
        finally:
            close_combination(a)
            close_combination(b)
        fig.a.append([x for x, _ in pairs])
        fig.b.append([y for _, y in pairs])


def run_passes(
    start: Callable[[str], Worker],
    figures: list[Figure],
    passes: Passes,
    settled: Callable[[Figure, int], bool],
    log: IO[bytes],
    out: IO[str] = sys.stdout,
    first: tuple[Worker, Worker] | None = None,
) -> None:
    """Passes until every figure has stopped or ``max_passes`` ran. ``start(side)`` starts a fresh worker
    (``first``: the pair for the first pass, already started); ``settled(figure, passes_left)`` says
    whether a figure may stop after a pass."""
    t0 = time.monotonic()
    for p in range(passes.max_passes):
        running = [f for f in figures if f.state == "running"]
        if not running:
            break
        started = time.monotonic()
        a, b = first if (p == 0 and first is not None) else (start("base"), start("head"))
        try:
            progress = _progress(p + 1, out)
            measure_pass(a, b, running, passes, log, progress)
        finally:
            a.stop()
            b.stop()
        done = p + 1
        stopped = 0
        if passes.min_passes <= done < passes.max_passes:
            for f in running:
                if f.state == "running" and settled(f, passes.max_passes - done):
                    f.state, f.stopped_after = "stopped", done
                    stopped += 1
        left = sum(f.state == "running" for f in figures)
        took = time.monotonic() - started
        most = took * min(passes.max_passes - done, passes.min_passes - done if done < passes.min_passes else 99)
        ahead = f", about {max(most, 0) / 60:.1f} min to the first verdicts" if done < passes.min_passes else ""
        print(f"pass {done}/{passes.max_passes}: {len(running)} figures in {took:.0f} s"
              f"{f', {stopped} settled' if stopped else ''}; {left} run on "
              f"({(time.monotonic() - t0) / 60:.1f} min so far{ahead})", file=out, flush=True)  # fmt: skip
    for f in figures:
        if f.state == "running":
            f.state = "done"


def _progress(pass_number: int, out: IO[str]) -> Callable[[str], None]:
    """A progress line at most every 10 s: the figure the pass is at."""
    last = [time.monotonic()]

    def say(what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= 10:
            last[0] = now
            print(f"  pass {pass_number}: {what}", file=out, flush=True)

    return say


def start_worker(worker: Worker) -> Worker:
    try:
        return worker.start()
    except (WorkerError, OSError) as exc:
        raise WorkerError(f"could not start the {worker.side} benchmark process: {exc}") from None


def pair_logs(fig: Figure) -> list[list[float]]:
    """Per pass, the log ratio head/base of each pair of blocks that both gave a figure."""
    out = []
    for xs, ys in zip(fig.a, fig.b, strict=True):
        out.append([math.log(y / x) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0])
    return out
