"""The report's sections that judge changes: two commits, A/B verdicts, machines or environments side by side,
and steps in a history. No torch, and nothing of the compare code: it reads compare's files."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from devbench.records import verdict as V
from devbench.records.spec import direction
from devbench.report import asvrule as C
from devbench.report import steps as ST
from devbench.report.derive import where_label
from devbench.report.parts import Section, _clip, _human, _pct


def two_commit_verdicts(cmp: pd.DataFrame, floor: float = V.DEFAULT_FLOOR) -> pd.Series:
    """One verdict per row of ``compare.compare_commits`` (run at factor 1 + ``floor``), decided per figure
    over all its runs (machines and environments).

    One run per commit cannot tell a change from the host's noise between runs, but several runs that
    agree can: a figure is ``slower`` or ``faster`` (``changed`` when its unit says no direction) when
    it ran on two or more machines or environments and asv's rule marked every one of them the same
    way (the change beyond the floor, the 99% intervals apart). It is ``same`` when every run moved
    less than the floor, ``undecided`` otherwise. Runs of one host at one hour share its drift: a
    verdict here is evidence to confirm with ``devbench compare``, not a measurement of its size.
    """
    if cmp.empty:
        return pd.Series("undecided", index=cmp.index, dtype=object)
    # per figure, by groupby aggregates (a Python loop over figures cost 0.4 s on a large history)
    group = cmp.groupby(["benchmark", "params"], sort=False, observed=True).ngroup().to_numpy()
    marks, keyed = cmp["mark"].to_numpy(dtype=object), group >= 0
    flags = pd.DataFrame({"g": group, "up": marks == "+", "down": marks == "-",
                          "same": ((cmp["ratio"] - 1).abs() <= floor).to_numpy()})  # fmt: skip
    by = flags[keyed].groupby("g", sort=True)
    runs, up, down, same = (by.size().to_numpy(), *(by[c].all().to_numpy() for c in ("up", "down", "same")))
    first = pd.Series(np.arange(len(cmp)))[keyed].groupby(group[keyed], sort=True).first().to_numpy()
    bench, unit = cmp["benchmark"].to_numpy(dtype=object), cmp["unit"].to_numpy(dtype=object)
    verdict = []
    for g in range(len(runs)):
        if runs[g] >= 2 and (up[g] or down[g]):
            way = direction(str(bench[first[g]]), str(unit[first[g]]))
            verdict.append("changed" if not way else V.FASTER if bool(up[g]) == (way == "higher") else V.SLOWER)
        else:
            verdict.append(V.SAME if same[g] else "undecided")
    verdict.append("undecided")  # a row of no figure (a missing key: ngroup's -1)
    return pd.Series(np.asarray(verdict, dtype=object)[group], index=cmp.index, dtype=object)


def _changed_between(frame: pd.DataFrame, base: str, head: str) -> int:
    """Figures measured at both commits on one machine and environment by different versions of their code."""
    keys, ok = ["machine", "env", "benchmark", "params"], frame[frame["status"] == "ok"]
    pairs = ok[ok["commit"] == base][[*keys, "version"]].merge(ok[ok["commit"] == head][[*keys, "version"]], on=keys)
    return int((pairs["version_x"].astype(str) != pairs["version_y"].astype(str)).sum())


def changes(frame: pd.DataFrame, base: str, head: str, every: pd.DataFrame | None = None) -> Section:
    """Two commits of one run each per machine and environment: a verdict where the runs agree (``frame``: the
    results of each benchmark's current code; ``every``: all of them, to say why nothing compares)."""
    floor = V.DEFAULT_FLOOR
    cmp = C.compare_commits(frame, base, head, 1 + floor)
    both = cmp.dropna(subset=["ratio"])
    both = both[both["ratio"] > 0]
    both = both.assign(floor=floor, verdict=two_commit_verdicts(both, floor))
    counts = both.drop_duplicates(["benchmark", "params"])["verdict"].value_counts()
    runs = both.groupby(["machine", "env"], observed=True).ngroups
    shown = both[both["verdict"] != V.SAME]
    shown = shown.reindex(shown["ratio"].map(lambda r: abs(math.log(r))).sort_values(ascending=False).index)
    text = (
        f"`{base[:8]}` -> `{head[:8]}` on {runs} machine/environment run(s): of "
        f"{int(counts.sum())} figures, " + ", ".join(f"**{int(counts.get(v, 0))}** {v}"
                                                    for v in (V.SLOWER, V.FASTER, "changed", V.SAME, V.UNDECIDED))
        + f". A figure is slower or faster when every run of it, on two or more machines or environments, moved "
        f"the same way beyond {100 * floor:.0f}% with asv's 99% intervals apart; same when every run moved less; "
        "else undecided: one run per commit cannot tell a change from the host's noise between runs. "
        f"`devbench compare {base[:8]} {head[:8]}` measures both in paired turns and decides."
    )  # fmt: skip
    if not len(both):
        text = (f"`{base[:8]}` -> `{head[:8]}`: no figure has a result at both commits on one machine and "
                "environment, so nothing is compared.")  # fmt: skip
        if every is not None and (at_both := _changed_between(every, base, head)):
            text = (f"`{base[:8]}` -> `{head[:8]}`: {at_both} figure(s) ran at both commits on one machine and "
                    "environment, but by different versions of their code, "
                    "so nothing is compared: asv compares a benchmark's results of one version only.")  # fmt: skip
    table = shown.assign(
        where=where_label(shown),
        change=[_pct(r) for r in shown["ratio"]],
        before=[_human(v, u) for v, u in zip(shown["before"], shown["unit"], strict=True)],
        after=[_human(v, u) for v, u in zip(shown["after"], shown["unit"], strict=True)],
    )[["verdict", "where", "benchmark", "params", "change", "before", "after"]]
    decided = table[table["verdict"] != V.UNDECIDED]
    open_ = table[table["verdict"] == V.UNDECIDED]
    clipped, more = _clip(decided)
    folded, _ = _clip(open_)
    return Section("Between two commits", text, clipped if len(decided) else None, more=more,
                   folded=folded if len(open_) else None, folded_title=f"{len(open_)} undecided")  # fmt: skip


def _notes(table: pd.DataFrame) -> pd.Series:
    """compare.csv's note of each row ("" for a figure judged; older folders have no such column)."""
    if "note" not in table:
        return pd.Series("", index=table.index)
    return table["note"].astype(object).fillna("").astype(str)


def verdicts(table: pd.DataFrame | None, source: str, host: str = "") -> Section | None:
    """A/B verdicts of ``devbench compare`` (its compare.csv), with how the host ran (``host``, its run.json's)."""
    if table is None or table.empty:
        return None
    # a row with a note was not judged (skipped or failed on a side, new, gone, changed): counted apart
    noted = _notes(table).astype(bool)
    counts = table[~noted]["verdict"].value_counts()
    apart = f", **{int(noted.sum())}** not judged" if noted.any() else ""
    text = (
        f"From `{source}`: both commits measured in pairs of processes taking turns, block by block. "
        + ", ".join(f"**{counts.get(v, 0)}** {v}" for v in V.VERDICTS)
        + apart
        + ". Change is head / base of the figure; the interval is the comparison's."
        + (f" {host[0].upper()}{host[1:]}" if host else "")
    )

    def shown(sel: pd.DataFrame) -> pd.DataFrame:
        size = sel["ratio"].map(lambda r: abs(math.log(r)) if r > 0 else 0)
        sel = sel.reindex(size.sort_values(ascending=False, kind="stable").index)  # stable: the same order each build
        # a figure not judged (one side only, or its benchmark changed: compare.csv's note) has no change
        notes = _notes(sel)
        return sel.assign(
            change=[n.split(":")[0] if n else _pct(r) for r, n in zip(sel["ratio"], notes, strict=True)],
            interval=[V.interval_text(a, b) for a, b in zip(sel["ratio_lo"], sel["ratio_hi"], strict=True)],
            base=[_human(v, u) for v, u in zip(sel["base"], sel["unit"], strict=True)],
            head=[_human(v, u) for v, u in zip(sel["head"], sel["unit"], strict=True)],
            floor=[f"{100 * f:.0f}%" for f in sel["floor"]],
        )[["verdict", "benchmark", "params", "change", "interval", "base", "head", "floor"]]

    decided = table[table["verdict"].isin([V.SLOWER, V.FASTER])]
    rest = table[~table["verdict"].isin([V.SLOWER, V.FASTER])]
    return Section(
        "A/B verdicts (devbench compare)",
        text,
        shown(decided) if len(decided) else None,
        folded=shown(rest) if len(rest) else None,
        folded_title=f"{len(rest)} same, undecided or not judged" if noted.any() else f"{len(rest)} same or undecided",
    )


def across(frame: pd.DataFrame, by: str, factor: float) -> Section | None:
    if frame[by].nunique() < 2:
        return None
    cmp = C.compare_groups(latest_common(frame, by), by, factor)
    if cmp.empty:
        return None
    cmp = cmp.dropna(subset=["ratio"])
    label = "Machines" if by == "machine" else "Environments"
    table = cmp[[f"{by}_a", f"{by}_b", "benchmark", "params", "before", "after", "ratio", "mark", "change", "unit"]]
    table = table.reindex(table["ratio"].sub(1).abs().sort_values(ascending=False).index)
    clipped, more = _clip(table)  # formatted after clipping: only the rows shown
    clipped = clipped.assign(
        before=[_human(v, u) for v, u in zip(clipped["before"], clipped["unit"], strict=True)],
        after=[_human(v, u) for v, u in zip(clipped["after"], clipped["unit"], strict=True)],
        ratio=clipped["ratio"].round(3),
    ).drop(columns="unit")
    text = (
        f"Same commit, {by} B against {by} A (ratio B / A), largest differences first; the mark uses asv "
        f"compare's rule with factor {factor}."
    )
    return Section(f"{label} compared", text, clipped, more=more)


def latest_common(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    """Rows of the most recent commit that more than one ``by`` group ran."""
    per = frame.groupby("commit", observed=True).agg(groups=(by, "nunique"), date=("date", "max"))
    shared = per[per["groups"] > 1]
    if shared.empty:
        return frame.iloc[0:0]
    return frame[frame["commit"] == shared["date"].idxmax()]


def history(frame: pd.DataFrame, steps: pd.DataFrame) -> tuple[Section | None, pd.DataFrame]:
    series = frame.groupby(["machine", "env", "benchmark", "params"], observed=True).size()
    judged = int((series >= ST.MIN_POINTS).sum())
    if judged == 0:
        return None, steps
    text = (
        f"asv's step detection (as `asv publish` uses) on every series of {ST.MIN_POINTS} or more commits "
        f"({judged} series): a level change is listed when it exceeds {100 * V.DEFAULT_FLOOR:.0f}% plus the "
        "levels' own error and the series' own noise. A step at the newest commit (a level of one point, "
        "which the fit cannot open) is listed when the newest point moved beyond the floor with its interval "
        "clear of the points before, and every run of the figure there (two or more machines or environments) "
        "moved the same way, or one series alone moved by four times its own noise over five points or more. "
        "`changed`: a figure whose unit says no better direction. GPU figures measured while throttled are "
        f"left out. {len(steps)} steps found, largest first. A step in a history of single runs can also be "
        "the host changing speed between days: confirm one with `devbench compare`. "
        "`cause`: `machine` where every ceiling of the same machine (the memory copy, the achievable product) "
        "moved the same way over the step's levels by at least half as much, `code` where none did, `unknown` "
        "where some did or none was measured on both levels (`ceilings` says how each moved). "
        "Plot: the series with the largest steps, each divided by its first commit's value (1.0 = no change), "
        "the axis from zero, the shaded band asv's 99% interval, a dashed red line where each of its steps is; the "
        "y label says which way is better."
    )
    if steps.empty:
        return Section("Changes in the history (detected steps)", text), steps
    table = steps.assign(
        where=where_label(steps),
        change=[_pct(r) for r in steps["ratio"]],
        before=[_human(v, u) for v, u in zip(steps["before"], steps["unit"], strict=True)],
        after=[_human(v, u) for v, u in zip(steps["after"], steps["unit"], strict=True)],
        commits=[f"{a[:8]} -> {b[:8]}" for a, b in zip(steps["commit_before"], steps["commit_after"], strict=True)],
        floor=[f"{100 * f:.0f}%" for f in steps["floor"]],
    )
    cols = ["verdict", "where", "benchmark", "params", "change", "before", "after", "commits", "floor"]
    cols += [c for c in ("cause", "ceilings") if c in table]
    table = table[cols]
    clipped, more = _clip(table)
    return Section("Changes in the history (detected steps)", text, clipped, plot="history", more=more), steps
