"""A history's steps labelled machine or code by the run's own ceilings, and figures over their ceiling."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from devbench.report import ceilings as CE
from devbench.report import steps as ST

MiB = 2**20
COPY = ("bench_transfer.DeviceCopy.track_gbps_copied", "GB/s", {"device": "cpu", "nbytes": 64 * MiB})
BEST = ("bench_achievable.MatmulAchievable.track_tflops", "TFLOP/s",
        {"device": "cpu", "dtype": "float32", "run": "burst"})
LOOP = ("bench_logging.LogNorms.track_time", "seconds",
        {"device": "cpu", "strategy": "per_step", "steps": 100, "n": 100})
SQUARE = ("bench_matmul.MatmulSquare.track_tflops", "TFLOP/s", {"device": "cpu", "dtype": "float32", "n": 1024})


def _history(speed: list[float], loop_slow: list[float], machine: str = "vm") -> pd.DataFrame:
    """One run per commit: every figure scaled by the machine's ``speed`` at that commit, the loop's time also
    by ``loop_slow`` (a code change in its workload)."""
    rows = []
    for i, (s, slow) in enumerate(zip(speed, loop_slow, strict=True)):
        wobble = 1 + 0.004 * ((-1) ** i)
        for (bench, unit, params), base in ((COPY, 8.0), (BEST, 0.15), (LOOP, 0.02), (SQUARE, 0.12)):
            value = base * s * wobble if unit != "seconds" else base / s * slow * wobble
            label = ", ".join(f"{k}={v}" for k, v in params.items())
            rows.append({"machine": machine, "env": "e", "benchmark": bench, "params": label, "unit": unit,
                         "status": "ok", "value": value, "commit": f"c{i:02d}", "date": i, **params})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_step_the_ceilings_moved_with_is_the_machine_and_one_they_did_not_is_the_code():
    """From commit 4 on a core is held (everything 30% slower, the ceilings too); commit 10 slows the loop's
    own workload by a third. asv's step detection finds both; the ceilings tell them apart."""
    speed = [1.0] * 4 + [0.7] * 10
    slow = [1.0] * 10 + [4 / 3] * 4
    frame = _history(speed, slow)
    found = CE.attribute(ST.detect(frame), frame)
    loop = found[found["benchmark"] == LOOP[0]]
    by_commit = dict(zip(loop["commit_after"], loop["cause"], strict=True))
    assert by_commit == {"c04": CE.MACHINE, "c10": CE.CODE}
    code_row = loop[loop["commit_after"] == "c10"].iloc[0]
    assert "host copy 64 MiB +" in code_row["ceilings"] or "host copy 64 MiB -" in code_row["ceilings"]
    # the product's own steps are the machine's (the ceilings moved with them), and it has no step at c10
    square = found[found["benchmark"] == SQUARE[0]]
    assert set(square["cause"]) == {CE.MACHINE} and "c10" not in set(square["commit_after"])


def test_a_step_with_no_ceiling_at_both_commits_is_unknown_and_says_why():
    frame = _history([1.0] * 6 + [0.6] * 6, [1.0] * 12)
    no_ceiling = frame[~frame["benchmark"].isin([COPY[0], BEST[0]])]
    found = CE.attribute(ST.detect(no_ceiling), no_ceiling)
    assert len(found) and set(found["cause"]) == {CE.UNKNOWN}
    assert set(found["ceilings"]) == {"no ceiling measured on both levels"}
    empty = CE.attribute(ST.detect(no_ceiling.iloc[0:0]), no_ceiling)
    assert empty.empty and "cause" in empty


def test_every_ceiling_must_move_for_the_machine_and_none_for_the_code():
    """Both ceilings down by the step: machine. Only the copy (its own workload changed, or the memory alone
    taken): unknown, saying so. The copy the other way or by little, the product flat: code."""
    steps = pd.DataFrame([{"machine": "vm", "env": "e", "benchmark": LOOP[0],
                           "params": ", ".join(f"{k}={v}" for k, v in LOOP[2].items()), "unit": "seconds",
                           "ratio": 1.5, "commit_before": "c00", "commit_after": "c01"}])  # fmt: skip
    for copy_after, best_after, cause in ((8.0 / 1.5, 0.1, CE.MACHINE), (8.0 / 1.5, 0.15, CE.UNKNOWN),
                                          (8.0 * 1.3, 0.15, CE.CODE), (8.0 / 1.1, 0.15, CE.CODE)):  # fmt: skip
        frame = _history([1.0, 1.0], [1.0, 1.0])
        at = frame["commit"] == "c01"
        frame.loc[(frame["benchmark"] == COPY[0]) & at, "value"] = copy_after
        frame.loc[(frame["benchmark"] == BEST[0]) & at, "value"] = best_after
        frame.loc[(frame["benchmark"] == BEST[0]) & ~at, "value"] = 0.15
        frame.loc[(frame["benchmark"] == COPY[0]) & ~at, "value"] = 8.0
        got = CE.attribute(steps, frame).iloc[0]
        assert got["cause"] == cause, (copy_after, best_after, got["ceilings"])


def test_a_ceilings_odd_run_beside_the_step_does_not_decide_it():
    """The ceilings are read over each level's commits, not at the two commits beside the step: one high
    reading of the achievable product at the last commit before a code step does not make it the machine's."""
    frame = _history([1.0] * 14, [1.0] * 8 + [1.6] * 6)
    frame.loc[(frame["benchmark"] == BEST[0]) & (frame["commit"] == "c07"), "value"] = 0.15 * 1.6
    found = CE.attribute(ST.detect(frame), frame)
    loop = found[found["benchmark"] == LOOP[0]]
    assert list(loop["commit_after"]) == ["c08"] and list(loop["cause"]) == [CE.CODE]
    assert loop["level_before"].iloc[0].split() == [f"c{i:02d}" for i in range(8)]


def test_figures_over_their_ceiling_of_the_same_run():
    frame = _history([1.0, 0.5], [1.0, 1.0])
    out = CE.with_ceilings(frame)
    square = out[out["benchmark"] == SQUARE[0]]
    assert list(square["ceiling"]) == ["achievable float32"] * 2
    assert square["of_ceiling"].tolist() == pytest.approx([0.12 / 0.15] * 2)
    copy = out[out["benchmark"] == COPY[0]]
    assert copy["of_ceiling"].tolist() == pytest.approx([1.0, 1.0])
    loop = out[out["benchmark"] == LOOP[0]]
    assert set(loop["ceiling"]) == {""} and loop["of_ceiling"].isna().all()
    assert math.isnan(CE.with_ceilings(frame.drop(columns="device"))["of_ceiling"].iloc[0])


def test_a_stretch_of_runs_on_a_busy_host_is_found_and_is_the_machine():
    """A level that came and went (commits 4-7 on a busy host) passes the step screen and is the machine's."""
    frame = _history([1.0] * 4 + [0.7] * 4 + [1.0] * 6, [1.0] * 14)
    found = CE.attribute(ST.detect(frame), frame)
    square = found[found["benchmark"] == SQUARE[0]]
    assert set(square["commit_after"]) == {"c04", "c08"} and set(found["cause"]) == {CE.MACHINE}


def test_a_results_folder_without_benchmarks_json_still_gives_a_report(tmp_path):
    """asv's benchmarks.json names the params; results copied without it (no device, dtype or run columns)
    give a report, not a traceback."""
    import shutil
    from pathlib import Path

    from devbench.cli import main

    src = Path(__file__).resolve().parents[1] / "reports" / "history-attribution" / "vm"
    shutil.copytree(src, tmp_path / "results" / "vm")
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"),
                 "--format", "md"]) == 0  # fmt: skip
    assert (tmp_path / "out" / "report.md").is_file()
