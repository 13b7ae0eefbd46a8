"""How each pair of GPUs is joined, read from NVML: NVLink and its active links, a PCIe switch, the host bridge,
across sockets. No torch import: ``devbench info``, the peer matrix's health and the report use it.

NVML's calls, through a ``pynvml``-shaped object (``nvidia-ml-py``; the tests pass a fake with the same names,
return shapes and enum values):

* ``nvmlDeviceGetTopologyCommonAncestor(a, b)``: the nearest common ancestor of two GPUs on the PCIe tree
  (``NVML_TOPOLOGY_INTERNAL`` one board, ``_SINGLE`` one PCIe switch, ``_MULTIPLE`` several switches,
  ``_HOSTBRIDGE`` the CPU's host bridge, ``_NODE`` one NUMA node, ``_SYSTEM`` across sockets);
* ``nvmlDeviceGetNvLinkState(h, link)`` for each of ``NVML_NVLINK_MAX_LINKS`` links: active or not;
* ``nvmlDeviceGetNvLinkRemoteDeviceType(h, link)``: a GPU or an NVSwitch at the other end, and
  ``nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId``: which GPU, where the other end is one. Where the driver
  does not give the type, links to no GPU of this process's count as an NVSwitch's for a pair NVML reports
  NVLink peer-to-peer between (``nvmlDeviceGetP2PStatus``).

A pair joined by NVLink directly has as many links as point from one to the other; through NVSwitches every
GPU reaches every other over all of its links to the switches, so the pair has the fewer of the two GPUs'.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from devbench.records.nvlink import nvlink_between

#: NVML's enum values (nvml.h): the common ancestor of two GPUs, and the device at an NVLink's other end
TOPOLOGY = {0: "board", 10: "PCIe switch", 20: "PCIe switches", 30: "host bridge", 40: "NUMA node",
            50: "across sockets"}  # fmt: skip
NVLINK_DEVICE_SWITCH = 2
NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS, where the module lacks it


@dataclass(frozen=True)
class PairPath:
    """How GPU ``src`` reaches GPU ``dst``: ``nvlinks`` active NVLinks between them (0: none), ``switched``
    whether they go through NVSwitches, ``pcie`` the nearest common ancestor on the PCIe tree, and ``gpu_links``
    the fewer of the two GPUs' active NVLinks to anything (a link down shows there, whatever the pair has: a GPU
    of a cube mesh or a 4-way bridge joins each peer by a few of its links; None: not read)."""

    src: int
    dst: int
    nvlinks: int
    switched: bool
    pcie: str | None
    gpu_links: int | None = None

    @property
    def label(self) -> str:
        if self.nvlinks:
            return f"NVLink x{self.nvlinks}" + (" via NVSwitch" if self.switched else "")
        return self.pcie or "unknown"

    def record(self) -> dict[str, Any]:
        """The fields a record keeps (``devbench info``'s ``pair_paths``, the peer matrix's lines)."""
        return {"nvlinks": self.nvlinks, "switched": self.switched, "pcie": self.pcie, "gpu_links": self.gpu_links}

    @classmethod
    def from_record(cls, src: int, dst: int, rec: dict[str, Any]) -> PairPath:
        """The path a ``record`` kept (a record written before ``gpu_links`` was: None)."""
        def known(v: Any) -> bool:  # a table's empty cell is NaN, which is not equal to itself
            return v is not None and v == v

        links, pcie, switched = rec.get("gpu_links"), rec.get("pcie"), rec.get("switched")
        return cls(int(src), int(dst), int(rec.get("nvlinks") or 0) if known(rec.get("nvlinks")) else 0,
                   bool(switched) if known(switched) else False, pcie if isinstance(pcie, str) else None,
                   int(links) if known(links) else None)  # fmt: skip


def _read(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a field this GPU or driver does not report
        return None


def _bus(info: Any) -> str | None:
    bus = getattr(info, "busId", None)
    if isinstance(bus, bytes):
        bus = bus.decode()
    return str(bus).upper().lstrip("0") if bus else None


def links(nv: Any, handle: Any) -> list[tuple[str | None, bool | None]]:
    """Every active NVLink of ``handle``: (the PCI bus id of the device at its other end, or None, whether that end
    is an NVSwitch: None where the driver does not say)."""
    out = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS)):
        if _read(getattr(nv, "nvmlDeviceGetNvLinkState", None), handle, link) != 1:  # NVML_FEATURE_ENABLED
            continue
        kind = _read(getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None), handle, link)
        remote = _read(getattr(nv, "nvmlDeviceGetNvLinkRemotePciInfo", None), handle, link)
        out.append((_bus(remote), None if kind is None else kind == NVLINK_DEVICE_SWITCH))
    return out


def pair_paths(nv: Any, handles: Sequence[Any]) -> dict[tuple[int, int], PairPath]:
    """(i, j) -> how GPU i reaches GPU j, for every ordered pair of ``handles`` (NVML's, in CUDA's order)."""
    buses = [_bus(_read(getattr(nv, "nvmlDeviceGetPciInfo", None), h)) for h in handles]
    gpus = {b for b in buses if b is not None}
    own = [links(nv, h) for h in handles]
    out = {}
    for i, a in enumerate(handles):
        for j, b in enumerate(handles):
            if i == j:
                continue
            direct = sum(1 for bus, switch in own[i] if switch is not True and bus is not None and bus == buses[j])
            to_switch = (sum(1 for _, s in own[i] if s), sum(1 for _, s in own[j] if s))
            switched = direct == 0 and min(to_switch) > 0
            count = min(to_switch) if switched else 0
            # a driver that does not say what is at a link's end (no NVLink remote device type): links to no GPU
            # of this process's are an NVSwitch's where NVML reports NVLink peer-to-peer between the two
            unsaid = (sum(1 for bus, s in own[i] if s is None and bus not in gpus),
                      sum(1 for bus, s in own[j] if s is None and bus not in gpus))  # fmt: skip
            if direct == 0 and not switched and min(unsaid) > 0 and nvlink_between(nv, a, b):
                switched, count = True, min(unsaid)
            level = _read(getattr(nv, "nvmlDeviceGetTopologyCommonAncestor", None), a, b)
            out[(i, j)] = PairPath(i, j, direct or count, switched,
                                   TOPOLOGY.get(level) if isinstance(level, int) else None,
                                   min(len(own[i]), len(own[j])))  # fmt: skip
    return out


def ring_paths(paths: dict[tuple[int, int], PairPath], world: int) -> list[PairPath]:
    """The pairs an NCCL ring of ``world`` ranks (rank r to r + 1) sends over, in rank order."""
    return [paths[(r, (r + 1) % world)] for r in range(world) if (r, (r + 1) % world) in paths]


def slowest(pairs: Iterable[PairPath | None]) -> PairPath | None:
    """The slowest of some pairs (a ring's: it runs as fast as its slowest pair): the fewest NVLinks, and a pair
    across sockets before one under a PCIe switch; None where no pair's path was read."""
    found = [p for p in pairs if p is not None]
    return min(found, key=lambda p: (p.nvlinks, p.pcie != "across sockets")) if found else None
