"""Models on a device: forward, a training step with prepare_batch, saving and loading parameters."""

import shutil
import tempfile
from pathlib import Path

import torch

from devbench.engine.devices import synchronize
from devbench.engine.measure import randn, warm_up
from devbench.engine.suite import DEVICES, Benchmark, check_once, once, require_device, waited
from devbench.workloads.model import (
    BATCH,
    MODEL_INPUTS,
    PrefetchedTrainStep,
    TrainStep,
    build_model,
    check_forward,
    check_state,
    load_state,
    parameter_model,
    save_state,
)

MODELS = list(MODEL_INPUTS)


class Forward(Benchmark):
    """Inference on a batch of 256 already on the device: the chapter's one-unit
    ``LazyLinear`` (all launch overhead) and a 4-layer, 12.6M-parameter MLP."""

    params = [DEVICES, MODELS]
    param_names = ["device", "model"]
    swept = True
    #: 2: time_forward became track_time, timed by the run's measuring process
    work_version = 2

    def setup(self, device, model):
        self.device = require_device(device)
        # asv runs setup again before every sample: built, checked and warmed once per process
        self.net, self.x = once(("Forward", device, model), lambda: self._built(device, model))

    def _built(self, device, model):
        net = build_model(model, self.device)
        x = randn((BATCH, MODEL_INPUTS[model]), device=self.device)
        check_once(("Forward", device, model), lambda: check_forward(net, x), lambda: None)
        self.net, self.x = net, x
        warm_up(self._forward, self.device)
        return net, x

    def _forward(self):
        with torch.no_grad():
            return self.net(self.x)

    def track_time(self, device, model):
        return waited(self._forward, lambda: synchronize(self.device), self.sample_time, self.device)

    track_time.unit = "seconds"


class TrainingStep(Benchmark):
    """Forward, backward and SGD step, the batch moved from host memory each step by the
    chapter's ``prepare_batch``: plain ``.to(device)`` from pageable memory, or from
    pinned memory with ``non_blocking=True`` (asynchronous, but on the compute stream:
    it cannot overlap the step), or ``pinned_prefetch``: the next batch copied on a copy
    stream while this step computes, as data loaders do (the overlap; CUDA only)."""

    params = [DEVICES, MODELS, ["plain", "pinned_non_blocking", "pinned_prefetch"]]
    param_names = ["device", "model", "batch_transfer"]
    skips = [{"where": {"device": ["cpu"], "batch_transfer": ["pinned_non_blocking", "pinned_prefetch"]},
              "reason": "pinned memory and non_blocking copies need a CUDA device"}]  # fmt: skip
    #: devbench gpu-run runs these first (devbench.gpu.plan)
    headline = [{"device": ["cuda"]}]
    swept = True
    #: 2: time_train_step became track_time, timed by the run's measuring process
    work_version = 2

    def setup(self, device, model, batch_transfer):
        self.device = require_device(device)
        key = ("TrainingStep", device, model, batch_transfer)
        self.step = once(key, lambda: self._built(key, model, batch_transfer))

    def _built(self, key, model, batch_transfer):
        """The step, checked and warm: once per process (asv runs setup again before every sample)."""
        if batch_transfer == "pinned_prefetch":
            step = PrefetchedTrainStep(model, self.device)
        else:
            step = TrainStep(model, self.device, batch_transfer != "plain")
        check_once(key, step.check, lambda: None)
        warm_up(step, self.device)
        return step

    def track_time(self, device, model, batch_transfer):
        return waited(self.step, lambda: synchronize(self.device), self.sample_time, self.device)

    track_time.unit = "seconds"


class StateDict(Benchmark):
    """Writing a model's parameters from the device to a file and reading them back onto
    the device (``torch.load(map_location=device, weights_only=True)``), 1M and 100M
    float32 parameters (4 MB and 403 MB). The file sits in the page cache, so this is
    serialization plus the host<->device copies, not the disk."""

    params = [DEVICES, ["1M", "100M"]]
    param_names = ["device", "parameters"]
    timeout = 600.0
    swept = True
    #: a 100M round trip lasts a quarter of a second: 8 of them, or 1 s, for 0.5%
    sample_cap = (1.0, 8)
    #: 2: time_save and time_load became track_save_time and track_load_time (the measuring process's)
    work_version = 2

    def setup(self, device, parameters):
        self.device = require_device(device)
        # asv runs setup (and teardown, which removes the file) again before every sample: the
        # model is built once per process and the round trip checked once, the file written each time
        self.model = once(("StateDict", device, parameters), lambda: parameter_model(parameters).to(self.device))
        self.dir = Path(tempfile.mkdtemp(prefix="devbench-state-"))
        self.path = self.dir / "model.pt"
        save_state(self.model, self.path)
        once(("StateDict checked", device, parameters),
             lambda: check_once(("StateDict", device, parameters), self._check, lambda: None))

    def _check(self):
        check_state(load_state(self.path, self.device), self.model, self.device)
        return True

    def teardown(self, device, parameters):
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def track_save_time(self, device, parameters):
        return waited(lambda: save_state(self.model, self.path), None, self.sample_time, self.device)

    def track_load_time(self, device, parameters):
        sync = lambda: synchronize(self.device)  # noqa: E731
        return waited(lambda: load_state(self.path, self.device), sync, self.sample_time, self.device)

    track_save_time.unit = track_load_time.unit = "seconds"
