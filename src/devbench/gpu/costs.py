"""What a gpu-run's stages cost on this machine: a probe process's import, fork, CUDA context and set-up, or
another machine's recorded plan.json; the seconds held back for the CUDA tests and validate; and what the stages
so far say each family costs (``_learn``, ``_scale``), for re-planning what is left."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

from devbench.gpu import plan as P

#: seconds held back after the benchmarks for the CUDA tests where no recorded run says (the CUDA tests took 24 s on
#: an H200: reports/gpu/h200). Each stage then runs under whatever is left, so a reserve only decides how much of
#: the budget the benchmarks may plan for.
TESTS_S = 30.0
#: seconds held back for each figure validate measures where no recorded run says: a CPU figure as the 2-vCPU VM took
#: them (10-16 s each, 66 s for its five: reports/gpu/device-rehearsal, run 13), a GPU figure as the H200 took its
#: 13 (89 s, validate's start and its five CPU figures among them: reports/gpu/h200)
VALIDATE_CPU_EACH_S = 14.0
VALIDATE_GPU_EACH_S = 7.0

#: ``devbench validate``'s exit when the method agrees with the reference but the recorded figure drifted
VALIDATE_DRIFT = 3

_PROBE = """
import json, os, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
t2 = time.perf_counter()
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
model = torch.cuda.get_device_name(0) if gpus else ""
if gpus:
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
t3 = time.perf_counter()
setup = check = 0.0
if gpus:  # what a GPU point's set-up costs: cuBLAS's start-up and a warm product at a large size; then its check
    from devbench.workloads.matmul import Matmul, checked, warmed
    mm = Matmul(4096, "float32", torch.device("cuda", 0))
    warmed(mm)
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    setup = t4 - t3
    checked(mm)
    torch.cuda.synchronize()
    check = time.perf_counter() - t4
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
if len(sys.argv) > 1:  # record the asv machine here too: `devbench machine` would import torch once more
    import argparse
    from devbench.cli import cmd_machine
    if cmd_machine(argparse.Namespace(machine=sys.argv[1], config=None)):
        sys.exit(3)
    os.environ["DEVBENCH_MACHINE"] = sys.argv[1]  # the searches' cache is keyed by the machine the stages record
try:  # a pricing refinement: an unreadable cache or an error here must not stop the run
    from devbench.workloads.achievable import cached_searches
    cached = cached_searches(gpus)
except Exception as exc:
    print(f"gpu-run: could not tell which achievable searches are cached ({exc}): each priced whole", file=sys.stderr)
    cached = []
rates = {}
try:  # what this host's CPU searches are expected to take, and its products' rates; priced at their bound without
    from devbench.workloads.achievable import cpu_rates, expected_cpu_searches_s
    rates = cpu_rates()
    expected = {k: v for k, v in expected_cpu_searches_s(rates).items() if k not in cached}
except Exception as exc:
    print(f"gpu-run: could not price the CPU's achievable searches ({exc}): each priced at its bound", file=sys.stderr)
    expected = {}
print(json.dumps({"import_s": t1 - t0, "fork_s": t2 - t1, "context_s": t3 - t2 if gpus else 0.0, "gpus": gpus,
                  "setup_s": setup, "check_s": check, "cores": cores, "model": model,
                  "cached_searches": cached, "expected_searches": expected, "cpu_flops": rates}))
"""


def probe_costs(python: str, repo: Path, machine: str | None = None) -> P.Costs:
    """The import of torch, a fork of a process that holds it and a CUDA context, timed in a fresh process;
    with ``machine``, the same process records the asv machine (``devbench machine``) and its lines are printed."""
    cmd = [python, "-c", _PROBE, *([machine] if machine else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=repo)
    if out.returncode == 3:
        raise RuntimeError(f"could not record the asv machine {machine!r}: {out.stderr.strip()}")
    if out.returncode != 0:
        raise RuntimeError(f"the probe of {python} failed: {out.stderr.strip().splitlines()[-1:]}")
    lines = out.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"the probe of {python} printed nothing (its stderr: {out.stderr.strip()[-300:]!r})")
    *said, last = lines
    if said:
        print("\n".join(said), flush=True)
    got = json.loads(last)
    return P.Costs(launch_s=got["fork_s"], cuda_context_s=got["context_s"],
                   asv_call_s=P.ASV_START_S + 2 * got["import_s"], gpus=int(got["gpus"]),
                   gpu_setup_s=got["setup_s"], gpu_check_s=got.get("check_s", 0.0),
                   cores=int(got["cores"]), gpu_model=got.get("model", ""),
                   cached_searches=tuple(got.get("cached_searches", ())),
                   expected_searches=P.searches_of(got.get("expected_searches", {})),
                   cpu_flops=P.searches_of(got.get("cpu_flops", {})))  # fmt: skip


def costs_from(path: Path) -> P.Costs:
    """The costs another machine's gpu-run recorded (its plan.json), to price a plan for it here."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--costs-from {path}: cannot read it as JSON ({exc})") from None
    costs = record.get("costs") if isinstance(record, dict) else None
    if not isinstance(costs, dict):
        raise ValueError(f"--costs-from {path}: no 'costs' in it (a gpu-run plan.json has them)")
    # what its CUDA tests and validate took, where they ran to the end: held back for them instead of the defaults
    stages = record.get("stages") if isinstance(record.get("stages"), list) else []
    took = {s.get("stage"): s.get("actual_s") for s in stages if isinstance(s, dict)
            and s.get("rc") in (0, 5, VALIDATE_DRIFT) and isinstance(s.get("actual_s"), int | float)}  # fmt: skip
    validate_s = took.get("validate", 0.0)
    each = validate_each(path.parent / "validate.txt", validate_s) if validate_s else ()
    # its budget less what its plan had left: the seconds its probe and listing took there
    asked, left = (record.get("options") or {}).get("budget_s"), record.get("budget_s")
    before = asked - left if all(isinstance(v, int | float) for v in (asked, left)) and asked >= left >= 0 else None
    try:
        # another machine's search cache says nothing of this plan's machine: its searches are priced whole
        return P.Costs.from_record({**costs, "tests_s": took.get("cuda tests", 0.0), "validate_s": validate_s,
                                    "validate_each": each, "cached_searches": (),
                                    "planned_after_s": before})  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--costs-from {path}: {exc}") from None


#: validate's line for a figure it measured, with the seconds that took; a log from before it timed them has only
#: the progress line it prints first (where torch may append a warning)
_MEASURED = re.compile(r"^\s*measured (?P<label>.+) in (?P<s>\d+(?:\.\d+)?) s(?: \(\d+ of \d+ rounds\))?\s*$")
_MEASURING = re.compile(r"^\s*measuring (?P<label>.+?) \.\.\.")


def validate_each(log: Path, total_s: float) -> tuple[tuple[str, float], ...]:
    """``(label, seconds)`` of each figure a recorded validate measured (``log``: its output, ``total_s``: what its
    stage took): the seconds it gives each, else (an older log) an equal share of ``total_s`` each. Empty where
    there is no log."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ()
    timed = [m for m in map(_MEASURED.match, lines) if m]
    if timed:
        return tuple((m["label"].strip(), float(m["s"])) for m in timed)
    started = [m["label"].strip() for m in map(_MEASURING.match, lines) if m]
    return tuple((label, total_s / len(started)) for label in started)


def validate_labels(gpus: int, gpu_only: bool = False, bench: str | None = None) -> list[str]:
    """The figures a run's validate measures, by their labels: the CPU's (unless ``gpu_only``) and, on a GPU, the
    GPU's and the bf16 product again as a plain ``torch.mm``; those ``bench`` (the run's ``--bench``) selects."""
    from devbench.records import spec

    only = re.compile(bench) if bench else None
    points = [p for p in spec.validated(bool(gpus), gpu_only) if only is None or only.search(p.selector)]
    return [p.label for p in points] + ([spec.VALIDATED_PLAIN_MM] if spec.VALIDATED_PLAIN_OF in points else [])


def held_s(costs: P.Costs, gpu_only: bool = False, bench: str | None = None) -> tuple[float, float]:
    """Seconds held back for the CUDA tests and validate: what a recorded run took, else the defaults. Validate is
    priced by the figures it measures (``validate_labels``): each at what the recorded validate gave it (one it did
    not measure, at the mean of those it did), plus its start (the stage's seconds beyond its figures'); a record
    without its log, a share of its whole; no record, each figure at its kind's default."""
    from devbench.records import spec

    tests = costs.tests_s or TESTS_S
    labels = validate_labels(costs.gpus, gpu_only, bench)
    each = dict(costs.validate_each)
    if not each and costs.validate_s:  # a record without its log: a GPU machine's whole validate
        return tests, costs.validate_s * len(labels) / (len(spec.VALIDATED_CPU) + len(spec.VALIDATED_GPU) + 1)
    if not each:
        cpu = {p.label for p in spec.VALIDATED_CPU}
        return tests, sum(VALIDATE_CPU_EACH_S if label in cpu else VALIDATE_GPU_EACH_S for label in labels)
    start = max(0.0, costs.validate_s - sum(each.values()))
    mean = sum(each.values()) / len(each)
    return tests, start + sum(each.get(label, mean) for label in labels)


def validates_nothing(gpu_only: bool, gpus: int, bench: str | None) -> str | None:
    """Why a run's validate would check nothing the run measures, else None: ``validate --gpu-only`` on a machine
    without a GPU, or none of the figures it checks among those the run's ``bench`` selects (it would compare older
    runs' figures). gpu-run passes validate its ``--bench``, so a run that selects some checks those alone."""
    if gpu_only and not gpus:
        return "--gpu-only without a CUDA GPU: no figure of this run to check"
    if not validate_labels(gpus, gpu_only, bench):
        return "none of the figures it checks is in this run's selection"
    return None


def sum_reserves(args: argparse.Namespace, costs: P.Costs) -> float:
    tests, validate = held_s(costs, args.gpu_only, args.bench)
    return (tests if args.tests else 0.0) + (validate if args.validate else 0.0)


#: share of the time left that a re-plan leaves free before any re-planned stage has run: a family's cost learned
#: from a few points is off by 10-20% on the 2-vCPU VM, and a stage planned to its limit ends at it, its last
#: points cut
REFIT_MARGIN = 0.25
#: once re-planned stages have run, the margin is how far they ran over their estimate plus this, for the next
#: stage's own spread (re-planned stages on the VM: 0.90-1.04 of their estimate)
STAGE_SPREAD = 0.05


def refit_margin(done: list[tuple[float, float]]) -> float:
    """The share of the time left that a re-plan leaves free, from this run's own asv stages (``done``: their
    (estimate, actual), the first priced before anything was measured): ``REFIT_MARGIN`` until a re-planned
    stage has run, then the most a re-planned stage ran over its estimate plus ``STAGE_SPREAD``, at most
    ``REFIT_MARGIN``. A stage that ran under its estimate (a search priced at its bound) leaves time the next
    re-plan takes; only an overrun says how far a plan can be short."""
    replanned = [(estimate, took) for estimate, took in done[1:] if estimate > 0]
    if not replanned:
        return REFIT_MARGIN
    over = max(0.0, max(took / estimate for estimate, took in replanned) - 1.0)
    return min(REFIT_MARGIN, over + STAGE_SPREAD)

def _family(p: P.Point) -> str:
    """What a stage learns a cost for: a swept class whole (its first figure asked carries the build and its twins'
    sampling), else the benchmark."""
    return p.benchmark.rsplit(".", 1)[0] if p.swept else p.benchmark


def stage_margin(plan: P.Plan, take, learned_margin: float) -> float:
    """The share of a re-planned stage's time left free: ``learned_margin`` (``refit_margin``) for what earlier
    stages measured, plus ``REFIT_MARGIN`` in proportion to the part of the stage's candidates (``take``) whose
    family no stage has run yet, priced by declaration or the probe's expectation alone (the CPU's searches in the
    last stage); at most ``REFIT_MARGIN``."""
    todo = [p for p in plan.points if not p.done and p.state in ("run", "dropped") and take(p)]
    total = plan.estimate_s(points=todo, group=lambda p: "stage") if todo else 0.0
    fresh = [p for p in todo if _family(p) not in plan.learned]
    share = plan.estimate_s(points=fresh, group=lambda p: "stage") / total if fresh and total > 0 else 0.0
    return min(REFIT_MARGIN, learned_margin + REFIT_MARGIN * share)


#: the bounds of what a benchmark's points are taken to cost over their estimate, after a stage measured them
SCALE_RANGE = (0.25, 4.0)


def _scale(plan_estimates: list[tuple[float, float]], plan: P.Plan | None = None) -> float:
    """What the asv stages so far really cost over their estimate, for what no stage has measured yet (a family
    not run, an asv call, a set-up cache): never below 1, at most 4. A stage that ran faster than planned says
    little of a family it did not run (one gloo world costs more than its share of the stage). With ``plan``, at
    least what the families measured so far cost over their estimate together (``Plan.learned``): a stage priced
    at a search's bound that ran short must not hide the families that ran long."""
    est = sum(e for e, _ in plan_estimates)
    took = sum(a for _, a in plan_estimates)
    stages = took / est if est > 0 and took > 0 else 1.0
    learned = list(plan.learned.values()) if plan is not None else []
    planned, spent = sum(p for p, _ in learned), sum(t for _, t in learned)
    families = spent / planned if planned > 0 else 1.0
    return min(SCALE_RANGE[1], max(1.0, stages, families))


def _learn(plan: P.Plan, points: list[P.Point], durations: dict[str, float | None],
           builds: dict[str, list[float]] | None = None, starts: dict[str, float] | None = None) -> None:  # fmt: skip
    """Each benchmark of a stage: asv's duration of its points over their estimate, into ``plan.scales``. A swept
    class is learned whole: its first figure asked carries the builds and its twins' sampling in asv's duration,
    and the twins read what was measured for them (``devbench.engine.sweep``). ``builds``: class -> the seconds
    the measuring process's journal gave each of its builds in the stage, into ``plan.builds`` (what later builds
    are priced) and out of asv's duration (what the sampling is learned from); ``starts``: class -> what a measuring
    process took to start before its first build, which that class's first point waited for (``gpupack.starts_since``):
    out of its duration too (the start is priced apart, ``Costs.sweep_start_s``)."""
    builds, starts = builds or {}, starts or {}
    for name, seconds in builds.items():
        plan.builds.setdefault(name, []).extend(seconds)
    planned: dict[str, float] = {}
    took: dict[str, float | None] = {}
    members: dict[str, set[str]] = {}
    beside = {p.selector for p in points if p.state != "cut"}  # a shared-blocks figure alone pays its sampling
    for p in points:
        if p.state == "cut":
            continue
        key = _family(p)
        alone = p.alone_s if p.partner is not None and p.partner not in beside else 0.0
        planned[key] = planned.get(key, 0.0) + p.estimate_s + alone
        members.setdefault(key, set()).add(p.benchmark)
    # a family the stop cut into is not learned: what its saved points' durations hold and what its journaled builds
    # were for no longer match (a build for a point cut before its figure was saved, a twin timed for a point cut)
    stopped_in = {_family(p) for p in points if p.state == "cut"}
    for key, names in members.items():
        seen = [durations.get(n) for n in names]
        spent = sum(builds.get(key, ())) + starts.get(key, 0.0)
        took[key] = None if key in stopped_in or any(d is None for d in seen) else max(0.0, sum(seen) - spent)
    for key, estimate in planned.items():
        if took[key] is not None and estimate > 0:
            plan.learned[key] = (estimate, took[key])
            scale = min(SCALE_RANGE[1], max(SCALE_RANGE[0], took[key] / estimate))
            for name in members[key]:
                plan.scales[name] = scale
