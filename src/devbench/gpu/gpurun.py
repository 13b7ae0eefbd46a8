"""``devbench gpu-run``: the whole suite on one machine in one time-boxed call, packed into one folder.

Made for a GPU machine lent for minutes (one command of at most 10), and as useful on a rented box:

1. the plan (``devbench.gpu.plan``): the costs of a process, a CUDA context and an asv call measured here
   (by a probe process that also records the asv machine with its GPU fields, as ``devbench machine``
   does), every combination's estimate, what the budget drops, printed before anything runs
   (``--plan-only`` stops here, and records no machine);
2. ``nvidia-smi -q`` before;
3. ``asv run`` of the headline points (tier 0), then of the rest (tier 1) re-planned with what tier 0
   really cost; both into one asv result of this commit, with ``-a rounds=R`` (1 by default, where a
   full ``asv run`` takes 2 rounds of the ``time_`` benchmarks: each figure then comes from one process);
4. the tests that need CUDA (``pytest -m cuda``) and ``devbench validate``, each under what is left;
5. ``nvidia-smi -q`` after, and the packing: ``plan.json`` (estimate and actual of every stage),
   ``results.tgz`` (asv results, GPU state, run info, searches), the smi and test and validate texts.

Each stage runs in a process group of its own, stopped whole at its time limit or on Ctrl-C/SIGTERM,
and what the earlier stages made is packed whatever a later one does.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devbench.compare.session import CHECKED_ENV  # devbench.engine.prepare.CHECKED_ENV, torch-free
from devbench.compare.worker import ASV_DISCOVERY_ENV
from devbench.engine import sweep
from devbench.gpu import plan as P
from devbench.gpu.costs import (
    REFIT_MARGIN,
    VALIDATE_DRIFT,
    _learn,
    _scale,
    costs_from,
    held_s,
    probe_costs,
    refit_margin,
    stage_margin,
    sum_reserves,
    validates_nothing,
)
from devbench.gpu.gpuargs import SWEEP, check
from devbench.gpu.gpuhealth import print_health
from devbench.gpu.gpupack import (
    SMI_S,
    Summary,
    _smi,
    builds_by_key_since,
    builds_since,
    durations_since,
    gap_since,
    print_capped,
    starts_since,
    valued_since,
    write_plan,
)
from devbench.gpu.plantext import format_plan
from devbench.gpu.priced import selection_regex
from devbench.gpu.recorded import (
    build_gap,
    imprecise_from,
    prices_sources,
    recorded,
    searches_from,
    seed,
    seed_searches,
)
from devbench.gpu.sessions import (  # noqa: F401 - gpu-run's names for them too
    DISCOVERY_NAME,
    HEALTH_S,
    KILL_HOLD_S,
    MIN_STAGE_S,
    PACK_S,
    SMI_AFTER_S,
    STUCK_RC,
    Run,
    Stopped,
    end_s,
)
from devbench.records.files import STAGE_END_ENV

#: ``devbench.workloads.achievable.SEARCH_ENV`` (that module imports torch): "fresh" makes every search again
SEARCH_ENV = "DEVBENCH_SEARCH"
#: fill stages at most: each takes back what still fits in the time the one before left
FILLS = 3
#: why a planned point did not run where the budget ended first
NO_TIME = "no time left for it"



def list_benchmarks(repo: Path, python: str, log: Any, discovery: Path | None = None) -> dict[str, dict[str, Any]]:
    """The suite's benchmarks as asv_runner discovers them (``devbench.compare.worker``'s listing); with
    ``discovery``, asv's own discovery of them written there too, for the asv stages (``devbench.gpu.asvrun``)."""
    from devbench.compare.session import Worker

    env = {**os.environ, **({ASV_DISCOVERY_ENV: str(discovery)} if discovery else {})}
    worker = Worker("plan", python, repo, log, env, timeout_s=300.0)
    try:
        return worker.start().benchmarks
    finally:
        worker.stop()


def _sha(repo: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{repo} is not a git checkout (asv reads the commit and its date from git)")
    return out.stdout.strip()


def _asv_cmd(python: str, machine: str, sha: str, rounds: int, regex: str) -> list[str]:
    # devbench.gpu.asvrun is asv with each benchmark's results saved as it ends: a stage stopped at its limit keeps
    # every benchmark asv finished; the samples are kept for `asv compare`'s own statistics (docs/design.md)
    return [python, "-m", "devbench.gpu.asvrun", "run", "-E", f"existing:{python}", "--machine", machine,
            "--set-commit-hash", sha, "-a", f"rounds={rounds}", "--record-samples", "--show-stderr",
            "--bench", regex]  # fmt: skip


def _threads() -> int:
    """The CPU threads the suite's processes pin here (``measure.default_threads``, without importing torch)."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("DEVBENCH_THREADS", "")) > 0:
            return int(os.environ["DEVBENCH_THREADS"])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


#: what a run writes into its --out folder (removed there first: an earlier run's would read as this one's)
OUTPUTS = ("plan.json", "results.tgz", "smi-before.txt", "smi-after.txt", "tests.txt", "validate.txt")


def execute(args: argparse.Namespace, made: list[Path]) -> int:
    """The run (``run`` checks its options); ``made`` gets its scratch folders, which ``run`` removes at its end."""
    run = Run(args)
    if not args.plan_only:
        run.discovery = Path(tempfile.mkdtemp(prefix="devbench-discovery-")) / DISCOVERY_NAME
        made.append(run.discovery.parent)
    run.out.mkdir(parents=True, exist_ok=True)
    python = args.python
    sha = _sha(run.repo)
    machine = args.machine
    costs = None
    if args.costs_from:  # a file that cannot be read is named before the suite is listed
        costs = costs_from(Path(args.costs_from))
        print(f"costs from {args.costs_from} (another machine's recorded costs; nothing probed here)", flush=True)
        if args.gpus is not None or args.cores is not None:  # a described machine at that machine's costs
            gpus = costs.gpus if args.gpus is None else args.gpus
            costs = dataclasses.replace(costs, gpus=gpus, cores=args.cores or costs.cores)
            print(f"described machine: {gpus} GPU(s), {costs.cores} cores", flush=True)
    with open(run.out / "listing.log", "w") as log:
        listing = list_benchmarks(run.repo, python, log, run.discovery)
    (run.out / "listing.log").unlink()
    only = re.compile(args.bench) if args.bench else None
    from devbench.records import spec

    # --gpu-only: the points that need a GPU, and the records of the machine (the run record names what ran)
    gpu_points = P.gpu_points(listing) | spec.RECORDS if args.gpu_only else None

    def selected(s: str) -> bool:
        return (only is None or only.search(s) is not None) and (gpu_points is None or s in gpu_points)

    if not any(selected(s) for s in P.selectors(listing)):  # named before the probe's seconds are spent
        print(f"devbench gpu-run: --bench {args.bench!r} selects no benchmark of the suite"
              + (" that needs a GPU (--gpu-only)" if args.gpu_only else ""), file=sys.stderr)  # fmt: skip
        return 2
    if costs is None:
        costs = probe_costs(python, run.repo, None if args.plan_only else machine)
    from devbench.records import expected

    known = expected.model(costs.gpu_model)  # a model searched before: its short search is what the plan prices
    costs = dataclasses.replace(costs, model_searched=bool(known and known.best_shapes))
    if args.precision_from:  # the figures that machine's run could not bring within 0.5%: priced at their cap
        try:
            costs = dataclasses.replace(costs, imprecise=imprecise_from(Path(args.precision_from), set(listing)))
        except (OSError, ValueError) as exc:
            print(f"gpu-run: {exc}", file=sys.stderr)
            return 2
        print(f"precision from {args.precision_from}: {len(costs.imprecise)} figure(s) it holds wider than 0.5% "
              "are priced at their cap", flush=True)  # fmt: skip
    # the budget a plan starts from: for a machine described by its record, what its own probe and listing left
    left = run.left if costs.planned_after_s is None else (lambda: args.budget_s - costs.planned_after_s)
    if args.validate and (why := validates_nothing(args.gpu_only, costs.gpus, args.bench)):
        args.validate = False
        print(f"gpu-run: validate left out: {why}", flush=True)
    if args.tests and not costs.gpus:  # every one is marked cuda and would be skipped: no stage, nothing held for it
        args.tests = False
        print("gpu-run: the CUDA tests left out: no CUDA GPU here, each of them would be skipped", flush=True)
    # held back for the CUDA tests, validate and what ends the run; at most half of a short budget, so that the
    # benchmarks always get the other half (the tests and validate then run under what is left)
    run.end_s = end_s(costs)
    reserve = min(run.end_s + sum_reserves(args, costs), max(run.end_s, left() / 2))
    # what validate and the health lines read is never dropped; a twin (the same evidence in other units) goes first
    keep = frozenset(p.selector for p in spec.kept_points(args.validate, bool(costs.gpus), args.gpu_only))
    plan = P.make_plan(listing, selected, costs,
                       left(), reserve, rounds=args.rounds, keep=keep, twins=frozenset(spec.TWINS),
                       sweep_cpu=sweep.mode(SWEEP) == "all", same_blocks=spec.SAME_BLOCKS,
                       call_flop=spec.call_flop)  # fmt: skip
    sources = prices_sources(run.repo, costs.gpu_model, args.costs_from)
    if sources:  # what a measuring process took for each figure and build it made: priced so
        figures, builds = seed(plan, *recorded(plan, sources, spec.SAME_BLOCKS), spec.SAME_BLOCKS, build_gap(sources))
        threads = None if args.costs_from else _threads()  # a described machine's CPU: its records' own threads
        searches = seed_searches(plan, listing, searches_from(sources, costs.gpu_model, machine, threads))
        P.fit(plan, left() - reserve)
        if figures or builds:
            print(f"recorded by the measuring process of {' and '.join(str(p) for p, _ in sources)}: {figures} "
                  f"figure(s) priced at their own sampling, {builds} workload(s) at their own build and check; the "
                  "other points of their classes scaled alike", flush=True)  # fmt: skip
        if searches:
            print(f"{searches} search(es) priced at what a recorded search of its device and dtype took", flush=True)
    plan.first_estimate_s = plan.estimate_s()
    print(format_plan(plan), flush=True)
    if not args.plan_only:  # an earlier run's files in the folder would read as this run's
        for name in OUTPUTS:
            (run.out / name).unlink(missing_ok=True)
    write_plan(run, plan)
    if plan.forced_s > left() - reserve + 1e-6:  # what is never dropped does not fit: it will be cut
        print(f"devbench gpu-run: warning: the points never dropped (each family's first, and what validate and the "
              f"health lines read) are expected to take {plan.forced_s:.0f} s, more than the "
              f"{max(0.0, left() - reserve):.0f} s this budget leaves them: the last stages will be cut; "
              "raise --budget-s or narrow --bench", file=sys.stderr)  # fmt: skip
    if args.plan_only:
        print(f"plan written to {run.out / 'plan.json'}", flush=True)
        return 0
    summary = Summary(run, plan, machine, sha)
    running: list[P.Point] = []
    # every benchmark process of this run checks a workload only where no earlier one has (prepare.check_once): one
    # commit, one environment, so one check of each workload proves it for the run. Only the asv stages see the
    # folder: the CUDA tests and validate check what they build themselves.
    checked = tempfile.mkdtemp(prefix="devbench-checked-")
    run.checked = checked
    try:
        return _stages(run, plan, summary, reserve, python, machine, sha, running)
    except (KeyboardInterrupt, Stopped) as stop:
        why = "interrupted (Ctrl-C)" if isinstance(stop, KeyboardInterrupt) else stop.why
        summary.stopped = why
        if running:
            summary.cut(running, run.stage_started, f"{why} before asv finished it")
        raise
    finally:
        shutil.rmtree(checked, ignore_errors=True)
        _end_cut(plan)
        summary.save()
        print(summary.text(), flush=True)


def _end_cut(plan: P.Plan) -> None:
    """At the run's end, the points given to a stage that ended before reaching them, taken back by none: cut."""
    for p in plan.points:
        if p.state == "dropped" and p.offered:
            p.state, p.reason = "cut", p.offered


def _asv_stage(run: Run, plan: P.Plan, summary: Summary, name: str, points: list[P.Point], limit_s: float,
               scale: float, python: str, machine: str, sha: str, running: list[P.Point],
               rounds: int | None = None) -> tuple[int, float, float]:  # fmt: skip
    """One asv call over ``points``; returns its exit code, its estimate (times ``scale``) and the seconds it took.
    With ``--rounds`` above 1, the points that read their class's set-up cache (``Point.once``) go in a call of
    one round after the others' (asv's later rounds would read the same cache and store its samples again)."""
    rounds, once = run.args.rounds if rounds is None else rounds, [p for p in points if p.once]
    if rounds > 1 and once:
        rest, share = [p for p in points if not p.once], plan.estimate_s(points=once) / (
            plan.estimate_s(points=points) or 1.0)  # fmt: skip
        code, raw, took = _asv_stage(run, plan, summary, name, rest, limit_s * (1 - share), scale, python, machine,
                                     sha, running, rounds) if rest else (0, 0.0, 0.0)  # fmt: skip
        if code == 124:  # cut at its share: the cache's points wait for a fill stage, said so
            for p in once:
                p.state, p.reason = "dropped", P.WAITS_FOR_FILL
            return code, raw, took
        last = _asv_stage(run, plan, summary, f"{name}, one round", once, limit_s - took, scale, python, machine,
                          sha, running, 1)  # fmt: skip
        return code or last[0], raw + last[1], took + last[2]
    regex = selection_regex(points)
    # a setup_cache sweep, and the measuring process's twins, measure only what is read; the measuring processes
    # keep their journal and logs in the run's .asv, packed with the results (devbench.engine.sweep)
    env = {**os.environ, "DEVBENCH_BENCH": regex, sweep.DIR_ENV: str(run.repo / ".asv" / "sweep"),
           sweep.MODE_ENV: sweep.mode(SWEEP), STAGE_END_ENV: f"{time.time() + limit_s:.1f}"}  # fmt: skip
    if run.checked:
        env[CHECKED_ENV] = run.checked
    if run.discovery is not None and run.discovery.is_file():  # asv's discovery, made by the listing: not again
        env[ASV_DISCOVERY_ENV] = str(run.discovery)
    if run.holder is not None and P.uses_nccl(points):
        # NCCL's rank 0 would share cuda:0 with the measuring process the earlier stages held, its context and
        # cached memory (on a GPU in EXCLUSIVE_PROCESS mode the rank gets no context at all): it goes first
        run.release()
        plan.sweep_up = False
    elif run.holder is not None:
        env.update(run.holder.env())
    estimate = plan.estimate_s(points=points, group=lambda p: name, scale=scale)
    raw = plan.estimate_s(points=points, group=lambda p: name)
    running[:] = points
    code = run.stage(f"asv {name}", _asv_cmd(python, machine, sha, rounds, regex), limit_s, estimate,
                     env=env)  # fmt: skip
    running[:] = []
    took = run.stages[-1]["actual_s"]
    if run.stages[-1].get("note", "").startswith(("not started", "skipped")):  # stuck, or too short to start
        for p in points:
            p.state, p.reason = "dropped", f"not started: {run.stuck}" if run.stuck else NO_TIME
        return (code if run.stuck else 0), raw, took
    for p in points:
        p.done = True
    plan.sweep_up |= run.holder is not None and any(p.swept for p in points)  # held for the stages after it
    if code == 124 and run.holder is not None:  # a figure cut mid-way: its measuring process ends with it
        run.release()
        plan.sweep_up = False
    if code == 124:
        lost = summary.cut(points, run.stage_started, "the stage reached its time limit before asv finished it")
        print(f"== asv {name}: {len(points) - len(lost)} of {len(points)} points kept, {len(lost)} cut", flush=True)
    results = run.repo / ".asv" / "results" / machine
    if os.environ.get(SEARCH_ENV) != "fresh":  # a search whose figures came back is in the user's cache now
        valued = valued_since(results, sha, run.stage_started, points)
        P.made(plan, [p for p in points if p.selector in valued])
    journal = run.repo / ".asv" / "sweep" / "journal.jsonl"
    _learn(plan, points, durations_since(results, sha, run.stage_started),
           builds_since(journal, run.stage_started), starts_since(journal, run.stage_started))
    plan.built_now.update(builds_by_key_since(journal, run.stage_started))
    plan.gap_now = gap_since(journal, run.stage_started) or plan.gap_now
    for p in points:  # of a benchmark the stage never reached: a later stage may take it back (``Point.offered``)
        if p.state == "cut" and p.offered:
            p.state, p.reason, p.done = "dropped", P.NOT_REACHED, False
    summary.save()
    return code, raw, took


def _refit(run: Run, plan: P.Plan, room_s: float, scale: float, name: str, take,
           margin: float = REFIT_MARGIN) -> list[P.Point]:  # fmt: skip
    """Fit every point not yet run, of any tier, into ``room_s`` less ``margin`` of it (estimates times
    ``scale``); the points of this stage (``take``) that it keeps. The plan's other kept points stay kept for the
    stages after it."""
    before = {id(p) for p in plan.kept() if not p.done}
    later = lambda p: name if take(p) else "later"  # noqa: E731  (one more asv call for whatever runs after)
    short: list[P.Point] = []  # a set-up that would not start in this stage: fitted again without it
    for _ in range(3):
        P.fit(plan, room_s * (1.0 - margin), scale=scale, group=later, exclude=short)
        kept = [p for p in plan.kept() if not p.done and take(p)]
        fitted = P.room_to_start(plan, kept, name, room_s, scale)
        if len(fitted) == len(kept):
            break
        short += [p for p in kept if p not in fitted]
    kept = fitted
    now = {id(p) for p in plan.kept() if not p.done}
    back, gone = len(now - before), len(before - now)
    if back or gone:
        learned = sorted(plan.scales.values())
        told = (f"each family run so far at {learned[0]:.2f}-{learned[-1]:.2f}x its estimate (asv's durations), "
                if learned else "")
        print(f"== re-planned: {told}the rest at {scale:.2f}x; {back} point(s) taken back, {gone} dropped "
              f"(plan.json names them)", flush=True)  # fmt: skip
    return kept


def _stages(run: Run, plan: P.Plan, summary: Summary, reserve: float, python: str, machine: str, sha: str,
            running: list[P.Point]) -> int:  # fmt: skip
    """The stages after the plan; ``running`` holds the points of the asv stage under way (for a stop).

    asv stages: the headline points, the rest, the late ones (``plan_last``: the achievable search, NCCL
    worlds). Before each stage after the first, every point not yet run, of any tier, is fitted again into
    the time left with what the stages so far cost; after the tests and validate, a last ``fill`` stage
    takes whatever still fits in what they left."""
    args = run.args
    _smi(run.out / "smi-before.txt")  # the asv machine was recorded by the probe (probe_costs)
    if not plan.kept():
        print("gpu-run: no point to run here", flush=True)

    done: list[tuple[float, float]] = []  # (estimate, actual) of each asv stage
    takes = {
        "headline": lambda p: not p.late and p.tier == 0,
        "rest": lambda p: not p.late,
        "last": lambda p: True,
    }
    # one measuring process (its CUDA context, cuBLAS's start) serves the consecutive asv stages; it ends before a
    # stage that starts NCCL worlds (``_asv_stage``) and before the CUDA tests and validate, which then have the GPU
    # to themselves
    with sweep.held() as run.holder:
        failed = _asv_stages(run, plan, summary, reserve, python, machine, sha, running, takes, done)
        run.release()  # before the tests and validate, which then have the GPU to themselves
    run.holder, plan.sweep_up = None, False
    tests_s, validate_s = held_s(plan.costs, args.gpu_only, args.bench)
    if args.tests and (run.repo / "tests").is_dir():
        code = run.stage("cuda tests", [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "tests"],
                         run.left() - run.end_s - (validate_s if args.validate else 0), tests_s,
                         log_path=run.out / "tests.txt")  # fmt: skip
        failed |= code not in (0, 5)  # 5: no test selected (none needs CUDA in this tree)
        summary.save()
    if args.validate:
        # the figures of this run alone: the CPU's were not measured with --gpu-only, nor those --bench leaves out
        only = [*(["--gpu-only"] if args.gpu_only else []), *(["--bench", args.bench] if args.bench else [])]
        code = run.stage("validate", [python, "-m", "devbench.cli", "validate", "--machine", machine, *only],
                         run.left() - run.end_s, validate_s, log_path=run.out / "validate.txt")  # fmt: skip
        failed |= code not in (0, VALIDATE_DRIFT)  # DRIFT: the host's speed moved between asv and now: reported
    # what the tests and validate left: the points still dropped, fitted into it; again while a stage's time is
    # left and a dropped point fits in it (a search priced at its time bound often ends well before its estimate)
    for n in range(FILLS):
        room = run.left() - run.end_s
        if room < MIN_STAGE_S or run.stuck or not any(p.state == "dropped" for p in plan.points):
            break
        # a later fill holds what no stage priced from a run (families first met there): a quarter left free
        margin = stage_margin(plan, lambda p: True, refit_margin(done)) if n == 0 else REFIT_MARGIN
        kept = _refit(run, plan, room, _scale(done, plan), "fill", lambda p: True, margin)
        kept = P.apart_from_nccl(kept, last=False)
        kept = P.room_to_start(plan, kept, "fill", room, _scale(done, plan))
        if not kept:
            break
        code, _, _ = _asv_stage(run, plan, summary, "fill", kept, room, _scale(done, plan), python, machine, sha,
                                running)  # fmt: skip
        failed |= code != 0
        if code != 0:
            break
    for p in plan.points:
        if p.state == "dropped" and p.reason in ("over the time budget", P.WAITS_FOR_FILL, P.WAITS_WITHOUT_WORLDS,
                                                 P.WAITS_AFTER_SWEPT, P.SHORT_STAGE):  # fmt: skip
            p.reason = f"not started: {run.stuck}" if run.stuck else NO_TIME
    if run.stuck:  # nvidia-smi can hang on a GPU a stuck process holds, past any limit (its child cannot be killed)
        (run.out / "smi-after.txt").write_text(f"nvidia-smi not run: {run.stuck}\n")
    else:  # each within what the budget leaves before the packing: the run ends by its budget
        _smi(run.out / "smi-after.txt", max(1.0, min(SMI_S, run.left() - PACK_S - HEALTH_S)))
    failed |= bool(run.stuck)
    if plan.costs.gpus and not run.stuck:  # a GPU to judge, and no stuck process that its CUDA start could wait on
        print_health(run.repo, python, machine, sha, since=run.started_at, timeout_s=max(1.0, run.left() - PACK_S))
    print_capped(run.repo / ".asv" / "sweep" / "journal.jsonl", run.started_at)
    took = time.monotonic() - run.start
    print(f"gpu-run: {took:.0f} s of {args.budget_s:.0f} ({max(0.0, args.budget_s - took):.0f} s unused); "
          f"first plan expected {plan.first_estimate_s + plan.reserve_s:.0f} s; packed into {run.out}",
          flush=True)  # fmt: skip
    return 1 if failed else 0


def _asv_stages(run: Run, plan: P.Plan, summary: Summary, reserve: float, python: str, machine: str, sha: str,
                running: list[P.Point], takes: dict, done: list[tuple[float, float]]) -> bool:  # fmt: skip
    """The asv stages before the tests (``takes``: each stage's points); whether one failed."""
    failed = False
    for name, take in takes.items():
        room = run.left() - reserve
        if room < MIN_STAGE_S or run.stuck:  # no asv call starts: what is left of the plan stays dropped, and why
            for p in plan.points:
                if p.state == "run" and not p.done:
                    p.state, p.reason = "dropped", f"not started: {run.stuck}" if run.stuck else NO_TIME
            break
        if name == "headline":
            kept = [p for p in plan.kept() if not p.done and take(p)]
        else:
            kept = _refit(run, plan, room, _scale(done, plan), name, take, stage_margin(plan, take, refit_margin(done)))
            kept = P.apart_from_nccl(P.defer_late(plan, kept, name, room, _scale(done, plan)), last=name == "last")
            if not kept and any(p.reason == P.WAITS_FOR_FILL for p in plan.points):
                print(f"== asv {name}: left to the fill stage (too long for the {room:.0f} s before the tests)",
                      flush=True)  # fmt: skip
        kept = P.room_to_start(plan, kept, name, room, _scale(done, plan))  # a world's set-up refuses less
        if not kept:
            continue
        code, estimate, took = _asv_stage(run, plan, summary, name, kept, room, _scale(done, plan), python, machine,
                                          sha, running)  # fmt: skip
        done.append((estimate, took))
        failed |= code != 0
    return failed


def run(args: argparse.Namespace) -> int:
    problem = check(args)
    if problem:
        print(f"devbench gpu-run: {problem}", file=sys.stderr)
        return 2
    from devbench.records.files import MACHINE_ENV

    os.environ[MACHINE_ENV] = args.machine  # every stage's records name the asv machine, not the host

    # SIGHUP too (a lost terminal): a stage runs in a session of its own and would go on with no limit without it
    before = {sig: signal.signal(sig, Stopped.on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    listed: list[Path] = []
    try:
        return execute(args, listed)
    except KeyboardInterrupt:
        print("devbench gpu-run: interrupted; what finished is in the output folder", file=sys.stderr)
        return 130
    except Stopped as stop:
        print("devbench gpu-run: terminated; what finished is in the output folder", file=sys.stderr)
        return stop.code
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        print(f"devbench gpu-run: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for folder in listed:  # the discovery's folder, made by Run
            shutil.rmtree(folder, ignore_errors=True)
