"""The measuring process (``devbench.engine.sweep``): a swept class's points ask it, as asv's point processes would.

Each point here is a forked child that calls ``setup``, one figure and ``teardown``, as asv's forkserver does;
``DEVBENCH_SWEEP=all`` routes every point of a swept class through the measuring process on the CPU, the
switch that lets ``make test`` run the path a GPU takes."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from devbench.engine import sweep

BENCH = '''
import os
from pathlib import Path

from devbench.engine.suite import Benchmark, instrumented, with_samples
from devbench.engine.prepare import once

LOG = Path(os.environ["FAKE_LOG"])


def note(what):
    with open(LOG, "a") as out:
        out.write(f"{os.getpid()} {what}\\n")


@instrumented
class Fake(Benchmark):
    params = [["cpu", "cuda"], [1, 2]]
    param_names = ["device", "n"]
    swept = True
    skips = [{"where": {"device": ["cuda"], "n": [2]}, "reason": "declared: never here"}]
    timeout = float(os.environ.get("FAKE_TIMEOUT", "300"))

    def setup(self, device, n):
        if device == "cuda":
            raise NotImplementedError("no CUDA in the fake")
        note(f"build {device} {n}")
        self.n = once(("Fake", device, n), lambda: note(f"made {n}") or n)

    def teardown(self, device, n):
        note(f"teardown {device} {n}")

    def track_a(self, device, n):
        note(f"measure a {n}")
        if n == 2 and os.environ.get("FAKE_FAIL"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return with_samples([float(self.n)] * 3)

    def track_b(self, device, n):
        note(f"measure b {n}")
        if n == 2 and os.environ.get("FAKE_FAIL_B"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if n == 2 and os.environ.get("FAKE_SLEEP"):
            import time

            time.sleep(60)
        return with_samples([10.0 * self.n] * 3)

    track_a.unit = track_b.unit = "x"
'''


@pytest.fixture
def suite_dir(tmp_path, monkeypatch):
    pkg = tmp_path / "fakebench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bench_fake.py").write_text(textwrap.dedent(BENCH))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log.txt"))
    monkeypatch.setenv(sweep.DIR_ENV, str(tmp_path / "sweep"))
    monkeypatch.setenv(sweep.MODE_ENV, "all")
    monkeypatch.delenv(sweep.SERVER_ENV, raising=False)
    monkeypatch.delenv(sweep.SELECT_ENV, raising=False)
    yield tmp_path
    _stop_servers(tmp_path)


def _servers(root: Path) -> set[int]:
    journal = root / "sweep" / "journal.jsonl"
    pids = {json.loads(line)["pid"] for line in journal.read_text().splitlines()} if journal.exists() else set()
    log = root / "log.txt"
    if log.exists():
        pids |= {int(line.split()[0]) for line in log.read_text().splitlines()}
    return pids - {os.getpid()}


def _stop_servers(root: Path) -> None:
    """SIGTERM the measuring processes this test started, each checked to be one first (a pid can be reused)."""
    for pid in _servers(root):
        try:
            if "devbench.engine.sweep" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGTERM)
        except (FileNotFoundError, ProcessLookupError):
            pass


def _point(method: str, *args) -> dict:
    """One point as asv runs it: a forked process that sets up, calls the figure and tears down."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the point
        os.close(read)
        try:
            from fakebench.bench_fake import Fake

            bench = Fake()
            try:
                bench.setup(*args)
                out = {"result": getattr(bench, method)(*args)}
            except NotImplementedError as skip:
                out = {"skip": str(skip)}
            except Exception as exc:  # noqa: BLE001
                out = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                bench.teardown(*args)
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)


def _log(root: Path, made: bool = False) -> list[str]:
    """What the fake's workloads did, tear-downs aside (the measuring process tears a workload down when the
    next is built or after a few seconds without a request) and, unless ``made``, what ``once`` built."""
    path = root / "log.txt"
    lines = [line.split(" ", 1)[1] for line in path.read_text().splitlines()] if path.exists() else []
    return [x for x in lines if not x.startswith("teardown") and (made or not x.startswith("made"))]


def test_a_workload_is_built_once_for_all_its_figures_and_each_figure_served_once(suite_dir):
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3
    assert _log(suite_dir) == ["build cpu 1", "measure a 1", "measure b 1"]
    # the twin was measured with it, from the same build: asked now, it is served, not built again
    assert _point("track_b", "cpu", 1)["result"]["samples"] == [10.0] * 3
    assert len(_log(suite_dir)) == 3
    # asked again (asv's next round, a compare's next turn): measured again, never served twice; built again
    # only where the measuring process let the workload go meanwhile (seconds without a request)
    assert _point("track_b", "cpu", 1)["result"]["samples"] == [10.0] * 3
    assert [x for x in _log(suite_dir)[3:] if x != "build cpu 1"] == ["measure b 1", "measure a 1"]
    assert _point("track_a", "cpu", 2)["result"]["samples"] == [2.0] * 3
    assert _log(suite_dir)[-3:] == ["build cpu 2", "measure a 2", "measure b 2"]
    full = (suite_dir / "log.txt").read_text()
    assert "teardown cpu 1" in full  # the next workload's build let the first go
    # and with it what suite.once built for it: built again when asked again, not kept in memory
    assert _point("track_b", "cpu", 1)["result"]["samples"] == [10.0] * 3  # not waiting: built again
    assert _log(suite_dir, made=True).count("made 1") == 2
    # every point was served by one measuring process, not by the points themselves
    pids = {line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()}
    assert len(pids) == 1 and str(os.getpid()) not in pids


def test_skips_come_back_as_skips_and_the_declared_ones_never_ask(suite_dir):
    assert _point("track_a", "cuda", 1) == {"skip": "no CUDA in the fake"}
    assert _point("track_a", "cuda", 2) == {"skip": "declared: never here"}
    # the measuring process tore the skipped set-up down, as asv does; the declared skip never reached it
    assert _log(suite_dir) == [] and (suite_dir / "log.txt").read_text().split()[1:] == ["teardown", "cuda", "1"]
    journal = suite_dir / "sweep" / "journal.jsonl"
    assert not journal.exists() or "built" not in journal.read_text()


def test_the_run_selection_limits_what_is_measured_with_the_asked_figure(suite_dir, monkeypatch):
    """Each point's own selection holds, not the one the measuring process started with (a compare's child
    selects its one combination; the process outlives it)."""
    _point("track_a", "cpu", 2)
    assert _log(suite_dir) == ["build cpu 2", "measure a 2", "measure b 2"]
    monkeypatch.setenv(sweep.SELECT_ENV, r"bench_fake\.Fake\.track_a")
    _point("track_a", "cpu", 1)
    assert _log(suite_dir)[3:] == ["build cpu 1", "measure a 1"]
    assert len({line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()}) == 1


def test_a_cuda_error_fails_its_figure_and_the_next_point_gets_a_fresh_process(suite_dir, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1")
    first = _point("track_a", "cpu", 2)
    assert "CUDA error: an illegal memory access" in first["error"] and "measuring process" in first["error"]
    before = {line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()}
    deadline = time.monotonic() + 30
    while any(sweep.alive(int(p)) for p in before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(sweep.alive(int(p)) for p in before), "the measuring process went on after a CUDA error"
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3
    after = {line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()}
    assert len(after - before) == 1  # a fresh measuring process measured the next point
    journal = [json.loads(line) for line in (suite_dir / "sweep" / "journal.jsonl").read_text().splitlines()]
    assert any("CUDA error" in r.get("error", "") for r in journal)


def test_a_cuda_error_in_a_twin_ends_the_process_too(suite_dir, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL_B", "1")
    assert _point("track_a", "cpu", 2)["result"]["samples"] == [2.0] * 3  # the asked figure was measured
    first = {line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()}
    journal = (suite_dir / "sweep" / "journal.jsonl").read_text()
    assert "CUDA error" in journal and "track_b" in journal
    monkeypatch.delenv("FAKE_FAIL_B")
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3
    pids = [line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()]
    assert pids[-1] not in first  # the error in the twin ended that process: a fresh one measured the next


def test_a_figure_past_its_timeout_ends_the_process_and_the_next_point_goes_on(suite_dir, monkeypatch):
    """asv stops a point at its timeout; the measuring process stops the figure too, so that later points do not
    wait behind it."""
    monkeypatch.setenv("FAKE_SLEEP", "1")  # read by the measuring process when it starts: n = 2's twin hangs
    # a first point starts the process and imports the suite under the default timeout: only the hang may reach
    # the short one, however slow this host is to start a process
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3
    monkeypatch.setenv("FAKE_TIMEOUT", "5")
    assert "error" in _point("track_a", "cpu", 2)  # its twin hangs: the point's wait ends at its timeout
    hung = int(next(line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()
                    if line.endswith("measure b 2")))  # fmt: skip
    monkeypatch.delenv("FAKE_SLEEP")
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3
    served = int((suite_dir / "log.txt").read_text().splitlines()[-1].split()[0])
    assert served != hung  # a fresh process measured it: the hung one was ended, not waited behind
    cmdline = Path(f"/proc/{hung}/cmdline")
    assert not sweep.alive(hung) or "devbench.engine.sweep" not in cmdline.read_text(errors="replace")


def test_the_measuring_process_ends_with_its_owner(tmp_path):
    """Its owner is the points' parent (asv's forkserver): when that ends, so does the measuring process."""
    import subprocess

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    path = tmp_path / "m.sock"
    proc = subprocess.Popen([sys.executable, "-m", "devbench.engine.sweep", "--socket", str(path),
                             "--owner", str(owner.pid)])
    try:
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.exists() and proc.poll() is None
        owner.kill()
        owner.wait()
        assert proc.wait(timeout=30) == 0
        assert not path.exists()
    finally:
        owner.kill()
        proc.kill()


def _asv_call(*points: tuple[str, tuple], wait: bool = True) -> int:
    """Points run from one forked parent in a session of its own, as gpu-run runs an asv call; the session is
    killed when the call ends, as gpu-run kills a stage's. ``wait=False``: the call's pid, running."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            for method, args in points:
                _point(method, *args)
        finally:
            os._exit(0)
    if wait:
        _end_call(pid)
    return pid


def _end_call(pid: int) -> None:
    os.waitpid(pid, 0)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _gone(pid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_one_measuring_process_serves_every_asv_call_made_while_it_is_held(suite_dir, monkeypatch):
    """gpu-run holds an owner over its consecutive asv calls: their points ask one measuring process (one CUDA
    context, one cuBLAS start), which ends when the holder lets go, its socket gone before ``held`` returns."""
    with sweep.held() as holder:
        owner = holder.env()[sweep.OWNER_ENV]
        monkeypatch.setenv(sweep.OWNER_ENV, owner)
        _asv_call(("track_a", ("cpu", 1)))
        _asv_call(("track_a", ("cpu", 2)))
        (server,) = _servers(suite_dir)
        assert not _gone(server, within_s=0.0)
        assert _log(suite_dir) == ["build cpu 1", "measure a 1", "measure b 1", "build cpu 2", "measure a 2",
                                   "measure b 2"]  # fmt: skip
    assert not list(sweep.sockets().glob(f"m{owner}-*.sock"))
    assert _gone(server)


def test_a_held_measuring_process_ends_mid_figure_when_its_holder_is_released(suite_dir, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "1")  # the second workload's twin figure sleeps a minute
    with sweep.held() as holder:
        monkeypatch.setenv(sweep.OWNER_ENV, holder.env()[sweep.OWNER_ENV])
        call = _asv_call(("track_a", ("cpu", 2)), wait=False)
        deadline = time.monotonic() + 60
        while "measure b 2" not in _log(suite_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        (server,) = _servers(suite_dir)
        holder.release()
        assert _gone(server, within_s=10)  # not after the minute's figure
        _end_call(call)


def test_without_a_holder_each_asv_call_has_its_own_measuring_process(suite_dir, monkeypatch):
    monkeypatch.delenv(sweep.OWNER_ENV, raising=False)
    _asv_call(("track_a", ("cpu", 1)))
    _asv_call(("track_a", ("cpu", 2)))
    assert len(_servers(suite_dir)) == 2


def test_a_bad_mode_names_itself(monkeypatch):
    monkeypatch.setenv(sweep.MODE_ENV, "sometimes")
    with pytest.raises(ValueError, match="DEVBENCH_SWEEP='sometimes'"):
        sweep.mode()


def test_a_swept_class_has_only_track_figures():
    from devbench.engine.suite import Benchmark

    with pytest.raises(TypeError, match="time_x"):  # said as the class is made

        class Bad(Benchmark):
            swept = True

            def setup(self):
                pass

            def time_x(self):
                pass


@pytest.mark.slow
def test_asv_selecting_one_point_builds_that_workload_alone(tmp_path, monkeypatch):
    """asv itself, one point selected with --bench: its workload built once, the other combinations never, and
    the figure recorded with its samples (asv runs a ``track_`` figure in one round, whatever ``rounds`` says).
    With the run's selection known (``DEVBENCH_BENCH``, as gpu-run and compare set it), the workload's other
    figure is not measured either."""
    sys.path.insert(0, os.path.dirname(__file__))
    from asv_fixture import _git, asv, one_module_project

    project, home = one_module_project(tmp_path, "bench_fake", textwrap.dedent(BENCH))
    log = tmp_path / "log.txt"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv(sweep.DIR_ENV, str(tmp_path / "sweep"))
    monkeypatch.setenv(sweep.MODE_ENV, "all")
    monkeypatch.delenv(sweep.SELECT_ENV, raising=False)
    try:
        out = asv(project, home, "run", "-E", f"existing:{sys.executable}", "--machine", "m", "--record-samples",
                  "--bench", r"Fake\.track_a\('cpu', 2\)", "--set-commit-hash", _git(project, "rev-parse", "HEAD"))
        assert out.returncode == 0, out.stdout + out.stderr
        lines = [x.split(" ", 1)[1] for x in log.read_text().splitlines() if " teardown " not in x]
        assert lines == ["build cpu 2", "made 2", "measure a 2", "measure b 2"]
        (path,) = [p for p in (project / "results" / "m").glob("*.json") if p.name != "machine.json"]
        data = json.loads(path.read_text())
        row = dict(zip(data["result_columns"], data["results"]["bench_fake.Fake.track_a"], strict=False))
        assert row["result"][1] == 2.0 and row["samples"][1] == [2.0] * 3
        assert all(r != r for i, r in enumerate(row["result"]) if i != 1)  # not run: asv's NaN
        log.unlink()
        monkeypatch.setenv(sweep.SELECT_ENV, r"Fake\.track_a\('cpu', 2\)")
        out = asv(project, home, "run", "-E", f"existing:{sys.executable}", "--machine", "m",
                  "--bench", r"Fake\.track_a\('cpu', 2\)", "--set-commit-hash", _git(project, "rev-parse", "HEAD"))
        assert out.returncode == 0, out.stdout + out.stderr
        assert [x.split(" ", 1)[1] for x in log.read_text().splitlines() if " teardown " not in x] == [
            "build cpu 2", "made 2", "measure a 2"]  # fmt: skip
    finally:
        _stop_servers(tmp_path)


_STOP = """
import time

from devbench.engine.suite import Benchmark, instrumented, with_samples


@instrumented
class Fast(Benchmark):
    swept = True

    def setup(self):
        pass

    def track_one(self):
        return with_samples([1.0] * 3)


@instrumented
class Slow(Benchmark):
    swept = True
    timeout = 900

    def setup(self):
        pass

    def track_two(self):
        time.sleep(600)
        return with_samples([2.0] * 3)
"""


@pytest.mark.slow
def test_a_stage_stopped_mid_sweep_keeps_the_figures_the_measuring_process_finished(tmp_path):
    """gpu-run with every point through the measuring process, stopped (SIGTERM) while it measures the second
    class: the first class's figure is kept in the packed results, the second is cut, and the measuring
    process ends with the stage."""
    import re
    import shutil
    import subprocess
    import tarfile

    sys.path.insert(0, os.path.dirname(__file__))
    from asv_fixture import _git, terminate

    root = Path(__file__).resolve().parents[1]
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(root / "asv.conf.json", repo)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "benchmarks" / "bench_stop.py").write_text(_STOP)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "suite")
    out, log = tmp_path / "out", tmp_path / "log"
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", sweep.MODE_ENV: "all"}
    cmd = [sys.executable, "-m", "devbench.cli", "gpu-run", "--repo", str(repo), "--machine", "cpu-box",
           "--no-tests", "--no-validate", "--budget-s", "900", "--out", str(out)]  # fmt: skip
    journal = repo / ".asv" / "sweep" / "journal.jsonl"

    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while not (re.search(r"bench_stop\.Fast\.track_one\s+1\.0", log.read_text()) and journal.exists()):
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.2)
            time.sleep(2.0)  # the slow figure is being measured
        except BaseException:
            terminate(proc)
            raise
        code = terminate(proc)
    assert code == 143, log.read_text()[-3000:]
    record = json.loads((out / "plan.json").read_text())
    states = {p["benchmark"]: p["state"] for p in record["points"]}
    assert states == {"bench_stop.Fast.track_one": "run", "bench_stop.Slow.track_two": "cut"}
    with tarfile.open(out / "results.tgz") as tar:
        name = next(n for n in tar.getnames() if re.search(r"results/cpu-box/[0-9a-f]{8}-existing.*\.json$", n))
        data = json.load(tar.extractfile(name))
        assert any(n.endswith("sweep/journal.jsonl") for n in tar.getnames())  # the journal is packed
    assert data["results"]["bench_stop.Fast.track_one"][0] == [1.0]
    # its samples are kept too: asv compare judges gpu-run's figures with its own statistics
    row = dict(zip(data["result_columns"], data["results"]["bench_stop.Fast.track_one"], strict=False))
    assert row["samples"] == [[1.0, 1.0, 1.0]]
    assert "bench_stop.Slow.track_two" not in data["results"]
    pids = {json.loads(line)["pid"] for line in journal.read_text().splitlines()}
    deadline = time.monotonic() + 10
    while any(sweep.alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(sweep.alive(p) for p in pids), "the measuring process outlived the stage"


def test_a_classs_cpu_points_keep_their_processes_on_a_gpu_host(monkeypatch):
    """``auto``: only the points that use a GPU ask the measuring process; a class that says which of its points
    need GPUs by param value (``plan_gpus``) keeps the others in their own processes."""
    from devbench.engine import suite

    monkeypatch.setenv(sweep.MODE_ENV, "auto")
    monkeypatch.delenv(sweep.SERVER_ENV, raising=False)
    monkeypatch.setattr(suite, "no_cuda_reason", lambda: None)  # as on a GPU host

    class Par:
        param_names = ["mode", "n"]
        plan_gpus = {"mode": {"gpus": 2, "streams": 1}}

    class Dev:
        param_names = ["device", "n"]

    assert suite._on_sweep(Par(), ("streams", 1024)) and not suite._on_sweep(Par(), ("cpu_threads", 1024))
    assert suite._on_sweep(Dev(), ("cuda", 64)) and not suite._on_sweep(Dev(), ("cpu", 64))
    monkeypatch.setattr(suite, "no_cuda_reason", lambda: "no CUDA")
    assert not suite._on_sweep(Dev(), ("cuda", 64))  # the point skips in its own process, with the reason
