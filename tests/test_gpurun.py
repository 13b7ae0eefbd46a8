"""devbench gpu-run: the plan, its budget rule, and the whole run end to end on the CPU (GPU points skipped)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from devbench.gpu import gpurun, plantext
from devbench.gpu import plan as P
from devbench.gpu.gpurun import selection_regex

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asv_fixture import _git, run_group, terminate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

NO_GPU = P.Costs(launch_s=0.1, cuda_context_s=0.0, asv_call_s=5.0, gpus=0)
ONE_GPU = P.Costs(launch_s=0.1, cuda_context_s=0.5, asv_call_s=5.0, gpus=1)


def _bench(name, params, names, **attrs):
    return {"name": name, "params": [[repr(v) for v in p] for p in params], "param_names": names, **attrs}


def _listing():
    """Two families as the worker lists them: a matmul grid with headline points, a copy that needs 2 GPUs."""
    benches = [
        _bench("bench_m.Mat.track_tflops", [["cpu", "cuda"], [64, 1024, 8192]], ["device", "n"],
               headline=[{"device": ["cuda"], "n": [8192]}], plan_s=1.0, plan_setup_s=0.4),
        _bench("bench_m.Mat.time_mm", [["cpu", "cuda"], [64, 1024, 8192]], ["device", "n"],
               headline=[{"device": ["cuda"], "n": [8192]}], repeat=[3, 40, 2.0], sample_time=0.05, warmup_time=0.0),
        _bench("bench_p.Peer.track_gbps", [["0->1"], [1, 2]], ["route", "nbytes"], plan_gpus=2),
        _bench("bench_p.Info.track_count", [], []),
    ]  # fmt: skip
    return {b["name"]: b for b in benches}


def _all(_selector):
    return True


def test_a_time_benchmark_samples_as_asv_does_and_a_track_one_as_declared():
    listing = _listing()
    assert P.sample_s(listing["bench_m.Mat.time_mm"]) == pytest.approx(2.0)  # min(2.0 s, 40 x 0.05 s)
    assert P.sample_s(listing["bench_m.Mat.track_tflops"]) == 1.0
    assert P.sample_s(listing["bench_p.Info.track_count"]) == P.TRACK_S
    assert P.sample_s({"name": "m.C.time_x", "repeat": 0}) == pytest.approx(0.1 + min(20.0, 10 * 0.01))


def test_headline_points_are_tier_0_and_points_needing_more_gpus_are_skipped():
    plan = P.make_plan(_listing(), _all, ONE_GPU, budget_s=1000, reserve_s=0)
    by = {(p.benchmark, p.label): p for p in plan.points}
    assert by[("bench_m.Mat.track_tflops", "device=cuda, n=8192")].tier == 0
    assert by[("bench_m.Mat.track_tflops", "device=cpu, n=8192")].tier == 1
    peer = by[("bench_p.Peer.track_gbps", "route=0->1, nbytes=1")]
    assert peer.state == "skip" and peer.reason == "needs 2 GPU(s), this machine has 1"
    gpu = by[("bench_m.Mat.track_tflops", "device=cuda, n=64")]
    assert gpu.estimate_s == pytest.approx(0.1 + 0.5 + 0.4 + 1.0)  # launch, CUDA context, set-up, figure
    assert by[("bench_m.Mat.track_tflops", "device=cpu, n=64")].estimate_s == pytest.approx(0.1 + 0.4 + 1.0)
    assert not plan.dropped()
    without = P.make_plan(_listing(), _all, NO_GPU, budget_s=1000, reserve_s=0)
    assert {p.reason for p in without.points if p.state == "skip"} == {"no CUDA here"}


def test_rounds_multiply_each_point_and_a_bad_headline_is_named():
    one = P.make_plan(_listing(), _all, NO_GPU, 1000, 0, rounds=1)
    two = P.make_plan(_listing(), _all, NO_GPU, 1000, 0, rounds=2)
    assert two.points[0].estimate_s == pytest.approx(2 * one.points[0].estimate_s)
    bad = _listing()
    bad["bench_m.Mat.time_mm"]["headline"] = [{"size": [1]}]
    with pytest.raises(ValueError, match="headline names 'size', which is not a parameter"):
        P.make_plan(bad, _all, NO_GPU, 1000, 0)


def test_the_budget_drops_tier_1_first_in_turns_and_never_a_whole_family():
    listing = _listing()
    full = P.make_plan(listing, _all, ONE_GPU, budget_s=1000, reserve_s=0)
    tier0 = full.estimate_s(0)
    # room for tier 0 and one more point: one of tier 1 is kept, the rest dropped, every family keeps points
    one_more = max(p.estimate_s for p in full.kept(1)) + NO_GPU.stage_call_s
    plan = P.make_plan(listing, _all, ONE_GPU, budget_s=tier0 + one_more + 0.01, reserve_s=0)
    assert all(p.state == "run" for p in plan.points if p.tier == 0 and p.state != "skip")
    assert len(plan.kept(1)) == 1 and plan.dropped()
    assert plan.kept(1)[0].rank == 0  # the first of a benchmark's tier-1 points goes first
    assert plan.estimate_s() <= tier0 + one_more + 0.01
    # a budget below tier 0: each benchmark still runs its first point, and the plan says what went
    tiny = P.make_plan(listing, _all, ONE_GPU, budget_s=1.0, reserve_s=0)
    kept = {p.benchmark for p in tiny.kept()}
    assert kept == {"bench_m.Mat.track_tflops", "bench_m.Mat.time_mm", "bench_p.Info.track_count"}
    text = plantext.format_plan(tiny)
    assert "dropped by the budget" in text and "bench_m.Mat.time_mm: " in text
    assert "needs 2 GPU(s), this machine has 1" in text


def test_a_replan_with_what_tier_0_cost_keeps_fewer_tier_1_points():
    plan = P.make_plan(_listing(), _all, ONE_GPU, budget_s=1000, reserve_s=0)
    before = len(plan.kept(1))
    room = plan.estimate_s(1)
    P.fit(plan, room, tiers=(1,), scale=1.0)
    assert len(plan.kept(1)) == before  # as much room as it needs: all kept
    P.fit(plan, room, tiers=(1,), scale=2.0)  # tier 0 took twice its estimate: about half of tier 1 fits
    assert 0 < len(plan.kept(1)) < before
    assert plan.estimate_s(1) * 2.0 <= room
    assert all(p.state == "run" for p in plan.points if p.tier == 0 and p.state != "skip")
    # without a GPU the families' tier-0 points cannot run: each keeps its first tier-1 point however short
    cpu = P.make_plan(_listing(), _all, NO_GPU, budget_s=1000, reserve_s=0)
    P.fit(cpu, 0.0, tiers=(1,))
    assert {p.benchmark for p in cpu.kept(1)} == {"bench_m.Mat.track_tflops", "bench_m.Mat.time_mm"}


def test_a_setup_cache_priced_per_combination_counts_each_kept_one_once_and_worlds_need_their_ranks():
    search = _bench("bench_a.Ach.track_tflops", [["cpu", "cuda"], ["float32", "bfloat16"], ["burst", "sustained"]],
                    ["device", "dtype", "run"], setup_cache=True, plan_s=1.0, plan_setup_s=0.0,
                    plan_cache_s={"per": ["device", "dtype"], "s": {"cpu": 70.0, "cuda": 50.0}})
    worlds = _bench("bench_c.Coll.track_busbw", [["gloo", "nccl"], [2, 4], ["all_reduce"]], ["backend", "world", "op"],
                    setup_cache=True, plan_s=0.0, plan_setup_s=0.0,
                    plan_cache_s={"per": ["backend", "world"], "s": {"gloo": 20.0, "nccl": 15.0}},
                    plan_needs=[{"where": {"backend": ["gloo"]}, "cores_from": "world"},
                                {"where": {"backend": ["nccl"]}, "gpus_from": "world"}])  # fmt: skip
    costs = P.Costs(launch_s=0.0, cuda_context_s=0.0, asv_call_s=0.0, gpus=1, gpu_setup_s=2.0, cores=2)
    plan = P.make_plan({b["name"]: b for b in (search, worlds)}, _all, costs, budget_s=10_000, reserve_s=0)
    # four searches (two devices x two dtypes), each once for its two runs; 8 figures of 1 s
    searched = [p for p in plan.kept() if p.benchmark == "bench_a.Ach.track_tflops"]
    assert len(searched) == 8 and {p.unit_s for p in searched} == {70.0, 50.0}
    states = {p.label: (p.state, p.reason) for p in plan.points if p.benchmark == "bench_c.Coll.track_busbw"}
    assert states["backend=gloo, world=2, op=all_reduce"] == ("run", "")
    assert states["backend=gloo, world=4, op=all_reduce"] == ("skip", "needs 4 cores, this machine has 2")
    assert states["backend=nccl, world=2, op=all_reduce"] == ("skip", "needs 2 GPU(s), this machine has 1")
    # one gloo world of 20 s, four searches, eight figures
    assert plan.estimate_s() == pytest.approx(20.0 + 2 * 70.0 + 2 * 50.0 + 8 * 1.0)
    # a budget below one search and one world: each benchmark's first point, priced with its unit, and no more
    small = P.make_plan({b["name"]: b for b in (search, worlds)}, _all, costs, budget_s=80.0, reserve_s=0)
    kept = [p.label for p in small.kept()]
    assert kept == ["device=cpu, dtype=float32, run=burst", "backend=gloo, world=2, op=all_reduce"]
    assert small.estimate_s() == pytest.approx(70.0 + 1.0 + 20.0)


def test_a_gpu_point_without_its_own_setup_figure_pays_the_probed_gpu_setup():
    costs = P.Costs(launch_s=0.1, cuda_context_s=0.5, asv_call_s=5.0, gpus=1, gpu_setup_s=3.0)
    listing = {"bench_x.X.time_a": _bench("bench_x.X.time_a", [["cpu", "cuda"]], ["device"], repeat=[1, 1, 1.0],
                                          sample_time=1.0, warmup_time=0.0)}  # fmt: skip
    by = {p.label: p for p in P.make_plan(listing, _all, costs, 1000, 0).points}
    assert by["device=cuda"].estimate_s == pytest.approx(0.1 + 0.5 + P.SETUP_S + 3.0 + 1.0)
    assert by["device=cpu"].estimate_s == pytest.approx(0.1 + P.SETUP_S + 1.0)


def test_a_declared_skip_is_not_priced_and_the_base_class_raises_its_reason():
    from devbench.engine.suite import Benchmark, instrumented

    skips = [{"where": {"device": ["cpu"], "n": [8192]}, "reason": "the CPU curve stops at 4096"}]
    listing = {"bench_x.X.time_a": _bench("bench_x.X.time_a", [["cpu", "cuda"], [1024, 8192]], ["device", "n"],
                                          skips=skips)}  # fmt: skip
    by = {p.label: p for p in P.make_plan(listing, _all, ONE_GPU, 1000, 0).points}
    assert (by["device=cpu, n=8192"].state, by["device=cpu, n=8192"].reason) == ("skip", "the CPU curve stops at 4096")
    assert by["device=cuda, n=8192"].state == by["device=cpu, n=1024"].state == "run"

    @instrumented
    class X(Benchmark):
        params = [["cpu", "cuda"], [1024, 8192]]
        param_names = ["device", "n"]

        def setup(self, device, n):
            self.ran = True

        def teardown(self, device, n):
            self.torn = True

    X.skips = skips
    skipped = X()
    with pytest.raises(NotImplementedError, match="the CPU curve stops at 4096"):
        skipped.setup("cpu", 8192)
    skipped.teardown("cpu", 8192)  # asv tears down after a skip: the class's own never runs, as its setup did not
    assert not hasattr(skipped, "torn")
    bench = X()
    bench.setup("cpu", 1024)
    assert bench.ran


def test_the_selection_regex_selects_exactly_the_kept_points_in_asvs_names():
    plan = P.make_plan(_listing(), _all, ONE_GPU, budget_s=20, reserve_s=0)
    regex = re.compile(selection_regex(plan.kept()))
    for p in plan.points:
        assert bool(regex.search(p.selector)) == (p.state == "run"), p.selector
    assert regex.search("bench_m.Mat.track_tflops('cuda', 8192)")
    assert not regex.search("bench_m.Mat.track_tflops('cuda', 81920)")
    bare = [p for p in plan.points if not p.values]
    assert bare and re.search(selection_regex(bare), "bench_p.Info.track_count")  # asv's name without params
    assert not re.search(selection_regex(bare), "bench_p.Info.track_count()")


def test_a_whole_nodes_selection_passes_as_one_argument():
    """Linux caps one argument at 128 KiB (MAX_ARG_STRLEN): an 8-GPU node's 1,446 points, each named whole,
    made 113 KB of it. Each benchmark's name is written once."""
    name = "bench_collectives.Collectives.track_busbw_with_a_long_name"
    points = [P.Point(f"{name}{k}", i, ("'nccl'", str(w), f"'all_reduce_{op}'", str(4096 << i)),
                      ("backend", "world", "op", "nbytes"), 1, i, 1.0)
              for k in range(10) for w in (2, 4, 8) for op in range(6) for i in range(8)]  # fmt: skip
    regex = selection_regex(points)
    assert len(points) > 1400 and len(regex) < 0.6 * sum(len(p.selector) + 1 for p in points) < 131072
    compiled = re.compile(regex)
    assert all(compiled.search(p.selector) for p in points)
    assert not compiled.search(f"{name}0('nccl', 16, 'all_reduce_0', 4096)")


def _project(tmp: Path) -> Path:
    """The suite as a repository of its own (asv reads commits from git), run in this Python."""
    repo = tmp / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "asv.conf.json", repo)
    shutil.copytree(ROOT / "benchmarks", repo / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "suite")
    return repo


def _gpu_run(tmp_path, repo, *argv, validate=False, tests=False, tmpdir=None, extra=None):
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1",
           **({"TMPDIR": str(tmpdir)} if tmpdir else {}), **(extra or {})}  # fmt: skip
    cmd = [sys.executable, "-m", "devbench.cli", "gpu-run", "--repo", str(repo), "--machine", "cpu-box",
           *([] if tests else ["--no-tests"]), *([] if validate else ["--no-validate"]), *argv]  # fmt: skip
    done = run_group(cmd, timeout=300, cwd=repo, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def _states(out: Path) -> dict[tuple[str, str], str]:
    record = json.loads((out / "plan.json").read_text())
    return {(p["benchmark"], p["params"]): p["state"] for p in record["points"]}


@pytest.mark.slow
def test_a_budget_too_short_keeps_each_benchmarks_first_point_and_names_the_rest(tmp_path):
    repo = _project(tmp_path)
    out = tmp_path / "plan"
    text = _gpu_run(tmp_path, repo, "--bench", "LogNorms|TinyOp", "--budget-s", "1", "--plan-only", "--out", str(out))
    assert "plan: " in text and "no CUDA device" in text and "dropped by the budget" in text
    assert "warning: the points never dropped" in text and "raise --budget-s or narrow --bench" in text
    assert "recorded machine" not in text and not (tmp_path / ".asv-machine.json").exists()  # a plan records none
    states = _states(out)
    kept = [k for k, s in states.items() if s == "run"]
    assert sorted(b for b, _ in kept) == [
        "bench_logging.LogNorms.track_time", "bench_logging.LogNorms.track_vs_on_device",
        "bench_matmul.TinyOp.track_time"]  # fmt: skip
    assert states[("bench_matmul.TinyOp.track_time", "device=cuda, numel=1")] == "skip"
    # LogNorms: 8 CPU points per method run here (n=1,024 is declared GPU-only); TinyOp: 2; each keeps its first
    assert sum(s == "dropped" for s in states.values()) == 8 + 8 + 2 - 3
    assert not (out / "results.tgz").exists()  # a plan only: nothing run, nothing packed


@pytest.mark.slow
def test_gpu_only_without_a_gpu_leaves_validate_and_the_cuda_tests_out_and_holds_nothing_for_them(tmp_path):
    """``validate --gpu-only`` refuses a machine without a GPU, and the CPU's figures are not this run's; every CUDA
    test would be skipped: gpu-run says so before planning and holds back only the packing."""
    repo = _project(tmp_path)
    out = tmp_path / "plan"
    text = _gpu_run(tmp_path, repo, "--gpu-only", "--bench", "TinyOp", "--budget-s", "60", "--plan-only", "--out",
                    str(out), validate=True, tests=True)  # fmt: skip
    assert "validate left out: --gpu-only without a CUDA GPU: no figure of this run to check" in text
    assert "the CUDA tests left out: no CUDA GPU here" in text
    assert json.loads((out / "plan.json").read_text())["reserve_s"] == pytest.approx(gpurun.PACK_S + gpurun.KILL_HOLD_S)


def test_validate_is_left_out_where_it_would_check_nothing_the_run_measures():
    """gpu-run's validate checks the figures its run selects (its --bench, passed on): none, and it is left out."""
    from devbench.gpu.costs import validate_labels, validates_nothing
    from devbench.records import spec

    assert validates_nothing(False, 1, None) is None
    assert validates_nothing(True, 0, None).startswith("--gpu-only without a CUDA GPU")
    nothing = "none of the figures it checks is in this run's selection"
    assert validates_nothing(False, 0, "cuda") == nothing and validates_nothing(True, 1, "'cpu'") == nothing
    assert validates_nothing(True, 1, "cuda") is None and validates_nothing(False, 0, "MatmulSquare") is None
    # a partial selection: those figures alone, the plain torch.mm row with the bf16 product it times again
    assert validate_labels(1, bench="DeviceCopy") == [p.label for p in (*spec.VALIDATED_CPU, *spec.VALIDATED_GPU)
                                                      if "DeviceCopy" in p.selector]  # fmt: skip
    assert validate_labels(1, bench="bfloat16") == [spec.VALIDATED_PLAIN_OF.label, spec.VALIDATED_PLAIN_MM]
    assert len(validate_labels(1)) == 13 and len(validate_labels(0)) == 5 and len(validate_labels(1, True)) == 8


@pytest.mark.slow
def test_the_run_measures_exactly_the_planned_points_and_packs_them(tmp_path):
    repo = _project(tmp_path)
    out = tmp_path / "out"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out.mkdir()
    (out / "tests.txt").write_text("an earlier run's\n")  # this run leaves the tests out: none of its own
    (out / "notes.md").write_text("the user's\n")
    # three blocks a figure (DEVBENCH_BLOCKS, as compare fixes them): what is measured, not how precisely
    text = _gpu_run(tmp_path, repo, "--bench", "TinyOp|SameDeviceMove", "--budget-s", "300", "--out", str(out),
                    tmpdir=scratch, extra={"DEVBENCH_BLOCKS": "3"})  # fmt: skip
    assert not (out / "tests.txt").exists() and (out / "notes.md").exists()  # nothing of an earlier run read as its
    assert "== asv headline: exit 0" in text and "packed into" in text
    assert "recorded machine 'cpu-box' for asv:" in text  # by the probe, before the plan
    # asv took the listing's discovery of the suite rather than import it once more; the file went with the run
    assert "Discovered benchmarks: devbench gpu-run's listing of this folder" in text
    assert not list(scratch.glob("devbench-discovery-*"))
    assert json.loads((tmp_path / ".asv-machine.json").read_text())["cpu-box"]["gpu_count"] == "0"
    states = _states(out)
    kept = {k for k, s in states.items() if s == "run"}
    assert {s for s in states.values()} == {"run", "skip"}
    stages = {s["stage"]: s for s in json.loads((out / "plan.json").read_text())["stages"]}
    assert stages["asv headline"]["rc"] == 0 and stages["asv headline"]["actual_s"] > 0
    with tarfile.open(out / "results.tgz") as tar:
        names = tar.getnames()
        result = next(n for n in names if re.search(r"results/cpu-box/[0-9a-f]{8}-existing.*\.json$", n))
        data = json.load(tar.extractfile(result))
    assert ".asv/results/benchmarks.json" in names
    # asv measured exactly the kept points: a figure for each, none for a skipped (CUDA) one
    cols = data["result_columns"]
    measured = set()
    for name, row in data["results"].items():
        combos = list(itertools.product(*row[cols.index("params")]))
        values = row[cols.index("result")]
        measured |= {(name, ", ".join(v.strip("'") for v in c)) for c, v in zip(combos, values, strict=True)
                     if v is not None and v == v}  # fmt: skip
    assert measured == {(b, ", ".join(x.split("=", 1)[1] for x in p.split(", "))) for b, p in kept}
    assert (out / "smi-before.txt").exists() and (out / "smi-after.txt").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget-s", "0"], "--budget-s must be a number of seconds > 0"),
        (["--budget-s", "inf"], "--budget-s must be a number of seconds > 0"),
        (["--rounds", "0"], "--rounds must be >= 1"),
        (["--bench", "("], "is not a regular expression"),
        (["--repo", "/no/such/repo"], "no asv.conf.json there"),
        (["--machine", "a b"], "use letters, digits"),
        (["--out", str(ROOT / "README.md")], "a file is in the way, not a folder"),
        (["--plan-only", "--costs-from", str(ROOT / "README.md")], "cannot read it as JSON"),
        (["--plan-only", "--bench", "no_such_benchmark_zz"], "selects no benchmark of the suite"),
        (["--plan-only", "--costs-from", str(ROOT / "tests" / "fake_nvml.py")], "cannot read it as JSON"),
    ],
)
def test_bad_input_exits_2_with_the_reason(argv, message, capsys):
    from devbench.cli import main

    code = main(["gpu-run", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err


def test_a_bench_that_selects_nothing_is_named_before_the_machine_is_probed(monkeypatch, capsys):
    """The listing says what ``--bench`` selects before the probe spends its seconds (a fresh process, a fork, a CUDA
    context): a pattern that selects nothing is named without it."""
    from devbench.cli import main

    def probe(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(gpurun, "probe_costs", probe)
    assert main(["gpu-run", "--plan-only", "--gpu-only", "--bench", "TinyOp\\('cpu'"]) == 2
    err = capsys.readouterr().err
    assert "selects no benchmark of the suite that needs a GPU (--gpu-only)" in err and "Traceback" not in err


def test_the_help_names_the_budget_and_the_examples():
    out = subprocess.run([sys.executable, "-m", "devbench.cli", "gpu-run", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--budget-s" in out.stdout and "devbench gpu-run --plan-only" in out.stdout


# --- a stop keeps what finished and leaves no process behind ---------------------------------------------------

_GRANDCHILD = (
    "import os, sys, time\n"
    "os.setpgid(0, 0)\n"  # a process group of its own, as asv gives its forkserver and benchmark processes
    "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "time.sleep(600)\n"
)

_STOP_SUITE = '''
import subprocess
import sys
import time
from pathlib import Path

GRANDCHILD = {grandchild!r}


class Fast:
    def track_one(self):
        return 1.0


class Slow:
    timeout = 900

    def setup(self):
        # asv passes its benchmarks few environment variables: the pid goes beside the repository
        pidfile = Path(__file__).resolve().parents[2] / "pid"
        subprocess.Popen([sys.executable, "-c", GRANDCHILD, str(pidfile)])

    def track_two(self):
        time.sleep(600)
        return 2.0
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_a_stage_at_its_limit_ends_the_processes_that_left_its_group(tmp_path):
    from devbench.gpu.sessions import _group_run

    pidfile = tmp_path / "pid"
    parent = "import subprocess, sys, time\n"
    parent += f"subprocess.Popen([sys.executable, '-c', {_GRANDCHILD!r}, {str(pidfile)!r}])\ntime.sleep(600)\n"
    with open(tmp_path / "log", "w") as log:
        start = time.monotonic()
        code, took, stuck = _group_run([sys.executable, "-c", parent], 3.0, log)
    assert code == 124 and took < 30 and time.monotonic() - start < 30 and stuck == []
    assert _wait(pidfile.exists, 5.0)
    assert _wait(lambda: not _alive(int(pidfile.read_text())), 5.0), "the grandchild outlived the stage"


def test_a_process_that_outlives_sigkill_is_named_with_its_state(monkeypatch, capsys):
    """A rank stuck in a driver call (state D) survives SIGKILL and keeps its GPU: the run says so, by pid and state,
    before the stages that would find that GPU held."""
    from devbench.gpu import sessions

    monkeypatch.setattr(sessions, "kill_session", lambda sid, wait_s=5.0: [os.getpid()])
    code, _, stuck = sessions._group_run([sys.executable, "-c", "pass"], 30.0, None)
    out = capsys.readouterr().out
    assert code == 0 and stuck == [os.getpid()]
    assert f"1 process(es) of the stage outlived SIGKILL: {os.getpid()} (" in out
    monkeypatch.setattr(sessions, "kill_session", lambda sid, wait_s=5.0: [])
    assert sessions._group_run([sys.executable, "-c", "pass"], 30.0, None)[2] == []
    assert "outlived" not in capsys.readouterr().out


@pytest.mark.slow
def test_sigterm_during_asv_exits_143_keeps_what_asv_finished_and_leaves_no_process(tmp_path):
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "asv.conf.json", repo)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench_stop.py").write_text(_STOP_SUITE.format(grandchild=_GRANDCHILD))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "suite")
    out, pidfile, log = tmp_path / "out", tmp_path / "pid", tmp_path / "log"
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "devbench.cli", "gpu-run", "--repo", str(repo), "--machine", "cpu-box",
           "--no-tests", "--no-validate", "--budget-s", "900", "--out", str(out)]  # fmt: skip
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            # the fast benchmark is done and saved, and the slow one's set-up has started its grandchild
            assert _wait(lambda: re.search(r"bench_stop\.Fast\.track_one\s+1\.0", log.read_text()) is not None
                         and pidfile.exists(), 240), log.read_text()[-3000:]  # fmt: skip
            grandchild = int(pidfile.read_text())
        except BaseException:
            terminate(proc)
            raise
        code = terminate(proc)
    text = log.read_text()
    assert code == 143, text[-3000:]
    assert _wait(lambda: not _alive(grandchild), 5.0), "the stage's grandchild outlived gpu-run"
    assert "stopped: terminated (SIGTERM)" in text
    record = json.loads((out / "plan.json").read_text())
    states = {p["benchmark"]: (p["state"], p["reason"]) for p in record["points"]}
    assert states["bench_stop.Fast.track_one"][0] == "run"
    assert states["bench_stop.Slow.track_two"] == ("cut", "terminated (SIGTERM) before asv finished it")
    assert record["stopped"] == "terminated (SIGTERM)" and record["stages"][-1]["note"] == "stopped"
    with tarfile.open(out / "results.tgz") as tar:
        result = next(n for n in tar.getnames() if re.search(r"results/cpu-box/[0-9a-f]{8}-existing.*\.json$", n))
        data = json.load(tar.extractfile(result))
    assert data["results"]["bench_stop.Fast.track_one"][0] == [1.0]
    assert "bench_stop.Slow.track_two" not in data["results"]


def test_the_h200_runs_headline_figures_read_ok_with_its_link_and_the_state_they_ran_in():
    from devbench.gpu.gpuhealth import figure_value, health_lines
    from devbench.records import gpustate

    results = ROOT / "reports" / "asv-results" / "h200"
    sha = json.loads(next(p for p in results.glob("*.json") if p.name != "machine.json").read_text())["commit_hash"]
    states = gpustate.load(ROOT / "reports" / "gpu" / "h200")  # its gpustate.jsonl: the sustained figure capped
    h200 = {"name": "NVIDIA H200", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
    assert figure_value(results, sha, "bench_transfer.HostDevice.track_gbps",
                        ("h2d", "pinned", "blocking", 256 * 2**20)) == pytest.approx(55.06, abs=0.01)  # fmt: skip
    assert figure_value(results, sha, "bench_transfer.HostDevice.track_gbps", ("d2h", "pinned", "blocking", 1)) is None
    by = {line.split("  ")[1].strip(): line for line in health_lines(results, sha, h200, states)}
    assert set(by) == {"pinned h2d 256 MiB", "pinned d2h 256 MiB", "device copy 1 GiB, r+w", "bfloat16 n=8192",
                       "achievable bf16, best shape", "achievable bf16, sustained", "float32 n=8192"}
    assert not any(" low " in line for line in by.values()), by
    sustained = by["achievable bf16, sustained"]  # 693 TFLOP/s at 1,500 MHz under sw_power_cap
    assert " ok " in sustained and "at 1500 of 1830 MHz" in sustained and "sw_power_cap" in sustained
    # without the state it ran in, the same figure is judged at the datasheet's clock: still not low
    stateless = {ln.split("  ")[1].strip(): ln for ln in health_lines(results, sha, h200)}
    assert " ok " in stateless["achievable bf16, sustained"]


def _asv_file(tmp_path: Path, results: dict) -> Path:
    """One machine's results folder holding one asv result file of commit a...a with ``results``."""
    from asv.results import Results

    data = {"commit_hash": "a" * 40, "env_name": "existing", "date": 1, "params": {"machine": "box"},
            "requirements": {}, "version": Results.api_version, "result_columns": ["result", "params"],
            "results": results}  # fmt: skip
    folder = tmp_path / "box"
    folder.mkdir()
    (folder / "aaaaaaaa-existing.json").write_text(json.dumps(data))
    return folder


def test_a_pinned_copy_is_judged_at_the_link_it_trained_at_under_load(tmp_path):
    from devbench.gpu.gpuhealth import health_lines

    mib256 = 256 * 2**20
    params = [["h2d", "d2h"], ["pinned"], ["non_blocking"], [mib256]]
    results = _asv_file(tmp_path, {
        "bench_transfer.HostDevice.track_gbps": [[15.7, 53.0], [[repr(v) for v in p] for p in params]]})
    # NVML after the run said Gen5 x16 (idle, retrained); while the h2d copy ran it read Gen4 x16
    h100 = {"name": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
    state = {"time": 1.0, "benchmark": "bench_transfer.HostDevice", "phase": "during", "index": 0,
             "params": {"direction": "h2d", "memory": "pinned", "mode": "non_blocking", "nbytes": mib256},
             "sm_clock_mhz": 1980.0, "throttling": [], "pcie_gen": 4, "pcie_width": 16}  # fmt: skip
    by = {line.split("  ")[1].strip(): line for line in health_lines(results, "a" * 40, h100, [state])}
    assert " low " in by["pinned h2d 256 MiB"] and "trained at Gen4 x16, below its Gen5 x16" in by["pinned h2d 256 MiB"]
    assert " ok " in by["pinned d2h 256 MiB"]  # no state recorded for it: the machine's facts


def test_an_earlier_runs_state_never_judges_this_runs_figures(tmp_path, monkeypatch, capsys):
    """gpu-run's health lines read the state this run recorded: a month-old run's link under load (Gen4) says
    nothing of a figure this run measured with no state of its own."""
    import subprocess
    import types

    from devbench.gpu import gpuhealth
    from devbench.records import gpustate

    mib256 = 256 * 2**20
    params = [["h2d"], ["pinned"], ["non_blocking"], [mib256]]
    repo = tmp_path / "repo"
    (repo / ".asv" / "results").mkdir(parents=True)
    _asv_file(repo / ".asv" / "results", {"bench_transfer.HostDevice.track_gbps": [[40.0], [[repr(v) for v in p]
                                                                                          for p in params]]})
    h100 = {"name": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
    info = types.SimpleNamespace(returncode=0, stdout=json.dumps({"gpus": [h100]}))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: info)
    old = {"time": 1.0, "benchmark": "bench_transfer.HostDevice", "phase": "during", "index": 0, "cuda_index": 0,
           "params": {"direction": "h2d", "memory": "pinned", "mode": "non_blocking", "nbytes": mib256},
           "throttling": [], "pcie_gen": 4, "pcie_width": 16}  # fmt: skip
    monkeypatch.setattr(gpustate, "load", lambda *a, **k: [old])
    gpuhealth.print_health(repo, sys.executable, "box", "a" * 40)
    assert "trained at Gen4 x16" in capsys.readouterr().out  # the state, where it is this run's
    gpuhealth.print_health(repo, sys.executable, "box", "a" * 40, since=2.0)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "pinned h2d 256 MiB" in ln)
    assert " low " in line and "Gen4" not in line and "no reason could be read" in line


def test_a_plan_with_cut_points_still_formats_and_counts_them():
    plan = P.make_plan(_listing(), _all, ONE_GPU, budget_s=1000, reserve_s=0)
    first = plan.kept()[0]
    first.state, first.reason = "cut", "terminated (SIGTERM) before asv finished it"
    rows = {r["benchmark"]: r for r in plantext.summary_rows(plan)}
    assert rows[first.benchmark]["cut"] == 1
    assert "plan: " in plantext.format_plan(plan)


def test_a_gpu_pair_and_an_nccl_busbw_are_judged_with_the_path_the_copies_took(tmp_path):
    from devbench.gpu.gpuhealth import health_lines

    mib256 = 256 * 2**20
    routes, sizes = ["0->1", "1->0"], [2**20, mib256]

    def row(values, params):
        return [values, [[repr(v) for v in p] for p in params]]

    results = _asv_file(tmp_path, {
        "bench_transfer.PeerCopy.track_gbps": row([90.0, 30.0, 88.0, 380.0], [routes, sizes]),
        "bench_transfer.PeerCopy.track_peer_access": row([1.0, 0.0, 1.0, 1.0], [routes, sizes]),
        "bench_transfer.PeerCopy.track_nvlink_share": row([None, None, None, None], [routes, sizes]),
        "bench_collectives.Collectives.track_busbw": row([120.0], [["nccl"], [2], ["all_reduce"], [mib256]]),
    })  # fmt: skip
    h100 = {"name": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
    by = {line.split("  ")[1].strip(): line for line in health_lines(results, "a" * 40, h100)}
    # 0->1 at 256 MiB without peer access: staged through host, low against NVLink's 450 GB/s one way
    staged = by["GPU 0->1 256 MiB (through host)"]
    assert " low " in staged and "peer access off" in staged and "7% of 450" in staged
    assert " low " in by["all_reduce busbw, 2 GPUs"] and "27% of 450" in by["all_reduce busbw, 2 GPUs"]
    assert "nccl-tests reads busbw" in by["all_reduce busbw, 2 GPUs"]
    assert not any("peer matrix" in k for k in by)  # not measured: no line
    # with NVML's topology (devbench info's pair_paths): the pair and the ring are judged on their own paths
    pairs = {"0->1": {"nvlinks": 17, "switched": True, "pcie": "PCIe switch"},
             "1->0": {"nvlinks": 17, "switched": True, "pcie": "PCIe switch"}}  # fmt: skip
    by = {line.split("  ")[1].strip(): line for line in health_lines(results, "a" * 40, h100, None, pairs)}
    assert "NVLink: 17 of 18 links active" in by["GPU 0->1 256 MiB (through host)"]
    assert " low " in by["all_reduce busbw, 2 GPUs"] and "17 of 18 links" in by["all_reduce busbw, 2 GPUs"]


def test_a_probe_that_prints_nothing_is_named_not_a_traceback(tmp_path):
    from devbench.gpu.costs import probe_costs

    quiet = tmp_path / "python"
    quiet.write_text("#!/bin/sh\nexit 0\n")
    quiet.chmod(0o755)
    with pytest.raises(RuntimeError, match="printed nothing"):
        probe_costs(str(quiet), tmp_path)


def test_a_refit_takes_back_dropped_points_of_any_tier_when_a_stage_ran_faster_than_planned():
    listing = _listing()
    full = P.make_plan(listing, _all, ONE_GPU, budget_s=1000, reserve_s=0)
    need = full.estimate_s()
    plan = P.make_plan(listing, _all, ONE_GPU, budget_s=need / 2, reserve_s=0)
    dropped = plan.dropped()
    assert dropped and any(p.tier == 1 for p in dropped)
    headline = [p for p in plan.kept() if p.tier == 0]
    for p in headline:  # the headline stage ran
        p.done = True
    # it took half its estimate, and the whole budget is still there: every dropped point fits again
    P.fit(plan, need, scale=0.5)
    assert not plan.dropped() and all(p.done for p in headline)
    # a stage that took twice its estimate: fewer fit, those run are never dropped, a family keeps a point
    P.fit(plan, need / 4, scale=2.0)
    assert plan.dropped() and all(p.state == "run" for p in headline)
    assert {p.benchmark for p in plan.kept()} == {p.benchmark for p in plan.points if p.state != "skip"}


def test_late_points_run_last_keep_points_are_never_dropped_and_twins_go_first():
    listing = _listing()
    listing["bench_m.Mat.track_tflops"]["plan_last"] = [{"n": [8192]}]
    keep = frozenset({"bench_m.Mat.track_tflops('cuda', 1024)"})
    plan = P.make_plan(listing, _all, ONE_GPU, budget_s=12.0, reserve_s=0, keep=keep,
                       twins=frozenset({"bench_m.Mat.time_mm"}))  # fmt: skip
    by = {p.selector: p for p in plan.points}
    late = by["bench_m.Mat.track_tflops('cuda', 8192)"]
    assert late.late and P.stage_of(late) == "last"
    assert not by["bench_m.Mat.track_tflops('cuda', 1024)"].late
    assert by["bench_m.Mat.track_tflops('cuda', 1024)"].state == "run"  # kept: validate reads it, say
    # within a tier, a twin (time_mm repeats track_tflops' evidence) comes after every figure that is not one
    order = [p for p in P._order(plan.points) if p.tier == 1 and p.benchmark.startswith("bench_m.")]
    twins = [p.twin for p in order]
    assert twins == sorted(twins) and any(twins) and not all(twins)


def test_a_last_stage_that_cannot_end_before_the_tests_waits_for_the_fill():
    """Started with 21 s left for a search priced 109 s, the last stage was cut with nothing kept; its points now
    wait for the fill, after the tests and validate, and a stage that fits runs as planned."""
    listing = _listing()
    listing["bench_m.Mat.track_tflops"]["plan_last"] = [{"n": [8192]}]
    plan = P.make_plan(listing, _all, ONE_GPU, budget_s=1000.0, reserve_s=0)
    late = [p for p in plan.kept() if P.stage_of(p) == "last"]
    need = plan.estimate_s(points=late, group=lambda p: "last")
    assert late and P.defer_late(plan, late, "last", need + 1.0) == late
    assert P.defer_late(plan, late, "rest", 0.0) == late  # only the last stage waits
    assert P.defer_late(plan, late, "last", need - 1.0) == []
    assert {(p.state, p.reason) for p in late} == {("dropped", P.WAITS_FOR_FILL)}
    P.fit(plan, 1000.0, group=lambda p: "fill")  # the fill's refit takes them back
    assert all(p.state == "run" for p in late)


def test_a_workloads_check_is_priced_once_per_run_not_per_process():
    grid = ([["cuda"], [64, 1024]], ["device", "n"])
    listing = {"bench_m.Mat.track_tflops": _bench("bench_m.Mat.track_tflops", *grid, plan_s=1.0, plan_setup_s=0.0),
               "bench_m.Mat.time_mm": _bench("bench_m.Mat.time_mm", *grid, plan_setup_s=0.0, repeat=[1, 1, 1.0],
                                             sample_time=1.0, warmup_time=0.0)}  # fmt: skip
    costs = P.Costs(launch_s=0.0, cuda_context_s=0.0, asv_call_s=0.0, gpus=1, gpu_check_s=5.0)
    plan = P.make_plan(listing, _all, costs, budget_s=1000, reserve_s=0)
    # 4 points of 1 s, and 2 workloads (n=64, n=1024) checked once each, whichever method's process comes first
    assert plan.estimate_s() == pytest.approx(4 * 1.0 + 2 * 5.0)
    for p in plan.points:
        if p.benchmark.endswith("track_tflops"):
            p.done = True
    assert plan.estimate_s(points=[p for p in plan.points if not p.done]) == pytest.approx(2 * 1.0)


def test_a_plan_for_a_recorded_machine_charges_what_its_own_probe_and_listing_took(tmp_path):
    """``--plan-only --costs-from``: the budget the plan starts from is the record's budget less what its run spent
    before its plan, the same however long this machine took to list the suite; without those figures, this
    machine's clock counts."""
    out = tmp_path / "plan"
    record = json.loads((ROOT / "reports" / "gpu" / "h200" / "plan.json").read_text())
    before = record["options"]["budget_s"] - record["budget_s"]
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({k: record[k] for k in ("costs", "stages", "options", "budget_s")}))
    from devbench.cli import main

    assert main(["gpu-run", "--plan-only", "--costs-from", str(costs), "--bench", "TinyOp", "--budget-s", "300",
                 "--out", str(out)]) == 0  # fmt: skip
    assert json.loads((out / "plan.json").read_text())["budget_s"] == pytest.approx(300.0 - before)
    costs.write_text(json.dumps({k: record[k] for k in ("costs", "stages")}))
    assert main(["gpu-run", "--plan-only", "--costs-from", str(costs), "--bench", "TinyOp", "--budget-s", "300",
                 "--out", str(out)]) == 0  # fmt: skip
    assert json.loads((out / "plan.json").read_text())["budget_s"] < 300.0  # what this machine spent before it


def test_costs_from_another_machines_plan_json_price_a_plan_here(tmp_path):
    from devbench.gpu.costs import costs_from

    h200 = costs_from(ROOT / "reports" / "gpu" / "h200" / "plan.json")
    assert h200.gpus == 1 and h200.cuda_context_s == pytest.approx(0.3918, abs=1e-3)
    # its budget of 548 s left 536.95 s to its plan: its probe and listing took 11.05 s there
    assert h200.planned_after_s == pytest.approx(548.0 - 536.949805198)
    assert h200.gpu_check_s == pytest.approx(0.273, abs=1e-3) and h200.gpu_model == "NVIDIA H200"
    # what its CUDA tests and validate took is held back for them, not the defaults (validate ended with DRIFT: the
    # CPU's products had moved since the asv run; it ran to its end all the same)
    assert (h200.tests_s, h200.validate_s) == (pytest.approx(23.5), pytest.approx(88.8))
    from devbench.gpu.costs import TESTS_S, VALIDATE_CPU_EACH_S, VALIDATE_GPU_EACH_S, held_s

    assert held_s(h200) == (h200.tests_s, h200.validate_s)
    # --gpu-only validates the GPU's 8 figures of its 13: its log, from before validate timed each figure, gives
    # each figure it measured an equal share; a log that times them gives each its own, and the stage's start
    assert {"matmul float32 n=256 cpu", "vs plain torch.mm (sustained)"} <= {label for label, _ in h200.validate_each}
    assert len(h200.validate_each) == 13 and held_s(h200, gpu_only=True)[1] == pytest.approx(88.8 * 8 / 13)
    from devbench.records import spec

    cpu, gpu = [p.label for p in spec.VALIDATED_CPU], [p.label for p in spec.VALIDATED_GPU] + [spec.VALIDATED_PLAIN_MM]
    timed = tmp_path / "timed"
    timed.mkdir()
    record = {"costs": {"launch_s": 0.01, "cuda_context_s": 0.3, "asv_call_s": 7, "gpus": 1},
              "stages": [{"stage": "validate", "actual_s": 70.0, "rc": 0}]}  # fmt: skip
    (timed / "plan.json").write_text(json.dumps(record))
    # a warning torch prints while a figure is measured lands on the progress line; the seconds have their own
    (timed / "validate.txt").write_text("".join(f"  measuring {label} ...W1128 a warning\n  measured {label} in "
                                                f"{2.0 if label in cpu else 6.0} s\n" for label in cpu + gpu)
                                        + "figure  unit\n")  # fmt: skip
    full = costs_from(timed / "plan.json")
    assert held_s(full)[1] == pytest.approx(70.0) and held_s(full, gpu_only=True)[1] == pytest.approx(70.0 - 5 * 2.0)
    assert full.planned_after_s is None  # a record without its budgets: this machine's own clock counts
    # a run recorded with --gpu-only prices a whole validate's CPU figures at the mean of what it measured
    (timed / "validate.txt").write_text("".join(f"  measured {label} in 6.0 s\n" for label in gpu))
    record["stages"][0]["actual_s"] = 50.0
    (timed / "plan.json").write_text(json.dumps(record))
    only = costs_from(timed / "plan.json")
    assert held_s(only, gpu_only=True)[1] == pytest.approx(50.0) and held_s(only)[1] == pytest.approx(50.0 + 5 * 6.0)
    no_gpu = dataclasses.replace(only, gpus=0)  # a CPU machine validates the CPU's 5 figures
    assert held_s(no_gpu)[1] == pytest.approx(2.0 + 5 * 6.0)
    cut = tmp_path / "cut.json"  # a stage that did not end is no measure of what it takes
    cut.write_text('{"costs": {"launch_s": 0.01, "cuda_context_s": 0.3, "asv_call_s": 7, "gpus": 1}, '
                   '"stages": [{"stage": "validate", "actual_s": 4.0, "rc": 124}]}')  # fmt: skip
    # no record: each figure at its kind's default (the VM's CPU figures, the H200's GPU ones)
    assert held_s(costs_from(cut)) == (TESTS_S, pytest.approx(5 * VALIDATE_CPU_EACH_S + 8 * VALIDATE_GPU_EACH_S))
    assert held_s(costs_from(cut), gpu_only=True)[1] == pytest.approx(8 * VALIDATE_GPU_EACH_S)
    assert held_s(dataclasses.replace(costs_from(cut), gpus=0))[1] == pytest.approx(5 * VALIDATE_CPU_EACH_S)
    bad = tmp_path / "plan.json"
    bad.write_text('{"costs": {"gpus": 1}}')
    with pytest.raises(ValueError, match="lacks"):
        costs_from(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="cannot read it as JSON"):
        costs_from(bad)


@pytest.mark.slow
def test_a_plan_for_a_described_machine_prices_its_multi_gpu_points_and_puts_nccl_last(tmp_path):
    repo = _project(tmp_path)
    out = tmp_path / "node"
    text = _gpu_run(tmp_path, repo, "--plan-only", "--costs-from", str(ROOT / "reports" / "gpu" / "h200" / "plan.json"),
                    "--gpus", "8", "--cores", "96", "--budget-s", "3000", "--out", str(out))  # fmt: skip
    assert "described machine: 8 GPU(s), 96 cores" in text and "asv stages: headline" in text
    # the journal beside that plan.json prices what its measuring process measured at what it took there
    assert re.search(r"recorded by the measuring process of \S+plan.json: [1-9]\d* figure\(s\) priced at", text)
    record = json.loads((out / "plan.json").read_text())
    states = {(p["benchmark"], p["params"]): p["state"] for p in record["points"]}
    assert states[("bench_transfer.PeerMatrix.track_slowest_gbps", "nbytes=268435456")] == "run"
    nccl = [p for p in record["points"] if p["benchmark"].startswith("bench_collectives") and "nccl" in p["params"]]
    assert nccl and all(p["state"] == "run" for p in nccl)  # 8 GPUs: every NCCL world of 2 and 4 can run
    from devbench.gpu import plan as P

    listing = {"bench_c.C.track_busbw": _bench("bench_c.C.track_busbw", [["gloo", "nccl"], [2]], ["backend", "world"],
                                               plan_last=[{"backend": ["nccl"]}])}  # fmt: skip
    by = {p.label: p for p in P.make_plan(listing, _all, ONE_GPU, 1000, 0).points}
    assert P.stage_of(by["backend=nccl, world=2"]) == "last" and P.stage_of(by["backend=gloo, world=2"]) != "last"
    # the stage that starts NCCL worlds lets the measuring process the earlier stages held go first: its rank 0 would
    # share cuda:0 with it
    from devbench.gpu.plan import uses_nccl

    assert uses_nccl([by["backend=gloo, world=2"], by["backend=nccl, world=2"]])
    assert not uses_nccl([by["backend=gloo, world=2"]])


def test_a_stage_that_starts_nccl_worlds_and_asks_a_measuring_process_leaves_one_of_them_to_a_later_one():
    """A swept GPU point there would start a measuring process that holds cuda:0 beside rank 0 while it idles. The
    last stage keeps its worlds (what it is for) and leaves the swept GPU points to a fill; a fill keeps the swept
    points and leaves the worlds (which may hang) to the next; a swept CPU point makes no CUDA context: it stays."""
    from devbench.gpu.plan import WAITS_AFTER_SWEPT, WAITS_WITHOUT_WORLDS, apart_from_nccl

    listing = {"bench_c.C.track_busbw": _bench("bench_c.C.track_busbw", [["gloo", "nccl"], [2]], ["backend", "world"]),
               "bench_m.M.track_tflops": _bench("bench_m.M.track_tflops", [["cpu", "cuda"]], ["device"], swept=True,
                                                sample_time=0.1)}  # fmt: skip
    costs = P.Costs(launch_s=0.1, cuda_context_s=0.5, asv_call_s=5.0, gpus=2)

    def points():
        by = {p.label: p for p in P.make_plan(listing, _all, costs, 1000, 0, sweep_cpu=True).points}
        return by["backend=gloo, world=2"], by["backend=nccl, world=2"], by["device=cuda"], by["device=cpu"]

    gloo, nccl, swept, cpu = points()
    assert swept.swept and cpu.swept and apart_from_nccl([gloo, swept, cpu]) == [gloo, swept, cpu]  # no NCCL world
    assert apart_from_nccl([gloo, nccl, swept, cpu]) == [gloo, nccl, cpu]
    assert (swept.state, swept.reason) == ("dropped", WAITS_WITHOUT_WORLDS)
    gloo, nccl, swept, cpu = points()
    assert apart_from_nccl([gloo, nccl, swept, cpu], last=False) == [gloo, swept, cpu]
    assert (nccl.state, nccl.reason) == ("dropped", WAITS_AFTER_SWEPT)


def test_gpus_and_cores_describe_another_machine_only_with_its_costs(tmp_path):
    import argparse

    from devbench.gpu.gpuargs import add_arguments
    from devbench.gpu.gpuargs import check as _check

    p = argparse.ArgumentParser()
    add_arguments(p)
    repo = str(ROOT)
    assert "use them with --costs-from" in _check(p.parse_args(["--gpus", "8", "--repo", repo]))
    plan = str(ROOT / "reports" / "gpu" / "h200" / "plan.json")
    assert "--gpus must be >= 0" in _check(p.parse_args(["--plan-only", "--costs-from", plan, "--gpus", "-1",
                                                         "--repo", repo]))  # fmt: skip
    assert _check(p.parse_args(["--plan-only", "--costs-from", plan, "--gpus", "8", "--repo", repo])) is None


def test_a_figure_another_machines_run_held_wider_than_its_precision_is_priced_at_its_cap(tmp_path):
    """--precision-from: the H200's own results say which figures did not come within 0.5% (its pageable copies
    did not, its pinned ones did); those are priced at their class's cap, and so are the blocks a figure shares."""
    import argparse

    from devbench.engine import precision
    from devbench.gpu import plan as P
    from devbench.gpu.gpuargs import add_arguments
    from devbench.gpu.gpuargs import check as _check
    from devbench.gpu.recorded import imprecise_from

    name = "bench_transfer.HostDevice"
    wide = imprecise_from(ROOT / "reports" / "asv-results" / "h200", {f"{name}.track_time", f"{name}.track_gbps"})
    assert f"{name}.track_time('h2d', 'pageable', 'blocking', 67108864)" in wide  # its time_copy, renamed
    assert f"{name}.track_gbps('h2d', 'pageable', 'non_blocking', 67108864)" in wide
    assert not [s for s in wide if "'pinned'" in s and name in s]
    grid = ([["cuda"], ["blocking", "non_blocking"]], ["device", "mode"])
    # blocks of 0.02 s: the default cap's 0.5 s is 25 of them, past the 12 from which asv's interval can narrow
    listing = {f"bench_c.Copy.{m}": _bench(f"bench_c.Copy.{m}", *grid, swept=True, sample_time=0.02)
               for m in ("track_gbps", "track_time")}  # fmt: skip
    shared = {"bench_c.Copy.track_time": ("bench_c.Copy.track_gbps", {"mode": ["blocking"]})}
    costs = P.Costs(0.01, 0.3, 5.0, 1, imprecise=("bench_c.Copy.track_time('cuda', 'blocking')",))
    by = {p.selector: p for p in P.make_plan(listing, _all, costs, 1000, 0, same_blocks=shared).points}
    capped = P.SIZING_S + max(precision.DEFAULT_CAP[0], precision.DEFAULT_CAP[1] * 0.02)
    fewest = P.SIZING_S + precision.MIN_SAMPLES * 0.02
    assert by["bench_c.Copy.track_gbps('cuda', 'blocking')"].estimate_s == pytest.approx(0.01 + capped)  # shared
    assert by["bench_c.Copy.track_gbps('cuda', 'non_blocking')"].estimate_s == pytest.approx(0.01 + fewest)
    assert P.Costs.from_record(json.loads(json.dumps(costs.__dict__))) == costs
    p = argparse.ArgumentParser()
    add_arguments(p)
    results = str(ROOT / "reports" / "asv-results" / "h200")
    assert "use them together" in _check(p.parse_args(["--precision-from", results, "--repo", str(ROOT)]))
    plan = str(ROOT / "reports" / "gpu" / "h200" / "plan.json")
    assert "no such folder" in _check(p.parse_args(["--plan-only", "--costs-from", plan, "--precision-from",
                                                    str(tmp_path / "none"), "--repo", str(ROOT)]))  # fmt: skip
    with pytest.raises(ValueError, match="no asv result file"):
        imprecise_from(tmp_path, set())


def test_a_stage_made_a_search_only_where_asv_saved_a_figure_of_it(tmp_path):
    """``valued_since``: the points of a stage that asv saved a figure for, read from the results it wrote; a
    point skipped, failed or never reached (a stage cut mid-search) made nothing a later stage can read."""
    import datetime

    from asv.results import Results
    from asv.runner import BenchmarkResult

    from devbench.gpu import plan as P
    from devbench.gpu.gpupack import valued_since

    sha = "a" * 40
    name = "bench_a.Ach.track_tflops"
    bench = {"name": name, "type": "track", "unit": "TFLOP/s", "params": [["'cpu'"], ["'float32'", "'bfloat16'"]],
             "param_names": ["device", "dtype"], "version": "0" * 64, "timeout": 60.0, "code": ""}  # fmt: skip
    results = tmp_path / "results"
    res = Results({"machine": "vm"}, {}, sha, 0, "3.11", "existing-py", {})
    started = datetime.datetime.fromtimestamp(1_000_000, tz=datetime.timezone.utc)
    res.add_result(bench, BenchmarkResult(result=[0.3, None], samples=[[0.3, 0.31], None], number=[1, None], errcode=0,
                                          stderr="", profile=None), started_at=started, duration=9.0)  # fmt: skip
    res.save(str(results))
    listing = {name: {**bench, "plan_cache_s": {"per": ["device", "dtype"], "s": 75.0, "cached_s": 1.0}}}
    plan = P.make_plan(listing, _all, ONE_GPU, 1000, 0)
    f32, bf16 = plan.points
    got = valued_since(results / "vm", sha, 1_000_000 - 1, plan.points)
    assert got == {f32.selector}  # the bfloat16 search failed or was never reached: nothing of it came back
    assert valued_since(results / "vm", sha, 1_000_000 + 10, plan.points) == set()  # started before the stage
    # the summary tells a point tried but given no figure (a skip in its set-up: a world left no time) from one
    # measured
    from types import SimpleNamespace

    from devbench.gpu.gpupack import Summary

    for p in plan.points:
        p.done = True
    run = SimpleNamespace(repo=tmp_path / "repo", started_at=1_000_000 - 1)
    (run.repo / ".asv").mkdir(parents=True)
    (run.repo / ".asv" / "results").symlink_to(results)
    text = Summary(run, plan, "vm", sha).text()
    assert "2 points measured or tried" in text and "of those, 1 gave no figure" in text
    assert f"no figure: {name}: 1 point(s), e.g. {bf16.label}" in text


def test_a_replan_prices_a_workload_not_yet_built_at_its_classs_slowest_build():
    """A class's builds differ by size (CPU DeviceCopy on the VM: 0.04 s at 4 KiB, 3.9 s at 4 MiB): their mean
    prices a stage of large ones short, and a re-planned stage, packed close to its limit, then cuts points. gpu-run
    re-plans with the slowest build seen; a class never built is priced its declared set-up."""
    point = P.Point(benchmark="bench_t.Copy.track_gbps", idx=0, values=("4194304",), names=("nbytes",), tier=1,
                    rank=0, estimate_s=0.5, built=("built", "bench_t.Copy", "4194304"), built_s=0.2)  # fmt: skip
    plan = P.Plan([point], 100.0, 0.0, ONE_GPU, 1)
    assert plan.built_s(point, scale=2.0) == pytest.approx(0.4)  # nothing built yet: declared, times the scale
    plan.builds["bench_t.Copy"] = [0.04, 0.1, 3.9]
    assert plan.built_s(point) == pytest.approx(3.9)


def test_a_world_is_priced_its_start_and_the_share_of_its_sweep_the_kept_points_read():
    """A world's sweep times only the rows a run reads: ``by_points`` of its seconds are shared by its points, the
    rest (the pre-flight, the ranks) paid once. Every point kept: the whole world; a third of them: its start and a
    third of its sweep."""
    worlds = _bench("bench_c.Coll.track_busbw", [["gloo"], [2], ["all_reduce", "broadcast", "send_recv"]],
                    ["backend", "world", "op"], setup_cache=True, plan_s=0.0, plan_setup_s=0.0,
                    plan_cache_s={"per": ["backend", "world"], "s": {"gloo": 20.0}, "by_points": 0.75})  # fmt: skip
    costs = P.Costs(launch_s=0.0, cuda_context_s=0.0, asv_call_s=0.0, gpus=0, cores=2)
    plan = P.make_plan({worlds["name"]: worlds}, _all, costs, budget_s=10_000, reserve_s=0)
    assert plan.estimate_s() == pytest.approx(20.0)
    one = [p for p in plan.kept() if "broadcast" in p.label]
    assert plan.estimate_s(points=one) == pytest.approx(5.0 + 15.0 / 3)
    # the budget's fit charges the same: the world's start with the first point, a share with each
    small = P.make_plan({worlds["name"]: worlds}, _all, costs, budget_s=5.0 + 2 * 5.0 + 0.1, reserve_s=0)
    assert len(small.kept()) == 2 and small.estimate_s() == pytest.approx(15.0)
    # a row's figures (a world's time and busbw of one op) read one row of the sweep: it is paid once
    times = {**worlds, "name": "bench_c.Coll.track_time"}
    both = P.make_plan({b["name"]: b for b in (worlds, times)}, _all, costs, budget_s=10_000, reserve_s=0)
    assert both.estimate_s() == pytest.approx(20.0)
    row = [p for p in both.kept() if "broadcast" in p.label]
    assert len(row) == 2 and both.estimate_s(points=row) == pytest.approx(5.0 + 15.0 / 3)
    tight = P.make_plan({b["name"]: b for b in (worlds, times)}, _all, costs, budget_s=10.1, reserve_s=0)
    assert {p.values for p in tight.kept()} == {("'gloo'", "2", "'all_reduce'")} and len(tight.kept()) == 2


def test_a_figure_is_priced_by_the_param_that_sets_its_length():
    """``plan_s`` per value of one param: an achievable product's brief ``best`` and its seconds-long ``sustained``
    are priced apart, so a stage of sustained figures is not priced as their mean; a value it does not name is an
    error that names it."""
    from devbench.gpu.declared import declared_plan_s

    runs = _bench("bench_a.Ach.track_tflops", [["cpu"], ["best", "sustained"]], ["device", "run"],
                  plan_s={"per": "run", "s": {"best": 0.5, "sustained": 7.0}}, plan_setup_s=0.0)  # fmt: skip
    costs = P.Costs(launch_s=0.0, cuda_context_s=0.0, asv_call_s=0.0, gpus=0)
    plan = P.make_plan({runs["name"]: runs}, _all, costs, budget_s=10_000, reserve_s=0)
    priced = {p.label: p.estimate_s for p in plan.points}
    assert priced == {"device=cpu, run=best": 0.5, "device=cpu, run=sustained": 7.0}
    with pytest.raises(ValueError, match="plan_s has no seconds for run=burst"):
        declared_plan_s(runs, ("'cpu'", "'burst'"))
    assert declared_plan_s({**runs, "plan_s": 3.0}, ("'cpu'", "'best'")) == 3.0


def test_a_stage_of_families_no_stage_has_run_keeps_more_of_its_time_free():
    """What earlier stages measured is held to their spread; what is priced by declaration alone (the CPU's search
    in the last stage) gets the first re-plan's margin for its share of the stage."""
    from devbench.gpu.costs import REFIT_MARGIN, stage_margin

    plan = P.make_plan(_listing(), _all, ONE_GPU, budget_s=10_000, reserve_s=0)
    every = lambda p: True  # noqa: E731
    assert stage_margin(plan, every, 0.05) == pytest.approx(REFIT_MARGIN)  # nothing learned: capped
    for p in plan.points:
        plan.learned[p.benchmark] = (1.0, 1.0)
    assert stage_margin(plan, every, 0.05) == pytest.approx(0.05)  # all measured: their spread alone
    del plan.learned["bench_m.Mat.time_mm"]
    mixed = stage_margin(plan, every, 0.05)
    assert 0.05 < mixed < REFIT_MARGIN


def test_a_process_that_outlives_sigkill_stops_every_later_stage_and_says_why(tmp_path, monkeypatch, capsys):
    """Stuck in a driver call (state D), it holds its GPU: a later stage would measure beside it, and a world on
    its GPU could hang. No stage starts after it; the plan's points not yet run say why."""
    import argparse

    from devbench.gpu import gpurun, sessions

    real = sessions.kill_session
    monkeypatch.setattr(sessions, "kill_session", lambda sid, wait_s=5.0: real(sid, wait_s) + [424242])
    args = argparse.Namespace(budget_s=600.0, repo=str(tmp_path), out=str(tmp_path / "out"))
    run = gpurun.Run(args)
    assert run.stage("asv headline", [sys.executable, "-c", "pass"], 60.0, 1.0) == 0
    assert run.stuck and "424242" in run.stuck and "'asv headline'" in run.stuck
    assert "outlived SIGKILL: 424242" in capsys.readouterr().out
    assert run.stage("cuda tests", [sys.executable, "-c", "raise SystemExit(7)"], 60.0, 1.0) == gpurun.STUCK_RC
    assert run.stages[-1]["note"].startswith("not started: 1 process(es) of stage 'asv headline'")
    listing = {"bench_m.M.track_tflops": _bench("bench_m.M.track_tflops", [["cuda"], [1, 2]], ["device", "n"])}
    plan = P.make_plan(listing, _all, ONE_GPU, 1000, 0)
    takes = {"headline": lambda p: True}
    assert not gpurun._asv_stages(run, plan, None, 0.0, sys.executable, "m", "a" * 40, [], takes, [])
    assert {p.state for p in plan.points} == {"dropped"}
    assert all(p.reason.startswith("not started: 1 process(es)") for p in plan.points)


def test_a_measuring_process_that_does_not_end_when_let_go_stops_the_run(tmp_path, capsys):
    """The held measuring process runs in a session of its own: a stage's end never sees it. Let go before an NCCL
    stage or the tests, one that does not end (stuck in a driver call) stops the run as a stage's survivor does."""
    import argparse

    from devbench.gpu import gpurun

    class Stuck:
        def release(self):
            return True

    run = gpurun.Run(argparse.Namespace(budget_s=600.0, repo=str(tmp_path), out=str(tmp_path / "out")))
    run.release()  # nothing held: nothing to say
    assert run.stuck is None
    run.holder = Stuck()
    run.release()
    assert run.stuck and "did not end" in run.stuck and "did not end" in capsys.readouterr().out
    assert run.stage("validate", [sys.executable, "-c", "pass"], 60.0, 1.0) == gpurun.STUCK_RC


def test_gpu_only_selects_the_points_that_need_a_gpu():
    """A 'cuda' value, or a class that declares GPUs (a copy between two): the CPU's points and a class with no
    GPU in it are left out."""
    chosen = P.gpu_points(_listing())
    assert "bench_m.Mat.track_tflops('cuda', 8192)" in chosen and "bench_p.Peer.track_gbps('0->1', 1)" in chosen
    assert "bench_m.Mat.track_tflops('cpu', 8192)" not in chosen and "bench_p.Info.track_count" not in chosen
    assert len(chosen) == 3 + 3 + 2  # Mat's two figures at three sizes on cuda, Peer's two sizes


def test_asv_takes_the_listings_discovery_of_its_own_folder_only(tmp_path, monkeypatch):
    """``devbench.gpu.asvrun`` hands asv the discovery gpu-run's listing wrote (asv_runner's own, equal to what asv's
    real ``_disc_benchmarks`` finds in an ``existing`` environment), where it lists the folder asv would discover,
    with the devbench asv imports; else asv discovers as always, and says why."""
    import inspect
    from types import SimpleNamespace

    from asv import benchmarks as B
    from asv import environment

    from devbench.compare.worker import ASV_DISCOVERY_ENV
    from devbench.gpu import asvrun

    assert list(inspect.signature(B.Benchmarks._disc_benchmarks).parameters) == [
        "conf", "repo", "environments", "commit_hashes", "check"]  # fmt: skip
    suite = tmp_path / "listed_suite"  # a package name no other test imports
    suite.mkdir()
    (suite / "__init__.py").write_text("")
    (suite / "bench_x.py").write_text("class X:\n    params = [1, 2]\n\n    def time_x(self, n):\n        pass\n")
    listing = tmp_path / "discovery.json"
    src = str(ROOT / "src")
    subprocess.run([sys.executable, "-c", "import sys; from devbench.compare.worker import write_discovery; "
                    "write_discovery(sys.argv[1], sys.argv[2])", "listed_suite", str(listing)], cwd=tmp_path,
                   env={**os.environ, "PYTHONPATH": src}, check=True)  # fmt: skip
    record = json.loads(listing.read_text())
    from asv.config import Config

    conf = Config()  # asv's defaults; the suite's folder and where environments go
    conf.benchmark_dir, conf.env_dir, conf.repo = "listed_suite", str(tmp_path / "env"), str(tmp_path)
    conf.branches = []  # the commit given is the one tried
    monkeypatch.chdir(tmp_path)  # asv's benchmark_dir is relative to its config's folder
    env = environment.ExistingEnvironment(conf, sys.executable, {}, {})
    assert record["benchmarks"] == B.Benchmarks._disc_benchmarks(conf, None, [env], ["abc"], False)  # asv's own
    asked = []
    monkeypatch.setattr(B.Benchmarks, "_disc_benchmarks",
                        classmethod(lambda cls, *a: asked.append(a) or ["asv's own"]))  # fmt: skip
    monkeypatch.setattr(B.Benchmarks, "_devbench_discovered", False, raising=False)
    monkeypatch.setenv(ASV_DISCOVERY_ENV, str(listing))
    asvrun.discovered_once()
    here = SimpleNamespace(benchmark_dir="listed_suite")
    assert B.Benchmarks._disc_benchmarks(here, None, [], ["abc"], False) == record["benchmarks"] and not asked
    other = SimpleNamespace(benchmark_dir="other")
    assert B.Benchmarks._disc_benchmarks(other, None, [], ["abc"], False) == ["asv's own"]
    assert B.Benchmarks._disc_benchmarks(here, None, [], ["abc"], True) == ["asv's own"]  # asv check imports itself
    listing.write_text(json.dumps({**record, "devbench": "/elsewhere/devbench/__init__.py"}))
    assert B.Benchmarks._disc_benchmarks(here, None, [], ["abc"], False) == ["asv's own"]
    listing.write_text("{half a file")
    assert B.Benchmarks._disc_benchmarks(here, None, [], ["abc"], False) == ["asv's own"]
    assert len(asked) == 4


def test_an_existing_interpreters_run_does_not_warn_of_the_matrix_it_never_uses(monkeypatch):
    """asv's real environment listing warns of each matrix environment it cannot make ("No executable found for
    python 2.1" here, "3.11" on the GPU image); under ``devbench.gpu.asvrun`` a run of existing interpreters alone
    lists them quietly, and a run that asks for a matrix environment still hears why it cannot have it."""
    from asv import environment as E
    from asv.config import Config
    from asv.console import log

    from devbench.gpu import asvrun

    monkeypatch.setattr(E, "get_environments", E.get_environments)  # undone after the test, as the flag
    monkeypatch.setattr(E, "_devbench_quiet", False, raising=False)
    conf = Config()
    conf.pythons, conf.environment_type, conf.matrix = ["2.1"], "virtualenv", {}
    said = []
    monkeypatch.setattr(log, "warning", lambda message, *a, **k: said.append(message))
    asvrun.quiet_matrix()
    envs = list(E.get_environments(conf, [f"existing:{sys.executable}"]))
    assert [type(e).__name__ for e in envs] == ["ExistingEnvironment"] and said == []
    assert list(E.get_environments(conf, ["virtualenv:2.1"])) == []
    assert said and all("2.1" in m for m in said)


def test_a_recorded_plan_with_stages_of_another_shape_prices_no_tests_rather_than_failing(tmp_path):
    """``--costs-from`` of a plan.json whose ``stages`` is not a list (hand-edited, another tool's): its costs are
    read, and no recorded stage is held back, instead of a traceback."""
    from devbench.gpu.costs import costs_from

    record = json.loads((ROOT / "reports" / "gpu" / "h200" / "plan.json").read_text())
    record["stages"] = 5
    (tmp_path / "plan.json").write_text(json.dumps(record))
    costs = costs_from(tmp_path / "plan.json")
    assert costs.gpu_model == "NVIDIA H200" and costs.tests_s == 0.0 and costs.validate_s == 0.0


def test_with_rounds_the_figures_read_from_a_set_up_cache_run_in_an_asv_call_of_one_round(tmp_path, monkeypatch):
    """asv's ``-a rounds=R`` repeats every benchmark, and a figure its class's set-up cache measured (the NCCL
    worlds', the peer matrix's) would be read again each round and its samples stored R times: those points go
    in an asv call of one round after the others', and are priced one round."""
    import argparse
    import types

    args = argparse.Namespace(budget_s=600.0, repo=str(tmp_path), out=str(tmp_path / "out"), rounds=2)
    run = gpurun.Run(args)
    calls = []

    def stage(name, cmd, limit_s, estimate, env=None):
        calls.append((name, cmd[cmd.index("-a") + 1], cmd[cmd.index("--bench") + 1]))
        run.stage_started = time.time()
        run.stages.append({"stage": name, "estimate_s": estimate, "actual_s": 1.0, "rc": 0, "note": ""})
        return 0

    monkeypatch.setattr(run, "stage", stage)
    world = _bench("bench_c.Coll.track_busbw", [["'gloo'"], [2]], ["backend", "world"], plan_setup_s=0.0, plan_s=1.0,
                   figures_in_setup_cache=True)  # fmt: skip
    listing = {**_listing(), world["name"]: world}
    plans = {r: P.make_plan(listing, _all, NO_GPU, 1000, 0, rounds=r) for r in (1, 2)}
    priced = {r: next(p for p in plans[r].points if p.once).estimate_s for r in (1, 2)}
    assert priced[1] == priced[2] > 0
    plan = plans[2]
    points = [p for p in plan.points if p.state == "run"]
    summary = types.SimpleNamespace(save=lambda: None, cut=lambda *a: [])
    code, _, took = gpurun._asv_stage(run, plan, summary, "rest", points, 100.0, 1.0, sys.executable, "m", "a" * 40,
                                      [])  # fmt: skip
    assert code == 0 and took == 2.0
    assert [c[:2] for c in calls] == [("asv rest", "rounds=2"), ("asv rest, one round", "rounds=1")]
    assert calls[1][2] == selection_regex([p for p in points if p.once]) and "bench_c" not in calls[0][2]
    # the others' call cut at its share: the cache's points are left for a fill stage, named so, never "run"
    monkeypatch.setattr(run, "stage", lambda *a, **k: stage(*a, **k) and 124 or 124)
    calls.clear()
    assert gpurun._asv_stage(run, plan, summary, "rest", points, 100.0, 1.0, sys.executable, "m", "a" * 40,
                             [])[0] == 124  # fmt: skip
    assert [c[1] for c in calls] == ["rounds=2"]
    assert {(p.state, p.reason) for p in points if p.once} == {("dropped", P.WAITS_FOR_FILL)}
    for p in points:
        p.state, p.reason = "run", ""
    monkeypatch.setattr(run, "stage", stage)
    calls.clear()
    run.args.rounds = 1  # one round asked: one call over them all
    gpurun._asv_stage(run, plans[1], summary, "rest", points, 100.0, 1.0, sys.executable, "m", "a" * 40, [])
    assert [c[:2] for c in calls] == [("asv rest", "rounds=1")]


def test_a_save_cut_short_leaves_nothing_in_the_results_that_asv_would_walk_into(tmp_path, monkeypatch):
    """asv's later commands walk every folder under the results; a save killed before its clean-up leaves its
    staging folder beside them, and the result file is whole or the one before."""
    from asv import results as R

    from devbench.gpu import asvrun

    monkeypatch.setattr(R.Results, "save", R.Results.save)  # the patch below is undone after the test
    monkeypatch.setattr(R.Results, "add_result", R.Results.add_result)
    monkeypatch.setattr(R.Results, "load_data", R.Results.load_data)
    monkeypatch.delattr(R.Results, "_devbench_patched", raising=False)
    asvrun.save_as_it_goes()
    results = tmp_path / ".asv" / "results"
    (results / "m").mkdir(parents=True)
    monkeypatch.setattr(asvrun.shutil, "rmtree", lambda *a, **k: None)  # killed before its clean-up
    res = R.Results({"machine": "m"}, {}, "a" * 40, 0, "py", "env-name", {})
    res.save(str(results))
    assert [p.name for p in results.iterdir()] == ["m"] and (results / res._filename).is_file()
    assert any(p.name.startswith(".saving-") for p in (tmp_path / ".asv").iterdir())


def test_a_stage_stopped_mid_benchmark_keeps_the_params_asv_finished(tmp_path, monkeypatch):
    """asv adds a benchmark's result once all its params have run: under gpu-run each param's is on disk as it
    ends, so a stage stopped at the third of three params keeps the first two (asv's own add at the end, in memory,
    is the one kept when the benchmark finishes)."""
    import math

    from asv import results as R
    from asv import runner as RN
    from asv.commands import run as RC

    from devbench.gpu import asvrun

    for name in ("save", "add_result", "load_data"):
        monkeypatch.setattr(R.Results, name, getattr(R.Results, name))
    monkeypatch.delattr(R.Results, "_devbench_patched", raising=False)
    monkeypatch.setattr(RC, "run_benchmarks", RC.run_benchmarks)

    def one_param(benchmark, spawner, profile, selected_idx=None, extra_params=None, cwd=None, prev_result=None):
        (idx,) = selected_idx
        if idx == 2:
            raise KeyboardInterrupt  # the stage's limit: asv is stopped mid-benchmark
        result = [math.nan] * 3
        result[idx] = float(idx + 1)
        return RN.BenchmarkResult(result=result, samples=[None] * 3, number=[None] * 3, errcode=0, stderr="",
                                  profile=None)  # fmt: skip

    bench = {"name": "bench_x.track_x", "params": [["1", "2", "3"]], "param_names": ["n"], "version": "1",
             "type": "track", "unit": "x"}  # fmt: skip

    def runs(benchmarks, env, results=None, **kwargs):
        res = RN.run_benchmark(bench, None, False)
        results.add_result(bench, res)

    monkeypatch.setattr(RN, "run_benchmark", one_param)
    monkeypatch.setattr(RN, "run_benchmarks", runs)
    monkeypatch.setattr(asvrun, "SAVE_EVERY_S", 0.0)  # after every param (a GPU run's: every 2 s at most)
    asvrun.save_as_it_goes()
    folder = tmp_path / "results"
    (folder / "m").mkdir(parents=True)
    res = R.Results({"machine": "m"}, {}, "a" * 40, 0, "py", "env-name", {})
    setattr(res, asvrun._DIR, str(folder))
    with pytest.raises(KeyboardInterrupt):
        RC.run_benchmarks(None, None, results=res, record_samples=True)
    saved = R.Results.load(str(folder / res._filename))
    assert saved.get_result_value("bench_x.track_x", bench["params"])[:2] == [1.0, 2.0]
    assert math.isnan(saved.get_result_value("bench_x.track_x", bench["params"])[2])


def test_an_nvidia_smi_that_hangs_is_a_note_not_the_end_of_the_run(tmp_path, monkeypatch):
    from devbench.gpu import gpupack

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsleep 100\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gpupack, "SMI_S", 0.5)
    gpupack._smi(tmp_path / "smi.txt")  # returns: the run goes on
    assert "nvidia-smi: no answer in 0.5 s; stopped" in (tmp_path / "smi.txt").read_text()


def test_a_hang_up_stops_gpu_run_as_a_sigterm_does(monkeypatch, capsys):
    """A lost terminal or ssh session: gpu-run stops its stage and exits 129, not dying with it still running."""
    import signal as S

    from devbench.gpu import gpurun

    def execute(args, listed):
        os.kill(os.getpid(), S.SIGHUP)
        raise AssertionError("not reached: the hang-up stops the run")

    monkeypatch.setattr(gpurun, "execute", execute)
    monkeypatch.setattr(gpurun, "check", lambda args: None)
    args = gpurun.argparse.Namespace(machine="m")
    assert gpurun.run(args) == 129
    assert "terminated; what finished is in the output folder" in capsys.readouterr().err


def test_a_stop_cuts_the_points_asv_had_not_saved_of_the_benchmark_it_was_in(tmp_path):
    """asvrun saves each param as it ends: the benchmark a stopped stage was in (the last asv started) keeps the
    points it saved and cuts the rest; a benchmark asv never started is cut whole; an earlier one stays whole."""
    import datetime
    from types import SimpleNamespace

    from asv.results import Results
    from asv.runner import BenchmarkResult

    from devbench.gpu import plan as P
    from devbench.gpu.gpupack import Summary

    sha = "a" * 40

    def bench(name):
        return {"name": name, "type": "track", "unit": "x", "params": [["1", "2", "3"]], "param_names": ["n"],
                "version": "0" * 64, "timeout": 60.0, "code": ""}  # fmt: skip

    first, stopped, never = (bench(f"bench_a.C.track_{x}") for x in ("first", "stopped", "never"))
    results = tmp_path / "repo" / ".asv" / "results"
    res = Results({"machine": "vm"}, {}, sha, 0, "3.11", "existing-py", {})
    at = datetime.datetime.fromtimestamp(1_000_000, tz=datetime.timezone.utc)
    res.add_result(first, BenchmarkResult(result=[1.0, None, 3.0], samples=[[1.0], None, [3.0]], number=[1, None, 1],
                                          errcode=1, stderr="", profile=None), started_at=at, duration=3.0)  # fmt: skip
    res.add_result(stopped, BenchmarkResult(result=[1.0, math.nan, math.nan], samples=[[1.0], None, None],
                                            number=[1, None, None], errcode=0, stderr="", profile=None),
                   selected_idx={0}, started_at=at + datetime.timedelta(seconds=5), duration=1.0)  # fmt: skip
    res.save(str(results))
    listing = {b["name"]: b for b in (first, stopped, never)}
    plan = P.make_plan(listing, _all, ONE_GPU, 1000, 0)
    run = SimpleNamespace(repo=tmp_path / "repo", started_at=1_000_000 - 1)
    lost = Summary(run, plan, "vm", sha).cut(plan.points, 1_000_000 - 1, "stopped")
    assert sorted((p.benchmark.rsplit("_", 1)[1], p.values) for p in lost) == [
        ("never", ("1",)), ("never", ("2",)), ("never", ("3",)), ("stopped", ("2",)), ("stopped", ("3",))]


def test_the_summary_counts_points_no_stage_reached_apart_from_those_tried(tmp_path):
    """A run that ended early (an abort, a stop) leaves planned points that never started: not "measured or tried"."""
    from types import SimpleNamespace

    from devbench.gpu.gpupack import Summary
    from devbench.gpu.priced import Point

    points = [Point("bench_a.C.track_x", i, (str(i),), ("n",), 0, i, 1.0) for i in range(3)]
    points[0].done = True
    run = SimpleNamespace(repo=tmp_path, started_at=0.0)
    text = Summary(run, SimpleNamespace(points=points), "vm", "a" * 40).text()
    assert text.startswith("gpu-run: 1 points measured or tried, 0 cut by a stop, 0 dropped by the plan, 0 not "
                           "runnable here, 2 planned but not started")  # fmt: skip


def test_plan_only_never_replaces_the_plan_of_a_run_that_ran(tmp_path):
    import argparse

    from devbench.gpu.gpuargs import add_arguments, check

    p = argparse.ArgumentParser()
    add_arguments(p)
    out = tmp_path / "run"
    out.mkdir()
    (out / "plan.json").write_text(json.dumps({"stages": [{"name": "asv headline"}]}))
    assert "holds a run's plan.json" in check(p.parse_args(["--plan-only", "--out", str(out), "--repo", str(ROOT)]))
    (out / "plan.json").write_text(json.dumps({"stages": []}))  # an earlier --plan-only's: replaced as asked
    assert "holds a run's plan.json" not in (check(p.parse_args(["--plan-only", "--out", str(out), "--repo",
                                                                 str(ROOT)])) or "")  # fmt: skip


def test_a_costs_record_of_the_wrong_types_is_named_not_a_traceback(tmp_path):
    from devbench.gpu.costs import costs_from

    record = json.loads((ROOT / "reports" / "gpu" / "h200" / "plan.json").read_text())
    cases = (({"launch_s": "a"}, "'launch_s' is 'a', not a float"), ({"gpus": "2"}, "'gpus' is '2', not an int"))
    for bad, says in cases:
        path = tmp_path / "plan.json"
        path.write_text(json.dumps({**record, "costs": {**record["costs"], **bad}}))
        with pytest.raises(ValueError, match=f"--costs-from {path}: its costs' {says}"):
            costs_from(path)
