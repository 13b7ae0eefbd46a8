"""Copies: host<->device, on one device, GPU<->GPU, many small vs one big, overlap, hidden copies.

Bandwidth is decimal GB/s, measured as nvbandwidth does: a median over blocks of many
copies, each block between two CUDA events (a monotonic clock on the CPU). Every copy is
checked byte for byte once in ``setup``; buffers are allocated, filled and (pinned ones)
registered in ``setup`` too. On a machine without CUDA, ``DeviceCopy`` on ``cpu`` (a
STREAM-like host memory copy of the same sizes) is the line GPU copies are held against.
"""

import math
from pathlib import Path

import torch

from devbench.engine.copyblocks import block_gbps, clocked
from devbench.engine.devices import move, num_gpus, synchronize
from devbench.engine.lanes import Lanes
from devbench.engine.measure import (
    COPY_BLOCK_S,
    calls_for,
    median_block,
    randn,
    warm_up,
)
from devbench.engine.suite import (
    DEVICES,
    Benchmark,
    once,
    ready,
    require_device,
    require_gpus,
    shared,
    waited,
    with_samples,
)
from devbench.records.spec import GiB, MiB
from devbench.workloads.matmul import Matmul, tf32
from devbench.workloads.peers import PEERS_DIR, PeerPath, pair_topology, peer_matrix, peer_path, write_peer_records
from devbench.workloads.smallcopies import HIDDEN, SMALL_KINDS, ManySmall, check_hidden_copy, hidden_copy
from devbench.workloads.transfer import (
    MEMORY,
    SIZES,
    Copy,
    RepeatedWork,
    bidirectional,
    cache_bytes,
    copies_fit_reason,
    host_device_copy,
    overlap,
    pinned_reason,
    sets_for,
)

#: A bandwidth block lasts at least this long (one copy when a single copy is longer;
#: shared with `devbench validate`).
BLOCK_S = COPY_BLOCK_S


def _block_gbps(copy: Copy, scale: float = 1.0) -> tuple[list[float], int]:
    """GB/s of bytes copied (times ``scale``) in every block of back-to-back copies (``copyblocks.block_gbps``)."""
    return block_gbps(copy, BLOCK_S, scale)


def _waited(copy: Copy) -> dict:
    """Seconds per copy with the host waiting for each (launch, copy, sync), in blocks as the GB/s figure's."""
    return waited(copy, copy.sync, BLOCK_S, copy.timing_device)


def _clocked(bench: Benchmark, figure: str) -> dict:
    """``bench.copy``'s "time" or "gbps" from one set of blocks (``copyblocks.clocked``)."""
    return clocked(bench, figure, BLOCK_S)


def _require_fit(copy_sets: int, nbytes: int, *devices: torch.device) -> None:
    """Skip where ``copy_sets`` buffers of ``nbytes`` on each device, and the one a copy between two devices brings
    each destination back into for its check (``transfer._back_buffer``), would not fit."""
    reason = copies_fit_reason(copy_sets + (len(set(devices)) > 1), nbytes, *devices)
    if reason:
        raise NotImplementedError(reason)


class HostDevice(Benchmark):
    """Host -> GPU (``h2d``) and GPU -> host (``d2h``) copies of 4 KiB to 1 GiB.

    ``memory``: the host buffer is ``pageable`` (ordinary) or ``pinned`` (page-locked, the
    GPU's copy engine reads it directly). ``mode``: ``blocking`` or ``non_blocking=True``
    (asynchronous only from pinned memory). ``track_gbps`` counts bytes copied over
    back-to-back copies; ``track_time`` is seconds per copy waited for, on the host's clock.
    Both are timed by the run's measuring process from one built copy (``swept``); a blocking copy
    returns with the copy done, so both figures read one set of its blocks on two clocks.
    """

    params = [["h2d", "d2h"], MEMORY, ["blocking", "non_blocking"], SIZES]
    param_names = ["direction", "memory", "mode", "nbytes"]
    #: devbench gpu-run (devbench.gpu.plan): every mode at 64 MiB and pinned at 256 MiB first (validate and the
    #: health lines read the pinned non_blocking 256 MiB copies: spec.LINK_COPY)
    headline = [{"nbytes": [64 * MiB]}, {"memory": ["pinned"], "nbytes": [256 * MiB]}]
    plan_gpus = 1
    swept = True
    #: both directions and modes of one memory and size copy between the same buffers: the measuring process
    #: builds them once and times those four points together (``devbench.engine.sweep``)
    built_by = ["memory", "nbytes"]
    #: 2: time_copy (asv's clock, a process of its own) became track_time, timed beside track_gbps; 3: the
    #: directions and modes of a memory and size share their buffers; 4: a blocking copy's two figures read
    #: one set of blocks (no device sync of its own after each call); 5: the host buffers rotate over 4 x every
    #: last-level cache the process may use (``transfer.cache_bytes``), not CPU 0's alone
    work_version = 5

    def setup(self, direction, memory, mode, nbytes):
        dev = require_device("cuda")
        if memory == "pinned" and pinned_reason():
            raise NotImplementedError(pinned_reason())
        buffers = once(("HostDevice", memory, nbytes), lambda: _host_device_buffers(memory, nbytes, dev))
        key = ("HostDevice", direction, memory, mode, nbytes)
        self.copy = ready(key, lambda: buffers.turned(direction == "d2h", mode == "non_blocking"))

    def track_time(self, direction, memory, mode, nbytes):
        return _clocked(self, "time") if self.copy.returns_done else _waited(self.copy)

    track_time.unit = "seconds"

    def track_gbps(self, direction, memory, mode, nbytes):
        return _clocked(self, "gbps") if self.copy.returns_done else with_samples(*_block_gbps(self.copy))

    track_gbps.unit = "GB/s"


def _host_device_buffers(memory: str, nbytes: int, dev: torch.device):
    """The buffers of a memory and size (a host -> ``dev`` copy), where they fit: the points that share them
    allocate nothing (``Copy.turned``) and so ask for no room of their own."""
    host = torch.device("cpu")
    _require_fit(sets_for(nbytes, max(cache_bytes(host), cache_bytes(dev))), nbytes, host, dev)
    return host_device_copy("h2d", nbytes, dev, memory)


class HostDeviceBidirectional(Benchmark):
    """Host -> GPU and GPU -> host at once, on two streams, from and to pinned memory.

    ``total`` counts the bytes of both directions over the whole span; ``h2d`` and ``d2h``
    each count one direction's bytes over its own stream's span.
    """

    params = [[4 * MiB, 64 * MiB, 256 * MiB]]
    param_names = ["nbytes"]
    plan_gpus = 1
    rounds = 1
    swept = True
    #: 2: the three figures read one set of runs (they were three), measured by the run's measuring process; 3:
    #: the host buffers rotate over 4 x every last-level cache the process may use, not CPU 0's alone
    work_version = 3

    def setup(self, nbytes):
        dev = require_device("cuda")
        if pinned_reason():
            raise NotImplementedError(pinned_reason())
        host = torch.device("cpu")
        _require_fit(2 * sets_for(nbytes, max(cache_bytes(host), cache_bytes(dev))), nbytes, host, dev)
        self.h2d = host_device_copy("h2d", nbytes, dev, "pinned", non_blocking=True)
        self.d2h = host_device_copy("d2h", nbytes, dev, "pinned", non_blocking=True)
        for c in (self.h2d, self.d2h):
            c.check()
            warm_up(c, dev)
        self.lanes = Lanes([dev, dev])  # two streams, made once
        bidirectional(self.lanes, self.h2d, self.d2h, 1)  # streams and events warm
        self.calls = calls_for(self.h2d, dev, target_s=BLOCK_S, min_calls=1)

    def _samples(self, field):
        runs = shared(self, field, lambda: [bidirectional(self.lanes, self.h2d, self.d2h, self.calls)
                                             for _ in range(5)])  # fmt: skip
        return with_samples((getattr(r, field) for r in runs), self.calls)

    def track_total_gbps(self, nbytes):
        return self._samples("total")

    def track_h2d_gbps(self, nbytes):
        return self._samples("h2d")

    def track_d2h_gbps(self, nbytes):
        return self._samples("d2h")

    track_total_gbps.unit = track_h2d_gbps.unit = track_d2h_gbps.unit = "GB/s"


class DeviceCopy(Benchmark):
    """A copy within one device's memory: ``copy_`` on a GPU, a STREAM-like copy on the CPU.

    ``gbps_copied`` counts bytes copied (comparable with host<->device figures);
    ``gbps_read_write`` counts bytes read plus bytes written (2x), STREAM's and the
    memory datasheet's convention. The CPU line is the host memory a pageable copy
    must pass through.
    """

    params = [DEVICES, SIZES]
    param_names = ["device", "nbytes"]
    headline = [{"device": ["cuda"], "nbytes": [64 * MiB, GiB]}, {"device": ["cpu"], "nbytes": [64 * MiB]}]
    swept = True
    #: 2: time_copy became track_time; read+write GB/s are the copied figure's blocks counted twice; 3: a CPU copy
    #: rotates over 4 x every last-level cache the process may use (a host of several dies), not CPU 0's alone
    work_version = 3

    def setup(self, device, nbytes):
        self.device = require_device(device)
        _require_fit(2 * sets_for(nbytes, cache_bytes(self.device)), nbytes, self.device)
        key = ("DeviceCopy", device, nbytes)
        self.copy = ready(key, lambda: Copy(nbytes, self.device, self.device))

    def track_time(self, device, nbytes):
        return _waited(self.copy)

    track_time.unit = "seconds"

    def track_gbps_copied(self, device, nbytes):
        return with_samples(*shared(self, "copied", lambda: _block_gbps(self.copy)))

    def track_gbps_read_write(self, device, nbytes):
        values, calls = shared(self, "read_write", lambda: _block_gbps(self.copy))
        return with_samples([2.0 * v for v in values], calls)

    track_gbps_copied.unit = track_gbps_read_write.unit = "GB/s"


def _say(line: str) -> None:
    print(f"PeerMatrix {line}", flush=True)


def _warm_gbps(copy: Copy) -> list[float]:
    """GB/s per block of a copy ``peer_matrix`` has checked: warmed, then timed."""
    warm_up(copy, copy.timing_device)
    return _block_gbps(copy)[0]


class PeerCopy(Benchmark):
    """GPU 0 -> GPU 1 and back over sizes (NVLink or PCIe, peer-to-peer when the driver allows it).

    ``track_peer_access`` records whether the source GPU can address the other's memory
    directly (1) or the copy is staged through the host (0); ``track_nvlink_share`` the share
    of the copied bytes that the source GPU's NVLink counters sent (NaN where NVML has no
    counters): the path the copies took. Every other pair: ``PeerMatrix``.
    """

    params = [["0->1", "1->0"], SIZES]
    param_names = ["route", "nbytes"]
    headline = [{"nbytes": [256 * MiB]}]
    plan_gpus = 2
    swept = True
    #: 2: the NVLink share is traced for at least a quarter of a second and read once NVML's counters settle;
    #: 3: time_copy became track_time, its four figures timed by the run's measuring process from one copy
    work_version = 3

    def setup(self, route, nbytes):
        gpus = require_gpus(2)
        src, dst = (gpus[0], gpus[1]) if route == "0->1" else (gpus[1], gpus[0])
        _require_fit(sets_for(nbytes, max(cache_bytes(src), cache_bytes(dst))), nbytes, src, dst)
        key = ("PeerCopy", route, nbytes)
        # built, checked byte for byte and warmed once per process (asv runs setup before every sample)
        self.copy = ready(key, lambda: Copy(nbytes, src, dst))
        synchronize([src, dst])

    def _path(self, route, nbytes) -> PeerPath:
        """The path the copies take: traced (a quarter to one and a quarter seconds of NVLink counters) once per
        process, and only by the two figures that report it."""
        return once(("PeerCopy.path", route, nbytes), lambda: peer_path(self.copy))

    def track_time(self, route, nbytes):
        return _waited(self.copy)

    track_time.unit = "seconds"

    def track_gbps(self, route, nbytes):
        return with_samples(*_block_gbps(self.copy))

    def track_peer_access(self, route, nbytes):
        return float(self._path(route, nbytes).peer_access)

    def track_nvlink_share(self, route, nbytes):
        share = self._path(route, nbytes).nvlink_share
        return math.nan if share is None else share

    track_gbps.unit = "GB/s"
    track_peer_access.unit = "bool"
    track_nvlink_share.unit = "fraction"


#: PeerMatrix's copy size: large enough that every pair runs at its link's rate (nvbandwidth's default is 512 MiB)
MATRIX_SIZES = [256 * MiB]


class PeerMatrix(Benchmark):
    """Both directions of every pair of GPUs at 256 MiB, each copy checked, timed and traced.

    nvbandwidth prints this as a matrix; a slow link on an 8-GPU box shows as one slow cell.
    ``setup_cache`` measures every pair once per run (4-16 MiB blocks would sit in L2, so
    256 MiB) and appends each pair's GB/s and path to ``.asv/peers/<machine>.jsonl`` for the
    report's matrix; the figures here are the slowest pair and the median pair, each with
    its blocks as samples. Skips below two GPUs.
    """

    params = [MATRIX_SIZES]
    param_names = ["nbytes"]
    plan_gpus = 2
    timeout = 1200.0
    figures_in_setup_cache = True  # devbench compare: one pair of figures per pair of processes

    def setup_cache(self):
        try:
            require_gpus(2)
        except NotImplementedError as exc:
            return {"skip": str(exc)}
        gpus = [torch.device("cuda", i) for i in range(num_gpus())]
        paths = pair_topology()
        out = {}
        for nbytes in MATRIX_SIZES:
            rows = peer_matrix(gpus, nbytes, _warm_gbps, peer_path, progress=_say)
            for r in rows:  # the path NVML says each pair has: what the report judges it against
                p = paths.get((r["src"], r["dst"]))
                if p is not None:
                    r.update(p.record())
            write_peer_records(rows, Path(__file__).resolve().parents[1] / PEERS_DIR)
            out[nbytes] = rows
        return out

    def setup(self, matrix, nbytes):
        if "skip" in matrix:
            raise NotImplementedError(matrix["skip"])
        self.rows = sorted(matrix[nbytes], key=lambda r: r["gbps"])

    def track_slowest_gbps(self, matrix, nbytes):
        return with_samples(self.rows[0]["blocks"])

    def track_median_gbps(self, matrix, nbytes):
        return with_samples(self.rows[(len(self.rows) - 1) // 2]["blocks"])

    track_slowest_gbps.unit = track_median_gbps.unit = "GB/s"


class ManySmallCopies(Benchmark):
    """4 MiB as 1,024 copies of 4 KiB vs one copy, and 256 small tensors one by one vs packed.

    On ``cuda`` the host side is pinned and copies are ``non_blocking`` (the best case for
    small copies); on ``cpu`` they are host copies, where the per-call cost still shows.
    """

    params = [DEVICES, list(SMALL_KINDS)]
    param_names = ["device", "kind"]
    swept = True
    #: 2: a CPU "device" copies each tensor (``copy=True``); before, ``.to`` returned it as it was;
    #: 3: time_batch became track_time, timed by the run's measuring process
    work_version = 3

    def setup(self, device, kind):
        self.device = require_device(device)
        memory = "pinned" if self.device.type == "cuda" else "pageable"
        self.batch = ManySmall(kind, self.device, memory)
        self.batch.check()
        warm_up(self.batch, self.device)

    def track_time(self, device, kind):
        return waited(self.batch, lambda: synchronize(self.device), self.sample_time, self.device)

    track_time.unit = "seconds"


class SameDeviceMove(Benchmark):
    """Moving a tensor to the device it is on: ``.to(device)``, or ``.cuda(i)`` / ``.cpu()``.

    A no-op that must return the very same object (checked in ``setup``); what is timed
    is the Python and dispatcher cost of finding that out.
    """

    params = [DEVICES, ["to", "shorthand"]]
    param_names = ["device", "method"]
    samples_gpu_state = False  # microseconds a call: no sampling thread beside it
    #: a sample (and a block of devbench compare) of 0.2 s of calls, as TryGpu's
    sample_time = 0.2
    swept = True
    #: 2: no device synchronisation after the move: a no-op queues no GPU work, and only the cuda line paid it;
    #: 3: samples of 0.2 s, not 0.05; 4: time_move became track_time, timed by the run's measuring process
    work_version = 4
    #: the dispatcher's microseconds on a shared host: up to 1 s of blocks for 0.5%
    sample_cap = (1.0, 11)

    def setup(self, device, method):
        self.device = require_device(device)
        self.x = randn(1000, device=self.device)
        if method == "to":
            self.move = lambda: move(self.x, self.device)
        elif self.device.type == "cuda":
            self.move = lambda: self.x.cuda(self.device.index)
        else:
            self.move = self.x.cpu
        if self.move() is not self.x:
            raise AssertionError(f"same-device {method} on {self.device} returned a new tensor")
        warm_up(self.move, self.device)

    def track_time(self, device, method):
        return waited(self.move, None, self.sample_time, self.device)

    track_time.unit = "seconds"


class CopyComputeOverlap(Benchmark):
    """A pinned 64 MiB host -> GPU copy on one stream while matmuls run on another.

    The matmuls are sized to last about as long as the copy, so perfect overlap halves
    the time: ``overlap`` is serial over concurrent time (1 = none, 2 = perfect) and
    ``hidden`` the percentage of the shorter task hidden behind the longer one.
    """

    params = [DEVICES]
    param_names = ["device"]
    skips = [{"where": {"device": ["cpu"]},
              "reason": "a CPU has no copy engine: a host copy and a matmul share the same cores"}]  # fmt: skip
    rounds = 1
    swept = True
    #: 2: both figures read one set of runs (they were two), measured by the run's measuring process
    work_version = 2
    nbytes = 64 * MiB
    calls = 8

    def setup(self, device):
        self.device = require_device(device)
        self.copy = host_device_copy("h2d", self.nbytes, self.device, "pinned", non_blocking=True)
        self.copy.check()
        mm = Matmul(2048, "float32", self.device)
        mm.check()
        warm_up(self.copy, self.device)
        with tf32(False):  # float32 as its check's, whatever TF32 this process was left at
            warm_up(mm, self.device)
            per_copy = median_block(self.copy, self.device, 4)
            per_mm = median_block(mm, self.device, 4)
            self.compute = RepeatedWork(mm, max(1, round(per_copy / per_mm)))
            self.lanes = Lanes([self.device, self.device])  # two streams, made once
            overlap(self.lanes, self.copy, self.compute)  # streams, events and cuBLAS on the lane streams warm

    def _samples(self, field, scale=1.0):
        def runs_float32():
            with tf32(False):
                return [overlap(self.lanes, self.copy, self.compute, self.calls) for _ in range(5)]

        runs = shared(self, field, runs_float32)
        return with_samples((scale * getattr(r, field) for r in runs), self.calls)

    def track_overlap(self, device):
        return self._samples("ratio")

    def track_hidden(self, device):
        return self._samples("hidden", scale=100.0)

    track_overlap.unit = "x"
    track_hidden.unit = "%"


class HiddenCopy(Benchmark):
    """Reading a 1,000-element tensor from Python: each read of a GPU tensor is a copy and a sync.

    ``item`` is one element's ``.item()``; ``tolist``, ``numpy`` (``.cpu().numpy()``) and
    ``print`` read the whole tensor. On ``cpu`` they cost no transfer: the baseline.
    """

    params = [DEVICES, list(HIDDEN)]
    param_names = ["device", "read"]
    samples_gpu_state = False  # microseconds a call: no sampling thread beside it
    swept = True
    #: 2: no device synchronisation after the read: each read has already waited for the copy it made;
    #: 3: time_read became track_time, timed by the run's measuring process
    work_version = 3
    #: a copy and a sync per read, on a shared host: up to 1 s of blocks for 0.5%
    sample_cap = (1.0, 11)

    def setup(self, device, read):
        self.device = require_device(device)
        x = randn(1000, device=self.device)
        check_hidden_copy(read, x)
        self.read = hidden_copy(read, x)
        warm_up(self.read, self.device)

    def track_time(self, device, read):
        return waited(self.read, None, self.sample_time, self.device)

    track_time.unit = "seconds"
