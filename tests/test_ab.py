"""devbench compare and calibrate end to end on a tiny asv project, run by asv itself.

Three commits: c1 sleeps 40 ms per call, c2 changes only a README (identical benchmark
code: an A/A pair), c3 sleeps 80 ms (a planted 2x slowdown). The verdicts rest on the
code each commit runs, never on a timing threshold in the test: 2x against a 5% floor.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import pytest

from devbench.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asv_fixture import MACHINE_FIELDS, _git, asv  # noqa: E402

SUITE = """
import time

SLEEP_MS = {sleep}


def setup(*params):
    # what devbench.suite.Benchmark does for the suite: probe the host when compare or calibrate asks
    from devbench import hostprobe

    if not params:
        hostprobe.record(hostprobe.asv_benchmark_name() or "unknown", "", "before")


def time_sleep():
    time.sleep(SLEEP_MS / 1e3)


def track_rate():
    # a track_ figure with samples, as devbench.suite.with_samples returns it
    return {{"samples": [1000 / SLEEP_MS * f for f in (0.98, 1.0, 1.02)], "number": 1}}


track_rate.unit = "GB/s"


def track_record():
    return 1.0


track_record.unit = "bool"


def track_sized(n):
    # a parameterized figure, the same on every commit (samples fixed, so its verdicts cannot vary)
    return {{"samples": [n * f for f in (0.98, 1.0, 1.02)], "number": 1}}


track_sized.unit = "GB/s"
track_sized.params = [1, 2]
track_sized.param_names = ["n"]
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ab")
    repo = tmp / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "__init__.py").write_text("")
    conf = {"version": 1, "project": "abfix", "repo": ".", "branches": ["main"], "benchmark_dir": "benchmarks",
            "results_dir": "results", "environment_type": "existing", "launch_method": "spawn"}  # fmt: skip
    (repo / "asv.conf.json").write_text(json.dumps(conf))
    (repo / ".gitignore").write_text("results/\nhtml/\nenv/\n")
    _git(repo, "init", "-q", "-b", "main")
    commits = []
    for sleep, readme in ((40, "one"), (40, "two"), (80, "two")):
        (repo / "benchmarks" / "bench_ab.py").write_text(SUITE.format(sleep=sleep))
        (repo / "README").write_text(readme)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"sleep {sleep}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    home = tmp / "home"
    home.mkdir()
    machine = {**MACHINE_FIELDS, "machine": "alpha", "gpu": "none", "gpu_count": "0"}
    (home / ".asv-machine.json").write_text(json.dumps({"alpha": machine, "version": 1}))
    return repo, home, commits


def _run(monkeypatch, project, *argv):
    repo, home, _ = project
    monkeypatch.setenv("HOME", str(home))
    # 4 rounds keep the test short; they give a 95% interval (the 99% default needs 5)
    common = ["--repo", str(repo), "--machine", "alpha", "--python", sys.executable, "--rounds", "4",
              "--confidence", "0.95"]  # fmt: skip
    return main([argv[0], *common, "--asv-dir", str(repo / ".asv"), *argv[1:]])


def _rows(path: Path) -> dict[str, dict[str, str]]:
    """compare.csv by figure: the benchmark, with its params when it has any"""
    with open(path, newline="") as f:
        return {r["benchmark"] + (f"({r['params']})" if r["params"] else ""): r for r in csv.DictReader(f)}


def test_track_figures_with_samples_keep_them_in_asv(project, tmp_path):
    """The contract behind devbench.suite.with_samples: asv computes stats and keeps the samples."""
    from asv.results import Results

    repo, home, commits = project
    out = asv(repo, home, "run", "-E", f"existing:{sys.executable}", "--set-commit-hash", commits[0],
              "--machine", "alpha", "--record-samples", "--bench", "track_rate")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = (repo / "results" / "alpha").glob(f"{commits[0][:8]}-*.json")
    res = Results.load(str(path))
    # the working tree holds c3 (80 ms): rate 12.5 per call
    assert res.get_result_value("bench_ab.track_rate", []) == [pytest.approx(12.5)]
    assert res.get_result_samples("bench_ab.track_rate", []) == [pytest.approx([12.25, 12.5, 12.75])]
    (stats,) = res.get_result_stats("bench_ab.track_rate", [])
    assert stats["q_25"] <= 12.5 <= stats["q_75"] and stats["ci_99_a"] < stats["ci_99_b"]


def test_planted_slowdown_is_slower_and_a_a_is_not_then_calibrate_learns(project, tmp_path, monkeypatch, capsys):
    _, _, (c1, c2, c3) = project
    planted = tmp_path / "planted"
    assert _run(monkeypatch, project, "compare", c1, c3, "--out", str(planted)) == 1
    rows = _rows(planted / "compare.csv")
    assert rows["bench_ab.time_sleep"]["verdict"] == "slower"
    assert rows["bench_ab.track_rate"]["verdict"] == "slower"  # GB/s went down
    assert float(rows["bench_ab.time_sleep"]["ratio"]) > 1.5
    assert "bench_ab.track_record" not in rows  # a record is not judged
    md = (planted / "compare.md").read_text()
    assert "| slower |" in md and "<details>" not in md.split("| slower |")[0]
    out = capsys.readouterr().out
    assert "round 4/4" in out and "2 slower" in out

    same = tmp_path / "aa"
    # every round of every figure: calibrate --from learns floors from it (below)
    assert _run(monkeypatch, project, "compare", c1, c2, "--out", str(same), "--all-rounds") == 0
    assert {r["verdict"] for r in _rows(same / "compare.csv").values()} <= {"same", "undecided"}

    # every process of a figure whose set-up probes has its probe beside its figure, the rest none
    import pandas as pd

    pp = pd.read_csv(same / "per-process.csv")
    probed = pp.groupby("benchmark")["host_probe_us"].apply(lambda v: bool(v.notna().all() and (v > 0).all()))
    assert probed["bench_ab.time_sleep"] and probed["bench_ab.track_rate"]
    assert pp.loc[pp["benchmark"] == "bench_ab.track_sized", "host_probe_us"].isna().all()
    assert "host: a 64x64 float32 product took" in (same / "compare.md").read_text()
    host = json.loads((same / "run.json").read_text())["host_probe"]
    assert host["processes"] == int(pp["host_probe_us"].notna().sum()) and set(host["sides"]) == {"base", "head"}

    # calibrate learns floors from the A/A compare, refuses the planted one
    assert _run(monkeypatch, project, "calibrate", "--from", str(same), "--out", str(tmp_path / "cal")) == 0
    noise = json.loads((project[0] / ".asv" / "noise" / "alpha.json").read_text())
    assert set(noise["figures"]) == {
        "bench_ab.time_sleep",
        "bench_ab.track_rate",
        "bench_ab.track_sized [n=1]",
        "bench_ab.track_sized [n=2]",
    }
    assert noise["false_positives_at_default"] == 0 and noise["rounds"] == 4
    assert _run(monkeypatch, project, "calibrate", "--from", str(planted), "--out", str(tmp_path / "x")) == 2
    assert "different benchmark code" in capsys.readouterr().err

    # a finished compare judged again with the learned floors, measuring nothing, says so
    again = tmp_path / "again"
    assert _run(monkeypatch, project, "compare", "--from", str(planted), "--out", str(again)) == 1
    assert "learned by devbench calibrate on alpha for 4 of 4 figures" in (again / "compare.md").read_text()
    assert _rows(again / "compare.csv")["bench_ab.time_sleep"]["verdict"] == "slower"

    # a figure that measured on base only (it failed on head) is not judged, and says so
    one_side = tmp_path / "one-side"
    one_side.mkdir()
    (one_side / "run.json").write_text((planted / "run.json").read_text())
    pp = pd.read_csv(planted / "per-process.csv", keep_default_na=False)
    pp = pp[~((pp["benchmark"] == "bench_ab.track_rate") & (pp["side"] == "head"))]
    pp.to_csv(one_side / "per-process.csv", index=False)
    capsys.readouterr()
    judged = tmp_path / "judged"
    assert _run(monkeypatch, project, "compare", "--from", str(one_side), "--out", str(judged)) == 1
    row = _rows(judged / "compare.csv")["bench_ab.track_rate"]
    assert row["verdict"] == "undecided" and row["n_head"] == "0" and row["note"].startswith("no result on head")
    assert "not judged (1):" in capsys.readouterr().out
    md = (judged / "compare.md").read_text()
    assert "**Not judged (1)**" in md and "- bench_ab.track_rate: no result on head" in md

    # every process records its benchmark's asv version; where head's differs (its code or work_version
    # changed), the sides timed different work: the planted 2x is then not judged, and nothing is slower
    pp = pd.read_csv(planted / "per-process.csv", keep_default_na=False)
    assert (pp["version"].str.len() == 64).all()
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "run.json").write_text((planted / "run.json").read_text())
    head_sleep = (pp["benchmark"] == "bench_ab.time_sleep") & (pp["side"] == "head")
    pp.loc[head_sleep, "version"] = pp.loc[head_sleep, "version"] + "-work2"
    pp.to_csv(changed / "per-process.csv", index=False)
    rejudged = tmp_path / "rejudged"
    assert _run(monkeypatch, project, "compare", "--from", str(changed), "--out", str(rejudged)) == 1
    rows = _rows(rejudged / "compare.csv")
    assert rows["bench_ab.time_sleep"]["verdict"] == "undecided"
    assert rows["bench_ab.time_sleep"]["note"].startswith("benchmark changed: its asv version differs")
    assert float(rows["bench_ab.time_sleep"]["ratio"]) > 1.5  # the figures are still shown
    assert rows["bench_ab.track_rate"]["verdict"] == "slower"  # its version agrees: judged as before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "nosuchbranch", "HEAD"], "'nosuchbranch' is not a commit"),
        (["compare", "HEAD~2", "HEAD", "--bench", "("], "is not a regular expression"),
        (["compare", "HEAD~2", "HEAD", "--rounds", "1"], "--rounds must be at least 2"),
        (["compare", "HEAD~2", "HEAD", "--confidence", "0.99"], "--rounds 4 cannot give a 99% interval"),
        (["calibrate", "--from", "/nonexistent"], "no run.json"),
        (["compare"], "name the BASE commit"),
        (["compare", "HEAD~2", "HEAD", "--extra-rounds", "-1"], "--extra-rounds must be >= 0"),
    ],
)
def test_bad_input_exits_2_with_the_reason(project, monkeypatch, capsys, argv, message):
    assert _run(monkeypatch, project, *argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_compare_leaves_the_time_twins_out_unless_asked():
    """asv matches --bench against "name(params)" for parameterized benchmarks; the twins go either way."""
    import re

    from devbench.ab import bench_pattern
    from devbench.spec import TWINS

    names = [
        "bench_matmul.MatmulSquare.time_matmul('cpu', 'float32', 16)",
        "bench_matmul.MatmulSquare.track_tflops('cpu', 'float32', 16)",
        "bench_transfer.DeviceCopy.time_copy('cpu', 4096)",
        "bench_transfer.DeviceCopy.track_gbps_copied('cpu', 4096)",
        "bench_logging.LogNorms.time_loop('cpu', 'periodic', 100, 100)",
        "bench_devices.TryGpu.time_try_all_gpus",
    ]

    def chosen(bench, twins):
        pattern = bench_pattern(bench, twins)
        return [n.split("(")[0].rsplit(".", 1)[-1] for n in names if pattern is None or re.search(pattern, n)]

    assert chosen(None, False) == ["track_tflops", "track_gbps_copied", "time_loop", "time_try_all_gpus"]
    assert chosen("MatmulSquare|DeviceCopy", False) == ["track_tflops", "track_gbps_copied"]
    assert chosen("MatmulSquare", True) == ["time_matmul", "track_tflops"]
    assert chosen(None, True) == [n.split("(")[0].rsplit(".", 1)[-1] for n in names]
    # a twin and the figure judged instead are of one benchmark class, and that figure is judged
    assert all(t.rsplit(".", 1)[0] == v.rsplit(".", 1)[0] and v not in TWINS for t, v in TWINS.items())
    collectives = [f"bench_collectives.Collectives.{t}('gloo', 2, 'all_reduce', 4096)"
                   for t in ("track_time", "track_algbw", "track_busbw")]  # fmt: skip
    assert [n for n in collectives if re.search(bench_pattern("Collectives", False), n)] == collectives[:1]


def test_compare_leaves_out_records_and_without_cuda_the_gpu_combinations():
    """Records are never judged; on a machine without CUDA a 'cuda' or 'nccl' combination would only skip."""
    import re

    from devbench.ab import bench_pattern

    names = [
        "bench_matmul.MatmulSquare.track_tflops('cpu', 'float32', 16)",
        "bench_matmul.MatmulSquare.track_tflops('cuda', 'float32', 16)",
        "bench_collectives.Collectives.track_time('gloo', 2, 'all_reduce', 4096)",
        "bench_collectives.Collectives.track_time('nccl', 2, 'all_reduce', 4096)",
        "bench_devices.RunInfo.track_gpu_count",
        "bench_transfer.PeerCopy.track_peer_access('0->1', 4096)",
        "bench_devices.TryGpu.time_try_gpu",
    ]

    def chosen(pattern):
        return [n for n in names if re.search(pattern, n)]

    cpu, gloo, nothing_cuda = names[0], names[2], names[6]
    assert chosen(bench_pattern(None, False, gpu=False)) == [cpu, gloo, nothing_cuda]
    assert chosen(bench_pattern(None, True, gpu=True)) == [cpu, names[1], gloo, names[3], nothing_cuda]
    assert chosen(bench_pattern("Collectives", False, gpu=False)) == [gloo]


def test_cuda_is_asked_of_the_benchmarks_python_and_unknown_leaves_nothing_out(tmp_path):
    import torch

    from devbench.ab import has_cuda

    assert has_cuda(sys.executable) == (torch.cuda.device_count() > 0)
    assert has_cuda(str(tmp_path / "no-such-python")) is True
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    assert has_cuda(str(broken)) is True


def test_extra_rounds_go_to_the_figures_that_lean_and_only_those(project, tmp_path, monkeypatch, capsys):
    """The plumbing of --extra-rounds with asv itself: which figures lean is decided by ``ab.leaning``
    (tested on its own below), stubbed here so that the test does not depend on timings. One
    parameter combination of a benchmark gets the extra rounds, its other combination none."""
    from devbench import ab

    _, _, (c1, c2, _) = project
    asked = []

    def lean(table):
        asked.append(sorted(table["benchmark"]))
        return ["bench_ab.time_sleep", "bench_ab.track_sized(2)"]

    monkeypatch.setattr(ab, "leaning", lean)
    monkeypatch.setattr(ab, "settled_figures", lambda *a, **k: {})  # no figure stops early here (see below)
    out = tmp_path / "extra"
    assert _run(monkeypatch, project, "compare", c1, c2, "--out", str(out), "--extra-rounds", "2") == 0
    # judged once, after the first 4 rounds
    assert asked == [["bench_ab.time_sleep", "bench_ab.track_rate", "bench_ab.track_sized", "bench_ab.track_sized"]]
    counts = {b: (r["n_base"], r["n_head"]) for b, r in _rows(out / "compare.csv").items()}
    assert counts == {"bench_ab.time_sleep": ("6", "6"), "bench_ab.track_rate": ("4", "4"),
                      "bench_ab.track_sized(n=1)": ("4", "4"), "bench_ab.track_sized(n=2)": ("6", "6")}  # fmt: skip
    run = json.loads((out / "run.json").read_text())
    assert run["rounds"] == 4 and run["extra_rounds"] == 2
    import torch

    assert run["cuda"] is (torch.cuda.device_count() > 0)  # without CUDA, the GPU combinations were left out
    assert run["extra_bench"] == ["bench_ab.time_sleep", "bench_ab.track_sized(2)"]
    assert "2 more rounds per side for the figures" in (out / "compare.md").read_text()
    assert "round 6/6" in capsys.readouterr().out


def test_settled_figures_run_no_more_rounds_and_say_so(project, tmp_path, monkeypatch, capsys):
    """The plumbing of stopping early with asv itself: which figures are settled is decided by
    ``ab.settled_figures`` (tested on its own below and in test_verdict), stubbed here so that the test
    does not depend on timings. One figure settles after 2 rounds per side, one more in the extra rounds."""
    from devbench import ab

    _, _, (c1, c2, _) = project
    calls = []

    def settled(per_process, a, b, floors, confidence, left, lean):
        done = int(per_process["round"].max()) + 1
        calls.append((done, left, lean))
        out = {"bench_ab.track_sized(1)": 2} if done >= 2 else {}
        return {**out, "bench_ab.time_sleep": 5} if done >= 5 else out

    monkeypatch.setattr(ab, "settled_figures", settled)
    monkeypatch.setattr(ab, "leaning", lambda table: ["bench_ab.time_sleep", "bench_ab.track_sized(2)"])
    out = tmp_path / "stopped"
    assert _run(monkeypatch, project, "compare", c1, c2, "--out", str(out), "--extra-rounds", "2") == 0
    # asked after rounds 2 and 3 of the first 4 (the second may keep what leans), then after round 5 of 6
    assert calls == [(2, 2, True), (3, 1, True), (5, 1, False)]
    rows = _rows(out / "compare.csv")
    counts = {b: (r["n_base"], r["n_head"], r["stopped_after"]) for b, r in rows.items()}
    assert counts == {
        "bench_ab.time_sleep": ("5", "5", "5"),
        "bench_ab.track_rate": ("4", "4", ""),
        "bench_ab.track_sized(n=1)": ("2", "2", "2"),
        "bench_ab.track_sized(n=2)": ("6", "6", ""),
    }
    assert rows["bench_ab.track_sized(n=1)"]["verdict"] == "undecided"  # two rounds give no 95% interval
    run = json.loads((out / "run.json").read_text())
    assert run["stopped"] == {"bench_ab.track_sized(1)": 2, "bench_ab.time_sleep": 5} and not run["all_rounds"]
    assert "2 figure(s) stopped early" in (out / "compare.md").read_text()
    text = capsys.readouterr().out
    assert "1 figure(s) settled after 2 rounds per side" in text and "stopped after 2" in text
    # such a compare lacks rounds a floor is learned from
    assert _run(monkeypatch, project, "calibrate", "--from", str(out), "--out", str(tmp_path / "cal")) == 2
    assert "stopped 2 figures early" in capsys.readouterr().err


def test_every_figure_settled_ends_the_rounds(project, tmp_path, monkeypatch, capsys):
    from devbench import ab

    _, _, (c1, c2, _) = project
    monkeypatch.setattr(ab, "settled_figures", lambda per_process, *a, **k: {
        ab.figure_name(b, p): 2 for b, p in zip(per_process["benchmark"], per_process["params"], strict=True)
    })  # fmt: skip
    out = tmp_path / "all-settled"
    assert _run(monkeypatch, project, "compare", c1, c2, "--out", str(out), "--extra-rounds", "0") == 0
    text = capsys.readouterr().out
    assert "every figure is settled: no more rounds" in text and "round 3/4" not in text
    assert {r["n_base"] for r in _rows(out / "compare.csv").values()} == {"2"}


def test_settled_figures_keep_what_leans_unless_told():
    import pandas as pd

    from devbench.ab import settled_figures

    def frame(figures):
        rows = []
        for (bench, params), (base, head) in figures.items():
            rows += [{"side": "base", "round": i, "benchmark": bench, "params": params, "unit": "seconds",
                      "value": v} for i, v in enumerate(base)]  # fmt: skip
            rows += [{"side": "head", "round": i, "benchmark": bench, "params": params, "unit": "seconds",
                      "value": v} for i, v in enumerate(head)]  # fmt: skip
        return pd.DataFrame(rows)

    pp = frame({
        ("a.time_x", ""): ([1.0, 1.3, 1.1], [1.2, 1.3, 0.9]),  # straddles a 10% floor, estimate 0
        ("a.time_v", ""): ([1.0, 1.2, 1.0], [1.07, 1.3, 0.9]),  # straddles, estimate +7%: beyond half the floor
        ("a.time_y", "n=1"): ([1.0, 1.01, 0.99], [1.0, 1.02, 1.0]),  # inside: may end same
        ("a.time_z", ""): ([1.0, 1.5, 1.1], [1.8, 1.7, 1.4]),  # straddles, estimate beyond: leans
        ("a.time_w", ""): ([1.0, 1.02, 1.01], [2.0, 2.1, 2.05]),  # beyond: may end slower
        ("a.track_rec", ""): ([1.0, 2.0, 1.0], [2.0, 1.0, 2.0]),  # no direction: a record, never judged
    })  # fmt: skip
    pp.loc[pp["benchmark"] == "a.track_rec", "unit"] = "bool"
    floors = {"a.time_x": 0.1, "a.time_v": 0.1, "a.time_y [n=1]": 0.1, "a.time_z": 0.1, "a.time_w": 0.1}
    assert settled_figures(pp, "base", "head", floors, 0.99, 2, lean=True) == {"a.time_x": 3}
    everything = {"a.time_x": 3, "a.time_v": 3, "a.time_z": 3}
    assert settled_figures(pp, "base", "head", floors, 0.99, 2, lean=False) == everything
    # a wider floor holds a.time_x's differences: it may still end the same
    assert settled_figures(pp, "base", "head", {**floors, "a.time_x": 0.6}, 0.99, 2, lean=True) == {}
    # a figure whose benchmark changed between the sides is never judged: settled at once, even one
    # that would end slower (a.time_w), while the rest are as before
    pp["version"] = "v1"
    pp.loc[(pp["benchmark"] == "a.time_w") & (pp["side"] == "head"), "version"] = "v1-work2"
    assert settled_figures(pp, "base", "head", floors, 0.99, 2, lean=True) == {"a.time_x": 3, "a.time_w": 3}


def test_a_figure_leans_when_undecided_with_its_estimate_beyond_the_floor():
    import pandas as pd

    from devbench.ab import leaning, names_pattern

    table = pd.DataFrame({
        "benchmark": ["a.x", "a.y", "b.z", "c.w", "c.w", "d.v"],
        "verdict": ["undecided", "undecided", "slower", "undecided", "undecided", "undecided"],
        "ratio": [1.8, 1.05, 2.0, 0.6, 1.0, float("nan")],
        "floor": [0.5, 0.1, 0.1, 0.5, 0.5, 0.1],
    })  # fmt: skip
    # a.x: 1.8 beyond a 50% floor; a.y inside 10%; b.z decided; c.w: 0.6 is 1/1.67, beyond 50%; d.v: no estimate
    assert leaning(table.assign(params="")) == ["a.x", "c.w"]
    # a figure not judged (one side only, or its benchmark changed) gets no extra rounds however it leans
    note = ["benchmark changed: its asv version differs", "", "", "", "", ""]
    assert leaning(table.assign(params="", note=note)) == ["c.w"]
    params = ["device=cpu, n=16", "n=1", "n=2", "n=1", "n=2", "n=1"]
    assert leaning(table.assign(params=params)) == ["a.x(cpu, 16)", "c.w(1)"]
    # asv's names: name(repr(param), ...); a bare name selects every combination, a figure only its own
    pattern = names_pattern(["a.x(cpu, 16)", "c.w(1)", "e"])
    names = ["a.x('cpu', 16)", "a.x('cpu', 160)", "a.x('gpu', 16)", "a.xy('cpu', 16)", "b.a.x('cpu', 16)",
             "c.w(1)", "c.w(1, 2)", "c.w(11)", "e", "e(3)", "ee"]  # fmt: skip
    assert [n for n in names if re.search(pattern, n)] == ["a.x('cpu', 16)", "c.w(1)", "e", "e(3)"]


def test_a_run_that_selects_some_collectives_sweeps_only_those(monkeypatch):
    """suite.selected reads the --bench pattern compare gives each round, as asv matches it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import bench_collectives

    from devbench.ab import names_pattern
    from devbench.suite import SELECT_ENV

    monkeypatch.delenv(SELECT_ENV, raising=False)
    assert bench_collectives._read("gloo", 2, "broadcast", 4096)
    name = "bench_collectives.Collectives.track_time"
    monkeypatch.setenv(SELECT_ENV, names_pattern([f"{name}(gloo, 2, all_reduce, 16777216)"]))
    chosen = [(b, w, op, n) for b in ("gloo", "nccl") for w in (2, 4) for op in bench_collectives.OPS
              for n in bench_collectives.SIZES if bench_collectives._read(b, w, op, n)]  # fmt: skip
    assert chosen == [("gloo", 2, "all_reduce", 16777216)]


def test_rounds_after_the_first_run_only_the_figures_that_measured(monkeypatch, tmp_path, capsys):
    """A figure that skipped (or failed) on both sides in the first round is not run again."""
    import pandas as pd

    from devbench import ab

    ran = []
    monkeypatch.setattr(ab, "run_round", lambda side, results, python, bench, *a, **k: ran.append((side.name, bench)))
    first = pd.DataFrame({"benchmark": ["m.a", "m.b", "m.c"], "params": ["n=1", "n=2", ""]})
    monkeypatch.setattr(ab, "collect", lambda work, sides, rounds: first)
    sides = [ab.Side(n, n, "0" * 40, tmp_path, tmp_path) for n in ("base", "head")]
    plan = ab.Plan(tmp_path, tmp_path, sides, 3, sys.executable, "^m\\.", None, ab.REPEAT, ab.BLOCKS, tmp_path / "log")
    ab._run_rounds(plan)
    assert [name for name, _ in ran] == ["base", "head", "head", "base", "base", "head"]  # ABBA
    assert {bench for _, bench in ran[:2]} == {"^m\\."}
    later = {bench for _, bench in ran[2:]}
    assert len(later) == 1
    (pattern,) = later
    names = ["m.a(1)", "m.a(2)", "m.b(2)", "m.b(1)", "m.c", "m.d", "m.d(1)"]
    assert [n for n in names if re.search(pattern, n)] == ["m.a(1)", "m.b(2)", "m.c"]
    assert "3 figures measured in the first round" in capsys.readouterr().out


def test_a_twin_gets_the_floor_of_the_figure_judged_in_its_place():
    import pandas as pd

    from devbench.ab import _with_twins

    time = "bench_collectives.Collectives.track_time"
    learned = pd.DataFrame({"benchmark": [time, "m.other"], "params": ["op=all_reduce", ""]})
    figures = {f"{time} [op=all_reduce]": {"floor": 0.3}, "m.other": {"floor": 0.1}}
    out = _with_twins(figures, learned)
    for twin in ("track_algbw", "track_busbw"):
        key = f"bench_collectives.Collectives.{twin} [op=all_reduce]"
        assert out[key] == {"floor": 0.3, "twin_of": f"{time} [op=all_reduce]"}
    assert len(out) == 4 and out["m.other"] == {"floor": 0.1}


def test_calibrate_measures_twice_and_can_learn_again_from_its_own_output(project, tmp_path, monkeypatch, capsys):
    _, _, (c1, _, _) = project
    cal = tmp_path / "cal"
    assert _run(monkeypatch, project, "calibrate", c1, "--bench", "time_sleep|track_rate", "--out", str(cal)) == 0
    out = capsys.readouterr().out
    assert "round 4/4: B" in out and "host: a 64x64 float32 product took" in out
    run = json.loads((cal / "run.json").read_text())
    assert run["calibrate"] and run["sides"]["base"] == run["sides"]["head"] and run["sides"]["base"]["sha"] == c1
    noise_file = project[0] / ".asv" / "noise" / "alpha.json"
    first = json.loads(noise_file.read_text())
    assert set(first["figures"]) == {"bench_ab.time_sleep", "bench_ab.track_rate"}
    assert first["host_probe"]["processes"] == 16 and first["rounds"] == 4

    # learned again from the kept calibration, every process judged: the same processes, so the same
    # floors when none was slowed, and never fewer processes behind them
    again = tmp_path / "again"
    assert _run(monkeypatch, project, "calibrate", "--from", str(cal), "--keep-slowed", "--out", str(again)) == 0
    second = json.loads(noise_file.read_text())
    assert second["source"] == "a calibration kept in cal/" and second["host_probe"]["left_out"] == 0
    assert second["host_probe"]["kept_because"] == "--keep-slowed"
    if first["host_probe"]["left_out"] == 0:
        assert second["figures"] == first["figures"]


def test_sigterm_stops_the_run_kills_asv_and_leaves_nothing(project, tmp_path, monkeypatch, capsys):
    """A kill (or a CI timeout) mid-round: exit 143, the running asv is stopped, the work folder is
    removed and no output is written, as on Ctrl-C; the previous SIGTERM handler is back afterwards."""
    import os
    import signal
    import tempfile
    import threading

    from devbench import ab

    _, _, (c1, c2, _) = project
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the work folder is made
    real, calls = ab.run_round, []

    def second_round_killed(*args, **kwargs):
        calls.append(args[0].name)
        if len(calls) == 2:  # the head's first round: the signal lands while its asv runs (far over 0.1 s)
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
        return real(*args, **kwargs)

    monkeypatch.setattr(ab, "run_round", second_round_killed)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "killed"
    assert _run(monkeypatch, project, "compare", c1, c2, "--out", str(out)) == 143
    assert "terminated; nothing written" in capsys.readouterr().err
    assert len(calls) == 2 and not out.exists()
    assert not list(scratch.glob("devbench-ab-*")), "the work folder was left behind"
    assert signal.getsignal(signal.SIGTERM) is before
