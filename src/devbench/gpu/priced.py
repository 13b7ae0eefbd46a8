"""A plan's points and their prices: ``Point`` (one combination of one benchmark, its estimate and what it shares
with others: a set-up cache unit, a built workload, a check) and ``Plan`` (the points, the budget and what the stages
so far have taught: each workload's build, each family's scale), with the seconds a set of points is expected to
take (``Plan.estimate_s``) and the asv stage a point runs in. ``devbench.gpu.plan`` makes and fits them. Nothing
here imports torch or asv."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from devbench.gpu.pricing import Costs


@dataclass
class Point:
    """One combination of one benchmark, as asv's ``--bench`` names it."""

    benchmark: str
    idx: int
    values: tuple[str, ...]
    names: tuple[str, ...]
    tier: int
    rank: int  # its place among its benchmark's points of the same tier
    estimate_s: float
    state: str = "run"  # run, skip (cannot run here), dropped (over the budget), cut (a stop ended it unrun)
    reason: str = ""
    unit: tuple[str, ...] | None = None  # its set-up cache unit where the class prices one per combination
    unit_s: float = 0.0
    #: what its row (its values) adds to its unit for being kept: the unit's share that grows with what it measures
    #: (a world's sweep times only the rows a run reads: ``plan_cache_s``' ``by_points``), over the unit's rows;
    #: the figures of one row (a world's time, algbw and busbw) pay it once
    unit_share_s: float = 0.0
    #: what its unit costs once an earlier stage has made it, where the class keeps what it made across asv calls
    #: (``plan_cache_s``' ``cached_s``: an achievable search lands in the user's cache): ``made``
    unit_read_s: float | None = None
    #: the workload a swept point's measuring process builds once for its figures (priced once per stage)
    built: tuple[str, ...] | None = None
    built_s: float = 0.0
    #: ``built_s`` is what a recorded run's build of this workload (or of its class's nearest) took, its check
    #: inside: a re-plan scales it by this run's builds against the record's (``Plan.built_s``, ``build_ratio``)
    built_known: bool = False
    #: what the record's own build of this workload took (its seconds alone, no gap; None where it is priced from
    #: another workload's): what this run's build of it is held against (``Plan.build_ratio``)
    built_own: float | None = None
    late: bool = False  # runs in the last asv stage (the class's ``plan_last``): a long search, worlds that may hang
    #: what its class's set-up needs of its asv stage when it starts (``plan_min_stage_s``: a world's pre-flight,
    #: least sweep and margin); a shorter stage does not take the point
    min_stage_s: float = 0.0
    #: its class's ``setup_cache`` key (asv's ``setup_cache_key``; None: none): asv runs a stage's benchmarks in
    #: groups by that key, each group where its first benchmark falls in name order (``room_to_start``)
    cache_key: str | None = None
    twin: bool = False  # repeats a kept figure's evidence (``spec.TWINS``): first to go within its tier
    keep: bool = False  # read by validate or the health lines (``spec.kept_points``): never dropped
    check: tuple[str, ...] | None = None  # the workload a GPU point checks once per run (its class and values)
    gpus: int = 0  # the GPUs it needs (``needs``)
    done: bool = False  # an asv stage has run it (measured, failed or cut)
    swept: bool = False  # asks the stage's measuring process (a swept class's GPU point)
    #: the figure whose blocks it counts another way (``spec.SAME_BLOCKS``), and what it samples where that
    #: figure does not run in its stage's measuring process (then it measures the blocks itself)
    partner: str | None = None
    alone_s: float = 0.0
    #: its workload is set up over another's build (its class's ``built_by`` params match an earlier selected point's):
    #: the measuring process turns that build for it, with no release of the last workload before it
    turn: bool = False
    #: reads what its class's set-up cache measured (``figures_in_setup_cache``): one asv round whatever ``--rounds``
    #: says, as a plain ``asv run`` gives a ``track_`` figure (asv's later rounds would store the same samples again)
    once: bool = False
    #: why the stage it was given ended before asv reached its benchmark (its time limit): a later stage may take it
    #: back, as any dropped point, but it is never forced in as its family's first; where none does, it ends cut
    offered: str = ""

    @property
    def selector(self) -> str:
        return f"{self.benchmark}({', '.join(self.values)})" if self.values else self.benchmark

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v.strip(chr(39))}" for k, v in zip(self.names, self.values, strict=True))


@dataclass
class Plan:
    points: list[Point]
    budget_s: float
    reserve_s: float  # held back for what runs after the benchmarks (tests, validate, packing)
    costs: Costs
    rounds: int
    cache_s: dict[str, float] = field(default_factory=dict)  # module -> setup_cache s, paid once per asv call
    #: modules whose set-up cache makes a CUDA context where it serves a GPU point (a search on the GPU; not a
    #: world's, whose ranks are processes of their own): once per asv call that keeps such a point
    cache_gpu: set[str] = field(default_factory=set)
    first_estimate_s: float = 0.0  # the estimate of the first plan (what it printed)
    #: benchmark -> what its points really cost over their estimate in the stages so far (asv's own durations)
    scales: dict[str, float] = field(default_factory=dict)
    #: whether a measuring process is up and held for the stages still to come (``devbench.engine.sweep.held``):
    #: they pay no start of their own
    sweep_up: bool = False
    #: class ("module.Class") -> the seconds each build of its workloads took in this run's stages (the measuring
    #: process's journal, each with the stage's median gap before a build): what a family's sampling is learned
    #: without, and what prices a workload not yet built where nothing nearer does (``built_s``)
    builds: dict[str, list[float]] = field(default_factory=dict)
    #: family -> (its estimate, what asv's durations say it took, its builds apart) in the stages so far
    learned: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: ``Point.built`` -> what this run's stages took to build it, its seconds alone (the journal): a class's
    #: recorded prices are scaled by what its builds took here over their record (``built_s``)
    built_now: dict[tuple[str, ...], float] = field(default_factory=dict)
    #: the median seconds this run's measuring processes spent before a build (the next request, the release of the
    #: last workload): what a build priced from ``built_now`` pays beside its own seconds
    gap_now: float = 0.0
    #: what the points the last fit could not drop (each family's first, what validate and the health lines read)
    #: are expected to take: over the time fitted, the last stages will be cut
    forced_s: float = 0.0

    def built_s(self, p: Point, scale: float = 1.0) -> float:
        """What building ``p``'s workload in the measuring process costs: what a recorded run took for it (its own
        build, else its class's nearest: ``recorded.seed``), scaled as this run's builds of its class ran against
        their record (``build_ratio``: a record of older code can be far slower, a CPU copy's 12 s build took 1.3 s
        in the next run); else what this run's builds of its class nearest it in size took (``nearest_build``, with
        the run's gap before a build), not their slowest: a class's builds differ by size (an H200's float32
        product: 3 s at n=8192, 0.03 s at n=1,024), and a re-plan that priced every unbuilt one at the slowest
        dropped points it had time for; else the slowest of this run's builds of its class on another kind of
        device; else its declared set-up times ``scale``."""
        if p.built is None:
            return 0.0
        if p.built_known:  # a recorded build of this workload or its nearest, as this run's builds ran against theirs
            return p.built_s * self.build_ratio(p.built[1])
        near = nearest_build(p.built, self.built_now)  # this run's build of its class nearest it in size
        if near is not None:
            return near + (0.0 if p.turn else self.gap_now)
        seen = self.builds.get(p.built[1])
        return max(seen) if seen else p.built_s * scale

    def build_ratio(self, cls: str) -> float:
        """What this run's builds of class ``cls`` took over the record's own builds of the same workloads, their
        seconds alone (within 0.25-4x; not a price guessed from a neighbour's build), 1 where it built none the record
        built: a record of older code or a busier day is scaled as a whole, where one size's build says nothing of
        another's price."""
        recorded = {p.built: p.built_own for p in self.points
                    if p.built_own is not None and p.built and p.built[1] == cls}  # fmt: skip
        pairs = [(took, recorded[key]) for key, took in self.built_now.items() if key in recorded]
        now, then = sum(t for t, _ in pairs), sum(r for _, r in pairs)
        return min(4.0, max(0.25, now / then)) if pairs and then > 0 and now > 0 else 1.0

    def point_s(self, p: Point, scale: float = 1.0, beside: set[str] | frozenset[str] = frozenset()) -> float:
        """``p``'s estimate, times what its benchmark really cost so far, else times ``scale``; a figure counted
        from another's blocks pays its own sampling where that figure is not among ``beside`` (its stage's)."""
        alone = p.alone_s if p.partner is not None and p.partner not in beside else 0.0
        return (p.estimate_s + alone) * self.scales.get(p.benchmark, scale)

    def kept(self, tier: int | None = None) -> list[Point]:
        return [p for p in self.points if p.state == "run" and (tier is None or p.tier == tier)]

    def dropped(self) -> list[Point]:
        return [p for p in self.points if p.state == "dropped"]

    def estimate_s(self, tier: int | None = None, points: list[Point] | None = None, group=None,
                   scale: float = 1.0) -> float:  # fmt: skip
        """Seconds the kept points of ``tier`` (every tier: None), or ``points``, are expected to take: one asv
        call per stage they run in (``group``, default ``stage_of``), its set-up caches, and each workload's
        check once (none already checked by a point that ran). Each point costs ``point_s``; the asv calls,
        caches and checks times ``scale``. The sum of ``estimate_parts``."""
        return sum(self.estimate_parts(tier, points, group, scale)[0].values())

    def estimate_parts(self, tier: int | None = None, points: list[Point] | None = None, group=None,
                       scale: float = 1.0) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
        """``estimate_s`` by what it pays for (``PARTS``: each asv call's start, the set-up caches and searches,
        the measuring process's start, the builds of the workloads, the sampling of the figures, the checks), and
        the builds by the benchmark of the first point in its stage that builds each workload."""
        chosen = points if points is not None else self.kept(tier)
        group = group or stage_of
        checked = {p.check for p in self.points if p.done and p.check is not None} if points is not None else set()
        parts = dict.fromkeys(PARTS, 0.0)
        by_benchmark: dict[str, float] = {}
        started = self.sweep_up
        for g in sorted({group(p) for p in chosen}, key=_stage_order):
            kept = [p for p in chosen if group(p) == g]
            modules = {p.benchmark.split(".", 1)[0] for p in kept}
            parts["asv calls"] += self.costs.stage_call_s * scale
            caches = sum(self.cache_s.get(m, 0.0) for m in modules)
            caches += self.costs.cuda_context_s * len({m for p in kept if (m := _cache_gpu(self, p))})
            if any(p.swept for p in kept) and not started:  # one measuring process for the stages (sweep.held)
                parts["measuring process"] += self.costs.sweep_start_s * scale
                started = True
            caches += sum(dict((p.unit, p.unit_s) for p in kept if p.unit is not None).values())
            caches += sum(dict(((p.unit, p.values), p.unit_share_s) for p in kept if p.unit_share_s).values())
            parts["set-up caches"] += caches * scale
            builds: dict[tuple[str, ...], tuple[str, float]] = {}
            for p in kept:  # priced as its stage's last point of the workload, named by its first
                if p.built is not None:
                    builds[p.built] = (builds.get(p.built, (p.benchmark, 0.0))[0], self.built_s(p, scale))
            for name, seconds in builds.values():
                parts["builds"] += seconds
                by_benchmark[name] = by_benchmark.get(name, 0.0) + seconds
            beside = {p.selector for p in kept}
            parts["sampling"] += sum(self.point_s(p, scale, beside) for p in kept)
        checks = {p.check for p in chosen if p.check is not None} - checked
        parts["checks"] += len(checks) * self.costs.gpu_check_s * scale
        return parts, by_benchmark


#: the asv stages of a run, in order: the headline points, the rest, then the late ones (``plan_last``)
STAGES = ("headline", "rest", "last")

#: what a plan's estimate pays for (``Plan.estimate_parts``)
PARTS = ("asv calls", "set-up caches", "measuring process", "builds", "sampling", "checks")


def _stage_order(g: str) -> tuple[int, str]:
    return (STAGES.index(g) if g in STAGES else len(STAGES), g)


def stage_of(p: Point) -> str:
    """The asv stage a point runs in when the first plan keeps it."""
    return "last" if p.late else "headline" if p.tier == 0 else "rest"


def _cache_gpu(plan: Plan, p: Point) -> str | None:
    """The module whose set-up cache makes a CUDA context for ``p`` (a GPU unit of a ``Plan.cache_gpu`` module)."""
    module = p.benchmark.split(".", 1)[0]
    return module if p.unit is not None and p.gpus and module in plan.cache_gpu else None


def nearest_build(key: tuple[str, ...], builds: dict[tuple[str, ...], float]) -> float | None:
    """What the builds of ``key``'s class among ``builds`` (a record's, or this run's) say ``key``'s takes: of those
    on the same kind of device (a ``'cuda'`` value in both or neither), the nearest at sizes no smaller than
    ``key``'s and the nearest at sizes no larger (grown by the largest ratio of ``key``'s sizes to its), the dearer
    of the two: a build's cost moves with its size but not always one way (a copy rotates over fewer sets as it
    grows: on the VM a 64 MiB copy built in 2.2 s and a 256 MiB one in 0.35 s), so a workload between two is
    priced at the dearer. Nearest: in sizes (their ratio), then in the params that differ in text; the slowest of
    equals. Where no build brackets it from either side (sizes above and below at once), the nearest, grown.
    None where ``builds`` holds nothing of the class there."""
    import math

    def numbers(values: tuple[str, ...]) -> list[float | None]:
        out: list[float | None] = []
        for v in values:
            try:
                out.append(float(v))
            except ValueError:
                out.append(None)
        return out

    mine = numbers(key[2:])

    def gap(other: tuple[str, ...]) -> tuple[float, int]:
        ratio, words = 0.0, 0
        for a, b, x, y in zip(key[2:], other[2:], mine, numbers(other[2:]), strict=True):
            if x is None or y is None:
                words += a != b
            else:
                ratio += abs(math.log(x / y)) if x > 0 and y > 0 else float(x != y)
        return ratio, words

    def side(other: tuple[str, ...], larger: bool) -> bool:
        return all(x is None or y is None or (y >= x if larger else y <= x)
                   for x, y in zip(mine, numbers(other[2:]), strict=True))  # fmt: skip

    def priced(pool: list[tuple[str, ...]]) -> float:
        best = min(gap(k) for k in pool)
        seconds, near = max((builds[k], k) for k in pool if gap(k) == best)
        grow = [x / y for x, y in zip(mine, numbers(near[2:]), strict=True) if x is not None and y and x > y]
        return seconds * max(grow, default=1.0)

    cuda = "'cuda'" in key
    same = [k for k in builds if k[:2] == key[:2] and len(k) == len(key) and ("'cuda'" in k) == cuda]
    if not same:
        return None
    bracket = [priced(pool) for pool in ([k for k in same if side(k, True)], [k for k in same if side(k, False)])
               if pool]  # fmt: skip
    return max(bracket) if bracket else priced(same)


def selection_regex(points: list[Point]) -> str:
    """One regular expression for asv's ``--bench`` that selects exactly ``points`` (asv's ``name(params)``, a bare
    name where a benchmark has none), each benchmark's name once before its points' params: a whole node's grid
    passes as one argument, well within Linux's 128 KiB a string (each point's whole name made 86% of it)."""
    by: dict[str, list[Point]] = {}
    for p in points:
        by.setdefault(p.benchmark, []).append(p)
    parts = []
    for name, some in by.items():
        if any(not p.values for p in some):
            parts.append(re.escape(name))
        if values := [re.escape(", ".join(p.values)) for p in some if p.values]:
            parts.append(re.escape(name) + r"\((?:" + "|".join(values) + r")\)")
    return "^(?:" + "|".join(parts) + ")$"
