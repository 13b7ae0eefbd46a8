"""A fake of the ``pynvml`` calls devbench reads (their real names, return shapes and enum values), holding a
whole node: which GPU sits where on the PCIe tree, which NVLinks are up and what is at their other end.

``node(...)`` builds one; ``NODES`` holds the topologies the tests judge: eight H100 SXM on NVSwitches, eight
PCIe GPUs on two sockets behind two switches, two H100 NVL joined by a bridge (and two without), and a broken
eight-GPU node with one NVLink down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_NVLINK_MAX_LINKS = 36
#: NVLinks a Hopper SXM GPU has (NVLink 4: 18 of 25 GB/s a direction); NVML reports up to 36 for any GPU
HOPPER_LINKS = 18
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50


class NVMLError(Exception):
    """What pynvml raises for a call this GPU or driver does not support."""


@dataclass
class GPU:
    name: str
    bus: str
    switch: int  # the PCIe switch it sits behind
    socket: int
    #: per link: None (down or absent), ("gpu", bus of the other GPU) or ("switch", None)
    links: list[tuple[str, str | None] | None] = field(default_factory=list)
    pcie: tuple[int, int] = (5, 16)


class FakeNVML:
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_NOT_SUPPORTED = 5

    def __init__(self, gpus: list[GPU]) -> None:
        self.gpus = gpus

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> GPU:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: GPU) -> str:
        return h.name

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetIndex(self, h: GPU) -> int:
        return self.gpus.index(h)

    def nvmlDeviceGetUUID(self, h: GPU) -> str:
        return f"GPU-{self.gpus.index(h):08d}-fake"

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: GPU) -> int:
        return h.pcie[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: GPU) -> int:
        return h.pcie[1]

    def nvmlDeviceGetP2PStatus(self, a: GPU, b: GPU, index: int) -> int:
        joined = any(link is not None and (link[0] == "switch" or link[1] == b.bus) for link in a.links)
        return self.NVML_P2P_STATUS_OK if joined else self.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetPciInfo(self, h: GPU) -> SimpleNamespace:
        return SimpleNamespace(busId=h.bus.encode())

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: GPU) -> int:
        return h.pcie[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: GPU) -> int:
        return h.pcie[1]

    def _link(self, h: GPU, link: int) -> tuple[str, str | None]:
        if link >= len(h.links) or h.links[link] is None:
            raise NVMLError("NVML_ERROR_NOT_SUPPORTED")
        return h.links[link]

    def nvmlDeviceGetNvLinkState(self, h: GPU, link: int) -> int:
        if link >= len(h.links):
            raise NVMLError("NVML_ERROR_INVALID_ARGUMENT")
        return NVML_FEATURE_ENABLED if h.links[link] is not None else 0

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: GPU, link: int) -> int:
        kind, _ = self._link(h, link)
        return NVML_NVLINK_DEVICE_TYPE_SWITCH if kind == "switch" else NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: GPU, link: int) -> SimpleNamespace:
        kind, bus = self._link(h, link)
        return SimpleNamespace(busId=(bus or "00000000:FF:00.0").encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, a: GPU, b: GPU) -> int:
        if a.switch == b.switch:
            return NVML_TOPOLOGY_SINGLE
        return NVML_TOPOLOGY_NODE if a.socket == b.socket else NVML_TOPOLOGY_SYSTEM


def _bus(i: int) -> str:
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


def sxm8(name: str = "NVIDIA H100 80GB HBM3", down: dict[int, int] | None = None) -> FakeNVML:
    """Eight SXM GPUs, 18 NVLinks each to the NVSwitches; two per PCIe switch, four per socket. ``down``: GPU ->
    links of it that are down."""
    down = down or {}
    gpus = []
    for i in range(8):
        links: list = [("switch", None)] * HOPPER_LINKS
        links = [None if k >= HOPPER_LINKS - down.get(i, 0) else link for k, link in enumerate(links)]
        gpus.append(GPU(name, _bus(i), switch=i // 2, socket=i // 4, links=links))
    return FakeNVML(gpus)


def pcie8(name: str = "NVIDIA L4") -> FakeNVML:
    """Eight PCIe GPUs without NVLink: four behind one switch on socket 0, four behind another on socket 1."""
    return FakeNVML([GPU(name, _bus(i), switch=i // 4, socket=i // 4, links=[], pcie=(4, 16)) for i in range(8)])


def nvl_pair(bridged: bool = True, down: int = 0) -> FakeNVML:
    """Two H100 NVL cards on one socket, behind one switch; a bridge gives them 12 NVLinks to each other, ``down``
    of them inactive (NVML reports them, not enabled)."""
    a, b = _bus(0), _bus(1)
    links_a = [("gpu", b) if k < 12 - down else None for k in range(12)] if bridged else []
    links_b = [("gpu", a) if k < 12 - down else None for k in range(12)] if bridged else []
    return FakeNVML([GPU("NVIDIA H100 NVL", a, 0, 0, links_a), GPU("NVIDIA H100 NVL", b, 0, 0, links_b)])


def nvl_quad(down: int = 0) -> FakeNVML:
    """Four H200 NVL cards joined by a 4-way bridge: 18 NVLinks each, 6 to each of the other three; GPU 0's
    ``down`` links to GPU 1 inactive (at both ends)."""
    buses = [_bus(i) for i in range(4)]
    gpus = []
    for i in range(4):
        links = [("gpu", buses[j]) for j in range(4) if j != i for _ in range(6)]
        if i in (0, 1) and down:
            other = buses[1 - i]
            lost = [k for k, link in enumerate(links) if link == ("gpu", other)][:down]
            links = [None if k in lost else link for k, link in enumerate(links)]
        gpus.append(GPU("NVIDIA H200 NVL", buses[i], switch=i // 2, socket=0, links=links))
    return FakeNVML(gpus)


NODES = {
    "8x H100 SXM": lambda: sxm8(),
    "8 PCIe GPUs, two sockets, two switches": lambda: pcie8(),
    "2 bridged H100 NVL": lambda: nvl_pair(True),
    "2 unbridged H100 NVL": lambda: nvl_pair(False),
    "2 bridged H100 NVL, one link down": lambda: nvl_pair(True, down=1),
    "8x H100 SXM, GPU 3 with a link down": lambda: sxm8(down={3: 1}),
    "4 H200 NVL, 4-way bridge": lambda: nvl_quad(),
    "4 H200 NVL, 4-way bridge, a 0-1 link down": lambda: nvl_quad(down=1),
}
