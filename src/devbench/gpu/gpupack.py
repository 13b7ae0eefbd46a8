"""What ``devbench gpu-run`` keeps: the asv results and the run's side records packed into one tarball, the
``nvidia-smi -q`` texts, what asv measured in a stage (read back from the results it saved), and the figures
the measuring processes stopped at their cap; ``plan.json`` and the run's summary, saved after every stage."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from devbench.engine import precision
from devbench.gpu.plan import Plan, Point
from devbench.gpu.plantext import to_json

#: the folders of .asv that a run fills, packed with the results (``sweep``: the measuring processes' journal
#: and logs, ``devbench.engine.sweep``)
STATE_DIRS = ("gpustate", "runinfo", "achievable", "fleet", "sweep")


#: seconds ``nvidia-smi -q`` may take
SMI_S = 60.0


def _smi(path: Path, timeout_s: float | None = None) -> None:
    """``nvidia-smi -q`` into ``path``, stopped at ``timeout_s`` (``SMI_S`` where None)."""
    timeout_s = SMI_S if timeout_s is None else timeout_s
    if shutil.which("nvidia-smi") is None:
        path.write_text("nvidia-smi: not on this machine\n")
        return
    with open(path, "w") as f:
        # a session of its own, killed whole at 60 s: an nvidia-smi that hangs (a GPU stuck in the driver) is a note
        # in the packed run, not the end of it
        proc = subprocess.Popen(["nvidia-smi", "-q"], stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)  # one stuck in the driver (state D) is left: the run goes on without it
            f.write(f"\nnvidia-smi: no answer in {timeout_s:.3g} s; stopped\n")


def durations_since(results: Path, sha: str, since: float) -> dict[str, float | None]:
    """Each benchmark of commit ``sha`` in the asv results folder ``results`` (one machine's) that asv started at or
    after ``since`` (seconds since the epoch) -> the seconds asv spent on it (its ``duration``: every point of it
    in that call; None where asv kept none), read from the results asv saved."""
    from devbench.report.load import saved_results

    out: dict[str, float | None] = {}
    for data in saved_results(results, sha):
        at, took = data.column.get("started_at"), data.column.get("duration")
        if at is None:
            continue
        for name, row in data.results.items():
            started = row[at] if at < len(row) else None
            seconds = row[took] if took is not None and took < len(row) else None
            if started is not None and started / 1000.0 >= since - 1.0:  # asv keeps milliseconds
                out[name] = float(seconds) if isinstance(seconds, int | float) else None
    return out


def builds_since(journal: Path, since: float) -> dict[str, list[float]]:
    """Class ("module.Class") -> the seconds of each set-up the measuring processes journalled at or after ``since``
    (seconds since the epoch; a record is written when it ends): each build with the median of what the processes
    spent before a build in the stage (the next request, the last workload's release; a single gap can hold other
    benchmarks' processes too), and each point set up over another's build, so that their mean priced once per point
    adds up to what they took."""
    rows = _builds(journal, since)
    gap = gap_since(journal, since, rows)
    out: dict[str, list[float]] = {}
    for key, seconds, before in rows:
        out.setdefault(key[1], []).append(seconds + (gap if before is not None else 0.0))
    return out


def gap_since(journal: Path, since: float, rows: list | None = None) -> float:
    """The median seconds the measuring processes spent before a build at or after ``since`` (since their last record:
    the next request, the last workload's release); 0 where no build followed another record."""
    return median_gap(rows if rows is not None else _builds(journal, since))


def median_gap(rows: list[tuple[tuple[str, ...], float, float | None]]) -> float:
    """The median of the gaps before builds among ``rows`` (``journal_builds``'); 0 where there is none."""
    import statistics

    gaps = [gap for _, _, gap in rows if gap is not None]
    return statistics.median(gaps) if gaps else 0.0


def builds_by_key_since(journal: Path, since: float) -> dict[tuple[str, ...], float]:
    """The seconds of each set-up the measuring processes journalled at or after ``since`` by workload
    (``Point.built``: its class and params, as asv names them), its own alone (the slowest of each)."""
    out: dict[tuple[str, ...], float] = {}
    for key, seconds, _ in _builds(journal, since):
        out[key] = max(seconds, out.get(key, 0.0))
    return out


def _builds(journal: Path, since: float) -> list[tuple[tuple[str, ...], float, float | None]]:
    return journal_builds(journal.read_text().splitlines(), since) if journal.exists() else []


def journal_builds(lines: list[str], since: float = 0.0) -> list[tuple[tuple[str, ...], float, float | None]]:
    """Each set-up a measuring process's journal (``lines``) records at or after ``since``: its workload
    (``Point.built``), its seconds, and for a build (not a point set up over another's) the seconds its process spent
    since its last record (None for a process's first, for one more than a minute after, and for a set-up over
    another's build)."""
    out: list[tuple[tuple[str, ...], float, float | None]] = []
    last: dict[object, float] = {}  # pid -> when its last record of this stage ended
    for line in lines:
        try:
            row = json.loads(line)
            t, seconds = float(row.get("t", 0)), float(row["seconds"])
            values = tuple(repr(v) for v in row.get("params", ()))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # a line cut by a kill
        pid = row.get("pid")
        if row.get("started"):
            last.pop(pid, None)  # its first build waited for the start, which ``starts_since`` reads
            continue
        cls = row.get("built") or row.get("beside")  # a point set up over another's build (``built_by``) too
        if isinstance(cls, str) and t >= since:
            before = t - seconds - last[pid] if row.get("built") and pid in last else None
            out.append((("built", cls, *values), seconds, before if before is not None and 0.0 <= before < 60.0
                        else None))  # fmt: skip
        if t >= since:
            last[pid] = t
    return out


def starts_since(journal: Path, since: float) -> dict[str, float]:
    """Class ("module.Class") -> the seconds the measuring processes started at or after ``since`` took before their
    first build began (journaled by that build's class): its first point's asv duration holds them, which are not
    what its figures cost."""
    if not journal.exists():
        return {}
    out: dict[str, float] = {}
    for line in journal.read_text().splitlines():
        try:
            row = json.loads(line)
            if isinstance(row.get("started"), str) and float(row["t"]) >= since:
                out[row["started"]] = out.get(row["started"], 0.0) + float(row["seconds"])
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def valued_since(results: Path, sha: str, since: float, points: list[Point]) -> set[str]:
    """The selectors of ``points`` whose benchmark asv started at or after ``since`` and saved a figure for (not
    skipped, failed or cut): what a stage measured, read from the results asv saved."""
    from devbench.report.load import saved_results, value_at

    started = durations_since(results, sha, since)
    files = saved_results(results, sha)
    return {p.selector for p in points if p.benchmark in started
            and any(value_at(data, p.benchmark, p.values) is not None for data in files)}  # fmt: skip


def last_started_since(results: Path, sha: str, since: float) -> str | None:
    """The benchmark of commit ``sha`` asv started last at or after ``since``: the one a stopped stage was in."""
    from devbench.report.load import saved_results

    best: tuple[float, str] | None = None
    for data in saved_results(results, sha):
        at = data.column.get("started_at")
        for name, row in data.results.items() if at is not None else ():
            started = row[at] if at < len(row) else None
            recent = isinstance(started, int | float) and started / 1000.0 >= since - 1.0  # asv keeps milliseconds
            if recent and (best is None or started > best[0]):
                best = (float(started), name)
    return best[1] if best else None


def measured_since(results: Path, sha: str, since: float) -> set[str]:
    """Benchmarks of commit ``sha`` that asv started at or after ``since`` (``durations_since``'s)."""
    return set(durations_since(results, sha, since))


def pack(repo: Path, machine: str, dest: Path) -> list[str]:
    """The asv results of ``machine`` (with benchmarks.json) and the run's state folders, as one tarball.
    Written beside ``dest`` and renamed: a half-written tarball never takes its place."""
    asv = repo / ".asv"
    members = [asv / "results" / machine, asv / "results" / "benchmarks.json", *(asv / d for d in STATE_DIRS)]
    members = [m for m in members if m.exists()]
    fd, tmp = tempfile.mkstemp(prefix=".results-", suffix=".tgz", dir=dest.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for m in members:
                # asvrun's saves go through a temporary folder beside the results: never pack one
                tar.add(m, arcname=str(m.relative_to(repo)), filter=_packed)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return [str(m.relative_to(repo)) for m in members]


def _packed(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """asvrun's saves go through a temporary folder beside the results, and the measuring processes keep their
    lock files beside their journal: neither is packed."""
    if "/.saving-" in info.name or info.name.endswith(".lock") or not (info.isfile() or info.isdir()):
        return None
    return info


def print_capped(journal: Path, since: float) -> None:
    """The figures the measuring processes timed whose interval is wider than the stop rule's
    (``devbench.engine.precision``):
    stopped at their class's cap (at 8 samples where it ends before 12: ``precision.TRIMMED_SAMPLES``), or sampled a
    fixed number of times (a ratio's pairs), with asv's interval."""
    rows = [r for r in precision.imprecise(journal) if r.get("t", 0) >= since]
    if not rows:
        return
    print(f"figures whose 99% interval (asv's) is wider than {100 * precision.REL:.1f}% of their median, stopped at "
          f"their class's cap (at {precision.MIN_SAMPLES} where it ends before {precision.TRIMMED_SAMPLES}, when asv's "
          f"interval is their range) or at a fixed count of samples ({len(rows)}):", flush=True)  # fmt: skip
    for r in rows:
        width = f"+-{100 * r['half_width']:.1f}%" if r.get("half_width") is not None else "no interval yet"
        params = ", ".join(repr(v) for v in r.get("params", []))
        print(f"  {r['figure']}({params}): {r.get('samples')} samples, {width}", flush=True)


class Summary:
    """What the run has done so far: written to plan.json and packed after every stage, and printed at the end."""

    def __init__(self, run: Any, plan: Plan, machine: str, sha: str) -> None:
        self.run, self.plan, self.machine, self.sha = run, plan, machine, sha
        self.stopped = ""

    def save(self) -> None:
        write_plan(self.run, self.plan, self.stopped)
        try:
            pack(self.run.repo, self.machine, self.run.out / "results.tgz")
        except OSError as exc:
            print(f"gpu-run: could not pack the results: {exc}", file=sys.stderr, flush=True)

    def cut(self, points: list[Point], since: float, why: str) -> list[Point]:
        """Mark the ``points`` asv did not reach since ``since`` as cut, saying ``why``: those of a benchmark it did
        not start, and those of the benchmark it was in when stopped (the last it started, each param saved as it
        ends: ``asvrun``) that have no figure."""
        results = self.run.repo / ".asv" / "results" / self.machine
        done = measured_since(results, self.sha, since)
        last = last_started_since(results, self.sha, since)
        valued = valued_since(results, self.sha, since, [p for p in points if p.benchmark == last])
        lost = [p for p in points if p.benchmark not in done or (p.benchmark == last and p.selector not in valued)]
        for p in lost:
            p.state, p.reason = "cut", why
            if p.benchmark not in done and p.benchmark != last:  # asv never reached it: nothing of it ran
                p.offered = why
        return lost

    def text(self) -> str:
        counts = {s: sum(p.state == s for p in self.plan.points) for s in ("run", "cut", "dropped", "skip")}
        waiting = sum(p.state == "run" and not p.done for p in self.plan.points)  # planned, no stage reached them
        lines = [f"gpu-run: {counts['run'] - waiting} points measured or tried, {counts['cut']} cut by a stop, "
                 f"{counts['dropped']} dropped by the plan, {counts['skip']} not runnable here"
                 + (f", {waiting} planned but not started (the run ended before their stage)" if waiting else "")]
        by: dict[str, list[str]] = {}
        for p in self.plan.points:
            if p.state == "cut":
                by.setdefault(p.benchmark, []).append(p.label or "(no params)")
        for name, labels in by.items():
            lines.append(f"  cut: {name}: {len(labels)} point(s), e.g. {labels[0]}")
        lines += self._no_figure()
        if self.stopped:
            lines.append(f"  stopped: {self.stopped}")
        return "\n".join(lines)

    def _no_figure(self) -> list[str]:
        """The points an asv stage ran that saved no number: a skip in set-up (a world with no time left to start),
        a failure, or a figure that is NaN where nothing could be counted (``PeerCopy.track_nvlink_share`` without
        NVML's counters): asv keeps all three as NaN."""
        tried = [p for p in self.plan.points if p.state == "run" and p.done]
        if not tried:
            return []
        results = self.run.repo / ".asv" / "results" / self.machine
        valued = valued_since(results, self.sha, self.run.started_at, tried)
        empty = [p for p in tried if p.selector not in valued]
        if not empty:
            return []
        by: dict[str, list[str]] = {}
        for p in empty:
            by.setdefault(p.benchmark, []).append(p.label or "(no params)")
        out = [f"  of those, {len(empty)} gave no figure (skipped in their set-up, failed, or not a number where "
               "nothing could be counted: asv's log says which)"]
        return out + [f"  no figure: {name}: {len(labels)} point(s), e.g. {labels[0]}" for name, labels in by.items()]


def write_plan(run: Any, plan: Plan, stopped: str = "") -> None:
    """``plan.json`` in the run's folder: the plan, every stage so far, the options; replaced whole."""
    record = to_json(plan) | {"stages": run.stages, "elapsed_s": round(time.monotonic() - run.start, 1),
                                "stopped": stopped,
                                "options": {k: v for k, v in vars(run.args).items() if k != "func"}}  # fmt: skip
    tmp = run.out / ".plan.json.tmp"
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, run.out / "plan.json")
