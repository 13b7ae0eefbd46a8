"""What a benchmark run really ran with: torch, CUDA and driver versions, GPUs, threads.

asv records what the matrix *asked* for (``torch==2.13.0``); this records what the
benchmark process *imported*. ``record()`` is called from the suite's ``setup_cache``
inside every asv environment and appends one JSON line to
``<asv dir>/runinfo/<env name>.jsonl``; ``devbench.report`` joins the lines to results
by environment, machine and time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from devbench.records.files import append_jsonl, read_jsonl

#: Folder beside asv's results/env/html (asv.conf.json keeps them all under .asv/).
RUNINFO_DIR = Path(".asv") / "runinfo"


def existing_env_name(executable: str | None = None) -> str:
    """The name asv gives an ``-E existing:PYTHON`` environment (it passes none to it)."""
    exe = executable or sys.executable
    return "existing-py" + exe.replace(os.path.sep, "_")


def runinfo_dir() -> Path:
    """Where run records go: under the asv config's folder when asv runs us."""
    base = Path(os.environ.get("ASV_CONF_DIR", "."))
    return base / RUNINFO_DIR


def record(info: dict[str, Any], directory: Path | None = None) -> Path:
    """Append a run record (``devices.run_info()``); return the file written."""
    return append_jsonl(directory or runinfo_dir(), info["env_name"], [info], sort_keys=True)


def load(directory: Path) -> list[dict[str, Any]]:
    """Every run record under ``directory``; unreadable lines are skipped."""
    return read_jsonl(directory)
