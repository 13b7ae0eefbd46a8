"""The tidy frame's columns, filled file by file as ``report.load`` reads them and built once at the end."""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from devbench.records.spec import params_label
from devbench.report.fields import (
    BASE_COLUMNS,
    CATEGORICAL,
    ROW_COLUMNS,
    STATS,
    _bench_fields,
    _field,
    _ResultFile,
    _short,
    parse_param,
)
from devbench.report.problems import Problem
from devbench.report.records import _VERSION, actual_versions


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
        #: per entry, its combinations' labels (``_layout``'s list, shared by every entry of that layout)
        self.entry_labels: list[list[str]] = []
        self.values: list[Any] = []
        self.stats: dict[str, list[Any]] = {name: [] for name in STATS}
        self.param_chunks: list[tuple[int, tuple[str, ...], list[tuple[Any, ...]]]] = []
        self.rows = 0
        #: the row lists as arrays, once ``finish`` has made them: numbers, failed/invalid marks, statistics
        self.arrays: dict[str, np.ndarray] | None = None
        #: and one object array per parameter name, in the order the names were first met
        self.params: dict[str, np.ndarray] = {}

    def add_file(
        self, rel_path: Path, info: dict[str, Any], res: _ResultFile, runs, known, pattern, problems: list[Problem]
    ) -> None:
        """One result file: its fields, then each selected benchmark entry."""
        column = res.column
        i_started = column.get("started_at")
        started_ms = [t for v in res.results.values() if isinstance(t := _field(v, i_started), (int, float))]
        torch_v, cuda_v, python_v = actual_versions(runs.get(res.env_name, []), started_ms, info["machine"],
                                                    res.commit_hash)  # fmt: skip
        python = res.params.get("python")  # asv's: a version, or an "existing" environment's interpreter path
        fields = {
            "machine": info["machine"],
            "env": res.env_name,
            "commit": res.commit_hash,
            "commit_short": res.commit_hash[:8],
            "date": res.date if isinstance(res.date, (int, float)) and res.date else math.nan,
            "python": python_v if python_v and not (isinstance(python, str) and _VERSION.match(python)) else python,
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
        # the columns' places are the file's: looked up once, not per entry
        at = _Columns(*(column.get(c) for c in ("result", "started_at", "version")),
                      [(self.stats[name], column.get(f"stats_{name}")) for name in STATS])  # fmt: skip
        for key in sorted(res.results):
            if pattern is None or pattern.search(key):
                self._add_entry(fid, key, res, known.get(key, {}), problems, rel_path, at)

    def _add_entry(
        self, fid: int, key: str, res: _ResultFile, meta: dict[str, Any], problems: list[Problem], rel_path: Path,
        at: _Columns,
    ) -> None:
        """One benchmark of a file: a row per parameter combination (missing values and statistics are None)."""
        entry = res.results[key]
        names, typed, labels = _layout(key, tuple(meta.get("param_names") or ()), res.frozen_params[key])
        k = len(typed)
        values = _field(entry, at.result)
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
        n = len(entry)
        for into, i in at.stats:
            stat = entry[i] if i is not None and i < n else None
            if type(stat) is list and len(stat) == k:
                into.extend(stat)
            else:
                into.extend(_fit(stat if isinstance(stat, list) else [], k))
        self.entry_labels.append(labels)
        started = _field(entry, at.started_at)
        self.entry_file.append(fid)
        self.entry_bench.append(key)
        self.entry_version.append(_field(entry, at.version))
        self.entry_started.append(started if isinstance(started, (int, float)) else math.nan)
        self.entry_rows.append(k)
        if names:
            self.param_chunks.append((self.rows, names, typed))
        self.rows += k

    def finish(self) -> None:
        """The row lists as arrays (``arrays``, ``params``). Each reading process does this for its files, so
        the conversion is shared and a forked reader sends arrays, quick to pickle, instead of lists."""
        if self.arrays is not None:
            return
        numeric = _numbers(self.values)
        # a failed (None) or invalid value is NaN among the numbers: only those rows are looked at
        missing = np.flatnonzero(np.isnan(numeric)).tolist()
        failed, invalid = np.zeros(len(numeric), dtype=bool), np.zeros(len(numeric), dtype=bool)
        failed[missing] = [self.values[i] is None for i in missing]
        invalid[missing] = [self.values[i] is INVALID for i in missing]
        self.arrays = {"value": numeric, "failed": failed, "invalid": invalid}
        for name in STATS:  # asv writes numbers or null; anything else becomes NaN
            self.arrays[name] = _numbers(self.stats[name])
        self.params = self._param_values()
        self.values, self.stats, self.param_chunks = [], {name: [] for name in STATS}, []

    def extend(self, other: _Table) -> None:
        """Append ``other``'s files and rows after this table's."""
        self.finish()
        other.finish()
        files, rows = len(self.files), self.rows
        self.files += other.files
        self.entry_file += [f + files for f in other.entry_file]
        self.entry_bench += other.entry_bench
        self.entry_version += other.entry_version
        self.entry_started += other.entry_started
        self.entry_rows += other.entry_rows
        self.entry_labels += other.entry_labels
        self.arrays = {k: np.concatenate([v, other.arrays[k]]) for k, v in self.arrays.items()}
        params = {}
        for name in [*self.params, *(n for n in other.params if n not in self.params)]:
            mine, theirs = self.params.get(name), other.params.get(name)
            params[name] = np.concatenate([
                mine if mine is not None else np.full(rows, None, dtype=object),
                theirs if theirs is not None else np.full(other.rows, None, dtype=object),
            ])  # fmt: skip
        self.params = params
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
        cols["params"] = self._labels()
        self.finish()
        arrays = self.arrays
        numeric = arrays["value"]
        status = np.where(arrays["failed"], 2, np.where(arrays["invalid"], 3, np.where(np.isnan(numeric), 1, 0)))
        cols["status"] = pd.Categorical.from_codes(status, categories=["ok", "skipped", "failed", "invalid"])
        cols["value"] = numeric
        for name in STATS:
            cols[name] = arrays[name]
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
            problems.append(Problem(key, message, kind="version"))
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

    def _labels(self) -> pd.Categorical:
        """The rows' parameter labels as a categorical, built per layout (few) instead of per row (many)."""
        layouts: dict[int, list[str]] = {}
        for labels in self.entry_labels:
            layouts.setdefault(id(labels), labels)
        if not self.rows:
            return pd.Categorical([label for labels in self.entry_labels for label in labels])
        categories = sorted({label for labels in layouts.values() for label in labels})  # pandas' own order
        code = {label: i for i, label in enumerate(categories)}
        per_layout = {key: [code[label] for label in labels] for key, labels in layouts.items()}
        codes = np.fromiter(itertools.chain.from_iterable(per_layout[id(labels)] for labels in self.entry_labels),
                            dtype=np.int64, count=self.rows)  # fmt: skip
        return pd.Categorical.from_codes(codes, categories=pd.Index(categories))

    def _param_values(self) -> dict[str, np.ndarray]:
        """One object array per parameter name (None where a benchmark has no such parameter)."""
        # the entries of one layout (``_layout``'s cached list) are filled together, by NumPy
        starts: dict[int, list[int]] = {}
        layouts: dict[int, tuple[tuple[str, ...], list[tuple[Any, ...]]]] = {}
        for start, names, typed in self.param_chunks:
            starts.setdefault(id(typed), []).append(start)
            layouts.setdefault(id(typed), (names, typed))
        param_values: dict[str, np.ndarray] = {}
        for key, (names, typed) in layouts.items():
            rows = (np.asarray(starts[key], dtype=np.int64)[:, None] + np.arange(len(typed))).ravel()
            for i, name in enumerate(names):
                col = param_values.get(name)
                if col is None:
                    col = param_values[name] = np.full(self.rows, None, dtype=object)
                one = np.empty(len(typed), dtype=object)
                one[:] = [t[i] for t in typed]
                col[rows] = np.tile(one, len(starts[key]))
        return param_values

    def _add_param_columns(self, frame: pd.DataFrame) -> list[str]:
        """One column per parameter name (``param_<name>`` where it clashes with a base column)."""
        param_names = []
        for name, values in self.params.items():
            col = name if name not in frame.columns else f"param_{name}"
            frame[col] = _typed(pd.Series(values, dtype=object))
            param_names.append(col)
        return param_names


class _Columns(NamedTuple):
    """Where a result file keeps the columns an entry is read from (None: not kept), and each statistic's
    list in the table with its place."""

    result: int | None
    started_at: int | None
    version: int | None
    stats: list[tuple[list[Any], int | None]]


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


_PLAIN = {float, type(None)}


def _all_plain(values: list[Any]) -> bool:
    """The common case, checked fast (in C: types, then two searches): every value a finite float (or NaN)
    or None."""
    return set(map(type, values)) <= _PLAIN and math.inf not in values and -math.inf not in values


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
