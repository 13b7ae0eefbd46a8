"""What a GPU figure should read on its own machine, and whether the figure it read is normal.

The question GPU users ask most of a figure: is this number normal *for this machine*? Each expected
figure is what a healthy machine of that kind reaches, with its source named (public figures are
collected in ``shared/reference/gpu-expected.md`` of the project's reference notes; the datasheet only
where nothing better exists):

* pinned host <-> device copies: a healthy host's figure over the GPU's whole PCIe link (Gen5 x16:
  typical 52 GB/s, pass floor 48, from fleet health checks and nvbandwidth), else the link's rate
  after the line encoding; the link is the GPU's maximum, and the one it trained at (read while a
  pinned copy ran, ``gpustate``) is named when the copy is low. Pageable copies are not judged
  (``PAGEABLE_NOTE``);
* a device-local copy (bytes read plus written): a public STREAM-copy figure, else the datasheet;
* a GPU -> GPU copy (``PeerCopy``, each pair of ``PeerMatrix``): the model's NVLink bandwidth per
  direction (datasheet; a pair joined directly by some of each GPU's links: those links' share of it), or,
  over PCIe, the GPU's link at its maximum (a link down or trained low is named);
* a collective's bus bandwidth (NCCL): the same link, one direction, as nccl-tests reads busbw;
* a matrix product: what a best-shape product reaches (mamf-finder's table), else the datasheet; one the
  board's power limit held (``HEALTHY_CAPS``) against what a board of the model sustains at that limit
  (gpu-fryer's table, ``Model.sustained``), else at the clock it ran at.

One table (``MODELS``, ``devbench.records.models``) holds every model's figures; models are matched by
whole name. ``judge`` gives ``ok``, ``low`` (below the floor, with the likely reason: a link trained below
its maximum, peer access off, a GPU pair's copy that NVLink did not carry, a throttle reason), ``unknown``
(no expected figure, and why) or ``not judged``. No torch import: the report uses this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devbench.records.models import (  # noqa: F401 - the table's names, as the judging's callers know them
    LINK_COPY,
    MODELS,
    Model,
    gpu_peak,
    known_shapes,
    model,
    normal_name,
)

#: a figure below this share of its expected figure is ``low`` where no public pass floor exists: devbench's own
#: line, no source sets it (the best copies and products reach 80-95% of the link, the memory or the datasheet;
#: the H200 run: 88% of the PCIe link, 89% of HBM3e); a verdict judged by it says "(no public pass floor)"
LOW_SHARE = 0.7

#: a dtype judged against another's achievable figure where the datasheet gives both one dense rate (the same
#: tensor-core path): float16 against bfloat16's, the only one a public table gives
HALF_TWINS = {"float16": "bfloat16"}

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


#: Throttle reasons a healthy GPU shows under a heavy product: the board's own power limit (devbench's reading: a
#: board at its default limit caps a held product there, as the H200's did). A figure that ran under them is
#: judged against what the model sustains, else at its clock; any other reason (thermal, a hardware slowdown or
#: power brake) is a fault to name, never a reason to expect less.
HEALTHY_CAPS = frozenset({"sw_power_cap"})
#: a power limit this far below the board's default (NVML's default limit) is a lowered limit, not rounding
LOWERED_LIMIT_SHARE = 0.99


def lowered_limit(gpu: dict[str, Any]) -> str | None:
    """What is wrong where the GPU's enforced power limit was set below its board's default (``power_limit_w``,
    ``default_power_limit_w``: NVML's, as ``gpustate`` records them), else None."""
    limit, default = gpu.get("power_limit_w"), gpu.get("default_power_limit_w")
    if not limit or not default or limit >= LOWERED_LIMIT_SHARE * default:
        return None
    return f"power limit {limit:.0f} W, lowered from the board's default {default:.0f} W"

#: Why a pageable copy is not judged: no public figure for it, and the link is not what bounds it.
PAGEABLE_NOTE = ("not judged: a pageable copy is staged by the driver through a pinned buffer, bounded by one host "
                 "thread's memcpy rather than by the PCIe link, and no public floor exists for it")  # fmt: skip


@dataclass(frozen=True)
class Expected:
    """An expected figure and where it comes from; ``value`` None means unknown, and ``source`` says why.
    ``floor``: the figure below which it is ``low``, where a public pass floor exists (else ``LOW_SHARE``)."""

    value: float | None
    source: str
    floor: float | None = None


@dataclass(frozen=True)
class Health:
    verdict: str  # ok, low, unknown, not judged
    share: float | None  # measured / expected
    reason: str
    #: the figure the verdict held it against (the burst figure at the clock it ran, a sustained figure) and that
    #: figure's source, where one was judged against
    expected: float | None = None
    source: str = ""


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


def _link(gpu: dict[str, Any]) -> tuple[int | None, int | None]:
    """The link a healthy machine of this kind runs: the GPU's maximum where NVML gave it, else as trained."""
    return gpu.get("pcie_gen_max") or gpu.get("pcie_gen"), gpu.get("pcie_width_max") or gpu.get("pcie_width")


#: an 8-GPU all_reduce's busbw on an NVSwitch node with NVLink SHARP (NCCL's default there), large messages
ALLREDUCE8_SHARP = 480.0
ALLREDUCE8_SHARP_SOURCE = "about 480 GB/s with NVLink SHARP (Azure AI-benchmarking-guide; nccl-tests #212, #272)"


#: the words a source ends with where its public pass floor is set at a message larger than the one judged
FLOOR_OF_ANOTHER_SIZE = "not this message's size"


def _nvlink_floor(kind: str, found: Model, ring: tuple | None) -> tuple[float, float | None, str]:
    """An NVLink figure's expected value, public pass floor and their words: a pair's copy against the links'
    rate with its floor; an 8-GPU all_reduce on a model with a floor against what NVLink SHARP reaches (above
    the rate of one direction: NVSwitch reduces in the fabric) with its floor; else the rate alone."""
    if kind == "peer" and found.pair_floor is not None:
        return found.nvlink_gbps, found.pair_floor, f", pass floor {found.pair_floor:g} ({found.floors_source})"
    if kind == "busbw" and ring is not None and tuple(ring[:2]) == ("all_reduce", 8) and found.allreduce8_floor:
        said = f"; 8 GPUs: {ALLREDUCE8_SHARP_SOURCE}, pass floor {found.allreduce8_floor:g} ({found.floors_source})"
        nbytes, at = (ring[2] if len(ring) > 2 else None), found.allreduce8_floor_bytes
        if nbytes is not None and at is not None and nbytes < at:  # the floor is a larger message's
            return ALLREDUCE8_SHARP, None, f"{said} at {at / 1024**3:g} GiB, {FLOOR_OF_ANOTHER_SIZE}"
        return ALLREDUCE8_SHARP, found.allreduce8_floor, said
    return found.nvlink_gbps, None, ""


def _pair_expected(kind: str, gpu: dict[str, Any], found: Model, pair: Any,
                   ring: tuple | None = None) -> Expected:  # fmt: skip
    """A GPU pair's (or a ring's slowest pair's) expected figure from the path NVML says it has (``pair``: a
    ``topology.PairPath``): NVLink at the model's healthy link count, else the PCIe link."""
    what = "NVLink per direction" + (", as nccl-tests reads busbw" if kind == "busbw" else "")
    if pair.nvlinks and found.nvlink_gbps:
        value, floor, said = _nvlink_floor(kind, found, ring)
        healthy, share = found.nvlink_links, pair.nvlinks / (found.nvlink_links or pair.nvlinks)
        if kind == "peer" and not pair.switched and share < 1:  # joined directly by some links (a cube mesh, a
            # 4-way bridge): a copy has those links' rate
            return Expected(value * share, f"{what}, {pair.nvlinks} of a healthy {found.label}'s {healthy} links "
                                           f"join this pair directly: {found.source}, times {pair.nvlinks}/{healthy}"
                                           f"{said}", floor * share if floor is not None else None)  # fmt: skip
        return Expected(value, f"{what}, {healthy} links of a healthy {found.label}: "
                               f"{found.source}{said}; this pair: {pair.label}", floor)  # fmt: skip
    if pair.pcie == "across sockets":
        return Expected(None, "the pair is on two sockets (NVML's topology): no public figure for a copy across "
                              "them")  # fmt: skip
    why = "no NVLink bridge between this pair" if found.bridged else f"{found.label} has no NVLink to this GPU"
    return _over_pcie(gpu, why, f" (NVML's topology: {pair.label})")


def _over_pcie(gpu: dict[str, Any], why: str, path: str = "") -> Expected:
    """A copy between GPUs over PCIe: the GPU's link at its maximum (an idle GPU trains it down)."""
    gen, width = _link(gpu)
    gbps = pcie_gbps(gen, width)
    if gbps is None:
        return Expected(None, f"{why}, and NVML did not report the PCIe link")
    return Expected(gbps, f"{why}{path}: PCIe Gen{gen} x{width}, the GPU's link, per direction, after encoding")


def expected(kind: str, gpu: dict[str, Any], pair: Any = None, ring: tuple | None = None) -> Expected:
    """The expected figure of ``kind`` on the GPU ``gpu`` (a ``devbench.engine.devices.describe()`` GPU entry).

    ``kind``: ``h2d`` or ``d2h`` (pinned host memory, GB/s: what a healthy host reaches over the GPU's whole
    link, ``LINK_COPY``, else the link's rate after encoding), ``device_copy`` (GB/s read plus written: a
    public measured figure, else the datasheet), ``peer`` (GB/s GPU -> GPU, one direction), ``busbw`` (an NCCL
    collective's bus bandwidth, GB/s), ``matmul:<dtype>`` and ``achievable:<dtype>`` (TFLOP/s: what a
    best-shape product reaches, else the datasheet). ``ring``: a busbw's (op, ranks, message bytes), for the floor
    of an 8-GPU all_reduce; a pass floor of a fleet health check sets ``floor`` where one is public (and set at a
    message no larger than this one)."""
    name = gpu.get("name")
    found = model(name)
    if kind in ("h2d", "d2h"):
        if found is not None and found.host_link:
            return Expected(None, f"{found.label}: host copies cross {found.host_link}, not PCIe, and no public "
                                  "figure says what they reach")  # fmt: skip
        gen, width = _link(gpu)
        gbps = pcie_gbps(gen, width)
        if gbps is None:
            return Expected(None, "NVML did not report the PCIe link")
        copy = found.host_copy if found is not None and found.host_copy and (gen, width) == (5, 16) else None
        if copy is not None or (gen, width) in LINK_COPY:
            typical, floor, source = copy or LINK_COPY[(gen, width)]
            return Expected(typical, source, floor)
        return Expected(gbps, f"PCIe Gen{gen} x{width}, per direction, after encoding (no public copy figure for "
                              f"this link)")  # fmt: skip
    if kind.startswith(("matmul:", "achievable:")):
        dtype = kind.split(":", 1)[1]
        if found is not None and dtype in found.achievable:
            return Expected(found.achievable[dtype], f"achievable {dtype}, {found.achievable_source}")
        peak = found.peaks.get(dtype) if found is not None else None
        twin = HALF_TWINS.get(dtype, "")
        if found is not None and twin in found.achievable and peak and found.peaks.get(twin) == peak:
            # float16 and bfloat16 share the tensor cores' datasheet rate on these GPUs
            return Expected(found.achievable[twin], f"achievable {twin}, {found.achievable_source}; {dtype} has "
                                                    f"{twin}'s datasheet rate on this GPU ({peak:g} each)")  # fmt: skip
        if peak is None:
            return Expected(None, f"no datasheet {dtype} figure for {name or 'this GPU'} in devbench.records.expected")
        return Expected(peak, f"datasheet dense {dtype} ({found.peaks_source}; no public achievable figure)")
    if found is None:
        return Expected(None, f"{name or 'this GPU'} is not in devbench.records.expected.MODELS")
    if kind == "device_copy":
        if found.device_copy is not None:
            return Expected(found.device_copy, found.device_copy_source)
        if found.memory_gbps is None:
            return Expected(None, f"{found.label}: no single memory figure ({found.source})")
        return Expected(found.memory_gbps, found.source)
    if kind in ("peer", "busbw"):
        if found.nvlink_varies:
            return Expected(None, f"{found.label}: {found.source}: no expected figure for a GPU pair")
        if pair is not None:
            return _pair_expected(kind, gpu, found, pair, ring)
        what = "NVLink per direction" + (", as nccl-tests reads busbw" if kind == "busbw" else "")
        if found.bridged:
            return Expected(None, f"{found.label} cards are joined by NVLink only where a bridge is fitted: NVML's "
                                  "topology tells whether this pair has one, and none was read")  # fmt: skip
        if found.nvlink_gbps is not None:
            value, floor, said = _nvlink_floor(kind, found, ring)
            return Expected(value, f"{what}: {found.source}{said}", floor)
        return _over_pcie(gpu, f"{found.label} has no NVLink")
    raise ValueError(f"unknown kind {kind!r}; expected h2d, d2h, device_copy, peer, busbw, matmul:<dtype> or "
                     f"achievable:<dtype>")  # fmt: skip


def sustained(found: Model | None, dtype: str) -> tuple[float, str] | None:
    """What a board of the model sustains at its power limit in ``dtype`` and where that is said (float16 takes
    bfloat16's where the datasheet gives both one rate), or None where no public figure says it."""
    if found is None:
        return None
    if dtype in found.sustained:
        return found.sustained[dtype], found.sustained_source
    twin = HALF_TWINS.get(dtype, "")
    if twin in found.sustained and found.peaks.get(dtype) and found.peaks.get(dtype) == found.peaks.get(twin):
        return found.sustained[twin], f"{found.sustained_source}; {dtype} has {twin}'s datasheet rate on this GPU"
    return None


def links_active(pair: Any, found: Model | None) -> int | None:
    """The fewer of a pair's two GPUs' active NVLinks, held to the model's healthy count; None where the pair has
    none or it cannot be told (a direct pair's own links may be a few of each GPU's)."""
    if pair is None or found is None or not found.nvlink_links or not pair.nvlinks:
        return None
    if pair.gpu_links is not None:
        return pair.gpu_links
    return pair.nvlinks if pair.switched else None


def judge(measured: float, kind: str, gpu: dict[str, Any], pageable: bool = False, throttle: list[str] | None = None,
          path: str | None = None, clock_mhz: float | None = None, pair: Any = None,
          ring: tuple | None = None) -> Health:  # fmt: skip
    """``ok``, ``low`` (below the expected figure's floor, else ``LOW_SHARE`` of it, with the likely reason),
    ``unknown`` (and why), or ``not judged`` (a pageable copy: ``PAGEABLE_NOTE``).

    ``throttle``: the throttle reasons recorded while the figure ran; ``clock_mhz``: its SM clock then. A
    product that ran under a healthy power cap (``HEALTHY_CAPS``) is judged against what a board of its model
    sustains at its limit where a public figure says it (``sustained``: no clock then excuses a board that needs
    too many watts for its clock), else at the clock it ran at below the one its datasheet assumes; never where the
    board's limit was lowered (``lowered_limit``: a fault named in the verdict, never an excuse; a product held
    back by it reads low); every reason recorded is named. ``path``: how a GPU -> GPU copy travelled, as
    ``PeerPath.label`` names it ("NVLink", "PCIe P2P", "through host", or one of the first two with
    "(topology)" where NVML had no counters)."""
    if pageable and kind in ("h2d", "d2h"):
        return Health("not judged", None, PAGEABLE_NOTE)
    want = expected(kind, gpu, pair, ring) if kind in ("peer", "busbw") else expected(kind, gpu)
    if want.value is None:
        return Health("unknown", None, want.source)
    found = model(gpu.get("name"))
    at, where = want.value, ""
    caps = sorted(set(throttle or ()) & HEALTHY_CAPS)
    compute = kind.startswith(("matmul:", "achievable:"))
    top = found.peak_clock_mhz if found is not None else None
    lowered = lowered_limit(gpu)
    if lowered and compute and caps:  # the lowered limit held the product back: no clock it ran at excuses it
        share = measured / want.value
        return Health("low", share, f"{share:.0%} of {want.value:.4g} ({want.source}): {lowered}; the product ran "
                                    f"under it ({', '.join(caps)})", want.value, want.source)  # fmt: skip
    source = want.source
    held = sustained(found, kind.split(":", 1)[1]) if compute and caps else None
    if held is not None:  # at the board's power limit: what a board of the model sustains there, no clock excuse
        at, source = held
        where = f" sustained ({', '.join(caps)} while it ran: the board at its power limit)"
    elif compute and caps and clock_mhz and top and clock_mhz < top:
        at = want.value * clock_mhz / top  # an estimate: the figure's own clock is not published
        where = (f" at {clock_mhz:.0f} of {top:.0f} MHz, scaled from the clock the datasheet assumes ("
                 f"{', '.join(caps)} while it ran: the board's power limit)")  # fmt: skip
    floor = want.floor if want.floor is not None else LOW_SHARE * at
    share = measured / at
    basis = f"{at:.4g}{where} ({source})"
    active = links_active(pair, found)
    if active is not None and active < found.nvlink_links:  # a link down is a fault, whatever the figure
        return Health("low", share, f"{share:.0%} of {basis}: NVLink: {active} of {found.nvlink_links} links "
                                    f"active", at, source)  # fmt: skip
    if measured >= floor:
        above = "; above what it should reach: the machine's facts may be wrong" if share > ABOVE_SHARE else ""
        seen = [t for t in throttle or () if t not in caps or not where]
        noted = f"; throttled while it ran: {', '.join(seen)}" if seen else ""
        noted += f"; {lowered}" if lowered else ""
        return Health("ok", share, f"{share:.0%} of {basis}{above}{noted}", at, source)
    reasons = []
    over_pcie = kind in ("h2d", "d2h") or (kind in ("peer", "busbw") and found is not None and (
        not found.nvlink_gbps or (pair is not None and not pair.nvlinks)))  # fmt: skip
    note = link_note(gpu) if over_pcie else None
    if note:
        reasons.append(note)
    if kind == "peer" and path == "through host":
        reasons.append("peer access off: the driver stages the copy through host memory")
    elif kind == "peer" and path and not over_pcie and path.startswith("PCIe"):  # "P2P" alone: the path is unknown
        reasons.append(f"the copy took {path}, not NVLink")
    if throttle:
        reasons.append("throttled while it ran: " + ", ".join(throttle))
    if lowered:
        reasons.append(lowered)
    why = "; ".join(reasons) if reasons else "no reason could be read from the machine's state"
    below = (f"below its pass floor {want.floor:.4g}, " if want.floor is not None
             else f"below {LOW_SHARE:.0%} of it (its public pass floor is a larger message's), "
             if FLOOR_OF_ANOTHER_SIZE in want.source
             else f"below {LOW_SHARE:.0%} of it (no public pass floor), ")  # fmt: skip
    return Health("low", share, f"{share:.0%} of {basis}, {below}{why}", at, source)
