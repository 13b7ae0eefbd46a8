"""The measuring process (``engine.sweep`` asks, ``engine.measuring`` serves), asked as asv's points would.

Each point here is a forked child that calls ``setup``, one figure and ``teardown``, as asv's forkserver does;
``DEVBENCH_SWEEP=all`` routes every point of a swept class through the measuring process on the CPU, the
switch that lets ``make test`` run the path a GPU takes."""


from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path

import pytest

from devbench.engine import measuring, sweep
from sweep_fixture import _log, _point


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
    # its journal opens with how long it took to start, apart from its builds (gpu-run learns without it)
    journal = [json.loads(line) for line in (suite_dir / "sweep" / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["started"] and journal[0]["seconds"] > 0 and "built" in journal[1]


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


def test_the_selection_names_a_benchmark_without_params_as_asv_does(monkeypatch):
    """asv matches ``--bench`` against ``name(params)``, and against the bare name where there are none."""
    monkeypatch.setenv(sweep.SELECT_ENV, r"^(?:m\.C\.track_x|m\.C\.track_y\('a'\))$")
    assert sweep.selected("m.C.track_x", []) and sweep.selected("m.C.track_y", ["a"])
    assert not sweep.selected("m.C.track_y", []) and not sweep.selected("m.C.track_x", ["a"])


def test_points_that_share_a_build_are_set_up_over_it_and_timed_with_the_asked_one(suite_dir, monkeypatch):
    """``built_by``: asv asks a class's points in its params' order, so the points that differ only in the other
    params come back after other builds; the measuring process times them over the held build, where the run
    names its selection, and serves each when asked."""
    shared, replied = "bench_fake.Shared", suite_dir / "replied"
    monkeypatch.setenv("FAKE_AFTER", str(replied))
    _point("track_a", "up", 1, cls=shared)  # no selection named (plain asv run): nothing timed ahead
    assert _log(suite_dir) == ["build up 1", "measure up 1"]
    monkeypatch.setenv(sweep.SELECT_ENV, r"bench_fake\.Shared\.track_a\('(up|down)', 2\)")
    assert _point("track_a", "up", 2, cls=shared)["result"]["samples"] == [2.0] * 3
    replied.touch()  # the asked point has its reply: the other way, set up after it, goes on
    assert _point("track_a", "down", 2, cls=shared)["result"]["samples"] == [-2.0] * 3  # served: nothing new
    assert _log(suite_dir, made=True)[3:] == ["build up 2", "made 2", "measure up 2", "build down 2", "measure down 2"]
    journal = [json.loads(x) for x in (suite_dir / "sweep" / "journal.jsonl").read_text().splitlines()]
    assert [r["params"] for r in journal if "beside" in r] == [["down", 2]]
    # a selection that leaves the other way out times it not
    monkeypatch.setenv(sweep.SELECT_ENV, r"bench_fake\.Shared\.track_a\('up', 1\)")
    _point("track_a", "up", 1, cls=shared)
    assert "build down 1" not in _log(suite_dir)


def test_points_set_up_over_a_build_have_their_classs_whole_timeout_not_what_the_asked_one_had_left(
        suite_dir, monkeypatch):  # fmt: skip
    """The asked point's figure came after a long build: it had a second left of its timeout. The point that
    shares its build is set up after the reply, under its class's whole timeout, and is served."""
    monkeypatch.setenv("FAKE_SHARED_TIMEOUT", "8")
    monkeypatch.setenv("FAKE_SLEEP_UP_1", "5")  # the build: 3 s of the 8 s are left for the figure
    monkeypatch.setenv("FAKE_SLEEP_DOWN_1", "3.5")  # set up over it: longer than what the figure had left
    _point("track_a", "cpu", 1)  # the measuring process up and the fake's module imported (torch with it)
    monkeypatch.setenv(sweep.SELECT_ENV, r"bench_fake\.Shared\.track_a\('(up|down)', 1\)")
    assert _point("track_a", "up", 1, cls="bench_fake.Shared")["result"]["samples"] == [1.0] * 3
    assert _point("track_a", "down", 1, cls="bench_fake.Shared")["result"]["samples"] == [-1.0] * 3
    assert _log(suite_dir)[3:] == ["build up 1", "measure up 1", "build down 1", "measure down 1"]


def test_a_cuda_error_setting_up_a_point_that_shares_a_build_ends_the_process(suite_dir, monkeypatch):
    """The asked point keeps its figure; the failed set-up ends the measuring process, and the next point starts
    a fresh one, which fails that point with the error."""
    monkeypatch.setenv("FAKE_FAIL_SHARED", "1")
    monkeypatch.setenv(sweep.SELECT_ENV, r"bench_fake\.Shared\.track_a\('(up|down)', 1\)")
    assert _point("track_a", "up", 1, cls="bench_fake.Shared")["result"]["samples"] == [1.0] * 3
    assert "CUDA error" in _point("track_a", "down", 1, cls="bench_fake.Shared")["error"]
    pids = {line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()}
    assert len(pids) == 2


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
    """asv stops a point at its timeout; the measuring process stops a figure at its class's timeout too, so that
    later points do not wait behind it. A twin measured ahead that hangs fails no point that asked: the asked one
    has its reply before the twin is timed, and the next point is measured by a fresh process."""
    monkeypatch.setenv("FAKE_SLEEP", "1")  # read by the measuring process when it starts: n = 2's twin hangs
    # a first point starts the process and imports the suite under the default timeout: only the hang may reach
    # the short one, however slow this host is to start a process
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3
    monkeypatch.setenv("FAKE_TIMEOUT", "5")
    assert _point("track_a", "cpu", 2)["result"]["samples"] == [2.0] * 3  # its twin hangs after its reply
    hung = int(next(line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()
                    if line.endswith("measure b 2")))  # fmt: skip
    monkeypatch.delenv("FAKE_SLEEP")
    monkeypatch.delenv("FAKE_TIMEOUT")  # the next point starts a fresh process: the default timeout again
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3  # queued behind the hang: asked again
    served = int((suite_dir / "log.txt").read_text().splitlines()[-1].split()[0])
    assert served != hung  # a fresh process measured it: the hung one was ended, not waited behind
    cmdline = Path(f"/proc/{hung}/cmdline")
    assert not sweep.alive(hung) or "devbench.engine.measuring" not in cmdline.read_text(errors="replace")
    # the hung twin's own point: measured afresh, not served from the process that hung
    assert _point("track_b", "cpu", 2)["result"]["samples"] == [20.0] * 3


SHARED = "bench_fake.Shared"


def test_a_figure_measured_ahead_that_no_point_collected_is_measured_again_next_round(suite_dir, monkeypatch):
    """Round 1 asks up(2), which measures down(2) beside it; down(2)'s point never asks (asv failed or skipped it).
    Round 2's up(2) begins a new round: down(2) is measured again for its point, not served round 1's figure."""
    monkeypatch.setenv(sweep.SELECT_ENV, r"bench_fake\.Shared\.track_a\('(up|down)', 2\)")
    assert _point("track_a", "up", 2, cls=SHARED)["result"]["samples"] == [2.0] * 3
    assert _log(suite_dir).count("measure down 2") == 1
    assert _point("track_a", "up", 2, cls=SHARED)["result"]["samples"] == [2.0] * 3
    assert _point("track_a", "down", 2, cls=SHARED)["result"]["samples"] == [-2.0] * 3
    assert _log(suite_dir).count("measure down 2") == 2


def test_a_point_queued_behind_a_hung_set_up_beside_it_is_measured_by_a_fresh_process(suite_dir, monkeypatch):
    """A point set up ahead (beside the asked one) hangs: its class's timeout ends the process, and the healthy
    point that asked meanwhile is turned away with ``retry`` and measured by a fresh process, not failed."""
    monkeypatch.setenv("FAKE_SHARED_TIMEOUT", "4")
    monkeypatch.setenv("FAKE_SLEEP_DOWN_2", "60")  # read by the measuring process: the set-up beside hangs
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3  # the process up, the suite imported
    monkeypatch.setenv(sweep.SELECT_ENV, r"bench_fake\.Shared\.track_a\('(up|down)', (1|2)\)")
    assert _point("track_a", "up", 2, cls=SHARED)["result"]["samples"] == [2.0] * 3
    # the next point's own timeout is long: it waits out the hang and a fresh process's start, however slow the host
    monkeypatch.setenv("FAKE_SHARED_TIMEOUT", "120")
    assert _point("track_a", "up", 1, cls=SHARED)["result"]["samples"] == [1.0] * 3
    pids = [line.split()[0] for line in (suite_dir / "log.txt").read_text().splitlines()]
    assert pids[-1] != next(p for p, line in zip(pids, (suite_dir / "log.txt").read_text().splitlines(), strict=True)
                            if line.endswith("build down 2"))  # fmt: skip


def test_points_already_queued_at_an_ending_process_are_told_to_ask_again(tmp_path):
    import socket

    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    asker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    asker.connect(str(path))
    asker.sendall(b'{"op": "measure"}\n')
    measuring._turn_away(listener)
    with asker, asker.makefile("r") as reply:
        assert json.loads(reply.readline())["retry"] is True
    listener.close()


def test_an_idle_process_lets_its_socket_go_before_its_workload(tmp_path):
    """A point that asks while the idle process lets its workload go (its tear-down, the allocator's release) finds
    no socket and starts a fresh process; the socket went first."""
    import subprocess
    import sys
    import textwrap

    sock, seen = tmp_path / "m.sock", tmp_path / "seen"
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from devbench.engine import measuring, sweep
        sweep.on_evict(lambda: Path({str(seen)!r}).write_text(str(sweep._connect(Path({str(sock)!r})) is not None)))
        measuring.serve(Path({str(sock)!r}), owner={os.getpid()}, idle_s=0.5)
    """)
    subprocess.run([sys.executable, "-c", script], env={**os.environ, sweep.SERVER_ENV: "1"}, cwd=tmp_path,
                   timeout=120, check=True)  # fmt: skip
    assert seen.read_text() == "False" and not sock.exists()


def test_a_later_commits_point_is_not_measured_by_a_process_that_imported_an_earlier_commit(suite_dir, monkeypatch):
    """One owner for every commit (``asv run --launch-method spawn``: asv itself is every point's parent): the
    commit is part of the process's address, so the later commit's code measures its point."""
    monkeypatch.setenv("ASV_COMMIT", "aaaa")
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3
    bench = suite_dir / "fakebench" / "bench_fake.py"
    bench.write_text(bench.read_text().replace("[float(self.n)] * 3", "[float(self.n) + 100] * 3"))
    monkeypatch.setenv("ASV_COMMIT", "bbbb")
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [101.0] * 3


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


def test_a_classs_cpu_points_keep_their_processes_on_a_gpu_host(monkeypatch):
    """``auto``: only the points that use a GPU ask the measuring process; a class that says which of its points
    need GPUs by param value (``plan_gpus``) keeps the others in their own processes."""
    from devbench.engine import swept

    monkeypatch.setenv(sweep.MODE_ENV, "auto")
    monkeypatch.delenv(sweep.SERVER_ENV, raising=False)
    monkeypatch.setattr(swept, "no_cuda_reason", lambda: None)  # as on a GPU host

    class Par:
        param_names = ["mode", "n"]
        plan_gpus = {"mode": {"gpus": 2, "streams": 1}}

    class Dev:
        param_names = ["device", "n"]

    assert swept._on_sweep(Par(), ("streams", 1024)) and not swept._on_sweep(Par(), ("cpu_threads", 1024))
    assert swept._on_sweep(Dev(), ("cuda", 64)) and not swept._on_sweep(Dev(), ("cpu", 64))
    monkeypatch.setattr(swept, "no_cuda_reason", lambda: "no CUDA")
    assert not swept._on_sweep(Dev(), ("cuda", 64))  # the point skips in its own process, with the reason


CACHED = """
import os
from pathlib import Path

from devbench.engine.suite import Benchmark, with_samples

LOG = Path(os.environ["FAKE_LOG"])


def note(what):
    with open(LOG, "a") as out:
        out.write(f"{os.getpid()} {what}\\n")


class Cached(Benchmark):
    params = [["cpu"], ["x", "y"]]
    param_names = ["device", "kind"]
    swept = True

    def setup_cache(self):
        return {("cpu", "x"): 3.0, ("cpu", "y"): "not searched here"}

    def setup(self, found, device, kind):
        value = found[(device, kind)]
        if isinstance(value, str):
            raise NotImplementedError(value)
        note(f"build {kind} {value}")
        self.value = value

    def teardown(self, found, device, kind):
        note(f"teardown {kind}")

    def track_one(self, found, device, kind):
        return with_samples([self.value] * 3)

    def track_two(self, found, device, kind):
        return with_samples([2 * self.value] * 3)

    track_one.unit = track_two.unit = "x"
"""


def test_a_class_with_a_set_up_cache_hands_its_result_to_the_measuring_process(suite_dir):
    """asv gives a point its class's ``setup_cache`` result first (the achievable search's shapes): the point
    sends it, pickled, and the measuring process builds and times with it, the twin figure from the same build."""
    (suite_dir / "fakebench" / "bench_cached.py").write_text(CACHED)
    found = {("cpu", "x"): 3.0, ("cpu", "y"): "not searched here"}
    got = _point("track_one", found, "cpu", "x", cls="bench_cached.Cached")
    assert got["result"]["samples"] == [3.0] * 3
    assert _point("track_two", found, "cpu", "x", cls="bench_cached.Cached")["result"]["samples"] == [6.0] * 3
    assert _point("track_one", found, "cpu", "y", cls="bench_cached.Cached") == {"skip": "not searched here"}
    assert _log(suite_dir) == ["build x 3.0"]  # built once, in the measuring process, for both figures


def test_letting_a_workload_go_gives_the_gpus_cached_memory_back_and_tf32_as_it_was(monkeypatch, tmp_path):
    """A held measuring process outlives its asv call: what PyTorch's caching allocators keep of a workload let go
    goes back to the device (``torch.cuda.empty_cache``) and its pinned buffers to the host (the host caching
    allocator keeps them locked: ``torch.accelerator.empty_host_cache``), as a fresh process would find them."""
    import torch

    import devbench.engine.suite  # noqa: F401 - registers the hooks

    emptied = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append("device"))
    monkeypatch.setattr(torch.accelerator, "empty_host_cache", lambda: emptied.append("host"))
    at_start = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = not at_start  # a workload let go without its tear-down
        measuring.Server(tmp_path / "journal.jsonl")._evict()
        assert emptied == ["device", "host"]
        assert torch.backends.cuda.matmul.allow_tf32 == at_start  # later float32 figures are float32 again
        assert gc.get_freeze_count() > 0  # what outlives every workload is passed over by the next collection
    finally:
        torch.backends.cuda.matmul.allow_tf32 = at_start
        gc.unfreeze()


def test_each_request_waits_only_what_is_left_of_its_points_asv_timeout(monkeypatch):
    """asv's timeout counts from the point's start: a figure asked after a long build may wait only the rest, so
    the measuring process's watchdog ends a hung figure before asv kills the point, not a build's time later."""
    from devbench.engine import swept

    asked, now = [], [100.0]
    monkeypatch.setattr(swept.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(sweep, "ask", lambda request, timeout_s: asked.append(timeout_s) or {"ok": True})

    class Point:
        timeout = 60.0
        param_names = ["n"]

    bench = Point()
    swept._ask(bench, "prepare", "bench_x.Point", (1,))
    now[0] += 45.0  # the build took 45 s
    swept._ask(bench, "measure", "bench_x.Point.track_a", (1,))
    now[0] += 30.0  # a compare's next turn on the same set-up: a call of its own, its whole timeout
    swept._ask(bench, "measure", "bench_x.Point.track_a", (1,))
    swept._ask(bench, "prepare", "bench_x.Point", (1,))
    now[0] += 70.0
    swept._ask(bench, "measure", "bench_x.Point.track_a", (1,))
    assert asked == [60.0, 15.0, 60.0, 60.0, 1.0]  # never less than a second: the process says why it ended
    # devbench compare's worker: no asv clock counts from its set-up, and its first turn may come much later
    from devbench.compare import worker

    monkeypatch.setenv(worker.TURNS_ENV, "1")
    assert worker.TURNS_ENV == swept.TURNS_ENV
    swept._ask(bench, "prepare", "bench_x.Point", (1,))
    now[0] += 70.0
    swept._ask(bench, "measure", "bench_x.Point.track_a", (1,))
    assert asked[-1] == 60.0


def test_an_error_that_leaves_the_cuda_context_broken_ends_the_process_whatever_it_says(monkeypatch):
    """A cuDNN or NCCL error, or one wrapped in a message without 'CUDA', is fatal where a synchronize then raises:
    no later figure is measured in a context that cannot be trusted; a plain error in a working context is not."""
    import sys
    import types

    class Cuda:  # torch.cuda's is_initialized, device_count and synchronize(device)
        initialized, broken, gpus, broken_gpu = True, True, 1, 0

        def is_initialized(self):
            return self.initialized

        def device_count(self):
            return self.gpus

        def synchronize(self, device=None):
            if self.broken and (0 if device is None else device) == self.broken_gpu:
                raise RuntimeError("an illegal memory access was encountered")

    cuda = Cuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    try:
        raise RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED")
    except RuntimeError as exc:
        assert measuring._failed(exc)["fatal"] is True
    cuda.broken = False
    try:
        raise ValueError("a shape the workload refuses")
    except ValueError as exc:
        assert measuring._failed(exc)["fatal"] is False
    # a sticky error on the second GPU of a peer copy: a synchronize of the current GPU alone would not see it
    cuda.broken, cuda.gpus, cuda.broken_gpu = True, 2, 1
    assert measuring._context_lost() is True
    cuda.initialized, cuda.broken = False, True  # no context of its own: nothing to break
    assert measuring._context_lost() is False


def test_the_context_check_synchronizes_only_the_gpus_this_process_holds_a_context_on(monkeypatch):
    """On a node, a synchronize of a GPU the process never used would make a context there (about half a GiB held
    for the rest of the process), or fail where another process holds that GPU in exclusive mode: the check asks
    CUDA's builds which GPUs hold this process's context, and synchronizes those alone."""
    import sys
    import types

    import torch
    from torch._dynamo import trace_rules

    # the query is one of torch's own CUDA bindings (a CUDA build defines it; torch's trace rules list it)
    assert "torch._C._cuda_hasPrimaryContext" in Path(trace_rules.__file__).read_text()
    assert torch.backends.cuda.is_built() == hasattr(torch._C, "_cuda_hasPrimaryContext")
    synced, contexts = [], {0, 2}

    def synchronize(device=None):
        synced.append(device)
        if device == 3:  # another process's GPU in exclusive mode
            raise RuntimeError("CUDA error: all CUDA-capable devices are busy or unavailable")

    cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 4, synchronize=synchronize)
    fake = types.SimpleNamespace(cuda=cuda, _C=types.SimpleNamespace(_cuda_hasPrimaryContext=contexts.__contains__))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert measuring._context_lost() is False and synced == [0, 2]
    # a torch without the query (a CPU build has no CUDA context to check): every GPU, as before
    synced.clear()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda, _C=types.SimpleNamespace()))
    assert measuring._context_lost() is True and synced == [0, 1, 2, 3]


def test_a_build_after_a_failed_release_is_asked_again_of_a_fresh_process(monkeypatch, tmp_path):
    """Letting a workload go raises where an earlier figure broke the context: the next build is not made there; its
    point is told to ask again, and asks once more (a fresh process then measures it)."""
    from devbench.engine import swept

    def release():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(measuring, "_EVICTED", [release])
    monkeypatch.setattr(measuring, "_context_lost", lambda: True)
    server = measuring.Server(tmp_path / "journal.jsonl")
    server.bench, server.held = object(), ("bench_fake.Fake", ("cpu", 1), None)
    reply = server._build({"module": "bench_fake", "file": None}, "bench_fake.Fake", ("cpu", 2))
    assert reply["retry"] and reply["fatal"] and server.fatal and "asked again" in reply["error"]

    asked = []
    replies = iter([reply, {"result": 4.0}])
    monkeypatch.setattr(sweep, "ask", lambda request, timeout_s: asked.append(request) or next(replies))

    class Point:
        timeout = 60.0

    assert swept._ask(Point(), "measure", "bench_fake.Fake.track_a", ("cpu", 2))["result"] == 4.0
    assert len(asked) == 2


def test_a_request_that_waited_its_points_whole_timeout_is_answered_not_measured(suite_dir, monkeypatch):
    """A point's request can wait in the socket's queue while the process serves earlier points and those beside
    them; one whose point has given up by then is answered at once, and nothing is built or timed for it."""
    assert _point("track_a", "cpu", 1)["result"]["samples"] == [1.0] * 3  # the process is up
    now = sweep._now
    monkeypatch.setattr(sweep, "_now", lambda: time.time() - 10_000)  # sent long ago (the fake's timeout: 300 s)
    reply = _point("track_a", "cpu", 2)
    assert "not measured: the point's 300 s had passed" in reply["error"]
    assert "build cpu 2" not in _log(suite_dir)
    monkeypatch.setattr(sweep, "_now", now)
    assert _point("track_a", "cpu", 2)["result"]["samples"] == [2.0] * 3  # the same process measures the next


def test_the_time_a_request_has_left_counts_from_when_it_was_sent():
    assert measuring.time_left({"timeout_s": 60.0, "sent": 100.0}, now=130.0) == 30.0
    assert measuring.time_left({"timeout_s": 60.0, "sent": 100.0}, now=99.0) == 60.0  # a clock a little behind
    assert measuring.time_left({"timeout_s": 60.0}, now=130.0) == 60.0  # an older asker: its whole timeout
    assert measuring.time_left({}, now=130.0) == 1e9


def test_in_a_compares_turns_the_workload_is_kept_while_the_other_side_takes_its_turn(suite_dir, monkeypatch):
    """A side waits out the other's turn, however long: its measuring process keeps the workload then (a
    tear-down and the allocator's release would land inside the other side's timed block), past the seconds
    after which it lets an idle one go."""
    monkeypatch.setenv(sweep.TURNS_ENV, "1")
    _point("track_a", "cpu", 1)
    time.sleep(sweep.EVICT_IDLE_S + 2.0)  # the other side's turn
    assert "teardown" not in (suite_dir / "log.txt").read_text()
    _point("track_a", "cpu", 1)
    assert _log(suite_dir).count("build cpu 1") == 1  # its next turn, over the same build
