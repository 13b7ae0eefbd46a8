"""devbench gpu-run at the edges of its budget: a call too short to start, a stage cut before it reached a benchmark,
the warning of what will be cut, and what ends the run (the kills, the health lines) held within the budget."""

from __future__ import annotations

import argparse
import datetime
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from devbench.gpu import gpurun, sessions
from devbench.gpu import plan as P
from devbench.gpu.gpupack import Summary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gpurun import NO_GPU, ONE_GPU, _all, _bench, _listing  # noqa: E402

SHA = "a" * 40


def _run(tmp_path: Path, budget_s: float = 600.0, rounds: int = 1) -> gpurun.Run:
    args = argparse.Namespace(budget_s=budget_s, repo=str(tmp_path), out=str(tmp_path / "out"), rounds=rounds)
    return gpurun.Run(args)


def _quiet_summary():
    return types.SimpleNamespace(save=lambda: None, cut=lambda *a: [])


def test_a_call_too_short_to_start_leaves_its_points_for_later_not_cut(tmp_path, monkeypatch):
    """With ``--rounds`` 2 a stage's set-up-cache points go in a call of their own; one whose share of the stage is
    under ``MIN_STAGE_S`` is not started, and its points are dropped for a later stage, never counted as cut."""
    world = _bench("bench_c.Coll.track_busbw", [["'gloo'"], [2]], ["backend", "world"], plan_setup_s=0.0, plan_s=1.0,
                   figures_in_setup_cache=True)  # fmt: skip
    listing = {**_listing(), world["name"]: world}
    plan = P.make_plan(listing, _all, NO_GPU, 1000, 0, rounds=2)
    points = [p for p in plan.points if p.state == "run"]
    run = _run(tmp_path, rounds=2)
    started = []
    monkeypatch.setattr(sessions, "_group_run", lambda *a, **k: started.append(a) or (0, 1.0, []))
    code, _, _ = gpurun._asv_stage(run, plan, _quiet_summary(), "rest", points, sessions.MIN_STAGE_S / 2, 1.0,
                                   sys.executable, "m", SHA, [])  # fmt: skip
    assert code == 0 and started == []
    assert {(p.state, p.reason, p.done) for p in points} == {("dropped", gpurun.NO_TIME, False)}


def _results(tmp_path: Path, names: list[str]) -> tuple[dict, Path]:
    """asv's results of a stage stopped in ``names[1]`` (after one of its params) with ``names[2]`` never started."""
    from asv.results import Results
    from asv.runner import BenchmarkResult

    benches = {n: {"name": n, "type": "track", "unit": "x", "params": [["1", "2"]], "param_names": ["n"],
                   "version": "0" * 64, "timeout": 60.0, "code": ""} for n in names}  # fmt: skip
    repo = tmp_path / "repo"
    res = Results({"machine": "vm"}, {}, SHA, 0, "3.11", "existing-py", {})
    at = datetime.datetime.fromtimestamp(1_000_000, tz=datetime.timezone.utc)
    res.add_result(benches[names[0]], BenchmarkResult(result=[1.0, 2.0], samples=[[1.0], [2.0]], number=[1, 1],
                                                       errcode=0, stderr="", profile=None),
                   started_at=at, duration=2.0)  # fmt: skip
    res.add_result(benches[names[1]], BenchmarkResult(result=[1.0, float("nan")], samples=[[1.0], None],
                                                       number=[1, None], errcode=0, stderr="", profile=None),
                   selected_idx={0}, started_at=at + datetime.timedelta(seconds=5), duration=1.0)  # fmt: skip
    res.save(str(repo / ".asv" / "results"))
    return benches, repo


def test_a_benchmark_a_cut_stage_never_reached_is_offered_again_never_forced_and_else_ends_cut(tmp_path):
    """A stage at its time limit cuts the benchmark asv was in (its unsaved params stay cut: it may be what ran
    long) and every benchmark asv never reached; those are offered to the later stages like a dropped point, but
    never forced in as their family's first, and where no stage takes them back they end cut, with why."""
    names = ["bench_a.C.track_first", "bench_a.C.track_stopped", "bench_a.D.track_never"]
    benches, repo = _results(tmp_path, names)
    plan = P.make_plan(benches, _all, ONE_GPU, 1000, 0)
    run = types.SimpleNamespace(repo=repo, started_at=1_000_000 - 1)
    lost = Summary(run, plan, "vm", SHA).cut(plan.points, 1_000_000 - 1, "the stage reached its time limit")
    assert {(p.benchmark, p.values) for p in lost} == {(names[1], ("2",)), (names[2], ("1",)), (names[2], ("2",))}
    assert {p.benchmark for p in lost if p.offered} == {names[2]}
    for p in plan.points:  # what _asv_stage does after the stage: the never-reached points wait, not done
        p.done = True
        if p.state == "cut" and p.offered:
            p.state, p.reason, p.done = "dropped", P.NOT_REACHED, False
    never = [p for p in plan.points if p.benchmark == names[2]]
    P.fit(plan, 0.0)  # no time: nothing of it is forced in as its family's first
    assert {p.state for p in never} == {"dropped"} and plan.forced_s == 0.0
    P.fit(plan, 1000.0)  # time enough: taken back
    assert {p.state for p in never} == {"run"}
    P.fit(plan, 0.0)
    gpurun._end_cut(plan)  # the run's end: offered and taken back by none
    assert {(p.state, p.reason) for p in never} == {("cut", "the stage reached its time limit")}
    assert [p.state for p in plan.points if p.benchmark == names[1]] == ["run", "cut"]


def test_the_cut_warning_weighs_only_what_the_plan_cannot_drop():
    """``Plan.forced_s`` is what each family's first point and the kept points cost: a budget they fit in keeps
    them whatever else it drops, and only a budget they do not fit in is warned of."""
    listing = _listing()
    tight = P.make_plan(listing, _all, ONE_GPU, 30.0, 0)
    assert tight.dropped() and tight.forced_s <= 30.0
    families = {p.benchmark for p in tight.points if p.state != "skip"}
    kept = {p.benchmark for p in tight.points if p.state not in ("skip", "dropped")}
    assert kept == families  # every family keeps its first point: the forced part of the plan
    assert 0 < tight.forced_s <= tight.estimate_s()
    none = P.make_plan(listing, _all, ONE_GPU, 1.0, 0)
    assert none.forced_s > 1.0  # the families' firsts alone are over: the run warns that they will be cut


def test_a_stage_killed_at_its_limit_waits_for_its_processes_only_within_what_the_budget_leaves(tmp_path,
                                                                                                   monkeypatch):
    """A kill at a stage's limit waits for its processes (the driver frees their GPU memory) at most
    ``KILL_WAIT_S``, and no longer than the run's end leaves: a stage whose limit reaches the end shares
    ``KILL_HOLD_S`` between the kill and the reap."""
    run = _run(tmp_path, budget_s=200.0)
    run.end_s = gpurun.end_s(ONE_GPU)
    waits = []
    monkeypatch.setattr(sessions, "_group_run", lambda cmd, limit, log, wait, **k: waits.append(wait) or (0, 1, []))
    run.stage("early", ["true"], 50.0, 10.0)
    run.stage("last", ["true"], run.left() - run.end_s, 10.0)
    assert waits[0] == sessions.KILL_WAIT_S
    assert waits[1] == pytest.approx(sessions.KILL_HOLD_S / 2, abs=0.05)
    assert gpurun.end_s(ONE_GPU) == gpurun.PACK_S + sessions.KILL_HOLD_S + gpurun.HEALTH_S + gpurun.SMI_AFTER_S
    assert gpurun.end_s(NO_GPU) == gpurun.PACK_S + sessions.KILL_HOLD_S  # no health lines, no nvidia-smi


def test_health_lines_that_get_no_answer_in_what_is_left_are_a_note_not_the_runs_end(tmp_path, capsys):
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    from devbench.gpu import gpuhealth

    start = time.monotonic()
    gpuhealth.print_health(tmp_path, str(slow), "box", SHA, timeout_s=0.5)
    assert time.monotonic() - start < 10
    assert "gave no answer in the 0.5 s the budget left" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_repo_that_is_not_a_git_checkout_is_named_with_exit_2(tmp_path, capsys):
    from devbench.cli import main

    (tmp_path / "asv.conf.json").write_text("{}\n")
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True).returncode != 0
    code = main(["gpu-run", "--repo", str(tmp_path), "--plan-only", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "not a git checkout" in err and "Traceback" not in err
