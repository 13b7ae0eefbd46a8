"""asv result histories into one tidy pandas DataFrame, read with asv's own loader (``asv.util.load_json``).

One row per machine x environment x commit x benchmark x parameter combination. Works on
any asv results directory (``<results>/<machine>/machine.json`` plus result files, and
``benchmarks.json`` at the top); nothing here knows this suite's benchmarks. No torch.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from asv import util as asv_util
from asv.machine import Machine
from asv.results import Results

from devbench.report.fields import _ResultFile, _short
from devbench.report.parallel import in_halves
from devbench.report.problems import Problem, ReportError
from devbench.report.records import attach_gpu_state, runinfo_index
from devbench.report.table import _Table


@dataclass
class Loaded:
    """The tidy frame and what was wrong on the way."""

    frame: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    results_dir: Path | None = None
    param_columns: list[str] = field(default_factory=list)
    machine_columns: list[str] = field(default_factory=list)
    #: figures of ``python -m devbench.worlds.collectives`` runs (see ``load_collectives``)
    collectives: pd.DataFrame | None = None
    #: the newest shape search per machine, device and dtype (see ``records.load_achievable``)
    achievable: pd.DataFrame | None = None
    #: the newest ``python -m devbench.worlds.fleet`` run per machine, a row per rank and figure
    fleet: pd.DataFrame | None = None
    #: the newest ``PeerMatrix`` run per machine and size, a row per GPU pair and direction
    peers: pd.DataFrame | None = None
    #: what each short environment label stands for (``records.env_legend``), once paths are hidden
    env_legend: pd.DataFrame | None = None


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
        from devbench.records.files import project_above

        above = project_above() if not results_dir.is_absolute() else None
        where = f"; this is a subfolder of the project {above}: run there" if above else ""
        raise ReportError(f"results directory {results_dir} does not exist (run `asv run` first, or pass "
                          f"--results{where})")  # fmt: skip
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


def saved_results(results: Path, sha: str) -> list[_ResultFile]:
    """The result files asv saved for commit ``sha`` in one machine's results folder, read as the report reads
    them (``_read_result_file``: asv's loader and format check); a file that cannot be read is left out."""
    found = []
    for path in _result_files(results):
        try:
            data = _read_result_file(path, results.name)
        except (OSError, ValueError, asv_util.UserError):
            continue
        if data.commit_hash == sha:
            found.append(data)
    return found


def value_at(data: _ResultFile, name: str, params: tuple[str, ...], column: str = "result") -> float | None:
    """The figure a result file holds for benchmark ``name`` at ``params`` (each value as asv writes it, its
    ``repr``), or None: not run, skipped or failed; with ``column``, that column's value there (``stats_ci_99_a``,
    ``stats_repeat``, ...)."""
    row, i_result = data.results.get(name), data.column.get(column)
    if row is None or i_result is None or i_result >= len(row):
        return None
    combos = list(itertools.product(*data.frozen_params.get(name, ())))
    result = row[i_result]
    values = result if isinstance(result, list) else [result]
    if params not in combos or combos.index(params) >= len(values):
        return None
    value = values[combos.index(params)]
    return float(value) if isinstance(value, int | float) and value == value else None


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


def _why(exc: Exception) -> str:
    """The first line of a reader's error (asv's own names `asv update` for an old file format)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


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
    with _collector_paused():
        table = _read_files(jobs, root, runs, known, select, problems)
        select.check_names_exist(root)
        frame, param_names, extra = table.frame(known, problems)
    return Loaded(attach_gpu_state(frame, root.parent / "gpustate"), problems, root, param_names, extra)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off meanwhile (as it was after). The reader makes millions of
    small lists and dicts that live until the frame is built: a collection finds nothing to free among
    them, and its passes over them cost a tenth of the load on a 1,000-file history."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
    table.finish()
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


