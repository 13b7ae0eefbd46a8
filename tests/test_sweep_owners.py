"""The measuring process's owners (``devbench.engine.owners``) and the measuring process under asv itself: who
ends it, how gpu-run's stages share one, and what a point selected or a stage stopped keeps."""

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
from sweep_fixture import BENCH, _log, _point, _servers, _stop_servers


def test_the_measuring_process_ends_with_its_owner(tmp_path):
    """Its owner is the points' parent (asv's forkserver): when that ends, so does the measuring process."""
    import subprocess

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    path = tmp_path / "m.sock"
    proc = subprocess.Popen([sys.executable, "-m", "devbench.engine.measuring", "--socket", str(path),
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


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's state in /proc")
def test_an_owner_that_ended_and_waits_to_be_reaped_is_not_alive():
    """A zombie answers signal 0: an owner whose parent never reaps it (a container's first process that reaps
    nothing) must still end its measuring process."""
    before = signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would reap it at once
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 5.0
        while sweep.alive(pid) and time.monotonic() < deadline:  # it has ended; nobody has reaped it yet
            time.sleep(0.01)
        os.kill(pid, 0)  # still in the process table: signal 0 alone would call it alive
        assert not sweep.alive(pid)
    finally:
        os.waitpid(pid, 0)
        signal.signal(signal.SIGCHLD, before)
    assert sweep.alive(os.getpid())


def test_one_measuring_process_serves_every_asv_call_made_while_it_is_held(suite_dir, monkeypatch):
    """gpu-run holds an owner over its consecutive asv calls: their points ask one measuring process (one CUDA
    context, one cuBLAS start), which ends when the holder lets go, its socket gone before ``held`` returns."""
    with sweep.held() as holder:
        owner = holder.env()[sweep.OWNER_ENV]
        monkeypatch.setenv(sweep.OWNER_ENV, owner)
        _asv_call(("track_a", ("cpu", 1)))
        _asv_call(("track_a", ("cpu", 2)))
        (server,) = _servers(suite_dir)
        assert sweep.alive(server)  # between the calls, still up
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
        assert holder.release() is False  # it ended within the wait: nothing stuck
        assert _gone(server, within_s=10)  # not after the minute's figure
        _end_call(call)


def test_without_a_holder_each_asv_call_has_its_own_measuring_process(suite_dir, monkeypatch):
    monkeypatch.delenv(sweep.OWNER_ENV, raising=False)
    _asv_call(("track_a", ("cpu", 1)))
    _asv_call(("track_a", ("cpu", 2)))
    assert len(_servers(suite_dir)) == 2


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
    # DEVBENCH_SWEEP unset: gpu-run's stages send a swept class's CPU points to the measuring process themselves
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
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


def test_a_measuring_process_that_outlives_its_holder_is_reported_not_ended():
    """A measuring process removes its socket before it exits, and its exit can hang in the driver: the holder goes
    by the pid and start time it wrote beside its socket. One still alive when the wait ends is reported (gpu-run
    then starts nothing more); one killed outright, its socket left behind, is not, nor is a pid given since to
    another process."""
    import subprocess

    from devbench.engine.owners import Holder, measuring_pids, sockets, started_at

    holder = Holder()
    sockets().mkdir(parents=True, exist_ok=True)
    made: list[Path] = []

    def measuring(pid_text: str) -> int:
        """A fake measuring process of the holder's next owner: its pid file and a socket left behind."""
        owner = int(holder.env()[sweep.OWNER_ENV])
        for suffix, text in ((".pid", pid_text), (".sock", "")):
            made.append(sockets() / f"m{owner}-0{suffix}")
            made[-1].write_text(text)
        return owner

    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = measuring(f"{fake.pid} {started_at(fake.pid)}")
        assert measuring_pids(owner) == [(fake.pid, started_at(fake.pid))] and measuring_pids(owner + 1) == []
        assert holder.release(wait_s=0.5) is True  # still alive after the wait
        measuring(f"{fake.pid} 1")  # its pid, another start time: another process
        assert holder.release(wait_s=0.5) is False
        measuring(str(fake.pid))  # no start time written: the pid alone
        fake.kill()
        fake.wait()
        assert holder.release(wait_s=5.0) is False  # ended: its stale socket says nothing
    finally:
        fake.kill()
        fake.wait()
        for path in made:
            path.unlink(missing_ok=True)
    assert holder.release() is False  # nothing held any more


def test_a_process_whose_main_thread_ended_while_another_runs_is_alive(tmp_path):
    """Its main thread shows ``Z``; another thread still in the kernel (a driver call) keeps the process, and the GPU
    it holds, alive."""
    import subprocess

    from devbench.engine.owners import alive, process_state

    script = tmp_path / "z.py"
    script.write_text("import ctypes, threading, time\nthreading.Thread(target=time.sleep, args=(30,)).start()\n"
                      "time.sleep(0.2)\nctypes.CDLL(None).pthread_exit(None)\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 10
        while process_state(proc.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_state(proc.pid) == "Z" and alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not alive(proc.pid)


def test_the_sockets_folder_is_short_enough_for_a_socket_whatever_tmpdir(tmp_path, monkeypatch):
    """A Unix socket's path holds at most 107 bytes: under a long TMPDIR (a test's, a job scheduler's) the sockets
    go to /tmp, where a measuring process can bind them; a short TMPDIR is used as it is."""
    import socket
    import tempfile

    from devbench.engine import owners, sweep

    if not os.access("/tmp", os.W_OK | os.X_OK):
        pytest.skip("/tmp is not writable here: the sockets stay in the temporary folder")
    long = tmp_path / ("d" * 60) / ("e" * 40)
    long.mkdir(parents=True)
    short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))  # /tmp/sXXXXXXXX
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(long))
    folder = owners.sockets()
    assert folder.parent == Path("/tmp")
    path = sweep._address(9999999)
    assert path.parent == folder and len(str(path).encode()) <= owners.SOCKET_PATH_MAX
    folder.mkdir(mode=0o700, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))  # the longest name the folder holds binds
    finally:
        listener.close()
        path.unlink(missing_ok=True)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(short))
    try:
        assert owners.sockets().parent == short
    finally:
        short.rmdir()
