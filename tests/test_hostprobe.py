"""The host probe: written only when compare asks, named as asv names the figure, joined to its process."""

import json
import math
import sys

import pandas as pd
import pytest
from asv_runner.benchmarks.track import TrackBenchmark

from devbench import ab, hostprobe, suite


class Probed(suite.Benchmark):
    params = [["cpu"], [16, 64]]
    param_names = ["device", "n"]

    def setup(self, device, n):
        self.n = n

    def teardown(self, device, n):
        pass

    def track_n(self, device, n):
        return self.n


def _asv_benchmark(name="bench_probe.Probed.track_n"):
    """The benchmark as asv_runner drives it: its own object calls setup and teardown."""
    inst = Probed()
    # what asv_runner's discovery passes: the bound method, its instance, its module
    bench = TrackBenchmark(name, inst.track_n, [inst.track_n, inst, sys.modules[__name__]])
    bench.set_param_idx(1)  # device=cpu, n=64
    return bench


@pytest.fixture
def probe_file(tmp_path, monkeypatch):
    path = tmp_path / "r0.hostprobe.jsonl"
    monkeypatch.setenv(hostprobe.ENV, str(path))
    monkeypatch.setattr(suite, "_last_host_probe", {})
    return path


def test_probe_times_a_checked_small_product_on_the_engine(monkeypatch):
    import torch

    from devbench import measure

    product = hostprobe._product()
    got = product()
    assert got.shape == (64, 64) and got.dtype == torch.float32
    seen = {}

    def fake_median_block(fn, device, calls, samples):
        seen.update(fn=fn, device=device.type, calls=calls, samples=samples)
        return 7e-6

    monkeypatch.setattr(measure, "median_block", fake_median_block)
    assert hostprobe.probe_us() == pytest.approx(7.0)  # seconds per call -> microseconds
    assert seen == {"fn": product, "device": "cpu", "calls": hostprobe.CALLS, "samples": hostprobe.BATCHES}


def test_nothing_is_probed_or_written_unless_compare_asks(tmp_path, monkeypatch):
    monkeypatch.delenv(hostprobe.ENV, raising=False)
    monkeypatch.setattr(suite, "_last_host_probe", {})
    assert hostprobe.record("b", "p", "before") is None
    bench = _asv_benchmark()
    bench.do_setup()
    bench.do_teardown()
    assert suite._last_host_probe == {}
    assert list(tmp_path.iterdir()) == []


def test_a_benchmark_process_records_before_and_after_under_asvs_name(probe_file, monkeypatch):
    monkeypatch.setattr(hostprobe, "probe_us", lambda: 7.25)
    bench = _asv_benchmark()
    assert not bench.do_setup()
    assert bench.do_run() == 64
    bench.do_teardown()
    lines = hostprobe.read([probe_file])
    assert [(x["benchmark"], x["params"], x["phase"], x["probe_us"]) for x in lines] == [
        ("bench_probe.Probed.track_n", "device=cpu, n=64", "before", 7.25),
        ("bench_probe.Probed.track_n", "device=cpu, n=64", "after", 7.25),
    ]
    assert lines[0]["threads"] >= 1 and lines[0]["pid"] > 0


def test_set_up_again_within_half_a_second_does_not_probe_again(probe_file, monkeypatch):
    calls = []
    monkeypatch.setattr(hostprobe, "probe_us", lambda: calls.append(1) or 7.0)
    bench = _asv_benchmark()
    for _ in range(5):  # asv re-runs setup and teardown around every sample
        bench.do_setup()
        bench.do_teardown()
    assert len(calls) == 2
    assert [x["phase"] for x in hostprobe.read([probe_file])] == ["before", "after"]


def test_a_teardown_without_a_probed_setup_does_not_probe(probe_file, monkeypatch):
    monkeypatch.setattr(hostprobe, "probe_us", lambda: pytest.fail("probed"))
    _asv_benchmark().do_teardown()  # asv tears down a skipped combination too
    assert not probe_file.exists()


def test_outside_asv_the_class_names_the_figure(probe_file, monkeypatch):
    monkeypatch.setattr(hostprobe, "probe_us", lambda: 9.0)
    Probed().setup("cpu", 16)
    (line,) = hostprobe.read([probe_file])
    assert line["benchmark"].endswith("Probed") and line["params"] == "device=cpu, n=16"


def test_asv_benchmark_name_is_none_off_asvs_stack():
    assert hostprobe.asv_benchmark_name() is None


def test_read_skips_missing_files_and_torn_lines(tmp_path):
    good = {"benchmark": "b", "params": "p", "phase": "before", "probe_us": 7.0}
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(good) + "\n" + '{"benchmark": "b", "probe_us": 1' + "\n" + '"text"\n')
    assert hostprobe.read([path, tmp_path / "missing.jsonl"]) == [good]


def test_worst_probe_per_figure():
    lines = [
        {"benchmark": "a", "params": "n=1", "probe_us": 7.0},
        {"benchmark": "a", "params": "n=1", "probe_us": 13.0},
        {"benchmark": "a", "params": "n=2", "probe_us": 6.5},
    ]
    assert hostprobe.worst_by_figure(lines) == {("a", "n=1"): 13.0, ("a", "n=2"): 6.5}


def test_summary_takes_the_fast_state_as_typical_and_counts_slow_processes():
    # 20 processes: 11 in a slow stretch (13 us), 9 fast (6.6-7.0 us): the 10th percentile is fast
    values = [6.6, 6.7, 6.8, 6.9, 7.0, 6.6, 6.7, 6.8, 6.9] + [13.0] * 11 + [math.nan]
    s = hostprobe.summary(values)
    assert s == {"typical_us": 6.6, "slow_factor": 1.5, "slow": 11, "processes": 20}
    assert hostprobe.summary([math.nan, -1.0]) is None
    assert hostprobe.summary([]) is None


def test_compare_joins_each_processes_probe_to_its_figure():
    frame = pd.DataFrame(
        {
            "benchmark": ["bench_m.M.track_t", "bench_m.M.track_t", "bench_o.O.track_x"],
            "params": ["n=16", "n=64", ""],
            "value": [1.0, 2.0, 3.0],
        }
    )
    lines = [
        {"benchmark": "bench_m.M.track_t", "params": "n=64", "probe_us": 6.9},
        {"benchmark": "bench_m.M.track_t", "params": "n=64", "probe_us": 14.1},
        {"benchmark": "bench_m.M.track_t", "params": "n=16", "probe_us": 7.1},
    ]
    got = ab.with_probes(frame, lines)["host_probe_us"].tolist()
    assert got[:2] == [7.1, 14.1] and math.isnan(got[2])


def test_host_note_says_what_was_measured():
    note = ab.host_note({"typical_us": 6.6, "slow_factor": 1.5, "slow": 11, "processes": 20})
    assert "64x64" in note and "6.6 us" in note and "11 of 20" in note and "1.5x" in note


def _frame(base_probes, head_probes, base_values=None, head_values=None):
    rows = []
    for side, probes, values in (("base", base_probes, base_values), ("head", head_probes, head_values)):
        for i, p in enumerate(probes):
            v = values[i] if values else 1.0
            rows.append({"side": side, "round": i, "benchmark": "b.M.track_t", "params": "n=64",
                         "unit": "TFLOP/s", "value": v, "host_probe_us": p})  # fmt: skip
    return pd.DataFrame(rows)


def test_processes_run_while_the_host_slowed_are_left_out():
    frame = _frame([6.6, 6.8, 13.2, 7.0, math.nan], [6.7, 12.9, 6.9, 7.1, 6.8])
    usable, info = ab.host_filter(frame)
    assert len(usable) == 8 and usable["host_probe_us"].fillna(0).max() < 9.9  # the NaN row is kept
    assert info["left_out"] == 2 and info["slow"] == 2 and info["processes"] == 9
    assert info["sides"]["base"]["slowed"] == 1 and info["sides"]["head"]["slowed"] == 1
    assert "those of every figure left out (2 processes)" in ab.host_note(info)


def test_keep_slowed_judges_every_process():
    frame = _frame([6.6, 6.8, 13.2, 7.0], [6.7, 12.9, 6.9, 7.1])
    usable, info = ab.host_filter(frame, keep=True)
    assert len(usable) == 8 and info["left_out"] == 0 and "--keep-slowed" in ab.host_note(info)


def test_more_slowed_processes_on_one_side_still_leave_them_out():
    # the session 21 A/A run: 159 of base's processes and 103 of head's ran slowed; base's median
    # probe fell in the slow state, its fast state is the same as head's
    frame = _frame([6.6, 13.0, 13.1, 6.7, 13.3, 12.9, 6.8], [6.7, 6.6, 13.0, 6.8, 6.9, 12.8, 6.7])
    usable, info = ab.host_filter(frame)
    assert info["left_out"] == 6 and len(usable) == 8
    assert info["sides"]["base"]["typical_us"] == 6.6 and info["sides"]["head"]["typical_us"] == 6.6


def test_a_probe_the_code_under_test_changes_leaves_nothing_out():
    # head's every probe is 40% slower: not the host's stretches but the code (a thread left spinning)
    frame = _frame([6.6, 6.7, 6.8, 6.9, 13.5], [9.3, 9.4, 9.5, 9.6, 9.7])
    usable, info = ab.host_filter(frame)
    assert len(usable) == 10 and info["left_out"] == 0
    assert "the code under test changes it" in info["kept_because"]


def test_no_probes_means_nothing_to_filter():
    frame = _frame([math.nan] * 3, [math.nan] * 3)
    assert ab.host_filter(frame)[1] is None
    assert ab.host_filter(frame.drop(columns="host_probe_us"))[1] is None


def test_a_doubling_hidden_by_slowed_processes_is_judged_on_the_rest():
    # a two-thread 64x64 product: 0.074 TFLOP/s, half that while the host is slow; head does twice the work
    base_probe = [6.6, 13.0, 6.8, 13.1, 6.7, 6.9, 12.8, 6.7, 6.8, 6.6]
    head_probe = [13.2, 6.7, 6.9, 6.8, 12.9, 6.6, 6.8, 13.0, 6.7, 6.9]
    base = [0.037 if p > 10 else 0.074 for p in base_probe]
    head = [0.0185 if p > 10 else 0.037 for p in head_probe]
    frame = _frame(base_probe, head_probe, base, head)
    kept = ab.judge_all(frame, "base", "head", {"b.M.track_t [n=64]": 0.5}, 0.99)
    usable, _ = ab.host_filter(frame)
    judged = ab.judge_all(usable, "base", "head", {"b.M.track_t [n=64]": 0.5}, 0.99)
    assert judged["verdict"].tolist() == ["slower"] and judged["ratio"].tolist() == [pytest.approx(0.5)]
    assert kept["verdict"].tolist() == ["undecided"]


def test_a_benchmark_measured_in_setup_cache_does_not_probe(probe_file, monkeypatch):
    monkeypatch.setattr(hostprobe, "probe_us", lambda: pytest.fail("probed"))
    monkeypatch.setattr(Probed, "host_probe", False)
    bench = _asv_benchmark()
    bench.do_setup()
    bench.do_teardown()
    assert not probe_file.exists()


def test_only_the_figures_the_host_moves_lose_their_slowed_processes():
    one = _frame([6.6, 13.2, 6.8], [6.7, 12.9, 6.9])
    frame = pd.concat([one, one.assign(params="n=16")], ignore_index=True)
    usable, info = ab.host_filter(frame, only={"b.M.track_t [n=64]"})
    assert usable.groupby("params").size().to_dict() == {"n=16": 6, "n=64": 4}
    assert info["left_out"] == 2 and info["sensitive_figures"] == 1
    assert "those of the 1 figures calibrate found" in ab.host_note(info)
    assert ab.host_filter(frame, only=set())[1]["left_out"] == 0


def test_a_figure_is_sensitive_when_its_slowed_processes_read_apart():
    # MatmulSquare float32 n=64 in the session 21 calibration: 0.47x in slowed processes
    base_probe, head_probe = [6.6, 13.0, 6.8, 13.1, 6.7], [13.2, 6.7, 6.9, 6.8, 6.9]
    values = [0.037 if p > 10 else 0.074 for p in base_probe + head_probe]
    frame = _frame(base_probe, head_probe, values[:5], values[5:])
    ratios = ab.host_ratios(frame)
    assert ratios == {"b.M.track_t [n=64]": pytest.approx(0.5)} and hostprobe.sensitive(ratios["b.M.track_t [n=64]"])
    assert not hostprobe.sensitive(1.15) and not hostprobe.sensitive(None) and hostprobe.sensitive(1.3)
    assert hostprobe.slowed_ratio([2.0], [1.0, 1.0]) == pytest.approx(2.0)  # one slowed process is asked
    assert hostprobe.slowed_ratio([], [1.0, 1.1]) is None and hostprobe.slowed_ratio([2.0], [1.0]) is None


def test_a_broken_noise_file_is_named(tmp_path):
    noise = tmp_path / "noise"
    noise.mkdir()
    (noise / "vm.json").write_text('{"figures": {"b.M.track_t [n=64]": 0.5}}')
    for load in (ab.load_floors, ab.load_sensitive):
        with pytest.raises(ab.ABError, match="vm.json: not a devbench noise file"):
            load(tmp_path, "vm")
    (noise / "vm.json").write_text('{"figures": {"b.M.track_t [n=64]": {"floor": 0.1, "host_sensitive": true}}}')
    assert ab.load_floors(tmp_path, "vm") == {"b.M.track_t [n=64]": 0.1}
    assert ab.load_sensitive(tmp_path, "vm") == {"b.M.track_t [n=64]"}
    assert ab.load_sensitive(tmp_path, "other") == set()
