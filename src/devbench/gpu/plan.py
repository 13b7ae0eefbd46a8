"""What a time-boxed run of the suite measures, what it expects that to cost, and what it leaves out.

``devbench gpu-run`` (``devbench.gpu.gpurun``) plans with this before it starts asv: every combination
of every selected benchmark becomes a ``Point`` with an estimate of its seconds, and ``choose``
keeps points in priority order until the budget is spent. Nothing here imports torch or asv.

Priority. A class may declare its headline points, ``headline = [{param: [values]}, ...]`` (tier 0; the rest tier 1;
a class without one has only headline points). Tier 0 runs first, in one asv call; tier 1 after it, re-planned
with what tier 0 cost. Points are dropped from the end of tier 1 first, each benchmark's in turn; a benchmark's
first point is never dropped, so no family goes silently.

Estimate of one point, per round (``rounds``, 1 unless asked, as ``asv run -a rounds=R``):

* launch: the fork of asv's forkserver (``Costs.launch_s``) and, for a GPU point, a CUDA context, but for a point
  that reads what its class's ``setup_cache`` measured (``figures_in_setup_cache``: the NCCL worlds' sweep);
* set-up: the class's ``plan_setup_s``, else ``SETUP_S``, plus for a GPU point ``Costs.gpu_setup_s``
  (cuBLAS's start-up and a float64-checked product at a large size, timed by the probe on the machine);
* samples: a ``time_`` benchmark at most ``min(repeat[2], repeat[1] * sample_time)`` s (asv's rule, after its
  ``warmup_time``); a ``track_`` one its class's ``plan_s``, else ``TRACK_S`` (11 blocks of 0.1 s, and sizing).

A GPU point of a swept class (``swept``: ``devbench.engine.sweep``) is a fork that asks the run's measuring process:
no CUDA context or set-up of its own. Its workload is built once per stage, a unit its figures share (``SETUP_S``,
or ``plan_setup_s``); its figure samples ``swept_sample_s`` (8 blocks of its ``sample_time`` where precise, else
its cap). One measuring process serves the stages before the tests (``devbench.engine.sweep.held``), a fill starts
its own: each priced ``Costs.sweep_start_s`` once; a re-plan while one is up (``Plan.sweep_up``) prices none.

A point that matches one of the class's ``skips`` (``engine.swept.declared_skip``), or needs more GPUs or cores than the
machine has (``gpus_needed``: a ``'cuda'`` value, ``plan_gpus``, ``plan_needs``), is not run or priced. A
``setup_cache`` (``plan_cache_s``) counts once per benchmark module and tier, or, declared as ``{"per": [param,
...], "s": seconds or {value of the first param: seconds}}``, once per combination of those params among the
tier's kept points (a search per device and dtype, a world per backend and size); a search in this user's cache
(``Costs.cached_searches``) is priced as a read, a CPU search at what the probe expects (``expected_searches``).
Each asv call adds ``Costs.stage_call_s``: asv's start and its forkserver's import of the suite (its discovery is
gpu-run's listing, ``devbench.gpu.asvrun``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from devbench.gpu.declared import (  # noqa: F401 - the plan's names for what a class declares
    GPU_VALUES,
    SETUP_S,
    SIZING_S,
    TRACK_GPU_S,
    TRACK_S,
    _matches,
    cache_units,
    declared_skip,
    gpus_needed,
    is_headline,
    is_late,
    needs,
    sample_s,
    swept_sample_s,
)
from devbench.gpu.pricing import ASV_START_S, Costs, searches_of  # noqa: F401 - the plan's names for its costs


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
    #: inside: kept when a re-plan learns this run's builds (``Plan.built_s``)
    built_known: bool = False
    late: bool = False  # runs in the last asv stage (the class's ``plan_last``): a long search, worlds that may hang
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
    #: process's journal): a swept workload not yet built is priced the slowest, not its declared set-up
    builds: dict[str, list[float]] = field(default_factory=dict)
    #: family -> (its estimate, what asv's durations say it took, its builds apart) in the stages so far
    learned: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: ``Point.built`` -> what this run's stages took to build it (the journal): a class's recorded prices are
    #: scaled by what its builds took here over their record (``built_s``)
    built_now: dict[tuple[str, ...], float] = field(default_factory=dict)

    def built_s(self, p: Point, scale: float = 1.0) -> float:
        """What building ``p``'s workload in the measuring process costs: what a recorded run took for it (its own
        build, else its class's nearest: ``recorded.seed``), scaled as this run's builds of its class ran against
        their record (``build_ratio``: a record of older code can be far slower, a CPU copy's 12 s build took 1.3 s
        in the next run); else the slowest of this run's builds of its class so far; else its declared set-up times
        ``scale``. The slowest, not their mean: a class's builds differ by size (CPU DeviceCopy on the VM: 0.04 s
        at 4 KiB, 3.9 s at 4 MiB), and a re-planned stage, packed close to its limit, cuts points when a build is
        priced short; one that ends early leaves its time to the fill."""
        if p.built is None:
            return 0.0
        if p.built_known:  # a recorded build of this workload or its nearest, as this run's builds ran against theirs
            return p.built_s * self.build_ratio(p.built[1])
        seen = self.builds.get(p.built[1])
        return max(seen) if seen else p.built_s * scale

    def build_ratio(self, cls: str) -> float:
        """What this run's builds of class ``cls`` took over the recorded prices of the same workloads (within
        0.25-4x), 1 where it built none that a record prices: a record of older code or a busier day is scaled as a
        whole, where one size's build says nothing of another's price."""
        recorded = {p.built: p.built_s for p in self.points if p.built_known and p.built and p.built[1] == cls}
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
        caches and checks times ``scale``."""
        chosen = points if points is not None else self.kept(tier)
        group = group or stage_of
        checked = {p.check for p in self.points if p.done and p.check is not None} if points is not None else set()
        total = 0.0
        started = self.sweep_up
        for g in sorted({group(p) for p in chosen}, key=_stage_order):
            kept = [p for p in chosen if group(p) == g]
            modules = {p.benchmark.split(".", 1)[0] for p in kept}
            fixed = self.costs.stage_call_s + sum(self.cache_s.get(m, 0.0) for m in modules)
            fixed += self.costs.cuda_context_s * len({m for p in kept if (m := _cache_gpu(self, p))})
            if any(p.swept for p in kept) and not started:  # one measuring process for the stages (sweep.held)
                fixed += self.costs.sweep_start_s
                started = True
            fixed += sum(dict((p.unit, p.unit_s) for p in kept if p.unit is not None).values())
            fixed += sum(dict(((p.unit, p.values), p.unit_share_s) for p in kept if p.unit_share_s).values())
            built = sum(dict((p.built, self.built_s(p, scale)) for p in kept if p.built is not None).values())
            beside = {p.selector for p in kept}
            total += fixed * scale + built + sum(self.point_s(p, scale, beside) for p in kept)
        checks = {p.check for p in chosen if p.check is not None} - checked
        return total + len(checks) * self.costs.gpu_check_s * scale


#: the asv stages of a run, in order: the headline points, the rest, then the late ones (``plan_last``)
STAGES = ("headline", "rest", "last")


def _stage_order(g: str) -> tuple[int, str]:
    return (STAGES.index(g) if g in STAGES else len(STAGES), g)


#: why the late stage's points were left to the fill
WAITS_FOR_FILL = "left to the fill stage: the last stage would not end in the time before the tests"


def defer_late(plan: Plan, kept: list[Point], name: str, room_s: float, scale: float = 1.0) -> list[Point]:
    """The points of stage ``name`` to run now: all of them, but for a last stage (a search, NCCL worlds) whose
    estimate exceeds ``room_s``: started, it would be cut at its limit with nothing kept, so its points wait for the
    fill stage, after the tests and validate (which leave what they do not use), marked dropped."""
    if name != "last" or not kept or plan.estimate_s(points=kept, group=lambda p: name, scale=scale) <= room_s:
        return kept
    for p in kept:
        p.state, p.reason = "dropped", WAITS_FOR_FILL
    return []


def stage_of(p: Point) -> str:
    """The asv stage a point runs in when the first plan keeps it."""
    return "last" if p.late else "headline" if p.tier == 0 else "rest"


def points(listing: dict[str, dict[str, Any]], pattern_ok, costs: Costs, rounds: int,
           keep: frozenset[str] = frozenset(), twins: frozenset[str] = frozenset(),
           sweep_cpu: bool = False, same_blocks: Mapping[str, Any] | None = None) -> list[Point]:  # fmt: skip
    """Every combination of the listed benchmarks that ``pattern_ok(selector)`` accepts, with its estimate.
    ``keep``: the selectors never dropped (``Point.keep``); ``twins``: benchmarks that repeat another's
    evidence (``Point.twin``); ``sweep_cpu``: a swept class's CPU points ask the measuring process too
    (``DEVBENCH_SWEEP=all``); ``same_blocks``: swept figures counted from another figure's blocks, each with
    that figure, or with ``(figure, {param: [values]})`` where only those points are (``spec.SAME_BLOCKS``): they
    sample nothing of their own where it runs in their stage."""
    out: list[Point] = []
    imprecise = set(costs.imprecise)
    shares: dict[str, list] = {}  # a figure -> those counted from its blocks, and where: imprecise if one is
    for figure, partner in (same_blocks or {}).items():
        named, where = partner if isinstance(partner, tuple) else (partner, {})
        shares.setdefault(named, []).append((figure, where))
    for name in sorted(listing):
        bench = listing[name]
        product = list(itertools.product(*bench["params"])) if bench["params"] else [()]
        ranks = [0, 0]
        turned: set[tuple[str, ...] | None] = set()  # the build groups (``built_by``) a point of it builds already
        for idx, values in enumerate(product):
            values = tuple(values)
            tier = 0 if is_headline(bench, values) else 1
            need, cores = needs(bench, values)
            point = Point(name, idx, values, tuple(bench["param_names"]), tier, ranks[tier], 0.0, gpus=need)
            if not pattern_ok(point.selector):
                continue
            ranks[tier] += 1
            if need > costs.gpus:
                point.state = "skip"
                point.reason = f"needs {need} GPU(s), this machine has {costs.gpus}" if costs.gpus else "no CUDA here"
                out.append(point)
                continue
            declared = declared_skip(bench, values)
            if declared:
                point.state, point.reason = "skip", declared
                out.append(point)
                continue
            if costs.cores and cores > costs.cores:
                point.state, point.reason = "skip", f"needs {cores} cores, this machine has {costs.cores}"
                out.append(point)
                continue
            unit = cache_units(bench, values, costs.model_searched and bool(need), costs.cached_searches,
                               dict(costs.expected_searches))  # fmt: skip
            if unit is not None:
                point.unit, point.unit_s = unit
                read = (bench.get("plan_cache_s") or {}).get("cached_s")
                point.unit_read_s = float(read) if read is not None else None
            point.late = is_late(bench, values)
            point.twin = name in twins
            point.keep = point.selector in keep
            # a point that reads its set-up cache's sweep checks nothing itself: the world checked every op there
            if need and costs.gpu_check_s and not bench.get("figures_in_setup_cache"):
                point.check = (name.rsplit(".", 1)[0], *values)
            if bench.get("swept") and (need or sweep_cpu):  # a fork that asks; the workload built once for its figures
                point.swept = True  # cuBLAS's start and the CUDA context: once per measuring process
                point.built = ("built", name.rsplit(".", 1)[0], *values)
                point.built_s = float(bench.get("plan_setup_s", SETUP_S))
                group = _build_group(bench, values)  # the first selected point of a group builds, the rest turn
                point.turn = group is not None and group in turned
                turned.add(group)
                wide = {point.selector} | {f"{f}({', '.join(values)})" if values else f for f, where in
                                           shares.get(name, ()) if _matches(bench, values, where, "SAME_BLOCKS")}
                sampling = swept_sample_s(bench, gpu=bool(need), precise=not wide & imprecise, values=values)
                partner = (same_blocks or {}).get(name)
                if isinstance(partner, tuple):  # at the points its params name only
                    partner = partner[0] if _matches(bench, values, partner[1], "SAME_BLOCKS") else None
                if partner is not None:  # sampled by its partner's blocks where they run in one measuring process
                    point.partner = f"{partner}({', '.join(values)})" if values else partner
                    point.alone_s, sampling = rounds * sampling, 0.0
                point.estimate_s = rounds * (costs.launch_s + sampling)
                out.append(point)
                continue
            setup = float(bench.get("plan_setup_s", SETUP_S + (costs.gpu_setup_s if need else 0.0)))
            # a point that reads what its setup_cache measured (a world's sweep) never makes a CUDA context
            reads = bool(bench.get("figures_in_setup_cache"))
            launch = costs.launch_s + (costs.cuda_context_s if need and not reads else 0.0)
            sampling = (swept_sample_s(bench, gpu=bool(need), values=values) if bench.get("swept")
                        else sample_s(bench, gpu=bool(need), values=values))  # fmt: skip
            per_round = launch + setup + sampling
            point.estimate_s = rounds * per_round
            out.append(point)
    _share_units(out, listing)
    return out


def _build_group(bench: dict[str, Any], values: tuple[str, ...]) -> tuple[str, ...] | None:
    """The values of the params the class's build depends on (``built_by``), which points of one group share; None
    where it names none."""
    names = list(bench.get("param_names", []))
    by = [n for n in bench.get("built_by", []) or [] if n in names]
    return tuple(values[names.index(n)] for n in by) if by else None


def _share_units(points: list[Point], listing: dict[str, dict[str, Any]]) -> None:
    """A unit whose class declares ``by_points`` (the share of its seconds that grows with what it measures: a
    world's sweep times only the rows the run reads) keeps the rest as its start, paid once, and gives each of its
    rows (the values its points share: a world's time, algbw and busbw of one op and size) an equal part of that
    share, paid once where a point of the row is kept."""
    rows: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for p in points:
        if p.unit is not None and p.state != "skip":
            rows.setdefault(p.unit, set()).add(p.values)
    for p in points:
        share = float((listing[p.benchmark].get("plan_cache_s") or {}).get("by_points", 0.0)) if p.unit else 0.0
        if share > 0 and p.state != "skip":
            p.unit_share_s = p.unit_s * share / len(rows[p.unit])
            p.unit_s *= 1.0 - share


def made(plan: Plan, ran: list[Point]) -> None:
    """After a stage: the units its points ``ran`` made (those asv saved a figure for: their set-up cache ended),
    which later stages read rather than make (``Point.unit_read_s``), are priced so for every point still to run
    (a CPU search made in the last stage is read by the fill's set-up cache). Not where the user asked for every
    search to be made again."""
    units = {p.unit for p in ran if p.unit is not None and p.state != "cut" and p.unit_read_s is not None}
    for p in plan.points:
        if not p.done and p.unit in units and p.unit_read_s is not None:
            p.unit_s = min(p.unit_s, p.unit_read_s)


def gpu_points(listing: dict[str, dict[str, Any]]) -> frozenset[str]:
    """The selectors of the points that need a GPU (``needs``): ``gpu-run --gpu-only``."""
    return frozenset(Point(name, 0, tuple(v), (), 0, 0, 0.0).selector for name, bench in listing.items()
                     for v in (itertools.product(*bench["params"]) if bench["params"] else [()])
                     if needs(bench, tuple(v))[0] >= 1)  # fmt: skip


def _cache_gpu(plan: Plan, p: Point) -> str | None:
    """The module whose set-up cache makes a CUDA context for ``p`` (a GPU unit of a ``Plan.cache_gpu`` module)."""
    module = p.benchmark.split(".", 1)[0]
    return module if p.unit is not None and p.gpus and module in plan.cache_gpu else None


def make_plan(listing: dict[str, dict[str, Any]], pattern_ok, costs: Costs, budget_s: float, reserve_s: float,
              rounds: int = 1, keep: frozenset[str] = frozenset(),
              twins: frozenset[str] = frozenset(), sweep_cpu: bool = False,
              same_blocks: Mapping[str, Any] | None = None) -> Plan:  # fmt: skip
    """The plan: every selected point, tier 0 first, dropped from the lowest priority until it fits (``keep``,
    ``twins``, ``sweep_cpu`` and ``same_blocks``: as ``points``)."""
    plan = Plan(points(listing, pattern_ok, costs, rounds, keep, twins, sweep_cpu, same_blocks), budget_s, reserve_s,
                costs, rounds)  # fmt: skip
    for name, bench in listing.items():
        once, module = bench.get("plan_cache_s"), name.split(".", 1)[0]
        if isinstance(once, int | float) and once and bench.get("setup_cache"):
            plan.cache_s[module] = max(plan.cache_s.get(module, 0.0), float(bench["plan_cache_s"]))
        elif isinstance(once, dict) and bench.get("setup_cache"):  # priced per unit: asv's process for it apart
            plan.cache_s[module] = max(plan.cache_s.get(module, 0.0), costs.import_s)
            if not bench.get("figures_in_setup_cache"):
                plan.cache_gpu.add(module)
    fit(plan, budget_s - reserve_s)
    return plan


def _order(candidates: list[Point]) -> list[Point]:
    """Priority order: what validate and the health lines read, then tier; within a tier the figures that are
    not another's twin first; then each benchmark's points in turn (its first, then everyone's second, ...)."""
    return sorted(candidates, key=lambda p: (not p.keep, p.tier, p.twin, p.rank, p.benchmark, p.idx))


def fit(plan: Plan, seconds: float, tiers: tuple[int, ...] = (0, 1), scale: float = 1.0, group=None) -> None:
    """Keep the points of ``tiers`` not yet run, in priority order, while the estimate fits in ``seconds``; the
    others are dropped. Called for the first plan and again after every stage. A point costs its estimate
    times what its benchmark really cost so far (``Plan.scales``), else times ``scale``, as do the asv
    calls, set-up caches and checks.

    A benchmark's first point is kept whatever it costs, unless the benchmark has points kept or run
    elsewhere: a family is never dropped whole; so is every point validate and the health lines read
    (``Point.keep``). ``group(point)``
    names the asv stage a kept point will run in (default ``stage_of``): each adds one asv call and its
    set-up caches; a workload already checked by a point that ran is not checked again. Once a point is kept,
    the other figures of its workload (not a twin) are kept next where they fit: in its stage they cost their
    sampling alone, and one left for a later stage would build the workload again.
    """
    group = group or stage_of
    candidates = _order([p for p in plan.points if p.tier in tiers and p.state in ("run", "dropped") and not p.done])
    elsewhere = {p.benchmark for p in plan.points if p.state == "run" and (p.done or p.tier not in tiers)}
    for p in candidates:
        p.state, p.reason = "dropped", "over the time budget"
    calls: set[str] = set()
    caches: set[tuple[str, str]] = set()
    units: set[tuple] = set()  # (unit, stage), and (unit, values, stage): a unit's row paid once in a stage
    checked = {p.check for p in plan.points if p.done and p.check is not None}
    started = [plan.sweep_up]  # a measuring process up for the stages planned here (sweep.held): started once
    taken: dict[str, set[str]] = {}  # the selectors kept in each stage: a partner's blocks are shared there
    alone: dict[str, list[Point]] = {}  # kept before their partner in their stage: priced sampling of their own
    total = 0.0

    def cost(p: Point) -> float:
        g, module = group(p), p.benchmark.split(".", 1)[0]
        fixed = 0.0 if g in calls else plan.costs.stage_call_s
        fixed += 0.0 if (module, g) in caches else plan.cache_s.get(module, 0.0)
        fixed += plan.costs.cuda_context_s if _cache_gpu(plan, p) and (module, g, "cuda") not in caches else 0.0
        fixed += p.unit_s if p.unit is not None and (p.unit, g) not in units else 0.0
        fixed += p.unit_share_s if (p.unit, p.values, g) not in units else 0.0  # its row, once per stage
        built = plan.built_s(p, scale) if p.built is not None and (p.built, g) not in units else 0.0
        fixed += plan.costs.gpu_check_s if p.check is not None and p.check not in checked else 0.0
        fixed += plan.costs.sweep_start_s if p.swept and not started[0] else 0.0
        # a figure kept before it that counts its blocks (priced alone so far) then samples nothing of its own
        shared = sum(q.alone_s * plan.scales.get(q.benchmark, scale) for q in alone.get(g, [])
                     if q.partner == p.selector)  # fmt: skip
        return fixed * scale + built + plan.point_s(p, scale, taken.get(g, set())) - shared

    def take(p: Point) -> float:
        """``p`` kept: the seconds it adds (``cost``), its stage's asv call and its module's set-up cache included."""
        added = cost(p)
        g = group(p)
        alone[g] = [q for q in alone.get(g, []) if q.partner != p.selector]
        if p.partner is not None and p.partner not in taken.get(g, set()):
            alone.setdefault(g, []).append(p)
        calls.add(g)
        caches.add((p.benchmark.split(".", 1)[0], g))
        if _cache_gpu(plan, p):
            caches.add((p.benchmark.split(".", 1)[0], g, "cuda"))
        if p.unit is not None:
            units.add((p.unit, g))
            units.add((p.unit, p.values, g))
        if p.built is not None:
            units.add((p.built, g))
        if p.check is not None:
            checked.add(p.check)
        if p.swept:
            started[0] = True
        taken.setdefault(g, set()).add(p.selector)
        p.state, p.reason = "run", ""
        return added

    siblings: dict[tuple[str, ...], list[Point]] = {}  # a workload -> its figures (a twin keeps its own turn)
    for p in candidates:
        if p.built is not None and not p.twin:
            siblings.setdefault(p.built, []).append(p)

    def finish(p: Point) -> float:
        """The other figures of ``p``'s workload, kept now where they fit: built in ``p``'s stage, each costs its
        sampling alone there, and one left for a later stage would build the workload again."""
        added = 0.0
        for q in siblings.get(p.built, ()) if p.built is not None else ():
            if q.state != "run" and group(q) == group(p) and total + added + (more := cost(q)) <= seconds + 1e-9:
                added += more
                take(q)
        return added

    firsts: dict[str, Point] = {}
    for p in candidates:
        if p.benchmark not in elsewhere:
            firsts.setdefault(p.benchmark, p)
    forced = [p for p in candidates if p.keep or firsts.get(p.benchmark) is p]
    for p in forced:
        total += take(p)
    for p in forced:
        total += finish(p)
    for p in candidates:
        if p.state == "run":
            continue
        added = cost(p)
        if total + added <= seconds + 1e-9:  # sums in another order round apart
            total += take(p)
            total += finish(p)


