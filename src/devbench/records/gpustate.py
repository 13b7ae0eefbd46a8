"""The GPU's state around each GPU benchmark, read through NVML, never changed.

A figure measured while the GPU was power- or heat-limited is not the figure of the
GPU; nvbench throws such samples away, devbench keeps them and says so. The suite's
``@suite.instrumented`` calls ``record`` after every ``setup`` ("before") and in every
``teardown`` ("after") of a benchmark that created a CUDA context; each call appends
one JSON line per GPU to ``.asv/gpustate/<machine>.jsonl`` with the SM and memory
clocks, temperature, power, the active clock-event ("throttle") reasons, and NVML's
cumulative power/thermal violation counters, so the report can tell whether the GPU
was held back at any moment between the two lines, not only at the instants read.

No NVML (no driver, no nvidia-ml-py, a CPU-only machine): nothing is written. Only
NVML's query functions are called; clocks, power limits and modes are left alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devbench.records import files
from devbench.records.files import append_jsonl, read_jsonl

#: Folder beside asv's results (asv.conf.json keeps results, env and html under .asv/).
GPUSTATE_DIR = Path(".asv") / "gpustate"

#: NVML clock-event reason bits that mean "held back", by name (idle and application
#: clock settings are not throttling; sync boost follows another GPU): nvidia-ml-py's
#: clock-throttle reason constants, by value (``tests/test_nvml_names.py`` holds them to the installed module)
THROTTLE_BITS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "board_limit": 0x200,
    "reliability": 0x400,
}
OTHER_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sync_boost": 0x10, "display_clock_setting": 0x100}
_KNOWN_BITS = sum({**THROTTLE_BITS, **OTHER_BITS}.values())


def _unknown(mask: int) -> list[str]:
    """Bits of ``mask`` that no name here has (a newer driver's reason), each as its hex value: never dropped."""
    rest = mask & ~_KNOWN_BITS
    return [f"unknown_{1 << b:#x}" for b in range(rest.bit_length()) if rest >> b & 1]


def reasons(mask: int) -> list[str]:
    """Names of the clock-event reason bits set in ``mask``."""
    return [name for name, bit in {**THROTTLE_BITS, **OTHER_BITS}.items() if mask & bit] + _unknown(mask)


def throttling(mask: int) -> list[str]:
    """Names of the reasons in ``mask`` that hold the clocks down; a bit no name here has counts, by its value
    (a verdict names it rather than reading the GPU as free)."""
    return [name for name, bit in THROTTLE_BITS.items() if mask & bit] + _unknown(mask)


_NVML: Any = None


def _nvml():
    """pynvml, initialized once per process (NVML releases it at exit), or None."""
    global _NVML
    if _NVML is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML = pynvml
        except Exception:  # noqa: BLE001 - no module, no library, no driver: no state to read
            _NVML = False
    return _NVML or None


def _read(fn, *args) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a field this GPU or driver does not report
        return None


#: The clock-event reasons' reader, newest name first: nvidia-ml-py defines both names whatever the driver, and a
#: driver older than R535 answers the newer one with NVML_ERROR_FUNCTION_NOT_FOUND, so the older is tried next.
CLOCK_EVENT_READERS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def clock_event_mask(nv: Any, handle: Any) -> int | None:
    """The GPU's active clock-event reason bits, by whichever reader its driver answers; None when none does."""
    for name in CLOCK_EVENT_READERS:
        fn = getattr(nv, name, None)
        mask = _read(fn, handle) if fn is not None else None
        if mask is not None:
            return int(mask)
    return None


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """``"00000000:3B:00.0"`` or ``"0000:3b:00.0"`` -> (domain, bus, device); None if unparsable."""
    try:
        domain, bus, rest = str(bus_id).strip().split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except (ValueError, AttributeError):
        return None


def match_nvml(cuda: Sequence[dict[str, Any]], nvml: Sequence[dict[str, Any]]) -> list[int | None]:
    """For each CUDA device, the NVML index of the same GPU (by UUID, else by PCI bus id); None if none matches."""
    by_uuid = {str(g["uuid"]).lower(): i for i, g in enumerate(nvml) if g.get("uuid")}
    by_pci = {k: i for i, g in enumerate(nvml) if (k := pci_key(g.get("pci_bus_id"))) is not None}
    out: list[int | None] = []
    for c in cuda:
        hit = by_uuid.get(str(c.get("uuid")).lower()) if c.get("uuid") else None
        if hit is None:
            hit = by_pci.get(pci_key(c.get("pci_bus_id")))
        out.append(hit)
    return out


def nvml_identity(nv: Any, handle: Any) -> dict[str, Any]:
    """UUID and PCI bus id of one NVML device (None for what the driver does not report)."""

    def text(v: Any) -> str | None:
        return v.decode() if isinstance(v, bytes) else v

    try:
        uuid = text(nv.nvmlDeviceGetUUID(handle))
    except Exception:
        uuid = None
    try:
        info = nv.nvmlDeviceGetPciInfo(handle)
        bus = text(getattr(info, "busId", None) or getattr(info, "busIdLegacy", None))
    except Exception:
        bus = None
    return {"uuid": uuid, "pci_bus_id": bus}


def all_handles(nv: Any) -> list[Any]:
    """NVML's handle of each GPU it counts, by NVML index; None for one this process may not open (NVML counts the
    GPUs a cgroup or a scheduler hides, and ``nvmlDeviceGetHandleByIndex`` raises ``NoPermission`` for those)."""
    try:
        count = nv.nvmlDeviceGetCount()
    except Exception:  # noqa: BLE001 - NVML without devices
        return []
    out = []
    for i in range(count):
        try:
            out.append(nv.nvmlDeviceGetHandleByIndex(i))
        except Exception:  # noqa: BLE001 - no permission, lost off the bus: that GPU alone is unknown
            out.append(None)
    return out


_NO_IDENTITY = {"uuid": None, "pci_bus_id": None}


def snapshot(cuda: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One record per GPU NVML sees, or [] without NVML. Never raises.

    ``index`` is NVML's; ``cuda_index`` is the CUDA device of this process that is the same
    GPU (matched by UUID, else PCI bus id: ``devices.match_nvml``), or None when this
    process does not see it or ``cuda`` (``devices.cuda_identities()``) is not given.
    """
    nv = _nvml()
    if nv is None:
        return []
    out = []
    try:
        handles = all_handles(nv)
        identities = [nvml_identity(nv, h) if h is not None else _NO_IDENTITY for h in handles]
        cuda_of = {m: c for c, m in enumerate(match_nvml(cuda or [], identities)) if m is not None}
        for i, h in enumerate(handles):
            if h is None:  # a GPU this process may not open: no record of it
                continue
            mask = clock_event_mask(nv, h)
            power = _read(nv.nvmlDeviceGetPowerUsage, h)
            limit = _read(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            default = _read(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)
            rec: dict[str, Any] = {
                "index": i,
                "cuda_index": cuda_of.get(i),
                **identities[i],
                "name": _read(nv.nvmlDeviceGetName, h),
                "sm_clock_mhz": _read(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                "mem_clock_mhz": _read(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                "max_sm_clock_mhz": _read(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                "temperature_c": _read(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                "power_w": power / 1e3 if power is not None else None,
                "power_limit_w": limit / 1e3 if limit is not None else None,
                "default_power_limit_w": default / 1e3 if default is not None else None,
                "reasons": reasons(mask) if mask is not None else None,
                "throttling": throttling(mask) if mask is not None else None,
            }
            for policy, key in (("NVML_PERF_POLICY_POWER", "power"), ("NVML_PERF_POLICY_THERMAL", "thermal")):
                v = _read(nv.nvmlDeviceGetViolationStatus, h, getattr(nv, policy, -1))
                rec[f"{key}_violation_ns"] = getattr(v, "violationTime", None)
            out.append(rec)
    except Exception:  # noqa: BLE001 - a GPU vanished mid-read: keep what was read
        pass
    return out


def gpustate_dir(benchmark_file: str | os.PathLike[str] | None = None) -> Path:
    """``.asv/gpustate`` of the project: found from a benchmark file (asv runs setup in a temp folder)."""
    if benchmark_file is not None:
        return Path(benchmark_file).resolve().parents[1] / GPUSTATE_DIR
    return Path(os.environ.get("ASV_CONF_DIR", ".")) / GPUSTATE_DIR


def record(
    benchmark: str,
    params: dict[str, Any],
    phase: str,
    folder: Path,
    machine: str | None = None,
    gpus: list[dict[str, Any]] | None = None,
    figure: str | None = None,
) -> Path | None:
    """Append one line per GPU for ``benchmark`` (``module.Class``) with ``params`` at ``phase``, and ``figure``
    (the method's name) where the state was read while that one figure was timed.

    Returns the file written, or None when there was no GPU state to write.
    """
    gpus = snapshot() if gpus is None else gpus
    if not gpus:
        return None
    if machine is None:
        machine = files.default_machine()
    now = time.time()
    which = {"figure": figure} if figure else {}
    # the commit and environment asv ran it for (asv sets them in every benchmark process): the report attaches a
    # record to that run's result, never to another commit's or environment's figure of the same name
    which.update({k: os.environ[v] for k, v in (("commit", "ASV_COMMIT"), ("env", "ASV_ENV_NAME"))
                  if os.environ.get(v)})  # fmt: skip
    records = [{"time": now, "machine": machine, "benchmark": benchmark, **which, "params": params, "phase": phase, **g}
               for g in gpus]  # fmt: skip
    return append_jsonl(folder, machine, records)


def load(folder: Path, machine: str | None = None) -> list[dict[str, Any]]:
    """Every record under ``folder`` (none if it is absent), only ``machine``'s where one is named; unreadable
    lines are skipped."""
    return [r for r in read_jsonl(folder) if isinstance(r.get("time"), (int, float))
            and (machine is None or r.get("machine") == machine)]  # fmt: skip


def _cuda_device(record: dict[str, Any]) -> int | None:
    """The CUDA device of the process that recorded ``record`` (its ``cuda_index``: NVML matched it by UUID or PCI
    bus id; None for an NVML device that process could not see), or NVML's index in records older than that."""
    return record["cuda_index"] if "cuda_index" in record else record.get("index", 0)


def figure_gpu(params: Any) -> int:
    """The CUDA device whose state judges a figure with ``params``: a route's source (``route`` "1->0": 1), else
    device 0, where a single-GPU figure runs (the first device its process sees)."""
    route = params.get("route") if isinstance(params, dict) else None
    if isinstance(route, str) and "->" in route:
        try:
            return int(route.strip(" '\"").split("->", 1)[0])
        except ValueError:
            pass
    return 0


def on_figure_gpu(record: dict[str, Any]) -> bool:
    """Whether ``record`` is the state of the GPU its figure ran on (``figure_gpu``, in CUDA's numbering)."""
    return _cuda_device(record) == figure_gpu(record.get("params"))


def while_timed(records: Sequence[dict[str, Any]], cls: str, params: dict[str, Any], gpu: int | None = None,
                figure: str | None = None) -> dict | None:  # fmt: skip
    """CUDA device ``gpu``'s state while ``figure`` (a method's name) of benchmark class ``cls`` ("module.Class")
    at ``params`` was timed: the newest record of its own measured blocks (``timed``), else of set-up to tear-down
    (``during``), or None. A record keyed by another figure (a twin timed from the same workload) is not its
    state; one keyed by none (asv's own process, one figure each) is. The GPU is the one the figure ran on
    (``cuda_index``; ``figure_gpu`` unless ``gpu`` names it), never NVML's device of the same number: under
    ``CUDA_VISIBLE_DEVICES=2,3`` CUDA's device 0 is NVML's 2. Its ``sm_clock_mhz`` (median), ``throttling`` (every
    reason seen) and ``pcie_gen``/``pcie_width`` (the link under that load) are what ``devbench.records.expected.judge``
    reads."""
    want = {k: v for k, v in params.items()}
    gpu = figure_gpu(want) if gpu is None else gpu
    for phase in ("timed", "during"):
        found = [r for r in records if r.get("benchmark") == cls and r.get("phase") == phase
                 and r.get("params") == want and _cuda_device(r) == gpu
                 and (figure is None or r.get("figure") in (None, figure))]  # fmt: skip
        if found:
            return max(found, key=lambda r: r.get("time", 0.0))
    return None


# --- Sampling during the timed work ----------------------------------------------------------------------

#: How often the sampler reads NVML while work is timed (NVML refreshes power about every 20-100 ms).
SAMPLE_EVERY_S = 0.05


def read_now(nv: Any, handles: Sequence[Any]) -> list[dict[str, Any]]:
    """SM clock, power, temperature and throttle reasons of each GPU, now (cheap: no identities)."""
    out = []
    for h in handles:
        if h is None:  # a GPU this process may not open (``all_handles``): nothing read, its place kept
            out.append({"sm_clock_mhz": None, "power_w": None, "temperature_c": None, "throttling": None,
                        "pcie_gen": None, "pcie_width": None})  # fmt: skip
            continue
        mask = clock_event_mask(nv, h)
        power = _read(nv.nvmlDeviceGetPowerUsage, h)
        out.append(
            {
                "sm_clock_mhz": _read(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                "power_w": power / 1e3 if power is not None else None,
                "temperature_c": _read(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                "throttling": throttling(mask) if mask is not None else None,  # None: not read, never "free"
                # the link as trained now: an idle GPU may train it down, so it is read while work runs
                "pcie_gen": _read(getattr(nv, "nvmlDeviceGetCurrPcieLinkGeneration", None), h),
                "pcie_width": _read(getattr(nv, "nvmlDeviceGetCurrPcieLinkWidth", None), h),
            }
        )
    return out


def summarize(samples: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per GPU, over ``samples`` (each: one ``read_now``): median and range of clock and power, hottest
    temperature, every throttle reason seen, and the number of samples."""
    import statistics

    if not samples:
        return []
    out = []
    for i in range(len(samples[0])):
        per = [s[i] for s in samples if i < len(s)]

        def values(key: str, per: list = per) -> list[float]:
            return [float(r[key]) for r in per if isinstance(r.get(key), (int, float))]

        clocks, watts, temps = values("sm_clock_mhz"), values("power_w"), values("temperature_c")
        gens, widths = values("pcie_gen"), values("pcie_width")
        read = [r["throttling"] for r in per if isinstance(r.get("throttling"), list)]
        seen = sorted({t for ts in read for t in ts}) if read else None  # None: no sample read the reasons
        out.append(
            {
                "index": i,
                "samples": len(per),
                "sm_clock_mhz": statistics.median(clocks) if clocks else None,
                "sm_clock_mhz_min": min(clocks) if clocks else None,
                "power_w": statistics.median(watts) if watts else None,
                "power_w_max": max(watts) if watts else None,
                "temperature_c": max(temps) if temps else None,
                "throttling": seen,
                # the fastest link seen while the work ran: what it trained at under load
                "pcie_gen": int(max(gens)) if gens else None,
                "pcie_width": int(max(widths)) if widths else None,
            }
        )
    return out


class Sampler:
    """Reads every GPU's clock, power and throttle reasons on a thread while timed work runs.

    ``with Sampler() as s: ...`` then ``s.summary()``: per GPU, the median SM clock and
    power over the samples taken inside the block (at least one, read at its start and
    end). Without NVML it samples nothing and ``summary()`` is ``[]``. ``read`` (a
    callable returning one ``read_now``-shaped list) replaces NVML in tests.
    """

    def __init__(self, every_s: float = SAMPLE_EVERY_S, read: Any = None) -> None:
        import threading

        self.every_s = every_s
        self._read = read
        self._samples: list[list[dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread: Any = None

    def _reader(self) -> Any:
        if self._read is not None:
            return self._read
        nv = _nvml()
        if nv is None:
            return None
        handles = all_handles(nv)
        if not any(h is not None for h in handles):  # NVML without devices it may open: nothing to sample
            return None
        return lambda: read_now(nv, handles)

    def __enter__(self) -> Sampler:
        import threading

        read = self._reader()
        if read is None:
            return self
        self._samples.append(read())

        def loop() -> None:
            while not self._stop.wait(self.every_s):
                self._samples.append(read())

        self._final = read
        self._thread = threading.Thread(target=loop, name="devbench-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._samples.append(self._final())
        self._thread = None

    def summary(self) -> list[dict[str, Any]]:
        return summarize(self._samples)
