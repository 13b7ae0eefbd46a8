"""Which path a GPU -> GPU copy took, read through NVML: the bytes a GPU has sent over NVLink (its traffic counter)
and whether NVML reports NVLink peer-to-peer between two CUDA devices, each matched to its NVML device by UUID or
PCI bus id (``gpustate.match_nvml``), never by index. Only NVML's query functions are called. No torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devbench.records.gpustate import _NO_IDENTITY, _nvml, all_handles, match_nvml, nvml_identity

#: NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: NVLink data payload sent by a GPU, cumulative, in KiB
NVLINK_TX_KIB_FIELD = 138
#: a field value's scope that sums the counter over every link of the GPU (UINT_MAX)
ALL_LINKS = 0xFFFFFFFF


def nvlink_sent_bytes(nv: Any, handle: Any) -> int | None:
    """Bytes this GPU has sent over NVLink so far (every link), or None where NVML does not count them."""
    try:
        (value,) = nv.nvmlDeviceGetFieldValues(handle, [(NVLINK_TX_KIB_FIELD, ALL_LINKS)])
    except Exception:  # noqa: BLE001 - an old driver, no NVLink, no such field
        return None
    if getattr(value, "nvmlReturn", 1) != 0:
        return None
    return int(value.value.ullVal) * 1024


def cuda_handles(nv: Any, cuda: Sequence[dict[str, Any]]) -> list[Any]:
    """The NVML handle of each CUDA device in ``cuda`` (``devices.cuda_identities()``), matched by UUID,
    else PCI bus id, never by index; None where NVML has no such GPU."""
    every = all_handles(nv)
    identities = [nvml_identity(nv, h) if h is not None else _NO_IDENTITY for h in every]
    return [every[m] if m is not None else None for m in match_nvml(cuda, identities)]


def nvlink_between(nv: Any, src: Any, dst: Any) -> bool | None:
    """Whether NVML reports NVLink peer-to-peer from handle ``src`` to ``dst`` (None: not known)."""
    if src is None or dst is None:
        return None
    try:
        return nv.nvmlDeviceGetP2PStatus(src, dst, nv.NVML_P2P_CAPS_INDEX_NVLINK) == nv.NVML_P2P_STATUS_OK
    except Exception:  # noqa: BLE001 - the query is not supported here
        return None


def _cuda_handles(indices: Sequence[int], nv: Any, cuda: Sequence[dict[str, Any]]) -> list[Any]:
    """``cuda_handles`` of these CUDA device indices (``cuda``: ``devices.cuda_identities()``)."""
    handles = cuda_handles(nv, cuda)
    return [handles[i] if i < len(handles) else None for i in indices]


def nvlink_reader(cuda_index: int, nv: Any, cuda: Sequence[dict[str, Any]]) -> Any:
    """A callable returning the bytes CUDA device ``cuda_index`` has sent over NVLink so far (None: unknown)."""
    nv = nv if nv is not None else _nvml()
    handle = _cuda_handles([cuda_index], nv, cuda)[0] if nv is not None else None
    return lambda: nvlink_sent_bytes(nv, handle) if handle is not None else None


def nvlink_joined(src: int, dst: int, nv: Any, cuda: Sequence[dict[str, Any]]) -> bool | None:
    """Whether NVML reports NVLink peer-to-peer between CUDA devices ``src`` and ``dst`` (None: not known)."""
    nv = nv if nv is not None else _nvml()
    if nv is None:
        return None
    return nvlink_between(nv, *_cuda_handles([src, dst], nv, cuda))
