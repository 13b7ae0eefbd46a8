"""Datasheet peak dense throughput of common GPUs, in TFLOP/s (decimal), by dtype.

Dense figures (no 2:4 sparsity), matrix units with float32 accumulation, boost clock, as
NVIDIA's datasheets and architecture whitepapers state them. ``None``: the GPU has no
matrix-unit path for that dtype. No torch import: ``devbench.report`` uses this table.
"""

from __future__ import annotations

#: (substring of torch.cuda.get_device_name(), label, {dtype: TFLOP/s}), most specific first.
GPU_PEAKS: list[tuple[str, str, dict[str, float | None]]] = [
    ("H200 NVL", "H200 NVL", {"float32": 60.0, "tf32": 417.5, "bfloat16": 835.5, "float16": 835.5}),
    ("H200", "H200 SXM", {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4}),
    ("H100 NVL", "H100 NVL", {"float32": 60.0, "tf32": 417.5, "bfloat16": 835.5, "float16": 835.5}),
    ("H100 PCIe", "H100 PCIe", {"float32": 51.0, "tf32": 378.0, "bfloat16": 756.0, "float16": 756.0}),
    ("H100", "H100 SXM", {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4}),
    ("A100", "A100", {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0}),
    ("L4", "L4", {"float32": 30.3, "tf32": 60.0, "bfloat16": 121.0, "float16": 121.0}),
    ("RTX 4090", "GeForce RTX 4090", {"float32": 82.6, "tf32": 82.6, "bfloat16": 165.2, "float16": 165.2}),
    ("V100-PCIE", "V100 PCIe", {"float32": 14.0, "tf32": None, "bfloat16": None, "float16": 112.0}),
    ("V100", "V100 SXM2", {"float32": 15.7, "tf32": None, "bfloat16": None, "float16": 125.0}),
    ("T4", "T4", {"float32": 8.1, "tf32": None, "bfloat16": None, "float16": 65.0}),
]


def gpu_peak(gpu_name: str | None, dtype: str) -> float | None:
    """Datasheet TFLOP/s of ``gpu_name`` for ``dtype``; ``None`` when unknown."""
    if not gpu_name:
        return None
    for key, _label, peaks in GPU_PEAKS:
        if key.lower() in gpu_name.lower():
            return peaks.get(dtype)
    return None
