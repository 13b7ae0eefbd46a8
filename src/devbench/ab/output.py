"""What a comparison writes: the table on the terminal, ``compare.md``, ``compare.csv``, ``pairs.csv``, ``run.json``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devbench import verdict as V
from devbench.ab.options import ABError
from devbench.ab.runner import Figure
from devbench.files import OutputError, md_escape, staged_dir, write_atomic

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
    for r in shown.itertuples():
        if r.verdict == V.SAME:
            continue
        name = f"{r.benchmark} {r.params}"
        if r.note:
            not_judged.append(f"{r.verdict:>9}  {name}: {r.note}")
            continue
        lines.append(f"{r.verdict:>9}  {_pct(r.ratio):>8} {_interval(r):>20}  {r.n_base:>2} pairs of processes  {name}")
    if not_judged:
        lines += ["", f"not judged ({len(not_judged)}):", *not_judged]
    if counts[V.SAME]:
        lines.append(f"     same  {counts[V.SAME]} figures within the floor")
    return "\n".join(lines) + "\n"


def to_markdown(table: Any, title: str, notes: Sequence[str], confidence: float) -> str:
    counts = summary_counts(table)
    out = [f"### {md_escape(title)}", "", " · ".join(f"**{n}** {v}" for v, n in counts.items()), ""]
    out += [f"> {md_escape(n)}" for n in notes] + [""]
    head = f"| verdict | benchmark | params | change | {round(100 * confidence)}% interval | base | head | unit |"
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
