"""Many small copies against one big one, and the copies hidden in a read of a device tensor from Python
(``.item()``, ``.tolist()``, ``.cpu().numpy()``, ``print``): the chapter's small transfers, each checked.
Everything here works on CPU "devices" too; only pinned memory needs CUDA."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import torch

from devbench.engine.devices import synchronize
from devbench.engine.measure import SEED
from devbench.records.spec import MiB
from devbench.workloads.transfer import _buffer, host_buffer, pattern

# --- Many small copies vs one big one ------------------------------------------------------------------


#: Param values of the many-small family and what each does.
SMALL_KINDS = {
    "1024x4KiB": "1,024 copies of 4 KiB",
    "1x4MiB": "one copy of 4 MiB",
    "tensors_one_by_one": "256 small tensors (up to 64 x 64 float32), one .to() each",
    "tensors_packed": "the same 256 tensors packed into one buffer, copied once, unpacked as views",
}


class ManySmall:
    """4 MiB in 1,024 pieces vs at once, and a batch of small tensors one by one vs packed.

    Host buffers are ``memory`` (pinned on a GPU: the best case for small copies), and
    copies are ``non_blocking`` when pinned. Calling it does the whole batch once; the
    caller synchronizes before the next call (the packed kind reuses its staging buffer).
    """

    def __init__(self, kind: str, device: torch.device, memory: str = "pageable") -> None:
        if kind not in SMALL_KINDS:
            raise ValueError(f"unknown kind {kind!r}; expected one of {list(SMALL_KINDS)}")
        self.kind, self.device, self.memory = kind, torch.device(device), memory
        self.non_blocking = memory == "pinned"
        if kind in ("1024x4KiB", "1x4MiB"):
            pieces = 1024 if kind == "1024x4KiB" else 1
            self.src = host_buffer(4 * MiB, memory)
            self.src.copy_(pattern(4 * MiB))
            self.dst = _buffer(4 * MiB, self.device, "pageable")
            self.pairs = list(zip(self.src.chunk(pieces), self.dst.chunk(pieces), strict=True))
        else:
            gen = torch.Generator().manual_seed(SEED)  # 1-D and 2-D, up to 64 x 64 floats (16 KiB)
            shapes = [tuple(int(s) for s in torch.randint(1, 65, (1 + i % 2,), generator=gen)) for i in range(256)]
            self.tensors = []
            for i, shape in enumerate(shapes):
                t = host_buffer(4 * torch.Size(shape).numel(), memory).view(torch.float32).view(shape)
                t.copy_(torch.randn(shape, generator=gen) + 3.0 + i)  # never zero
                self.tensors.append(t)
            self.numels = [t.numel() for t in self.tensors]
            self.staging = host_buffer(4 * sum(self.numels), memory).view(torch.float32)
            self.out: list[torch.Tensor] = []

    @property
    def nbytes(self) -> int:
        if self.kind in ("1024x4KiB", "1x4MiB"):
            return self.src.numel()
        return 4 * sum(self.numels)

    def __call__(self) -> object:
        if self.kind in ("1024x4KiB", "1x4MiB"):
            for s, d in self.pairs:
                d.copy_(s, non_blocking=self.non_blocking)
            return self.dst
        # copy=True: on a CPU "device" .to() would return the very same tensor and copy nothing
        if self.kind == "tensors_one_by_one":
            self.out = [t.to(self.device, non_blocking=self.non_blocking, copy=True) for t in self.tensors]
            return self.out
        torch.cat([t.view(-1) for t in self.tensors], out=self.staging)
        flat = self.staging.to(self.device, non_blocking=self.non_blocking, copy=True)
        self.out = [p.view(t.shape) for p, t in zip(flat.split(self.numels), self.tensors, strict=True)]
        return self.out

    def check(self) -> None:
        if self.kind in ("1024x4KiB", "1x4MiB"):  # a copy that wrote nothing must not pass on an earlier one's bytes
            self.dst.zero_()
        self()
        synchronize(self.device)
        if self.kind in ("1024x4KiB", "1x4MiB"):
            ok = torch.equal(self.dst.cpu(), self.src)
        else:
            ok = len(self.out) == len(self.tensors) and all(
                o.device.type == self.device.type and o.data_ptr() != t.data_ptr() and torch.equal(o.cpu(), t)
                for o, t in zip(self.out, self.tensors, strict=True)
            )
        if not ok:
            raise AssertionError(f"{SMALL_KINDS[self.kind]} to {self.device}: destination differs from source")


# --- Hidden copies: reading a device tensor from Python ------------------------------------------------


#: Param value -> what the user writes.
HIDDEN = {
    "item": "x[0].item()",
    "tolist": "x.tolist()",
    "numpy": "x.cpu().numpy()",
    "print": "print(x)",
}


def hidden_copy(kind: str, x: torch.Tensor) -> Callable[[], object]:
    """The Python-side read of ``x`` that ``kind`` names; each copies to the host and syncs.

    ``print`` formats the tensor as ``print`` would, into a buffer instead of the terminal.
    """
    if kind == "item":
        first = x.view(-1)[:1]
        return lambda: first.item()
    if kind == "tolist":
        return x.tolist
    if kind == "numpy":
        return lambda: x.cpu().numpy()
    if kind == "print":
        sink = io.StringIO()

        def show() -> str:
            sink.seek(0)
            sink.truncate()
            print(x, file=sink)
            return sink.getvalue()

        return show
    raise ValueError(f"unknown hidden copy {kind!r}; expected one of {list(HIDDEN)}")


def check_hidden_copy(kind: str, x: torch.Tensor) -> None:
    """The read gives the tensor's values (on the host)."""
    got = hidden_copy(kind, x)()
    host = x.detach().cpu()
    if kind == "item":
        ok = got == host.view(-1)[0].item()
    elif kind == "tolist":
        ok = got == host.tolist()
    elif kind == "numpy":
        ok = torch.equal(torch.from_numpy(got), host)
    else:  # the text print wrote, less the device suffix, is the host tensor's
        # torch puts the device suffix on a line of its own when the last row is full
        ok = re.sub(rf",\s*device='{x.device}'", "", got) == f"{host}\n"
    if not ok:
        raise AssertionError(f"{HIDDEN[kind]} of a {x.device} tensor returned other values")
