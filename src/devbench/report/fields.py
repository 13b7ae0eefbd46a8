"""What an asv result file holds, as the report reads it: the columns, the statistics, one file as stored,
and the small readers of its fields. Shared by ``report.load`` (which reads the files) and
``report.table`` (which builds the frame). No torch."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

#: Statistics asv keeps per parameter combination (``stats_*`` columns of a result file).
STATS = ["ci_99_a", "ci_99_b", "q_25", "q_75", "number", "repeat"]


#: Columns every frame has, in order; parameter and machine columns follow.
BASE_COLUMNS = [
    "machine",
    "env",
    "commit",
    "commit_short",
    "date",
    "benchmark",
    "suite",
    "name",
    "type",
    "unit",
    "params",
    "status",
    "value",
    *STATS,
    "version",
    "version_current",
    "started_at",
    "python",
    "requirements",
    "torch_version",
    "cuda_version",
    "file",
]


#: Columns stored as pandas categoricals.
CATEGORICAL = ["machine", "env", "commit", "commit_short", "benchmark", "suite", "name", "type", "unit", "params",
               "status", "version", "python", "requirements", "file"]  # fmt: skip


def parse_param(text: Any) -> Any:
    """asv stores parameter values as ``repr`` strings: ``"'cpu'"`` -> ``"cpu"``, ``"4096"`` -> ``4096``."""
    if not isinstance(text, str):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return value if isinstance(value, (str, int, float, bool)) or value is None else text


#: Columns that vary within a result file (the rest are the file's: machine, env, commit, ...).
ROW_COLUMNS = ["benchmark", "suite", "name", "type", "unit", "params", "status", "value", *STATS, "version",
               "version_current", "started_at"]  # fmt: skip


@dataclass
class _ResultFile:
    """One asv result file, as stored: ``results`` maps a benchmark to its row of ``result_columns``."""

    env_name: str
    commit_hash: str
    date: Any
    params: dict[str, Any]
    requirements: dict[str, Any]
    column: dict[str, int]
    results: dict[str, list[Any]]
    #: each benchmark's parameter values as a tuple of tuples, checked hashable
    frozen_params: dict[str, tuple[tuple[Any, ...], ...]] = field(default_factory=dict)
    #: benchmarks left out of this file, and why (the rest of the file is read)
    bad: dict[str, str] = field(default_factory=dict)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field(entry: list[Any], index: int | None) -> Any:
    return entry[index] if index is not None and index < len(entry) else None


def _bench_fields(key: str, meta: dict[str, Any]) -> dict[str, Any]:
    kind = meta.get("type") or _type_from_name(key)
    return {
        "suite": key.split(".", 1)[0] if "." in key else "",
        "name": key.rsplit(".", 1)[-1],
        "type": kind,
        "unit": meta.get("unit") or ("seconds" if kind == "time" else "unit"),
        "meta_version": meta.get("version"),
    }


def _type_from_name(name: str) -> str:
    last = name.rsplit(".", 1)[-1]
    for prefix, kind in (("time_", "time"), ("track_", "track"), ("peakmem_", "peakmemory"), ("mem_", "memory")):
        if last.startswith(prefix):
            return kind
    return "unknown"
