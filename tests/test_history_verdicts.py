"""A history whose newest commit doubles one function is reported as a change, between the last two commits
and in the history; an A/A history (the same code at every commit) is not. Synthetic asv results written
with asv's own Results API: 3 commits, 2 machines x 2 environments, 5 samples per figure, each run off by
a few percent as a host's runs are."""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path

import pandas as pd
import pytest
from asv.results import Results
from asv.runner import BenchmarkResult

from devbench.records import verdict as V
from devbench.report import changes as CH
from devbench.report import steps as ST
from devbench.report.asvrule import commit_pair
from devbench.report.load import load_results

BENCH = {
    "bench_x.time_doubled": "seconds",
    "bench_x.time_steady": "seconds",
    "bench_x.track_count": "unit",  # no better direction: a change is listed as "changed"
}


def _history(root: Path, newest: float, seed: int) -> Path:
    """Results of 3 commits; at the newest, time_doubled and track_count are ``newest`` times what they were."""
    rng = random.Random(seed)
    results = root / "results"
    meta = {name: {"name": name, "type": name.split(".")[1].split("_")[0], "unit": unit, "params": [],
                   "param_names": [], "version": "1" * 64, "timeout": 60.0, "code": ""}
            for name, unit in BENCH.items()}  # fmt: skip
    results.mkdir(parents=True)
    (results / "benchmarks.json").write_text(json.dumps({**meta, "version": 2}))
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    commits = [c * 40 for c in "abc"]
    for machine in ("m1", "m2"):
        (results / machine).mkdir()
        info = {"machine": machine, "arch": "x86_64", "cpu": "c", "num_cpu": "2", "os": "Linux", "ram": "1"}
        (results / machine / "machine.json").write_text(json.dumps({**info, "version": 1}))
        for env in ("py-a", "py-b"):
            for c, commit in enumerate(commits):
                when = start + datetime.timedelta(hours=c)
                res = Results({**info, "python": "3.11"}, {}, commit, int(when.timestamp() * 1000), "3.11", env, {})
                run = 1 + rng.gauss(0, 0.02)  # the host's speed for this run
                for name, b in meta.items():
                    level = 1e-3 * run * (newest if c == 2 and name != "bench_x.time_steady" else 1.0)
                    samples = [level * (1 + rng.gauss(0, 0.01)) for _ in range(5)]
                    r = BenchmarkResult(result=[sorted(samples)[2]], samples=[samples], number=[1], errcode=0,
                                        stderr="", profile=None)  # fmt: skip
                    res.add_result(b, r, started_at=when, duration=1.0)
                res.save(str(results))
    return results


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_doubling_at_the_newest_commit_is_a_change_in_both_sections(tmp_path, seed):
    frame = load_results(_history(tmp_path, 2.0, seed)).frame
    base, head = commit_pair(frame, None, None)
    cmp = CH.changes(frame, base, head)
    decided = cmp.table
    assert set(decided.loc[decided["benchmark"] == "bench_x.time_doubled", "verdict"]) == {V.SLOWER}
    assert len(decided[decided["benchmark"] == "bench_x.time_doubled"]) == 4  # every machine and environment
    assert set(decided.loc[decided["benchmark"] == "bench_x.track_count", "verdict"]) == {ST.CHANGED}
    assert "bench_x.time_steady" not in set(decided["benchmark"])
    found = ST.detect(frame)
    doubled = found[found["benchmark"] == "bench_x.time_doubled"]
    assert len(doubled) == 4 and set(doubled["verdict"]) == {V.SLOWER}
    assert set(doubled["commit_after"]) == {head} and doubled["ratio"].between(1.7, 2.3).all()
    assert set(found.loc[found["benchmark"] == "bench_x.track_count", "verdict"]) == {ST.CHANGED}
    assert "bench_x.time_steady" not in set(found["benchmark"])


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_an_a_a_history_shows_no_change(tmp_path, seed):
    frame = load_results(_history(tmp_path, 1.0, seed)).frame
    base, head = commit_pair(frame, None, None)
    section = CH.changes(frame, base, head)
    assert section.table is None or section.table.empty
    assert ST.detect(frame).empty


def test_one_series_alone_needs_enough_points_and_many_times_its_noise():
    """Without other runs to agree with, the newest step counts only against enough earlier points."""
    import pandas as pd

    def frame(values):
        n = len(values)
        return pd.DataFrame({"machine": "m", "env": "e", "benchmark": "b.time_x", "params": "", "unit": "seconds",
                             "date": range(n), "commit": [f"c{i}" for i in range(n)], "value": values,
                             "status": "ok"})  # fmt: skip

    assert ST.detect(frame([1.0, 1.01, 2.0])).empty  # two earlier points: no noise to measure against
    steady = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]
    found = ST.detect(frame([*steady, 2.0]))
    assert list(found["verdict"]) == [V.SLOWER] and found["commit_after"].iloc[0] == "c6"
    noisy = [1.0, 1.3, 0.8, 1.25, 0.85, 1.2]
    assert ST.detect(frame([*noisy, 1.4])).empty  # within four times its own noise


def test_two_commits_whose_figures_all_changed_version_say_so(tmp_path):
    """Results at both commits, each measured by another version of its code: nothing is compared (asv's rule), and
    the section says why rather than that nothing ran at both."""
    frame = load_results(_history(tmp_path, 1.0, 1)).frame
    base, head = commit_pair(frame, None, None)
    every = frame.assign(version=frame["version"].astype(str).where(frame["commit"] != head, "f" * 64))
    current = every[every["commit"] != head]  # every figure at head measured by another version than benchmarks.json's
    text = CH.changes(current, base, head, every).text
    assert "ran at both commits" in text and "different versions of their code" in text
    assert "nothing is compared" in text
    assert "no figure has a result at both commits" in CH.changes(current, base, head).text


def test_only_measured_figures_of_two_versions_count_as_changed_between_commits(tmp_path):
    """A head whose figures failed, under the same version, is not a version change."""
    frame = load_results(_history(tmp_path, 1.0, 1)).frame
    base, head = commit_pair(frame, None, None)
    assert CH._changed_between(frame, base, head) == 0  # same code at both
    failed = frame.assign(status=frame["status"].where(frame["commit"] != head, "failed"))
    assert CH._changed_between(failed, base, head) == 0
    versions = frame["version"].astype(str).where(frame["commit"] != head, "f" * 64)
    assert CH._changed_between(frame.assign(version=versions), base, head) == len(frame[frame["commit"] == head])


def test_series_fitted_in_two_processes_give_the_steps_one_process_finds(tmp_path, monkeypatch):
    """A history of many series is fitted in halves (``steps.PARALLEL_MIN_SERIES``). The newest commit's rule
    reads every series of a figure: the doubling's four runs, two in each half, still agree, and the steps
    come back exactly as one process finds them."""
    frame = load_results(_history(tmp_path, 2.0, 1)).frame
    monkeypatch.setattr(ST, "PARALLEL_MIN_SERIES", 10**9)
    one = ST.detect(frame)
    monkeypatch.setattr(ST, "PARALLEL_MIN_SERIES", 1)
    halves = []
    real = ST.in_halves

    def counted(work, n, min_items):
        parts = real(work, n, min_items)
        halves.append(len(parts))
        return parts

    monkeypatch.setattr(ST, "in_halves", counted)
    two = ST.detect(frame)
    assert halves == [2] or not _can_fork()
    pd.testing.assert_frame_equal(one, two)
    assert len(two[two["benchmark"] == "bench_x.time_doubled"]) == 4


def _can_fork() -> bool:
    from devbench.report.parallel import can_fork

    return can_fork()
