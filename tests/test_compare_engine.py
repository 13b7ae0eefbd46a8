"""devbench compare end to end on a tiny benchmark project, and its parts on synthetic figures.

The project has three commits: c1 sleeps 20 ms per call, c2 changes only a README (identical
benchmark code: an A/A pair), c3 sleeps 40 ms (a planted 2x slowdown). Its ``track_`` figures are
fixed numbers (c3's rate halves), so those verdicts cannot depend on the host; the sleep's
verdict rests on a 2x change against a 2% floor. No test runs longer when the host is busier:
the passes are fixed (--min-passes = --max-passes) and every request has a timeout.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import random
import re
import signal
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from devbench.cli import main
from devbench.compare import judge, runner, selection, session, stopping
from devbench.compare.runner import Combination, Figure
from devbench.records import verdict as V

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asv_fixture import _git  # noqa: E402

SUITE = """
import os
import time

SLEEP_MS = {sleep}


def time_sleep():
    time.sleep(SLEEP_MS / 1e3)


def track_rate():
    # a track_ figure with samples, as devbench.engine.suite.with_samples returns it
    return {{"samples": [1000 / SLEEP_MS * f for f in (0.98, 1.0, 1.02)], "number": 1}}


track_rate.unit = "GB/s"


def track_record():
    return 1.0


track_record.unit = "bool"


def track_broken():
    raise RuntimeError("broken in its timed call")


track_broken.unit = "GB/s"


def track_sized(n):
    return n * 1.0


track_sized.unit = "GB/s"
track_sized.params = [1, 2]
track_sized.param_names = ["n"]


class Swept:
    # its figures are measured in setup_cache, as the collectives' sweep is

    params = [[1, 2]]
    param_names = ["n"]
    figures_in_setup_cache = True

    def setup_cache(self):
        with open(os.environ["AB_SWEEP_LOG"], "a") as log:
            log.write(os.environ.get("DEVBENCH_BENCH", "") + "\\n")
        return {{1: 1000 / SLEEP_MS, 2: 2000 / SLEEP_MS}}

    def track_swept(self, cache, n):
        return cache[n]

    track_swept.unit = "GB/s"


class Searched:
    # a setup_cache that measures no figure (a search, a shared input): kept across passes

    def setup_cache(self):
        with open(os.environ["AB_SWEEP_LOG"] + ".search", "a") as log:
            log.write(os.environ.get("DEVBENCH_CHECKED", "") + "\\n")
        return 1000 / SLEEP_MS

    def track_found(self, found):
        return found

    track_found.unit = "GB/s"


class Only:
    params = [["small", "huge"]]
    param_names = ["size"]

    def setup(self, size):
        if size == "huge":
            raise NotImplementedError("too big for the fixture")

    def track_pid(self, size):
        return float(os.getpid())

    track_pid.unit = "GB/s"
"""

#: fixed passes keep the test's length independent of the host: 6 pairs of processes give a 95% interval. At 6
#: pairs that interval is the range of their values, so each must hold: 4 pairs of blocks a pair of processes
#: (its value their median), so that one block the host stalls (a 20 ms sleep that took 112 ms on a busy VM, which
#: with 2 pairs left a planted 2x undecided) cannot move it
FAST = ["--confidence", "0.95", "--min-passes", "6", "--max-passes", "6", "--pairs", "4", "--block-s", "0.02"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ab") / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "asv.conf.json").write_text(json.dumps({"version": 1, "project": "abfix", "benchmark_dir": "benchmarks"}))
    _git(repo, "init", "-q", "-b", "main")
    commits = []
    for sleep, readme in ((20, "one"), (20, "two"), (40, "two")):
        (repo / "benchmarks" / "bench_ab.py").write_text(SUITE.format(sleep=sleep))
        (repo / "README").write_text(readme)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"sleep {sleep}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    return repo, commits


def _run(project, *argv, fast=True, measure_all=True):
    """A compare of the fixture; ``measure_all``: every figure measured, as the tests of the method need (two
    commits that differ by their README run the same code, which a compare otherwise does not measure)."""
    repo, _ = project
    return main(["compare", "--repo", str(repo), "--python", sys.executable, "--machine", "alpha",
                 *(FAST if fast else []), *(["--measure-all"] if measure_all else []), *argv])  # fmt: skip


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {r["benchmark"] + (f"({r['params']})" if r["params"] else ""): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def planted(project, tmp_path_factory):
    """One compare of the whole fixture suite, c1 -> c3 (a planted 2x slowdown), read by several tests:
    its exit code, its printed text, its folder and the log of the sweeps its setup_cache ran."""
    _, (c1, _, c3) = project
    tmp = tmp_path_factory.mktemp("planted")
    log = tmp / "sweeps.log"
    before = os.environ.get("AB_SWEEP_LOG")
    os.environ["AB_SWEEP_LOG"] = str(log)
    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            code = _run(project, c1, c3, "--out", str(tmp / "out"))
    finally:
        if before is None:
            os.environ.pop("AB_SWEEP_LOG")
        else:
            os.environ["AB_SWEEP_LOG"] = before
    return code, text.getvalue(), tmp / "out", log.read_text().splitlines()


def test_a_planted_slowdown_is_slower_and_the_fixed_figures_are_not(project, planted):
    _, (c1, _, c3) = project
    code, text, out, _ = planted
    assert code == 1  # exit 1: a figure is slower
    rows = _rows(out / "compare.csv")
    # the fixed figures' values (no live timing here: time_sleep's verdict is the host's, and no test reads it)
    assert rows["bench_ab.track_rate"]["verdict"] == V.SLOWER  # GB/s halved: lower is worse
    assert float(rows["bench_ab.track_rate"]["ratio"]) == pytest.approx(0.5)
    # unchanged: by default no same is sought, so the screen stops them after 2 passes, undecided
    for fixed in ("bench_ab.track_sized(n=1)", "bench_ab.track_sized(n=2)"):
        assert rows[fixed]["verdict"] == V.UNDECIDED and rows[fixed]["stopped_after"] == "2"
        assert rows[fixed]["n_base"] == "2"
    assert "bench_ab.track_record" not in rows  # a record (no better direction) is never judged
    # skipped on both sides: named, not judged
    assert "too big for the fixture" in rows["bench_ab.Only.track_pid(size=huge)"]["note"]
    assert "Looked for faster and slower only (the default)" in (out / "compare.md").read_text()
    assert "slower" in text and "wrote" in text
    # the summary counts the verdicts of the figures judged, and those not judged apart
    judged = [r for r in rows.values() if not r["note"]]
    summary = ", ".join(f"{sum(r['verdict'] == v for r in judged)} {v}" for v in V.VERDICTS)
    assert f"{summary}, {len(rows) - len(judged)} not judged" in text
    md = (out / "compare.md").read_text()
    assert "| slower | bench_ab.track_rate |" in md and "95% interval" in md
    pairs = (out / "pairs.csv").read_text().splitlines()
    assert pairs[0] == "benchmark,params,unit,process_pair,pair,base,head"
    assert sum(line.startswith("bench_ab.time_sleep,") for line in pairs) == 6 * 4
    run = json.loads((out / "run.json").read_text())
    assert run["sides"]["head"]["sha"] == c3 and run["options"]["max_passes"] == 6
    # what it cost: each pass, and each measured figure's processes
    assert [p["figures"] for p in run["passes"]][:1] == [len([f for f in run["figures"].values()])]
    # the sweep's two figures split the 95%: 97.5% each, which needs 7 pairs of worlds, rounded up to an even 8 (each
    # side sweeps first as often): they alone get a 7th and an 8th pass
    assert [p["figures"] for p in run["passes"]][6:] == [2, 2]
    assert run["figures"]["bench_ab.time_sleep"]["seconds"] > 0
    assert "Cost: " in md and "the costliest benchmarks: " in md


def test_a_sweeps_figures_are_judged_as_one_family(planted):
    """The figures one setup_cache measures at once split the run's confidence (Bonferroni): each interval at
    97.5% for the fixture's two, said in compare.md; a planted halving is still called, after 7 pairs of worlds (8: an
    even number, each side sweeping first as often)."""
    _, text, out, _ = planted
    assert "a sweep's figures, judged as one family, up to 8" in text
    rows = _rows(out / "compare.csv")
    for n in (1, 2):
        row = rows[f"bench_ab.Swept.track_swept(n={n})"]
        assert row["verdict"] == V.SLOWER and row["n_base"] == "8"
        assert float(row["confidence"]) == pytest.approx(0.975)
    assert float(rows["bench_ab.time_sleep"]["confidence"]) == pytest.approx(0.95)
    md = (out / "compare.md").read_text()
    assert "The 2 figures of bench_ab.Swept are measured together" in md and "each interval at 97.50%" in md
    run = json.loads((out / "run.json").read_text())
    swept = run["figures"]["bench_ab.Swept.track_swept(1)"]
    assert swept["in_cache"] is True and swept["setup_cache"]
    # every pass ran the sweep, on both sides, and says what it took
    assert run["passes"] and all(p["caches"][swept["setup_cache"]] > 0 for p in run["passes"])


def test_a_figure_whose_first_call_fails_is_not_judged_and_says_why(planted):
    _, _, out, _ = planted
    row = _rows(out / "compare.csv")["bench_ab.track_broken"]
    assert row["verdict"] == V.UNDECIDED and row["pairs"] == "0"
    assert "RuntimeError: broken in its timed call" in row["note"] and row["note"].startswith("base: ")


def test_a_sweep_runs_once_per_side_and_pass_and_gives_one_pair(planted):
    """setup_cache runs once per side and pass (in turn), told which combinations are read; a figure
    measured there gives one pair per pair of processes, not one per block."""
    import pandas as pd

    _, _, out, lines = planted
    # one value per pass, 8 passes: the fewest for the two figures' 97.5% intervals (95% split between them), 7,
    # rounded up to an even number
    assert len(lines) == 8 * 2 and all("track_swept\\(1\\)" in x and "track_swept\\(2\\)" in x for x in lines)
    blocks = pd.read_csv(out / "pairs.csv")
    blocks = blocks[blocks["benchmark"] == "bench_ab.Swept.track_swept"]
    assert len(blocks) == 8 * 2 and blocks.groupby(["params", "process_pair"]).size().eq(1).all()
    assert set(blocks["head"] / blocks["base"]) == {0.5}


def test_a_setup_cache_that_measures_no_figure_runs_once_per_side(planted):
    """A search's setup_cache is kept by the first worker of each side and read by the later passes' workers,
    which run it no more; its figure is measured in every pass as any other."""
    import pandas as pd

    _, _, out, _ = planted
    runs = Path(str(out.parent / "sweeps.log") + ".search").read_text().splitlines()
    assert len(runs) == 2 and len(set(runs)) == 2  # once in each side's tree
    blocks = pd.read_csv(out / "pairs.csv")
    assert blocks.loc[blocks["benchmark"] == "bench_ab.Searched.track_found", "process_pair"].nunique() >= 2


def test_every_combination_runs_in_a_fresh_process_per_pass(planted):
    """track_pid returns its process id: each pass forks anew, base and head are different processes."""
    import pandas as pd

    _, _, out, _ = planted
    blocks = pd.read_csv(out / "pairs.csv")
    blocks = blocks[blocks["benchmark"] == "bench_ab.Only.track_pid"]
    passes = blocks["process_pair"].nunique()
    assert passes >= 2  # pids, base against head, disagree at random: the screen may stop it after 2
    per_pass = blocks.groupby("process_pair").agg(base=("base", "nunique"), head=("head", "nunique"))
    assert (per_pass == 1).all().all()  # one process per side in a pass
    assert blocks["base"].nunique() == passes and not set(blocks["base"]) & set(blocks["head"])


def test_an_a_a_pair_calls_nothing_faster_or_slower(project, tmp_path, capsys):
    _, (c1, c2, _) = project
    out = tmp_path / "aa"
    assert _run(project, c1, c2, "--out", str(out), "--same") == 0
    rows = _rows(out / "compare.csv")
    fixed = {k: r for k, r in rows.items() if k != "bench_ab.time_sleep"}  # a live timing's verdict is the host's
    assert not [k for k, r in fixed.items() if r["verdict"] in (V.FASTER, V.SLOWER)]
    assert rows["bench_ab.track_rate"]["verdict"] == V.SAME  # identical fixed figures, same sought
    assert rows["bench_ab.track_rate"]["n_base"] == "6"
    text = (out / "compare.md").read_text()
    assert "same benchmark code" in text and "Looked for faster and slower only" not in text


def test_figures_whose_code_is_identical_are_listed_same_code_and_not_measured(project, tmp_path, capsys):
    """Two commits that differ by their README run the same code: nothing is measured (no pass starts a
    process), every figure says why, and the run ends at once."""
    _, (c1, c2, _) = project
    out = tmp_path / "readme"
    assert _run(project, c1, c2, "--out", str(out), measure_all=False) == 0
    rows = _rows(out / "compare.csv")
    assert rows and all(r["note"].startswith("same code") for r in rows.values()), rows
    assert not (out / "pairs.csv").read_text().strip().splitlines()[1:]
    said = capsys.readouterr().out
    assert "listed as 'same code', not measured" in said
    assert f"same code, not measured ({len(rows)} figures" in said and "  bench_ab." in said  # a line a benchmark
    run = json.loads((out / "run.json").read_text())
    assert run["passes"] == [] and run["sides"]["base"]["environment"]["python"] == sys.executable


def test_two_environments_are_sides_and_each_is_named(project, tmp_path, capsys):
    """--base-python and --head-python: one commit in two environments, measured (an environment is what
    changed), each side's Python and torch named; a copy of this Python stands for a second environment."""
    _, (c1, _, _) = project
    other = tmp_path / "bin" / "python"
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    other.chmod(0o755)
    out = tmp_path / "envs"
    few = ["--confidence", "0.5", "--min-passes", "2", "--max-passes", "2"]
    assert _run(project, c1, c1, *few, "--base-python", sys.executable, "--head-python", str(other), "--out", str(out),
                "--bench", "track_sized", measure_all=False) == 0  # fmt: skip
    said = capsys.readouterr().out
    assert "same commit" not in said and f"head {other}" in said
    run = json.loads((out / "run.json").read_text())
    assert [run["sides"][s]["environment"]["python"] for s in ("base", "head")] == [sys.executable, str(other)]
    assert run["passes"]  # measured: the environments differ
    text = (out / "compare.md").read_text()
    assert "Environments: base Python" in text and str(other) in text and "A/A run" not in text
    missing = tmp_path / "no" / "python"
    assert _run(project, c1, c1, "--head-python", str(missing), "--out", str(tmp_path / "x")) == 2
    assert f"--head-python {missing} does not exist" in capsys.readouterr().err


def test_the_same_commit_twice_says_so(project, tmp_path, capsys):
    _, (c1, _, _) = project
    # the message comes before any measuring: two passes at 50% are the least compare accepts
    few = ["--confidence", "0.5", "--min-passes", "2", "--max-passes", "2"]
    assert _run(project, c1, c1, *few, "--out", str(tmp_path / "x"), "--bench", "track_sized") == 0
    assert "same commit" in capsys.readouterr().out


def test_from_judges_a_finished_compare_again_without_measuring(planted, tmp_path, monkeypatch):
    first = planted[2]
    monkeypatch.setattr(session.Worker, "start", lambda self: pytest.fail("--from measured"))
    again = tmp_path / "again"
    # a floor of 150%: halving (ratio 0.5, 100% in log terms ~0.69 < log 2.5) is no longer beyond it;
    # the sleep's doubling is as well (exit 0: nothing slower)
    assert main(["compare", "--from", str(first), "--out", str(again), "--floor", "1.5", "--confidence", "0.95"]) == 0
    assert _rows(again / "compare.csv")["bench_ab.track_rate"]["verdict"] == V.SAME
    assert (again / "pairs.csv").read_text() == (first / "pairs.csv").read_text()
    assert "Looked for faster and slower only (the default)" in (again / "compare.md").read_text()
    seek_same = ["--floor", "1.5", "--confidence", "0.95", "--same"]
    assert main(["compare", "--from", str(first), "--out", str(tmp_path / "same"), *seek_same]) == 0
    assert "Looked for faster and slower only" not in (tmp_path / "same" / "compare.md").read_text()
    # at 99.9999% no figure of 6 passes has a bounded interval: the note says so, and how to measure it
    assert main(["compare", "--from", str(first), "--out", str(tmp_path / "strict"), "--confidence", "0.999999"]) == 0
    text = (tmp_path / "strict" / "compare.md").read_text()
    assert "No figure ran the 21 pairs of processes a bounded interval needs" in text and "Smallest" not in text


def test_a_benchmark_whose_code_changed_is_not_measured(project, tmp_path, capsys):
    """c1 -> c3 changes SLEEP_MS, a module constant, so asv's version of each function stays; a changed
    function body changes it, and such a figure is named, not timed."""
    repo, (c1, _, _) = project
    work = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(repo), str(work))
    path = work / "benchmarks" / "bench_ab.py"
    path.write_text(path.read_text().replace("return n * 1.0", "return n * 1.0 + 0.0"))
    _git(work, "commit", "-qam", "change track_sized")
    out = tmp_path / "changed"
    assert main(["compare", "--repo", str(work), "--python", sys.executable, *FAST, "--measure-all", c1, "HEAD",
                 "--out", str(out),
                 "--bench", "track_sized"]) == 0  # fmt: skip
    rows = _rows(out / "compare.csv")
    assert "benchmark changed" in rows["bench_ab.track_sized(n=1)"]["note"]
    assert not (out / "pairs.csv").read_text().strip().splitlines()[1:]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no-such-rev", "HEAD"], "'no-such-rev' is not a commit"),
        (["HEAD~2", "HEAD", "--bench", "("], "is not a regular expression"),
        (["HEAD~2", "HEAD", "--bench", "nothing_matches_this"], "selects no benchmark"),
        (["HEAD~2", "HEAD", "--confidence", "1.5"], "--confidence must be in (0, 1)"),
        (["HEAD~2", "HEAD", "--floor", "-0.1"], "--floor must be in [0, 10)"),
        (["HEAD~2", "HEAD", "--max-passes", "7", "--min-passes", "7", "--confidence", "0.99"],
         "--max-passes 7 cannot give a 99% interval"),
        (["HEAD~2", "HEAD", "--min-passes", "9", "--max-passes", "8"], "must be at least --min-passes"),
        (["HEAD~2", "HEAD", "--min-passes", "4", "--max-passes", "9"], "--max-passes must be even, got 9"),
        (["HEAD~2", "HEAD", "--screen", "-2"], "--screen must be 0 (no screen) or a number of passes"),
        (["HEAD~2", "HEAD", "--python", "/no/such/python"], "--python /no/such/python does not exist"),
        (["--from", "/no/such/folder"], "no run.json and pairs.csv"),
    ],
)
def test_bad_input_exits_2_with_the_reason(project, capsys, argv, message):
    assert _run(project, *argv, fast=False) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_out_that_cannot_be_written_or_a_torn_record_is_named_before_anything_is_measured(project, tmp_path,
                                                                                               capsys):  # fmt: skip
    repo, _ = project
    assert _run(project, "HEAD~2", "HEAD", "--out", str(repo / "README"), fast=False) == 2
    assert f"--out {repo / 'README'} is a file, not a folder" in capsys.readouterr().err
    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / "run.json").write_text('{"figures": {}}')
    (torn / "pairs.csv").write_text("benchmark,params,unit,process_pair,pair,base,head\n")
    assert _run(project, "--from", str(torn), "--out", str(tmp_path / "again"), fast=False) == 2
    err = capsys.readouterr().err
    assert "not a devbench compare record ('sides, machine')" in err and "Traceback" not in err


def test_a_relative_python_is_the_one_named_from_here():
    from devbench.compare.cli import _resolved

    assert _resolved(".venv/bin/python") == str(Path(".venv/bin/python").absolute())
    assert _resolved("python3") == "python3" and _resolved(None) is None


def test_sigterm_stops_the_run_and_leaves_no_process_or_folder(project, tmp_path, monkeypatch, capsys):
    """A kill (or a CI timeout) mid-pass: exit 143, every benchmark process is gone, the work folder is
    removed and nothing is written, as on Ctrl-C; the previous SIGTERM handler is back afterwards."""
    _, (c1, _, c3) = project
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    started: list[session.Worker] = []
    real_spawn = session.Worker.spawn

    def spawn(self):
        started.append(self)
        if len(started) == 4:  # the second pass: the signal lands while its processes turn
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        return real_spawn(self)

    monkeypatch.setattr(session.Worker, "spawn", spawn)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "killed"
    assert _run(project, c1, c3, "--out", str(out), "--bench", "time_sleep") == 143
    assert "terminated; nothing written" in capsys.readouterr().err
    assert len(started) == 4 and not out.exists()
    assert all(w.proc is None for w in started), "a benchmark process was left running"
    assert not list(scratch.glob("devbench-ab-*")), "the work folder was left behind"
    assert signal.getsignal(signal.SIGTERM) is before


# --- parts, on synthetic figures --------------------------------------------------------------------------


def _figure(unit: str, passes: list[list[tuple[float, float]]], name: str = "bench_x.track_y") -> Figure:
    fig = Figure(Combination(name, 0, ("'cpu'",), ("device",), unit))
    for pairs in passes:
        fig.a.append([a for a, _ in pairs])
        fig.b.append([b for _, b in pairs])
    return fig


def test_a_pair_of_processes_counts_once_however_many_pairs_of_blocks_it_has():
    """Four pairs of blocks of one pair of processes are one value, not four: the process set up second
    reads apart from the first on some figures, in every pass (docs/noise.md)."""
    fig = _figure("GB/s", [[(1.0, 1.1)] * 4] * 7)
    assert judge.process_pair_logs(fig) == [pytest.approx(math.log(1.1))] * 7
    row = judge.verdict_row(fig, 0.02, 0.99)
    assert row["verdict"] == V.UNDECIDED and row["n_base"] == 7 and row["pairs"] == 28  # 7 < 8 for 99%
    fig = _figure("GB/s", [[(1.0, 1.1)] * 4] * 8)
    assert judge.verdict_row(fig, 0.02, 0.99)["verdict"] == V.FASTER


def test_a_sweep_of_45_figures_splits_the_confidence_and_needs_14_pairs_of_worlds():
    """One of 45 figures a sweep measures at once: ten pairs of worlds all 20% slower are a verdict alone, not in
    the sweep (each interval at 1 - 0.01/45 needs 14); sixteen are; a figure outside the sweep keeps 99%."""
    def swept(i: int, passes: int, head: float = 1.0) -> Figure:
        fig = Figure(Combination("bench_c.Sweep.track_t", i, (str(i),), ("n",), "seconds", "bench_c:1", True))
        fig.a, fig.b = [[1.0]] * passes, [[head]] * passes
        return fig

    alone = _figure("seconds", [[(1.0, 1.2)]] * 10)
    family = [swept(0, 10, 1.2)] + [swept(i, 10) for i in range(1, 45)] + [alone]
    own = judge.confidences(family, 0.99)
    assert own[family[0].combo.selector] == pytest.approx(1 - 0.01 / 45) and own[alone.combo.selector] == 0.99
    assert stopping.fewest_passes(own[family[0].combo.selector]) == 14 and stopping.fewest_passes(0.99) == 8
    rows = judge.judge_all(family, 0.02, 0.99).set_index("params")
    assert rows.loc["n=0", "verdict"] == V.UNDECIDED and rows.loc["device=cpu", "verdict"] == V.SLOWER
    assert stopping.settled(family[0], 6, 0.02, own[family[0].combo.selector], decide=False) is False
    family[0] = swept(0, 16, 1.2)
    assert judge.judge_all(family, 0.02, 0.99).set_index("params").loc["n=0", "verdict"] == V.SLOWER
    skipped = [swept(i, 0) for i in range(1, 45)]
    for f in skipped:
        f.state = "skip"
    assert judge.confidences([swept(0, 10, 1.2), *skipped], 0.99)[family[0].combo.selector] == 0.99


def test_a_sweeps_limit_follows_its_figures_that_do_not_skip(monkeypatch):
    """Before the first pass every figure of a sweep counts (90 figures: 17 passes, rounded up to an even 18, at
    most); once the 45 of a world this host cannot start skip, the other 45 split the confidence among themselves
    and stop at 16."""
    from devbench.compare.options import Options

    def swept(i: int) -> Figure:
        return Figure(Combination("bench_c.Sweep.track_t", i, (str(i),), ("n",), "seconds", "bench_c:1", True))

    figs = [swept(i) for i in range(90)] + [Figure(Combination("bench_c.track_other", 0, (), (), "seconds"))]
    limit = stopping.limit(Options(None, "HEAD", Path("."), Path("out"), sys.executable, min_passes=8, max_passes=10),
                           figs)
    passes = runner.Passes(min_passes=8, max_passes=10, pairs=1, block_s=0.01, cached_limit=limit)
    assert passes.limit(figs[0]) == 18 and passes.limit(figs[-1]) == 10

    class Stub:
        def stop(self):
            pass

    def fake_pass(a, b, figures, passes, log, progress, first):
        for f in figures:
            if f.combo.idx >= 45 and f.combo.in_cache:
                f.state = "skip"
                continue
            f.a.append([1.0])
            f.b.append([2.0])  # a change no pass can doubt: the sweep's figures run to their limit
        return {}  # the seconds of each setup_cache: none here

    monkeypatch.setattr(runner, "measure_pass", fake_pass)
    never = lambda f, left, decide: False  # noqa: E731
    runner.run_passes(lambda: (Stub(), Stub()), figs, passes, never, log=None, out=open(os.devnull, "w"))
    assert {len(f.a) for f in figs[:45]} == {16} and len(figs[-1].a) == 10


def test_direction_turns_up_and_down_into_faster_and_slower():
    up = [[(1.0, 1.2), (1.0, 1.21)]] * 8
    assert judge.verdict_row(_figure("GB/s", up), 0.02, 0.99)["verdict"] == V.FASTER
    assert judge.verdict_row(_figure("seconds", up), 0.02, 0.99)["verdict"] == V.SLOWER


def test_a_decided_figure_settles_after_an_even_pass_and_an_open_one_runs_on():
    decided = _figure("seconds", [[(1.0, 1.5), (1.0, 1.5)]] * 8)
    assert stopping.settled(decided, 2, 0.02, 0.99)
    odd = _figure("seconds", [[(1.0, 1.5), (1.0, 1.5)]] * 9)
    assert not stopping.settled(odd, 1, 0.02, 0.99)  # one side set up first once more: not yet
    leaning = _figure("seconds", [[(1.0, r)] for r in (1.05, 1.06, 1.04, 1.05, 1.05, 1.07, 0.99, 1.05)])
    assert not stopping.settled(leaning, 4, 0.02, 0.99)  # the low pair keeps it open; more pairs may decide it
    wild = _figure("seconds", [[(1.0, r)] for r in (0.5, 2.0, 0.6, 1.8, 0.7, 1.6, 1.0, 1.0)])
    assert stopping.settled(wild, 2, 0.02, 0.99)  # futile: two more pairs cannot narrow it inside or beyond 2%


def test_the_screen_stops_a_figure_only_when_no_one_pair_of_processes_holds_it():
    """The screen asks whether a figure could still be decided after ``robust_passes`` (9 at 99%), where the
    interval leaves out the most extreme value at each end. After 2 passes: only when the mean of the two
    lies inside the floor; a value beyond the floor's edge beside one that is not (a real change one pair
    read as none) runs on. After 4: when the second smallest and second largest Walsh averages straddle the
    floor's edges; one low value of four does not stop a figure whose other three agree."""
    def fig(*ratios: float, name: str = "bench_x.track_y") -> Figure:
        return _figure("seconds", [[(1.0, r)] for r in ratios], name)

    assert stopping.robust_passes(0.99) == 9 and V.signed_rank_k(8, 0.99) == 1
    for inside in ((0.95, 1.05), (0.97, 1.02), (1.3, 0.75)):  # their mean is inside the 2% floor
        assert not stopping.settled(fig(*inside), 8, 0.02, 0.99, decide=False), inside
        assert stopping.settled(fig(*inside), 8, 0.02, 0.99, decide=False, screen=2, changes_only=True), inside
        # seeking same too (--same), a mean inside the floor may still end same: it runs on
        assert not stopping.settled(fig(*inside), 8, 0.02, 0.99, decide=False, screen=2), inside
    for held in ((1.01, 1.05), (0.5, 1.0), (1.0, 2.0)):  # one pair reads no change, the mean is beyond the floor
        assert not stopping.settled(fig(*held), 8, 0.02, 0.99, decide=False, screen=2, changes_only=True), held
    for agree in ((1.05, 1.3), (0.9, 0.95), (1.001, 0.999)):
        assert not stopping.settled(fig(*agree), 8, 0.02, 0.99, decide=False, screen=2), agree
    # after 4: one odd value of four keeps it; two values either side of no change stop it
    assert not stopping.settled(fig(0.95, 1.1, 1.1, 1.1), 6, 0.02, 0.99, decide=False, screen=4)
    assert not stopping.settled(fig(1.0, 0.5, 0.5, 0.5), 6, 0.02, 0.99, decide=False, screen=4)
    assert stopping.settled(fig(0.95, 1.06, 0.97, 1.04), 10, 0.02, 0.99, decide=False, screen=4)
    # past the screen only futility judges (4 values, 10 more passes may still decide it)
    assert not stopping.settled(fig(0.95, 1.06, 0.97, 1.04), 10, 0.02, 0.99, decide=False, screen=2)
    # a sweep's figure (robust from 15 at 1 - 0.01/45, where k is 3) is screened by the same rule: after 4
    sweep = 1 - 0.01 / 45
    assert stopping.robust_passes(sweep) == 15 > stopping.fewest_passes(sweep)
    assert not stopping.settled(fig(0.8, 1.25), 14, 0.02, sweep, decide=False, screen=4, changes_only=True)
    assert stopping.settled(fig(0.8, 1.25, 0.9, 1.1), 14, 0.02, sweep, decide=False, screen=4, changes_only=True)
    assert not stopping.settled(fig(1.5, 1.6, 1.5, 1.6), 14, 0.02, sweep, decide=False, screen=4, changes_only=True)


def test_the_screen_judges_pairs_of_processes_not_their_blocks():
    """A real 10% change in a figure whose blocks spread by more than that (some read no change, or the other
    way) is not screened out: the screen asks what the pairs of processes say, as the verdict does. On 300
    random such figures, after 2 passes, at least 85% run on; the figure around no change stops."""
    noisy_change = _figure("seconds", [[(1.0, 1.25), (1.0, 0.99), (1.0, 1.12), (1.0, 1.01)],
                                       [(1.0, 1.02), (1.0, 1.21), (1.0, 0.93), (1.0, 1.16)]])  # fmt: skip
    assert not stopping.settled(noisy_change, 12, 0.02, 0.99, decide=False, screen=4, changes_only=True)
    around_none = _figure("seconds", [[(1.0, 1.06), (1.0, 0.97), (1.0, 1.01), (1.0, 0.99)],
                                      [(1.0, 0.95), (1.0, 1.03), (1.0, 0.96), (1.0, 1.0)]])  # fmt: skip
    assert stopping.settled(around_none, 12, 0.02, 0.99, decide=False, screen=4, changes_only=True)
    rng = random.Random(3)
    kept = 0
    for _ in range(300):
        offsets = [rng.gauss(0, 0.03) for _ in range(2)]  # each pair of processes reads a little apart
        blocks = [[(1.0, math.exp(math.log(1.1) + o + rng.gauss(0, 0.15))) for _ in range(8)] for o in offsets]
        kept += not stopping.settled(_figure("seconds", blocks), 12, 0.02, 0.99, decide=False, screen=4,
                                     changes_only=True)  # fmt: skip
    assert kept >= 0.85 * 300, kept


def _options(**kw):
    from devbench.compare.options import Options

    return Options(base="a", head="b", repo=Path("."), out=Path("out"), python=sys.executable, **kw)


def test_a_2x_is_called_though_one_pair_of_processes_reads_no_change():
    """A planted 2x in a product (every value about log 2 slower) with one disturbed pair of processes that
    reads no change, among the first two or later: the screen never stops it, and from ``--min-passes`` (10)
    it is called slower, with an interval that does not reach the odd pair."""
    from devbench.compare.options import MAX_PASSES, MIN_PASSES, SCREEN

    rng = random.Random(7)
    for odd_at in (0, 1, 3, 7):
        ratios = [2.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(MAX_PASSES)]
        ratios[odd_at] = 1.0
        fig = _figure("seconds", [])
        for done, r in enumerate(ratios, 1):
            fig.a.append([1.0])
            fig.b.append([r])
            stop = stopping.settled(fig, MAX_PASSES - done, 0.02, 0.99, decide=done >= MIN_PASSES, screen=SCREEN,
                                    changes_only=True)  # fmt: skip
            if stop:
                break
        assert done == MIN_PASSES, (odd_at, done)
        row = judge.verdict_row(fig, 0.02, 0.99)
        assert row["verdict"] == V.SLOWER and row["ratio_lo"] > 1.3, (odd_at, row)


def test_one_disturbed_pair_among_many_calls_nothing():
    """An A/A figure (no change, 3% noise between pairs of processes) with one pair the host disturbed by
    +60%: the interval leaves that pair out, and the figure is neither faster nor slower, in many trials."""
    from devbench.compare.options import MIN_PASSES

    rng = random.Random(11)
    called = 0
    for _ in range(200):
        ratios = [math.exp(rng.gauss(0, 0.03)) for _ in range(MIN_PASSES)]
        ratios[rng.randrange(MIN_PASSES)] = 1.6
        row = judge.verdict_row(_figure("seconds", [[(1.0, r)] for r in ratios]), 0.02, 0.99)
        called += row["verdict"] in (V.FASTER, V.SLOWER)
    assert called <= 4  # 1% by chance at most would be 2 of 200; none in practice
    # and with it, a real 10% change is still seen (its interval clears the floor)
    ratios = [1.1 * math.exp(rng.gauss(0, 0.02)) for _ in range(MIN_PASSES)]
    ratios[0] = 1.6
    assert judge.verdict_row(_figure("seconds", [[(1.0, r)] for r in ratios]), 0.02, 0.99)["verdict"] == V.SLOWER


def test_looking_for_changes_only_stops_a_figure_that_can_only_end_same():
    """Two values inside the floor may end same after 8 passes: sought (--same), the figure runs on; looking
    for changes only (compare's default), it stops. Two that agree beyond the floor run on either way, and a
    decided slowdown is kept."""
    inside = _figure("seconds", [[(1.0, 1.001)], [(1.0, 0.999)]])
    assert not stopping.settled(inside, 8, 0.02, 0.99, decide=False, screen=4)
    assert stopping.settled(inside, 8, 0.02, 0.99, decide=False, screen=4, changes_only=True)
    beyond = _figure("seconds", [[(1.0, 1.05)], [(1.0, 1.06)]])
    assert not stopping.settled(beyond, 8, 0.02, 0.99, decide=False, screen=4, changes_only=True)
    slower = _figure("seconds", [[(1.0, 1.5)]] * 8)
    assert stopping.settled(slower, 2, 0.02, 0.99, changes_only=True)
    assert judge.verdict_row(slower, 0.02, 0.99)["verdict"] == V.SLOWER


def test_the_pass_loop_stops_settled_figures_and_keeps_the_rest(monkeypatch):
    """run_passes with stand-in workers: a figure settled after the minimum is not measured again."""
    measured: list[list[str]] = []

    class Stub:
        def stop(self):
            pass

    def fake_pass(a, b, figures, passes, log, progress, first):
        measured.append([f.combo.benchmark for f in figures])
        for f in figures:
            f.a.append([1.0])
            f.b.append([1.0])
        return {}

    monkeypatch.setattr(runner, "measure_pass", fake_pass)
    figs = [Figure(Combination(n, 0, (), (), "seconds")) for n in ("a", "b")]
    passes = runner.Passes(min_passes=2, max_passes=4, pairs=1, block_s=0.01)
    decided_a = lambda f, left, decide: decide and f.combo.benchmark == "a"  # noqa: E731
    took = runner.run_passes(lambda: (Stub(), Stub()), figs, passes, decided_a, log=None, out=open(os.devnull, "w"))
    assert measured == [["a", "b"], ["a", "b"], ["b"], ["b"]]
    assert [p["figures"] for p in took] == [2, 2, 1, 1]
    assert figs[0].state == "stopped" and figs[0].stopped_after == 2 and figs[1].state == "done"


def test_a_figure_certain_to_stay_undecided_stops_before_the_minimum_unless_all_passes(monkeypatch):
    """Before min_passes only futility may stop a figure (settled is asked without decide); with all_passes
    nothing stops before min_passes."""
    asked: list[tuple[str, int, bool]] = []

    class Stub:
        def stop(self):
            pass

    def fake_pass(a, b, figures, passes, log, progress, first):
        for f in figures:
            f.a.append([1.0])
            f.b.append([1.0])
        return {}

    def settled(f, left, decide):
        asked.append((f.combo.benchmark, left, decide))
        if len(f.a) % 2:  # as judge.settled: only after an even pass
            return False
        return f.combo.benchmark == "futile" or (decide and f.combo.benchmark == "decided")

    monkeypatch.setattr(runner, "measure_pass", fake_pass)
    for all_passes, stops in ((False, {"futile": 2, "decided": 4}), (True, {"futile": 4, "decided": 4})):
        asked.clear()
        figs = [Figure(Combination(n, 0, (), (), "seconds")) for n in ("futile", "decided", "open")]
        passes = runner.Passes(min_passes=4, max_passes=6, pairs=1, block_s=0.01, all_passes=all_passes)
        runner.run_passes(lambda: (Stub(), Stub()), figs, passes, settled, log=None, out=open(os.devnull, "w"))
        assert {f.combo.benchmark: f.stopped_after for f in figs if f.state == "stopped"} == stops
        assert figs[2].state == "done" and len(figs[2].a) == 6
        early = [(n, left, decide) for n, left, decide in asked if left > 2]  # asked before the 4th pass
        assert all(not decide for _, _, decide in early) and (bool(early) != all_passes)


def test_futility_alone_is_asked_for_before_the_minimum():
    wild = _figure("seconds", [[(1.0, r)] for r in (0.5, 0.6, 2.0, 1.8)])
    assert stopping.settled(wild, 6, 0.02, 0.99, decide=False)  # 4 of 10: already certain to stay undecided
    quiet = _figure("seconds", [[(1.0, r)] for r in (1.001, 0.999)])
    assert not stopping.settled(quiet, 8, 0.02, 0.99, decide=False)  # may still end same
    decided = _figure("seconds", [[(1.0, 1.5), (1.0, 1.5)]] * 8)
    assert stopping.settled(decided, 2, 0.02, 0.99) and not stopping.settled(decided, 2, 0.02, 0.99, decide=False)


def test_the_cost_note_sums_the_passes_and_names_the_costliest_benchmarks():
    from devbench.compare.record import cost_note

    record = {
        "passes": [{"figures": 3, "seconds": 90.0}, {"figures": 2, "seconds": 30.0}],
        "figures": {
            "x(1)": {"benchmark": "x", "seconds": 10.0},
            "x(2)": {"benchmark": "x", "seconds": 50.0},
            "y": {"benchmark": "y", "seconds": 54.0},
            "z": {"benchmark": "z", "seconds": 0.0},  # skipped: cost nothing, not named
        },
    }
    assert cost_note(record, top=2) == (
        "Cost: 2.0 min in 2 passes; the costliest benchmarks: x 1.0 min (2 figures), y 0.9 min (1 figure)."
    )
    assert cost_note({"figures": {}}) is None  # a record from before costs were kept
    # a sweep's setup_cache is named by the class whose figures read it, with the passes that ran it
    record["figures"]["s(1)"] = {"benchmark": "bench_s.Sweep.track_t", "seconds": 1.0, "setup_cache": "bench_s:9"}
    record["passes"] = [{"figures": 4, "seconds": 90.0, "caches": {"bench_s:9": 40.0}},
                        {"figures": 3, "seconds": 30.0, "caches": {"bench_s:9": 38.0}}]  # fmt: skip
    assert cost_note(record, top=2) == (
        "Cost: 2.0 min in 2 passes; the costliest benchmarks: bench_s.Sweep setup_cache 1.3 min (2 passes), "
        "x 1.0 min (2 figures)."
    )


def test_plan_names_new_gone_and_changed_benchmarks():
    def listing(version="v1", extra=()):
        out = {"bench_x.track_a": {"params": [["1", "2"]], "param_names": ["n"], "unit": "GB/s", "version": version}}
        for name in extra:
            out[name] = {"params": [], "param_names": [], "unit": "GB/s", "version": "v1"}
        return out

    figs = {f.combo.selector: f for f in selection.plan_figures(listing(extra=["bench_x.track_old"]),
                                                               listing("v2", ["bench_x.track_new"]), "")}  # fmt: skip
    assert "gone" in figs["bench_x.track_old"].reason and "new" in figs["bench_x.track_new"].reason
    assert figs["bench_x.track_a(1)"].state == "changed" and figs["bench_x.track_a(2)"].state == "changed"


def test_each_side_opens_a_combination_by_its_own_index_where_head_added_a_parameter_value(monkeypatch):
    """asv's version hashes a benchmark's code, not its params: a value added on head moves the later
    combinations' indices there, and base opened by head's index would time its neighbour (n=2 for n=1)."""
    def listing(values):
        return {"bench_x.track_a": {"params": [values], "param_names": ["n"], "unit": "GB/s", "version": "v1"}}

    figs = {f.combo.selector: f for f in selection.plan_figures(listing(["1", "2"]), listing(["0", "1", "2"]), "")}
    one = figs["bench_x.track_a(1)"]
    assert (one.state, one.combo.idx, one.base_idx) == ("running", 1, 0)
    opened = []

    class Side:
        def __init__(self, side):
            self.side, self.benchmarks = side, {}

        def request(self, what, **kw):
            if what == "open":
                opened.append((self.side, kw["idx"]))
                return {"ready": True}
            return {"closed": True}

    monkeypatch.setattr(runner, "paired_turns", lambda *a, **k: [(1.0, 1.0)])
    passes = runner.Passes(min_passes=2, max_passes=2, pairs=1, block_s=0.01, figure_s=1.0)
    runner._measure_figure(Side("base"), Side("head"), one, passes, "base")
    assert opened == [("base", 0), ("head", 1)]


def test_compare_leaves_the_twins_records_and_without_cuda_the_gpu_combinations_out():
    from devbench.records.spec import TWINS

    names = [
        "bench_matmul.MatmulSquare.track_time('cpu', 'float32', 16)",
        "bench_matmul.MatmulSquare.track_tflops('cpu', 'float32', 16)",
        "bench_matmul.MatmulSquare.track_tflops('cuda', 'float32', 16)",
        "bench_collectives.Collectives.track_time('gloo', 2, 'all_reduce', 4096)",
        "bench_collectives.Collectives.track_time('nccl', 2, 'all_reduce', 4096)",
        "bench_devices.RunInfo.track_gpu_count",
        "bench_devices.TryGpu.time_try_gpu",
    ]

    def chosen(bench, twins, gpu):
        pattern = selection.bench_pattern(bench, twins, gpu)
        return [i for i, n in enumerate(names) if re.search(pattern, n)]

    assert chosen(None, False, False) == [1, 3, 6]
    assert chosen(None, True, True) == [0, 1, 2, 3, 4, 6]
    assert chosen("MatmulSquare", False, True) == [1, 2]
    assert chosen("Collectives", False, False) == [3]
    # a twin and the figure judged instead are of one benchmark class, and that figure is judged
    assert all(t.rsplit(".", 1)[0] == v.rsplit(".", 1)[0] and v not in TWINS for t, v in TWINS.items())


def test_cuda_is_counted_by_each_sides_worker_and_unknown_leaves_nothing_out(tmp_path):
    import torch

    from devbench.compare.session import Worker

    assert selection.sees_cuda([0, 0]) is False
    assert selection.sees_cuda([0, 2]) is True and selection.sees_cuda([0, None]) is True
    assert selection.sees_cuda([]) is True
    suite = tmp_path / "benchmarks"
    suite.mkdir()
    (suite / "__init__.py").write_text("")
    (suite / "bench_one.py").write_text("import torch\n\n\ndef track_one():\n    return 1.0\n")
    with open(tmp_path / "log", "wb") as log:
        worker = Worker("base", sys.executable, tmp_path, log, dict(os.environ), timeout_s=120.0)
        try:
            worker.start()
        finally:
            worker.stop()
    assert list(worker.benchmarks) == ["bench_one.track_one"]
    assert worker.cuda_devices == torch.cuda.device_count()


def test_a_time_block_lasts_the_benchmarks_own_sample_time_where_that_is_longer(tmp_path):
    from devbench.compare.session import Worker

    def side(**listing):
        w = Worker("base", sys.executable, tmp_path, None, {})
        w.benchmarks = {name: {"sample_time": s} for name, s in listing.items()}
        return w

    a, b = side(x=0.2, y=0.05, z=None), side(x=0.2, y=0.3)
    assert runner.block_length("x", 0.05, a, b) == 0.2  # a microsecond class's own samples
    assert runner.block_length("y", 0.05, a, b) == 0.3  # one side's longer sample: both time that
    assert runner.block_length("x", 0.5, a, b) == 0.5  # --block-s longer still: it rules
    assert runner.block_length("z", 0.05, a, b) == 0.05 and runner.block_length("gone", 0.05, a, b) == 0.05


def test_turns_alternate_strictly_and_a_long_call_gets_fewer_pairs(monkeypatch):
    """A B A B ...: every block follows one of the other side (a side's second block in a row runs warm);
    the first side alternates between passes; the discarded first pair's time sizes the rest within the
    budget, and a first pair that alone outlasts it is kept (a stand-in clock: no timing here)."""
    calls: list[str] = []
    clock = [0.0]

    def fake_turn(worker, first=False):
        calls.append(worker)
        clock[0] += 0.5  # every block "lasts" half a second
        return {"A": 1.0, "B": 2.0}[worker]

    monkeypatch.setattr(session, "turn", fake_turn)
    monkeypatch.setattr(session.time, "monotonic", lambda: clock[0])
    assert session.paired_turns("A", "B", 4) == [(1.0, 2.0)] * 4  # (a, b) whichever went first
    assert calls == ["A", "B"] * 5 and all(x != y for x, y in zip(calls, calls[1:], strict=False))
    calls.clear()
    assert session.paired_turns("A", "B", 3, a_first=False) == [(1.0, 2.0)] * 3
    assert calls == ["B", "A"] * 4
    calls.clear()
    assert len(session.paired_turns("A", "B", 8, budget_s=2.5)) == 2  # a 1 s pair: 2 fit
    assert len(session.paired_turns("A", "B", 8, budget_s=5.0)) == 5
    calls.clear()
    # the first pair alone outlasts the budget: it is kept, and nothing runs again
    assert session.paired_turns("A", "B", 8, budget_s=0.1) == [(1.0, 2.0)] and calls == ["A", "B"]
    calls.clear()
    assert session.paired_turns("A", "B", 8, budget_s=0.1, a_first=False) == [(1.0, 2.0)] and calls == ["B", "A"]
    calls.clear()
    assert len(session.paired_turns("A", "B", 1, warm_up=False)) == 1 and calls == ["A", "B"]


def test_a_busy_host_is_told_to_set_the_thread_count_unless_it_did():
    from devbench.compare.run import busy_host_note

    note = busy_host_note(1.3, 2, None)
    assert "load 1.3 on 2 cores" in note and "DEVBENCH_THREADS" in note
    assert busy_host_note(0.4, 2, None) is None  # idle
    assert busy_host_note(3.0, 2, "1") is None  # the user chose
    assert busy_host_note(3.0, 1, None) is None  # one core: one thread already


def test_the_benchmark_processes_write_bytecode_and_read_their_own_selection(monkeypatch):
    """A pass starts fresh processes that import torch; PYTHONDONTWRITEBYTECODE (set on some CI images)
    would have each compile it from source again. DEVBENCH_BENCH is the worker's to set."""
    from devbench.compare.options import Options
    from devbench.compare.run import _worker_env

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("DEVBENCH_BENCH", "anything")
    env = _worker_env(Options(base="a", head="b", repo=Path("."), out=Path("o"), python=sys.executable))
    assert "PYTHONDONTWRITEBYTECODE" not in env and "DEVBENCH_BENCH" not in env
    assert env["DEVBENCH_BLOCKS"] == "1" and env["PYTHONUNBUFFERED"] == "1"


def test_a_change_anywhere_in_what_a_side_exports_is_not_an_a_a_run(tmp_path):
    """A slowdown planted in ``src/devbench/__init__.py`` (which every benchmark imports) was called slower under a
    note that said both sides ran the same benchmark code; a README is still not code."""
    from devbench.compare.export import benchmark_code

    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "src" / "devbench").mkdir(parents=True)
    (repo / "benchmarks" / "bench_a.py").write_text("def time_a():\n    pass\n")
    (repo / "src" / "devbench" / "__init__.py").write_text("")
    (repo / "asv.conf.json").write_text("{}")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("words\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "docs")
    docs = _git(repo, "rev-parse", "HEAD")
    (repo / "src" / "devbench" / "__init__.py").write_text("import time\ntime.sleep(0.001)\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "slower")
    slower = _git(repo, "rev-parse", "HEAD")
    assert benchmark_code(repo, first) == benchmark_code(repo, docs)
    assert benchmark_code(repo, docs) != benchmark_code(repo, slower)
    assert "src/devbench/__init__.py=" in benchmark_code(repo, slower)


DIES = """
import os
import signal

CALLS = [0]


def track_fine():
    return 1.0


track_fine.unit = "GB/s"


def track_dies():
    CALLS[0] += 1
    if CALLS[0] == 3:  # in its turns: an OOM kill, a segfault, a CUDA abort
        os.kill(os.getpid(), signal.SIGKILL)
    return 1.0


track_dies.unit = "GB/s"
"""


def test_a_process_that_dies_in_its_turns_fails_its_figure_and_the_compare_goes_on(tmp_path, capsys):
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench_k.py").write_text(DIES)
    (repo / "asv.conf.json").write_text(json.dumps({"version": 1, "project": "k", "benchmark_dir": "benchmarks"}))
    _git(repo, "init", "-q", "-b", "main")
    for text in ("one", "two"):
        (repo / "README").write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", text)
    code = main(["compare", "HEAD~1", "HEAD", "--repo", str(repo), "--python", sys.executable, "--out",
                 str(tmp_path / "out"), "--confidence", "0.5", "--min-passes", "2", "--max-passes", "2", "--pairs",
                 "4", "--measure-all"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "bench_k.track_dies : base: the process of bench_k.track_dies ended with -9" in out
    rows = _rows(tmp_path / "out" / "compare.csv")
    assert rows["bench_k.track_fine"]["verdict"] == "same" and rows["bench_k.track_dies"]["verdict"] != "same"


BETWEEN = """
import os
import signal


class Dies:
    def setup(self):
        with open(os.environ["PID_FILE"], "w") as f:  # the combination's process, killed by the test between turns
            f.write(str(os.getpid()))

    def track_value(self):
        return 1.0


class TornDown:
    def teardown(self):
        raise RuntimeError("tear-down failed after its figures")

    def track_value(self):
        return 2.0
"""


def test_a_process_dying_between_turns_or_after_closing_answers_each_request_once(tmp_path):
    from devbench.compare.session import Worker

    suite = tmp_path / "benchmarks"
    suite.mkdir()
    (suite / "__init__.py").write_text("")
    (suite / "bench_between.py").write_text(BETWEEN)
    pid_file = tmp_path / "pid"
    with open(tmp_path / "log", "wb") as log:
        worker = Worker("base", sys.executable, tmp_path, log, {**os.environ, "PID_FILE": str(pid_file)}, 120.0)
        try:
            worker.start()
            assert session.open_combination(worker, "bench_between.Dies.track_value", 0, 0.01).state == "ready"
            assert session.turn(worker, first=True) == 1.0
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # after its answer, before the next request
            with pytest.raises(session.BlockError, match="ended with -9"):
                session.turn(worker)
            session.close_combination(worker)  # the close is answered, not the turn's failure again
            # a tear-down that raises after ``closed``: the next combination still gets its own answers
            assert session.open_combination(worker, "bench_between.TornDown.track_value", 0, 0.01).state == "ready"
            assert session.turn(worker, first=True) == 2.0
            session.close_combination(worker)
            assert session.open_combination(worker, "bench_between.Dies.track_value", 0, 0.01).state == "ready"
            assert session.turn(worker, first=True) == 1.0
            session.close_combination(worker)
        finally:
            worker.stop()
    assert "dropped an answer to an earlier request" in (tmp_path / "log").read_text()


def test_a_confidence_is_printed_with_the_digits_it_has():
    from devbench.compare.record import percent

    assert [percent(c) for c in (0.99, 0.999, 0.975, 0.95)] == ["99%", "99.9%", "97.5%", "95%"]
