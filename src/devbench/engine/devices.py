"""Devices: the d2l "GPUs" helpers, same-device moves, cross-device checks, and describe().

Nothing here touches CUDA at import time. ``num_gpus()`` goes through
``torch.cuda.device_count()``; with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (set by
``devbench/__init__.py`` unless the user chose otherwise) PyTorch answers it from NVML
instead of ``cudaGetDeviceCount``, which would initialize the driver and leave forked
children (asv's forkserver) unable to use CUDA. Benchmarks still call it in ``setup`` only.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from devbench.records.nvlink import cuda_handles, nvlink_between

__all__ = [
    "CrossDeviceError",
    "as_device",
    "check_same_device",
    "cpu",
    "describe",
    "gpu",
    "move",
    "no_cuda_reason",
    "num_gpus",
    "synchronize",
    "try_all_gpus",
    "try_gpu",
]

T = TypeVar("T", torch.Tensor, nn.Module)


def cpu() -> torch.device:
    """The CPU device: all cores and main memory."""
    return torch.device("cpu")


def gpu(i: int = 0) -> torch.device:
    """GPU ``i`` (``cuda:i``), whether or not it exists."""
    if i < 0:
        raise ValueError(f"GPU index must be >= 0, got {i}")
    return torch.device(f"cuda:{i}")


def num_gpus() -> int:
    """Number of CUDA GPUs visible to this process (0 on a CPU-only build)."""
    if not torch.backends.cuda.is_built():
        return 0
    return torch.cuda.device_count()


def no_cuda_reason() -> str | None:
    """Why CUDA cannot be used here, or ``None`` when a GPU is visible."""
    if not torch.backends.cuda.is_built():
        return f"no CUDA: torch {torch.__version__} is a CPU-only build"
    if num_gpus() == 0:
        return "no CUDA GPU visible to this process"
    return None


def initialise_cuda() -> bool:
    """Initialise CUDA in this process where there is a GPU (a training loop has, by its first step); True if so.

    Until CUDA is initialised torch does not keep the device count: every ``num_gpus()`` loads NVML
    and counts the devices again, so a benchmark of ``try_gpu`` would time that instead."""
    if num_gpus() == 0:
        return False
    torch.cuda.init()
    return True


def try_gpu(i: int = 0) -> torch.device:
    """``gpu(i)`` if it exists, else ``cpu()``."""
    return gpu(i) if num_gpus() >= i + 1 else cpu()


def try_all_gpus() -> list[torch.device]:
    """Every GPU, or ``[cpu()]`` when there is none."""
    n = num_gpus()
    return [gpu(i) for i in range(n)] if n else [cpu()]


def as_device(device: torch.device | str | int) -> torch.device:
    """``device`` as a ``torch.device`` with an explicit index for CUDA.

    ``torch.device("cuda") != torch.device("cuda:0")``, while every tensor reports an
    indexed device; compare tensors' devices against this, never against a bare "cuda".
    """
    if isinstance(device, int):
        return gpu(device)
    dev = torch.device(device)
    # "cuda" means the current GPU; compare against an explicit index.
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _module_devices(module: nn.Module) -> set[torch.device]:
    tensors = list(module.parameters()) + list(module.buffers())
    return {t.device for t in tensors if not isinstance(t, nn.parameter.UninitializedTensorMixin)}


def move(obj: T, device: torch.device | str | int, non_blocking: bool = False) -> T:
    """Move a tensor or module to ``device``; return the very same object if it is there.

    This is the chapter's ``Z.cuda(1) is Z``: a same-device move allocates and copies
    nothing. Modules are moved in place (as ``nn.Module.to`` does) and returned.
    """
    dev = as_device(device)
    if isinstance(obj, torch.Tensor):
        if obj.device == dev:
            return obj
        return obj.to(dev, non_blocking=non_blocking)
    if isinstance(obj, nn.Module):
        if _module_devices(obj) == {dev}:
            return obj
        return obj.to(dev, non_blocking=non_blocking)
    raise TypeError(f"move() takes a torch.Tensor or nn.Module, got {type(obj).__name__}")


class CrossDeviceError(RuntimeError):
    """Raised when one operation gets tensors that live on different devices."""


def check_same_device(*tensors: torch.Tensor, op: str = "operation") -> torch.device:
    """Return the common device of ``tensors``; raise ``CrossDeviceError`` naming them if not.

    PyTorch's own error for ``X + Y`` across devices is raised deep inside the dispatcher;
    this one says which arguments disagree and how to fix it, before any work is queued.
    """
    if not tensors:
        raise ValueError(f"{op}: check_same_device() needs at least one tensor")
    first = tensors[0].device
    for pos, t in enumerate(tensors[1:], start=1):
        if t.device != first:
            raise CrossDeviceError(
                f"{op}: argument 0 is on {first} but argument {pos} is on {t.device}; "
                f"move one of them first, e.g. move(x, {str(first)!r})"
            )
    return first


def synchronize(devices: Iterable[torch.device | str] | torch.device | str) -> None:
    """Wait for all queued work on every CUDA device given (no-op for CPU and meta).

    ``torch.cuda.synchronize()`` without an argument waits for the *current* device
    only; work on the other GPUs would still be in flight.
    """
    if isinstance(devices, (torch.device, str)):
        devices = [devices]
    for dev in devices:
        dev = torch.device(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)


# --------------------------------------------------------------------------- describe


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cuda_identities(count: int | None = None) -> list[dict[str, Any]]:
    """UUID (NVML's ``GPU-...`` form) and PCI bus id of each CUDA device this process sees.

    CUDA's device order is not NVML's: ``CUDA_VISIBLE_DEVICES`` hides and reorders GPUs,
    and CUDA orders by speed unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. These identify a
    device in both. Initializes CUDA; call it only where CUDA is in use.
    """
    out = []
    for i in range(num_gpus() if count is None else count):
        p = torch.cuda.get_device_properties(i)
        uuid = getattr(p, "uuid", None)
        bus = [getattr(p, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
        out.append({
            "uuid": f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else uuid and str(uuid),
            "pci_bus_id": f"{bus[0]:08X}:{bus[1]:02X}:{bus[2]:02X}.0" if None not in bus else None,
        })  # fmt: skip
    return out


def _nvml_info(cuda: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Driver, PCIe and NVLink facts from NVML for each CUDA device (matched by UUID or PCI bus id,
    never by index); ``{"nvml": "reason"}`` when NVML is absent."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return {"nvml": "not installed (pip install nvidia-ml-py)"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"nvml": f"unavailable: {exc}"}
    try:
        out: dict[str, Any] = {"nvml": "ok", "gpus": []}
        drv = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        handles = cuda_handles(pynvml, cuda)
        for h in handles:
            g: dict[str, Any] = {"nvml_index": None}
            if h is None:
                out["gpus"].append(g)
                continue
            for key, fn in (
                ("nvml_index", pynvml.nvmlDeviceGetIndex),
                ("pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
                ("pcie_gen_max", pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
                ("pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth),
                ("pcie_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth),
            ):
                try:
                    g[key] = int(fn(h))
                except Exception:
                    g[key] = None
            out["gpus"].append(g)
        out["nvlink_peers"] = {
            f"{i}->{j}": nvlink_between(pynvml, hi, hj)
            for i, hi in enumerate(handles)
            for j, hj in enumerate(handles)
            if i != j and hi is not None and hj is not None
        }
        if len(handles) > 1 and all(h is not None for h in handles):
            from devbench.records.topology import pair_paths

            try:
                out["pair_paths"] = {f"{i}->{j}": {**p.record(), "label": p.label}
                                     for (i, j), p in pair_paths(pynvml, handles).items()}  # fmt: skip
            except Exception:  # noqa: BLE001 - a driver without the topology calls: the rest still stands
                pass
        return out
    except Exception as exc:
        return {"nvml": f"error: {exc}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def describe() -> dict[str, Any]:
    """One record of the host and every accelerator. Never raises.

    Keys: ``host`` (cpu model, cores, threads torch uses), ``torch`` (version, build,
    CUDA runtime, cuDNN), ``driver``, ``gpu_count``, ``gpus`` (name, memory, SMs,
    compute capability, PCIe link, peer access) and ``notes`` saying what could not be
    read and why.
    """
    notes: list[str] = []
    record: dict[str, Any] = {
        "host": {
            "hostname": platform.node(),
            "os": f"{platform.system()} {platform.release()}",
            "arch": platform.machine(),
            "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "torch": {
            "version": torch.__version__,
            "cuda_built": torch.backends.cuda.is_built(),
            "cuda_runtime": torch.version.cuda,
            "cudnn": None,
            "git": getattr(torch.version, "git_version", None),
        },
        "driver": None,
        "gpu_count": 0,
        "gpus": [],
        "notes": notes,
    }
    try:
        count = num_gpus()
    except Exception as exc:  # a broken driver must not break describe()
        notes.append(f"CUDA query failed: {exc}")
        count = 0
    record["gpu_count"] = count
    if not torch.backends.cuda.is_built():
        notes.append("torch is a CPU-only build: no CUDA GPUs")
    elif count == 0:
        notes.append("no CUDA GPU visible to this process")
    if count:
        try:
            record["torch"]["cudnn"] = torch.backends.cudnn.version()
        except Exception:
            pass
        for i in range(count):
            try:
                p = torch.cuda.get_device_properties(i)
                record["gpus"].append(
                    {
                        "index": i,
                        "name": p.name,
                        "memory_gib": round(p.total_memory / 2**30, 2),
                        "sm_count": p.multi_processor_count,
                        "compute_capability": f"{p.major}.{p.minor}",
                    }
                )
            except Exception as exc:
                notes.append(f"GPU {i}: properties unavailable: {exc}")
                record["gpus"].append({"index": i, "name": None})
        peers = {}
        for i in range(count):
            for j in range(count):
                if i != j:
                    try:
                        peers[f"{i}->{j}"] = bool(torch.cuda.can_device_access_peer(i, j))
                    except Exception:
                        peers[f"{i}->{j}"] = None
        record["peer_access"] = peers
        try:
            identities = cuda_identities(count)
        except Exception as exc:
            notes.append(f"GPU identities unavailable: {exc}")
            identities = [{} for _ in range(count)]
        for g, ident in zip(record["gpus"], identities, strict=True):
            g.update(ident)
        nvml = _nvml_info(identities)
        if nvml.get("nvml") != "ok":
            notes.append(f"NVML {nvml['nvml']}: no driver/PCIe/NVLink details")
        else:
            record["driver"] = nvml["driver"]
            for g, extra in zip(record["gpus"], nvml["gpus"], strict=True):
                g.update(extra)
            record["nvlink_peers"] = nvml["nvlink_peers"]
            if "pair_paths" in nvml:  # each pair's NVLinks and PCIe ancestor (devbench.records.topology)
                record["pair_paths"] = nvml["pair_paths"]
    return record


def gpu_summary(record: dict[str, Any] | None = None) -> dict[str, str]:
    """The accelerator fields that go into an asv machine entry, as strings."""
    rec = describe() if record is None else record
    names: Sequence[str] = [g.get("name") or "?" for g in rec["gpus"]]
    if names and len(set(names)) == 1:
        gpu_name = f"{len(names)} x {names[0]}"
    else:
        gpu_name = ", ".join(names) or "none"
    first = rec["gpus"][0] if rec["gpus"] else {}
    pcie = "none" if not first else "unknown"
    if first.get("pcie_gen") and first.get("pcie_width"):
        pcie = f"gen{first['pcie_gen']} x{first['pcie_width']}"
        if first.get("pcie_gen_max") and first.get("pcie_width_max"):
            pcie += f" (max gen{first['pcie_gen_max']} x{first['pcie_width_max']})"
    return {
        "gpu": gpu_name,
        "gpu_count": str(rec["gpu_count"]),
        "cuda": rec["torch"]["cuda_runtime"] or "none",
        "driver": rec["driver"] or "none",
        "pcie": pcie,  # GPU 0's link as trained: what devbench.records.expected judges host<->device copies against
    }


def rank_device(backend: str, local_rank: int):
    """The device a rank works on: the CPU for gloo, ``cuda:local_rank`` (made current) for NCCL."""
    import torch

    if backend == "nccl":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def nccl_version() -> str | None:
    """The NCCL version torch was built with and loads ("2.21.5"), or None without NCCL."""
    import torch

    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a CPU-only build has no NCCL to ask
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def run_info() -> dict[str, Any]:
    """The versions and devices of this process, flat, JSON-serializable."""
    from devbench.records.files import default_machine
    from devbench.records.runinfo import existing_env_name

    rec = describe()
    summary = gpu_summary(rec)
    return {
        "time": time.time(),
        "machine": default_machine(),  # asv tells a benchmark no machine name; gpu-run names it (DEVBENCH_MACHINE)
        "env_name": os.environ.get("ASV_ENV_NAME") or existing_env_name(),
        "commit": os.environ.get("ASV_COMMIT"),
        "torch": rec["torch"]["version"],
        "cuda": rec["torch"]["cuda_runtime"],
        "cudnn": rec["torch"]["cudnn"],
        "nccl": nccl_version() if rec["gpu_count"] else None,
        "driver": rec["driver"],
        "gpu": summary["gpu"],
        "gpu_count": rec["gpu_count"],
        "torch_threads": rec["host"]["torch_threads"],
        "python": rec["host"]["python"],
    }
