"""Comparisons: commit vs commit (as ``asv compare``), machine vs machine, env vs env, history.

The verdict is asv's own: the same ``factor`` and the same rule (asv's
``_is_result_better``: the ratio must pass the factor *and* the two results must differ
statistically, by their 99% confidence intervals; with one repeat, by the factor alone).
asv compare runs a Mann-Whitney test instead where results kept their raw samples
(``asv run --record-samples``); the report does not load samples, so there it may
differ from asv on borderline cases. ``mark`` is the character
``asv compare`` prints: ``+`` larger (worse for a time), ``-`` smaller, ``!`` newly
failed, ``*`` fixed, ``x`` not comparable (benchmark code changed), blank otherwise.
Like asv, the mark treats every value as lower-is-better; ``change`` says it in words
with the unit's direction (GB/s and TFLOP/s are higher-is-better).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from asv import _stats as asv_stats

from devbench.records.spec import HIGHER_IS_BETTER, LOWER_IS_BETTER
from devbench.report.fields import STATS


def is_result_better_fallback(a, b, a_ss, b_ss, factor, use_stats=True) -> bool:
    """asv 0.6's ``_is_result_better``, used only when asv no longer has it where we look.

    ``a`` is better than ``b`` when it is smaller by ``factor`` and, where both have
    statistics from more than one repeat, asv's ``is_different`` says they differ.
    """
    if use_stats and a_ss and b_ss and a_ss[0] and b_ss[0]:
        if a_ss[0].get("repeat", 0) != 1 and b_ss[0].get("repeat", 0) != 1:
            if not asv_stats.is_different(a_ss[1], b_ss[1], a_ss[0], b_ss[0]):
                return False
    return a < b / factor


try:  # the exact rule asv compare applies (asv 0.6); private, so guarded
    from asv.commands.compare import _is_result_better
except ImportError:  # asv moved it
    _is_result_better = is_result_better_fallback

SERIES = ["benchmark", "params"]


def _stats_pair(values: list[float]) -> tuple[dict[str, float] | None, None]:
    """asv's (stats, samples) pair from one result's ``STATS`` values (floats, NaN for none); no samples kept."""
    stats = {s: v for s, v in zip(STATS, values, strict=True) if v == v}  # v != v: NaN
    return (stats or None), None


def _change(mark: str, unit: str) -> str:
    if mark in ("+", "-"):
        larger = mark == "+"
        if unit in HIGHER_IS_BETTER:
            return "better" if larger else "worse"
        if unit in LOWER_IS_BETTER:
            return "worse" if larger else "better"
        return "larger" if larger else "smaller"
    return {"!": "failed", "*": "fixed", "x": "not comparable"}.get(mark, "")


def pair(left: pd.DataFrame, right: pd.DataFrame, on: list[str], factor: float = 1.1) -> pd.DataFrame:
    """Join two sets of results on ``on`` and give each pair asv's ratio and mark.

    Columns: the keys, ``unit``, ``before``, ``after``, ``ratio`` (after / before),
    ``mark`` and ``change``; a result on one side only has ``change`` "only before" or
    "only after". Pairs whose benchmark versions differ are marked ``x``.
    """
    keep = [*on, "unit", "status", "value", "version", *STATS]
    m = left[keep].merge(right[keep], on=[*on, "unit"], how="outer", suffixes=("_a", "_b"))
    a = m[[f"{c}_a" for c in ("status", "value", "version", *STATS)]].rename(columns=lambda c: c[:-2])
    b = m[[f"{c}_b" for c in ("status", "value", "version", *STATS)]].rename(columns=lambda c: c[:-2])
    scored = _pair_aligned(a.assign(unit=m["unit"]), b.assign(unit=m["unit"]), factor)
    return pd.concat([m[on].reset_index(drop=True), scored.reset_index(drop=True)], axis=1)


def _pair_aligned(a: pd.DataFrame, b: pd.DataFrame, factor: float) -> pd.DataFrame:
    """asv's mark for row i of ``a`` (before) against row i of ``b`` (after).

    Marks are decided in asv's order; the statistical test runs only where the ratio
    passes the factor (asv's rule needs both, so elsewhere the answer is already no).
    """
    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    st_a, st_b = a["status"], b["status"]
    v1, v2 = a["value"].astype(float), b["value"].astype(float)
    one_side = st_a.isna() | st_b.isna()
    fail_a, fail_b = st_a.eq("failed"), st_b.eq("failed")
    ver_a, ver_b = a["version"], b["version"]
    incomparable = ver_a.notna() & ver_b.notna() & (ver_a != ver_b)
    both_values = ~one_side & ~fail_a & ~fail_b & v1.notna() & v2.notna()

    mark = np.full(len(a), " ", dtype=object)
    mark[(~one_side & fail_b & ~fail_a).to_numpy()] = "!"
    mark[(~one_side & fail_a & ~fail_b).to_numpy()] = "*"
    smaller = both_values & (v2 < v1 / factor)
    larger = both_values & (v1 < v2 / factor)
    candidates = ((smaller | larger) & ~incomparable).to_numpy().nonzero()[0]
    if len(candidates):
        sa = a[STATS].to_numpy(dtype=float, na_value=np.nan)[candidates].tolist()
        sb = b[STATS].to_numpy(dtype=float, na_value=np.nan)[candidates].tolist()
        x1, x2, sm = v1.to_numpy(), v2.to_numpy(), smaller.to_numpy()
        for j, i in enumerate(candidates):
            ss1, ss2 = _stats_pair(sa[j]), _stats_pair(sb[j])
            if sm[i]:
                if _is_result_better(x2[i], x1[i], ss2, ss1, factor):
                    mark[i] = "-"
            elif _is_result_better(x1[i], x2[i], ss1, ss2, factor):
                mark[i] = "+"
    mark[(incomparable & ~one_side).to_numpy()] = "x"

    unit = a["unit"].where(a["unit"].notna(), b["unit"])
    out = pd.DataFrame({"unit": unit, "before": v1, "after": v2})
    out["ratio"] = (v2 / v1).where(both_values & (v1 != 0))
    out["mark"] = mark
    units = unit.astype(object).where(unit.notna(), None).to_numpy()
    words = {p: _change(*p) for p in set(zip(mark, units, strict=True))}
    out["change"] = [words[p] for p in zip(mark, units, strict=True)]
    out.loc[one_side & st_a.notna(), "change"] = "only before"
    out.loc[one_side & st_b.notna(), "change"] = "only after"
    return out


def commits_in(frame: pd.DataFrame) -> list[str]:
    """Commits by date, oldest first."""
    order = frame.drop_duplicates("commit").sort_values(["date", "commit"])
    return order["commit"].tolist()


def default_pair(frame: pd.DataFrame) -> tuple[str, str] | None:
    """(base, head) for "changes between commits" when none is given: the newest commit
    and the most recent older one measured on a machine and environment it shares (the
    two newest commits overall may have run on different machines)."""
    commits = commits_in(frame)
    runs = frame[["commit", "machine", "env"]].drop_duplicates().astype(str)
    where: dict[str, set[tuple[str, str]]] = {}
    for c, m, e in runs.itertuples(index=False):
        where.setdefault(c, set()).add((m, e))
    for i in range(len(commits) - 1, 0, -1):
        head = commits[i]
        for base in reversed(commits[:i]):
            if where.get(str(base), set()) & where.get(str(head), set()):
                return base, head
    return None


def resolve_commit(frame: pd.DataFrame, prefix: str) -> str:
    """The one full hash in the results that starts with ``prefix``."""
    from devbench.report.problems import ReportError

    hits = sorted({c for c in frame["commit"].unique() if str(c).startswith(prefix.lower())})
    if not hits:
        raise ReportError(f"no results for commit {prefix!r}; known: {', '.join(c[:8] for c in commits_in(frame))}")
    if len(hits) > 1:
        raise ReportError(f"commit {prefix!r} is ambiguous: {', '.join(h[:12] for h in hits)}")
    return hits[0]


def commit_pair(frame: pd.DataFrame, base: str | None, head: str | None) -> tuple[str, str] | None:
    """The (base, head) to compare: both given as prefixes, one given (the other is the newest
    other commit), or neither (``default_pair``); ``ReportError`` when a prefix does not resolve."""
    from devbench.report.problems import ReportError

    if base is None and head is None:
        return default_pair(frame) if len(commits_in(frame)) >= 2 else None
    base = resolve_commit(frame, base) if base else None
    head = resolve_commit(frame, head) if head else None
    if base is None or head is None:
        given = base or head
        others = [c for c in commits_in(frame) if c != given]
        if not others:
            raise ReportError("--base/--head: only one commit in the selection, nothing to compare with")
        return (others[-1], head) if base is None else (base, others[-1])
    return base, head


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
    a_col, b_col = f"{by}_a", f"{by}_b"
    parts = []
    for _, grp in frame.groupby("commit", sort=False, observed=True):
        groups = sorted(grp[by].unique())
        if len(groups) < 2:
            continue
        base = grp[grp[by] == groups[0]]
        rest = grp[grp[by] != groups[0]]
        # pair env by env (or machine by machine) where the names match, else on the benchmark alone
        names = set(base[other])
        shared = {g for g, col in rest.groupby(by, observed=True)[other] if names & set(col)}
        here = []
        for matched, gs in ((True, sorted(shared)), (False, [g for g in groups[1:] if g not in shared])):
            if not gs:
                continue
            # every other group against the baseline in one join: the baseline's rows once per group, keyed by it
            lefts = pd.concat([base.assign(**{b_col: str(g)}) for g in gs], ignore_index=True) if len(gs) > 1 \
                else base.assign(**{b_col: str(gs[0])})
            rights = rest[rest[by].isin(gs)]
            rights = rights.assign(**{b_col: rights[by].astype(str)})
            on = [b_col, "commit", other, *SERIES] if matched else [b_col, "commit", *SERIES]
            here.append(pair(lefts, rights, on, factor))
        p = pd.concat(here, ignore_index=True).sort_values(b_col, kind="stable", ignore_index=True)
        p.insert(0, a_col, groups[0])
        parts.append(p)
    if not parts:
        return pd.DataFrame(columns=[a_col, b_col, "commit", *SERIES, "before", "after", "ratio", "mark"])
    return pd.concat(parts, ignore_index=True)


def history(frame: pd.DataFrame, factor: float = 1.1) -> pd.DataFrame:
    """Every series over commits (by date), each result compared with the series' previous one.

    A series is one machine, environment, benchmark and parameter combination; its steps
    follow commit dates. Returns one row per step: the keys, the two commits, values,
    ratio, mark and change. Steps with a mark are the flagged changes.
    """
    keys = ["machine", "env", *SERIES]
    cols = [*keys, "commit_before", "commit_after", "unit", "before", "after", "ratio", "mark", "change"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    f = frame.sort_values([*keys, "date", "commit"], kind="stable")
    same = (f[keys].shift() == f[keys]).all(axis=1).to_numpy()
    if not same.any():
        return pd.DataFrame(columns=cols)
    prev = f.shift()
    shared = ["unit", "status", "value", "version", *STATS]
    left = prev.loc[same, [*keys, "commit", *shared]].reset_index(drop=True)
    right = f.loc[same, [*keys, "commit", *shared]].reset_index(drop=True)
    out = _pair_aligned(left, right, factor)
    out.insert(0, "commit_after", right["commit"])
    out.insert(0, "commit_before", left["commit"])
    for k in reversed(keys):
        out.insert(0, k, right[k])
    return out[cols]
