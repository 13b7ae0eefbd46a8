"""The GPU models devbench knows: what a healthy board of each reaches, each figure with the public document that
says it, and how NVML and torch name the board (``model``). ``devbench.records.expected`` judges figures
against them. No torch import: the report uses this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Model:
    """A GPU model: the figures a healthy one reaches, each with its source, and how NVML and torch name it.

    ``names``: the whole names the model goes by once ``normal_name`` has taken off the vendor's prefix
    ("NVIDIA ", "Tesla "), matched whole and case-blind: "L4" is not "L40S", "H200" is not "GH200".
    ``peaks``: dense datasheet TFLOP/s by dtype (matrix units, float32 accumulation, boost clock; None: no
    matrix-unit path). ``achievable``: what a best-shape product reaches (mamf-finder's table), by dtype.
    ``peak_clock_mhz``: the SM clock the datasheet's TFLOP/s assume, where it can be derived.
    ``device_copy``: a public measured figure of a device copy (read plus written), where one exists.
    """

    names: tuple[str, ...]
    label: str
    memory_gbps: float | None  # datasheet, decimal GB/s
    nvlink_gbps: float | None  # per direction, all links together; None: no NVLink
    source: str
    peaks: dict[str, float | None] = field(default_factory=dict)
    peaks_source: str = ""
    achievable: dict[str, float] = field(default_factory=dict)
    achievable_source: str = ""
    peak_clock_mhz: float | None = None
    device_copy: float | None = None
    device_copy_source: str = ""
    #: NVLinks a healthy GPU of the model has (``nvlink_gbps`` over them is one link's rate, one direction: 18
    #: NVLink 4 on Hopper SXM, 12 NVLink 4 on H100 PCIe/NVL bridges, 12 NVLink 3 on A100, 6 NVLink 2 on V100 SXM2,
    #: 25 GB/s a direction each), and whether they come only with a bridge a card may lack (H100 PCIe and NVL, H200 NVL,
    #: A100 PCIe)
    nvlink_links: int | None = None
    bridged: bool = False
    #: the fastest (m, k, n) this suite's searches found on the model, by dtype, and where (on a model listed here
    #: the achievable search times these, their neighbours and the squares; the whole grid only on a model not here)
    best_shapes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    best_shapes_source: str = ""
    #: public pass floors of fleet health checks: a GPU pair's copy over NVLink, one direction, and an 8-GPU
    #: all_reduce's busbw (large messages, NCCL's defaults: NVLink SHARP on NVSwitch nodes), with their source
    pair_floor: float | None = None
    allreduce8_floor: float | None = None
    floors_source: str = ""
    #: what a stress test's held 8192 x 8192 products sustain (gpu-fryer's table, which says nothing of power; such
    #: products run a board at its limit), by dtype, and its source: a run under ``sw_power_cap`` is judged against
    #: it rather than the burst figure at its clock
    sustained: dict[str, float] = field(default_factory=dict)
    sustained_source: str = ""
    #: the message the all_reduce floor is set at (the health check's nccl-tests size): a smaller one is judged
    #: against ``LOW_SHARE`` of the expected figure, not that floor (below the plateau of a large message)
    allreduce8_floor_bytes: int | None = None
    #: where the model's NVLink differs by variant (GH200): a GPU pair has no expected figure, never a PCIe one
    nvlink_varies: bool = False
    #: what host copies cross where it is not PCIe (GH200: NVLink-C2C): no PCIe figure judges them
    host_link: str | None = None
    #: a pinned copy's typical figure, pass floor and source on this model's hosts, where a health check sets one
    #: of its own for their Gen5 x16 link (``LINK_COPY`` otherwise)
    host_copy: tuple[float, float, str] | None = None

    @property
    def link_gbps(self) -> float | None:
        """One NVLink's rate, one direction (25 GB/s for NVLink 2, 3 and 4)."""
        return self.nvlink_gbps / self.nvlink_links if self.nvlink_gbps and self.nvlink_links else None


_HOPPER = {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4}
_HOPPER_NVL = {"float32": 60.0, "tf32": 417.5, "bfloat16": 835.5, "float16": 835.5}
_A100 = {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0}
_MAMF = "mamf-finder's table (stas00/ml-engineering, compute/accelerator/README.md)"
#: gpu-fryer's reference table: sustained TFLOP/s of 8192 x 8192 products held for its run (no absolute pass rule:
#: it passes a GPU within 10% of the node's best)
_FRYER = "gpu-fryer's reference table (huggingface/gpu-fryer README), 8192 x 8192 products held"
_AZHC_H100 = "azurehpc-health-checks, conf/nd96isr_h100_v5"
_GH200 = "NVIDIA GH200 datasheet: memory, NVLink and the host's NVLink-C2C differ by variant"
_AZHC_H200 = "azurehpc-health-checks, conf/nd96isr_h200_v5"
#: the message those configs' all_reduce check runs (``check_nccl_allreduce <floor> 1 16G``)
_AZHC_BYTES = 16 * 1024**3
#: 132 SMs x 4,096 dense bf16 FLOP per SM per clock x 1.83 GHz = 989.4 TFLOP/s: the clock the datasheet assumes
_HOPPER_CLOCK = 1830.0
#: the Hopper SXM boards' dense rates: the architecture whitepaper's (the clock above); their datasheets star sparse
#: figures, which halved give these within 0.1% (989.5, 494.5)
_HOPPER_SOURCE = "NVIDIA {} datasheet; its tensor-core rates dense, as the H100 architecture whitepaper gives them"
_HALVED = "its starred sparse figures halved"

MODELS: list[Model] = [
    Model(("H200 NVL",), "H200 NVL", 4800.0, 450.0, "NVIDIA H200 NVL product brief: 4.8 TB/s HBM3e, NVLink 900 GB/s",
          _HOPPER_NVL, f"NVIDIA H200 NVL product brief, {_HALVED}", nvlink_links=18, bridged=True),
    Model(("H200", "H200 SXM", "H200 141GB HBM3e"), "H200 SXM", 4800.0, 450.0,
          "NVIDIA H200 datasheet: 4.8 TB/s HBM3e, NVLink 900 GB/s", _HOPPER, _HOPPER_SOURCE.format("H200"),
          {"bfloat16": 794.5}, f"{_MAMF}: 794.5 on an H100 SXM, the H200 listed as the same", _HOPPER_CLOCK,
          4010.0, "Azure AI-benchmarking-guide, ND_H200_v5 HBM table: STREAM Copy 4.01 TB/s read plus written",
          best_shapes={"bfloat16": (4096, 16384, 2048)},
          best_shapes_source=("this suite's search on an H200, its best after the finals "
                              "(reports/gpu/h200/achievable.jsonl)"),
          pair_floor=335.0, allreduce8_floor=431.0, floors_source=_AZHC_H200, allreduce8_floor_bytes=_AZHC_BYTES,
          nvlink_links=18),
    # mamf-finder's GH200 is its 900 W, 141 GiB HBM3e board (NVML: "GH200 144G HBM3e"); gpu-fryer's, the 480GB one
    Model(("GH200 144G HBM3e",), "GH200 144G HBM3e", None, None, _GH200, _HOPPER, _HOPPER_SOURCE.format("GH200"),
          {"bfloat16": 828.6}, f"{_MAMF}: GH200 (900 W, 141 GiB HBM3e) 828.6", _HOPPER_CLOCK, nvlink_varies=True,
          host_link="NVLink-C2C"),
    Model(("GH200 480GB",), "GH200 480GB", None, None, _GH200, _HOPPER, _HOPPER_SOURCE.format("GH200"),
          peak_clock_mhz=_HOPPER_CLOCK, sustained={"bfloat16": 705.0}, sustained_source=f"{_FRYER}: GH200 480GB ~705",
          nvlink_varies=True, host_link="NVLink-C2C"),
    Model((r"GH200( \d+GB)?",), "GH200", None, None, _GH200, _HOPPER, _HOPPER_SOURCE.format("GH200"),
          peak_clock_mhz=_HOPPER_CLOCK, nvlink_varies=True, host_link="NVLink-C2C"),
    Model(("H100 NVL",), "H100 NVL", 3900.0, 300.0, "NVIDIA H100 datasheet (NVL): 3.9 TB/s HBM3, NVLink 600 GB/s",
          _HOPPER_NVL, f"NVIDIA H100 datasheet (NVL), {_HALVED}", nvlink_links=12, bridged=True,
          host_copy=(52.0, 52.0, "a Gen5 x16 host of H100 NVL cards: pass floor 52 GB/s (azurehpc-health-checks, "
                                 "conf/nc80adis_h100_v5), typical as on other Gen5 x16 hosts (Azure "
                                 "AI-benchmarking-guide, ND_H100_v5)")),
    Model(("H100 PCIe",), "H100 PCIe", 2000.0, 300.0, "NVIDIA H100 datasheet (PCIe): 2.0 TB/s HBM2e, NVLink 600 GB/s",
          {"float32": 51.0, "tf32": 378.0, "bfloat16": 756.5, "float16": 756.5},
          f"NVIDIA H100 datasheet (PCIe), {_HALVED}", nvlink_links=12, bridged=True),
    # not the bare "H100": NVML's name of the 94 GB SXM5 board, whose memory, copies and floors no source here gives
    Model(("H100 80GB HBM3", "H100 SXM", "H100 SXM5 80GB"), "H100 SXM", 3350.0, 450.0,
          "NVIDIA H100 datasheet (SXM): 3.35 TB/s HBM3, NVLink 900 GB/s", _HOPPER, _HOPPER_SOURCE.format("H100 SXM"),
          {"bfloat16": 794.5}, f"{_MAMF}: H100 SXM 794.5", _HOPPER_CLOCK,
          2900.0, "Azure AI-benchmarking-guide, ND_H100_v5 HBM table: STREAM Copy 2.90 TB/s read plus written",
          nvlink_links=18, pair_floor=335.0, allreduce8_floor=460.0, floors_source=_AZHC_H100,
          allreduce8_floor_bytes=_AZHC_BYTES, sustained={"bfloat16": 730.0},
          sustained_source=f"{_FRYER}: H100 80GB HBM3 ~730"),
    Model(("A100-SXM4-80GB",), "A100 SXM 80GB", 2039.0, 300.0,
          "NVIDIA A100 datasheet (SXM 80GB): 2,039 GB/s, NVLink 600", _A100, "NVIDIA A100 datasheet",
          {"bfloat16": 271.2}, f"{_MAMF}: A100 SXM 271.2", nvlink_links=12),
    Model(("A100-SXM4-40GB",), "A100 SXM 40GB", 1555.0, 300.0,
          "NVIDIA A100 datasheet (SXM 40GB): 1,555 GB/s, NVLink 600", _A100, "NVIDIA A100 datasheet",
          {"bfloat16": 271.2}, f"{_MAMF}: A100 SXM 271.2", nvlink_links=12),
    Model(("A100 80GB PCIe", "A100-PCIE-80GB"), "A100 PCIe 80GB", 1935.0, 300.0,
          "NVIDIA A100 datasheet (PCIe 80GB): 1,935 GB/s, NVLink 600 GB/s", _A100, "NVIDIA A100 datasheet",
          {"bfloat16": 252.9}, f"{_MAMF}: A100 PCIe 252.9", nvlink_links=12, bridged=True),
    Model(("A100-PCIE-40GB",), "A100 PCIe 40GB", 1555.0, 300.0,
          "NVIDIA A100 datasheet (PCIe 40GB): 1,555 GB/s, NVLink 600 GB/s", _A100, "NVIDIA A100 datasheet",
          {"bfloat16": 252.9}, f"{_MAMF}: A100 PCIe 252.9", nvlink_links=12, bridged=True),
    Model(("L4",), "L4", 300.0, None, "NVIDIA L4 datasheet: 300 GB/s GDDR6, no NVLink",
          {"float32": 30.3, "tf32": 60.0, "bfloat16": 121.0, "float16": 121.0}, f"NVIDIA L4 datasheet, {_HALVED}"),
    Model(("GeForce RTX 4090",), "GeForce RTX 4090", 1008.0, None,
          "NVIDIA Ada GPU architecture whitepaper: 1,008 GB/s GDDR6X",
          {"float32": 82.6, "tf32": 82.6, "bfloat16": 165.2, "float16": 165.2}, "NVIDIA Ada architecture whitepaper"),
    Model((r"V100-PCIE-(16|32)GB",), "V100 PCIe", 900.0, None, "NVIDIA V100 datasheet (PCIe): 900 GB/s HBM2, no NVLink",
          {"float32": 14.0, "tf32": None, "bfloat16": None, "float16": 112.0}, "NVIDIA V100 datasheet (PCIe)"),
    Model((r"V100-SXM2-(16|32)GB",), "V100 SXM2", 900.0, 150.0,
          "NVIDIA V100 datasheet (SXM2): 900 GB/s HBM2, NVLink 300 GB/s",
          {"float32": 15.7, "tf32": None, "bfloat16": None, "float16": 125.0}, "NVIDIA V100 datasheet (SXM2)",
          nvlink_links=6),
    Model(("T4",), "T4", 320.0, None, "NVIDIA T4 product page: 320+ GB/s GDDR6, no NVLink",
          {"float32": 8.1, "tf32": None, "bfloat16": None, "float16": 65.0}, "NVIDIA T4 datasheet"),
]  # fmt: skip

#: What a pinned copy over a whole PCIe link reaches on a healthy machine, by (generation, width): the typical
#: figure and the pass floor of fleet health checks, with their sources. Other links: the link rate alone.
LINK_COPY: dict[tuple[int, int], tuple[float, float, str]] = {
    (5, 16): (52.0, 48.0, "a healthy Gen5 x16 host: typical 52 GB/s (Azure AI-benchmarking-guide, ND_H100_v5 and "
                          "ND_H200_v5), pass floor 48 (azurehpc-health-checks)"),
}


def normal_name(name: str) -> str:
    """The model part of a GPU's name: "NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3", "Tesla T4" -> "T4", and
    "1 x NVIDIA H200" (asv's machine record) -> "H200"."""
    text = re.sub(r"^\d+\s*x\s+", "", " ".join(str(name).split()))  # asv's machine record: "8 x NVIDIA H100 ..."
    for prefix in ("NVIDIA ", "Tesla "):
        if text.lower().startswith(prefix.lower()):
            text = text[len(prefix) :]
    return text


def model(name: str | None) -> Model | None:
    """The known GPU model one of whose whole ``names`` is ``name`` (its vendor prefix aside), or None."""
    if not name:
        return None
    text = normal_name(name)
    return next((m for m in MODELS if any(re.fullmatch(n, text, flags=re.IGNORECASE) for n in m.names)), None)


def known_shapes(gpu_name: str | None, dtype: str) -> list[tuple[int, int, int]]:
    """The fastest (m, k, n) this suite's searches found on ``gpu_name``'s model (``Model.best_shapes``): the
    one found for ``dtype`` first, then those of the model's other dtypes (a model's tiles and waves favour
    similar shapes across dtypes); empty for a model never searched."""
    found = model(gpu_name)
    if found is None:
        return []
    own = [found.best_shapes[dtype]] if dtype in found.best_shapes else []
    return own + [s for d, s in sorted(found.best_shapes.items()) if d != dtype and s not in own]


def gpu_peak(gpu_name: str | None, dtype: str) -> float | None:
    """Datasheet dense TFLOP/s of ``gpu_name`` for ``dtype``; ``None`` when unknown."""
    found = model(gpu_name)
    return found.peaks.get(dtype) if found is not None else None
