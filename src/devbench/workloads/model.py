"""Models on a device: forward, a training step with the chapter's prepare_batch, saving
and loading parameters (the "Neural Networks and GPUs" part and exercise 2)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from devbench.devices import as_device
from devbench.measure import SEED, randn

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
        for p in self.model.parameters():
            if p.device != self.device:
                raise AssertionError(f"parameter on {p.device}, expected {self.device}")
        first = float(self())
        for _ in range(steps - 1):
            last = float(self())
        if not (last < first and torch.isfinite(torch.tensor(last))):
            raise AssertionError(f"training on {self.device}: loss went {first:.4g} -> {last:.4g}")


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
