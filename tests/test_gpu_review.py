"""What a review of the GPU code found, each held on the CPU as far as it can be.

A figure must measure what it names on a GPU: no NVML start-up in ``try_gpu``, no device sync after
work that queued none or already waited, no sampling thread inside microsecond figures, no float32
figure that is really TF32; and ``scripts/device-run.sh`` must say which Python its wheels are for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_devices, bench_launch, bench_matmul, bench_parallel, bench_transfer  # noqa: E402

from devbench.engine import gpuwatch  # noqa: E402
from devbench.engine.devices import initialise_cuda, num_gpus  # noqa: E402
from devbench.workloads import matmul as M  # noqa: E402

MICROSECOND_CLASSES = [bench_devices.TryGpu, bench_launch.LaunchOverhead, bench_matmul.TinyOp,
                       bench_transfer.SameDeviceMove, bench_transfer.HiddenCopy]  # fmt: skip


@pytest.mark.parametrize("cls", MICROSECOND_CLASSES, ids=lambda c: c.__name__)
def test_no_sampling_thread_runs_beside_a_microsecond_figure(cls, monkeypatch):
    started = []

    class Recorder:
        def __enter__(self):
            started.append(True)
            return self

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # as on a GPU, once set-up used CUDA
    from devbench.records import gpustate

    monkeypatch.setattr(gpustate, "Sampler", Recorder)
    gpuwatch._start_sampler(cls.__new__(cls), ())
    assert started == [], f"{cls.__name__} would be timed beside the NVML sampling thread"
    square = bench_matmul.MatmulSquare
    # a CPU point in a process that uses CUDA too (the measuring process serves both): no thread beside it
    gpuwatch._start_sampler(square.__new__(square), ("cpu", "float32", 1024))
    assert started == []
    # a class that keeps the default still samples its GPU points: the switch is what stops it
    gpuwatch._start_sampler(square.__new__(square), ("cuda", "float32", 1024))
    assert started == [True]


def test_a_cpu_point_is_told_by_its_params_as_the_plan_counts_its_gpus():
    """``gpuwatch.cpu_point`` and ``gpu.declared.gpus_needed`` read a class's ``plan_gpus`` alike: the most any
    param asks, a value it does not name asking none."""

    class Modes:
        param_names = ["mode", "n"]
        plan_gpus = {"mode": {"gpus": 2, "streams": 1, "host": 0}}

    assert [gpuwatch.cpu_point(Modes(), (m, 64)) for m in ("gpus", "streams", "host", "threads")] == [
        False, False, True, True]  # fmt: skip
    assert gpuwatch.cpu_point(Modes(), ("cache result", "threads", 64))  # a setup_cache's result comes first
    assert not gpuwatch.cpu_point(bench_parallel.ParallelMatmul(), ("streams", 1024))
    assert gpuwatch.cpu_point(bench_parallel.ParallelMatmul(), ("cpu_threads", 1024))


@pytest.mark.parametrize(("cls", "params"), [(bench_transfer.SameDeviceMove, ("cpu", "to")),
                                             (bench_transfer.HiddenCopy, ("cpu", "item"))])  # fmt: skip
def test_a_move_or_read_that_queues_no_gpu_work_is_timed_without_a_device_sync(cls, params, monkeypatch):
    bench = cls()
    bench.setup(*params)
    calls = []
    monkeypatch.setattr(bench_transfer, "synchronize", lambda *a: calls.append(a))
    monkeypatch.setenv("DEVBENCH_BLOCKS", "1")
    bench.track_time(*params)
    assert calls == []


def test_try_gpu_is_timed_after_cuda_is_initialised_as_in_a_training_loop(monkeypatch):
    calls = []
    monkeypatch.setattr(bench_devices, "initialise_cuda", lambda: calls.append(True) or False)
    bench_devices.TryGpu().setup()
    assert calls == [True]
    if num_gpus() == 0:
        assert initialise_cuda() is False  # nothing to initialise: no CUDA call made


def test_the_tf32_override_is_named_and_float32_on_a_gpu_skips(monkeypatch):
    monkeypatch.setenv(M.TF32_OVERRIDE_ENV, "1")
    with pytest.raises(NotImplementedError, match="TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 forces TF32"):
        M.Matmul(64, "float32", torch.device("cuda", 0))
    # other dtypes and the CPU are unaffected; the reason is None without the variable
    assert M.tf32_override_reason(torch.device("cuda", 0), "tf32") is None
    assert M.tf32_override_reason(torch.device("cpu"), "float32") is None
    M.Matmul(16, "float32", torch.device("cpu"))
    monkeypatch.setenv(M.TF32_OVERRIDE_ENV, "0")
    assert M.tf32_override_reason(torch.device("cuda", 0), "float32") is None
    monkeypatch.delenv(M.TF32_OVERRIDE_ENV)
    assert M.tf32_override_reason(torch.device("cuda", 0), "float32") is None


def test_nvidias_tf32_switch_turned_off_is_named_and_a_tf32_product_on_a_gpu_skips(monkeypatch):
    """``NVIDIA_TF32_OVERRIDE=0`` turns TF32 off inside cuBLAS: a tf32 figure would be float32's, and its check (TF32's
    looser tolerance) would pass it; float32, bfloat16 and the CPU are unaffected."""
    monkeypatch.delenv(M.TF32_OVERRIDE_ENV, raising=False)
    monkeypatch.setenv(M.NVIDIA_TF32_ENV, "0")
    with pytest.raises(NotImplementedError, match="NVIDIA_TF32_OVERRIDE=0 turns TF32 off"):
        M.Matmul(64, "tf32", torch.device("cuda", 0))
    assert M.tf32_override_reason(torch.device("cuda", 0), "float32") is None
    assert M.tf32_override_reason(torch.device("cuda", 0), "bfloat16") is None
    assert M.tf32_override_reason(torch.device("cpu"), "tf32") is None
    monkeypatch.setenv(M.NVIDIA_TF32_ENV, "1")  # NVIDIA's default: TF32 where the framework asks for it
    assert M.tf32_override_reason(torch.device("cuda", 0), "tf32") is None


def test_a_check_fails_a_call_that_wrote_nothing_whatever_the_memory_held(monkeypatch):
    """A measuring process reuses device memory across workloads and cudaMalloc does not clear it: a product or a
    copy whose call wrote nothing must fail its check even where its output already holds the right values."""
    from devbench.workloads import smallcopies as S

    mm = M.Matmul(64, "float32", torch.device("cpu"))
    for out, (a, b) in zip(mm.outputs, mm.inputs, strict=True):
        torch.mm(a, b, out=out)  # what an earlier, identical workload left in the same memory
    assert mm.check() < M.TOLERANCE["float32"]
    monkeypatch.setattr(M.torch, "mm", lambda a, b, out: out)  # a product that writes nothing
    with pytest.raises(AssertionError, match="non-finite output"):
        mm.check()
    batch = S.ManySmall("1024x4KiB", torch.device("cpu"))
    batch.dst.copy_(batch.src)
    batch.pairs = []  # copies nothing
    with pytest.raises(AssertionError, match="destination differs from source"):
        batch.check()


def test_the_loggers_copy_is_waited_for_on_its_own_gpu_not_the_current_one(monkeypatch):
    """``Event.record()`` without a stream records on the current device's stream: a logger on GPU 1 would read its
    pinned buffer before the copy on GPU 1's stream landed. The event goes on the logger's device's stream."""
    from devbench import logger as L

    recorded = []

    class Event:
        def record(self, stream=None):
            recorded.append(stream)

        def synchronize(self):
            pass

    monkeypatch.setattr(L.torch.cuda, "Event", Event)
    monkeypatch.setattr(L.torch.cuda, "current_stream", lambda device=None: ("stream of", device))
    log = L.DeviceLogger(torch.device("cpu"), capacity=4, flush_every=10)
    log.log(torch.tensor(1.0))
    log.device = torch.device("cuda", 1)  # as a logger on GPU 1 would be; its buffers stay on the CPU here
    log.flush()
    assert recorded == [("stream of", torch.device("cuda", 1))]


def test_device_run_names_a_python_it_has_no_wheels_for(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "device-run.sh", tmp_path / "scripts")
    devrun = tmp_path / ".devrun"
    (devrun / "wheels").mkdir(parents=True)
    (devrun / "repo.bundle").write_text("")
    (devrun / "commit").write_text("0" * 40)
    (devrun / "python").write_text("2.7\n")
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "device-run.sh"), "box"], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "wheels for Python 2.7, but python3 here is" in done.stdout
    assert "DEVICE_PYTHON=" in done.stdout


def test_parallel_gpus_fed_by_one_thread_skip_when_the_thread_would_be_timed():
    from devbench.workloads.parallel import ParallelPair, host_bound_reason

    # a 40 us product (float32 n=1,024 on an H100) and 8-10 us to issue one: 2 lanes fine, 8 host-bound
    assert host_bound_reason(2, 8e-6, 40e-6) is None
    reason = host_bound_reason(8, 10e-6, 40e-6)
    assert reason is not None and "8 lanes fed by one thread would time the thread" in reason
    assert "lasts 40 us" in reason and "takes 10 us" in reason
    # CPU threads are lanes of their own: never host-bound by this rule
    pair = ParallelPair(32, ["cpu", "cpu"], run_s=0.002)
    assert pair.host_bound() is None and pair.issue_s == 0.0
