"""Changes across a history: asv's own step detection, kept only beyond each figure's noise floor.

A history of single runs cannot say whether one commit changed a figure: the next run of
the same code differs by the host's noise. Step detection (``asv.step_detect``, the
Potts-model fit ``asv publish`` uses for its regression list) looks at the whole series
and finds levels that hold over several commits. A level change is reported only when it
is larger than the figure's noise floor (learned by ``devbench calibrate`` on that
machine, else ``verdict.DEFAULT_FLOOR``) plus the l1 error of the two levels; GPU
figures measured while the GPU was throttled are left out of the series first.

Steps are fitted to log values, so a level's error and the floor are relative changes.
No torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

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


def load_floors(noise_dir: Path) -> dict[tuple[str, str], float]:
    """(machine, figure key) -> learned floor from ``devbench calibrate``'s files; unreadable files are skipped."""
    out: dict[tuple[str, str], float] = {}
    folder = Path(noise_dir)
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
            for key, rec in data["figures"].items():
                out[(str(data["machine"]), key)] = float(rec["floor"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def figure_key(benchmark: str, params: str) -> str:
    return f"{benchmark} [{params}]" if params else benchmark


def _levels(y: list[float]) -> list[tuple[int, int, float, float]]:
    from asv.step_detect import detect_steps

    return [(left, right, value, err) for left, right, value, _, err in detect_steps(y)]


def detect(frame: pd.DataFrame, floors: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """Every level change beyond its floor, per machine, environment and figure (``COLUMNS``)."""
    floors = floors or {}
    ok = frame[(frame["status"] == "ok") & frame["value"].notna() & (frame["value"] > 0)]
    if "gpu_throttled" in ok.columns:
        ok = ok[~ok["gpu_throttled"].fillna(False).astype(bool)]
    rows = []
    for (machine, env, bench, params), g in ok.groupby(SERIES, observed=True, sort=True):
        unit = str(g["unit"].iloc[0])
        way = direction(bench, unit)
        if not way:
            continue
        g = g.sort_values(["date", "commit"], kind="stable").tail(MAX_POINTS)
        if len(g) < MIN_POINTS:
            continue
        values = g["value"].astype(float).to_numpy()
        floor = floors.get((machine, figure_key(bench, params)), V.DEFAULT_FLOOR)
        if values.max() / values.min() <= 1 + floor:
            continue  # no two points differ by the floor: no level can
        logs = [math.log(v) for v in values]
        levels = _levels(logs)
        commits = g["commit"].tolist()
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
                    "commit_before": commits[r0 - 1], "commit_after": commits[l1], "points": len(g),
                }
            )  # fmt: skip
    out = pd.DataFrame(rows, columns=COLUMNS)
    order = out["ratio"].map(lambda r: abs(math.log(r))) if len(out) else out["ratio"]
    return out.assign(_size=order).sort_values("_size", ascending=False).drop(columns="_size").reset_index(drop=True)
