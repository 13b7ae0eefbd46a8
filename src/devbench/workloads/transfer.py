"""Copies between host and devices, checked once, timed as nvbandwidth times them.

The chapter's "Copying" part: host<->device over pageable and pinned memory, blocking
and ``non_blocking``; copies on one device and between GPUs; a copy hidden behind
compute on another stream. Many small copies and the copies hidden in a read from
Python: ``devbench.workloads.smallcopies``.

Conventions (nvbandwidth's): bandwidth in decimal GB/s (1e9 bytes/s); a copy moves
``nbytes`` ("copied"); a copy within one memory also reads and writes them, so its
"read+write" figure counts ``2 * nbytes``. Everything here works on CPU "devices" too,
so the tests exercise each path without a GPU; only pinned memory needs CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from copy import copy as shallow
from dataclasses import dataclass, field
from pathlib import Path

import torch

from devbench.engine.devices import as_device, synchronize
from devbench.engine.lanes import Lanes
from devbench.engine.measure import SEED, whole_env
from devbench.records.spec import GiB, KiB, MiB, gbps, size_label

#: Every factor of 4 from 4 KiB to 64 MiB, then 256 MiB and 1 GiB.
SIZES: list[int] = [4 * KiB * 4**i for i in range(8)] + [256 * MiB, GiB]

MEMORY = ["pageable", "pinned"]

#: Below this size a copy rotates over buffer sets that together hold CACHE_MULTIPLE x
#: the last-level cache (a GPU's L2, the CPU's L3), STREAM's rule for arrays: a copy
#: of 4-16 MiB would otherwise find its buffers in a 50 MB L2 and measure the cache.
#: From this size one buffer is far larger than any such cache.
ROTATE_BELOW = 256 * MiB
CACHE_MULTIPLE = 4
#: At most this many sets: the smallest copies, which are latency-bound, stay cheap to set up.
MAX_SETS = 1024

#: A transfer is skipped unless this multiple of its buffers is free (room for the
#: allocator, the check and the rest of the process).
HEADROOM = 1.25

_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)  # 2^64 / phi as a signed 64-bit integer


#: where Linux describes each CPU's caches (``cpuN/cache/indexM``)
CPU_CACHES = Path("/sys/devices/system/cpu")
#: bytes to take as the CPU's last-level cache instead of what ``CPU_CACHES`` lists (make test's asv dry run: a
#: 1 MiB copy's rotation over 4 x a large host's cache takes seconds to build and check)
CPU_CACHE_ENV = "DEVBENCH_CPU_CACHE"


def _size(text: str) -> int | None:
    scale = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)
    try:
        return int(text.rstrip("KMG")) * scale
    except ValueError:
        return None


def _cpu_caches(sysfs: Path) -> int:
    """The last-level cache of the CPUs this process may run on, all of it: each distinct cache of the highest
    level counted once (``shared_cpu_list``). A copy's threads run on many cores, so on a host of several dies or
    sockets (an EPYC's 32 MiB per die) the data a copy rotates over stays in their caches together; CPU 0's alone
    would leave a rotation that fits in them and a DRAM figure that reads cache bandwidth."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    caches: dict[tuple[int, str], int] = {}  # (level, the CPUs sharing it) -> bytes
    for cpu in cpus:
        for index in (sysfs / f"cpu{cpu}" / "cache").glob("index*"):
            try:
                size = _size((index / "size").read_text(encoding="ascii").strip())
                level = int((index / "level").read_text(encoding="ascii").strip())
                shared = (index / "shared_cpu_list").read_text(encoding="ascii").strip()
            except (OSError, ValueError):
                continue
            if size:
                caches[(level, shared or f"cpu{cpu}")] = size
    top = max((level for level, _ in caches), default=None)
    return sum(size for (level, _), size in caches.items() if level == top)


def cache_bytes(device: torch.device, sysfs: Path = CPU_CACHES) -> int:
    """The last-level cache in front of ``device``'s memory: a GPU's L2, the CPU's last level as ``sysfs`` lists it
    for the CPUs this process may use (``_cpu_caches``; 0 if unknown)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    if device.type != "cpu":
        return 0
    asked = whole_env(CPU_CACHE_ENV, "the cache's size in bytes")  # make test's quick asv run: a short rotation
    if asked is not None:
        return asked
    return _cpu_caches(sysfs)


def sets_for(nbytes: int, cache: int = 0) -> int:
    """Buffer sets a copy of ``nbytes`` rotates over so they hold ``CACHE_MULTIPLE x cache`` (see ``ROTATE_BELOW``)."""
    if nbytes >= ROTATE_BELOW:
        return 1
    return min(MAX_SETS, max(2, -(-CACHE_MULTIPLE * cache // nbytes)))


def pattern(nbytes: int, seed: int = SEED, out: torch.Tensor | None = None) -> torch.Tensor:
    """``nbytes`` bytes of seeded, non-repeating data as a flat uint8 tensor: on the CPU, or in ``out``.

    Every 8-byte word differs from every other (a Weyl sequence mixed with a random
    64 KiB block), so a copy that drops, repeats or shifts any part fails the check.
    Random bytes from ``torch.randint`` would take ~4 s per GiB; this takes a fraction.
    ``out``: a flat uint8 tensor of ``nbytes`` to write into, on any device (a host buffer filled in
    place: no second buffer of the size, whose fresh pages cost seconds per GiB on a VM; a GPU buffer
    filled by the GPU, not by the host and a copy). The seeded draws are the CPU generator's wherever
    ``out`` is, and the rest is integer arithmetic that wraps alike on every device, so the bytes are
    the same on each (``tests/test_transfer.py`` holds a GPU's to the host's).
    """
    if nbytes < 1:
        raise ValueError(f"nbytes must be >= 1, got {nbytes}")
    gen = torch.Generator().manual_seed(seed)
    words = nbytes // 8
    if out is None:
        out = torch.empty(nbytes, dtype=torch.uint8)
    elif out.dtype != torch.uint8 or out.dim() != 1 or out.numel() != nbytes or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous flat uint8 tensor of {nbytes} bytes")
    if words:
        w = out[: words * 8].view(torch.int64)
        start = int(torch.randint(0, 1 << 62, (1,), generator=gen))
        torch.arange(start, start + words, dtype=torch.int64, out=w)
        w.mul_(_GOLDEN)
        block = torch.randint(-(1 << 62), 1 << 62, (min(words, 8 * KiB),), dtype=torch.int64, generator=gen)
        block = block.to(out.device)
        full = words // block.numel() * block.numel()
        w[:full].view(-1, block.numel()).bitwise_xor_(block)
        w[full:].bitwise_xor_(block[: words - full])
    if nbytes % 8:
        out[words * 8 :] = torch.randint(1, 256, (nbytes % 8,), dtype=torch.uint8, generator=gen).to(out.device)
    return out


def host_available() -> int:
    """Bytes of host memory available to new allocations (MemAvailable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def device_available(device: torch.device) -> int:
    """Bytes free on ``device``: CUDA's free memory, or the host's."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return host_available()


def fit_reason(need: dict[torch.device, int]) -> str | None:
    """Why these allocations (bytes per device) would not fit, or ``None``."""
    for dev, nbytes in need.items():
        free = device_available(dev)
        if nbytes * HEADROOM > free:
            where = "host memory" if dev.type == "cpu" else str(dev)
            return f"needs {nbytes * HEADROOM / GiB:.1f} GiB on {where}, {free / GiB:.1f} GiB free"
    return None


def copies_fit_reason(copy_sets: int, nbytes: int, *devices: torch.device) -> str | None:
    """Why ``copy_sets`` buffers of ``nbytes`` on each of ``devices`` (a device named twice holds twice) would
    not fit, or ``None``."""
    need: dict[torch.device, int] = {}
    for d in devices:
        need[d] = need.get(d, 0) + copy_sets * nbytes
    reason = fit_reason(need)
    return f"{size_label(nbytes)}: {reason}" if reason else None


def pinned_reason() -> str | None:
    """Why pinned (page-locked) host memory cannot be had here, or ``None``."""
    if not torch.cuda.is_available():
        return "pinned host memory needs CUDA (it is registered with the driver); no CUDA here"
    return None


def host_buffer(nbytes: int, memory: str = "pageable") -> torch.Tensor:
    """An uninitialized flat uint8 host buffer, ``pageable`` or ``pinned``."""
    if memory not in MEMORY:
        raise ValueError(f"unknown host memory {memory!r}; expected one of {MEMORY}")
    if memory == "pinned":
        reason = pinned_reason()
        if reason:
            raise RuntimeError(reason)
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=memory == "pinned")


def _buffer(nbytes: int, device: torch.device, memory: str) -> torch.Tensor:
    if device.type == "cpu":
        return host_buffer(nbytes, memory)
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def words(t: torch.Tensor) -> torch.Tensor:
    """A flat byte buffer seen as 8-byte words where its length and start allow it, else as it is: the same bytes,
    compared or scanned a word at a time (on the VM's CPU ``torch.equal`` of two 64 MiB byte buffers took 76-113 ms,
    of their word views 18 ms; a host<->device copy's check compares every set's gigabyte or so on the host)."""
    flat = t.dtype == torch.uint8 and t.dim() == 1 and t.is_contiguous()
    return t.view(torch.int64) if flat and t.numel() % 8 == 0 and t.storage_offset() % 8 == 0 else t


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two byte buffers hold the same bytes: compared as words where both allow it (``words``)."""
    wa, wb = words(a), words(b)
    return torch.equal(wa, wb) if wa.dtype == wb.dtype else torch.equal(a, b)


def _back_buffer(like: torch.Tensor, sets: int) -> torch.Tensor:
    """Where a copy's check brings each destination back to compare it with its source: one buffer like the source,
    on its device; on the host pinned where the copy rotates over several sets (a device-to-host copy into fresh
    pageable memory, set after set, made an h2d copy's check take about a second at 64 MiB on the H200, about 19
    sets there, where its d2h twin's took a tenth of it)."""
    pinned = like.device.type == "cpu" and sets > 1 and pinned_reason() is None
    return torch.empty(like.shape, dtype=like.dtype, device=like.device, pin_memory=pinned)


@dataclass
class Copy:
    """``dst.copy_(src)`` of ``nbytes`` from ``src_device`` to ``dst_device``.

    ``memory`` is the kind of any host-side buffer. Source and destination buffers are
    allocated (pinned ones registered) and filled here, outside any timed region; the
    call alternates between ``sets`` buffer pairs. ``check()`` runs every pair once.
    """

    nbytes: int
    src_device: torch.device
    dst_device: torch.device
    memory: str = "pageable"
    non_blocking: bool = False
    sets: int = 0  # 0: sets_for the size and the larger cache of the two devices
    seed: int = SEED
    srcs: list[torch.Tensor] = field(init=False, repr=False)
    dsts: list[torch.Tensor] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.src_device, self.dst_device = as_device(self.src_device), as_device(self.dst_device)
        if self.nbytes < 1:
            raise ValueError(f"nbytes must be >= 1, got {self.nbytes}")
        if self.memory not in MEMORY:
            raise ValueError(f"unknown host memory {self.memory!r}; expected one of {MEMORY}")
        if self.sets == 0:
            self.sets = sets_for(self.nbytes, max(cache_bytes(self.src_device), cache_bytes(self.dst_device)))
        self.srcs, self.dsts = [], []
        for i in range(self.sets):
            src = _buffer(self.nbytes, self.src_device, self.memory)
            self.srcs.append(pattern(self.nbytes, self.seed + i, out=src))  # filled where it is, not copied there
            self.dsts.append(_buffer(self.nbytes, self.dst_device, self.memory))
        self._next = 0

    @property
    def devices(self) -> list[torch.device]:
        return [self.src_device] if self.src_device == self.dst_device else [self.src_device, self.dst_device]

    @property
    def host_waits(self) -> bool:
        """The host waits for this copy: a pageable or blocking host<->device copy (CUDA syncs
        the stream or the host for it), so it cannot be queued behind a held stream."""
        touches_host = "cpu" in {self.src_device.type, self.dst_device.type}
        return touches_host and (self.memory == "pageable" or not self.non_blocking)

    @property
    def returns_done(self) -> bool:
        """A call returns with its copy done: a blocking host<->device copy (``copy_`` synchronizes the stream
        inside), or one on the CPU; the host's clock over such calls back to back is what a user waits for each."""
        types = {self.src_device.type, self.dst_device.type}
        return types == {"cpu"} or ("cpu" in types and not self.non_blocking)

    @property
    def device(self) -> torch.device:
        """The device whose clock times it (``timing_device``): where ``prepare.ready`` warms it up."""
        return self.timing_device

    @property
    def timing_device(self) -> torch.device:
        """Where events bracket the copy: the device side (PyTorch runs a GPU -> GPU copy
        on the source GPU's current stream, synchronized with the destination's)."""
        return self.src_device if self.src_device.type != "cpu" else self.dst_device

    def __call__(self) -> torch.Tensor:
        i = self._next
        self._next = (i + 1) % self.sets
        return self.dsts[i].copy_(self.srcs[i], non_blocking=self.non_blocking)

    def check(self) -> None:
        """Copy every pair once and compare byte for byte, each destination brought back to its source's device
        first (over the opposite path, not the one checked); first clear the destinations. A host source's copy is
        first compared on its destination's device with the source's seeded pattern made there again
        (``pattern``: only its 64 KiB seeded block crosses to the device, and no broken copy turns a cleared
        destination into the whole pattern): the same bytes, or it is brought back and compared with its source as
        any other, so a source that is not the pattern is still checked (a host compare of an h2d copy's
        gigabyte or so took about a second a set-up on the H200, its d2h twin's, on the GPU, a tenth). A source
        that holds only zeros fails first: the seeded pattern never does, and a copy turned over buffers that a
        failed check of another copy left cleared would compare zeros with zeros (``turned``)."""
        for i, s in enumerate(self.srcs):
            if not bool(words(s).any()):
                raise AssertionError(
                    f"copy of {size_label(self.nbytes)} {self.src_device} -> {self.dst_device}, set {i}: its source "
                    "holds only zeros, not the seeded pattern (buffers a failed check left cleared): nothing to check"
                )
        for d in self.dsts:
            d.zero_()
        for _ in range(self.sets):
            self()
        synchronize(self.devices)
        back = None  # one buffer on the sources' device that every set's destination comes back into
        made = None  # one buffer on a host source's destination device where its pattern is made again
        for i, (s, d) in enumerate(zip(self.srcs, self.dsts, strict=True)):
            again = self._made_again(s, d)
            same = d.device == s.device and not again and same_bytes(d, s)
            if again:  # compared where it landed, with its pattern
                made = torch.empty_like(d) if made is None else made
                same = same_bytes(d, pattern(self.nbytes, self.seed + i, out=made))
            if (again or d.device != s.device) and not same:  # brought back over the opposite path, compared
                back = _back_buffer(s, self.sets) if back is None else back
                same = same_bytes(back.copy_(d), s)
            if not same:
                raise AssertionError(
                    f"copy of {size_label(self.nbytes)} {self.src_device} -> {self.dst_device} "
                    f"({self.memory}, non_blocking={self.non_blocking}), set {i}: destination differs from source"
                )

    @staticmethod
    def _made_again(src: torch.Tensor, dst: torch.Tensor) -> bool:
        """Whether a set's copy is first compared where it landed with its source's pattern made there (``check``):
        a host source's, on another device."""
        return dst.device != src.device and src.device.type == "cpu"

    def sync(self) -> None:
        synchronize(self.devices)

    def turned(self, reverse: bool, non_blocking: bool) -> Copy:
        """A copy over these buffers, none allocated: the other way round where ``reverse`` (its sources are this
        one's destinations, filled from this one's sources first, so that its check compares the pattern), with
        ``non_blocking`` as given. Check it before timing it, as any ``Copy``."""
        other = shallow(self)
        other.non_blocking, other._next = non_blocking, 0
        if reverse:
            other.src_device, other.dst_device = self.dst_device, self.src_device
            other.srcs, other.dsts = self.dsts, self.srcs
            for src, dst in zip(other.srcs, other.dsts, strict=True):
                src.copy_(dst)
            synchronize(other.devices)
        return other


def host_device_copy(
    direction: str, nbytes: int, device: torch.device, memory: str = "pageable", non_blocking: bool = False
) -> Copy:
    """A ``Copy`` for ``h2d`` (host -> ``device``) or ``d2h`` (``device`` -> host)."""
    host = torch.device("cpu")
    if direction == "h2d":
        return Copy(nbytes, host, device, memory, non_blocking)
    if direction == "d2h":
        return Copy(nbytes, device, host, memory, non_blocking)
    raise ValueError(f"unknown direction {direction!r}; expected 'h2d' or 'd2h'")


# --- Several things at once on one device: streams on a GPU, threads on the CPU -------------------------


@dataclass(frozen=True)
class Bidirectional:
    """GB/s with host->device and device->host copies running at once on two lanes."""

    total: float
    h2d: float
    d2h: float


def bidirectional(lanes: Lanes, h2d: Copy, d2h: Copy, calls: int) -> Bidirectional:
    """Run ``calls`` copies each way at once on two ``lanes``; total counts both directions' bytes."""
    if h2d.dst_device != d2h.src_device:
        raise ValueError(f"h2d goes to {h2d.dst_device} but d2h comes from {d2h.src_device}")
    if len(lanes) != 2:
        raise ValueError(f"a bidirectional copy runs on 2 lanes, got {len(lanes)}")
    t = lanes.run([h2d, d2h], calls)
    return Bidirectional(
        total=gbps((h2d.nbytes + d2h.nbytes) * calls, t.wall),
        h2d=gbps(h2d.nbytes * calls, t.lanes[0]),
        d2h=gbps(d2h.nbytes * calls, t.lanes[1]),
    )


@dataclass(frozen=True)
class Overlap:
    """A copy and a compute, alone, one after the other and at once (seconds)."""

    copy: float
    compute: float
    serial: float
    concurrent: float

    @property
    def ratio(self) -> float:
        """Serial over concurrent time: 1 = no overlap, (a+b)/max(a,b) = perfect (2 if equal)."""
        return self.serial / self.concurrent

    @property
    def hidden(self) -> float:
        """Share of the shorter task hidden behind the longer one, in [0, 1] up to noise."""
        return (self.serial - self.concurrent) / min(self.copy, self.compute)


def overlap(lanes: Lanes, copy: Callable[[], object], compute: Callable[[], object], calls: int = 1) -> Overlap:
    """Time ``calls`` of ``copy`` and of ``compute``: alone, in sequence, and at once on two ``lanes``."""
    if len(lanes) != 2:
        raise ValueError(f"copy/compute overlap runs on 2 lanes, got {len(lanes)}")
    alone_copy = lanes.sequential([copy], calls)
    alone_compute = lanes.sequential([compute], calls)
    serial = lanes.sequential([copy, compute], calls)
    concurrent = lanes.run([copy, compute], calls).wall
    return Overlap(alone_copy, alone_compute, serial, concurrent)


class RepeatedWork:
    """``reps`` calls of ``fn`` as one call: sizes compute to last as long as a copy."""

    def __init__(self, fn: Callable[[], object], reps: int = 1) -> None:
        if reps < 1:
            raise ValueError(f"reps must be >= 1, got {reps}")
        self.fn, self.reps = fn, reps

    def __call__(self) -> None:
        for _ in range(self.reps):
            self.fn()
