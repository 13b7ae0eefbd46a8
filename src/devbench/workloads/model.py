"""Models on a device: forward, a training step with the chapter's prepare_batch, saving
and loading parameters (the "Neural Networks and GPUs" part and exercise 2)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from devbench.engine.devices import as_device
from devbench.engine.measure import SEED, randn

#: Models by param value: (builder, input features). "lazy_linear" is the chapter's net.
MODEL_INPUTS = {"lazy_linear": 20, "mlp": 2048}
BATCH = 256


def build_model(name: str, device: torch.device) -> nn.Module:
    """A seeded model on ``device``; lazy modules are materialized with one batch."""
    torch.manual_seed(SEED)
    if name == "lazy_linear":
        net: nn.Module = nn.Sequential(nn.LazyLinear(1))
    elif name == "mlp":
        width = MODEL_INPUTS["mlp"]
        net = nn.Sequential(
            nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10),
        )  # fmt: skip
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {list(MODEL_INPUTS)}")
    with torch.no_grad():
        net(torch.zeros(1, MODEL_INPUTS[name]))  # materialize lazy shapes (fails on meta after .to)
    return net.to(device)


def check_forward(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Run ``net(x)`` without grad; raise unless it matches a float64 copy on the CPU."""
    with torch.no_grad():
        out = net(x)
        ref = copy.deepcopy(net).to("cpu", torch.float64)(x.cpu().double())
    if not torch.allclose(out.cpu().double(), ref, rtol=1e-3, atol=1e-4):
        raise AssertionError(f"forward on {x.device} differs from float64")
    return out


def parameter_model(count: str) -> nn.Module:
    """A CPU model with about ``count`` parameters ("1M" or "100M") for save/load."""
    torch.manual_seed(SEED)
    if count == "1M":
        return nn.Linear(1000, 1000)  # 1,001,000 parameters
    if count == "100M":
        return nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(6)])  # 100,687,872
    raise ValueError(f"unknown parameter count {count!r}; expected '1M' or '100M'")


def host_batch(name: str, pinned: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded (X, y) regression batch in host memory, page-locked if ``pinned``."""
    x = randn((BATCH, MODEL_INPUTS[name]))
    y = randn((BATCH, 1 if name == "lazy_linear" else 10), seed=SEED + 1)
    if pinned:
        x, y = x.pin_memory(), y.pin_memory()
    return x, y


def prepare_batch(
    batch: Sequence[torch.Tensor], device: torch.device, non_blocking: bool = False
) -> list[torch.Tensor]:
    """The chapter's ``Trainer.prepare_batch``: every tensor of the batch to ``device``."""
    return [a.to(device, non_blocking=non_blocking) for a in batch]


class TrainStep:
    """One SGD step of ``model`` on a host batch moved by ``prepare_batch``."""

    def __init__(self, name: str, device: torch.device, pinned: bool) -> None:
        self.device, self.pinned = as_device(device), pinned
        self.model = build_model(name, device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.batch = host_batch(name, pinned)
        self.loss_fn = nn.MSELoss()

    def __call__(self) -> torch.Tensor:
        x, y = prepare_batch(self.batch, self.device, non_blocking=self.pinned)
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def check(self, steps: int = 5) -> None:
        """The parameters stay where they were put and a few steps reduce the loss."""
        self._check_steps(steps)

    def _check_steps(self, steps: int) -> None:
        for p in self.model.parameters():
            if p.device != self.device:
                raise AssertionError(f"parameter on {p.device}, expected {self.device}")
        first = float(self())
        for _ in range(steps - 1):
            last = float(self())
        if not (last < first and torch.isfinite(torch.tensor(last))):
            raise AssertionError(f"training on {self.device}: loss went {first:.4g} -> {last:.4g}")


def prefetch_reason(device: torch.device) -> str | None:
    """Why a batch cannot be prefetched on a copy stream on ``device``, or ``None``."""
    if as_device(device).type != "cuda":
        return "prefetching on a copy stream needs a CUDA device (pinned memory, streams)"
    return None


class PrefetchedTrainStep(TrainStep):
    """A training step whose next batch is copied on a second stream while this one computes.

    The pattern data loaders use to hide host->device copies: two device buffers made
    once; each step waits for its batch's copy, starts the next batch's copy on the copy
    stream (pinned host memory, ``non_blocking``) and computes on the current stream.
    The copy stream waits for the step that last read a buffer before overwriting it.
    A per-step sync then waits for both, so the step's time shows how much copy was hidden.
    """

    def __init__(self, name: str, device: torch.device) -> None:
        reason = prefetch_reason(device)
        if reason:
            raise ValueError(reason)
        super().__init__(name, device, pinned=True)
        self.copy_stream = torch.cuda.Stream(self.device)
        self.buffers = [[torch.empty_like(t, device=self.device) for t in self.batch] for _ in range(2)]
        self.copied = [torch.cuda.Event() for _ in range(2)]
        self.used = [torch.cuda.Event() for _ in range(2)]
        self._next = 0
        self._start_copy(0)

    def _start_copy(self, i: int) -> None:
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.used[i])  # the step that last read buffer i is done with it
            for dst, src in zip(self.buffers[i], self.batch, strict=True):
                dst.copy_(src, non_blocking=True)
            self.copied[i].record(self.copy_stream)

    def __call__(self) -> torch.Tensor:
        i = self._next
        self._next = 1 - i
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(self.copied[i])
        self._start_copy(1 - i)  # the next batch moves while this one computes
        x, y = self.buffers[i]
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.used[i].record(compute)
        return loss.detach()

    def check(self, steps: int = 5) -> None:
        """Each device buffer holds the host batch after its copy, and steps reduce the loss."""
        torch.cuda.synchronize(self.device)
        for buf in self.buffers[:1]:
            for dst, src in zip(buf, self.batch, strict=True):
                if not torch.equal(dst.cpu(), src):
                    raise AssertionError(f"prefetched batch on {self.device} differs from the host batch")
        self._check_steps(steps)


def save_state(model: nn.Module, path: Path) -> None:
    """Write the model's state_dict (tensors as they are, on their device)."""
    torch.save(model.state_dict(), path)


def load_state(path: Path, device: torch.device) -> dict[str, torch.Tensor]:
    """Read a state_dict straight onto ``device`` (``map_location``), tensors only."""
    return torch.load(path, map_location=device, weights_only=True)


def check_state(loaded: dict[str, torch.Tensor], model: nn.Module, device: torch.device) -> None:
    """Raise unless ``loaded`` holds exactly ``model``'s parameters, on ``device``."""
    device = as_device(device)
    want = model.state_dict()
    if loaded.keys() != want.keys():
        raise AssertionError(f"loaded keys {sorted(loaded)} != saved keys {sorted(want)}")
    for k, v in want.items():
        if loaded[k].device != device:
            raise AssertionError(f"{k}: loaded onto {loaded[k].device}, expected {device}")
        if not torch.equal(loaded[k].cpu(), v.cpu()):
            raise AssertionError(f"{k}: loaded values differ from the saved ones")
