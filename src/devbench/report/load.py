"""asv result histories into one tidy pandas DataFrame, read with asv's own loader (``asv.util.load_json``).

One row per machine x environment x commit x benchmark x parameter combination. Works on
any asv results directory (``<results>/<machine>/machine.json`` plus result files, and
``benchmarks.json`` at the top); nothing here knows this suite's benchmarks. No torch.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from asv import util as asv_util
from asv.machine import Machine
from asv.results import Results

from devbench import gpustate, runinfo


class ReportError(Exception):
    """Input the report cannot work with; the message names what is wrong."""


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


@dataclass
class Problem:
    """Something in the results the report could not use, kept for the warning and the report."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Loaded:
    """The tidy frame and what was wrong on the way."""

    frame: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    results_dir: Path | None = None
    param_columns: list[str] = field(default_factory=list)
    machine_columns: list[str] = field(default_factory=list)
    #: figures of ``python -m devbench.collectives`` runs (see ``load_collectives``)
    collectives: pd.DataFrame | None = None


def parse_param(text: Any) -> Any:
    """asv stores parameter values as ``repr`` strings: ``"'cpu'"`` -> ``"cpu"``, ``"4096"`` -> ``4096``."""
    if not isinstance(text, str):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return value if isinstance(value, (str, int, float, bool)) or value is None else text


def _type_from_name(name: str) -> str:
    last = name.rsplit(".", 1)[-1]
    for prefix, kind in (("time_", "time"), ("track_", "track"), ("peakmem_", "peakmemory"), ("mem_", "memory")):
        if last.startswith(prefix):
            return kind
    return "unknown"


def load_benchmarks(results_dir: Path, problems: list[Problem]) -> dict[str, dict[str, Any]]:
    """``benchmarks.json`` (names, units, types, versions, param names); empty if absent or bad."""
    path = results_dir / "benchmarks.json"
    if not path.is_file():
        problems.append(Problem(str(path), "missing: units, types and parameter names are guessed from the results"))
        return {}
    try:
        data = asv_util.load_json(str(path), api_version=2)
    except Exception as exc:  # asv raises UserError for bad versions, json errors for corrupt files
        problems.append(Problem(str(path), f"unreadable ({exc}); units and parameter names are guessed"))
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _machine_dirs(results_dir: Path) -> list[Path]:
    return sorted(p.parent for p in results_dir.glob("*/machine.json"))


def check_results_dir(results_dir: Path) -> list[Path]:
    """The machine folders of an asv results directory, or ``ReportError`` saying what is wrong."""
    if not results_dir.exists():
        raise ReportError(f"results directory {results_dir} does not exist (run `asv run` first, or pass --results)")
    if not results_dir.is_dir():
        raise ReportError(f"{results_dir} is not a directory")
    machines = _machine_dirs(results_dir)
    if not machines:
        if not any(results_dir.iterdir()):
            raise ReportError(f"results directory {results_dir} is empty: no asv results yet")
        raise ReportError(
            f"{results_dir} is not an asv results directory: no <machine>/machine.json in it "
            "(asv's layout is results/<machine>/machine.json and results/<machine>/<commit>-<env>.json)"
        )
    return machines


def _machine_info(folder: Path, problems: list[Problem]) -> dict[str, Any] | None:
    path = folder / "machine.json"
    try:
        data = asv_util.load_json(str(path), api_version=Machine.api_version)
    except Exception as exc:
        problems.append(Problem(str(path), f"unreadable machine file, its results are skipped ({exc})"))
        return None
    name = data.get("machine")
    if not isinstance(name, str):
        problems.append(Problem(str(path), "no machine name in it; its results are skipped"))
        return None
    return {k: v for k, v in data.items() if k != "version"}


def _result_files(folder: Path) -> Iterable[Path]:
    for path in sorted(folder.glob("*.json")):
        if path.name != "machine.json":
            yield path


def _commit_filter(commits: Iterable[str] | None) -> list[str] | None:
    return None if commits is None else [c.lower() for c in commits]


def _runinfo_index(results_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Run records (``.asv/runinfo``, beside the results) by environment name, oldest first."""
    by_env: dict[str, list[dict[str, Any]]] = {}
    for rec in runinfo.load(results_dir.parent / "runinfo"):
        if isinstance(rec.get("env_name"), str) and isinstance(rec.get("time"), (int, float)):
            by_env.setdefault(rec["env_name"], []).append(rec)
    for recs in by_env.values():
        recs.sort(key=lambda r: r["time"])
    return by_env


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


def _read_result_file(path: Path, machine: str) -> _ResultFile:
    """Read a result file with asv's own loader and format check (``asv.util.load_json``).

    The fields are those ``asv.results.Results.load`` reads; the per-benchmark rows are kept
    as the file stores them (one list per column, over the parameter combinations), which is
    what a table wants: ``Results`` turns the statistics into one dict per combination, and
    at thousands of files that costs more than everything else the loader does.
    """
    d = asv_util.load_json(str(path), api_version=Results.api_version)
    try:
        columns, results = d["result_columns"], d["results"]
        out = _ResultFile(
            env_name=d["env_name"],
            commit_hash=d["commit_hash"] or "",
            date=d["date"],
            params=d["params"],
            requirements=d["requirements"] or {},
            column={c: i for i, c in enumerate(columns)},
            results=results,
        )
    except KeyError as exc:
        raise asv_util.UserError(f"missing key {exc}") from None
    if not all(isinstance(x, dict) for x in (out.results, out.params, out.requirements)):
        raise asv_util.UserError("'results', 'params' and 'requirements' must be objects")
    if not isinstance(out.env_name, str) or not isinstance(out.commit_hash, str):
        raise asv_util.UserError("'env_name' and 'commit_hash' must be strings")
    if out.params.get("machine") != machine:
        raise asv_util.UserError(f"machine name is not {machine!r}")
    # What the table is built from must have asv's shapes, so that a damaged file is named
    # and skipped here instead of breaking the whole load (statistics are coerced later).
    i_params, i_result = out.column.get("params"), out.column.get("result")
    for key, entry in out.results.items():
        if not isinstance(entry, list):
            raise asv_util.UserError(f"result of {key} is not a list of columns")
        params = _field(entry, i_params) or []
        if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
            raise asv_util.UserError(f"parameters of {key} are not lists of values")
        frozen = tuple(tuple(p) for p in params)
        try:
            hash(frozen)  # the parameter layout is cached by it
        except TypeError:
            raise asv_util.UserError(f"parameters of {key} are not plain values") from None
        out.frozen_params[key] = frozen
        if not isinstance(_field(entry, i_result), (list, int, float, type(None))):
            raise asv_util.UserError(f"result of {key} is neither a number nor a list")
    return out


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


def _actual_versions(records: list[dict[str, Any]], started: list[float]) -> tuple[Any, Any]:
    """torch and CUDA of the run record nearest to when these results were measured (12 h at most)."""
    if not records or not started:
        return None, None
    when = sorted(started)[len(started) // 2] / 1e3
    best = min(records, key=lambda r: abs(r["time"] - when))
    if abs(best["time"] - when) > 12 * 3600:
        return None, None
    return best.get("torch"), best.get("cuda")


def load_results(
    results_dir: str | os.PathLike[str],
    *,
    machines: Iterable[str] | None = None,
    envs: Iterable[str] | None = None,
    commits: Iterable[str] | None = None,
    benchmarks: str | None = None,
) -> Loaded:
    """Every result under ``results_dir`` as one tidy frame (see ``BASE_COLUMNS``).

    ``machines``/``envs`` select by exact name (``ReportError`` lists the known ones when
    one does not exist), ``commits`` by hash prefix, ``benchmarks`` by regular expression
    (searched in the full name). A result file that cannot be read is skipped and named in
    ``problems``; so is a benchmark whose code changed since it was measured
    (``version_current`` is False on those rows: asv compare and publish drop them).
    """
    root = Path(results_dir)
    folders = check_results_dir(root)
    problems: list[Problem] = []
    known = load_benchmarks(root, problems)
    pattern = None
    if benchmarks:
        try:
            pattern = re.compile(benchmarks)
        except re.error as exc:
            raise ReportError(f"--benchmarks {benchmarks!r} is not a regular expression: {exc}") from None
    want_commits = _commit_filter(commits)
    runs = _runinfo_index(root)

    # Per-key lists (one entry per benchmark in a file) are repeated over its parameter
    # combinations at the end; per-row lists get one entry per combination; per-file
    # fields (machine, env, commit, ...) are taken by file index.
    k_file: list[int] = []
    k_bench: list[str] = []
    k_version: list[Any] = []
    k_started: list[float] = []
    k_count: list[int] = []
    labels: list[str] = []
    raw_values: list[Any] = []
    stat_cols: dict[str, list[Any]] = {name: [] for name in STATS}
    files: list[dict[str, Any]] = []
    param_chunks: list[tuple[int, tuple[str, ...], list[tuple[Any, ...]]]] = []
    seen_machines, seen_envs = set(), set()
    want_machines = set(machines) if machines is not None else None
    want_envs = set(envs) if envs is not None else None
    row = 0

    for folder in folders:
        info = _machine_info(folder, problems)
        if info is None:
            continue
        seen_machines.add(info["machine"])
        if want_machines is not None and info["machine"] not in want_machines:
            continue
        for path in _result_files(folder):
            try:
                res = _read_result_file(path, info["machine"])
            except Exception as exc:
                problems.append(Problem(str(path), f"skipped, not a readable asv result file: {exc}"))
                continue
            seen_envs.add(res.env_name)
            if want_envs is not None and res.env_name not in want_envs:
                continue
            commit = res.commit_hash
            if want_commits is not None and not any(commit.lower().startswith(c) for c in want_commits):
                continue
            column = res.column
            i_result, i_version, i_started = (column.get(c) for c in ("result", "version", "started_at"))
            i_stats = [column.get(f"stats_{name}") for name in STATS]
            started_ms = [t for v in res.results.values() if isinstance(t := _field(v, i_started), (int, float))]
            torch_v, cuda_v = _actual_versions(runs.get(res.env_name, []), started_ms)
            file_info = {
                "machine": info["machine"],
                "env": res.env_name,
                "commit": commit,
                "commit_short": commit[:8],
                "date": res.date if isinstance(res.date, (int, float)) and res.date else math.nan,
                "python": res.params.get("python"),
                "requirements": "; ".join(f"{k}=={v}" if v else k for k, v in sorted(res.requirements.items())),
                "torch_version": torch_v,
                "cuda_version": cuda_v,
                "file": str(path.relative_to(root)),
            }
            file_info.update({f"machine_{k}": v for k, v in info.items() if k != "machine"})
            file_info.update(
                {f"env_{k}": v for k, v in res.params.items() if k not in info and k not in ("machine", "python")}
            )
            fid = len(files)
            files.append(file_info)
            for key in sorted(res.results):
                if pattern is not None and not pattern.search(key):
                    continue
                entry = res.results[key]
                meta = known.get(key, {})
                names, typed, key_labels = _layout(key, tuple(meta.get("param_names") or ()), res.frozen_params[key])
                k = len(typed)
                values = _field(entry, i_result)
                values = values if isinstance(values, list) else [values]  # None: all failed (a build failure)
                raw_values.extend(values[:k] if len(values) >= k else values + [None] * (k - len(values)))
                for name, i in zip(STATS, i_stats, strict=True):
                    stat = _field(entry, i)
                    col = stat_cols[name]
                    if isinstance(stat, list) and len(stat) == k:
                        col.extend(stat)
                    else:
                        col.extend(((stat if isinstance(stat, list) else []) + [None] * k)[:k])
                labels.extend(key_labels)
                started = _field(entry, i_started)
                k_file.append(fid)
                k_bench.append(key)
                k_version.append(_field(entry, i_version))
                k_started.append(started if isinstance(started, (int, float)) else math.nan)
                k_count.append(k)
                if names:
                    param_chunks.append((row, names, typed))
                row += k

    if want_machines is not None:
        missing = sorted(want_machines - seen_machines)
        if missing:
            known_names = ", ".join(sorted(seen_machines))
            raise ReportError(f"no machine named {', '.join(missing)} in {root}; known: {known_names}")
    if want_envs is not None:
        missing = sorted(want_envs - seen_envs)
        if missing:
            known_names = ", ".join(sorted(seen_envs))
            raise ReportError(f"no environment named {', '.join(missing)} in {root}; known: {known_names}")

    counts = np.asarray(k_count, dtype=np.int64)
    bench = pd.Categorical(k_bench)
    per_bench = {b: _bench_fields(b, known.get(b, {})) for b in bench.categories}
    current = [
        meta_v is None or v is None or v == meta_v
        for v, meta_v in zip(k_version, (per_bench[b]["meta_version"] for b in k_bench), strict=True)
    ]
    stale: dict[str, int] = {}
    for b, ok in zip(k_bench, current, strict=True):
        if not ok:
            stale[b] = stale.get(b, 0) + 1
    for key, count in sorted(stale.items()):
        problems.append(
            Problem(
                key,
                f"{count} result file(s) measured an older version of this benchmark's code; "
                "they are kept in the table but left out of comparisons, as asv does",
            )
        )

    cols: dict[str, Any] = {}
    file_rows = np.repeat(np.asarray(k_file, dtype=np.int64), counts)
    per_file = pd.DataFrame(files) if files else pd.DataFrame(columns=[c for c in BASE_COLUMNS if c not in ROW_COLUMNS])
    per_file["date"] = pd.to_datetime(pd.to_numeric(per_file["date"], errors="coerce"), unit="ms", utc=True)
    for name in per_file.columns:
        col = per_file[name]
        if name in CATEGORICAL or name.startswith(("machine_", "env_")):  # one value per file: few distinct
            col = col.astype(object).astype("category")
        cols[name] = col.take(file_rows).reset_index(drop=True) if len(per_file) else col
    bench_codes = np.repeat(bench.codes, counts)
    cols["benchmark"] = pd.Categorical.from_codes(bench_codes, dtype=bench.dtype)
    for name in ("suite", "name", "type", "unit"):
        per_code = pd.Categorical([per_bench[b][name] for b in bench.categories])
        cols[name] = pd.Categorical.from_codes(per_code.codes[bench_codes], dtype=per_code.dtype)
    cols["params"] = pd.Categorical(labels)
    failed = np.fromiter((v is None for v in raw_values), dtype=bool, count=len(raw_values))
    numeric = pd.to_numeric(pd.Series(raw_values, dtype=object), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    status = np.where(failed, "failed", np.where(np.isnan(numeric), "skipped", "ok"))
    cols["status"] = pd.Categorical(status, categories=["ok", "skipped", "failed"])
    cols["value"] = numeric
    for name in STATS:  # asv writes numbers or null; anything else becomes NaN
        cols[name] = pd.to_numeric(pd.Series(stat_cols[name], dtype=object), errors="coerce").to_numpy(
            dtype=float, na_value=np.nan
        )
    version = pd.Categorical(k_version)
    cols["version"] = pd.Categorical.from_codes(np.repeat(version.codes, counts), dtype=version.dtype)
    cols["version_current"] = np.repeat(np.asarray(current, dtype=bool), counts)
    cols["started_at"] = pd.to_datetime(np.repeat(np.asarray(k_started, dtype=float), counts), unit="ms", utc=True)
    extra = [c for c in per_file.columns if c.startswith(("machine_", "env_"))]
    frame = pd.DataFrame({c: cols[c] for c in [*BASE_COLUMNS, *extra]})
    param_values: dict[str, np.ndarray] = {}
    for start, names, typed in param_chunks:
        for i, name in enumerate(names):
            col = param_values.get(name)
            if col is None:
                col = param_values[name] = np.full(row, None, dtype=object)
            col[start : start + len(typed)] = [t[i] for t in typed]
    param_names = []
    for name, values in param_values.items():
        col = name if name not in frame.columns else f"param_{name}"
        frame[col] = _typed(pd.Series(values, dtype=object))
        param_names.append(col)
    frame = attach_gpu_state(frame, root.parent / "gpustate")
    for name in CATEGORICAL:  # few distinct values, many rows: sorting, grouping and merging get cheaper
        if not isinstance(frame[name].dtype, pd.CategoricalDtype):
            frame[name] = frame[name].astype("category")
    return Loaded(frame, problems, root, param_names, extra)


def _label(params: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) if isinstance(params, dict) else ""


def attach_gpu_state(frame: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """Add ``gpu_throttled`` and ``gpu_state`` from ``devbench.gpustate`` records in ``folder``.

    A row's window runs from its benchmark's ``started_at`` to the next benchmark's start
    in the same result file; the records of its class and parameters inside that window
    belong to it. ``gpu_throttled`` is True when a record shows an active throttle reason
    or NVML's power/thermal violation time grew inside the window, False when records
    exist and show neither, and missing (NA) where no record applies (CPU rows, runs
    without NVML). ``gpu_state`` summarizes the range seen (SM clock, temperature, power).
    """
    recs = gpustate.load(folder)
    if not recs or frame.empty:
        return frame
    g = pd.DataFrame(recs)
    g = g.assign(params=g["params"].map(_label), when=pd.to_datetime(g["time"], unit="s", utc=True))
    g = g.rename(columns={"benchmark": "cls"})
    f = frame[["machine", "env", "commit", "benchmark", "params", "started_at"]].astype({"params": str})
    f = f.assign(row=np.arange(len(f)), cls=f["benchmark"].astype(str).str.rsplit(".", n=1).str[0])
    starts = f.drop_duplicates(["machine", "env", "commit", "benchmark"]).sort_values("started_at")
    starts = starts.assign(ends=starts.groupby(["machine", "env", "commit"], observed=True)["started_at"].shift(-1))
    f = f.merge(starts[["machine", "env", "commit", "benchmark", "ends"]], on=["machine", "env", "commit", "benchmark"])
    f = f.astype({"machine": str})
    m = f.merge(g, on=["machine", "cls", "params"])
    end = m["ends"].fillna(pd.Timestamp.max.tz_localize("UTC"))
    m = m[(m["when"] >= m["started_at"]) & (m["when"] < end)]
    if m.empty:
        return frame
    for col in ("throttling", "power_violation_ns", "thermal_violation_ns", "sm_clock_mhz", "temperature_c", "power_w"):
        if col not in m.columns:
            m[col] = None
    m = m.assign(active=m["throttling"].map(lambda t: bool(t) if isinstance(t, list) else False))
    viol = m[["power_violation_ns", "thermal_violation_ns"]].apply(pd.to_numeric, errors="coerce")
    m = m.assign(pv=viol["power_violation_ns"], tv=viol["thermal_violation_ns"])
    per = m.groupby(["row", "index"]).agg(
        active=("active", "any"),
        pv=("pv", lambda s: s.max() - s.min()),
        tv=("tv", lambda s: s.max() - s.min()),
        clk_lo=("sm_clock_mhz", "min"),
        clk_hi=("sm_clock_mhz", "max"),
        temp=("temperature_c", "max"),
        power=("power_w", "max"),
    )
    per["throttled"] = per["active"] | (per["pv"].fillna(0) > 0) | (per["tv"].fillna(0) > 0)
    by_row = per.groupby(level="row").agg(
        throttled=("throttled", "any"), clk_lo=("clk_lo", "min"), clk_hi=("clk_hi", "max"),
        temp=("temp", "max"), power=("power", "max"),
    )  # fmt: skip
    text = (
        "SM " + by_row["clk_lo"].map("{:.0f}".format) + "-" + by_row["clk_hi"].map("{:.0f}".format) + " MHz, "
        + by_row["temp"].map("{:.0f}".format) + " C max, " + by_row["power"].map("{:.0f}".format) + " W max"
    )  # fmt: skip
    throttled = pd.Series(pd.NA, index=frame.index, dtype="boolean")
    state = pd.Series(None, index=frame.index, dtype=object)
    throttled.iloc[by_row.index.to_numpy()] = by_row["throttled"].to_numpy()
    state.iloc[by_row.index.to_numpy()] = text.to_numpy()
    return frame.assign(gpu_throttled=throttled, gpu_state=state)


@functools.lru_cache(maxsize=4096)
def _layout(
    key: str, names: tuple[str, ...], params: tuple[tuple[Any, ...], ...]
) -> tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]:
    """Parameter names, typed combinations and their labels; the same for every file of a benchmark."""
    if len(names) != len(params):
        names = tuple(f"param{i}" for i in range(len(params)))
    typed = [tuple(parse_param(v) for v in combo) for combo in _combinations([list(p) for p in params])]
    labels = [", ".join(f"{n}={v}" for n, v in zip(names, t, strict=True)) for t in typed]
    return names, typed, labels


def _combinations(params: list[list[Any]]) -> list[tuple[Any, ...]]:
    return list(itertools.product(*params)) if params else [()]


def _typed(series: pd.Series) -> pd.Series:
    """Integers as nullable Int64, floats as float, anything else as object."""
    kind = pd.api.types.infer_dtype(series, skipna=True)
    if kind == "integer":
        return series.astype("Int64")
    if kind in ("floating", "mixed-integer-float"):
        return series.astype(float)
    return series


COLLECTIVE_FORMAT = "devbench-collectives/1"
COLLECTIVE_COLUMNS = ["file", "machine", "env", "backend", "world", "nodes", "finished", "torch", "commit",
                      "op", "nbytes", "time_us", "time_max_us", "algbw", "busbw"]  # fmt: skip


def load_collectives(folder: str | os.PathLike[str], problems: list[Problem] | None = None) -> pd.DataFrame:
    """The rows of every ``python -m devbench.collectives`` file in ``folder`` (none if it is absent).

    One row per file x op x size; ``env`` is ``"<backend> x<world>"`` so the report can
    label runs like asv environments. A file that is not such a document is skipped and
    named in ``problems``.
    """
    root = Path(folder)
    rows: list[dict[str, Any]] = []
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("format") != COLLECTIVE_FORMAT:
                raise ValueError(f"not a {COLLECTIVE_FORMAT} document")
            meta = {
                "file": path.name,
                "machine": str(doc["machine"]),
                "env": f"{doc['backend']} x{doc['world']}",
                "backend": doc["backend"],
                "world": int(doc["world"]),
                "nodes": int(doc.get("nodes", 1)),
                "finished": pd.Timestamp(doc["finished"]),
                "torch": doc.get("torch"),
                "commit": doc.get("commit"),
            }
            for r in doc["rows"]:
                rows.append({**meta, **{k: r[k] for k in ("op", "nbytes", "time_us", "time_max_us", "algbw", "busbw")}})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if problems is not None:
                problems.append(Problem(str(path), f"skipped: {exc}"))
    return pd.DataFrame(rows, columns=COLLECTIVE_COLUMNS)
