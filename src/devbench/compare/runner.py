"""Passes of paired measurement over every selected combination, and when a figure may stop.

A **pass** starts one fresh worker per side and walks the combinations still running: for each,
both sides fork a process, set it up and check the workload, then take strict turns
(``session.paired_turns``), then tear down. Each pass is therefore one *process pair* per
combination, and its pairs of blocks give that pair's figure: the median of their log ratios.
Several passes sample what a process's own layout does to a figure (docs/design.md, "Verdicts").

After every even pass, the figures that cannot decide within ``max_passes`` whatever the passes to
come bring stop (``verdict.futile``: stopping them loses no verdict; by default "decide" means faster
or slower, with ``--same`` same too), through the screen's passes those no longer decidable after
the fewest passes, and from ``min_passes`` on those whose interval is decided (``stopping.settled``
says which); the rest run on. ``Passes.all_passes`` keeps every figure to ``min_passes``, for an A/A
run that measures what each figure can detect.
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

from devbench.compare.session import (
    BlockError,
    Opened,
    Worker,
    WorkerError,
    close_combination,
    open_combination,
    paired_turns,
)


@dataclass(frozen=True)
class Combination:
    """One benchmark at one parameter combination, named as asv's ``--bench`` sees it: ``name(p1, p2)``."""

    benchmark: str
    idx: int
    values: tuple[str, ...]  # each parameter's repr, as asv lists it
    names: tuple[str, ...]
    unit: str
    #: asv's key of the benchmark's setup_cache (None without one), and whether the figure itself is
    #: measured there (a sweep: every turn of one process reads the same value)
    setup_cache: str | None = None
    in_cache: bool = False

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
            combo = Combination(name, idx, tuple(values), tuple(b["param_names"]), b.get("unit") or "",
                                b.get("setup_cache"), bool(b.get("figures_in_setup_cache")))  # fmt: skip
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
    #: seconds its processes took, both sides, every pass: set-up, turns and tear-down (what it cost)
    seconds: float = 0.0
    #: of those, the seconds spent opening its processes: set-up, the workload's check, sizing a block
    setup_seconds: float = 0.0
    #: what each pass's pair of processes took (the figure's share of each pass)
    pass_seconds: list[float] = field(default_factory=list)
    #: the combination's index in base's listing, where it differs from head's (``combo.idx``): a parameter value
    #: added or removed on head moves the later combinations, which asv's version does not mark
    base_idx: int | None = None


@dataclass(frozen=True)
class Passes:
    """How many passes, how many pairs of blocks in each (at most), how long a ``time_`` block lasts, and the
    time one figure's turns may take in a pass."""

    min_passes: int
    max_passes: int
    pairs: int
    block_s: float
    figure_s: float = float("inf")
    #: the passes a figure measured in ``setup_cache`` gets at most (it gives one pair a pass: at least as
    #: many as its interval needs), asked after every pass: a sweep's size is known once its skips are
    cached_limit: Callable[[Figure], int] | None = None
    #: no figure stops before ``min_passes``, even one certain to stay undecided
    all_passes: bool = False

    def limit(self, fig: Figure) -> int:
        """The passes ``fig`` may get at most: an even number, so that each side sets up (or sweeps) first as
        often as the other."""
        most = self.max_passes
        if fig.combo.in_cache and self.cached_limit is not None:
            most = max(most, self.cached_limit(fig))
        return most + most % 2  # --max-passes is even (``Options``), a sweep's limit too (``stopping.limit``)


def run_caches(a: Worker, b: Worker, figures: Sequence[Figure], first: str) -> tuple[dict[str, str], dict[str, float]]:
    """Each ``setup_cache`` the figures need, once per side, the two sides in turn (``first`` goes first),
    told which combinations will read it. Returns the failures by key (the figures that need it stop) and the
    seconds each key's runs took, both sides."""
    failed: dict[str, str] = {}
    took: dict[str, float] = {}
    needed: dict[str, list[Combination]] = {}
    for f in figures:
        if f.combo.setup_cache:
            needed.setdefault(f.combo.setup_cache, []).append(f.combo)
    for key, combos in needed.items():
        select = "|".join(re.escape(c.selector) for c in combos)
        began = time.monotonic()
        for w in (a, b) if first == "base" else (b, a):
            reply = w.request("cache", name=combos[0].benchmark, select=select)
            if not reply.get("cached"):
                failed[key] = f"{w.side}: {reply.get('error', reply)}"
        took[key] = round(time.monotonic() - began, 3)
    return failed, took


def measure_pass(
    a: Worker, b: Worker, figures: Sequence[Figure], passes: Passes, log: IO[bytes], progress: Callable[[str], None],
    first: str = "base",
) -> dict[str, float]:
    """One pass over ``figures`` (those still running) with the workers ``a`` and ``b``; returns the seconds
    each ``setup_cache`` took, both sides (paid only while a figure that reads it runs on)."""
    failed, caches = run_caches(a, b, figures, first)
    for n, fig in enumerate(figures, 1):
        combo = fig.combo
        if combo.setup_cache in failed:
            fig.state, fig.reason = "error", failed[combo.setup_cache]
            continue
        progress(f"{n}/{len(figures)} {combo.selector}")
        began = time.monotonic()
        try:
            _measure_figure(a, b, fig, passes, first)
        finally:
            took = time.monotonic() - began
            fig.seconds += took
            fig.pass_seconds.append(round(took, 2))
    return caches


def block_length(benchmark: str, block_s: float, *workers: Worker) -> float:
    """How long a ``time_`` block of ``benchmark`` lasts at least: ``block_s``, or the benchmark's own asv
    ``sample_time`` where that is longer (on either side, so both sides time blocks of one length). A class
    whose calls last microseconds declares a longer sample: on the 2-vCPU VM with both cores busy, in A/A runs
    taking turns, their median detectable change was 27-38% with blocks of 0.05 s and 5-7% with 0.2 s; idle,
    alike, the worst figure 40% against 13% (reports/compare-power)."""
    own = [float(w.benchmarks.get(benchmark, {}).get("sample_time") or 0.0) for w in workers]
    return max([block_s, *own])


def _measure_figure(a: Worker, b: Worker, fig: Figure, passes: Passes, first: str) -> None:
    """One pair of processes for ``fig``: both set up (``first`` first), strict turns, both torn down."""
    combo = fig.combo
    # the side set up first alternates by pass, so being set up first or second favours neither
    order = (a, b) if first == "base" else (b, a)
    opened: list[tuple[Worker, Opened]] = []
    block_s = block_length(combo.benchmark, passes.block_s, a, b)
    began = time.monotonic()
    for w in order:
        idx = fig.base_idx if w.side == "base" and fig.base_idx is not None else combo.idx  # each side's own
        o = open_combination(w, combo.benchmark, idx, block_s, select=re.escape(combo.selector))
        opened.append((w, o))
        if o.state != "ready":
            break
    fig.setup_seconds += time.monotonic() - began
    if [o.state for _, o in opened] != ["ready", "ready"]:
        for w, o in opened:
            if o.state == "ready":
                close_combination(w)
        w, bad = next((w, o) for w, o in opened if o.state != "ready")
        fig.state, fig.reason = bad.state, f"{w.side}: {bad.reason}"
        return
    try:
        # a figure measured in setup_cache reads one value per process: one pair per pass
        pairs = paired_turns(a, b, 1, warm_up=False) if combo.in_cache else paired_turns(
            a, b, passes.pairs, passes.figure_s, a_first=first == "base")  # fmt: skip
    except BlockError as exc:
        fig.state, fig.reason = "error", str(exc)
        return
    finally:
        close_combination(a)
        close_combination(b)
    fig.a.append([x for x, _ in pairs])
    fig.b.append([y for _, y in pairs])


def run_passes(
    start: Callable[[], tuple[Worker, Worker]],
    figures: list[Figure],
    passes: Passes,
    settled: Callable[[Figure, int], bool],
    log: IO[bytes],
    out: IO[str] = sys.stdout,
    first: tuple[Worker, Worker] | None = None,
) -> list[dict[str, float]]:
    """Passes until every figure has stopped or ``max_passes`` ran. ``start()`` starts a fresh worker per
    side, base and head (``first``: the pair for the first pass, already started);
    ``settled(figure, passes_left, decide)`` says whether a figure may stop after a pass (``decide``: for a
    decided interval too, else only when it can no longer be decided). Returns what each pass measured and
    took (``figures``, ``seconds``)."""
    t0 = time.monotonic()
    record: list[dict[str, float]] = []
    for p in itertools.count():  # every figure stops by its limit (passes.limit)
        running = [f for f in figures if f.state == "running"]
        if not running:
            break
        started = time.monotonic()
        a, b = first if (p == 0 and first is not None) else start()
        caches: dict[str, float] = {}
        try:
            progress = _progress(p + 1, out)
            caches = measure_pass(a, b, running, passes, log, progress, "base" if p % 2 == 0 else "head")
        finally:
            a.stop()
            b.stop()
        done = p + 1
        stopped = 0
        for f in running:
            if f.state != "running":
                continue
            if done >= passes.limit(f):
                f.state = "done"
            elif (done >= passes.min_passes or not passes.all_passes) and settled(
                    f, passes.limit(f) - done, done >= passes.min_passes):  # settled: only after even  # fmt: skip
                f.state, f.stopped_after = "stopped", done
                stopped += 1
        left = sum(f.state == "running" for f in figures)
        took = time.monotonic() - started
        record.append({"figures": len(running), "seconds": round(took, 1), "caches": caches})
        # the next pass costs about what the figures that run on took in this one, and the caches
        per_pass = sum(f.pass_seconds[-1] for f in figures if f.state == "running" and f.pass_seconds)
        per_pass += sum(caches.values()) if left else 0.0
        ahead = (f", at most about {per_pass * (passes.min_passes - done) / 60:.1f} min to the first verdicts"
                 if done < passes.min_passes and left else "")  # fmt: skip
        print(f"pass {done}: {len(running)} figures in {took:.0f} s"
              f"{f', {stopped} settled' if stopped else ''}; {left} run on "
              f"({(time.monotonic() - t0) / 60:.1f} min so far{ahead})", file=out, flush=True)  # fmt: skip
    for f in figures:
        if f.state == "running":
            f.state = "done"
    return record


def _progress(pass_number: int, out: IO[str]) -> Callable[[str], None]:
    """A progress line at most every 10 s: the figure the pass is at."""
    last = [time.monotonic()]

    def say(what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= 10:
            last[0] = now
            print(f"  pass {pass_number}: {what}", file=out, flush=True)

    return say


def start_both(base: Worker, head: Worker) -> tuple[Worker, Worker]:
    """Both sides' workers, started together (their imports overlap; nothing is timed yet) and ready."""
    w = base
    try:
        for w in (base, head):
            w.spawn()
        for w in (base, head):
            w.ready()
    except (WorkerError, OSError) as exc:
        raise WorkerError(f"could not start the {w.side} benchmark process: {exc}") from None
    return base, head


def pair_logs(fig: Figure) -> list[list[float]]:
    """Per pass, the log ratio head/base of each pair of blocks that both gave a figure."""
    out = []
    for xs, ys in zip(fig.a, fig.b, strict=True):
        out.append([math.log(y / x) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0])
    return out
