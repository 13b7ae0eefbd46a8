"""Collectives: nccl-tests' formulas, exact results on every rank of a gloo world of 2,
failed and stuck ranks reported with no process left behind, the torchrun entry, and
the asv class's skips."""

import functools
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import devbench.worlds.collectives as entry
from devbench.workloads import collectives as C
from devbench.worlds.world import RankFailed, WorldTimeout, backend_reason, spawn_world

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asv_fixture import run_group  # noqa: E402
from fake_dist import like, put  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = [4096, 65536]

# --- functions the spawned ranks run (module level, so a spawned process can import them)


def _who(rank, world):
    return rank, world, dist.get_rank(), dist.get_world_size()


def _peer_started(pid_dir, rank=0, timeout_s=60.0):
    """Wait until ``rank`` wrote its pid: the ranks leave the rendezvous at different moments, and a rank
    that fails before its peer left it would stop that peer before the test knows its pid."""
    deadline = time.monotonic() + timeout_s
    while not Path(pid_dir, f"{rank}.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _fail_on_one(rank, world, pid_dir):
    Path(pid_dir, f"{rank}.pid").write_text(str(os.getpid()))
    if rank == 1:
        _peer_started(pid_dir)
        raise ValueError("rank one gives up")
    dist.barrier()  # rank 0 waits here for a peer that will never come
    return "unreachable"


def _die_on_one(rank, world, pid_dir):
    Path(pid_dir, f"{rank}.pid").write_text(str(os.getpid()))
    if rank == 1:
        _peer_started(pid_dir)
        os._exit(3)
    dist.barrier()


def _hang(rank, world, pid_dir):
    Path(pid_dir, f"{rank}.pid").write_text(str(os.getpid()))
    time.sleep(120)


def _stuck_all_reduce(rank, world, backend, *_, pid_dir):
    """Rank 1 never reaches the all_reduce (a rank stuck in its init, as an NCCL rank without P2P); rank 0 waits."""
    Path(pid_dir, f"{rank}.pid").write_text(str(os.getpid()))
    print(f"NCCL WARN rank {rank}: stand-in for NCCL's own line", flush=True)
    if rank == 1:
        time.sleep(120)
    one = torch.ones(1)
    dist.all_reduce(one)
    return float(one.item())


class _Skips(C.Collective):
    """A collective that does nothing: its check must fail."""

    def __call__(self):
        pass


def _crash_in_teardown(rank, world, nbytes):
    """A large result, then a teardown that ends the rank at once (as a crash in NCCL's destroy would)."""
    import torch.distributed as dist

    dist.destroy_process_group = like("destroy_process_group", lambda group=None: os._exit(1))
    return bytes(nbytes)


def _slow_teardown(rank, world, marks, teardown_s):
    """A rank whose result is in before a teardown that takes ``teardown_s`` (NCCL's communicators and a CUDA
    context, on a busy node); each rank that finished it leaves a mark."""
    import torch.distributed as dist

    real = dist.destroy_process_group

    def destroy(group=None):
        time.sleep(teardown_s)
        real(group)
        Path(marks, f"left-{rank}").touch()

    dist.destroy_process_group = like("destroy_process_group", destroy)
    return rank


def _broken(rank, world, op):
    import torch

    _Skips(op, 4096, torch.device("cpu")).check()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(pid_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in pid_dir.glob("*.pid")]


# --- formulas


@pytest.mark.parametrize(
    "op, world, factor",
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 2, 0.5),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("broadcast", 8, 1.0),
        ("send_recv", 4, 1.0),
    ],
)
def test_bus_factor_is_nccl_tests(op, world, factor):
    assert C.bus_factor(op, world) == pytest.approx(factor)
    assert C.busbw(op, world, 2e9, 0.5) == pytest.approx(4.0 * factor)
    assert C.algbw(2e9, 0.5) == pytest.approx(4.0)


def test_bus_factor_rejects_unknown_op_and_world():
    with pytest.raises(ValueError, match="alltoall"):
        C.bus_factor("alltoall", 2)
    with pytest.raises(ValueError, match="world size"):
        C.bus_factor("all_reduce", 0)


def test_sizes_are_nccl_tests_steps():
    assert C.SIZES[0] == 4 * 1024 and C.SIZES[-1] == 256 * 1024 * 1024
    assert all(b == 4 * a for a, b in zip(C.SIZES, C.SIZES[1:], strict=False))
    assert C.parse_size("64MiB") == C.parse_size("64 M") == 64 << 20
    assert C.parse_size("4096") == 4096
    assert C.size_range(4096, 65536) == [4096, 16384, 65536]
    with pytest.raises(ValueError, match="4XB"):
        C.parse_size("4XB")
    with pytest.raises(ValueError, match="larger"):
        C.size_range(1 << 20, 4096)


# --- a world of two gloo processes


def test_world_returns_every_ranks_result_in_order():
    assert spawn_world(_who, 2) == [(0, 2, 0, 2), (1, 2, 1, 2)]


def test_sweep_is_checked_and_formulas_hold_on_both_ranks():
    rows0, rows1 = spawn_world(C.sweep_rank, 2, args=("gloo", C.OPS, SMALL, 0.002, 1))
    assert rows0 == rows1  # every rank agrees on iterations and times
    assert [(r["op"], r["nbytes"]) for r in rows0] == [(op, n) for op in C.OPS for n in SMALL]
    for r in rows0:
        seconds = r["time_us"] / 1e6
        assert r["time_max_us"] >= r["time_us"] > 0
        assert r["algbw"] == pytest.approx(r["nbytes"] / seconds / 1e9)
        assert r["busbw"] == pytest.approx(r["algbw"] * C.bus_factor(r["op"], 2))
        assert r["count"] == r["nbytes"] // 4 and r["backend"] == "gloo"


def test_a_sweep_measures_only_the_pairs_asked_for():
    import functools

    only = [("broadcast", SMALL[-1]), ("all_reduce", SMALL[0])]
    rows0, rows1 = spawn_world(functools.partial(C.sweep_rank, only=only), 2, args=("gloo", C.OPS, SMALL, 0.002, 1))
    assert rows0 == rows1
    assert [(r["op"], r["nbytes"]) for r in rows0] == [("all_reduce", SMALL[0]), ("broadcast", SMALL[-1])]


@pytest.mark.parametrize("op", C.OPS)
def test_a_collective_that_moves_nothing_fails_its_check(op):
    with pytest.raises(RankFailed, match=rf"rank \d failed: AssertionError: rank \d: {op} of 4096 B"):
        spawn_world(_broken, 2, args=(op,))


def test_expected_values_are_exact_sums():
    # what rank r holds, summed over 3 ranks, is 6 x (1 + i mod 251): exact in float32
    got = sum(C._values(600, r, "cpu") for r in range(3))
    assert got[250] == 6 * 251 and got[251] == 6 and got[0] == 6
    assert C._holds_cycle(got, 3 * 4 // 2) and not C._holds_cycle(got, 5)  # what a check of the sum expects


def test_the_check_compares_every_element_a_slice_at_a_time(monkeypatch):
    """``_holds_cycle`` compares against one reference slice; every position still counts (several slices
    and a short last one here), and an offset shifts the pattern as reduce_scatter's chunk of the sum."""
    monkeypatch.setattr(C, "_CHECK_STEP", 2 * C._PERIOD)
    whole = sum(C._values(5 * C._PERIOD + 17, r, "cpu") for r in range(2))
    assert C._holds_cycle(whole, 3) and not C._holds_cycle(whole, 1)
    assert C._holds_cycle(whole[:0], 3)  # nothing to compare
    tail = whole[300:]
    assert C._holds_cycle(tail, 3, offset=300) and not C._holds_cycle(tail, 3, offset=0)
    for wrong_at in (0, 2 * C._PERIOD + 5, whole.numel() - 1):
        bad = whole.clone()
        bad[wrong_at] += 1
        assert not C._holds_cycle(bad, 3)


def test_a_failed_rank_is_named_and_the_others_are_stopped(tmp_path):
    with pytest.raises(RankFailed, match="rank 1 failed: ValueError: rank one gives up") as err:
        spawn_world(_fail_on_one, 2, args=(str(tmp_path),), timeout_s=120)
    assert err.value.rank == 1
    pids = _pids(tmp_path)
    assert len(pids) == 2 and not any(_alive(p) for p in pids)


def test_a_rank_that_dies_is_named(tmp_path):
    with pytest.raises(RankFailed, match="rank 1 failed: exited with code 3"):
        spawn_world(_die_on_one, 2, args=(str(tmp_path),), timeout_s=120)
    pids = _pids(tmp_path)
    assert len(pids) == 2 and not any(_alive(p) for p in pids)


def test_a_stuck_world_is_stopped_at_its_timeout(tmp_path):
    # each rank sleeps 120 s: a world that was waited out would end without a WorldTimeout. On a
    # loaded machine the 3 s may end before a rank has even started its function: still stuck.
    with pytest.raises(WorldTimeout, match=r"ranks \[0, 1\] did not finish within 3 s") as err:
        spawn_world(_hang, 2, args=(str(tmp_path),), timeout_s=3)
    assert err.value.ranks == [0, 1]
    assert multiprocessing.active_children() == []  # every rank joined
    assert not any(_alive(p) for p in _pids(tmp_path))


def _pid_to(rank, world, backend, path, pre=None):
    """A world's phase that leaves its process id where the test reads it (``pre``, where given: the pre-flight's
    file, the world's arguments being the work's)."""
    with open(pre or path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return os.getpid()


def _wrong_on_rank_1(rank, world, *_):
    """A pre-flight that rank 1 fails after the group's all_reduce; rank 0 passes it."""
    one = torch.ones(1)
    dist.all_reduce(one)
    if rank == 1:
        time.sleep(0.3)
        raise AssertionError("rank 1's pre-flight read wrong data")


def _rank_0_dies(rank, world, *_):
    """The work after the pre-flight: rank 0 ends at once without a word (a peer's abort), rank 1 never gets here."""
    if rank == 0:
        os._exit(3)
    time.sleep(30)


def _unpicklable(rank, world, *_):
    return threading.Lock()


def test_a_pre_flights_failure_names_its_own_rank_not_one_that_passed_it_and_died_after(tmp_path):
    """Rank 0 passes the pre-flight and dies in the work after it; rank 1 fails the pre-flight: the cause is rank 1.
    A pre-flight whose result cannot be pickled still passes (its result is not sent): no wait to its limit."""
    from devbench.worlds.world import PreflightFailed

    with pytest.raises(PreflightFailed) as got:
        spawn_world(_rank_0_dies, 2, timeout_s=60, quiet=True, first=(_wrong_on_rank_1, 30))
    assert isinstance(got.value.cause, RankFailed) and got.value.cause.rank == 1
    assert "wrong data" in str(got.value.cause) and got.value.limit_s == 30
    # were it sent and dropped, the world would end as a pre-flight timeout (PreflightFailed) at 20 s
    assert spawn_world(_who, 2, timeout_s=60, first=(_unpicklable, 20)) == [(0, 2, 0, 2), (1, 2, 1, 2)]
    with pytest.raises(PreflightFailed) as got:  # the limit it had: the world's, where that is shorter
        stuck = functools.partial(_stuck_all_reduce, pid_dir=str(tmp_path))
        spawn_world(_who, 2, timeout_s=3, quiet=True, first=(stuck, 30))
    assert got.value.limit_s == 3


def test_a_world_runs_its_pre_flight_in_the_ranks_that_then_do_its_work_and_a_stuck_one_ends_at_its_own_limit(
        tmp_path):  # fmt: skip
    """The pre-flight (``first``) and the work after it run in one start of the world's ranks; a pre-flight whose
    rank never joins ends at the pre-flight's limit, not the world's, with ``PreflightFailed``, its ranks' lines, and
    the work never begun; a world that passes the real pre-flight goes on."""
    import functools

    from devbench.worlds.world import PreflightFailed, preflight_rank, preflight_reason

    seen = tmp_path / "pre.txt"
    pids = spawn_world(_pid_to, 2, args=("gloo", str(tmp_path / "work.txt")), timeout_s=120,
                       first=(functools.partial(_pid_to, pre=str(seen)), 60))  # fmt: skip
    assert sorted(int(x) for x in seen.read_text().split()) == sorted(pids)  # the same two processes did both
    passed = spawn_world(_who, 2, first=(functools.partial(preflight_rank, backend="gloo"), 60))
    assert passed == [(0, 2, 0, 2), (1, 2, 1, 2)]
    with pytest.raises(PreflightFailed) as got:
        spawn_world(_pid_to, 2, args=("gloo", str(tmp_path / "never.txt")), timeout_s=120, quiet=True,
                    first=(functools.partial(_stuck_all_reduce, pid_dir=str(tmp_path)), 5))  # fmt: skip
    assert isinstance(got.value.cause, WorldTimeout)  # ended by its own 5 s limit, said below, not the world's 120 s
    reason = preflight_reason(got.value.cause, "gloo", got.value.limit_s)
    assert "did not finish within 5 s" in reason and "stand-in for NCCL's own line" in reason
    assert not (tmp_path / "never.txt").exists()
    assert not any(_alive(p) for p in _pids(tmp_path)) and multiprocessing.active_children() == []


def test_a_rank_that_outlives_sigkill_is_named_not_waited_for(monkeypatch):
    from devbench.worlds import world as W

    class Stuck:
        """A rank in a driver call: signals do not end it."""

        pid = os.getpid()  # a live process, so its state can be read

        def is_alive(self):
            return True

        def terminate(self):
            pass

        def kill(self):
            pass

        def join(self, timeout=None):
            assert timeout is not None, "a stuck rank must never be joined without a limit"

    monkeypatch.setattr(W, "GRACE_S", 0.01)
    monkeypatch.setattr(W, "KILL_WAIT_S", 0.01)
    stuck = W._stop([Stuck()])
    assert [(r, pid) for r, pid, _ in stuck] == [(0, os.getpid())] and stuck[0][2] in "RSD"
    assert "rank 0 (pid" in str(W.RanksStuck(stuck)) and "did not end after SIGKILL" in str(W.RanksStuck(stuck))


def test_backend_reasons():
    assert backend_reason("gloo", 1) == "a world of 1 rank has nothing to exchange"
    cores = len(os.sched_getaffinity(0))
    assert backend_reason("gloo", cores) is None
    assert f"{cores + 1} gloo ranks need {cores + 1} cores" in backend_reason("gloo", cores + 1)
    with pytest.raises(ValueError, match="mpi"):
        backend_reason("mpi", 2)


def test_nccl_is_skipped_with_a_reason_without_gpus():
    from devbench.engine.devices import num_gpus

    if num_gpus() >= 2:
        pytest.skip("this machine has two GPUs")
    assert "NCCL" in backend_reason("nccl", 2)


# --- the command-line entry


def test_torchrun_entry_prints_the_table_and_writes_the_figures(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc-per-node", "2", "-m", "devbench.worlds.collectives", "--max-size", "16KiB",
           "--target-ms", "2", "--samples", "1", "--out", str(tmp_path), "--machine", "testbox"]  # fmt: skip
    out = run_group(cmd, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0].split()[:2] == ["size", "(B)"] and len(lines) == 1 + 5 * 2
    (written,) = tmp_path.glob("testbox-gloo-w2-*.json")
    doc = json.loads(written.read_text())
    assert doc["format"] == "devbench-collectives/1" and doc["world"] == 2 and doc["nodes"] == 1
    assert {(r["op"], r["nbytes"]) for r in doc["rows"]} == {(op, n) for op in C.OPS for n in (4096, 16384)}
    assert not list(tmp_path.glob(".*.tmp"))


def test_entry_rejects_bad_arguments(capsys):
    assert entry.main(["--ops", "allreduce"]) == 2
    assert "--ops 'allreduce': choose among all_reduce" in capsys.readouterr().err
    assert entry.main(["--max-size", "1XB"]) == 2
    assert "'1XB'" in capsys.readouterr().err
    assert entry.main(["--nproc", "1"]) == 2


# --- the asv class


def test_benchmark_skips_with_the_reason_and_reads_the_sweep():
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_collectives import Collectives

    row = {"time_us": 250.0, "iters": 8, "block_us": [250.0, 200.0, 300.0]}
    worlds = {"nccl/2": {"skip": "2 NCCL ranks need 2 GPUs; this machine has 0"},
              "gloo/2": {"rows": {"all_reduce/4096": row}}}  # fmt: skip
    b = Collectives()
    with pytest.raises(NotImplementedError, match="need 2 GPUs"):
        b.setup(worlds, "nccl", 2, "all_reduce", 4096)
    b.setup(worlds, "gloo", 2, "all_reduce", 4096)
    time = b.track_time(worlds, "gloo", 2, "all_reduce", 4096)
    assert time["number"] == 8 and time["samples"] == pytest.approx([250e-6, 200e-6, 300e-6])
    busbw = b.track_busbw(worlds, "gloo", 2, "all_reduce", 4096)["samples"]
    assert busbw == pytest.approx([C.busbw("all_reduce", 2, 4096, t * 1e-6) for t in (250.0, 200.0, 300.0)])
    with pytest.raises(NotImplementedError, match="broadcast 4096 B not measured in this run"):
        b.setup(worlds, "gloo", 2, "broadcast", 4096)  # a row the sweep was not asked for


# --- the report picks the figures up


def test_report_shows_torchrun_figures_and_names_a_bad_file(tmp_path, capsys):
    import shutil

    from devbench.report.cli import main as report_main

    results = tmp_path / "asv" / "results"
    shutil.copytree(ROOT / "reports" / "asv-results", results)
    rows = [{"op": op, "nbytes": n, "count": n // 4, "dtype": "float32", "world": 4, "iters": 10,
             "time_us": 100.0, "time_max_us": 110.0, "algbw": n / 100e-6 / 1e9,
             "busbw": C.busbw(op, 4, n, 100e-6)} for op in C.OPS for n in SMALL]  # fmt: skip
    old = entry.record(rows, machine="box", backend="gloo", world=4, hosts=["a", "b"])
    old["finished"] = "2026-01-01T00:00:00+00:00"
    new = entry.record(rows, machine="box", backend="gloo", world=4, hosts=["a", "b"])
    for doc in (old, new):
        doc["rows"] = [dict(r) for r in rows]
    new["rows"][0]["busbw"] = 123.0  # the newer file wins
    coll = tmp_path / "asv" / "collectives"
    entry.write_record(old, coll)
    entry.write_record(new, coll)
    (coll / "broken.json").write_text('{"format": "devbench-collectives/1", "rows": [')
    out = tmp_path / "out"
    assert report_main(["--results", str(results), "--out", str(out), "--format", "md", "--quiet"]) == 0
    assert "broken.json" in capsys.readouterr().err
    md = (out / "report.md").read_text()
    section = md.split("## Collectives: bus bandwidth (GB/s)", 1)[1].split("\n## ", 1)[0]
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines() if ln.startswith("| box")]
    assert [ln[:3] for ln in lines] == [["box", "2 nodes, gloo x4", "4 KiB"], ["box", "2 nodes, gloo x4", "64 KiB"]]
    assert lines[0][4] == "123"  # all_reduce column of the newer file
    assert "broken.json" in md
    assert report_main(["--results", str(results), "--out", str(out), "--collectives", str(tmp_path / "nope")]) == 2


def test_in_place_forms_are_checked_and_named_beside_the_out_of_place_ones():
    rows0, rows1 = spawn_world(C.sweep_rank, 2, args=("gloo", ["all_gather", "reduce_scatter", "all_reduce"],
                                                       SMALL[:1], 0.002, 1, False, True))  # fmt: skip
    assert rows0 == rows1
    assert [r["op"] for r in rows0] == ["all_gather", "all_gather in-place", "reduce_scatter",
                                        "reduce_scatter in-place", "all_reduce"]  # fmt: skip
    placed = next(r for r in rows0 if r["op"] == "reduce_scatter in-place")
    assert placed["busbw"] == pytest.approx(placed["algbw"] * C.bus_factor("reduce_scatter", 2))


def _in_place_broadcast(rank, world):
    C.Collective("broadcast", 4096, "cpu", in_place=True)


def test_an_op_without_an_in_place_form_is_refused():
    with pytest.raises(RankFailed, match="broadcast has no separate in-place form"):
        spawn_world(_in_place_broadcast, 2)


def _many_calls(rank, world):
    """Buffers after 1 and 301 timed calls of each summing form (float32 x 2**300 would be inf)."""
    out = {}
    for op, in_place in (("all_reduce", False), ("reduce_scatter", True), ("reduce_scatter", False)):
        coll = C.Collective(op, 4096, "cpu", in_place=in_place)
        coll.check()
        coll()
        before = coll.out.clone()
        for _ in range(300):
            coll()
        out[(op, in_place)] = (coll.accumulates, bool(torch.isfinite(coll.out).all()), torch.equal(coll.out, before))
        coll.check()  # after timed calls the check fills fresh data again (else it would raise)
    return out


def test_summing_into_its_own_input_stays_finite_over_many_calls():
    for rank_out in spawn_world(_many_calls, 2):
        assert rank_out == {("all_reduce", False): (True, True, True), ("reduce_scatter", True): (True, True, True),
                            ("reduce_scatter", False): (False, True, True)}  # fmt: skip


def _setup_worlds(monkeypatch, B, world_run, worlds):
    """``Collectives.setup_cache`` over gloo worlds of ``worlds`` ranks, each run by ``world_run`` (a stand-in for
    ``spawn_world``), every one of them runnable here and every row selected."""
    monkeypatch.setattr(B, "WORLDS", worlds)
    monkeypatch.setattr(B, "BACKENDS", ("gloo",))
    monkeypatch.setattr(B, "backend_reason", lambda backend, world: None)
    monkeypatch.setattr(B, "_read", lambda *a: True)
    monkeypatch.setattr(B, "spawn_world", world_run)
    return B.Collectives().setup_cache()


def test_a_world_that_fails_or_sticks_loses_only_itself_and_a_stuck_rank_starts_no_later_world(monkeypatch):
    """The 2-rank world measures, the 4-rank one hangs, the 8-rank one has a rank no SIGKILL ends: the first keeps
    its rows, the others say why, and no later world of that backend starts on the stuck rank's device."""
    sys.path.insert(0, str(ROOT))
    import benchmarks.bench_collectives as B

    from devbench.worlds.world import RanksStuck, WorldTimeout

    started = []

    def world_run(fn, world, args=(), backend="gloo", timeout_s=0.0, quiet=False, first=None):
        started.append((args[0], world, timeout_s))
        if world == 4:
            raise WorldTimeout([1, 3], timeout_s)
        if world == 8:
            raise RanksStuck([(5, 123, "D")])
        return [[{"op": "all_reduce", "nbytes": 4096, "time_us": 1.0, "iters": 1, "block_us": [1.0]}]]

    worlds = _setup_worlds(monkeypatch, B, world_run, [2, 4, 8, 16])
    assert "all_reduce/4096" in worlds["gloo/2"]["rows"]
    assert "did not finish" in worlds["gloo/4"]["skip"] and "did not end after SIGKILL" in worlds["gloo/8"]["skip"]
    assert "rank(s) 5 of the 8-rank gloo world are stuck" in worlds["gloo/16"]["skip"]
    assert [w for _, w, _ in started] == [2, 4, 8]  # the 16-rank world never started
    assert all(0 < t <= B.WORLD_S for _, _, t in started)  # each bounded on its own, within the class's timeout


def test_each_world_has_its_share_of_the_time_left_so_one_that_hangs_leaves_the_others_theirs(monkeypatch):
    """On a node every world runs; the first hangs to its limit (a rank the watchdog cannot end). Each world is
    bounded by an equal share of what is left with the worlds still to run: the others start with theirs and
    keep their rows, and every limit together stays within the class's timeout."""
    sys.path.insert(0, str(ROOT))
    import benchmarks.bench_collectives as B

    now = [1000.0]
    limits = []

    def world_run(fn, world, args=(), backend="gloo", timeout_s=0.0, quiet=False, first=None):
        limits.append(timeout_s)
        if len(limits) == 1:
            now[0] += timeout_s + 20  # to its limit, and the stop after it
            raise WorldTimeout([1], timeout_s)
        now[0] += 60.0
        return [[{"op": "all_reduce", "nbytes": 4096, "time_us": 1.0, "iters": 1, "block_us": [1.0]}]]

    monkeypatch.setattr(B.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(B, "backend_reason", lambda backend, world: None)
    monkeypatch.setattr(B, "_read", lambda *a: True)
    monkeypatch.setattr(B, "stage_left_s", lambda: None)
    monkeypatch.setattr(B, "spawn_world", world_run)
    worlds = B.Collectives().setup_cache()
    assert "did not finish" in worlds["gloo/2"]["skip"]
    assert [k for k, w in worlds.items() if "rows" in w] == ["gloo/4", "gloo/8", "nccl/2", "nccl/4", "nccl/8"]
    budget = B.Collectives.timeout - B.MARGIN_S
    assert limits[0] == pytest.approx(budget / 6) and now[0] - 1000.0 <= budget


def test_a_world_that_cannot_start_its_ranks_loses_only_itself(monkeypatch):
    sys.path.insert(0, str(ROOT))
    import benchmarks.bench_collectives as B

    row = {"op": "all_reduce", "nbytes": 4096, "time_us": 1.0, "iters": 1, "block_us": [1.0]}

    def world_run(fn, world, args=(), backend="gloo", timeout_s=0.0, quiet=False, first=None):
        if world == 4:
            raise OSError(24, "Too many open files")
        return [[row]]

    worlds = _setup_worlds(monkeypatch, B, world_run, [2, 4, 8])
    assert "rows" in worlds["gloo/2"] and "rows" in worlds["gloo/8"]
    assert worlds["gloo/4"]["skip"] == "the 4-rank gloo world failed: [Errno 24] Too many open files"


def test_a_world_whose_rank_sticks_in_its_teardown_keeps_its_rows_and_starts_no_later_world(monkeypatch):
    sys.path.insert(0, str(ROOT))
    import benchmarks.bench_collectives as B

    from devbench.worlds.world import RanksStuck

    row = {"op": "all_reduce", "nbytes": 4096, "time_us": 1.0, "iters": 1, "block_us": [1.0]}
    started = []

    def world_run(fn, world, args=(), backend="gloo", timeout_s=0.0, quiet=False, first=None):
        started.append(world)
        raise RanksStuck([(1, 42, "D")], results=[[row], [row]])

    worlds = _setup_worlds(monkeypatch, B, world_run, [2, 4])
    assert worlds["gloo/2"]["rows"] == {"all_reduce/4096": row}
    assert "rank(s) 1 of the 2-rank gloo world are stuck" in worlds["gloo/4"]["skip"] and started == [2]


def test_a_preflight_whose_rank_sticks_keeps_later_worlds_of_its_backend_off_the_devices(monkeypatch):
    sys.path.insert(0, str(ROOT))
    import benchmarks.bench_collectives as B

    from devbench.worlds.world import PreflightFailed, RanksStuck

    started = []

    def world_run(fn, world, args=(), backend="gloo", timeout_s=0.0, quiet=False, first=None):
        started.append(world)
        if world == 2:  # its pre-flight's rank is stuck: the world never reached its sweep
            raise PreflightFailed(RanksStuck([(1, 42, "D")]), first[1])
        pytest.fail("no world may start on a stuck rank's device")

    worlds = _setup_worlds(monkeypatch, B, world_run, [2, 4])
    assert B.STUCK in worlds["gloo/2"]["skip"] and "pre-flight" in worlds["gloo/2"]["skip"]
    assert worlds["gloo/4"]["skip"] == "not started: a rank of the 2-rank gloo pre-flight is stuck"
    assert started == [2]


def test_under_gpu_run_the_worlds_end_before_the_stage_is_stopped(monkeypatch):
    """asv saves a set-up cache only when it returns, and gpu-run stops a stage at its limit: the worlds are bounded
    by the stage's end (``DEVBENCH_STAGE_END``), so one that hangs ends in time and the others' rows are kept; a
    world whose pre-flight left no time for a sweep is not started."""
    sys.path.insert(0, str(ROOT))
    import benchmarks.bench_collectives as B

    from devbench.records.files import STAGE_END_ENV

    started = []

    from devbench.worlds.world import PreflightFailed, WorldTimeout

    given = []  # the pre-flight's limit each world had
    failure = [None]  # what the pre-flight raises, if anything

    def world_run(fn, world, args=(), backend="gloo", timeout_s=0.0, quiet=False, first=None):
        started.append((world, timeout_s))
        given.append(first[1])
        if failure[0] is not None:
            raise PreflightFailed(failure[0], first[1])
        return [[{"op": "all_reduce", "nbytes": 4096, "time_us": 1.0, "iters": 1, "block_us": [1.0]}]]

    monkeypatch.setattr(B, "WORLDS", [2, 4])
    monkeypatch.setattr(B, "BACKENDS", ("gloo",))
    monkeypatch.setattr(B, "backend_reason", lambda backend, world: None)
    monkeypatch.setattr(B, "_read", lambda *a: True)
    monkeypatch.setattr(B, "spawn_world", world_run)
    monkeypatch.setenv(STAGE_END_ENV, str(time.time() + B.MARGIN_S + B.PREFLIGHT_S + 100))
    worlds = B.Collectives().setup_cache()
    assert set(worlds) == {"gloo/2", "gloo/4"} and all("rows" in w for w in worlds.values())
    assert all(t <= B.PREFLIGHT_S + 101 for _, t in started)  # the stage's end less the margin, not 900 s
    assert given == [B.PREFLIGHT_S, B.PREFLIGHT_S]
    # a stage shorter than the pre-flight's 60 s: the pre-flight gets what a sweep leaves of it, and the world runs
    given.clear()
    monkeypatch.setenv(STAGE_END_ENV, str(time.time() + B.Collectives.plan_min_stage_s + 20))
    started.clear()
    worlds = B.Collectives().setup_cache()
    assert all("rows" in w for w in worlds.values()) and len(started) == 2
    assert B.PREFLIGHT_MIN_S <= given[0] < B.PREFLIGHT_S
    assert started[0][1] <= given[0] + B.MIN_SWEEP_S + 1  # the world, its pre-flight within, ends in the stage
    # what gpu-run is told the class needs (plan_min_stage_s) is what it refuses below
    failure[0] = WorldTimeout([1], 25.0)
    monkeypatch.setenv(STAGE_END_ENV, str(time.time() + B.Collectives.plan_min_stage_s + 5))
    worlds = B.Collectives().setup_cache()
    assert "(it had " in worlds["gloo/2"]["skip"] and "before gpu-run's stage ends" in worlds["gloo/2"]["skip"]
    assert worlds["gloo/2"]["skip"].startswith("the pre-flight (an all_reduce of one element")
    # a failure that is not its bound running out is not put down to the stage
    failure[0] = RankFailed(1, "connection closed by peer")
    worlds = B.Collectives().setup_cache()
    assert "(it had " not in worlds["gloo/2"]["skip"] and "rank 1 failed: connection closed" in worlds["gloo/2"]["skip"]
    monkeypatch.setenv(STAGE_END_ENV, str(time.time() + B.Collectives.plan_min_stage_s - 1))
    started.clear()
    worlds = B.Collectives().setup_cache()
    assert started == [] and worlds["gloo/2"]["skip"] == "no time left before gpu-run's stage ends"


def test_a_collective_that_waits_is_failed_long_before_the_worlds_limit(monkeypatch, tmp_path):
    """The process group's timeout is what one collective may wait (NCCL's watchdog then ends the rank), not the
    whole world's limit, which a hang would otherwise wait out."""
    from devbench.worlds import world as W

    seen = []
    put(monkeypatch, "init_process_group", lambda *a, **k: seen.append(k["timeout"].total_seconds()))
    put(monkeypatch, "is_initialized", lambda: False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    W.join_torchrun("gloo", 900.0)
    threads = torch.get_num_threads()
    try:  # a rank's main pins one thread: this process's count is given back after it
        W._rank_main(lambda rank, world: None, 0, 1, "gloo", str(tmp_path / "store"), 900.0, (),
                     multiprocessing.Queue())  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert seen == [W.PG_TIMEOUT_S, W.PG_TIMEOUT_S] and W.PG_TIMEOUT_S < 900


def test_a_torchrun_rank_that_fails_ends_at_once_and_one_that_succeeds_leaves_its_group(monkeypatch):
    """After a failure ``destroy_process_group`` would wait for work its peers never join (torch >= 2.6): the rank
    ends instead, with its traceback and a non-zero exit, which torchrun reads as the world failing."""
    from devbench.worlds import world as W

    calls = []

    class Ended(Exception):
        pass

    def end(code):
        calls.append(("exit", code))
        raise Ended

    put(monkeypatch, "destroy_process_group", lambda group=None: calls.append(("destroy",)))
    monkeypatch.setattr(os, "_exit", end)
    assert W.torchrun_rank(lambda: 3) == 3 and calls == [("destroy",)]
    calls.clear()
    with pytest.raises(Ended):
        W.torchrun_rank(lambda: 1 / 0)
    assert calls == [("exit", 1)]


@pytest.mark.parametrize("module", ["collectives", "fleet"])
def test_a_stuck_rank_ends_the_command_with_its_reason_not_a_traceback(module, monkeypatch, capsys):
    """A rank that outlives SIGKILL (stuck in a driver call) ends `python -m devbench.worlds.<module>` with exit 1
    and the reason, as a failed or timed-out world does."""
    import importlib

    from devbench.worlds import world as W

    def stuck(*args, **kwargs):
        raise W.RanksStuck([(1, 4242, "D")])

    monkeypatch.setattr(W, "spawn_world", stuck)
    cli = importlib.import_module(f"devbench.worlds.{module}")
    assert cli.main(["--nproc", "2", "--no-write"]) == 1
    err = capsys.readouterr().err
    assert "rank 1 (pid 4242, state D)" in err and "Traceback" not in err


def test_ranks_in_their_teardown_end_it_unsignalled_and_one_stuck_there_keeps_the_worlds_results(tmp_path,
                                                                                                  monkeypatch):
    """Every result in, the ranks get ``TEARDOWN_S`` to leave their process group before any signal; a rank that
    then outlives SIGKILL is named with the world's results, which stand."""
    from devbench.worlds import world as W

    assert spawn_world(_slow_teardown, 2, args=(str(tmp_path), 1.0), timeout_s=120) == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["left-0", "left-1"]
    real = W._stop
    monkeypatch.setattr(W, "_stop", lambda procs, wait_s=0.0: real(procs, wait_s) or [(1, procs[1].pid, "D")])
    with pytest.raises(W.RanksStuck) as got:
        spawn_world(_who, 2, timeout_s=120)
    assert got.value.results == [(0, 2, 0, 2), (1, 2, 1, 2)]


def test_a_rank_that_crashes_in_its_teardown_after_its_result_loses_nothing():
    """The result is in the pipe before the process group's teardown, which may crash the rank: 8 MiB from each rank
    (more than a pipe holds) come back whole though each rank ends at once in its teardown."""
    from devbench.worlds.world import spawn_world

    out = spawn_world(_crash_in_teardown, 2, args=(8 << 20,), timeout_s=120)
    assert [len(o) for o in out] == [8 << 20, 8 << 20]
