"""GPU state around benchmarks: NVML reasons decoded, records written by the suite's
base class only when CUDA is in use, and the report flagging throttled figures."""

import json
import shutil
from pathlib import Path

import pytest

from devbench.engine.suite import Benchmark, instrumented, records_gpu_state
from devbench.records import gpustate, nvlink
from devbench.report.cli import main as report_main
from devbench.report.load import load_results

ROOT = Path(__file__).resolve().parents[1]


def test_reasons_are_decoded_and_only_limits_count_as_throttling():
    assert gpustate.reasons(0x1 | 0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown", "gpu_idle"]
    assert gpustate.throttling(0x1 | 0x2 | 0x10) == []
    assert gpustate.throttling(0x4 | 0x8) == ["sw_power_cap", "hw_slowdown"]


def test_snapshot_without_a_driver_is_empty():
    from devbench.engine.devices import num_gpus

    if num_gpus():
        pytest.skip("this machine has a GPU")
    assert gpustate.snapshot() == []


GPU = {
    "index": 0, "name": "Fake GPU", "sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "temperature_c": 50,
    "power_w": 400.0, "reasons": [], "throttling": [], "power_violation_ns": 0, "thermal_violation_ns": 0,
}  # fmt: skip


@records_gpu_state
class Fake(Benchmark):
    params = [["cpu", "cuda"], [16, 64]]
    param_names = ["device", "n"]

    def setup(self, device, n):
        self.n = n


@records_gpu_state
class FakeWithTeardown(Fake):
    def teardown(self, device, n):
        self.torn = True


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr("torch.cuda.is_initialized", lambda: True)
    monkeypatch.setattr(gpustate, "snapshot", lambda cuda=None: [dict(GPU)])
    monkeypatch.setattr("devbench.engine.gpuwatch._cuda_identities", lambda: [])
    monkeypatch.setattr(gpustate, "gpustate_dir", lambda _file=None: tmp_path)
    monkeypatch.setattr("devbench.records.files.default_machine", lambda: "box")
    monkeypatch.setattr("devbench.engine.gpuwatch._last_gpu_state", {})
    return tmp_path


def test_setup_and_teardown_record_the_state_with_benchmark_and_params(fake_gpu):
    for cls in (Fake, FakeWithTeardown):
        b = cls()
        b.setup("cuda", 64)
        b.teardown("cuda", 64)
    lines = [json.loads(ln) for ln in (fake_gpu / "box.jsonl").read_text().splitlines()]
    assert [(r["benchmark"].rsplit(".", 1)[-1], r["phase"]) for r in lines] == [
        ("Fake", "before"), ("Fake", "after"), ("FakeWithTeardown", "before"), ("FakeWithTeardown", "after")
    ]  # fmt: skip
    assert all(r["params"] == {"device": "cuda", "n": 64} and r["sm_clock_mhz"] == 1980 for r in lines)
    assert b.torn and b.n == 64  # the benchmark's own set-up and tear-down still run


def test_nothing_is_recorded_without_cuda(monkeypatch, tmp_path):
    monkeypatch.setattr(gpustate, "gpustate_dir", lambda _file=None: tmp_path)
    b = Fake()
    b.setup("cpu", 16)
    b.teardown("cpu", 16)
    assert not list(tmp_path.iterdir())


def test_report_flags_a_figure_measured_while_throttled(tmp_path):
    results = tmp_path / "asv" / "results"
    shutil.copytree(ROOT / "reports" / "asv-results", results)
    frame = load_results(results).frame
    rows = frame[(frame["machine"] == "h200") & (frame["benchmark"] == "bench_matmul.MatmulSquare.track_tflops")]
    start = rows["started_at"].iloc[0].timestamp()
    name = "bench_matmul.MatmulSquare"

    def rec(t, params, phase, **over):
        return json.dumps({"time": start + t, "machine": "h200", "benchmark": name, "params": params,
                           "phase": phase, **GPU, **over})  # fmt: skip

    big = {"device": "cuda", "dtype": "float32", "n": 8192}
    small = {"device": "cuda", "dtype": "float32", "n": 1024}
    folder = tmp_path / "asv" / "gpustate"
    folder.mkdir()
    (folder / "h200.jsonl").write_text(
        "\n".join([
            rec(1, big, "before"),
            rec(1.5, big, "during", sm_clock_mhz=1800, power_w=390.0, samples=20),
            rec(2, big, "after", power_violation_ns=5_000_000, sm_clock_mhz=1755, temperature_c=71),
            rec(3, small, "before"),
            rec(4, small, "after"),
            "not json",
        ]) + "\n"
    )  # fmt: skip
    frame = load_results(results).frame
    mine = frame[(frame["machine"] == "h200") & (frame["benchmark"] == "bench_matmul.MatmulSquare.track_tflops")]
    by_params = mine.set_index("params")["gpu_throttled"]
    assert by_params["device=cuda, dtype=float32, n=8192"] == True  # noqa: E712 - pandas' boolean NA type
    assert by_params["device=cuda, dtype=float32, n=1024"] == False  # noqa: E712
    assert by_params.isna().sum() == len(by_params) - 2  # no record: unknown, not "fine"
    state = mine.set_index("params")["gpu_state"]["device=cuda, dtype=float32, n=8192"]
    assert state == "SM 1755-1980 MHz, 71 C max, 400 W max"
    timed = mine.set_index("params").loc["device=cuda, dtype=float32, n=8192"]
    assert (timed["gpu_mhz"], timed["gpu_watts"]) == (1800, 390.0)  # sampled while it was timed
    # the time_ twin ran in another window: its records would have to be its own
    other = frame[(frame["machine"] == "h200") & (frame["benchmark"] == "bench_matmul.MatmulSquare.time_matmul")]
    assert other["gpu_throttled"].isna().all()

    out = tmp_path / "out"
    assert report_main(["--results", str(results), "--out", str(out), "--format", "md", "--quiet"]) == 0
    md = (out / "report.md").read_text()
    section = md.split("## GPU state: figures measured while throttled", 1)[1].split("\n## ", 1)[0]
    assert "2 GPU figures" in section and "1 were measured while the GPU was held back" in section
    assert "device=cuda, dtype=float32, n=8192" in section and "n=1024" not in section


def test_the_report_judges_a_figure_by_the_gpu_it_ran_on_among_several_visible(tmp_path):
    """A process sees three GPUs and records each (CUDA_VISIBLE_DEVICES=1,2,3: NVML's 0 it cannot see). Only its
    cuda:0 ran the product: its clock, reasons, power limit and state text are the figure's; the idle neighbours'
    (a lower clock, a thermal slowdown, the default limit) never are. Any GPU's throttle still flags the point."""
    from devbench.report.health import state_of

    results = tmp_path / "asv" / "results"
    shutil.copytree(ROOT / "reports" / "asv-results", results)
    rows = load_results(results).frame
    rows = rows[(rows["machine"] == "h200") & (rows["benchmark"] == "bench_matmul.MatmulSquare.track_tflops")]
    start = rows["started_at"].iloc[0].timestamp()
    big = {"device": "cuda", "dtype": "float32", "n": 8192}
    gpus = [  # NVML index, CUDA index, clock, reasons, limit
        (0, None, 1980, ["hw_slowdown"], 100.0),
        (1, 0, 1515, [], 400.0),
        (2, 1, 345, ["hw_thermal_slowdown"], 700.0),
        (3, 2, 345, [], 700.0),
    ]
    lines = [json.dumps({**GPU, "time": start + 1.5, "machine": "h200", "benchmark": "bench_matmul.MatmulSquare",
                         "params": big, "phase": "during", "index": i, "cuda_index": c, "sm_clock_mhz": mhz,
                         "power_w": 690.0 if c == 0 else 80.0, "throttling": why, "power_limit_w": limit,
                         "default_power_limit_w": 700.0, "temperature_c": 60 if c == 0 else 30})
             for i, c, mhz, why, limit in gpus]  # fmt: skip
    folder = tmp_path / "asv" / "gpustate"
    folder.mkdir()
    (folder / "h200.jsonl").write_text("\n".join(lines) + "\n")
    frame = load_results(results).frame
    mine = frame[(frame["machine"] == "h200") & (frame["benchmark"] == "bench_matmul.MatmulSquare.track_tflops")]
    row = mine.set_index("params").loc["device=cuda, dtype=float32, n=8192"]
    assert (row["gpu_mhz"], row["gpu_reasons"], row["gpu_power_limit_w"]) == (1515, "", 400.0)
    assert row["gpu_state"] == "SM 1515-1515 MHz, 60 C max, 690 W max"
    assert row["gpu_throttled"] == True  # noqa: E712 - a neighbour's thermal slowdown flags it (its own: none)
    assert state_of(row.to_dict())["power_limit_w"] == 400.0
    # a peer copy's state is its route's source GPU's
    assert gpustate.figure_gpu({"route": "'1->0'", "nbytes": 1}) == 1 and gpustate.figure_gpu(big) == 0
    recs = [{"benchmark": "m.P", "phase": "during", "params": {"route": "1->0"}, "cuda_index": c, "time": 1.0,
             "sm_clock_mhz": 1000 + c} for c in (0, 1)]  # fmt: skip
    assert gpustate.while_timed(recs, "m.P", {"route": "1->0"})["sm_clock_mhz"] == 1001


def test_state_is_read_at_most_every_half_second_per_phase(fake_gpu, monkeypatch):
    import devbench.engine.gpuwatch as gpuwatch

    clock = [1000.0]
    monkeypatch.setattr(gpuwatch.time, "monotonic", lambda: clock[0])
    b = Fake()
    for _ in range(5):  # asv re-runs setup/teardown around each sample
        b.setup("cuda", 16)
        b.teardown("cuda", 16)
    clock[0] += 0.6
    b.setup("cuda", 16)
    phases = [json.loads(ln)["phase"] for ln in (fake_gpu / "box.jsonl").read_text().splitlines()]
    assert phases == ["before", "after", "before"]


class FakeNVML:
    """Two GPUs as NVML lists them; this process sees only the second, as its cuda:0."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0  # nvidia-ml-py's values
    GPUS = [("GPU-aaaa", "00000000:3B:00.0"), ("GPU-bbbb", "00000000:86:00.0")]

    class Pci:
        def __init__(self, bus):
            self.busId = bus

    def nvmlDeviceGetCount(self):
        return len(self.GPUS)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return self.GPUS[h][0].encode()

    def nvmlDeviceGetPciInfo(self, h):
        return self.Pci(self.GPUS[h][1].encode())

    def nvmlDeviceGetName(self, h):
        return "Fake GPU"

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1000 + h

    def __getattr__(self, name):  # every other query: a field this driver does not report
        def unsupported(*args):
            raise RuntimeError(f"{name} not supported")

        return unsupported


def test_snapshot_matches_nvml_gpus_to_cuda_devices_by_uuid_or_bus_id(monkeypatch):
    """Under CUDA_VISIBLE_DEVICES=1, NVML's GPU 1 is CUDA's device 0: never match by index."""
    monkeypatch.setattr(gpustate, "_nvml", lambda: FakeNVML())
    recs = gpustate.snapshot([{"uuid": "GPU-bbbb", "pci_bus_id": "00000000:86:00.0"}])
    assert [(r["index"], r["cuda_index"], r["uuid"]) for r in recs] == [(0, None, "GPU-aaaa"), (1, 0, "GPU-bbbb")]
    assert recs[1]["sm_clock_mhz"] == 1001
    # no UUID from CUDA: the PCI bus id decides (NVML's 8-digit domain against a 4-digit one)
    recs = gpustate.snapshot([{"uuid": None, "pci_bus_id": "0000:86:00.0"}])
    assert [r["cuda_index"] for r in recs] == [None, 0]
    assert [r["cuda_index"] for r in gpustate.snapshot()] == [None, None]


def test_a_gpu_nvml_counts_but_this_process_may_not_open_costs_only_itself(monkeypatch):
    """Under a scheduler's cgroup NVML counts every GPU, and opening a hidden one raises NoPermission: the GPUs this
    process may open are still recorded, sampled and matched to their CUDA devices."""
    pynvml = pytest.importorskip("pynvml")

    class Hidden(FakeNVML):
        def nvmlDeviceGetHandleByIndex(self, i):
            if i == 0:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
            return i

    monkeypatch.setattr(gpustate, "_nvml", lambda: Hidden())
    recs = gpustate.snapshot([{"uuid": "GPU-bbbb", "pci_bus_id": None}])
    assert [(r["index"], r["cuda_index"], r["uuid"]) for r in recs] == [(1, 0, "GPU-bbbb")]
    assert gpustate.all_handles(Hidden()) == [None, 1]
    assert nvlink.cuda_handles(Hidden(), [{"uuid": "GPU-bbbb"}]) == [1]
    read = gpustate.Sampler()._reader()
    assert read is not None and [r["sm_clock_mhz"] for r in read()] == [None, 1001]


def test_a_driver_before_r535_has_its_clock_event_reasons_read_by_the_older_name(monkeypatch):
    """nvidia-ml-py defines the new reader whatever the driver; an older driver answers it FunctionNotFound. The
    older name is read then, and a GPU whose reasons no reader gives is "not read" (None), never "not throttled"."""
    pynvml = pytest.importorskip("pynvml")

    class OldDriver(FakeNVML):
        def nvmlDeviceGetCurrentClocksEventReasons(self, h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
            return pynvml.nvmlClocksThrottleReasonSwPowerCap | pynvml.nvmlClocksThrottleReasonGpuIdle

    monkeypatch.setattr(gpustate, "_nvml", lambda: OldDriver())
    assert [r["throttling"] for r in gpustate.snapshot()] == [["sw_power_cap"]] * 2
    assert [r["throttling"] for r in gpustate.read_now(OldDriver(), [0, 1])] == [["sw_power_cap"]] * 2
    assert all(hasattr(pynvml, name) for name in gpustate.CLOCK_EVENT_READERS)  # the names the fallback reads

    monkeypatch.setattr(gpustate, "_nvml", lambda: FakeNVML())  # neither reader answers
    assert [r["throttling"] for r in gpustate.snapshot()] == [None, None]
    now = gpustate.read_now(FakeNVML(), [0, None])
    assert [r["throttling"] for r in now] == [None, None]
    assert [s["throttling"] for s in gpustate.summarize([now, now])] == [None, None]
    free = [{**r, "throttling": []} for r in now]
    assert [s["throttling"] for s in gpustate.summarize([now, free])] == [[], []]  # one sample read: free


def test_match_nvml_rules():
    nvml = [{"uuid": "GPU-a", "pci_bus_id": "00000000:3B:00.0"}, {"uuid": "GPU-b", "pci_bus_id": "00000000:86:00.0"}]
    cuda = [{"uuid": "GPU-B"}, {"uuid": None, "pci_bus_id": "0000:3b:00.0"}, {"uuid": "GPU-zzz", "pci_bus_id": None}]
    assert gpustate.match_nvml(cuda, nvml) == [1, 0, None]
    assert gpustate.pci_key("00000000:3B:00.0") == (0, 0x3B, 0) and gpustate.pci_key("junk") is None


def test_sampler_summarizes_clocks_and_power_seen_while_timed():
    """No timing: the block waits until the thread has read three times, whatever the host's speed."""
    import threading

    reads = iter([1400, 1600] + [1500] * 100_000)
    calls, enough = [0], threading.Event()

    def read():
        calls[0] += 1
        if calls[0] >= 4:  # the read at entry, then three by the thread
            enough.set()
        mhz = next(reads)
        capped = ["sw_power_cap"] * (mhz < 1450)
        return [{"sm_clock_mhz": mhz, "power_w": mhz / 2, "temperature_c": 60, "throttling": capped}]

    with gpustate.Sampler(every_s=0.001, read=read) as s:
        assert enough.wait(60)
    (gpu,) = s.summary()
    assert gpu["samples"] >= 5 and gpu["sm_clock_mhz"] == 1500 and gpu["sm_clock_mhz_min"] == 1400
    assert gpu["power_w"] == 750 and gpu["power_w_max"] == 800 and gpu["throttling"] == ["sw_power_cap"]
    assert gpustate.Sampler().summary() == [] and gpustate.summarize([]) == []


def test_the_timed_part_is_recorded_as_the_during_phase(fake_gpu, monkeypatch):
    sample = [{"sm_clock_mhz": 1755, "power_w": 690.0, "temperature_c": 70, "throttling": []}]
    monkeypatch.setattr(gpustate.Sampler, "_reader", lambda self: lambda: [dict(sample[0])])
    b = Fake()
    b.setup("cuda", 64)
    b.teardown("cuda", 64)
    lines = [json.loads(ln) for ln in (fake_gpu / "box.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in lines] == ["before", "during", "after"]
    during = lines[1]
    assert during["sm_clock_mhz"] == 1755 and during["power_w"] == 690.0 and during["samples"] >= 2
    assert during["name"] == "Fake GPU" and during["params"] == {"device": "cuda", "n": 64}


class _FakeField:
    def __init__(self, ret, kib):
        self.nvmlReturn = ret
        self.value = type("V", (), {"ullVal": kib})()


class _FakeNvml:
    """Two GPUs in NVML's order, the reverse of CUDA's; GPU-b counts 7 KiB sent, GPU-a has no counter."""

    NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK = 2, 0  # nvidia-ml-py's values

    def __init__(self):
        self.asked = []

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return ["GPU-b", "GPU-a"][i]

    def nvmlDeviceGetUUID(self, h):
        return h

    def nvmlDeviceGetPciInfo(self, h):
        raise RuntimeError("no PCI info")

    def nvmlDeviceGetFieldValues(self, h, fields):
        self.asked.append(fields)
        return [_FakeField(0, 7) if h == "GPU-b" else _FakeField(13, 0)]

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        assert cap == self.NVML_P2P_CAPS_INDEX_NVLINK
        return 0 if {a, b} == {"GPU-a", "GPU-b"} else 3


def test_nvlink_counters_and_topology_are_read_for_the_cuda_device_named():
    nv, cuda = _FakeNvml(), [{"uuid": "GPU-a"}, {"uuid": "GPU-b"}]  # CUDA 0 is NVML 1
    assert nvlink.nvlink_reader(1, nv, cuda)() == 7 * 1024
    assert nv.asked == [[(nvlink.NVLINK_TX_KIB_FIELD, nvlink.ALL_LINKS)]]
    assert nvlink.nvlink_reader(0, nv, cuda)() is None  # NVML answered with an error for this field
    assert nvlink.nvlink_joined(0, 1, nv, cuda) is True
    assert nvlink.nvlink_joined(0, 2, nv, [*cuda, {"uuid": "GPU-z"}]) is None  # a GPU NVML does not see


def test_the_base_class_pins_threads_and_records_unless_the_class_opts_out(monkeypatch):
    """A benchmark class carries no machinery: ``Benchmark`` wraps its set-up (threads pinned first, the GPU
    state recorded after) and its ``setup_cache``; a class opts out with ``pins_threads``/``gpu_state``."""
    import inspect

    from devbench.engine import measure

    pinned = []
    monkeypatch.setattr(measure, "pin_threads", lambda threads=None: pinned.append(threads) or 1)

    class Plain(Benchmark):  # subclassing is all it takes
        def setup(self, n):
            self.seen = list(pinned)

        def setup_cache(self):
            return len(pinned)

    class Bare:  # not the suite's: asv runs the class's own set-up, nothing around it
        def setup(self, n):
            self.seen = list(pinned)

    class Unpinned(Benchmark):
        pins_threads = False
        gpu_state = False

        def setup(self, n):
            pass

    assert Plain.setup.devbench_gpu_state and Plain.teardown.devbench_gpu_state
    assert not hasattr(Bare.setup, "devbench_gpu_state") and "_devbench_instrumented" not in Bare.__dict__
    bare = Bare()
    bare.setup(4)
    assert bare.seen == [] and pinned == []
    bench = Plain()
    bench.setup(4)
    assert bench.seen == [None]  # pinned before the class's own set-up ran
    assert Plain().setup_cache() == 2
    Unpinned().setup(4)
    assert pinned == [None, None]
    assert "def setup(self, n)" in inspect.getsource(Plain.setup)  # asv versions the source, unwrapped
    assert records_gpu_state(Fake) is Fake and Fake.setup.__wrapped__.__name__ == "setup"  # wrapped once only
    assert instrumented(Plain) is Plain and Plain.setup.__wrapped__.__name__ == "setup"  # again: no change
    assert "def setup(self, device, n)" in inspect.getsource(Fake.setup)


def test_a_figure_is_judged_with_the_state_of_the_gpu_it_ran_on_under_cuda_visible_devices(monkeypatch, tmp_path):
    """CUDA_VISIBLE_DEVICES=1: the process's CUDA device 0 is NVML's GPU 1 (matched by UUID). The sampler reads
    every NVML device; the record and ``while_timed`` keep CUDA's numbering, so GPU 0's figure reads GPU 1's
    clock, not NVML's GPU 0's (idle, at another clock)."""
    monkeypatch.setattr(gpustate, "_nvml", lambda: FakeNVML())
    monkeypatch.setattr("torch.cuda.is_initialized", lambda: True)
    monkeypatch.setattr("devbench.engine.gpuwatch._cuda_identities", lambda: [{"uuid": "GPU-bbbb", "pci_bus_id": None}])
    monkeypatch.setattr(gpustate, "gpustate_dir", lambda _file=None: tmp_path)
    monkeypatch.setattr("devbench.records.files.default_machine", lambda: "box")
    monkeypatch.setattr("devbench.engine.gpuwatch._last_gpu_state", {})
    per_nvml = [{"sm_clock_mhz": 345, "throttling": []}, {"sm_clock_mhz": 1755, "throttling": ["sw_power_cap"]}]
    monkeypatch.setattr(gpustate.Sampler, "_reader", lambda self: lambda: [dict(r) for r in per_nvml])
    b = Fake()
    b.setup("cuda", 64)
    b.teardown("cuda", 64)
    records = gpustate.load(tmp_path)
    state = gpustate.while_timed(records, f"{Fake.__module__.removeprefix('benchmarks.')}.Fake",
                                 {"device": "cuda", "n": 64}, gpu=0)  # fmt: skip
    assert state is not None and state["uuid"] == "GPU-bbbb" and state["cuda_index"] == 0
    assert state["sm_clock_mhz"] == 1755 and state["throttling"] == ["sw_power_cap"]
    # a record from before cuda_index was kept is read by NVML's index, as it was written
    old = [{"benchmark": "m.C", "phase": "during", "params": {}, "index": 0, "time": 1.0, "sm_clock_mhz": 1}]
    assert gpustate.while_timed(old, "m.C", {}, gpu=0)["sm_clock_mhz"] == 1


def test_a_figures_state_is_its_own_and_its_machines(tmp_path):
    """The measuring process times a workload's figures one after another: each record names its figure, and a
    twin's state never stands for the figure's; records of another machine are not read for this one."""
    rec = {"benchmark": "m.C", "phase": "during", "params": {"n": 1}, "cuda_index": 0, "machine": "box"}
    records = [{**rec, "figure": "track_gbps", "time": 1.0, "sm_clock_mhz": 1980},
               {**rec, "figure": "track_time", "time": 2.0, "sm_clock_mhz": 1200}]  # fmt: skip
    assert gpustate.while_timed(records, "m.C", {"n": 1}, figure="track_gbps")["sm_clock_mhz"] == 1980
    assert gpustate.while_timed(records, "m.C", {"n": 1}, figure="track_time")["sm_clock_mhz"] == 1200
    assert gpustate.while_timed(records, "m.C", {"n": 1}, figure="track_other") is None
    one = [{**rec, "time": 3.0, "sm_clock_mhz": 1500}]  # asv's own process: one figure, keyed by none
    assert gpustate.while_timed(one, "m.C", {"n": 1}, figure="track_gbps")["sm_clock_mhz"] == 1500
    for machine in ("box", "other"):
        gpustate.record("m.C", {"n": 1}, "during", tmp_path, machine=machine, gpus=[{"index": 0}], figure="track_a")
    assert {r["machine"] for r in gpustate.load(tmp_path)} == {"box", "other"}
    (mine,) = gpustate.load(tmp_path, machine="box")
    assert mine["machine"] == "box" and mine["figure"] == "track_a"


def test_the_measuring_process_samples_each_figure_and_records_it_by_name(monkeypatch):
    """Around each figure it times, the measuring process starts the sampler (one running goes on) and records
    what it saw under that figure's name."""
    from devbench.engine import measuring, suite

    calls = []
    monkeypatch.setattr(suite, "_start_sampler", lambda bench, args: calls.append(("start",)))
    monkeypatch.setattr(suite, "_stop_sampler", lambda bench, args, figure=None: calls.append(("stop", figure)))

    class Bench:
        def track_a(self, n):
            calls.append(("a",))
            return 1.0

        def track_b(self, n):
            calls.append(("b",))
            return 2.0

    server = measuring.Server.__new__(measuring.Server)
    server.bench, server.waiting, server.fatal, server._note = Bench(), {}, False, lambda **_: None
    server.origin = {}
    monkeypatch.setattr(measuring, "selected", lambda name, params: True)
    assert server._measure("bench_x.Bench.track_b", (1,)) == {"result": 2.0}
    server.go_ahead()  # once the reply has gone: the workload's other figure
    assert calls == [("start",), ("b",), ("stop", "track_b"), ("start",), ("a",), ("stop", "track_a")]


def test_the_report_reads_a_figures_own_state_from_its_run_and_only_gpus_it_saw(tmp_path):
    results = tmp_path / "asv" / "results"
    shutil.copytree(ROOT / "reports" / "asv-results", results)
    frame = load_results(results).frame
    rows = frame[(frame["machine"] == "h200") & (frame["benchmark"] == "bench_matmul.MatmulSquare.track_tflops")]
    run = frame[(frame["machine"] == "h200") & (frame["commit"] == rows["commit"].iloc[0])]
    first = run["started_at"].min().timestamp()  # the run's first figure: twins may be timed long before their turn
    big = {"device": "cuda", "dtype": "float32", "n": 8192}

    def rec(figure, **over):
        return json.dumps({"time": first + 0.5, "machine": "h200", "benchmark": "bench_matmul.MatmulSquare",
                           "figure": figure, "params": big, "phase": "during", **GPU, "cuda_index": 0, **over})

    folder = tmp_path / "asv" / "gpustate"
    folder.mkdir()
    (folder / "h200.jsonl").write_text("\n".join([
        rec("track_tflops", sm_clock_mhz=1830, power_w=500.0),
        rec("track_time", sm_clock_mhz=1100, power_w=200.0, throttling=["hw_slowdown"]),  # the twin's, not its
        rec("track_tflops", index=1, cuda_index=None, sm_clock_mhz=300, throttling=["hw_slowdown"]),  # unseen GPU
    ]) + "\n")  # fmt: skip
    frame = load_results(results).frame
    mine = frame[(frame["machine"] == "h200") & (frame["benchmark"] == "bench_matmul.MatmulSquare.track_tflops")]
    timed = mine.set_index("params").loc["device=cuda, dtype=float32, n=8192"]
    assert (timed["gpu_mhz"], timed["gpu_watts"]) == (1830, 500.0)
    assert timed["gpu_throttled"] == False  # noqa: E712 - neither the twin's nor the unseen GPU's slowdown
    twin = frame[(frame["machine"] == "h200") & (frame["benchmark"] == "bench_matmul.MatmulSquare.track_time")]
    seen = twin.set_index("params").loc["device=cuda, dtype=float32, n=8192"]
    assert seen["gpu_mhz"] == 1100 and seen["gpu_throttled"] == True  # noqa: E712


def test_a_torn_last_line_costs_itself_only_and_a_bad_byte_its_own_line(tmp_path):
    """A writer killed mid-line leaves a fragment: the next append starts a line of its own, so the fragment alone
    is skipped, never the whole record after it; a byte that is no UTF-8 costs its line, not the file."""
    from devbench.records.files import append_jsonl, read_jsonl

    path = append_jsonl(tmp_path, "box", [{"time": 1.0}])
    with open(path, "a") as f:
        f.write('{"time": 2.0, "mach')  # torn
    append_jsonl(tmp_path, "box", [{"time": 3.0}, {"time": 4.0}])
    with open(path, "ab") as f:
        f.write(b'{"time": "\xff"}\n')
    append_jsonl(tmp_path, "box", [{"time": 5.0}])
    assert [r["time"] for r in read_jsonl(tmp_path)] == [1.0, 3.0, 4.0, 5.0]  # the bad line dropped, not kept


def test_a_gpu_whose_reasons_and_counters_were_not_read_is_not_called_free(tmp_path):
    """A driver that gives neither the clock-event reasons nor the violation counters: the figure's state is
    unknown (NA), never "not throttled"; one read reason list, empty, is free."""
    import pandas as pd

    from devbench.report.records import attach_gpu_state

    t0 = 1_750_000_000.0
    frame = pd.DataFrame([dict(machine="h200", env="e", commit="aaaa", benchmark="bench_x.D.track_b", params="n=1",
                               started_at=pd.Timestamp(t0, unit="s", tz="UTC"))])  # fmt: skip
    rec = dict(machine="h200", benchmark="bench_x.D", params={"n": 1}, phase="during", index=0, cuda_index=0,
               time=t0 + 1, sm_clock_mhz=1000, power_w=300.0, temperature_c=60,
               throttling=None, power_violation_ns=None, thermal_violation_ns=None)  # fmt: skip
    (tmp_path / "h200.jsonl").write_text(json.dumps(rec) + "\n")
    assert pd.isna(attach_gpu_state(frame, tmp_path)["gpu_throttled"].iloc[0])
    (tmp_path / "h200.jsonl").write_text(json.dumps({**rec, "throttling": []}) + "\n")
    assert attach_gpu_state(frame, tmp_path)["gpu_throttled"].iloc[0] == False  # noqa: E712 - read, and free


def test_a_record_belongs_to_the_run_asv_made_it_in(tmp_path, monkeypatch):
    """asv runs commits A then B: the last figure of A's result has no next benchmark to close its window, and B's
    records of the same class and params came later. Each record names the commit and environment asv set for
    its process, and attaches to that run's result alone."""
    import pandas as pd

    from devbench.records.gpustate import record
    from devbench.report.records import attach_gpu_state

    t0 = 1_750_000_000.0
    frame = pd.DataFrame([dict(machine="h200", env="e", commit=c, benchmark="bench_x.D.track_b", params="n=1",
                               started_at=pd.Timestamp(t0 + k * 3600, unit="s", tz="UTC"))
                          for k, c in enumerate(("a" * 40, "b" * 40))])  # fmt: skip
    state = {"index": 0, "cuda_index": 0, "sm_clock_mhz": 1980.0, "throttling": []}
    for k, (commit, reasons) in enumerate((("a" * 40, []), ("b" * 40, ["hw_thermal_slowdown"]))):
        monkeypatch.setenv("ASV_COMMIT", commit)
        monkeypatch.setenv("ASV_ENV_NAME", "e")
        monkeypatch.setattr(gpustate.time, "time", lambda k=k: t0 + k * 3600 + 1)
        record("bench_x.D", {"n": 1}, "during", tmp_path, machine="h200", gpus=[{**state, "throttling": reasons}])
    assert gpustate.load(tmp_path)[0]["commit"] == "a" * 40
    out = attach_gpu_state(frame, tmp_path)
    assert list(out["gpu_throttled"]) == [False, True]  # A's own record, not B's slowdown an hour later
