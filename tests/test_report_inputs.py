"""devbench report on hostile asv histories: every bad input named, exit 2 or a warning, never a traceback.

The histories are written by asv itself (a tiny project run with ``asv run``), then
damaged the way real histories are: hand edits, truncation, an older asv's format.
Each test asserts the exit code, the message, and that the rest was still reported.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from devbench.report.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asv_fixture import MACHINE_FIELDS, _git, asv  # noqa: E402

pytestmark = pytest.mark.slow

HOSTILE = """
class Sized:
    params = [[100, 200]]
    param_names = ["size"]
    number = 1
    repeat = 3

    def time_sized(self, size):
        pass


class Labelled:
    params = [["100, 5", "cost $5 vs $", "$\\\\frac{$", "a|b", "<script>alert(1)</script>", "two\\nlines"]]
    param_names = ["size"]

    def track_labelled(self, size):
        return 2.0

    track_labelled.unit = "GB/s"


def track_other():
    return 3.0
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """An asv results folder with an int and a str param of one name, and $ | <script> newline in params."""
    tmp = tmp_path_factory.mktemp("hostile")
    project = tmp / "project"
    (project / "benchmarks").mkdir(parents=True)
    (project / "benchmarks" / "__init__.py").write_text("")
    (project / "benchmarks" / "bench_hostile.py").write_text(HOSTILE)
    conf = {"version": 1, "project": "hostile", "repo": ".", "branches": ["main"], "benchmark_dir": "benchmarks",
            "results_dir": "results", "environment_type": "existing"}  # fmt: skip
    (project / "asv.conf.json").write_text(json.dumps(conf))
    (project / ".gitignore").write_text("results/\n")
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "one")
    home = tmp / "home"
    home.mkdir()
    machine = {**MACHINE_FIELDS, "machine": "alpha", "gpu": "none", "gpu_count": "0"}
    (home / ".asv-machine.json").write_text(json.dumps({"alpha": machine, "version": 1}))
    out = asv(project, home, "run", "-E", f"existing:{sys.executable}", "--set-commit-hash",
              _git(project, "rev-parse", "HEAD"), "--machine", "alpha", "--launch-method", "spawn")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return project / "results"


@pytest.fixture
def results(hostile, tmp_path) -> Path:
    dst = tmp_path / "results"
    shutil.copytree(hostile, dst)
    return dst


def _result_file(results: Path) -> Path:
    return next(p for p in (results / "alpha").glob("*.json") if p.name != "machine.json")


def _edit(results: Path, change) -> None:
    path = _result_file(results)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _report(results: Path, out: Path, *extra: str) -> int:
    return main(["--results", str(results), "--out", str(out), "--format", "md,html,csv,parquet,png", *extra])


def test_int_and_str_params_of_one_name_and_markup_in_params(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert _report(results, out) == 0
    csv = pd.read_csv(out / "results.csv")
    assert {"100", "200", "100, 5"} <= set(csv["size"].dropna().astype(str))
    parquet = pd.read_parquet(out / "results.parquet")
    assert len(parquet) == len(csv) and parquet["size"].dropna().map(type).eq(str).all()
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "<script>" not in md and "<script>" not in html
    assert "&lt;script&gt;" in md and "a\\|b" in md
    assert "cost $5 vs $" in md  # text, never mathtext
    header = None
    for line in md.splitlines():  # a "|" in a param never adds a cell to its table
        if not line.startswith("|"):
            header = None
        elif header is None:
            header = line
        elif "a\\|b" in line:
            assert line.replace("\\|", "").count("|") == header.count("|")
    assert "Traceback" not in capsys.readouterr().err


def test_dollar_params_are_drawn_as_text():
    from devbench.report import plots

    frame = pd.DataFrame(
        {"machine": "m", "env": "e", "benchmark": "b.track_x", "params": "$\\frac{$", "unit": "GB/s", "status": "ok",
         "value": [1.0, 1.0, 2.0, 2.0], "ci_99_a": float("nan"), "ci_99_b": float("nan"),
         "commit": ["a", "b", "c", "d"], "commit_short": ["a", "b", "c", "d"],
         "date": pd.date_range("2026-01-01", periods=4, tz="UTC")}
    )  # fmt: skip
    steps = frame.iloc[:1].assign(commit_after="c", commit_before="b", verdict="faster", ratio=2.0)
    png = plots.plot_history(frame, steps)  # mathtext would raise on "$\frac{$"
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_step_of_a_plotted_series_is_marked(monkeypatch):
    """A series with two steps (a held core, then a planted slowdown) shows both, not only its largest."""
    from devbench.report import plots

    marked = []
    real = plots._draw

    def spy(plt, draw, ncols, nrows, tight=True):
        def looked(axes):
            draw(axes)
            marked.extend(float(line.get_xdata()[0]) for ax in axes.flat for line in ax.lines
                          if line.get_linestyle() == "--")  # fmt: skip

        return real(plt, looked, ncols, nrows, tight)

    monkeypatch.setattr(plots, "_draw", spy)
    commits = list("abcdef")
    frame = pd.DataFrame(
        {"machine": "m", "env": "e", "benchmark": "b.time_x", "params": "", "unit": "seconds", "status": "ok",
         "value": [1.0, 1.0, 3.0, 3.0, 1.4, 1.4], "ci_99_a": float("nan"), "ci_99_b": float("nan"),
         "commit": commits, "commit_short": commits, "date": pd.date_range("2026-01-01", periods=6, tz="UTC")}
    )  # fmt: skip
    steps = frame.iloc[:2].assign(commit_after=["c", "e"], commit_before=["b", "d"], verdict=["slower", "faster"],
                                  ratio=[3.0, 1.4 / 3.0])  # fmt: skip
    assert plots.plot_history(frame, steps)[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(marked) == [1.5, 3.5]


def test_a_string_result_costs_its_values_not_the_file(results, tmp_path, capsys):
    def change(data):
        i = data["result_columns"].index("result")
        data["results"]["bench_hostile.Sized.time_sized"][i] = ["1e-3", True]
        data["results"]["bench_hostile.track_other"][i] = float("inf")

    _edit(results, change)
    assert _report(results, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "Sized.time_sized" in err and "'1e-3'" in err and "not a number asv would accept" in err
    assert "track_other" in err and "inf" in err
    csv = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(csv.loc[csv["benchmark"] == "bench_hostile.Sized.time_sized", "status"]) == {"invalid"}
    assert (csv.loc[csv["benchmark"] == "bench_hostile.Labelled.track_labelled", "status"] == "ok").all()


def test_a_result_that_is_a_string_drops_that_benchmark_only(results, tmp_path, capsys):
    def change(data):
        data["results"]["bench_hostile.track_other"][data["result_columns"].index("result")] = "oops"

    _edit(results, change)
    assert _report(results, tmp_path / "out") == 0
    assert "track_other: this benchmark is left out" in capsys.readouterr().err
    csv = pd.read_csv(tmp_path / "out" / "results.csv")
    assert "bench_hostile.track_other" not in set(csv["benchmark"]) and len(csv) == 8


def test_a_value_list_not_matching_the_grid_is_named(results, tmp_path, capsys):
    def change(data):
        i = data["result_columns"].index("result")
        data["results"]["bench_hostile.Labelled.track_labelled"][i] = [2.0, 2.0]  # 6 combinations

    _edit(results, change)
    assert _report(results, tmp_path / "out") == 0
    assert "2 values for 6 parameter combinations; the missing ones count as failed" in capsys.readouterr().err


def test_renamed_benchmark_missing_from_benchmarks_json_is_still_reported(results, tmp_path, capsys):
    meta = json.loads((results / "benchmarks.json").read_text())
    meta.pop("bench_hostile.track_other")
    (results / "benchmarks.json").write_text(json.dumps(meta))
    assert _report(results, tmp_path / "out") == 0
    csv = pd.read_csv(tmp_path / "out" / "results.csv")
    assert (csv.loc[csv["benchmark"] == "bench_hostile.track_other", "value"] == 3.0).all()


def test_old_format_files_name_asv_update(results, tmp_path, capsys):
    _edit(results, lambda data: data.update(version=1))
    assert _report(results, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "asv update" in err and "Traceback" not in err
    # the closing reason says so too, not "match the selection" when none was given
    assert "older asv format; run `asv update`" in err and "selection" not in err


def test_machine_records_without_results_say_how_asv_saves_them(results, tmp_path, capsys):
    """``asv run`` without a commit to record under measures and saves no result file: the report says so and how,
    not that results fail a selection no one made."""
    _result_file(results).unlink()
    assert _report(results, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "holds no asv result file" in err and "--set-commit-hash" in err and "selection" not in err


def test_truncated_file_is_named(results, tmp_path, capsys):
    path = _result_file(results)
    path.write_text(path.read_text()[:100])
    assert _report(results, tmp_path / "out") == 2  # the only result file: nothing left to report
    err = capsys.readouterr().err
    assert path.name.split("-")[0] in err and "Traceback" not in err


@pytest.mark.parametrize("problem", ["file", "under_file", "read_only", "foreign"])
def test_out_problems_exit_2_and_name_the_folder(results, tmp_path, capsys, problem):
    out = tmp_path / "out"
    if problem == "file":
        out.write_text("x")
    elif problem == "under_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "out"
    elif problem == "read_only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        (tmp_path / "ro").mkdir(mode=0o555)
        out = tmp_path / "ro" / "out"
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    assert _report(results, out) == 2
    err = capsys.readouterr().err
    assert "--out" in err and str(out) in err and "Traceback" not in err
    if problem == "foreign":
        assert (out / "notes.txt").read_text() == "mine"


def test_ctrl_c_exits_130_and_keeps_the_old_report(results, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert _report(results, out, "--format", "md") == 0
    before = (out / "report.md").read_text()
    from devbench.report import sections

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sections, "build", interrupted)
    assert _report(results, out, "--format", "md") == 130
    assert "interrupted" in capsys.readouterr().err
    assert (out / "report.md").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_kill_9_at_random_moments_leaves_the_old_or_the_new_report(results, tmp_path):
    """Two histories alternate into one folder; after each kill the folder is one run's whole output."""
    small = tmp_path / "small"
    shutil.copytree(results, small)
    _edit(small, lambda d: d["results"].pop("bench_hostile.Labelled.track_labelled"))  # 6 rows fewer
    sizes = {}
    for name, res in (("big", results), ("small", small)):
        one = tmp_path / f"one-{name}"
        assert _report(res, one, "--format", "md,csv") == 0
        sizes[len(pd.read_csv(one / "results.csv"))] = (one / "report.md").read_text().splitlines()[2]
    out = tmp_path / "out"
    rng = random.Random(11)
    cmd = [sys.executable, "-m", "devbench.cli", "report", "--out", str(out), "--format", "md,csv", "--results"]
    for i in range(8):
        proc = subprocess.Popen([*cmd, str(results if i % 2 else small)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(rng.uniform(0.5, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if out.exists():
            rows = len(pd.read_csv(out / "results.csv"))
            assert rows in sizes and (out / "report.md").read_text().splitlines()[2] == sizes[rows], f"mixed at {i}"
    assert subprocess.run([*cmd, str(results)], capture_output=True).returncode == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))


def test_two_processes_read_the_same_table_as_one(results, monkeypatch):
    """A large history is read by a forked second process; the frame, its problems and the
    'invalid' marker come back exactly as one process reads them."""
    from devbench.report import load

    def change(data):
        data["results"]["bench_hostile.Sized.time_sized"][data["result_columns"].index("result")] = ["1e-3", True]

    _edit(results, change)
    monkeypatch.setattr(load, "PARALLEL_MIN_FILES", 10**9)
    one = load.load_results(results)
    monkeypatch.setattr(load, "PARALLEL_MIN_FILES", 1)
    two = load.load_results(results)
    pd.testing.assert_frame_equal(one.frame, two.frame)
    assert [str(p) for p in one.problems] == [str(p) for p in two.problems]
    assert (two.frame["status"] == "invalid").any()


def test_a_subfolder_of_the_project_is_named_with_the_folder_to_run_from(tmp_path, monkeypatch, capsys):
    """Run from a subfolder, the default .asv/results is not there: the error names the project above it."""
    import argparse

    from devbench.gpu.gpuargs import add_arguments, check
    from devbench.report.cli import main

    (tmp_path / "asv.conf.json").write_text("{}")
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "src" / "pkg")
    assert main([]) == 2
    assert f"this is a subfolder of the project {tmp_path}: run there" in capsys.readouterr().err
    gpu = argparse.ArgumentParser()
    add_arguments(gpu)
    assert f"(the project is {tmp_path}: run there)" in check(gpu.parse_args([]))


def test_a_run_record_labels_only_its_own_machines_and_commits_results():
    """Two machines' results in one .asv under one environment name, and one environment run for two commits
    with torch upgraded between: each result file is labelled by its own machine's record of its own commit."""
    from devbench.report.records import actual_versions

    t = 1_750_000_000.0
    recs = [dict(time=t, machine="h200", commit="aaaa", torch="2.13.0+cu130", cuda="13.0", python="3.11"),
            dict(time=t + 600, machine="a100", commit="aaaa", torch="2.13.0+cu126", cuda="12.6", python="3.11"),
            dict(time=t + 900, machine="h200", commit="bbbb", torch="2.14.0+cu130", cuda="13.0", python="3.11")]
    started = [(t + 500) * 1e3, (t + 650) * 1e3, (t + 700) * 1e3]
    assert actual_versions(recs, started, "h200", "aaaa")[:2] == ("2.13.0+cu130", "13.0")
    assert actual_versions(recs, started, "a100", "aaaa")[:2] == ("2.13.0+cu126", "12.6")
    assert actual_versions(recs, started, "h200", "bbbb")[0] == "2.14.0+cu130"
    older = [{k: v for k, v in r.items() if k != "commit"} for r in recs[:1]]  # a record that names no commit
    assert actual_versions(older, started, "h200", "cccc")[0] == "2.13.0+cu130"
    # no record of this commit at all: the nearest record of another labels it, within its 12 h
    assert actual_versions(recs, started, "h200", "dddd")[0] == "2.14.0+cu130"
    assert actual_versions(recs, [(t + 13 * 3600) * 1e3], "h200", "dddd") == (None, None, None)
