"""Comparisons: commit vs commit (as ``asv compare``), machine vs machine, env vs env, history.

The verdict is asv's own: the same ``factor`` and the same rule (asv's
``_is_result_better``: the ratio must pass the factor *and* the two results must differ
statistically, by their 99% confidence intervals or, where asv kept samples, by a
Mann-Whitney test; with one repeat, by the factor alone). ``mark`` is the character
``asv compare`` prints: ``+`` larger (worse for a time), ``-`` smaller, ``!`` newly
failed, ``*`` fixed, ``x`` not comparable (benchmark code changed), blank otherwise.
Like asv, the mark treats every value as lower-is-better; ``change`` says it in words
with the unit's direction (GB/s and TFLOP/s are higher-is-better).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

try:  # the exact rule asv compare applies (asv 0.6); private, so guarded
    from asv.commands.compare import _is_result_better
except ImportError:  # pragma: no cover - asv moved it
    from asv import _stats

    def _is_result_better(a, b, a_ss, b_ss, factor, use_stats=True):  # type: ignore[no-redef]
        if use_stats and a_ss and b_ss and a_ss[0] and b_ss[0]:
            if a_ss[0].get("repeat", 0) != 1 and b_ss[0].get("repeat", 0) != 1:
                if not _stats.is_different(a_ss[1], b_ss[1], a_ss[0], b_ss[0]):
                    return False
        return a < b / factor


from devbench.report.load import STATS

SERIES = ["benchmark", "params"]

#: Units where a larger value is better; seconds and bytes are smaller-is-better; a ratio ("x") says larger/smaller.
HIGHER_IS_BETTER = {"GB/s", "TFLOP/s", "GFLOP/s", "%"}


def _stats(row: Any, suffix: str) -> tuple[dict[str, float] | None, None]:
    stats = {s: row[f"{s}{suffix}"] for s in STATS if not _isnan(row[f"{s}{suffix}"])}
    return (stats or None), None


def _isnan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _change(mark: str, unit: str) -> str:
    if mark in ("+", "-"):
        larger = mark == "+"
        if unit in HIGHER_IS_BETTER:
            return "better" if larger else "worse"
        if unit in ("seconds", "bytes"):
            return "worse" if larger else "better"
        return "larger" if larger else "smaller"
    return {"!": "failed", "*": "fixed", "x": "not comparable"}.get(mark, "")


def pair(left: pd.DataFrame, right: pd.DataFrame, on: list[str], factor: float = 1.1) -> pd.DataFrame:
    """Join two sets of results on ``on`` and give each pair asv's ratio and mark.

    Columns: the keys, ``unit``, ``before``, ``after``, ``ratio`` (after / before),
    ``mark`` and ``change``. Pairs whose benchmark versions differ are marked ``x``.
    Marks are decided in asv's order; the statistical test runs only where the ratio
    passes the factor (asv's rule needs both, so elsewhere the answer is already no).
    """
    keep = [*on, "unit", "status", "value", "version", *STATS]
    m = left[keep].merge(right[keep], on=[*on, "unit"], how="outer", suffixes=("_a", "_b"))
    st_a, st_b = m["status_a"], m["status_b"]
    v1, v2 = m["value_a"].astype(float), m["value_b"].astype(float)
    one_side = st_a.isna() | st_b.isna()
    fail_a, fail_b = st_a.eq("failed"), st_b.eq("failed")
    ver_a, ver_b = m["version_a"], m["version_b"]
    incomparable = ver_a.notna() & ver_b.notna() & (ver_a != ver_b)
    both_values = ~one_side & ~fail_a & ~fail_b & v1.notna() & v2.notna()

    mark = pd.Series(" ", index=m.index, dtype=object)
    mark[~one_side & fail_b & ~fail_a] = "!"
    mark[~one_side & fail_a & ~fail_b] = "*"
    smaller = both_values & (v2 < v1 / factor)
    larger = both_values & (v1 < v2 / factor)
    for idx in m.index[(smaller | larger) & ~incomparable]:
        row = m.loc[idx]
        ss1, ss2 = _stats(row, "_a"), _stats(row, "_b")
        if smaller[idx] and _is_result_better(v2[idx], v1[idx], ss2, ss1, factor):
            mark[idx] = "-"
        elif larger[idx] and _is_result_better(v1[idx], v2[idx], ss1, ss2, factor):
            mark[idx] = "+"
    mark[incomparable & ~one_side] = "x"

    out = m[[*on, "unit"]].copy()
    out["before"] = v1
    out["after"] = v2
    out["ratio"] = (v2 / v1).where(both_values & (v1 != 0))
    out["mark"] = mark
    out["change"] = [_change(k, u) for k, u in zip(mark, m["unit"], strict=True)]
    out.loc[one_side & st_a.notna(), "change"] = "only before"
    out.loc[one_side & st_b.notna(), "change"] = "only after"
    return out


def commits_in(frame: pd.DataFrame) -> list[str]:
    """Commits by date, oldest first."""
    order = frame.drop_duplicates("commit").sort_values(["date", "commit"])
    return order["commit"].tolist()


def resolve_commit(frame: pd.DataFrame, prefix: str) -> str:
    """The one full hash in the results that starts with ``prefix``."""
    from devbench.report.load import ReportError

    hits = sorted({c for c in frame["commit"].unique() if str(c).startswith(prefix.lower())})
    if not hits:
        raise ReportError(f"no results for commit {prefix!r}; known: {', '.join(c[:8] for c in commits_in(frame))}")
    if len(hits) > 1:
        raise ReportError(f"commit {prefix!r} is ambiguous: {', '.join(h[:12] for h in hits)}")
    return hits[0]


def compare_commits(frame: pd.DataFrame, base: str, head: str, factor: float = 1.1) -> pd.DataFrame:
    """``asv compare base head`` for every machine and environment that ran both."""
    a = frame[frame["commit"] == base]
    b = frame[frame["commit"] == head]
    out = pair(a, b, ["machine", "env", *SERIES], factor)
    return out.sort_values(["machine", "env", *SERIES]).reset_index(drop=True)


def compare_groups(frame: pd.DataFrame, by: str, factor: float = 1.1) -> pd.DataFrame:
    """Each ``by`` group (``machine`` or ``env``) against the first, per commit both ran.

    Rows pair the baseline group with each other group on the same commit, the other
    key (env for machines, machine for envs) and the benchmark: ``before`` is the
    baseline, ``after`` the other.
    """
    if by not in ("machine", "env"):
        raise ValueError(f"compare by 'machine' or 'env', not {by!r}")
    other = "env" if by == "machine" else "machine"
    parts = []
    for _, grp in frame.groupby("commit", sort=False):
        groups = sorted(grp[by].unique())
        if len(groups) < 2:
            continue
        base = grp[grp[by] == groups[0]]
        for g in groups[1:]:
            # pair env by env (or machine by machine) where the names match, else on the benchmark alone
            shared = set(base[other]) & set(grp.loc[grp[by] == g, other])
            on = ["commit", other, *SERIES] if shared else ["commit", *SERIES]
            p = pair(base, grp[grp[by] == g], on, factor)
            p.insert(0, f"{by}_b", g)
            p.insert(0, f"{by}_a", groups[0])
            parts.append(p)
    if not parts:
        return pd.DataFrame(columns=[f"{by}_a", f"{by}_b", "commit", *SERIES, "before", "after", "ratio", "mark"])
    return pd.concat(parts, ignore_index=True)


def history(frame: pd.DataFrame, factor: float = 1.1) -> pd.DataFrame:
    """Every series over commits (by date) with each step compared to the previous one.

    Returns one row per step: machine, env, benchmark, params, the two commits, values,
    ratio, mark and change. Steps with a mark are the flagged changes.
    """
    keys = ["machine", "env", *SERIES]
    parts = []
    for _, grp in frame.groupby(["machine", "env"], sort=True):
        mine = commits_in(grp)
        for before, after in zip(mine, mine[1:], strict=False):
            p = pair(grp[grp["commit"] == before], grp[grp["commit"] == after], keys, factor)
            p = p[~p["change"].isin(["only before", "only after"])]
            p.insert(len(keys), "commit_after", after)
            p.insert(len(keys), "commit_before", before)
            parts.append(p)
    if not parts:
        return pd.DataFrame(columns=[*keys, "commit_before", "commit_after", "before", "after", "ratio", "mark"])
    return pd.concat(parts, ignore_index=True)
