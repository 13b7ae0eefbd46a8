"""devbench validate: its table, verdicts and messages, on synthetic results."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from devbench import validate as V
from devbench.records import spec


def _frame(rows):
    day = pd.Timestamp("2026-01-01", tz="UTC")
    base = {"machine": "vm", "status": "ok", "version_current": True, "commit": "a" * 40}
    base.update(date=day, started_at=day)
    return pd.DataFrame([{**base, **r} for r in rows])


def test_the_subset_follows_the_issue():
    cpu = {c.label for c in V.checks(gpu=False)}
    assert cpu == {
        "matmul float32 n=256 cpu",
        "matmul float32 n=1024 cpu",
        "matmul float32 n=4096 cpu",
        "host copy 1 MiB",
        "host copy 64 MiB",
    }
    gpu = {c.label for c in V.checks(gpu=True)} - cpu
    assert {"pinned h2d 256 MiB", "pinned d2h 256 MiB", "matmul bfloat16 n=8192 cuda", "device copy 1 GiB cuda"} <= gpu
    assert all(c.needs_gpu for c in V.checks(gpu=True) if c.label in gpu)


def test_gpu_run_keeps_every_figure_validate_reads_and_the_health_lines_judge():
    """validate reads its GPU figures from the run's asv results: a plan that dropped one left it nothing to check
    (the H200 run: bf16 n=8,192 and the pinned copies). The plan keeps them, whatever the budget."""
    from devbench.gpu import plan as P
    from devbench.records import spec

    keep = frozenset(p.selector for p in spec.kept_points())
    gpu_checks = [spec.Point(c.figure, dict(c.values)) for c in V.checks(gpu=True) if c.needs_gpu]
    wanted = {p.selector for p in gpu_checks}
    assert wanted <= keep
    # the pinned copies validate reads are those the health lines judge: one mode for both
    health = {p.selector for p, kind in spec.HEALTH_POINTS if kind in ("h2d", "d2h")}
    assert health <= wanted
    listing = {}
    for figure in {p.figure for p in gpu_checks}:
        listing[figure.benchmark] = {"name": figure.benchmark, "params": [], "param_names": list(figure.params)}
    names = {"device": ["'cpu'", "'cuda'"], "dtype": ["'float32'", "'bfloat16'"], "n": ["256", "1024", "4096", "8192"],
             "direction": ["'h2d'", "'d2h'"], "memory": ["'pageable'", "'pinned'"],
             "mode": ["'blocking'", "'non_blocking'"], "nbytes": [str(256 * spec.MiB), str(spec.GiB)]}  # fmt: skip
    for bench in listing.values():
        bench["params"] = [names[p] for p in bench["param_names"]]
    costs = P.Costs(launch_s=1.0, cuda_context_s=1.0, asv_call_s=1.0, gpus=1)
    plan = P.make_plan(listing, lambda s: True, costs, budget_s=5.0, reserve_s=0.0, keep=keep)  # far too short
    kept = {p.selector for p in plan.kept()}
    assert plan.dropped() and wanted <= kept


def test_suite_figures_take_the_latest_measured_result_of_this_machine():
    c = V.checks(gpu=False)[0]
    f = _frame(
        [
            {"benchmark": c.benchmark, "params": c.params, "value": 1.0, "commit": "old" + "0" * 37},
            {"benchmark": c.benchmark, "params": c.params, "value": 2.0, "commit": "new" + "0" * 37,
             "date": pd.Timestamp("2026-02-01", tz="UTC")},
            {"benchmark": c.benchmark, "params": c.params, "value": 9.0, "machine": "other",
             "date": pd.Timestamp("2026-03-01", tz="UTC")},
            {"benchmark": c.benchmark, "params": c.params, "value": math.nan, "status": "skipped",
             "date": pd.Timestamp("2026-03-01", tz="UTC")},
        ]
    )  # fmt: skip
    assert V.suite_figures(f, "vm", [c]) == {c.label: (2.0, "new00000")}
    assert V.suite_figures(f, "nobody", [c]) == {}


def test_a_bad_ratio_fails_and_is_named():
    rows = [
        V.Row("good", "GB/s", 10.0, 10.4, math.nan, "abc"),
        V.Row("bad", "GB/s", 10.0, 12.0, math.nan, "abc"),
        V.Row("broken", "GB/s", 10.0, 0.0, math.nan, "abc"),
    ]
    assert V.judge(rows, 0.10) == ["bad", "broken"]
    assert V.judge(rows[:1], 0.10) == []
    assert V.judge(rows[:2], 0.25) == []
    table = V.format_table(rows, 0.10)
    assert "OFF" in table.splitlines()[3] and table.splitlines()[2].endswith("ok")
    assert "0.962" in table  # 10.0 / 10.4


def test_drift_is_told_apart_from_a_wrong_method():
    tol = 0.10
    ok = V.Row("ok", "TFLOP/s", 1.0, 1.05, math.nan, "abc", method=0.98)
    drift = V.Row("drift", "TFLOP/s", 0.8, 1.0, math.nan, "abc", method=1.02)  # recorded off, method agrees now
    wrong = V.Row("wrong", "TFLOP/s", 1.0, 1.0, math.nan, "abc", method=0.7)  # method off, recorded happens to agree
    assert [V.verdict(r, tol) for r in (ok, drift, wrong)] == ["ok", "DRIFT", "OFF"]
    assert V.exit_status([ok], tol) == V.EXIT_OK
    assert V.exit_status([ok, drift], tol) == V.EXIT_DRIFT
    assert V.exit_status([drift, wrong], tol) == V.EXIT_MISMATCH
    assert V.judge([ok, drift, wrong], tol) == ["drift", "wrong"]
    lines = V.format_table([ok, drift, wrong], tol).splitlines()
    assert lines[3].endswith("DRIFT") and "0.800" in lines[3] and "1.020" in lines[3]
    assert lines[4].endswith("OFF") and "0.700" in lines[4]


def test_held_figures_may_beat_the_dispatch_bound_reference_but_never_lose_to_it():
    """A held stream times the GPU's work only: faster than Timer's loop is expected, slower is a wrong method."""
    tol = 0.10
    faster = V.Row("held", "GB/s", 30.0, 10.0, math.nan, "abc", method=31.0, held=True)
    slower = V.Row("held slow", "GB/s", 8.0, 10.0, math.nan, "abc", method=8.0, held=True)
    drifted = V.Row("held drift", "GB/s", 20.0, 10.0, math.nan, "abc", method=31.0, held=True)
    assert [V.verdict(r, tol) for r in (faster, slower, drifted)] == ["HELD", "OFF", "DRIFT"]
    assert V.exit_status([faster], tol) == V.EXIT_OK and V.judge([faster, slower], tol) == ["held slow"]


def test_the_plain_mm_row_fails_a_workload_slower_than_a_plain_product_and_a_held_figure_above_the_peak():
    """The plain torch.mm row is there to catch the suite's workload losing to a bare product: Timer on both, now,
    decides it, never the recorded figure's drift. A held block is faster than Timer's dispatch-bound loop, but
    never faster than the device's datasheet peak: that one timed nothing."""
    tol = 0.10
    slow = V.Row("  vs plain", "TFLOP/s", 330.0, 660.0, math.nan, "abc", method=655.0, workload=330.0)
    even = V.Row("  vs plain", "TFLOP/s", 330.0, 660.0, math.nan, "abc", method=655.0, workload=650.0)
    assert V.verdict(slow, tol) == "OFF" and V.verdict(even, tol) == "DRIFT"  # the recorded figure alone: drift
    held = dict(unit="TFLOP/s", suite=40.0, reference=20.0, events=math.nan, commit="abc", held=True, ceiling=67.0)
    assert V.verdict(V.Row("held", method=40.0, **held), tol) == "HELD"
    assert V.verdict(V.Row("held", method=2000.0, **{**held, "suite": 2000.0}), tol) == "OFF"


def test_a_figure_that_cannot_be_measured_ends_validate_with_one_line(monkeypatch, capsys):
    c = next(c for c in V.checks(gpu=False) if c.label == "host copy 1 MiB")
    monkeypatch.setattr(V, "checks", lambda gpu: [c])
    monkeypatch.setattr("devbench.engine.devices.num_gpus", lambda: 0)

    def broken(check, min_run_time, rounds, tolerance=None):
        raise AssertionError("copy of 1 MiB cpu -> cpu, set 0: 12 bytes differ")

    monkeypatch.setattr(V, "measure", broken)

    class Loaded:
        frame = _frame([{"benchmark": c.benchmark, "params": c.params, "value": 18.0}])

    monkeypatch.setattr("devbench.report.load.load_results", lambda *a, **k: Loaded())
    assert V.main(["--machine", "vm"]) == V.EXIT_FAILED
    err = capsys.readouterr().err
    assert "devbench validate: error: host copy 1 MiB: AssertionError: copy of 1 MiB" in err and "Traceback" not in err
    monkeypatch.setenv("DEVBENCH_THREADS", "abc")
    assert V.main(["--machine", "vm"]) == V.EXIT_NO_RESULTS
    assert "DEVBENCH_THREADS must be an integer, got 'abc'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("recorded", "measured", "code", "verdict"),
    [
        (1e6, V.Measured(timer=18.0, method=18.2, events=math.nan), V.EXIT_DRIFT, "DRIFT"),  # recorded off only
        (18.1, V.Measured(timer=18.0, method=9.0, events=math.nan), V.EXIT_MISMATCH, "OFF"),  # the method is off
        (18.1, V.Measured(timer=18.0, method=18.2, events=math.nan), V.EXIT_OK, "ok"),
    ],
)
def test_validate_runs_end_to_end_on_recorded_results(monkeypatch, capsys, recorded, measured, code, verdict):
    """The command's path from recorded results to verdict and exit status, with the live measurement injected."""
    c = next(c for c in V.checks(gpu=False) if c.label == "host copy 1 MiB")
    monkeypatch.setattr(V, "checks", lambda gpu: [c])
    monkeypatch.setattr("devbench.engine.devices.num_gpus", lambda: 0)
    monkeypatch.setattr(V, "measure", lambda check, min_run_time, rounds, tolerance=None: measured)

    class Loaded:
        frame = _frame([{"benchmark": c.benchmark, "params": c.params, "value": recorded}])

    monkeypatch.setattr("devbench.report.load.load_results", lambda *a, **k: Loaded())
    assert V.main(["--machine", "vm"]) == code
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("host copy 1 MiB"))
    assert row.endswith(verdict)


def test_missing_results_give_the_clear_message(tmp_path, capsys):
    assert V.main(["--results", str(tmp_path / "nothing"), "--machine", "vm"]) == V.EXIT_NO_RESULTS
    err = capsys.readouterr().err
    assert "no results to validate" in err and "make bench" in err


@pytest.fixture
def empty_vm_results(tmp_path):
    """A results directory with machine "vm" and no result files."""
    machine = tmp_path / "results" / "vm"
    machine.mkdir(parents=True)
    (machine / "machine.json").write_text(json.dumps({"machine": "vm", "version": 1}))
    return str(tmp_path / "results")


def test_results_without_the_validated_benchmarks_say_so(empty_vm_results, capsys):
    assert V.main(["--results", empty_vm_results, "--machine", "vm"]) == V.EXIT_NO_RESULTS
    assert "has no results for the validated benchmarks" in capsys.readouterr().err


def test_unknown_machine_lists_the_known_ones(empty_vm_results, capsys):
    assert V.main(["--results", empty_vm_results, "--machine", "h100"]) == V.EXIT_NO_RESULTS
    assert "known: vm" in capsys.readouterr().err


def test_bad_tolerance_is_refused(capsys):
    assert V.main(["--tolerance", "0"]) == V.EXIT_NO_RESULTS
    assert "--tolerance must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize("label", ["matmul float32 n=256 cpu", "host copy 1 MiB"])
def test_reference_measurement_is_positive_and_in_the_unit(label, small_cpu_cache):
    c = next(c for c in V.checks(gpu=False) if c.label == label)
    now = V.measure(c, min_run_time=0.05, rounds=2)
    assert math.isnan(now.events)
    for figure in (now.timer, now.method):
        assert 0 < figure < (10.0 if c.unit == "TFLOP/s" else 1000.0)  # a CPU, not a unit mix-up


def test_gpu_subset_holds_the_bare_torch_mm_reference():
    from devbench.validate import checks

    bf16 = [c for c in checks(gpu=True) if c.params == "device=cuda, dtype=bfloat16, n=8192"]
    assert all(c.benchmark == "bench_matmul.MatmulSquare.track_tflops" and c.unit == "TFLOP/s" for c in bf16)
    assert [c.reference for c in bf16] == ["workload", "plain_mm"]
    assert len({c.label for c in checks(gpu=True)}) == len(checks(gpu=True))  # labels key the suite figures
    assert all(c.reference == "workload" for c in checks(gpu=False))


def test_gpu_only_measures_the_gpu_figures_alone_and_logs_what_each_took(monkeypatch, capsys, tmp_path):
    """``gpu-run --gpu-only`` validates what it ran: the CPU's figures are left out before anything is measured, and
    each measured figure's line ends with its seconds, which gpu-run's pricing of a later run reads back."""
    every = V.checks(gpu=True)
    assert len(every) == len(spec.VALIDATED_CPU) + len(spec.VALIDATED_GPU) + 1  # as gpu-run's held_s counts them
    assert [c.label for c in every if not c.needs_gpu] == [p.label for p in spec.VALIDATED_CPU]
    monkeypatch.setattr("devbench.engine.devices.num_gpus", lambda: 1)
    measured = []

    def measure(check, min_run_time, rounds, tolerance=None):
        measured.append(check.label)
        return V.Measured(timer=10.0, method=10.0, events=10.0, rounds=3)

    monkeypatch.setattr(V, "measure", measure)
    clock = iter(range(0, 1000, 3))  # each figure "takes" 3 s on validate's clock: no live timing here
    monkeypatch.setattr(V.time, "perf_counter", lambda: float(next(clock)))

    class Loaded:
        frame = _frame([{"benchmark": c.benchmark, "params": c.params, "value": 10.0} for c in every])

    monkeypatch.setattr("devbench.report.load.load_results", lambda *a, **k: Loaded())
    assert V.main(["--machine", "vm", "--gpu-only"]) == V.EXIT_OK
    assert measured == [c.label for c in every if c.needs_gpu] and len(measured) < len(every)
    log = tmp_path / "validate.txt"
    log.write_text(capsys.readouterr().err)
    from devbench.gpu.costs import validate_each

    each = validate_each(log, 99.0)
    assert [label for label, _ in each] == [c.label.strip() for c in every if c.needs_gpu]
    assert all(s == 3.0 for _, s in each)  # its own seconds, not a share of the stage's 99
    assert V.checks(gpu=True)[-1].label.strip() == spec.VALIDATED_PLAIN_MM  # the label gpu-run prices it by


def test_gpu_only_without_a_gpu_is_refused(monkeypatch, capsys, empty_vm_results):
    monkeypatch.setattr("devbench.engine.devices.num_gpus", lambda: 0)
    monkeypatch.setattr("devbench.report.load.load_results", lambda *a, **k: None)
    assert V.main(["--results", empty_vm_results, "--machine", "vm", "--gpu-only"]) == V.EXIT_NO_RESULTS
    assert "--gpu-only, but torch sees no CUDA GPU here" in capsys.readouterr().err


def test_bench_checks_the_figures_it_selects_alone_and_names_a_bad_pattern(monkeypatch, capsys):
    """gpu-run passes its --bench: validate then checks the figures that run selected, none it left out."""
    monkeypatch.setattr("devbench.engine.devices.num_gpus", lambda: 0)
    measured = []
    monkeypatch.setattr(V, "measure", lambda check, min_run_time, rounds, tolerance=None: measured.append(check.label)
                        or V.Measured(timer=10.0, method=10.0, events=math.nan))  # fmt: skip

    class Loaded:
        frame = _frame([{"benchmark": c.benchmark, "params": c.params, "value": 10.0} for c in V.checks(gpu=False)])

    monkeypatch.setattr("devbench.report.load.load_results", lambda *a, **k: Loaded())
    assert V.main(["--machine", "vm", "--bench", r"DeviceCopy\.track_gbps_copied\('cpu', 1048576\)"]) == V.EXIT_OK
    assert measured == ["host copy 1 MiB"]
    assert V.main(["--machine", "vm", "--bench", "("]) == V.EXIT_NO_RESULTS
    assert "--bench '(' is not a regular expression" in capsys.readouterr().err
    assert V.main(["--machine", "vm", "--bench", "cuda"]) == V.EXIT_NO_RESULTS
    assert "--bench 'cuda' selects none of the figures it checks" in capsys.readouterr().err
    assert measured == ["host copy 1 MiB"]


def test_rounds_settle_once_three_agree_within_a_quarter_of_the_tolerance():
    """``settled``: three rounds at least, each figure's per-round values within a quarter of the tolerance."""
    steady = [(10.0, 10.1, math.nan), (10.1, 10.0, math.nan), (10.05, 10.2, math.nan)]
    assert not V.settled(steady[:2], 0.10)  # two rounds can be one quiet stretch
    assert V.settled(steady, 0.10)  # 1-2% ranges, under 2.5%; the CPU's missing events column is left out
    assert not V.settled(steady, 0.05)  # the method's 2% range is over a quarter of 5%
    assert not V.settled([*steady[:2], (11.0, 10.1, math.nan)], 0.10)  # Timer moved 10% in one round
    assert not V.settled([(10.0, 10.0, 5.0), (10.0, 10.0, 5.0), (10.0, 10.0, 6.0)], 0.10)  # the events' column too


@pytest.mark.parametrize(("spread", "rounds"), [(0.0, 3), (0.2, 7)])
def test_a_figure_stops_alternating_when_its_rounds_agree_and_not_before(monkeypatch, spread, rounds):
    """Each round's Timer and method figures are read as they come: steady ones stop after three rounds, ones that
    move by 20% every other round (a busy host) alternate to the last round."""
    import itertools

    from devbench.engine import measure as engine

    c = next(c for c in V.checks(gpu=False) if c.label == "host copy 1 MiB")
    monkeypatch.setattr(V, "_workload", lambda check: ((lambda: None), engine.torch.device("cpu"), 1.0))
    slow, slow_method = (itertools.cycle([1.0, 1.0 + spread]) for _ in range(2))

    class Timed:
        def __init__(self):
            self.times = [next(slow)] * 3

    monkeypatch.setattr(V, "_timer", lambda fn, min_run_time: Timed())
    monkeypatch.setattr(engine, "warm_up", lambda fn, device: None)
    monkeypatch.setattr(engine, "plan_blocks", lambda *a, **k: engine.BlockPlan(1))
    calls = []
    monkeypatch.setattr(engine, "measure", lambda fn, device, plan=None, blocks=None, **k: calls.append(1)
                        or engine.Measurement((next(slow_method),) * (blocks or 1), 1))  # fmt: skip
    now = V.measure(c, min_run_time=0.01, rounds=7, tolerance=0.10)
    assert now.rounds == rounds and len(calls) == rounds
    assert V.measure(c, min_run_time=0.01, rounds=7).rounds == 7  # no tolerance: every round, as before


def test_help_explains_the_rounds_and_exits_cleanly(capsys):
    """argparse formats help with %: a share written into it must come out as text, not end the command."""
    with pytest.raises(SystemExit) as done:
        V.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "fewer once 3 rounds agree within 25% of the tolerance" in " ".join(out.split())


def test_every_commands_help_prints_and_exits_cleanly(capsys):
    """``devbench COMMAND --help`` for each command: a help text that argparse cannot format ends with a traceback
    where a user asked how to run it."""
    from devbench import cli

    commands = ["info", "machine", *cli.HELP]
    assert {"report", "validate", "compare", "gpu-run"} <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit) as done:
            cli.main([command, "--help"])
        assert done.value.code == 0, command
        assert f"devbench {command}" in capsys.readouterr().out


def test_another_hosts_results_are_named_so_and_their_drift_is_not_blamed_on_a_busy_run(monkeypatch, capsys):
    """``--machine h200`` on the VM compares the H200's figures with the VM's now: a warning says so first, and a
    DRIFT says the hosts differ, not that the machine ran at another speed during the asv run."""
    c = next(c for c in V.checks(gpu=False) if c.label == "host copy 1 MiB")
    monkeypatch.setattr(V, "checks", lambda gpu: [c])
    monkeypatch.setattr("devbench.engine.devices.num_gpus", lambda: 0)
    monkeypatch.setattr(V, "measure", lambda *a, **k: V.Measured(timer=12.0, method=12.1, events=math.nan))
    monkeypatch.setattr("devbench.records.files.this_hosts_machines", lambda: {"vm"})

    class Loaded:
        frame = _frame([{"benchmark": c.benchmark, "params": c.params, "value": 37.0, "machine": "h200"}])

    monkeypatch.setattr("devbench.report.load.load_results", lambda *a, **k: Loaded())
    assert V.main(["--machine", "h200"]) == V.EXIT_DRIFT
    got = capsys.readouterr()
    assert "'h200' is not this host's asv machine (vm)" in got.err
    assert "'h200' is another host" in got.out and "ran at another speed" not in got.out
