"""What a comparison writes: the table on the terminal, ``compare.md``, ``compare.csv``, ``pairs.csv``, ``run.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devbench.compare import judge, stopping
from devbench.compare.options import ABError, Options
from devbench.compare.runner import Combination, Figure
from devbench.records import verdict as V
from devbench.records.files import OutputError, md_escape, staged_dir, write_atomic

ORDER = {V.SLOWER: 0, V.FASTER: 1, V.UNDECIDED: 2, V.SAME: 3}


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * (x - 1):+.1f}%"


def _interval(row: Any) -> str:
    return V.interval_text(row.ratio_lo, row.ratio_hi)


def summary_counts(table: Any) -> dict[str, int]:
    """The verdicts of the figures judged, and how many were not (skipped or failed on a side, new, gone,
    changed: their rows carry a note and no change)."""
    noted = _noted(table)
    counts = {v: int(((table["verdict"] == v) & ~noted).sum()) for v in V.VERDICTS}
    if noted.any():
        counts["not judged"] = int(noted.sum())
    return counts


def _noted(table: Any) -> Any:
    return table["note"].astype(bool) if "note" in table else table["verdict"].map(lambda _: False)


def to_text(table: Any, title: str) -> str:
    counts = summary_counts(table)
    lines = [title, ", ".join(f"{n} {v}" for v, n in counts.items()), ""]
    shown = table.assign(
        o=table["verdict"].map(ORDER), size=table["ratio"].map(lambda r: abs(math.log(r)) if r > 0 else 0.0)
    ).sort_values(["o", "size"], ascending=[True, False])
    not_judged = []
    same_code: dict[str, int] = {}
    for r in shown.itertuples():
        if r.verdict == V.SAME:
            continue
        name = f"{r.benchmark} {r.params}"
        if str(r.note).startswith("same code"):  # one line per benchmark: hundreds of them in a confined change
            same_code[r.benchmark] = same_code.get(r.benchmark, 0) + 1
            continue
        if r.note:
            not_judged.append(f"{r.verdict:>9}  {name}: {r.note}")
            continue
        lines.append(f"{r.verdict:>9}  {_pct(r.ratio):>8} {_interval(r):>20}  {r.n_base:>2} pairs of processes  {name}")
    if not_judged:
        lines += ["", f"not judged ({len(not_judged)}):", *not_judged]
    if same_code:
        lines += ["", f"same code, not measured ({sum(same_code.values())} figures: the benchmark and every file it "
                      "depends on are identical on both sides; --measure-all measures them):",
                  *(f"  {name}: {n}" for name, n in sorted(same_code.items()))]  # fmt: skip
    if counts[V.SAME]:
        lines.append(f"     same  {counts[V.SAME]} figures within the floor")
    return "\n".join(lines) + "\n"


def percent(confidence: float) -> str:
    """A confidence as a percentage with the digits it has: 99%, 97.5%, 99.9% (never 0.999 rounded to 100%)."""
    return f"{100 * confidence:.4g}%"


def to_markdown(table: Any, title: str, notes: Sequence[str], confidence: float) -> str:
    counts = summary_counts(table)
    out = [f"### {md_escape(title)}", "", " · ".join(f"**{n}** {v}" for v, n in counts.items()), ""]
    out += [f"> {md_escape(n)}" for n in notes] + [""]
    head = f"| verdict | benchmark | params | change | {percent(confidence)} interval | base | head | unit |"
    rule = "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"

    def rows(sel: Any) -> list[str]:
        return [
            f"| {r.verdict} | {md_escape(r.benchmark)} | {md_escape(str(r.params))} | {_pct(r.ratio)} | "
            f"{_interval(r)} | {r.base:.4g} | {r.head:.4g} | {md_escape(r.unit)} |"
            for r in sel.itertuples()
        ]

    noted = _noted(table)
    flagged = table[table["verdict"].isin([V.SLOWER, V.FASTER])]
    out += [head, rule, *rows(flagged), ""] if len(flagged) else ["No figure is faster or slower.", ""]
    if noted.any():
        out += [f"**Not judged ({int(noted.sum())})**: skipped or failed on a side, new, gone, or changed.", ""]
        out += [f"- {md_escape(V.figure_key(r.benchmark, r.params))}: {md_escape(r.note)}"
                for r in table[noted].itertuples()]  # fmt: skip
        out += [""]
    for verdict, what in ((V.UNDECIDED, "the data cannot tell"), (V.SAME, "within the floor")):
        sel = table[(table["verdict"] == verdict) & ~noted]
        if len(sel):
            out += [f"<details><summary>{len(sel)} {verdict} ({what})</summary>", "", head, rule, *rows(sel), "",
                    "</details>", ""]  # fmt: skip
    return "\n".join(out)


def cost_note(record: dict[str, Any], top: int = 3) -> str | None:
    """Where a run's time went: its passes, and the benchmarks whose processes cost the most (None for a
    record without them, as from an older run)."""
    passes = record.get("passes")
    if not passes:
        return None
    by_bench: dict[str, list[float]] = {}
    for f in record.get("figures", {}).values():
        if f.get("seconds"):
            by_bench.setdefault(f["benchmark"], []).append(float(f["seconds"]))
    total = sum(float(p["seconds"]) for p in passes)
    items = [(name, sum(s), f"{len(s)} figure{'s' if len(s) > 1 else ''}") for name, s in by_bench.items()]
    # each setup_cache, both sides, in every pass that ran it: named by the class whose figures read it
    owner = {f["setup_cache"]: f["benchmark"].rsplit(".", 1)[0]
             for f in record.get("figures", {}).values() if f.get("setup_cache")}  # fmt: skip
    cached: dict[str, list[float]] = {}
    for p in passes:
        for key, s in (p.get("caches") or {}).items():
            cached.setdefault(key, []).append(float(s))
    items += [(f"{owner.get(key, key)} setup_cache", sum(s), f"{len(s)} pass{'es' if len(s) > 1 else ''}")
              for key, s in cached.items()]  # fmt: skip
    costly = sorted(items, key=lambda item: -item[1])[:top]
    parts = [f"{name} {s / 60:.1f} min ({what})" for name, s, what in costly]
    text = f"Cost: {total / 60:.1f} min in {len(passes)} passes"
    figure_s = sum(sum(s) for s in by_bench.values())
    setup_s = sum(float(f.get("setup_seconds") or 0) for f in record.get("figures", {}).values())
    if figure_s > 0 and setup_s > 0:
        text += f" ({100 * setup_s / figure_s:.0f}% of the figures' time in setting up their processes)"
    return f"{text}; the costliest benchmarks: {', '.join(parts)}." if parts else f"{text}."


def blocks_frame(figures: Sequence[Figure]) -> Any:
    """Every block of every figure, one row each: what ``--from`` judges again."""
    import pandas as pd

    rows = []
    for f in figures:
        for p, (xs, ys) in enumerate(zip(f.a, f.b, strict=True)):
            for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
                rows.append((f.combo.benchmark, f.combo.label, f.combo.unit, p, i, x, y))
    return pd.DataFrame(rows, columns=["benchmark", "params", "unit", "process_pair", "pair", "base", "head"])


def publish(out_dir: Path, files: dict[str, bytes | str]) -> None:
    """Write ``files`` as the whole of ``out_dir``: built beside it, then swapped in (a kill leaves the old or
    the new); ``--out`` problems are ``ABError``."""
    try:
        with staged_dir(Path(out_dir)) as tmp:
            for name, data in files.items():
                write_atomic(tmp / name, data)
    except OutputError as exc:
        raise ABError(str(exc)) from None


def _screen_note(opts: Options) -> str:
    if not opts.screen or opts.all_passes:
        return ""
    at = stopping.robust_passes(opts.confidence)
    own = "" if opts.same else ", or in which no pair of processes shows a change on its own blocks"
    return (f", and through pass {opts.screen} one that could no longer be decided after {at} pairs of processes "
            f"(where one odd pair is never the interval's bound){own}")


def read_finished(folder: Path, written: bool = False) -> tuple[list[Figure], dict[str, Any]]:
    """A finished compare's figures and record (``--from``); ``written``: one ``write`` can write again (its
    sides and machine are in it)."""
    import pandas as pd

    run_file, data = folder / "run.json", folder / "pairs.csv"
    if not run_file.is_file() or not data.is_file():
        raise ABError(f"--from {folder}: no run.json and pairs.csv of a devbench compare there")
    try:
        record = json.loads(run_file.read_text())
        if written:  # what writing it again reads
            missing = [k for k in ("sides", "machine") if k not in record]
            missing += [f"sides.{s}" for s in ("base", "head") if "sides" in record and s not in record["sides"]]
            if missing:
                raise KeyError(", ".join(missing))
        frame = pd.read_csv(data, keep_default_na=False, dtype={"params": str})
        figures = []
        for f in record["figures"].values():
            combo = Combination(f["benchmark"], int(f["idx"]), tuple(f["values"]), tuple(f["names"]), f["unit"],
                                f.get("setup_cache"), bool(f.get("in_cache", False)))  # fmt: skip
            fig = Figure(combo, state=f["state"], reason=f["reason"], stopped_after=f["stopped_after"])
            rows = frame[(frame["benchmark"] == combo.benchmark) & (frame["params"] == combo.label)]
            for _, g in rows.groupby("process_pair", sort=True):
                g = g.sort_values("pair")
                fig.a.append([float(x) for x in g["base"]])
                fig.b.append([float(y) for y in g["head"]])
            figures.append(fig)
    except (ValueError, KeyError, TypeError) as exc:
        raise ABError(f"--from {folder}: not a devbench compare record ({exc})") from None
    return figures, record


def environment_label(env: dict[str, Any] | None) -> str:
    """"Python 3.11.7 (/path/python), torch 2.13.0+cpu, CUDA none, cuDNN none": what a side ran on ("" unknown)."""
    if not env:
        return ""
    where = f" ({env['python']})" if env.get("python") else ""
    parts = [f"Python {env.get('python_version', '?')}{where}"]
    if "torch" in env:
        parts += [f"torch {env['torch']}", f"CUDA {env.get('cuda') or 'none'}", f"cuDNN {env.get('cudnn') or 'none'}"]
    return ", ".join(parts)


def write(opts: Options, figures: list[Figure], record: dict[str, Any]) -> int:
    """Verdicts on the terminal and in ``--out``; exit 1 when a figure is slower."""
    table = judge.judge_all(figures, opts.floor, opts.confidence)
    base, head = record["sides"]["base"], record["sides"]["head"]
    title = (f"devbench compare {base['rev']} ({base['sha'][:8]}) -> {head['rev']} ({head['sha'][:8]}) "
             f"on {record['machine']}")  # fmt: skip
    notes = [
        f"Each figure: up to {opts.max_passes} pairs of processes, one per side, taking strict turns "
        f"(A B A B ..., the side first alternating by pass), up to {opts.pairs} pairs of adjacent blocks in each; "
        f"a verdict after {opts.min_passes} or more, and a figure certain to stay undecided"
        f"{'' if opts.same else ' (neither faster nor slower)'} stops "
        f"{'there' if opts.all_passes else 'after any even number'}"
        f"{_screen_note(opts)}; "
        "change = head / base, the Hodges-Lehmann "
        "estimate over the pairs of processes (each the median of its pairs of blocks) with its "
        f"{percent(opts.confidence)} distribution-free interval; "
        f"a verdict needs the interval beyond (or, for same, inside) a {100 * opts.floor:g}% floor.",
    ]
    if not opts.same:
        notes.append("Looked for faster and slower only (the default): a figure stopped as soon as neither could be "
                     "reached any more, so an unchanged figure ends undecided, not same: undecided says no change was "
                     "found, not that one was bounded within the floor (--same seeks that too). A figure kept to "
                     "--min-passes (--all-passes) whose interval is inside the floor by then is same.")  # fmt: skip
    notes += _sweep_notes(figures, opts)
    envs = {side: environment_label(record["sides"][side].get("environment")) for side in ("base", "head")}
    same_env = envs["base"] == envs["head"]
    if not same_env or any(envs.values()):
        notes.append(f"Environments: base {envs['base'] or 'not recorded'}; head {envs['head'] or 'not recorded'}.")
    if base["sha"] == head["sha"] and same_env:
        notes.append("Both sides are the same commit in the same environment: an A/A run, where every faster or "
                     "slower is a false verdict.")  # fmt: skip
    elif base["benchmark_code"] == head["benchmark_code"] and same_env:
        notes.append("Both sides run the same benchmark code in the same environment: an A/A run, where every "
                     "faster or slower is false.")  # fmt: skip
    stopped = int(table["stopped_after"].astype(str).str.len().astype(bool).sum()) if len(table) else 0
    if stopped:
        import pandas as pd

        after = pd.to_numeric(table["stopped_after"], errors="coerce")
        early = int((after < opts.min_passes).sum())
        screened = int((after <= opts.screen).sum()) if opts.screen and not opts.all_passes else 0
        why = f", {screened} of those by pass {opts.screen}" if screened else ""
        notes.append(f"{stopped} figure(s) stopped before their last pair of processes: decided, or no longer "
                     f"decidable ({early} of them, all undecided, before {opts.min_passes}{why}).")  # fmt: skip
    det = table.loc[~table["note"].astype(bool), "detectable"] if len(table) else table
    if len(det):
        finite = det[det.map(lambda x: x < math.inf)]
        if len(finite):
            notes.append(f"Smallest change each figure could be called (floor + half its interval): median "
                         f"{100 * finite.median():.1f}% over the {len(finite)} with a bounded interval, "
                         f"{int((finite <= 0.10).sum())} of {len(det)} figures at 10% or less.")  # fmt: skip
        else:
            notes.append(f"No figure ran the {stopping.fewest_passes(opts.confidence)} pairs of processes a bounded "
                         "interval needs, so none says what change it could have seen: --all-passes measures "
                         "that.")  # fmt: skip
    cost = cost_note(record)
    if cost:
        notes.append(cost)
    print()
    print(to_text(table, title) if len(table) else f"{title}\nnothing to judge\n")
    publish(
        opts.out,
        {
            "compare.csv": table.to_csv(index=False),
            "compare.md": to_markdown(table, title, notes, opts.confidence),
            "pairs.csv": blocks_frame(figures).to_csv(index=False),
            "run.json": json.dumps({**record, "confidence": opts.confidence, "floor": opts.floor}, indent=1),
        },
    )
    if cost:
        print(cost)
    print(f"wrote {opts.out}/compare.csv, compare.md, pairs.csv, run.json")
    return 1 if len(table) and (table["verdict"] == V.SLOWER).any() else 0


def _sweep_notes(figures: list[Figure], opts: Options) -> list[str]:
    """A line for each sweep whose figures are judged as one family (``judge.confidence_of``)."""
    notes = []
    for key, m in judge.sweep_sizes(figures).items():
        if m < 2:
            continue
        names = sorted({f.combo.benchmark.rsplit(".", 1)[0] for f in figures if f.combo.setup_cache == key})
        own = 1 - (1 - opts.confidence) / m
        notes.append(f"The {m} figures of {', '.join(names)} are measured together, by one setup_cache a pass on each "
                     f"side, and judged as one family: each interval at {100 * own:.2f}%, so that all {m} hold "
                     f"together at {percent(opts.confidence)} (Bonferroni); a verdict among them needs "
                     f"{stopping.fewest_passes(own)} or more passes.")  # fmt: skip
    return notes
