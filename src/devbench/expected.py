"""What a GPU figure should read on its own machine, and whether the figure it read is normal.

The question GPU users ask most of a copy figure: is this number normal *for this machine*? The
expected figure comes from the machine's own facts, each with its source named:

* host <-> device copies: the PCIe link as NVML reports it trained (generation x width), per
  direction, after the line encoding (8b/10b up to Gen2, 128b/130b from Gen3);
* a device-local copy (bytes read plus written): the GPU model's memory bandwidth (datasheet);
* a GPU -> GPU copy (``PeerCopy``, each pair of ``PeerMatrix``): the model's NVLink bandwidth per
  direction (datasheet), or, on a model without NVLink, the PCIe link as trained;
* a collective's bus bandwidth (NCCL): the same link, one direction, as nccl-tests reads busbw (its
  bus factor makes busbw comparable with what one link carries one way, whatever the op and world);
* a matrix product: the model's dense datasheet TFLOP/s (``devbench.peaks``).

``judge`` gives ``ok``, ``low`` (below ``LOW_SHARE`` of expected, with the likely reason where
one can be read: a link trained below its maximum, pageable memory, peer access off or a GPU pair's
copy that NVLink did not carry, a throttle reason active) or
``unknown`` (no expected figure, and why). No torch import: the report may use this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devbench.peaks import gpu_peak

#: a figure below this share of its expected figure is ``low``: the best copies and products reach 80-95%
#: of the link, the memory or the datasheet (the H200 run: 88% of the PCIe link, 89% of HBM3e)
LOW_SHARE = 0.7

#: a figure above this share of its expected figure is still ``ok``, with a note that the facts may be wrong
ABOVE_SHARE = 1.1

#: GT/s per lane by PCIe generation, and the share of the bits that carry data (line encoding)
PCIE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}


#: a GPU -> GPU copy counts as over NVLink when the source GPU's NVLink counters sent at least this share of its bytes
NVLINK_SHARE = 0.5


def path_label(peer_access: bool, nvlink: bool | None = None, nvlink_share: float | None = None) -> str:
    """How a GPU -> GPU copy travelled, in a word: ``through host`` without peer access; ``NVLink`` or ``PCIe P2P``
    by the share of its bytes NVLink's counters sent; with "(topology)" where there were no counters and only
    NVML's topology says what the link could do; ``P2P`` where nothing is known."""
    if not peer_access:
        return "through host"
    if nvlink_share is not None and nvlink_share == nvlink_share:  # NaN: no counters
        return "NVLink" if nvlink_share >= NVLINK_SHARE else "PCIe P2P"
    if nvlink is not None:
        return "NVLink (topology)" if nvlink else "PCIe P2P (topology)"
    return "P2P"


@dataclass(frozen=True)
class Model:
    """A GPU model's memory and NVLink bandwidth, decimal GB/s, from the datasheet named in ``source``."""

    key: str  # a substring of the name NVML and torch report, most specific first in MODELS
    label: str
    memory_gbps: float
    nvlink_gbps: float | None  # per direction, all links together; None: no NVLink
    source: str


MODELS: list[Model] = [
    Model("H200 NVL", "H200 NVL", 4800.0, 450.0, "NVIDIA H200 NVL product brief: 4.8 TB/s HBM3e, NVLink 900 GB/s"),
    Model("H200", "H200 SXM", 4800.0, 450.0, "NVIDIA H200 datasheet: 4.8 TB/s HBM3e, NVLink 900 GB/s"),
    Model("H100 NVL", "H100 NVL", 3900.0, 300.0, "NVIDIA H100 datasheet (NVL): 3.9 TB/s HBM3, NVLink 600 GB/s"),
    Model("H100 PCIe", "H100 PCIe", 2000.0, 300.0, "NVIDIA H100 datasheet (PCIe): 2.0 TB/s HBM2e, NVLink 600 GB/s"),
    Model("H100", "H100 SXM", 3350.0, 450.0, "NVIDIA H100 datasheet (SXM): 3.35 TB/s HBM3, NVLink 900 GB/s"),
    Model("A100-SXM4-80GB", "A100 SXM 80GB", 2039.0, 300.0, "NVIDIA A100 datasheet (SXM 80GB): 2,039 GB/s, NVLink 600"),
    Model("A100-SXM4-40GB", "A100 SXM 40GB", 1555.0, 300.0, "NVIDIA A100 datasheet (SXM 40GB): 1,555 GB/s, NVLink 600"),
    Model("A100 80GB PCIe", "A100 PCIe 80GB", 1935.0, 300.0,  # fmt: skip
          "NVIDIA A100 datasheet (PCIe 80GB): 1,935 GB/s, NVLink 600 GB/s"),
    Model("L4", "L4", 300.0, None, "NVIDIA L4 datasheet: 300 GB/s GDDR6, no NVLink"),
    Model("RTX 4090", "GeForce RTX 4090", 1008.0, None, "NVIDIA Ada GPU architecture whitepaper: 1,008 GB/s GDDR6X"),
    Model("V100-PCIE", "V100 PCIe", 900.0, None, "NVIDIA V100 datasheet (PCIe): 900 GB/s HBM2, no NVLink"),
    Model("V100", "V100 SXM2", 900.0, 150.0, "NVIDIA V100 datasheet (SXM2): 900 GB/s HBM2, NVLink 300 GB/s"),
    Model("T4", "T4", 320.0, None, "NVIDIA T4 datasheet: 320 GB/s GDDR6, no NVLink"),
]


@dataclass(frozen=True)
class Expected:
    """An expected figure and where it comes from; ``value`` None means unknown, and ``source`` says why."""

    value: float | None
    source: str


@dataclass(frozen=True)
class Health:
    verdict: str  # ok, low, unknown
    share: float | None  # measured / expected
    reason: str


def model(name: str | None) -> Model | None:
    """The known GPU model whose key is in ``name`` (the most specific first), or None."""
    if not name:
        return None
    return next((m for m in MODELS if m.key.lower() in name.lower()), None)


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    """Decimal GB/s one direction of a PCIe link carries after its line encoding (None: not known)."""
    if not gen or not width or gen not in PCIE_GTS:
        return None
    return PCIE_GTS[gen] * width * PCIE_ENCODING[gen] / 8.0


def link_note(gpu: dict[str, Any]) -> str | None:
    """'trained at Gen4 x16, below its Gen5 x16' when the link runs below its maximum, else None."""
    gen, width = gpu.get("pcie_gen"), gpu.get("pcie_width")
    top_gen, top_width = gpu.get("pcie_gen_max"), gpu.get("pcie_width_max")
    if not gen or not width or not top_gen or not top_width:
        return None
    if gen >= top_gen and width >= top_width:
        return None
    return f"PCIe link trained at Gen{gen} x{width}, below its Gen{top_gen} x{top_width}"


def expected(kind: str, gpu: dict[str, Any]) -> Expected:
    """The expected figure of ``kind`` on the GPU ``gpu`` (a ``devbench.devices.describe()`` GPU entry).

    ``kind``: ``h2d`` or ``d2h`` (pinned host memory, GB/s), ``device_copy`` (GB/s read plus written),
    ``peer`` (GB/s GPU -> GPU, one direction), ``busbw`` (an NCCL collective's bus bandwidth, GB/s),
    ``matmul:<dtype>`` (TFLOP/s)."""
    name = gpu.get("name")
    if kind in ("h2d", "d2h"):
        gbps = pcie_gbps(gpu.get("pcie_gen"), gpu.get("pcie_width"))
        if gbps is None:
            return Expected(None, "NVML did not report the PCIe link")
        return Expected(gbps, f"PCIe Gen{gpu['pcie_gen']} x{gpu['pcie_width']} as trained, per direction, "
                              f"after encoding")  # fmt: skip
    if kind.startswith("matmul:"):
        dtype = kind.split(":", 1)[1]
        peak = gpu_peak(name, dtype)
        if peak is None:
            return Expected(None, f"no datasheet {dtype} figure for {name or 'this GPU'} in devbench.peaks")
        return Expected(peak, f"datasheet dense {dtype} ({name})")
    found = model(name)
    if found is None:
        return Expected(None, f"{name or 'this GPU'} is not in devbench.expected.MODELS")
    if kind == "device_copy":
        return Expected(found.memory_gbps, found.source)
    if kind in ("peer", "busbw"):
        what = "NVLink per direction" + (", as nccl-tests reads busbw" if kind == "busbw" else "")
        if found.nvlink_gbps is not None:
            return Expected(found.nvlink_gbps, f"{what}: {found.source}")
        gbps = pcie_gbps(gpu.get("pcie_gen"), gpu.get("pcie_width"))
        if gbps is None:
            return Expected(None, f"{found.label} has no NVLink, and NVML did not report the PCIe link")
        return Expected(gbps, f"{found.label} has no NVLink: PCIe Gen{gpu['pcie_gen']} x{gpu['pcie_width']} as "
                              f"trained, per direction, after encoding")  # fmt: skip
    raise ValueError(f"unknown kind {kind!r}; expected h2d, d2h, device_copy, peer, busbw or matmul:<dtype>")


def judge(measured: float, kind: str, gpu: dict[str, Any], pageable: bool = False,
          throttle: list[str] | None = None, path: str | None = None) -> Health:  # fmt: skip
    """``ok``, ``low`` (below ``LOW_SHARE`` of expected, with the likely reason) or ``unknown`` (and why).

    ``path``: how a GPU -> GPU copy travelled, as ``PeerPath.label`` names it ("NVLink", "PCIe P2P",
    "through host", or one of the first two with "(topology)" where NVML had no counters)."""
    want = expected(kind, gpu)
    if want.value is None:
        return Health("unknown", None, want.source)
    share = measured / want.value
    if share >= LOW_SHARE:
        above = "; above what it should reach: the machine's facts may be wrong" if share > ABOVE_SHARE else ""
        return Health("ok", share, f"{share:.0%} of {want.value:.4g} ({want.source}){above}")
    reasons = []
    found = model(gpu.get("name"))
    over_pcie = kind in ("h2d", "d2h") or (kind in ("peer", "busbw") and found is not None and not found.nvlink_gbps)
    note = link_note(gpu) if over_pcie else None
    if note:
        reasons.append(note)
    if pageable and kind in ("h2d", "d2h"):
        reasons.append("pageable host memory: the driver stages the copy through a pinned buffer")
    if kind == "peer" and path == "through host":
        reasons.append("peer access off: the driver stages the copy through host memory")
    elif kind == "peer" and path and not over_pcie and path.startswith("PCIe"):  # "P2P" alone: the path is unknown
        reasons.append(f"the copy took {path}, not NVLink")
    if throttle:
        reasons.append("throttled while it ran: " + ", ".join(throttle))
    why = "; ".join(reasons) if reasons else "no reason could be read from the machine's state"
    return Health("low", share, f"{share:.0%} of {want.value:.4g} ({want.source}): {why}")
