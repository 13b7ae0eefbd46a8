"""Changes across a history: asv's own step detection, kept only beyond a floor and the series' noise.

A history of single runs cannot say whether one commit changed a figure: the next run of
the same code differs by the host's noise. Step detection (``asv.step_detect``, the
Potts-model fit ``asv publish`` uses for its regression list) looks at the whole series
and finds levels that hold over several commits. A level change is reported only when it
is larger than a floor (``verdict.DEFAULT_FLOOR``, 5%) plus the l1 error of the two levels;
the fit's penalty also grows with the series' own noise. GPU figures measured while the GPU
was throttled are left out of the series first.

Steps are fitted to log values, so a level's error and the floor are relative changes.
A cheap screen first (do the medians on two sides of a quarter, half or three-quarter
split differ by the floor, or a middle quarter's from the rest's?) spares the fit on the many
series that are flat.
No torch.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd

from devbench.records import verdict as V
from devbench.records.spec import direction
from devbench.report.parallel import in_halves

#: series shorter than this are not judged: two points are one pair, and a pair is noise
MIN_POINTS = 3
#: the last commits of a series that step detection looks at (a history is judged where it is now)
MAX_POINTS = 200

SERIES = ["machine", "env", "benchmark", "params"]
COLUMNS = [
    *SERIES,
    "unit",
    "verdict",
    "ratio",
    "floor",
    "before",
    "after",
    "commit_before",
    "commit_after",
    "points",
    "level_before",
    "level_after",
]


def _noise(logs: np.ndarray) -> float:
    """Robust noise of a series from its successive differences (a step moves one difference only)."""
    if len(logs) < 3:
        return 0.0
    return 1.4826 * statistics.median(abs(b - a) for a, b in itertools.pairwise(logs.tolist())) / math.sqrt(2)


def _levels(logs: np.ndarray, floor: float) -> list[tuple[int, int, float, float]]:
    """Levels (left, right, log value, l1 error) of asv's Potts fit, its penalty set by the floor and the noise.

    asv publish tunes the penalty per series (``solve_potts_autogamma``, about a dozen fits);
    here one fit: a new level must pay for itself with twice the floor plus four times the
    series' own noise in summed distance, so noise alone rarely opens one. The fit is asv's
    linear-time one (``solve_potts_approx``: exact on pieces of at most 20 points, then
    neighbours merged where that lowers the cost), as every fit of ``asv publish`` is: on the
    1,000-file synthetic history it finds the exact solver's steps, at their ratios, in half its
    time. The levels found are then kept only where they differ by more than the floor
    (``detect``).
    """
    from asv.step_detect import solve_potts_approx

    gamma = 2 * math.log1p(floor) + 4 * _noise(logs)
    right, values, dists = solve_potts_approx(logs.tolist(), [1.0] * len(logs), gamma=gamma, min_size=2)
    out, left = [], 0
    for r, v, d in zip(right, values, dists, strict=True):
        out.append((left, r, v, abs(d / (r - left))))
        left = r
    return out


def _split_screen(logs: np.ndarray, floor: float) -> bool:
    """True when the medians on two sides of a quarter, half or three-quarter split differ by the floor, or a
    middle quarter's median differs by it from the rest's (a level that came and went: a stretch of runs on
    a busy host)."""
    n, limit, values = len(logs), math.log1p(floor), logs.tolist()  # statistics' median: 20x numpy's on ~50 points
    for cut in {n // 4, n // 2, (3 * n) // 4}:
        if cut >= 2 and n - cut >= 2 and abs(statistics.median(values[:cut]) - statistics.median(values[cut:])) > limit:
            return True
    for a, b in ((n // 4, n // 2), (n // 2, (3 * n) // 4)):
        if b - a >= 2 and abs(statistics.median(values[a:b]) - statistics.median(values[:a] + values[b:])) > limit:
            return True
    return False


#: a change of a figure whose unit says no better direction (a count, ``unit``): listed, neither way judged
CHANGED = "changed"
#: a step at the newest commit, seen in one series alone, needs this many earlier points to measure the
#: series' own noise against; with fewer, only runs on several machines or environments that agree count
NEWEST_ALONE_POINTS = 5
#: and must exceed the floor plus this many of the series' own noise (robust sd of successive changes)
NEWEST_NOISE_SIGMAS = 4.0


def _verdict(shift: float, way: str) -> str:
    if not way:
        return CHANGED
    return V.FASTER if (shift > 0) == (way == "higher") else V.SLOWER


def _apart(lo: np.ndarray, hi: np.ndarray, last: int, earlier: range) -> bool:
    """Whether the newest point's 99% interval (asv's) lies clear of every earlier point's in ``earlier``;
    True where the intervals were not kept (a single sample)."""
    if not (np.isfinite(lo[last]) and np.isfinite(hi[last])):
        return True
    return all(not (np.isfinite(lo[i]) and np.isfinite(hi[i])) or hi[i] < lo[last] or hi[last] < lo[i]
               for i in earlier)  # fmt: skip


#: below this many series one process fits them all (a second one costs more than it saves)
PARALLEL_MIN_SERIES = 400


def detect(frame: pd.DataFrame, floor: float = V.DEFAULT_FLOOR) -> pd.DataFrame:
    """Every level change beyond ``floor`` (and the series' own noise), per machine, environment and figure
    (``COLUMNS``), and steps at the newest commit (``_newest``). A history of many series is fitted in two
    processes, halves of its series (``parallel.in_halves``); the newest commit's rule, which reads every
    series of a figure, runs on both halves' candidates."""
    keep = frame["status"].eq("ok").to_numpy() & frame["value"].gt(0).to_numpy()
    if "gpu_throttled" in frame.columns:
        keep &= ~frame["gpu_throttled"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    cols = [*SERIES, "unit", "date", "commit", "value", *[c for c in ("ci_99_a", "ci_99_b") if c in frame.columns]]
    ok = frame.loc[keep, cols]
    ok = ok.sort_values([*SERIES, "date", "commit"], kind="stable")
    codes = ok.groupby(SERIES, observed=True, sort=False).ngroup().to_numpy()
    if len(codes) == 0:
        return pd.DataFrame(columns=COLUMNS)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    nan = np.full(len(ok), np.nan)
    series = _Series(
        # one key per series, not per row: turning 500,000 rows into text cost 0.6 s
        keys=ok[[*SERIES, "unit"]].iloc[starts].astype(str).to_numpy(), starts=starts, ends=ends,
        logs=np.log(ok["value"].to_numpy(dtype=float)), commits=ok["commit"].to_numpy(),
        lo=ok["ci_99_a"].to_numpy(dtype=float, na_value=np.nan) if "ci_99_a" in ok else nan,
        hi=ok["ci_99_b"].to_numpy(dtype=float, na_value=np.nan) if "ci_99_b" in ok else nan,
    )  # fmt: skip
    halves = in_halves(lambda a, b: _scan(series, a, b, floor), len(starts), PARALLEL_MIN_SERIES)
    rows, newest, runs = [], [], {}
    for found, candidates, ran in halves:
        rows += found
        newest += candidates
        for key, count in ran.items():
            runs[key] = runs.get(key, 0) + count
    rows += _newest(newest, runs, {(r["machine"], r["env"], r["benchmark"], r["params"], r["commit_after"])
                                   for r in rows})  # fmt: skip
    out = pd.DataFrame(rows, columns=COLUMNS)
    order = out["ratio"].map(lambda r: abs(math.log(r))) if len(out) else out["ratio"]
    return out.assign(_size=order).sort_values("_size", ascending=False).drop(columns="_size").reset_index(drop=True)


@dataclass(frozen=True)
class _Series:
    """The rows ``detect`` fits, sorted by series then date: each series' key (machine, env, benchmark, params,
    unit), where it starts and ends, and the log values, commits and asv intervals of every row."""

    keys: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    logs: np.ndarray
    commits: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def _scan(series: _Series, first: int, last: int, floor: float) -> tuple[list[dict], list[dict], dict[tuple, int]]:
    """The level changes of series ``first`` to ``last`` (not included), the newest commit's candidates among
    them (``_newest`` judges them with every series), and how many series end at each (figure, commit)."""
    rows, newest = [], []
    runs: dict[tuple, int] = {}  # series ending at each (figure, commit): all must agree
    limit = math.log1p(floor)
    lo_all, hi_all = series.lo, series.hi
    for i in range(first, last):
        (machine, env, bench, params, unit), end = series.keys[i], int(series.ends[i])
        start = max(int(series.starts[i]), end - MAX_POINTS)
        if end - start < MIN_POINTS:
            continue
        way = direction(bench, unit)
        logs = series.logs[start:end]
        commits = series.commits[start:end]
        where = {"machine": machine, "env": env, "benchmark": bench, "params": params, "unit": unit,
                 "floor": floor, "points": end - start}  # fmt: skip
        # the newest point against the level before it: asv's fit needs two points for a level
        runs[(bench, params, str(commits[-1]))] = runs.get((bench, params, str(commits[-1])), 0) + 1
        prev = logs[-min(len(logs) - 1, NEWEST_ALONE_POINTS) - 1 : -1]
        shift = float(logs[-1] - statistics.median(prev.tolist()))
        if abs(shift) > limit and _apart(lo_all, hi_all, end - 1, range(end - 1 - len(prev), end - 1)):
            alone = len(logs) - 1 >= NEWEST_ALONE_POINTS and abs(shift) > limit + NEWEST_NOISE_SIGMAS * _noise(prev)
            newest.append({**where, "verdict": _verdict(shift, way), "ratio": math.exp(shift),
                           "before": math.exp(statistics.median(prev.tolist())), "after": math.exp(logs[-1]),
                           "commit_before": str(commits[-2]), "commit_after": str(commits[-1]), "alone": alone,
                           "sign": shift > 0, "level_before": " ".join(map(str, commits[-len(prev) - 1 : -1])),
                           "level_after": str(commits[-1])})  # fmt: skip
        if logs.max() - logs.min() <= limit or not _split_screen(logs, floor):
            continue  # no two halves differ by the floor: no level can
        levels = _levels(logs, floor)
        for (l0, r0, v0, e0), (l1, r1, v1, e1) in zip(levels, levels[1:], strict=False):
            step = v1 - v0
            if abs(step) <= limit + max(e0, e1):
                continue
            rows.append(
                {
                    **where, "verdict": _verdict(step, way), "ratio": math.exp(step), "before": math.exp(v0),
                    "after": math.exp(v1), "commit_before": str(commits[r0 - 1]), "commit_after": str(commits[l1]),
                    "level_before": " ".join(map(str, commits[l0:r0])),
                    "level_after": " ".join(map(str, commits[l1:r1])),
                }
            )  # fmt: skip
    return rows, newest, runs


def _newest(candidates: list[dict], runs: dict[tuple, int], found: set[tuple]) -> list[dict]:
    """The steps at the newest commit that count as evidence: the newest point of a figure moved beyond the
    floor, its interval clear of the points before, and either every run of that figure at that commit on
    two or more machines or environments moved the same way, or one series alone has enough earlier
    points and moved by many times its own noise. asv's fit cannot see these: a level needs two points."""
    by_figure: dict[tuple, list[dict]] = {}
    for c in candidates:
        by_figure.setdefault((c["benchmark"], c["params"], c["commit_after"]), []).append(c)
    out = []
    for key, group in by_figure.items():
        agree = len(group) >= 2 and len(group) == runs[key] and len({c["sign"] for c in group}) == 1
        for c in group:
            if (agree or c["alone"]) and (c["machine"], c["env"], c["benchmark"], c["params"], c["commit_after"]) \
                    not in found:  # fmt: skip
                out.append({k: v for k, v in c.items() if k not in ("alone", "sign")})
    return out
