"""What a finished ``devbench compare --all-passes`` would have cost under the default stopping rule.

An ``--all-passes`` run keeps every figure to ``--min-passes``, so its intervals say what each figure can
detect. The default stops a figure after any even pass once it is certain to stay undecided
(``stopping.settled`` without ``decide``), through the screen's passes (``--screen``, 4) once it could no
longer be decided after ``stopping.robust_passes``, and a decided one from ``--min-passes`` on. This
replays that rule on the run's own pass values and prices it with the seconds each figure took in each
pass (``run.json``'s ``pass_seconds``) plus each pass's own overhead (starting the workers, and
``setup_cache`` while a figure that reads it runs on: the seconds it took with every figure of its sweep,
so a sweep that runs on with few figures is priced high), and lists the verdicts that change (futility
changes none; the screen can leave one undecided, which is its price). It then says, per family, what
each figure can detect after every pass (the floor plus half its interval, ``verdict.detectable``).

``--pairs K`` replays the run as if each pass had kept at most ``K`` pairs of blocks (the first ``K``):
the price of fewer turns in power. A figure's turns in a pass (its seconds less its set-up) are priced
at ``(K + 1) / (n + 1)`` of what they took with ``n`` kept pairs, the first pair, never kept, included.

``--shift P`` replays the run as if the head had been slower by ``P`` (0.1: 10%) in every block, a
change of that size on this run's own noise: how many figures the rule calls ``slower`` (its power,
the screen's losses included) against how many the run's every pass would. An A/A run replayed without it
says how many it calls falsely.

``--same`` replays ``devbench compare --same``: a figure that may still end ``same`` runs on until it does
or no longer can, where the default stops it once it can be neither faster nor slower.

``--min-passes K`` replays it as if ``--min-passes`` had been ``K``, at most the run's own (it kept every figure
to that many passes only): a run of 20 passes replays the default of 10 and the rule of 20 alike, each figure's
verdict at its replayed stop against the one from all its passes.

``--max-passes M`` replays it as if ``--max-passes`` had been ``M`` (at least the replay's ``--min-passes``): the passes
after ``M`` are dropped, and a figure is certain to stay undecided as soon as ``M`` values could not
decide it. Fewer passes at most make that certain sooner (at 8 and 99% the interval is the range of
the values, so two values either side of the floor's edge settle it), at the price of the figures
that more passes would have decided.

``--passes N`` also estimates what each figure could detect with ``N`` pairs of processes, more than the run
measured: its interval from ``N`` of its own pass values drawn with replacement, half of them from the passes
whose base was set up first and half from the others (so the order's effect stays in), the median of 200
such draws. An estimate, not a measurement: a draw holds no value beyond those measured, so where the host
can read a figure further apart than it did in the run, more passes would detect less than it says.

    python scripts/research/replay_stops.py reports/compare-aa/all-passes [--full-run-s 388] [--pairs 2] \
        [--min-passes 8]
        [--max-passes 8] [--screen 0] [--same] [--passes 20]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from devbench.compare import judge, stopping  # noqa: E402
from devbench.compare.options import SCREEN, ABError  # noqa: E402
from devbench.compare.record import read_finished  # noqa: E402
from devbench.compare.runner import Figure  # noqa: E402
from devbench.records import verdict as V  # noqa: E402
from devbench.records.spec import direction  # noqa: E402


def replayed_stop(
    fig: Figure, limit: int, min_passes: int, floor: float, confidence: float, screen: int = SCREEN,
    changes_only: bool = True,
) -> int:
    """The pass after which the default rule stops ``fig`` (its own count when it never does earlier)."""
    for m in range(2, len(fig.a), 2):
        early = Figure(fig.combo, a=fig.a[:m], b=fig.b[:m])
        if stopping.settled(early, limit - m, floor, confidence, decide=m >= min_passes, screen=screen,
                         changes_only=changes_only):  # fmt: skip
            return m
    return len(fig.a)


def cache_seconds(
    passes: list[dict], figures: dict[str, dict], stops: dict[str, int]
) -> tuple[list[float], list[float]]:
    """Per pass, what its ``setup_cache`` runs took (``run.json``'s ``caches``), and what of it the replay charges:
    a key's seconds up to the last pass a figure that reads it is replayed to run (``stops``, by selector). A
    record without ``caches`` (an older run) says nothing of them: its whole overhead is charged every pass."""
    if not all("caches" in q for q in passes):
        return [0.0] * len(passes), [0.0] * len(passes)
    last: dict[str, int] = {}
    for sel, f in figures.items():
        if f.get("setup_cache") and sel in stops:
            last[f["setup_cache"]] = max(last.get(f["setup_cache"], 0), stops[sel])
    spent = [sum(q["caches"].values()) for q in passes]
    charged = [sum(s for k, s in q["caches"].items() if i < last.get(k, 0)) for i, q in enumerate(passes)]
    return spent, charged


def slowed(fig: Figure, by: float) -> Figure:
    """``fig`` as if its head had been slower by ``by`` in every block: its time longer, its rate lower (a record,
    with no better direction, as it was)."""
    way = direction(fig.combo.benchmark, fig.combo.unit)
    if not way:
        return fig
    factor = 1 + by if way == "lower" else 1 / (1 + by)
    return Figure(fig.combo, a=fig.a, b=[[y * factor for y in ys] for ys in fig.b], state=fig.state, reason=fig.reason)


def verdict_counts(rows: list[tuple[str, str]]) -> str:
    """``faster 0, slower 3, same 0, undecided 5`` of (family, verdict) rows."""
    return ", ".join(f"{v} {sum(r == v for _, r in rows)}" for v in ("faster", "slower", "same", "undecided"))


def first_pairs(fig: Figure, k: int) -> Figure:
    """``fig`` with the first ``k`` pairs of blocks of each pass only."""
    return Figure(fig.combo, a=[x[:k] for x in fig.a], b=[y[:k] for y in fig.b], state=fig.state, reason=fig.reason)


def priced(fig: Figure, spent: list[float], setup_s: float, k: int | None) -> list[float]:
    """What each pass of ``fig`` would have cost keeping at most ``k`` pairs of blocks (``None``: as it ran)."""
    if k is None or not fig.a:
        return spent
    setup = setup_s / len(spent) if spent else 0.0
    out = []
    for s, blocks in zip(spent, fig.a, strict=False):
        n = len(blocks)
        out.append(setup + max(s - setup, 0.0) * (min(k, n) + 1) / (n + 1))
    return out


#: draws of ``resampled``. On reports/compare-power/all-passes at 20 pairs of processes, five seeds moved the
#: median of the figures outside the sweeps by 0.4 points (8.3-8.7%), one figure by up to 4 points: read a
#: family's or the suite's median, not one figure's
DRAWS = 200


def resampled(fig: Figure, n: int, floor: float, confidence: float, rng: random.Random, draws: int = DRAWS) -> float:
    """What ``fig`` could detect with ``n`` pairs of processes, estimated from its own: the median, over
    ``draws``, of the detectable change of ``n`` of its pass values drawn with replacement, as many from the
    passes whose base was set up first (the odd ones) as from the others. Infinite without a value of each."""
    values = judge.process_pair_logs(fig)
    odd, even = values[0::2], values[1::2]
    if not odd or not even:
        return math.inf
    found = []
    for _ in range(draws):
        units = rng.choices(odd, k=(n + 1) // 2) + rng.choices(even, k=n // 2)
        _, lo, hi = V.paired_interval(units, confidence)
        found.append(V.detectable(lo, hi, floor))
    return statistics.median(found)


def detect_table(
    figures: list[Figure], floor: float, confidence: float, passes: int | None = None, seed: int = 0
) -> list[str]:
    """Per family (benchmark class): figures judged, the median detectable change, how many at 10% or less;
    with ``passes``, each figure's detectable change estimated at that many pairs of processes (``resampled``)
    instead of measured."""
    own = judge.confidences(figures, confidence)
    rng = random.Random(seed)
    by_family: dict[str, list[float]] = {}
    outside: list[float] = []  # the figures not measured in a sweep (setup_cache)
    for fig in figures:
        if fig.state in ("skip", "error") or not fig.a:
            continue
        family = fig.combo.benchmark.split(".")[-2]
        mine = own[fig.combo.selector]
        found = (resampled(fig, passes, floor, mine, rng) if passes is not None
                 else judge.verdict_row(fig, floor, mine)["detectable"])  # fmt: skip
        by_family.setdefault(family, []).append(found)
        if not fig.combo.in_cache:
            outside.append(found)
    rows = sorted(by_family.items(), key=lambda kv: statistics.median(kv[1]))
    lines = [f"  {'family':<18} {'figures':>7} {'median %':>9} {'<= 10%':>7}"]
    for family, dets in rows:
        median = statistics.median(dets)
        shown = f"{100 * median:.1f}" if math.isfinite(median) else "inf"
        lines.append(f"  {family:<18} {len(dets):>7} {shown:>9} {sum(d <= 0.10 for d in dets):>7}")
    every = [d for _, dets in rows for d in dets]
    for label, dets in (("all", every), ("all but sweeps", outside if len(outside) < len(every) else [])):
        if dets:
            median = statistics.median(dets)
            shown = f"{100 * median:.1f}" if math.isfinite(median) else "inf"
            lines.append(f"  {label:<18} {len(dets):>7} {shown:>9} {sum(d <= 0.10 for d in dets):>7}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the --out folder of a devbench compare --all-passes")
    p.add_argument("--full-run-s", type=float, help="seconds of one full asv run, to give the cost in full runs")
    p.add_argument(
        "--pairs",
        type=int,
        metavar="K",
        help="replay keeping at most K pairs of blocks a pass (the first K), turns priced to match",
    )
    p.add_argument("--max-passes", type=int, metavar="M",
                   help="replay as if --max-passes had been M (at least the replay's --min-passes)")
    p.add_argument("--min-passes", type=int, metavar="K",
                   help="replay as if --min-passes had been K (at most the run's own): verdicts from the K-th pass on")
    p.add_argument("--shift", type=float, metavar="P",
                   help="replay as if the head had been slower by P (0.1: 10%%) in every block")
    p.add_argument("--same", action="store_true",
                   help="replay compare --same: a figure that may still end same runs on")
    p.add_argument("--screen", type=int, default=SCREEN, metavar="N",
                   help=f"replay with compare's screen through N passes (default {SCREEN}, compare's; 0: none)")
    p.add_argument("--passes", type=int, metavar="N",
                   help="also estimate what each figure could detect with N pairs of processes, by resampling its own")
    args = p.parse_args(argv)
    if args.passes is not None and args.passes < 2:
        print(f"replay_stops: --passes must be at least 2, got {args.passes}", file=sys.stderr)
        return 2
    if args.shift is not None and not 0 < args.shift < 10:
        print(f"replay_stops: --shift must be in (0, 10) (a relative slowdown: 0.1 is 10%), got {args.shift}",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.pairs is not None and args.pairs < 1:
        print(f"replay_stops: --pairs must be at least 1, got {args.pairs}", file=sys.stderr)
        return 2
    try:
        figures, record = read_finished(args.folder)
    except ABError as exc:
        print(f"replay_stops: {exc}", file=sys.stderr)
        return 2
    opts = record.get("options", {})
    if not opts.get("all_passes"):
        print(f"replay_stops: {args.folder} is not an --all-passes run: its figures already stopped early",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.shift is not None:
        figures = [slowed(f, args.shift) for f in figures]
    floor, confidence = float(record["floor"]), float(record["confidence"])
    min_passes, max_passes = int(opts["min_passes"]), int(opts["max_passes"])
    if args.min_passes is not None:
        if not 1 <= args.min_passes <= min_passes:
            print(f"replay_stops: --min-passes must be from 1 to the run's own ({min_passes}: it kept every figure "
                  f"to that many only), got {args.min_passes}", file=sys.stderr)  # fmt: skip
            return 2
        min_passes = args.min_passes
    if args.max_passes is not None:
        if not min_passes <= args.max_passes:
            print(f"replay_stops: --max-passes must be at least the replay's --min-passes ({min_passes}), "
                  f"got {args.max_passes}", file=sys.stderr)  # fmt: skip
            return 2
        max_passes = args.max_passes
    costs = {sel: f.get("pass_seconds") or [] for sel, f in record["figures"].items()}
    passes = record["passes"]
    overhead = [float(q["seconds"]) - sum(c[i] for c in costs.values() if len(c) > i) for i, q in enumerate(passes)]
    if args.pairs is not None:
        setups = {sel: float(f.get("setup_seconds", 0.0)) for sel, f in record["figures"].items()}
        costs = {f.combo.selector: priced(f, costs.get(f.combo.selector, []), setups.get(f.combo.selector, 0.0),
                                          args.pairs) for f in figures}  # fmt: skip
        figures = [first_pairs(f, args.pairs) for f in figures]

    kept_passes: list[int] = []
    stops: dict[int, int] = {}
    changed = []
    replayed: list[tuple[str, str]] = []  # (family, verdict) at the replayed stop; at every pass of the run
    every_pass: list[tuple[str, str]] = []
    judged: list[Figure] = []  # as the replay judges them: at most --max-passes passes
    own = judge.confidences(figures, confidence)  # a sweep's figures split the confidence
    for fig in figures:
        spent = costs.get(fig.combo.selector, [])
        if not fig.a:
            kept_passes.append(len(spent))
            continue
        # a sweep's figure gets the passes its own interval needs, as the run gave it (judge.most_passes)
        own_c = own[fig.combo.selector]
        most = stopping.most_passes(own_c, min_passes, max_passes) if fig.combo.in_cache else max_passes
        limit = most if args.max_passes is not None else max(most, len(fig.a))
        capped = Figure(fig.combo, a=fig.a[:limit], b=fig.b[:limit])
        judged.append(capped)
        stop = replayed_stop(capped, limit, min_passes, floor, own[fig.combo.selector], args.screen,
                             not args.same)  # fmt: skip
        stops[stop] = stops.get(stop, 0) + 1
        kept_passes.append(stop)
        early = Figure(fig.combo, a=fig.a[:stop], b=fig.b[:stop])
        full_row = judge.verdict_row(fig, floor, own[fig.combo.selector])
        early_row = judge.verdict_row(early, floor, own[fig.combo.selector])
        if direction(fig.combo.benchmark, fig.combo.unit):
            family = fig.combo.benchmark.split(".")[-2]
            replayed.append((family, early_row["verdict"]))
            every_pass.append((family, full_row["verdict"]))
        if full_row["verdict"] != early_row["verdict"]:
            changed.append(f"{fig.combo.selector}: {full_row['verdict']} -> {early_row['verdict']}")

    all_s = sum(overhead) + sum(sum(c) for c in costs.values())
    figure_s = sum(sum(c[:k]) for c, k in zip((costs.get(f.combo.selector, []) for f in figures), kept_passes,
                                               strict=True))  # fmt: skip
    last = max(kept_passes, default=0)
    # a pass runs a setup_cache only while a figure that reads it runs on
    stop_of = {f.combo.selector: k for f, k in zip(figures, kept_passes, strict=True)}
    spent, charged = cache_seconds(passes, record["figures"], stop_of)
    replay_s = figure_s + sum(o - c for o, c in zip(overhead[:last], spent, strict=False)) + sum(charged)

    def runs(s: float) -> str:
        return f" ({s / args.full_run_s:.1f} full runs)" if args.full_run_s else ""

    kept = f", at most {args.pairs} pairs of blocks a pass" if args.pairs is not None else ""
    kept += f", verdicts from {min_passes} on" if args.min_passes is not None else ""
    kept += f", at most {max_passes} passes" if args.max_passes is not None else ""
    print(f"{args.folder}{kept}: {len(passes)} passes, {all_s / 60:.1f} min{runs(all_s)} with every figure to the end")
    screened = f", the screen through {args.screen}" if args.screen else ", no screen"
    screened += ", same sought" if args.same else ", changes only"
    print(f"default stopping (futility after any even pass{screened}, verdicts from {min_passes} on, at most "
          f"{max_passes}): {replay_s / 60:.1f} min{runs(replay_s)}")  # fmt: skip
    print("figures by the pass they stop after: " + ", ".join(f"{k}: {v}" for k, v in sorted(stops.items())))
    shifted = f" (every head block {100 * args.shift:g}% slower)" if args.shift is not None else ""
    print(f"verdicts{shifted}: {verdict_counts(replayed)}; from every pass of the run: {verdict_counts(every_pass)}")
    if args.shift is not None:
        def slower(rows: list[tuple[str, str]], family: str) -> int:
            return sum(v == "slower" for g, v in rows if g == family)

        families = sorted({f for f, _ in replayed})
        print("called slower, by family (replayed / every pass of the run, of the figures): " + ", ".join(
            f"{f} {slower(replayed, f)}/{slower(every_pass, f)} of {sum(g == f for g, _ in replayed)}"
            for f in families))  # fmt: skip
    print(f"verdicts that change: {len(changed)}")
    for line in changed:
        print(f"  {line}")
    print(f"what each figure can detect after every pass (the {100 * floor:g}% floor plus half its "
          f"{round(100 * confidence)}% interval), by family:")  # fmt: skip
    print("\n".join(detect_table(judged, floor, confidence)))
    if args.passes is not None:
        print(f"what each figure could detect with {args.passes} pairs of processes, estimated by drawing that many "
              f"of its own pass values ({DRAWS} draws; an estimate, not a measurement), by family:")  # fmt: skip
        print("\n".join(detect_table(judged, floor, confidence, passes=args.passes)))
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
