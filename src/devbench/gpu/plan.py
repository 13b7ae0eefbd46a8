"""What a time-boxed run of the suite measures, what it expects that to cost, and what it leaves out.

``devbench gpu-run`` (``devbench.gpu.gpurun``) plans with this before it starts asv: every combination
of every selected benchmark becomes a ``Point`` with an estimate of its seconds (``devbench.gpu.priced``: the points
and what a set of them is expected to take), and ``fit`` keeps points in priority order until the budget is spent.
Nothing here imports torch or asv.

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
tier's kept points (a search per device and dtype, a world per backend and size), asv's process for it once per
call apart; a search in this user's cache (``Costs.cached_searches``) is priced as a read, a CPU search at what the
probe expects (``expected_searches``) or what this host's last one took, a GPU's at its model's recorded one
(``recorded.seed_searches``).
Each asv call adds ``Costs.stage_call_s``: asv's start and its forkserver's import of the suite (its discovery is
gpu-run's listing, ``devbench.gpu.asvrun``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from devbench.gpu.declared import (  # noqa: F401 - the plan's names for what a class declares
    GPU_VALUES,
    SETUP_S,
    SIZING_S,
    TRACK_GPU_S,
    TRACK_S,
    _matches,
    cache_units,
    call_s,
    declared_skip,
    gpus_needed,
    is_headline,
    is_late,
    needs,
    sample_s,
    swept_sample_s,
)
from devbench.gpu.priced import (  # noqa: F401 - the plan's names for its points
    PARTS,
    STAGES,
    Plan,
    Point,
    _cache_gpu,
    _stage_order,
    stage_of,
)
from devbench.gpu.pricing import ASV_START_S, Costs, searches_of  # noqa: F401 - the plan's names for its costs

#: why the late stage's points were left to the fill
WAITS_FOR_FILL = "left to the fill stage: the last stage would not end in the time before the tests"
#: why a point its stage never reached waits (that stage ended at its time limit first): a later stage may take it
NOT_REACHED = "its stage ended at its time limit before reaching it: a later stage may take it"


def defer_late(plan: Plan, kept: list[Point], name: str, room_s: float, scale: float = 1.0) -> list[Point]:
    """The points of stage ``name`` to run now: all of them, but for a last stage (a search, NCCL worlds) whose
    estimate exceeds ``room_s``: started, it would be cut at its limit with nothing kept, so its points wait for the
    fill stage, after the tests and validate (which leave what they do not use), marked dropped."""
    if name != "last" or not kept or plan.estimate_s(points=kept, group=lambda p: name, scale=scale) <= room_s:
        return kept
    for p in kept:
        p.state, p.reason = "dropped", WAITS_FOR_FILL
    return []


#: why a point waits: its stage leaves less than its class's set-up needs at its start (``Point.min_stage_s``)
SHORT_STAGE = "its stage is shorter than its class's set-up needs to start (plan_min_stage_s)"


def room_to_start(plan: Plan, kept: list[Point], name: str, room_s: float, scale: float = 1.0) -> list[Point]:
    """``kept`` less the points whose class's set-up would refuse to start in a stage of ``room_s``: the time left
    when that set-up reads it is below its ``min_stage_s``. Ahead of it are asv's start, one round of the groups
    asv runs before its own (``ahead_of``) and its own process's import of the suite. Those points are dropped
    with ``SHORT_STAGE``; a later, longer stage may take them."""
    short = []
    for p in kept:
        if not p.min_stage_s:
            continue
        before = ahead_of(kept, p)
        one_round = (plan.estimate_s(points=before, group=lambda q: name, scale=scale) - plan.costs.stage_call_s) \
            / max(1, plan.rounds) if before else 0.0  # fmt: skip
        if room_s - plan.costs.stage_call_s - one_round - plan.costs.import_s < p.min_stage_s:
            short.append(p)
    for p in short:
        p.state, p.reason = "dropped", SHORT_STAGE
    return [p for p in kept if p not in short]


def ahead_of(points: list[Point], point: Point) -> list[Point]:
    """The ``points`` asv runs before ``point``'s set-up cache in one round: asv groups a call's benchmarks by
    their ``setup_cache`` key (those without one form one group), each group where its first benchmark falls in
    name order (asv.runner.run_benchmarks' ``benchmark_order``)."""
    order: dict[str | None, int] = {}
    for q in sorted(points, key=lambda q: q.benchmark):
        order.setdefault(q.cache_key, len(order))
    mine = order.get(point.cache_key, len(order))
    return [q for q in points if order[q.cache_key] < mine]


def points(listing: dict[str, dict[str, Any]], pattern_ok, costs: Costs, rounds: int,
           keep: frozenset[str] = frozenset(), twins: frozenset[str] = frozenset(),
           sweep_cpu: bool = False, same_blocks: Mapping[str, Any] | None = None,
           call_flop: Callable[[str, dict[str, str]], float | None] | None = None) -> list[Point]:  # fmt: skip
    """Every combination of the listed benchmarks that ``pattern_ok(selector)`` accepts, with its estimate.
    ``keep``: the selectors never dropped (``Point.keep``); ``twins``: benchmarks that repeat another's
    evidence (``Point.twin``); ``sweep_cpu``: a swept class's CPU points ask the measuring process too
    (``DEVBENCH_SWEEP=all``); ``same_blocks``: swept figures counted from another figure's blocks, each with
    that figure, or with ``(figure, {param: [values]})`` where only those points are (``spec.SAME_BLOCKS``): they
    sample nothing of their own where it runs in their stage; ``call_flop``: a figure's FLOP a call, where a call is
    a product (``spec.call_flop``): a CPU block lasts at least one call at the probe's rate (``declared.call_s``)."""
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
            point.min_stage_s = float(bench.get("plan_min_stage_s") or 0.0)
            point.cache_key = bench.get("setup_cache")
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
                sampling = swept_sample_s(bench, gpu=bool(need), precise=not wide & imprecise, values=values,
                                          call=call_s(bench, values, dict(costs.cpu_flops), call_flop))  # fmt: skip
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
            reads = point.once = bool(bench.get("figures_in_setup_cache"))
            launch = costs.launch_s + (costs.cuda_context_s if need and not reads else 0.0)
            call = call_s(bench, values, dict(costs.cpu_flops), call_flop)
            sampling = (swept_sample_s(bench, gpu=bool(need), values=values, call=call) if bench.get("swept")
                        else sample_s(bench, gpu=bool(need), values=values))  # fmt: skip
            per_round = launch + setup + sampling
            point.estimate_s = (1 if reads else rounds) * per_round
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


def _combinations(listing: dict[str, dict[str, Any]]):
    """(benchmark, its listing, values) of every combination of every listed benchmark."""
    for name, bench in listing.items():
        for v in itertools.product(*bench["params"]) if bench["params"] else [()]:
            yield name, bench, tuple(v)


def selectors(listing: dict[str, dict[str, Any]]) -> list[str]:
    """The selector (``Point.selector``: asv's ``--bench`` name) of every combination of every listed benchmark."""
    return [Point(name, 0, v, (), 0, 0, 0.0).selector for name, _bench, v in _combinations(listing)]


def gpu_points(listing: dict[str, dict[str, Any]]) -> frozenset[str]:
    """The selectors of the points that need a GPU (``needs``): ``gpu-run --gpu-only``."""
    return frozenset(Point(name, 0, v, (), 0, 0, 0.0).selector for name, bench, v in _combinations(listing)
                     if needs(bench, v)[0] >= 1)  # fmt: skip


def make_plan(listing: dict[str, dict[str, Any]], pattern_ok, costs: Costs, budget_s: float, reserve_s: float,
              rounds: int = 1, keep: frozenset[str] = frozenset(),
              twins: frozenset[str] = frozenset(), sweep_cpu: bool = False,
              same_blocks: Mapping[str, Any] | None = None,
              call_flop: Callable[[str, dict[str, str]], float | None] | None = None) -> Plan:  # fmt: skip
    """The plan: every selected point, tier 0 first, dropped from the lowest priority until it fits (``keep``,
    ``twins``, ``sweep_cpu``, ``same_blocks`` and ``call_flop``: as ``points``)."""
    plan = Plan(points(listing, pattern_ok, costs, rounds, keep, twins, sweep_cpu, same_blocks, call_flop),
                budget_s, reserve_s, costs, rounds)  # fmt: skip
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


def fit(plan: Plan, seconds: float, tiers: tuple[int, ...] = (0, 1), scale: float = 1.0, group=None,
        exclude: Sequence[Point] = ()) -> None:  # fmt: skip
    """Keep the points of ``tiers`` not yet run, in priority order, while the estimate fits in ``seconds``; the
    others are dropped. Called for the first plan and again after every stage. A point costs its estimate
    times what its benchmark really cost so far (``Plan.scales``), else times ``scale``, as do the asv
    calls, set-up caches and checks.

    A benchmark's first point is kept whatever it costs, unless the benchmark has points kept or run
    elsewhere, or a stage ended at its limit before reaching it (``Point.offered``): a family is never dropped
    whole; so is every point validate and the health lines read (``Point.keep``), but for those in ``exclude`` (a
    stage too short for their set-up to start: they wait for a later one). ``group(point)``
    names the asv stage a kept point will run in (default ``stage_of``): each adds one asv call and its
    set-up caches; a workload already checked by a point that ran is not checked again. Once a point is kept,
    the other figures of its workload (not a twin) are kept next where they fit: in its stage they cost their
    sampling alone, and one left for a later stage would build the workload again.
    """
    group = group or stage_of
    candidates = _order([p for p in plan.points if p.tier in tiers and p.state in ("run", "dropped") and not p.done])
    elsewhere = {p.benchmark for p in plan.points if p.state == "run" and (p.done or p.tier not in tiers) or p.offered}
    for p in candidates:
        p.state, p.reason = "dropped", "over the time budget"
    # the points ``room_to_start`` found this stage too short for leave their room to others
    left_out = {id(p) for p in exclude}
    for p in candidates:
        if id(p) in left_out:
            p.reason = SHORT_STAGE
    candidates = [p for p in candidates if id(p) not in left_out]
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
    plan.forced_s = total
    for p in forced:
        total += finish(p)
    for p in candidates:
        if p.state == "run":
            continue
        added = cost(p)
        if total + added <= seconds + 1e-9:  # sums in another order round apart
            total += take(p)
            total += finish(p)


def uses_nccl(points: list[Point]) -> bool:
    """Whether any of ``points`` starts an NCCL world (a ``backend`` param of ``'nccl'``)."""
    return any(str(dict(zip(p.names, p.values, strict=False)).get("backend", "")).strip("'\"") == "nccl"
               for p in points)  # fmt: skip


#: why a point waits for a later stage of its own (``apart_from_nccl``)
WAITS_WITHOUT_WORLDS = "waits for a stage without NCCL worlds (a measuring process there holds cuda:0 beside rank 0)"
WAITS_AFTER_SWEPT = "waits for a fill after the swept GPU points (a world may hang: it goes last)"


def apart_from_nccl(points: list[Point], last: bool = True) -> list[Point]:
    """A stage's ``points`` without either its swept GPU points or its NCCL worlds where it holds both: a measuring
    process started there would hold cuda:0, its context and cached memory, beside rank 0 (none at all under
    EXCLUSIVE_PROCESS) for as long as it idles. The last stage (``last``), whose worlds are what it is for, leaves
    the swept points to a fill; a fill leaves the worlds to the next one (they are what may hang). The points left
    are dropped, with the reason."""
    swept = [p for p in points if p.swept and p.gpus]
    if not swept or not uses_nccl(points):
        return points
    later = swept if last else [p for p in points if uses_nccl([p])]
    for p in later:
        p.state, p.reason = "dropped", WAITS_WITHOUT_WORLDS if last else WAITS_AFTER_SWEPT
    return [p for p in points if p not in later]
