"""Peer copies' paths: which pairs a process measures, how a copy between two GPUs travels (traced by the
bytes NVLink counts while it runs), and the peer records a PeerMatrix sweep writes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from devbench.engine.devices import cuda_identities
from devbench.records import gpustate, nvlink
from devbench.records.expected import path_label
from devbench.records.spec import MiB, size_label
from devbench.workloads.transfer import Copy


def peer_pairs(count: int) -> list[tuple[int, int]]:
    """Every ordered pair ``(src, dst)`` of ``count`` devices: both directions of every pair."""
    return [(i, j) for i in range(count) for j in range(count) if i != j]


#: where ``PeerMatrix`` appends every pair's figure and path (beside asv's results; the report reads it)
PEERS_DIR = Path(".asv") / "peers"

#: the bytes copied while the NVLink counters are read (the counters step in KiB and run on their own clock)
TRACE_BYTES = 64 * MiB

#: and at most this many copies for it (4 KiB copies: 16 MiB)
TRACE_MAX_CALLS = 4096

#: and for at least this long: NVML updates the counters on its own interval, so a sub-millisecond copy of
#: 256 MiB over NVLink could read as no traffic at all
TRACE_MIN_S = 0.25

#: after the copies, the counters are read every TRACE_POLL_S until two reads agree, for at most TRACE_SETTLE_S
TRACE_POLL_S = 0.02
TRACE_SETTLE_S = 1.0


@dataclass(frozen=True)
class PeerPath:
    """How a GPU -> GPU copy travelled.

    ``peer_access``: the source may address the destination's memory (CUDA peer-to-peer);
    without it the driver stages the copy through host memory. ``nvlink``: NVML reports an
    NVLink peer-to-peer path between the two (None: NVML did not say). ``nvlink_share``:
    bytes the source GPU's NVLink counters sent while checked copies ran, over the bytes
    copied (None: no counters), which tells what the copies used, not what they could.
    """

    peer_access: bool
    nvlink: bool | None = None
    nvlink_share: float | None = None

    @property
    def label(self) -> str:
        return path_label(self.peer_access, self.nvlink, self.nvlink_share)


def trace_path(copy: Copy, peer_access: bool, nvlink: bool | None, sent: Callable[[], int | None]) -> PeerPath:
    """Run ``copy`` for at least ``TRACE_BYTES`` and ``TRACE_MIN_S`` with ``sent()`` (bytes the source GPU has
    sent over NVLink so far, None when unknown) read before, and after once its counters have settled: the
    path the copies took."""
    most = TRACE_MAX_CALLS
    copy.sync()
    before = sent()
    start, calls = time.monotonic(), 0
    while calls < most and (calls * copy.nbytes < TRACE_BYTES or time.monotonic() - start < TRACE_MIN_S):
        copy()
        calls += 1
        if calls % 64 == 0:
            copy.sync()  # keep the queue short, so the clock sees the copies, not their launches
    copy.sync()
    after = _settled(sent) if before is not None else None
    share = None if before is None or after is None else max(0.0, (after - before) / (calls * copy.nbytes))
    return PeerPath(peer_access, nvlink, share)


def _settled(sent: Callable[[], int | None]) -> int | None:
    """``sent()`` once two reads ``TRACE_POLL_S`` apart agree (or ``TRACE_SETTLE_S`` has passed)."""
    last = sent()
    deadline = time.monotonic() + TRACE_SETTLE_S
    while last is not None and time.monotonic() < deadline:
        time.sleep(TRACE_POLL_S)
        now = sent()
        if now == last:
            break
        last = now
    return last


def peer_matrix(
    devices: list[torch.device],
    nbytes: int,
    time_copy: Callable[[Copy], list[float]],
    path_of: Callable[[Copy], PeerPath],
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Both directions of every pair of ``devices``: each copy checked byte for byte, timed and traced.

    ``time_copy(copy)`` returns the copy's GB/s per block; ``path_of(copy)`` its ``PeerPath``.
    One pair's buffers at a time (freed before the next). Rows: ``src``, ``dst``, ``nbytes``,
    ``gbps`` (the median block), ``blocks``, and the path's fields and ``path`` label.
    """
    import statistics

    rows = []
    for i, j in peer_pairs(len(devices)):
        copy = Copy(nbytes, devices[i], devices[j])
        copy.check()
        samples = time_copy(copy)
        path = path_of(copy)
        rows.append({
            "src": i, "dst": j, "nbytes": nbytes, "gbps": statistics.median(samples), "blocks": samples,
            "peer_access": path.peer_access, "nvlink": path.nvlink, "nvlink_share": path.nvlink_share,
            "path": path.label,
        })  # fmt: skip
        if progress is not None:
            progress(f"{size_label(nbytes)} {i}->{j}: {rows[-1]['gbps']:.1f} GB/s ({path.label})")
        del copy
    return rows


def write_peer_records(rows: list[dict], folder: Path, machine: str | None = None) -> Path:
    """Append one JSON line per pair of a ``peer_matrix`` to ``folder/<machine>.jsonl``, with each GPU's PCI bus id."""
    import time

    from devbench.engine.devices import cuda_identities
    from devbench.records.files import append_jsonl, default_machine

    machine = machine or default_machine()
    ids = [c.get("pci_bus_id") or c.get("uuid") for c in cuda_identities()] if torch.cuda.is_available() else []
    now = time.time()

    def ident(i: int) -> str | None:
        return ids[i] if i < len(ids) else None

    records = [{"time": now, "machine": machine, **{k: v for k, v in r.items() if k != "blocks"},
                "blocks": len(r["blocks"]), "src_id": ident(r["src"]), "dst_id": ident(r["dst"]),
                "torch": torch.__version__} for r in rows]  # fmt: skip
    return append_jsonl(folder, machine, records)


def peer_path(copy: Copy) -> PeerPath:
    """The path a checked GPU -> GPU copy takes: peer access (CUDA), NVLink (NVML topology and counters)."""
    src, dst = copy.src_device.index, copy.dst_device.index
    peer = torch.cuda.can_device_access_peer(src, dst)
    ids = cuda_identities()  # NVML matches CUDA's devices by UUID, never by index
    return trace_path(copy, peer, nvlink.nvlink_joined(src, dst, None, ids), nvlink.nvlink_reader(src, None, ids))


def pair_topology() -> dict:
    """(i, j) -> each pair of this process's CUDA devices' NVML path (``devbench.records.topology``);
    {} without NVML."""
    from devbench.records.topology import pair_paths

    nv = gpustate._nvml()
    if nv is None:
        return {}
    handles = nvlink.cuda_handles(nv, cuda_identities())
    if not handles or any(h is None for h in handles):
        return {}
    try:
        return pair_paths(nv, handles)
    except Exception:  # noqa: BLE001 - a driver without the topology calls: the matrix stands without them
        return {}
