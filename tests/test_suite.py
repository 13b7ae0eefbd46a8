import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from devbench.engine import prepare, suite
from devbench.engine.devices import num_gpus, run_info
from devbench.records import runinfo


def test_cuda_param_skips_with_reason_without_gpu():
    if num_gpus():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NotImplementedError, match="CUDA"):
        suite.require_device("cuda")


def test_unknown_device_param_is_an_error():
    with pytest.raises(ValueError, match="tpu"):
        suite.require_device("tpu")


def test_require_gpus_counts(monkeypatch):
    monkeypatch.setattr(suite, "no_cuda_reason", lambda: None)
    monkeypatch.setattr(suite, "num_gpus", lambda: 1)
    with pytest.raises(NotImplementedError, match="needs 2 GPUs, this machine has 1"):
        suite.require_gpus(2)


def test_runinfo_record_appends(tmp_path):
    p1 = runinfo.record(run_info(), tmp_path)
    p2 = runinfo.record(run_info(), tmp_path)
    assert p1 == p2
    recs = runinfo.load(tmp_path)
    assert len(recs) == 2
    assert recs[0]["torch"] == torch.__version__
    (tmp_path / "broken.jsonl").write_text('{"torch": \n')
    assert len(runinfo.load(tmp_path)) == 2


def test_a_run_record_names_the_asv_machine_gpu_run_names(monkeypatch):
    """asv passes a benchmark no machine name (no ``ASV_MACHINE``): on the H200 the record named the VM's host,
    ``vm``, under results recorded as machine ``h200``. gpu-run's ``DEVBENCH_MACHINE`` names it."""
    monkeypatch.setenv("DEVBENCH_MACHINE", "h200")
    assert run_info()["machine"] == "h200"


def test_existing_env_name_matches_asv():
    from asv.environment import get_env_name

    exe = "/opt/py/bin/python"
    assert runinfo.existing_env_name(exe) == get_env_name("existing", exe.replace(os.path.sep, "_"), {}, {})


def test_report_side_of_runinfo_does_not_import_torch():
    code = "import sys, devbench.records.runinfo; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_set_up_again_reuses_the_checked_workload(monkeypatch):
    """asv re-runs setup before every sample: the check and warm-up run once per process."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import benchmarks.bench_matmul as bm

    from devbench.workloads.matmul import Matmul

    monkeypatch.setattr(prepare, "_BUILT", {})
    monkeypatch.setenv("DEVBENCH_BLOCKS", "1")  # how often the work is checked, not how precisely it is timed
    checks = []
    real = Matmul.check
    monkeypatch.setattr(Matmul, "check", lambda self: checks.append(self) or real(self))
    b = bm.MatmulSquare()
    for _ in range(3):
        b.setup("cpu", "float32", 64)
        b.track_time("cpu", "float32", 64)
        b.teardown("cpu", "float32", 64)
    assert len(checks) == 1
    b.setup("cpu", "float32", 16)  # another combination is its own workload
    assert len(checks) == 2


def test_set_up_again_builds_and_checks_models_once_and_still_writes_the_file(monkeypatch):
    """The same for the model and parallel benchmarks; StateDict's file is written again each time
    (teardown removes it) while the model and the round-trip check are built once."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import benchmarks.bench_model as bmo
    import benchmarks.bench_parallel as bp

    monkeypatch.setattr(prepare, "_BUILT", {})
    counts = {"step": 0, "forward": 0, "state": 0, "pair": 0}

    def counting(name, real):
        def wrapped(*a, **k):
            counts[name] += 1
            return real(*a, **k)

        return wrapped

    monkeypatch.setattr(bmo.TrainStep, "check", counting("step", bmo.TrainStep.check))
    monkeypatch.setattr(bmo, "check_forward", counting("forward", bmo.check_forward))
    monkeypatch.setattr(bmo, "check_state", counting("state", bmo.check_state))
    monkeypatch.setattr(bp, "ParallelPair", counting("pair", bp.ParallelPair))
    monkeypatch.setenv("DEVBENCH_BLOCKS", "1")
    cases = [(bmo.TrainingStep(), "track_time", ("cpu", "lazy_linear", "plain")),
             (bmo.Forward(), "track_time", ("cpu", "lazy_linear")),
             (bmo.StateDict(), "track_load_time", ("cpu", "1M")),
             (bp.ParallelMatmul(), "track_parallel_time", ("cpu_threads", 64))]  # fmt: skip
    for bench, method, params in cases:
        for _ in range(3):
            bench.setup(*params)
            getattr(bench, method)(*params)
            if isinstance(bench, bmo.StateDict):
                assert bench.path.is_file()  # the file track_load_time reads is there every time
            bench.teardown(*params)
    assert counts == {"step": 1, "forward": 1, "state": 1, "pair": 1}


def test_with_samples_checks_its_input():
    assert suite.with_samples([1, 2.5], 3) == {"samples": [1.0, 2.5], "number": 3}
    with pytest.raises(ValueError, match="at least one"):
        suite.with_samples([])
    with pytest.raises(ValueError, match="finite"):
        suite.with_samples([1.0, float("inf")])


def test_check_once_checks_in_every_process_under_asv_and_once_per_side_in_a_compare(tmp_path, monkeypatch):
    """Without DEVBENCH_CHECKED (asv, gpu-run) every process checks. With it (a compare's side), the first
    check of a key is recorded and later processes only warm up; a failed check records nothing."""
    from devbench.engine import suite

    calls = []
    monkeypatch.delenv(suite.CHECKED_ENV, raising=False)
    for _ in range(2):
        suite.check_once(("K", 1), lambda: calls.append("check"), lambda: calls.append("warm"))
    assert calls == ["check", "check"]

    calls.clear()
    monkeypatch.setenv(suite.CHECKED_ENV, str(tmp_path / "side"))

    def bad():
        calls.append("bad")
        raise AssertionError("wrong answer")

    with pytest.raises(AssertionError):
        suite.check_once(("K", 2), bad, lambda: calls.append("warm"))
    suite.check_once(("K", 1), lambda: calls.append("check"), lambda: calls.append("warm"))
    suite.check_once(("K", 1), lambda: calls.append("check"), lambda: calls.append("warm"))
    suite.check_once(("K", 2), lambda: calls.append("check2"), lambda: calls.append("warm2"))
    assert calls == ["bad", "check", "warm", "check2"]
    # the folder exported to another commit's work, torch build or GPU: its checks stand for nothing there
    for other in (("other work", "2.13.0", None, ()), ("f", "2.14.0", None, ()), ("f", "2.13.0", "13.0", ("GPU-x",))):
        calls.clear()
        monkeypatch.setattr(prepare, "_checked_scope", lambda other=other: other)
        suite.check_once(("K", 1), lambda: calls.append("check"), lambda: calls.append("warm"))
        assert calls == ["check"], other
    fingerprint = prepare._work_fingerprint()
    assert len(fingerprint) == 40 and fingerprint == prepare._work_fingerprint()
    # the scope itself: the work, the torch build, this host and the GPUs (none here: a CPU point's scope still
    # names its host, so a folder carried to another machine checks again)
    import platform

    import torch

    monkeypatch.undo()
    scope = prepare._checked_scope()
    assert scope[0] == fingerprint and torch.__version__ in scope and torch.version.git_version in scope
    assert platform.node() in scope and scope[-1] == ()
    # the work's own files: the workloads and the engine's timing, wherever the package keeps them
    package = Path(prepare.__file__).resolve().parents[1]  # found beside the package, installed or not
    names = {f.relative_to(package).as_posix() for f in prepare._work_files()}
    assert {"workloads/matmul.py", "engine/measure.py", "engine/blocks.py"} <= names


def test_ready_builds_checks_and_warms_once_per_process_and_again_after_the_process_forgets(monkeypatch):
    monkeypatch.setattr(prepare, "_BUILT", {})
    monkeypatch.delenv(prepare.CHECKED_ENV, raising=False)
    made = []

    class Work:
        device = torch.device("cpu")

        def __init__(self):
            self.calls, self.checks = 0, 0
            made.append(self)

        def check(self):
            self.checks += 1

        def __call__(self):
            self.calls += 1

    first = suite.ready(("W", 1), Work)
    assert suite.ready(("W", 1), lambda: Work()) is first and len(made) == 1  # once per process, whatever callable
    assert first.checks == 1 and first.calls >= 1  # checked, then warmed on its device
    prepare.forget_built()  # the measuring process lets the workload go: the next set-up builds it again
    assert suite.ready(("W", 1), Work) is not first and len(made) == 2


def test_a_compare_worker_names_the_checked_folder_the_suite_reads():
    from devbench.compare import session
    from devbench.engine import suite

    assert session.CHECKED_ENV == suite.CHECKED_ENV


TRACKED = '''
from devbench.engine.suite import with_samples


class Tracked:
    rounds = 1
    repeat = 1
    warmup_time = 0.0

    def track_rate(self):
        return with_samples([4.0, 1.0, 3.0, 2.0, 5.0], number=7)

    track_rate.unit = "GB/s"
'''


@pytest.mark.slow
def test_track_figures_with_samples_keep_them_in_asv(tmp_path):
    """Every ``track_`` figure of the suite returns ``with_samples``' dict and relies on asv's runner reading it
    as a sampled result: the median as the figure, the samples kept, an interval computed. Run by asv itself
    on a one-benchmark project; fails the day asv stops doing so."""
    import json

    sys.path.insert(0, os.path.dirname(__file__))
    from asv_fixture import _git, asv, one_module_project

    project, home = one_module_project(tmp_path, "bench_t", TRACKED)
    out = asv(project, home, "run", "-E", f"existing:{sys.executable}", "--machine", "m", "--record-samples",
              "--set-commit-hash", _git(project, "rev-parse", "HEAD"))  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = [p for p in (project / "results" / "m").glob("*.json") if p.name != "machine.json"]
    data = json.loads(path.read_text())
    row = dict(zip(data["result_columns"], data["results"]["bench_t.Tracked.track_rate"], strict=False))
    assert row["result"] == [3.0]  # the median of the samples, not the dict
    assert sorted(row["samples"][0]) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert row["stats_number"] == [7] and row["stats_ci_99_a"][0] <= 3.0 <= row["stats_ci_99_b"][0]


def test_a_figure_whose_samples_disagree_is_flagged_beside_it(capsys):
    suite.with_samples([1.0, 1.01, 0.99, 1.02])
    assert capsys.readouterr().err == ""
    suite.with_samples([1.0, 1.5, 0.7, 1.3, 0.9])
    err = capsys.readouterr().err
    assert "interquartile range is" in err and "of their median (over 10%" in err


def test_figures_that_count_the_same_blocks_share_one_measurement():
    """``suite.shared``: a speedup and its efficiency read the same pairs; asked again (asv's next round), anew."""
    from devbench.engine.suite import shared

    class Bench:
        pass

    taken = []
    bench = Bench()

    def take():
        taken.append(1)
        return len(taken)

    assert shared(bench, "speedup", take) == 1 and shared(bench, "efficiency", take) == 1 and len(taken) == 1
    assert shared(bench, "speedup", take) == 2  # the same figure again: measured anew
    assert shared(bench, "efficiency", take) == 2 and len(taken) == 2
