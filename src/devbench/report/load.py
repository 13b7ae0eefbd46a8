"""asv result histories into one tidy pandas DataFrame, read with asv's own loader (``asv.util.load_json``).

One row per machine x environment x commit x benchmark x parameter combination. Works on
any asv results directory (``<results>/<machine>/machine.json`` plus result files, and
``benchmarks.json`` at the top); nothing here knows this suite's benchmarks. No torch.
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from asv import util as asv_util
from asv.machine import Machine
from asv.results import Results

from devbench.report.parallel import in_halves
from devbench.report.problems import Problem, ReportError
from devbench.report.records import actual_versions, attach_gpu_state, runinfo_index
from devbench.spec import params_label

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
class Loaded:
    """The tidy frame and what was wrong on the way."""

    frame: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    results_dir: Path | None = None
    param_columns: list[str] = field(default_factory=list)
    machine_columns: list[str] = field(default_factory=list)
    #: figures of ``python -m devbench.collectives`` runs (see ``load_collectives``)
    collectives: pd.DataFrame | None = None
    #: the newest shape search per machine, device and dtype (see ``records.load_achievable``)
    achievable: pd.DataFrame | None = None
    #: the newest ``python -m devbench.fleet`` run per machine, a row per rank and figure
    fleet: pd.DataFrame | None = None
    #: the newest ``PeerMatrix`` run per machine and size, a row per GPU pair and direction
    peers: pd.DataFrame | None = None
    #: what each short environment label stands for (``records.env_legend``), once paths are hidden
    env_legend: pd.DataFrame | None = None


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
    for key, entry in list(out.results.items()):
        frozen = _entry_params(entry, i_params, i_result)
        if isinstance(frozen, tuple):
            out.frozen_params[key] = frozen
        else:
            out.bad[key] = frozen
            del out.results[key]
    return out


def _entry_params(entry: Any, i_params: int | None, i_result: int | None) -> tuple[tuple[Any, ...], ...] | str:
    """One benchmark entry's parameter values as a hashable tuple of tuples, or why the entry cannot be
    read (its shape is not asv's)."""
    if type(entry) is not list:
        return "its entry is not a list of columns"
    params = (entry[i_params] if i_params is not None and i_params < len(entry) else None) or []
    if type(params) is not list or not all(type(p) is list for p in params):
        return "its parameters are not lists of values"
    frozen = tuple(tuple(p) for p in params)
    try:
        hash(frozen)  # the parameter layout is cached by it
    except TypeError:
        return "its parameters are not plain values"
    result = entry[i_result] if i_result is not None and i_result < len(entry) else None
    if not isinstance(result, (list, int, float, type(None))) or isinstance(result, bool):
        return f"its result {_short(result)} is neither a number nor a list"
    return frozen


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _why(exc: Exception) -> str:
    """The first line of a reader's error (asv's own names `asv update` for an old file format)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


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
    select = _Selection.of(machines, envs, commits, benchmarks)
    runs = runinfo_index(root)
    jobs = []
    for folder in folders:
        info = _machine_info(folder, problems)
        if info is None or not select.machine(info["machine"]):
            continue
        jobs += [(path, info) for path in _result_files(folder)]
    table = _read_files(jobs, root, runs, known, select, problems)
    select.check_names_exist(root)
    frame, param_names, extra = table.frame(known, problems)
    return Loaded(attach_gpu_state(frame, root.parent / "gpustate"), problems, root, param_names, extra)


#: below this many result files one process reads them all (a second one costs more than it saves)
PARALLEL_MIN_FILES = 200


def _read_some(jobs, root: Path, runs, known, select: _Selection) -> tuple[_Table, list[Problem], set[str]]:
    """Read ``jobs`` (result file, machine info) into a table: what one process does."""
    table, problems = _Table(), []
    for path, info in jobs:
        try:
            res = _read_result_file(path, info["machine"])
        except Exception as exc:
            problems.append(Problem(str(path), f"skipped, not a readable asv result file: {_why(exc)}"))
            continue
        for key, reason in sorted(res.bad.items()):
            problems.append(Problem(f"{path}: {key}", f"this benchmark is left out: {reason}"))
        if select.file(res):
            table.add_file(path.relative_to(root), info, res, runs, known, select.pattern, problems)
    return table, problems, select.seen_envs


def _read_files(jobs, root: Path, runs, known, select: _Selection, problems: list[Problem]) -> _Table:
    """Every result file into one table; a large history is read by two processes, halves in file order
    (``parallel.in_halves``: the second half's table is appended, so rows keep file order)."""

    def read(start: int, end: int) -> tuple[_Table, list[Problem], set[str]]:
        return _read_some(jobs[start:end], root, runs, known, select)

    parts = in_halves(read, len(jobs), PARALLEL_MIN_FILES)
    table = parts[0][0]
    for other, _, _ in parts[1:]:
        table.extend(other)
    for _, found, envs in parts:
        problems.extend(found)
        select.seen_envs |= envs
    return table


@dataclass
class _Selection:
    """Which machines, environments, commits and benchmarks to load; remembers the names it saw."""

    machines: set[str] | None
    envs: set[str] | None
    commits: list[str] | None
    pattern: re.Pattern[str] | None
    seen_machines: set[str] = field(default_factory=set)
    seen_envs: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, machines, envs, commits, benchmarks: str | None) -> _Selection:
        pattern = None
        if benchmarks:
            try:
                pattern = re.compile(benchmarks)
            except re.error as exc:
                raise ReportError(f"--benchmarks {benchmarks!r} is not a regular expression: {exc}") from None
        return cls(
            set(machines) if machines is not None else None,
            set(envs) if envs is not None else None,
            None if commits is None else [c.lower() for c in commits],
            pattern,
        )

    def machine(self, name: str) -> bool:
        self.seen_machines.add(name)
        return self.machines is None or name in self.machines

    def file(self, res: _ResultFile) -> bool:
        self.seen_envs.add(res.env_name)
        if self.envs is not None and res.env_name not in self.envs:
            return False
        return self.commits is None or any(res.commit_hash.lower().startswith(c) for c in self.commits)

    def check_names_exist(self, root: Path) -> None:
        """``ReportError`` for a machine or environment asked for by name that is not there."""
        for what, wanted, seen in (("machine", self.machines, self.seen_machines),
                                   ("environment", self.envs, self.seen_envs)):  # fmt: skip
            missing = sorted(wanted - seen) if wanted is not None else []
            if missing:
                raise ReportError(f"no {what} named {', '.join(missing)} in {root}; known: {', '.join(sorted(seen))}")


class _Table:
    """The frame's columns, filled file by file and built at the end.

    asv stores each benchmark of a file as one entry whose columns run over its parameter
    combinations. Fields of a file (machine, env, commit, ...) are kept once per file,
    fields of an entry (benchmark, version, start) once per entry, and values, statistics
    and labels once per row; ``frame`` repeats the first two over the rows with NumPy.
    """

    def __init__(self) -> None:
        self.files: list[dict[str, Any]] = []
        self.entry_file: list[int] = []
        self.entry_bench: list[str] = []
        self.entry_version: list[Any] = []
        self.entry_started: list[float] = []
        self.entry_rows: list[int] = []
        self.labels: list[str] = []
        self.values: list[Any] = []
        self.stats: dict[str, list[Any]] = {name: [] for name in STATS}
        self.param_chunks: list[tuple[int, tuple[str, ...], list[tuple[Any, ...]]]] = []
        self.rows = 0

    def add_file(
        self, rel_path: Path, info: dict[str, Any], res: _ResultFile, runs, known, pattern, problems: list[Problem]
    ) -> None:
        """One result file: its fields, then each selected benchmark entry."""
        column = res.column
        i_started = column.get("started_at")
        started_ms = [t for v in res.results.values() if isinstance(t := _field(v, i_started), (int, float))]
        torch_v, cuda_v = actual_versions(runs.get(res.env_name, []), started_ms)
        fields = {
            "machine": info["machine"],
            "env": res.env_name,
            "commit": res.commit_hash,
            "commit_short": res.commit_hash[:8],
            "date": res.date if isinstance(res.date, (int, float)) and res.date else math.nan,
            "python": res.params.get("python"),
            "requirements": "; ".join(f"{k}=={v}" if v else k for k, v in sorted(res.requirements.items())),
            "torch_version": torch_v,
            "cuda_version": cuda_v,
            "file": str(rel_path),
        }
        fields.update({f"machine_{k}": v for k, v in info.items() if k != "machine"})
        fields.update(
            {f"env_{k}": v for k, v in res.params.items() if k not in info and k not in ("machine", "python")}
        )
        fid = len(self.files)
        self.files.append(fields)
        for key in sorted(res.results):
            if pattern is None or pattern.search(key):
                self._add_entry(fid, key, res, known.get(key, {}), problems, rel_path)

    def _add_entry(
        self, fid: int, key: str, res: _ResultFile, meta: dict[str, Any], problems: list[Problem], rel_path: Path
    ) -> None:
        """One benchmark of a file: a row per parameter combination (missing values and statistics are None)."""
        entry, column = res.results[key], res.column
        names, typed, labels = _layout(key, tuple(meta.get("param_names") or ()), res.frozen_params[key])
        k = len(typed)
        values = _field(entry, column.get("result"))
        values = values if isinstance(values, list) else [values]  # None: all failed (a build failure)
        if len(values) != k and values != [None]:
            fate = "the extra ones are dropped" if len(values) > k else "the missing ones count as failed"
            message = f"{len(values)} values for {k} parameter combinations; {fate}"
            problems.append(Problem(f"{rel_path}: {key}", message))
        values = _fit(values, k)
        bad = [] if _all_plain(values) else [(i, v) for i, v in enumerate(values) if not _acceptable(v)]
        if bad:
            shown = ", ".join(f"{_short(v)} at {labels[i] or 'its only combination'}" for i, v in bad[:3])
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            problems.append(Problem(f"{rel_path}: {key}", f"not a number asv would accept: {shown}{more}; "
                                    "reported as invalid, not converted"))  # fmt: skip
            values = [INVALID if not _acceptable(v) else v for v in values]
        self.values.extend(values)
        for name in STATS:
            stat = _field(entry, column.get(f"stats_{name}"))
            if type(stat) is list and len(stat) == k:
                self.stats[name].extend(stat)
            else:
                self.stats[name].extend(_fit(stat if isinstance(stat, list) else [], k))
        self.labels.extend(labels)
        started = _field(entry, column.get("started_at"))
        self.entry_file.append(fid)
        self.entry_bench.append(key)
        self.entry_version.append(_field(entry, column.get("version")))
        self.entry_started.append(started if isinstance(started, (int, float)) else math.nan)
        self.entry_rows.append(k)
        if names:
            self.param_chunks.append((self.rows, names, typed))
        self.rows += k

    def extend(self, other: _Table) -> None:
        """Append ``other``'s files and rows after this table's."""
        files, rows = len(self.files), self.rows
        self.files += other.files
        self.entry_file += [f + files for f in other.entry_file]
        self.entry_bench += other.entry_bench
        self.entry_version += other.entry_version
        self.entry_started += other.entry_started
        self.entry_rows += other.entry_rows
        self.labels += other.labels
        self.values += other.values
        for name in STATS:
            self.stats[name] += other.stats[name]
        self.param_chunks += [(start + rows, names, typed) for start, names, typed in other.param_chunks]
        self.rows += other.rows

    def frame(self, known: dict[str, dict[str, Any]], problems: list[Problem]) -> tuple[pd.DataFrame, list, list]:
        """The tidy frame, its parameter columns and its machine/env columns."""
        counts = np.asarray(self.entry_rows, dtype=np.int64)
        bench = pd.Categorical(self.entry_bench)
        per_bench = {b: _bench_fields(b, known.get(b, {})) for b in bench.categories}
        current = self._current(per_bench, problems)
        cols: dict[str, Any] = {}
        per_file = self._per_file_columns(cols, counts)
        bench_codes = np.repeat(bench.codes, counts)
        cols["benchmark"] = pd.Categorical.from_codes(bench_codes, dtype=bench.dtype)
        for name in ("suite", "name", "type", "unit"):
            per_code = pd.Categorical([per_bench[b][name] for b in bench.categories])
            cols[name] = pd.Categorical.from_codes(per_code.codes[bench_codes], dtype=per_code.dtype)
        cols["params"] = pd.Categorical(self.labels)
        failed = np.fromiter((v is None for v in self.values), dtype=bool, count=len(self.values))
        invalid = np.fromiter((v is INVALID for v in self.values), dtype=bool, count=len(self.values))
        numeric = _numbers(self.values)
        status = np.where(failed, "failed", np.where(invalid, "invalid", np.where(np.isnan(numeric), "skipped", "ok")))
        cols["status"] = pd.Categorical(status, categories=["ok", "skipped", "failed", "invalid"])
        cols["value"] = numeric
        for name in STATS:  # asv writes numbers or null; anything else becomes NaN
            cols[name] = _numbers(self.stats[name])
        version = pd.Categorical(self.entry_version)
        cols["version"] = pd.Categorical.from_codes(np.repeat(version.codes, counts), dtype=version.dtype)
        cols["version_current"] = np.repeat(np.asarray(current, dtype=bool), counts)
        started = np.repeat(np.asarray(self.entry_started, dtype=float), counts)
        cols["started_at"] = pd.to_datetime(started, unit="ms", utc=True)
        extra = [c for c in per_file.columns if c.startswith(("machine_", "env_"))]
        frame = pd.DataFrame({c: cols[c] for c in [*BASE_COLUMNS, *extra]})
        param_names = self._add_param_columns(frame)
        for name in CATEGORICAL:  # few distinct values, many rows: sorting, grouping and merging get cheaper
            if not isinstance(frame[name].dtype, pd.CategoricalDtype):
                frame[name] = frame[name].astype("category")
        return frame, param_names, extra

    def _current(self, per_bench: dict[str, dict[str, Any]], problems: list[Problem]) -> list[bool]:
        """Per entry: measured by the benchmark's current code (``benchmarks.json``'s version)?"""
        current = [
            meta_v is None or v is None or v == meta_v
            for v, meta_v in zip(self.entry_version, (per_bench[b]["meta_version"] for b in self.entry_bench),
                                 strict=True)
        ]  # fmt: skip
        stale = Counter(b for b, ok in zip(self.entry_bench, current, strict=True) if not ok)
        for key, count in sorted(stale.items()):
            message = (f"{count} result file(s) measured an older version of this benchmark's code; "
                       "they are kept in the table but left out of comparisons, as asv does")  # fmt: skip
            problems.append(Problem(key, message))
        return current

    def _per_file_columns(self, cols: dict[str, Any], counts: np.ndarray) -> pd.DataFrame:
        """The file fields, repeated over each file's rows, into ``cols``; returns the per-file frame."""
        file_rows = np.repeat(np.asarray(self.entry_file, dtype=np.int64), counts)
        per_file = (
            pd.DataFrame(self.files) if self.files
            else pd.DataFrame(columns=[c for c in BASE_COLUMNS if c not in ROW_COLUMNS])
        )  # fmt: skip
        per_file["date"] = pd.to_datetime(pd.to_numeric(per_file["date"], errors="coerce"), unit="ms", utc=True)
        for name in per_file.columns:
            col = per_file[name]
            if name in CATEGORICAL or name.startswith(("machine_", "env_")):  # one value per file: few distinct
                col = col.astype(object).astype("category")
            cols[name] = col.take(file_rows).reset_index(drop=True) if len(per_file) else col
        return per_file

    def _add_param_columns(self, frame: pd.DataFrame) -> list[str]:
        """One column per parameter name (``param_<name>`` where it clashes with a base column)."""
        param_values: dict[str, np.ndarray] = {}
        for start, names, typed in self.param_chunks:
            for i, name in enumerate(names):
                col = param_values.get(name)
                if col is None:
                    col = param_values[name] = np.full(self.rows, None, dtype=object)
                col[start : start + len(typed)] = [t[i] for t in typed]
        param_names = []
        for name, values in param_values.items():
            col = name if name not in frame.columns else f"param_{name}"
            frame[col] = _typed(pd.Series(values, dtype=object))
            param_names.append(col)
        return param_names


class _Invalid:
    """The one marker of a value asv would not write; it stays itself across processes (pickled by name)."""

    def __reduce__(self) -> str:
        return "INVALID"

    def __repr__(self) -> str:
        return "INVALID"


#: a value asv would not write (a string, a bool, an infinity): kept as "invalid", never converted
INVALID = _Invalid()


def _acceptable(value: Any) -> bool:
    """None (failed), NaN (skipped) or a finite number: what asv writes as a result value."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not math.isinf(value)


def _all_plain(values: list[Any]) -> bool:
    """The common case, checked fast: every value a finite float (or NaN) or None."""
    return all(v is None or (type(v) is float and v - v == v - v or v != v) for v in values)


def _fit(values: list[Any], k: int) -> list[Any]:
    """``values`` cut or padded with None to ``k`` entries."""
    return values[:k] if len(values) >= k else values + [None] * (k - len(values))


def _numbers(values: list[Any]) -> np.ndarray:
    """Floats; anything that is not a number becomes NaN."""
    try:  # numbers and None (NaN), the common case, in one numpy call: 4x pandas' coercion
        return np.array(values, dtype=float)
    except (TypeError, ValueError):  # something that is no number: pandas makes it NaN
        pass
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float, na_value=np.nan)


@functools.lru_cache(maxsize=4096)
def _layout(
    key: str, names: tuple[str, ...], params: tuple[tuple[Any, ...], ...]
) -> tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]:
    """Parameter names, typed combinations and their labels; the same for every file of a benchmark."""
    if len(names) != len(params):
        names = tuple(f"param{i}" for i in range(len(params)))
    typed = [tuple(parse_param(v) for v in combo) for combo in _combinations([list(p) for p in params])]
    labels = [params_label(names, t) for t in typed]
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
