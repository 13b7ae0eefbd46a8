"""What a recorded gpu-run took, to price a plan with: the runs that price it (``prices_sources``: a committed run of
the same GPU model, this machine's own journal, or ``--costs-from``), each figure's sampling and each workload's
build as the measuring process journaled them (``recorded_from``, ``recorded``), the plan's points priced so
(``seed``), and the figures a machine's results hold wider than 0.5% (``imprecise_from``). No torch, no asv at
import."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from devbench.gpu import plan as P
from devbench.gpu.costs import SCALE_RANGE, _family
from devbench.gpu.priced import nearest_build


def prices_sources(repo: Path, model: str, costs_from: str | None) -> list[tuple[Path, bool]]:
    """What prices a plan's figures and builds at what a run took (``recorded_from``), each with whether it is another
    host's (whose CPU says nothing of this one: its GPU points alone are priced from it). ``--costs-from``'s
    plan.json alone where given (the machine it describes is the one planned); else a committed run of the same GPU
    model (the newest ``reports/gpu/*/plan.json`` whose costs name it, its journal beside it), then this machine's
    own journal of earlier gpu-runs, which overrides it. Empty: the declared prices."""
    if costs_from:
        return [(Path(costs_from), False)]
    out: list[tuple[Path, bool]] = []
    committed = []
    for plan_json in sorted((repo / "reports" / "gpu").glob("*/plan.json")) if model else ():
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(plan_json.read_text())
            costs = record.get("costs") if isinstance(record, dict) else None
            journal = plan_json.with_name("journal.jsonl")
            if isinstance(costs, dict) and costs.get("gpu_model") == model and journal.is_file():
                committed.append((_newest(journal), plan_json))
    if committed:
        out.append((max(committed)[1], True))
    own = repo / ".asv" / "sweep" / "journal.jsonl"
    if own.is_file():
        out.append((own, False))
    return out


def _newest(journal: Path) -> float:
    """When the newest of a journal's last lines was written (its ``t``), 0 where none says."""
    import math

    with open(journal, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
        tail = f.read().decode(errors="replace").splitlines()
    for line in reversed(tail):
        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError, OverflowError):
            t = float(json.loads(line)["t"])
            if math.isfinite(t):
                return t
    return 0.0


def recorded_from(plan_json: Path) -> tuple[dict[str, float], dict[tuple[str, ...], float]]:
    """What a measuring process journaled: a ``journal.jsonl`` itself, or the one beside a gpu-run's plan.json, else
    in the results.tgz beside it: the seconds each figure's sampling took, by selector (the newest), and each
    workload's build, by ``Point.built``, in the newest process that built it (its slowest there: a first build
    checks the workload, a later one does not; an older run's, of older code or a busier day, is not kept; one turned
    for another point, ``built_by``, what turning it took). Nothing where none holds a
    journal."""
    import math

    lines = _journal_lines(plan_json)
    figures: dict[str, float] = {}
    builds: dict[tuple[str, ...], float] = {}
    by: dict[tuple[str, ...], object] = {}  # a build -> the process whose builds of it count: the newest's
    starts: dict[object, int] = {}  # pid -> the processes of that pid started so far (a pid comes back in another run)
    for line in lines:
        try:
            rec = json.loads(line)
            if rec.get("started"):
                starts[rec.get("pid")] = starts.get(rec.get("pid"), 0) + 1
            values = tuple(repr(v) for v in rec.get("params", ()))
            seconds = float(rec["seconds"])
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            continue
        if not math.isfinite(seconds) or seconds < 0:
            continue
        if isinstance(rec.get("figure"), str) and "error" not in rec:
            figures[f"{rec['figure']}({', '.join(values)})" if values else rec["figure"]] = seconds * _kept(rec)
        elif isinstance(rec.get("built") or rec.get("beside"), str):  # a build, or one turned for another point
            key = ("built", rec.get("built") or rec["beside"], *values)
            proc = (rec.get("pid"), starts.get(rec.get("pid"), 0))
            builds[key] = max(seconds, builds.get(key, 0.0)) if by.get(key, proc) == proc else seconds
            by[key] = proc
    return figures, builds


def _kept(rec: dict) -> float:
    """The share of a journaled figure's sampling that the stop rule now takes: all of it, but for a figure held
    wider than 0.5% at its cap's end before ``precision.TRIMMED_SAMPLES`` samples, which now stops at
    ``precision.MIN_SAMPLES`` of them (its first ones: it was not within 0.5% there either, or it had stopped)."""
    from devbench.engine.precision import MIN_SAMPLES, TRIMMED_SAMPLES

    samples = rec.get("samples")
    if rec.get("precise") is False and isinstance(samples, int) and MIN_SAMPLES < samples < TRIMMED_SAMPLES:
        return MIN_SAMPLES / samples
    return 1.0


def _journal_lines(plan_json: Path) -> list[str]:
    """The lines of the measuring process's journal of a recorded run (``recorded_from``'s sources); none where
    there is none."""
    import tarfile

    beside = plan_json if plan_json.suffix == ".jsonl" else plan_json.with_name("journal.jsonl")
    packed = plan_json.with_name("results.tgz")
    with contextlib.suppress(OSError, tarfile.TarError, KeyError, UnicodeDecodeError):
        if beside.is_file():
            return beside.read_text().splitlines()
        if packed.is_file():
            with tarfile.open(packed) as tar:
                member = next((m for m in tar.getmembers() if m.name.endswith("sweep/journal.jsonl")), None)
                got = tar.extractfile(member) if member is not None else None
                return got.read().decode().splitlines() if got is not None else []
    return []


def build_gap(sources: list[tuple[Path, bool]]) -> float:
    """The median seconds a recorded measuring process spent between one record and the next build's start (the
    next point's request, the last workload's tear-down and release, the class made): what each build, not a
    turn of one (``built_by``), costs beyond its own seconds. 0 where no source records a build after another."""
    from devbench.gpu.gpupack import journal_builds, median_gap

    return median_gap([row for path, _ in sources for row in journal_builds(_journal_lines(path))])


def _partners(same_blocks: dict[str, Any] | None) -> dict[str, list[tuple[str, dict]]]:
    """A figure -> the figures that count its blocks another way, each with where (``{param: [values]}``; empty:
    at every point): ``spec.SAME_BLOCKS`` read the other way."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for figure, partner in (same_blocks or {}).items():
        named, where = partner if isinstance(partner, tuple) else (partner, {})
        out.setdefault(named, []).append((figure, where))
    return out


def _sharing(p: P.Point, partners: dict[str, list[tuple[str, dict]]]) -> list[str]:
    """The selectors of the figures that count ``p``'s blocks at its params (``_partners``; where, as the plan reads
    it: ``declared._matches``)."""
    bench = {"name": p.benchmark, "param_names": list(p.names)}
    return [f"{f}({', '.join(p.values)})" if p.values else f for f, where in partners.get(p.benchmark, ())
            if P._matches(bench, p.values, where, "SAME_BLOCKS")]  # fmt: skip


def recorded(plan: P.Plan, sources: list[tuple[Path, bool]], same_blocks: dict[str, Any] | None = None,
             ) -> tuple[dict[str, float], dict[tuple[str, ...], float]]:  # fmt: skip
    """``recorded_from`` of each of ``sources`` (``prices_sources``), later ones overriding earlier ones; another
    host's record prices the points that need a GPU alone, with the figures that count their blocks
    (``same_blocks``) whether the plan holds them or not."""
    partners = _partners(same_blocks)
    gpu = {p.selector for p in plan.points if p.gpus} | {p.built for p in plan.points if p.gpus and p.built}
    gpu |= {s for p in plan.points if p.gpus for s in _sharing(p, partners)}
    figures: dict[str, float] = {}
    builds: dict[tuple[str, ...], float] = {}
    for path, foreign in sources:
        got_figures, got_builds = recorded_from(path)
        figures.update({k: v for k, v in got_figures.items() if not foreign or k in gpu})
        builds.update({k: v for k, v in got_builds.items() if not foreign or k in gpu})
    return figures, builds


def seed(plan: P.Plan, figures: dict[str, float], builds: dict[tuple[str, ...], float],
         same_blocks: dict[str, Any] | None = None, gap_s: float = 0.0) -> tuple[int, int]:  # fmt: skip
    """Price ``plan``'s swept points with what a recorded run of the same suite took (``recorded``): a figure it
    measured, its sampling; the other points of its class on the same kind of device, their estimate times what
    the recorded ones took over theirs (within ``SCALE_RANGE``); a workload it built, its build, whose check it then
    pays no more. Figures that count one set of blocks (``same_blocks``: ``spec.SAME_BLOCKS``) were sampled for
    whichever was asked first: the one that samples them here is priced what the slowest of its group took,
    whether or not the plan holds the others. Each build of its own (not a turn, ``Point.turn``) adds ``gap_s``, what
    the process spends before one (``build_gap``). Returns the points and the workloads priced from the record; fit
    the plan again after."""
    partners = _partners(same_blocks)
    groups: dict[tuple[str, bool], list[tuple[P.Point, float]]] = {}
    for p in plan.points:
        if p.swept and p.state != "skip":
            groups.setdefault((_family(p), bool(p.gpus)), []).append((p, p.estimate_s))

    def took_s(p: P.Point) -> float | None:
        group = [p.selector, *_sharing(p, partners)]
        seen = [figures[s] for s in group if s in figures]
        return max(seen) if seen else None

    priced, built = 0, set()
    launch = plan.costs.launch_s * plan.rounds
    for points in groups.values():
        own = {id(p): took_s(p) for p, _ in points if p.partner is None}
        seen = [(p, est) for p, est in points if own.get(id(p)) is not None]
        planned = sum(max(0.0, est - launch) for _, est in seen)
        took = sum(own[id(p)] * plan.rounds for p, _ in seen)
        ratio = min(SCALE_RANGE[1], max(SCALE_RANGE[0], took / planned)) if planned > 0 and took > 0 else 1.0
        for p, est in points:
            recorded_s = own.get(id(p))
            if p.partner is None:
                p.estimate_s = launch + (recorded_s * plan.rounds if recorded_s is not None else (est - launch) * ratio)
            else:  # sampled by its partner where both run; alone, as its class's recorded points say
                p.alone_s *= ratio
            priced += recorded_s is not None
            nearest = nearest_build(p.built, builds) if p.built is not None else None  # its own build, where there
            if nearest is not None:  # the record's build checked the workload: no check of its own
                p.built_s, p.check, p.built_known = nearest, None, True
                p.built_own = builds.get(p.built) if p.built is not None else None
                built.add(p.built)
            if p.built is not None and not p.turn:  # what the process spends before a build of its own
                p.built_s += gap_s
    return priced, len(built)


def searches_from(sources: list[tuple[Path, bool]], model: str, machine: str | None = None,
                  threads: int | None = None) -> dict[tuple[str, str], float]:  # fmt: skip
    """``(device type, dtype)`` -> the seconds the newest search took, bound and finalists included, from the
    achievable searches recorded with each source (``_search_lines``): on a GPU of ``model`` (any host's), and on
    the CPU of this host (``machine`` or another of its names, ``this_hosts_machines``; its own records alone:
    another host's CPU says nothing of this one) with ``threads`` CPU threads. A search made, not a read of the cache
    (whose record repeats an older search's seconds), and not a quick one (``make test``'s, one thread beside other
    work). What a search is priced (``seed_searches``)."""
    from devbench.records.files import this_hosts_machines

    here = this_hosts_machines() | ({machine} if machine else set())
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for path, foreign in sources:
        for line in _search_lines(path):
            with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
                rec = json.loads(line)
                made, device = rec.get("made") or {}, str(rec["device"]).split(":")[0]
                if rec.get("cached") or made.get("quick"):
                    continue
                if device == "cuda" and made.get("device") != model:
                    continue
                if device == "cpu" and (foreign or made.get("machine", rec.get("machine")) not in here
                                        or threads is not None and made.get("threads") != threads):  # fmt: skip
                    continue
                key, when, seconds = (device, str(rec["dtype"])), str(made.get("when", "")), float(rec["seconds"])
                if device in ("cuda", "cpu") and seconds >= 0 and when >= out.get(key, ("", 0.0))[0]:
                    out[key] = (when, seconds)
    return {key: seconds for key, (_, seconds) in out.items()}


def _search_lines(source: Path) -> list[str]:
    """The achievable searches recorded with a run: beside its plan.json (``achievable.jsonl``), else packed in its
    results.tgz (``.asv/achievable/*.jsonl``, as gpu-run packs them); for this machine's own journal
    (``.asv/sweep/journal.jsonl``), the project's ``.asv/achievable/*.jsonl``. None where none holds any."""
    import tarfile

    beside = source.with_name("achievable.jsonl")
    packed = source.with_name("results.tgz")
    lines: list[str] = []
    with contextlib.suppress(OSError, tarfile.TarError, KeyError, UnicodeDecodeError):
        if beside.is_file():
            return beside.read_text().splitlines()
        if packed.is_file():
            with tarfile.open(packed) as tar:
                for member in tar.getmembers():
                    if "/achievable/" in f"/{member.name}" and member.name.endswith(".jsonl"):
                        got = tar.extractfile(member)
                        lines += got.read().decode().splitlines() if got is not None else []
            return lines
        if source.name == "journal.jsonl" and source.parent.name == "sweep":
            for path in sorted((source.parent.parent / "achievable").glob("*.jsonl")):
                lines += path.read_text().splitlines()
    return lines


def seed_searches(plan: P.Plan, listing: dict[str, dict[str, Any]], searches: dict[tuple[str, str], float]) -> int:
    """Price each search unit (a class whose ``plan_cache_s`` gives a known model's ``known_s``, per device and
    dtype) at what a recorded search of its device and dtype took (``searches_from``), within its bound: on the GPU
    where that is less than it is priced (a known model's short search), on the CPU in place of the probe's
    expectation (this host's own last search). A unit the user's cache holds stays a read. Returns the units
    priced so."""
    priced = set()
    for p in plan.points:
        declared = (listing.get(p.benchmark) or {}).get("plan_cache_s")
        if p.unit is None or not isinstance(declared, dict) or "known_s" not in declared:
            continue
        where = dict(zip(declared.get("per", []), p.unit[1:], strict=False))
        device, dtype = str(where.get("device", "")).strip("'"), str(where.get("dtype", "")).strip("'")
        recorded = searches.get((device, dtype))
        if recorded is None or f"{device}:{dtype}" in plan.costs.cached_searches:
            continue
        bound = declared.get("s", {}).get(device) if isinstance(declared.get("s"), dict) else declared.get("s")
        if device == "cuda" and recorded < p.unit_s or device == "cpu" and bound is not None:
            p.unit_s = recorded if device == "cuda" else min(float(bound), recorded)
            priced.add(p.unit)
    return len(priced)


def imprecise_from(results: Path, names: set[str]) -> tuple[str, ...]:
    """The figures a machine's asv results (``results``: one machine's folder; the files of its newest commit, every
    environment's) hold with asv's 99% interval of their median wider than ``precision.REL`` of it from at least
    ``MIN_SAMPLES`` samples, as selectors of the suite's ``names`` (a ``time_X`` figure that asv timed before the
    measuring process is ``track_X_time``, else ``track_time``, where the suite has it): the measuring process
    samples those to their class's cap, and gpu-run prices them so (``--precision-from``). The folder's name is
    the machine's (asv's layout); a figure the newest commit's run did not measure says nothing here."""
    from asv import util as asv_util

    from devbench.engine.precision import MIN_SAMPLES, REL
    from devbench.report.load import _read_result_file, _result_files, value_at

    files = []
    for path in _result_files(results):
        with contextlib.suppress(OSError, ValueError, asv_util.UserError):
            files.append(_read_result_file(path, results.name))
    if not files:
        raise ValueError(f"--precision-from {results}: no asv result file of machine {results.name!r} there")
    newest = max(f.date or 0 for f in files)  # the newest commit's, every environment of it
    out = set()
    for data in (f for f in files if (f.date or 0) == newest):
        out |= _imprecise_in(data, names, value_at, MIN_SAMPLES, REL)
    return tuple(sorted(out))


def _imprecise_in(data, names: set[str], value_at, min_samples: int, rel: float) -> set[str]:
    """``imprecise_from`` of one result file (the report's reader: ``report.load``)."""
    import itertools

    out = set()
    for name in data.results:
        module_cls, method = name.rsplit(".", 1)
        if method.startswith("time_"):
            renamed = [f"{module_cls}.track_{method[5:]}_time", f"{module_cls}.track_time"]
            name_now = next((n for n in renamed if n in names), name)
        else:
            name_now = name
        for combo in itertools.product(*data.frozen_params.get(name, ())):
            value = value_at(data, name, combo)
            lo, hi = value_at(data, name, combo, "stats_ci_99_a"), value_at(data, name, combo, "stats_ci_99_b")
            count = value_at(data, name, combo, "stats_repeat")
            if None in (value, lo, hi, count) or not value or count < min_samples:
                continue
            if (hi - lo) / 2 / abs(value) > rel:
                out.add(f"{name_now}({', '.join(combo)})" if combo else name_now)
    return out
