"""What a benchmark run really ran with: torch, CUDA and driver versions, GPUs, threads.

asv records what the matrix *asked* for (``torch==2.13.0``); this records what the
benchmark process *imported*. ``record()`` is called from the suite's ``setup_cache``
inside every asv environment and appends one JSON line to
``<asv dir>/runinfo/<env name>.jsonl``; ``devbench.report`` joins the lines to results
by environment, machine and time.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from devbench.files import append_jsonl, read_jsonl

#: Folder beside asv's results/env/html (asv.conf.json keeps them all under .asv/).
RUNINFO_DIR = Path(".asv") / "runinfo"


def collect() -> dict[str, Any]:
    """The versions and devices of this process, flat, JSON-serializable."""
    # Imported here: the report reads run records and must never import torch.
    from devbench.collectives import nccl_version
    from devbench.devices import describe, gpu_summary

    rec = describe()
    summary = gpu_summary(rec)
    return {
        "time": time.time(),
        "machine": os.environ.get("ASV_MACHINE") or platform.node(),
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


def existing_env_name(executable: str | None = None) -> str:
    """The name asv gives an ``-E existing:PYTHON`` environment (it passes none to it)."""
    exe = executable or sys.executable
    return "existing-py" + exe.replace(os.path.sep, "_")


def runinfo_dir() -> Path:
    """Where run records go: under the asv config's folder when asv runs us."""
    base = Path(os.environ.get("ASV_CONF_DIR", "."))
    return base / RUNINFO_DIR


def record(directory: Path | None = None) -> Path:
    """Append this process's run record; return the file written."""
    info = collect()
    return append_jsonl(directory or runinfo_dir(), info["env_name"], [info], sort_keys=True)


def load(directory: Path) -> list[dict[str, Any]]:
    """Every run record under ``directory``; unreadable lines are skipped."""
    return read_jsonl(directory)
