"""Cost of the chapter's device helpers: try_gpu() and moving a small tensor to a device."""

from pathlib import Path

from devbench import runinfo
from devbench.devices import move, num_gpus, synchronize, try_all_gpus, try_gpu
from devbench.suite import DEVICES, pin_threads, randn, require_device, warm_up


class RunInfo:
    """Records the torch, CUDA and driver versions this environment really runs.

    ``setup_cache`` runs once per environment and run, in the benchmark's own Python, and
    appends a line to ``.asv/runinfo/<env>.jsonl`` for ``devbench report``.
    """

    def setup_cache(self):
        # asv's "existing" environments pass no ASV_* variables and run setup_cache in a
        # temporary folder: locate .asv/ from this file (benchmark_dir is never copied).
        return str(runinfo.record(Path(__file__).resolve().parents[1] / runinfo.RUNINFO_DIR))

    def track_gpu_count(self, record_path):
        return num_gpus()

    track_gpu_count.unit = "GPUs"


class TryGpu:
    """``try_gpu()`` asks the driver how many GPUs there are; code calls it per batch."""

    def setup(self):
        pin_threads()

    def time_try_gpu(self):
        try_gpu()

    def time_try_all_gpus(self):
        try_all_gpus()


class MoveSmall:
    """Moving a 1,000-element float32 tensor to a device.

    ``copy`` is a host->device move (a real transfer, synchronized); ``same_device`` moves a
    tensor to where it already lives, which must return the very same object at once.
    """

    params = [DEVICES, ["copy", "same_device"]]
    param_names = ["device", "move"]

    def setup(self, device, kind):
        pin_threads()
        self.device = require_device(device)
        if kind == "copy" and self.device.type == "cpu":
            raise NotImplementedError("cpu -> cpu is a same-device move: see move=same_device")
        host = randn(1000)
        self.x = host if kind == "copy" else host.to(self.device)
        moved = move(self.x, self.device)
        if kind == "same_device" and moved is not self.x:
            raise AssertionError("same-device move returned a new tensor")
        if not moved.cpu().equal(host):
            raise AssertionError(f"move to {self.device} changed the values")
        warm_up(lambda: move(self.x, self.device), self.device)

    def time_move(self, device, kind):
        move(self.x, self.device)
        synchronize(self.device)
