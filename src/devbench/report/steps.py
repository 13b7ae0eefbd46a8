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
split differ by the floor?) spares the fit on the many series that are flat.
No torch.
"""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pandas as pd

from devbench import verdict as V
from devbench.spec import direction

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
    series' own noise in summed distance, so noise alone rarely opens one. The levels found
    are then kept only where they differ by more than the floor (``detect``).
    """
    from asv.step_detect import solve_potts

    gamma = 2 * math.log1p(floor) + 4 * _noise(logs)
    right, values, dists = solve_potts(logs.tolist(), [1.0] * len(logs), gamma=gamma, min_size=2)
    out, left = [], 0
    for r, v, d in zip(right, values, dists, strict=True):
        out.append((left, r, v, abs(d / (r - left))))
        left = r
    return out


def _split_screen(logs: np.ndarray, floor: float) -> bool:
    """True when the medians on two sides of a quarter, half or three-quarter split differ by the floor."""
    n, limit, values = len(logs), math.log1p(floor), logs.tolist()  # statistics' median: 20x numpy's on ~50 points
    for cut in {n // 4, n // 2, (3 * n) // 4}:
        if cut >= 2 and n - cut >= 2 and abs(statistics.median(values[:cut]) - statistics.median(values[cut:])) > limit:
            return True
    return False


def detect(frame: pd.DataFrame, floor: float = V.DEFAULT_FLOOR) -> pd.DataFrame:
    """Every level change beyond ``floor`` (and the series' own noise), per machine, environment and figure
    (``COLUMNS``)."""
    keep = frame["status"].eq("ok").to_numpy() & frame["value"].gt(0).to_numpy()
    if "gpu_throttled" in frame.columns:
        keep &= ~frame["gpu_throttled"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    ok = frame.loc[keep, [*SERIES, "unit", "date", "commit", "value"]]
    ok = ok.sort_values([*SERIES, "date", "commit"], kind="stable")
    codes = ok.groupby(SERIES, observed=True, sort=False).ngroup().to_numpy()
    if len(codes) == 0:
        return pd.DataFrame(columns=COLUMNS)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    logs_all = np.log(ok["value"].to_numpy(dtype=float))
    # one key per series, not per row: turning 500,000 rows into text cost 0.6 s
    keys = ok[[*SERIES, "unit"]].iloc[starts].astype(str).to_numpy()
    commits_all = ok["commit"].to_numpy()
    rows = []
    for (machine, env, bench, params, unit), start, end in zip(keys, starts, ends, strict=True):
        start = max(start, end - MAX_POINTS)
        if end - start < MIN_POINTS:
            continue
        way = direction(bench, unit)
        if not way:
            continue
        logs = logs_all[start:end]
        if logs.max() - logs.min() <= math.log1p(floor) or not _split_screen(logs, floor):
            continue  # no two halves differ by the floor: no level can
        levels = _levels(logs, floor)
        commits = commits_all[start:end]
        for (_, r0, v0, e0), (l1, _, v1, e1) in zip(levels, levels[1:], strict=False):
            shift = v1 - v0
            if abs(shift) <= math.log1p(floor) + max(e0, e1):
                continue
            went_up = shift > 0
            rows.append(
                {
                    "machine": machine, "env": env, "benchmark": bench, "params": params, "unit": unit,
                    "verdict": V.FASTER if went_up == (way == "higher") else V.SLOWER,
                    "ratio": math.exp(shift), "floor": floor, "before": math.exp(v0), "after": math.exp(v1),
                    "commit_before": str(commits[r0 - 1]), "commit_after": str(commits[l1]), "points": end - start,
                }
            )  # fmt: skip
    out = pd.DataFrame(rows, columns=COLUMNS)
    order = out["ratio"].map(lambda r: abs(math.log(r))) if len(out) else out["ratio"]
    return out.assign(_size=order).sort_values("_size", ascending=False).drop(columns="_size").reset_index(drop=True)
