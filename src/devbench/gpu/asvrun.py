"""``python -m devbench.gpu.asvrun ARGS``: ``asv ARGS``, with each benchmark's results on disk as soon as it ends.

asv writes a commit's results once, after every selected benchmark of an environment has run
(``asv/commands/run.py``: ``result.save`` after ``run_benchmarks``), and writes the file in
place. A run stopped at a time limit, by SIGTERM or by a lost machine therefore keeps nothing
of what it measured, and one stopped while writing leaves a truncated file that asv then
refuses to load. ``devbench gpu-run`` starts asv through this module instead, which changes
how asv saves and nothing else:

* ``Results.save`` writes into a temporary folder beside the results and renames the file into
  place, so the file on disk is always a whole one (the old one or the new one);
* ``Results.add_result``, which asv calls as each benchmark ends, saves at once: what asv has
  printed ``ok`` for is on disk before the next benchmark starts;
* a benchmark's params are saved as they end too, every ``SAVE_EVERY_S`` (2 s) at most (``_save_each_param``):
  a stage stopped in a benchmark of 80 params keeps the params asv finished but the last 2 s (on the VM, a stage
  given half its estimate kept 14 of its 28 points, where it had kept none).

And where ``DEVBENCH_ASV_DISCOVERY`` names the discovery ``devbench gpu-run``'s listing wrote of the same
benchmark folder (``devbench.compare.worker.write_discovery``: asv_runner's own, in the same Python), asv takes it
instead of importing the suite once more in a process of its own to discover it (a torch import and the suite's
modules: about 4 s on a GPU image). Any other folder, or no such file, and asv discovers as always.

And where every environment asked for is an existing interpreter (gpu-run's ``-E existing:PYTHON``), asv lists its
configuration's other environments without warning of those it cannot make.

The save uses asv's own results API (``load_data`` before the run tells where the results go;
``save`` writes the same file asv would), so what ends on disk is what asv itself would write.
A dry run, where asv never loads earlier results, saves nothing, as asv's own.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

#: the attribute where a ``Results`` keeps the folder asv loaded it from (set by the patched ``load_data``)
_DIR = "_devbench_results_dir"


def save_as_it_goes() -> None:
    """Patch asv's ``Results`` so that every benchmark's result is saved as it ends, each save atomic."""
    from asv import results as R

    if getattr(R.Results, "_devbench_patched", False):
        return
    load_data, add_result, save = R.Results.load_data, R.Results.add_result, R.Results.save
    R.Results._devbench_add = add_result  # asv's own, for the saves of each param (``_save_each_param``)

    def atomic_save(self, result_dir):
        # beside the results, not in them: a kill mid-save leaves a folder asv's later commands never walk into
        tmp = tempfile.mkdtemp(prefix=".saving-", dir=os.path.dirname(os.path.abspath(result_dir)))
        try:
            save(self, tmp)
            dest = os.path.join(result_dir, self._filename)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(os.path.join(tmp, self._filename), dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remembering_load(self, result_dir):
        setattr(self, _DIR, result_dir)
        return load_data(self, result_dir)

    def saving_add(self, *args, **kwargs):
        add_result(self, *args, **kwargs)
        where = getattr(self, _DIR, None)
        if where is not None:
            atomic_save(self, where)

    R.Results.load_data = remembering_load
    R.Results.add_result = saving_add
    R.Results.save = atomic_save
    R.Results._devbench_patched = True
    _save_each_param(atomic_save)


#: seconds between two saves of a benchmark's params so far: a copy and a save of a GPU run's results take about 0.1 s
#: on the VM, too dear after each of 900 params; a stop loses at most this much of the benchmark it is in
SAVE_EVERY_S = 2.0


def _save_each_param(atomic_save) -> None:
    """Patch asv's runner so that a benchmark's params are on disk as they end (every ``SAVE_EVERY_S`` at most), not
    only the whole benchmark.

    asv adds a benchmark's result once all its params have run (``runner.run_benchmark``); a stage stopped
    while a benchmark of 80 params runs would keep none of the params finished. Each param's run is asv's own
    (``run_benchmark`` of that one index); after each, a copy of the results with the params so far added
    (``add_result`` with their indices, as asv adds a selection) is saved, and asv's own add at the end is the
    one kept in memory, so nothing is added twice."""
    import copy
    import datetime

    from asv import runner as RN
    from asv.commands import run as RC

    run_benchmarks, run_benchmark = RN.run_benchmarks, RN.run_benchmark
    call: dict = {}

    def remembering_runs(benchmarks, env, results=None, **kwargs):
        call.update(results=results, record=bool(kwargs.get("record_samples")), added=set())
        try:
            return run_benchmarks(benchmarks, env, results=results, **kwargs)
        finally:
            call.clear()

    def each_param(benchmark, spawner, profile, selected_idx=None, extra_params=None, cwd=None, prev_result=None):
        results = call.get("results")
        where = getattr(results, _DIR, None) if results is not None else None
        count = 1
        for values in benchmark["params"]:
            count *= len(values)
        wanted = [i for i in range(count) if selected_idx is None or i in selected_idx]
        if where is None or len(wanted) < 2:
            return run_benchmark(benchmark, spawner, profile, selected_idx, extra_params, cwd, prev_result)
        started = datetime.datetime.now(datetime.timezone.utc)
        parts, done, saved = [], set(), time.monotonic()
        for idx in wanted:
            parts.append(run_benchmark(benchmark, spawner, profile, {idx}, extra_params, cwd, prev_result))
            done.add(idx)
            if time.monotonic() - saved < SAVE_EVERY_S or idx == wanted[-1]:  # the last: asv's own add saves it
                continue
            saved = time.monotonic()
            partial = copy.deepcopy(results)
            took = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
            R_add(partial, benchmark, _merged(parts, count, done), selected_idx=set(done), started_at=started,
                  duration=took, record_samples=call["record"] or benchmark["name"] in call["added"],
                  append_samples=benchmark["name"] in call["added"])  # fmt: skip
            atomic_save(partial, where)
        call["added"].add(benchmark["name"])
        return _merged(parts, count, done)

    from asv import results as R

    R_add = R.Results._devbench_add
    RN.run_benchmark = each_param
    RN.run_benchmarks = RC.run_benchmarks = remembering_runs


def _merged(parts, count: int, done: set[int]):
    """One ``BenchmarkResult`` of ``count`` params from the single-param runs ``parts`` (each asv's, nan elsewhere)."""
    import math

    from asv.runner import BenchmarkResult, _combine_profile_data

    result, samples, number = [math.nan] * count, [None] * count, [None] * count
    stderr, errcode, profiles = [], 0, []
    for part, idx in zip(parts, sorted(done), strict=True):
        result[idx], samples[idx], number[idx] = part.result[idx], part.samples[idx], part.number[idx]
        if part.stderr:
            stderr.append(part.stderr)
        errcode = part.errcode or errcode
        profiles.append(part.profile)
    return BenchmarkResult(result=result, samples=samples, number=number, errcode=errcode,
                           stderr="\n\n".join(stderr), profile=_combine_profile_data(profiles))  # fmt: skip


def discovered_once() -> None:
    """Patch asv's discovery to take the one ``DEVBENCH_ASV_DISCOVERY`` names, where it lists the same folder."""
    from asv import benchmarks as B
    from asv.console import log

    from devbench.compare.worker import ASV_DISCOVERY_ENV

    path = os.environ.get(ASV_DISCOVERY_ENV)
    if not path or getattr(B.Benchmarks, "_devbench_discovered", False):
        return
    discover = B.Benchmarks._disc_benchmarks.__func__

    def listed(cls, conf, repo, environments, commit_hashes, check):
        if check:  # asv check imports the suite itself
            return discover(cls, conf, repo, environments, commit_hashes, check)
        try:
            with open(path, encoding="utf-8") as fp:
                record = json.load(fp)
        except (OSError, ValueError) as exc:
            record, why = {}, f"cannot read it ({exc})"
        else:
            why = _mismatch(record, conf.benchmark_dir)
        if not why:
            log.info("Discovered benchmarks: devbench gpu-run's listing of this folder")
            return record["benchmarks"]
        log.warning(f"gpu-run's listing of the suite not taken: {why}; discovering it again")
        return discover(cls, conf, repo, environments, commit_hashes, check)

    B.Benchmarks._disc_benchmarks = classmethod(listed)
    B.Benchmarks._devbench_discovered = True


def _mismatch(record: object, benchmark_dir: str) -> str | None:
    """Why a discovery record does not stand for asv's own discovery of ``benchmark_dir`` here, else None."""
    import devbench

    if not isinstance(record, dict) or not isinstance(record.get("benchmarks"), list):
        return "it holds no list of benchmarks"
    if record.get("benchmark_dir") != os.path.abspath(benchmark_dir):
        return f"it lists {record.get('benchmark_dir')}, not {os.path.abspath(benchmark_dir)}"
    if record.get("devbench") != os.path.realpath(devbench.__file__):
        return f"its suite imported devbench from {record.get('devbench')}, asv's from {devbench.__file__}"
    return None


def quiet_matrix() -> None:
    """Patch asv's listing of environments quiet where every one asked for is an existing interpreter.

    asv lists every environment of the configuration's matrix to match ``-E`` by name, and warns of each it cannot
    make: on a GPU image whose Python is not the one ``asv.conf.json`` names, "No executable found for python 3.11"
    at every stage, for environments an ``existing:PYTHON`` run never uses."""
    from asv import environment as E

    if getattr(E, "_devbench_quiet", False):
        return
    listing = E.get_environments

    def quiet(conf, env_specifiers, verbose=True):
        if env_specifiers and all(str(spec).startswith("existing:") for spec in env_specifiers):
            verbose = False
        return listing(conf, env_specifiers, verbose=verbose)

    E.get_environments = quiet
    E._devbench_quiet = True


def main(argv: Sequence[str] | None = None) -> int:
    save_as_it_goes()
    discovered_once()
    quiet_matrix()
    from asv.main import main as asv_main

    sys.argv = ["asv", *(sys.argv[1:] if argv is None else argv)]
    code = asv_main()
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
