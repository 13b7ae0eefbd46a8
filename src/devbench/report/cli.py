"""``devbench report``: asv results -> Markdown, HTML, CSV and PNG under reports/."""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from collections.abc import Sequence
from pathlib import Path

EXAMPLES = """\
examples:
  devbench report                                   # .asv/results -> reports/latest/
  devbench report --results other/.asv/results --out /tmp/r --format md
  devbench report --machine h100 --machine a100     # machine vs machine on shared commits
  devbench report --env existing-py_usr_bin_python3 # one environment only
  devbench report --base 1a2b3c4d --head 5e6f7a8b   # commit vs commit (hash prefixes)
  devbench report --since 2026-11-01 --benchmarks 'bench_transfer\\.'
  devbench report --collectives /shared/collectives # torchrun figures from a cluster run

The output folder is replaced whole: built beside it, then swapped in, so a reader (or a
run killed at any moment) sees the old report or the new one, never a mix.

exit status: 0 report written; 2 bad input or nothing to report; 130 interrupted.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=".asv/results", help="asv results directory (default: %(default)s)")
    p.add_argument(
        "--collectives",
        metavar="DIR",
        help="figures of `python -m devbench.worlds.collectives` runs (default: collectives/ beside --results)",
    )
    p.add_argument(
        "--compare",
        metavar="DIR",
        help="a `devbench compare` output folder whose verdicts to show (default: compare/ beside --results)",
    )
    p.add_argument("--out", default="reports/latest", help="where to write the report (default: %(default)s)")
    p.add_argument("--machine", action="append", help="only this machine (repeat for several)")
    p.add_argument("--env", action="append", help="only this asv environment name (repeat for several)")
    p.add_argument("--since", help="only commits dated on or after this day (YYYY-MM-DD)")
    p.add_argument("--commits", type=int, help="only the N most recent commits")
    p.add_argument("--benchmarks", metavar="REGEX", help="only benchmarks whose name matches (re.search)")
    p.add_argument("--base", help="commit (hash prefix) to compare from (default: the second most recent)")
    p.add_argument("--head", help="commit (hash prefix) to compare to (default: the most recent)")
    p.add_argument("--factor", type=float, default=1.1, help="asv compare's factor for a change (default: 1.1)")
    p.add_argument(
        "--format",
        default="md,html,csv,png",
        help="comma-separated outputs among md, html, csv, parquet, png (default: %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="print only errors and warnings")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="devbench report",
        description=(
            "Load an asv results directory (every machine, commit and environment) into one pandas table and "
            "write a report: derived figures (TFLOP/s, GB/s, speedups, crossover, scaling), commit vs commit "
            "with asv compare's rule, machine vs machine and environment vs environment on the same commit, "
            "and history. Works on any asv project's results; suite-specific sections appear where their "
            "benchmarks ran."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return p


def _fail(message: str) -> int:
    print(f"devbench report: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """``devbench report``: 0 written, 2 bad input (one line naming it), 130 interrupted."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("devbench report: interrupted; the previous report is left as it was", file=sys.stderr)
        return 130
    finally:
        gc.unfreeze()  # what ``_run`` froze is collectable again (a caller that goes on, as tests do)


def _run(args: argparse.Namespace) -> int:
    from devbench.records.files import OutputError, check_out_dir, staged_dir
    from devbench.report import sections, writers
    from devbench.report import steps as ST
    from devbench.report.asvrule import commit_pair
    from devbench.report.load import load_results
    from devbench.report.parallel import Forked
    from devbench.report.problems import ReportError

    started = time.perf_counter()
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    try:
        check_out_dir(Path(args.out))
        _check_options(args, formats, writers.FORMATS)
        loaded = load_results(args.results, machines=args.machine, envs=args.env, benchmarks=args.benchmarks)
        _add_collectives(loaded, args)
        _add_side_records(loaded, args)
        for p in loaded.problems:
            if p.kind == "input":
                print(f"devbench report: warning: {p}", file=sys.stderr)
        if older := sorted({p.path for p in loaded.problems if p.kind == "version"}):
            print(f"devbench report: {len(older)} benchmark(s) changed version within this history: their older "
                  "results are kept in the tables and left out of comparisons, as asv does", file=sys.stderr)
        _nothing_read(loaded, args)
        # What is alive now (modules, the frame) lives until the report is written: collections leave it
        # alone from here on instead of passing over it each time (0.2 s on a 1,000-file history).
        gc.freeze()
        loaded.frame = _select(loaded.frame, args)
        _hide_paths(loaded)
        pair = commit_pair(loaded.frame, args.base, args.head)
        verdicts, source, host = _judging(args)
    except (ReportError, OutputError) as exc:
        return _fail(str(exc))
    out = Path(args.out)
    try:
        # Step detection first, its series in halves on both cores (``steps.detect``). Then three jobs of about
        # a second each on 1,000 files share the two cores: the CSV (500,000 rows, 285 MB) and the plots
        # (matplotlib's import, the history's six panels) in forked children, the tables here. (The steps then
        # the plots in one child, with the CSV and the tables here, left one side waiting a second for the
        # other; the CSV's child forked before the steps, three processes over them, took longer.)
        plots = "png" in formats or "html" in formats
        tables = [f for f in formats if f in writers.TABLE_FORMATS]
        steps = ST.detect(loaded.frame[loaded.frame["version_current"]])
        with staged_dir(out) as tmp:
            with Forked(functools.partial(writers.write, None, loaded, tmp, tables), name="devbench-report-csv",
                        fork=bool(tables)) as writing, \
                    Forked(functools.partial(sections.plot_all, loaded, steps) if plots else dict,
                           name="devbench-report-plots", fork=plots) as drawing:  # fmt: skip
                rep = sections.build(
                    loaded, pair=pair, factor=args.factor, plots=plots, verdicts=verdicts,
                    verdicts_source=source, verdicts_host=host, steps=steps, drawn=drawing.result,
                )  # fmt: skip
                written = writers.write(rep, loaded, tmp, [f for f in formats if f not in writers.TABLE_FORMATS])
                try:
                    written = writing.result() + written
                except RuntimeError as exc:  # the child's error, as its message; the staged folder is dropped
                    why = str(exc).removeprefix("the forked child failed: ")
                    raise OutputError(f"--out {out}: could not write the {', '.join(tables)}: {why}") from None
    except OutputError as exc:
        return _fail(str(exc))
    written = [out / p.name for p in written]
    if not args.quiet:
        rows = len(loaded.frame)
        print(f"devbench report: {rows} results from {args.results} in {time.perf_counter() - started:.1f} s")
        for path in written:
            print(f"  wrote {path}")
    return 0


def _check_options(args: argparse.Namespace, formats: list[str], known: Sequence[str]) -> None:
    """``ReportError`` naming the first option that cannot work (regular expressions: ``load_results``)."""
    from devbench.report.problems import ReportError

    if not formats or any(f not in known for f in formats):
        raise ReportError(f"--format {args.format!r}: choose among {', '.join(known)}")
    if args.factor is not None and args.factor < 1.0:
        raise ReportError(f"--factor must be >= 1.0, got {args.factor}")
    if args.commits is not None and args.commits < 1:
        raise ReportError(f"--commits must be >= 1, got {args.commits}")
    if args.collectives and not Path(args.collectives).is_dir():
        raise ReportError(f"--collectives {args.collectives}: no such directory")
    if args.since:  # before the results load: a bad date is named before what the load prints
        import pandas as pd

        try:
            day = pd.Timestamp(args.since, tz="UTC")
        except ValueError:
            day = None
        if day is None or pd.isna(day):
            raise ReportError(f"--since {args.since!r} is not a date (YYYY-MM-DD)")


def _hide_paths(loaded) -> None:
    """Short environment labels instead of asv's names (which hold interpreter paths), in the frame and problems."""
    from devbench.report.problems import Problem
    from devbench.report.records import env_labels, env_legend, without_paths

    labels = env_labels(loaded.frame)
    loaded.env_legend = env_legend(loaded.frame)
    loaded.frame = without_paths(loaded.frame)
    root = str(loaded.results_dir) if loaded.results_dir else ""

    def clean(text: str) -> str:
        if root and text.startswith(root):
            text = Path(root).name + text[len(root) :]
        for name, label in labels.items():
            text = text.replace(name, label)
        return text

    loaded.problems = [Problem(clean(p.path), clean(p.message), p.kind) for p in loaded.problems]


def _judging(args: argparse.Namespace):
    """A compare table (``--compare``, else ``compare/`` beside the results), if any, its
    path, and how that compare measured (a line from its run.json; empty without one)."""
    import pandas as pd

    from devbench.report.problems import ReportError
    asv_dir = Path(args.results).parent
    folder = Path(args.compare) if args.compare else asv_dir / "compare"
    path = folder / "compare.csv"
    if not path.is_file():
        if args.compare:
            raise ReportError(f"--compare {args.compare}: no compare.csv there (the --out of devbench compare)")
        return None, "", ""
    try:
        table = pd.read_csv(path, keep_default_na=False, na_values=["", "nan"], dtype={"params": str})
        missing = {"benchmark", "params", "unit", "verdict", "ratio", "ratio_lo", "ratio_hi", "base", "head", "floor"}
        missing -= set(table.columns)
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: not a devbench compare table ({exc})") from None
    if missing:
        raise ReportError(f"{path}: not a devbench compare table (no {', '.join(sorted(missing))} column)")
    table["params"] = table["params"].fillna("")
    return table, str(path), _host_line(folder / "run.json")


def _environment(env: dict | None) -> str:
    """A side's environment from a compare's run.json: "torch 2.13.0+cpu (CUDA none, cuDNN none), Python 3.11.7"."""
    if not env:
        return ""
    torch = f"torch {env['torch']} (CUDA {env.get('cuda') or 'none'}, cuDNN {env.get('cudnn') or 'none'}), " if (
        "torch" in env) else ""  # fmt: skip
    return f"{torch}Python {env.get('python_version', '?')} at {env.get('python', '?')}"


def _host_line(path: Path) -> str:
    """How the compare behind the A/B table measured, from its run.json: machine, pairs of processes and
    time; empty where the file is unreadable. (Read here, not through ``devbench.compare``: the report and
    the compare code do not import each other.)"""
    import json

    try:
        run = json.loads(path.read_text())
        opts = run.get("options") or {}
        # the pairs of processes each measured figure got (a figure that could no longer be decided stopped early)
        unmeasured = ("skip", "error", "changed", "same code")
        got = sorted({len(f.get("pass_seconds") or []) for f in (run.get("figures") or {}).values()
                      if f.get("state") not in unmeasured and f.get("pass_seconds")})  # fmt: skip
        span = f"{got[0]} to {got[-1]}" if len(got) > 1 else (str(got[0]) if got else "")
        each = (f"each figure measured by {span} pairs of processes taking turns (a verdict needs "
                f"{opts.get('min_passes')})" if span else
                f"each figure from {opts.get('min_passes')} to {opts.get('max_passes')} pairs of processes taking "
                "turns")  # fmt: skip
        line = f"host: {run['machine']}; {each}, {float(run.get('seconds', 0)) / 60:.1f} min in all."
        sides = run.get("sides") or {}
        shas = {side.get("sha") for side in sides.values()}
        envs = {side: _environment(info.get("environment")) for side, info in sides.items()}
        if len(set(envs.values())) > 1 or any(envs.values()):
            line += " Environments: " + "; ".join(f"{side} {env or 'not recorded'}" for side, env in envs.items()) + "."
        if len(shas) == 1 and None not in shas and len(set(envs.values())) <= 1:
            line += f" Both sides are commit {shas.pop()[:8]}: an A/A run, where any faster or slower is false."
        return line
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return ""


def _add_side_records(loaded, args: argparse.Namespace) -> None:
    """The shape searches of ``bench_achievable``, the ``devbench.worlds.fleet`` runs and ``PeerMatrix``'s pairs
    (``achievable/``, ``fleet/`` and ``peers/`` beside the results) of the chosen machines."""
    from devbench.report.records import load_achievable, load_fleet, load_peers

    found = load_achievable(Path(args.results).parent / "achievable", loaded.problems)
    loaded.achievable = found[found["machine"].isin(args.machine)] if args.machine else found
    fleet = load_fleet(Path(args.results).parent / "fleet", loaded.problems)
    loaded.fleet = fleet[fleet["machine"].isin(args.machine)] if args.machine else fleet
    peers = load_peers(Path(args.results).parent / "peers", loaded.problems)
    loaded.peers = peers[peers["machine"].isin(args.machine)] if args.machine else peers


def _add_collectives(loaded, args: argparse.Namespace) -> None:
    """The torchrun collectives files (``--collectives``, default: beside the results) of the chosen machines."""
    from devbench.report.records import load_collectives

    folder = Path(args.collectives) if args.collectives else Path(args.results).parent / "collectives"
    runs = load_collectives(folder, loaded.problems)
    loaded.collectives = runs[runs["machine"].isin(args.machine)] if args.machine else runs


def _nothing_read(loaded, args: argparse.Namespace) -> None:
    """``ReportError`` saying why when no result could be read at all (before any selection)."""
    from devbench.report.problems import ReportError

    if not loaded.frame.empty:
        return
    skipped = [p for p in loaded.problems if "not a readable asv result file" in p.message]
    if skipped and any("asv update" in p.message for p in skipped):
        raise ReportError(f"nothing to report: the {len(skipped)} result file(s) in {args.results} are in an older "
                          f"asv format; run `asv update` in the project to convert them")  # fmt: skip
    if skipped:
        raise ReportError(f"nothing to report: none of the {len(skipped)} result file(s) in {args.results} could be "
                          f"read (first: {skipped[0].path}: {skipped[0].message})")  # fmt: skip
    from devbench.report.load import _result_files

    root = Path(args.results)
    if not any(next(iter(_result_files(folder)), None) for folder in root.iterdir() if folder.is_dir()):
        raise ReportError(f"nothing to report: {args.results} holds no asv result file, only machine records (asv "
                          "saves results only where it knows the commit it measured: `asv run --set-commit-hash "
                          "$(git rev-parse HEAD)`, as `make bench` runs it)")  # fmt: skip


def _select(frame, args: argparse.Namespace):
    """The rows ``--since`` and ``--commits`` keep; ``ReportError`` when none is left."""
    import pandas as pd

    from devbench.report.asvrule import commits_in
    from devbench.report.problems import ReportError

    if args.since:
        try:
            since = pd.Timestamp(args.since, tz="UTC")
        except ValueError:
            raise ReportError(f"--since {args.since!r} is not a date (YYYY-MM-DD)") from None
        frame = frame[frame["date"] >= since]
    if args.commits:
        frame = frame[frame["commit"].isin(commits_in(frame)[-args.commits :])]
    if frame.empty:
        raise ReportError(f"nothing to report: no results in {args.results} match the selection")
    return frame.reset_index(drop=True)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
