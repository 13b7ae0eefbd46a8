"""A run's own ceilings, figures measured against them, and whether a history's step is the machine or the code.

A run of the suite measures two ceilings of its machine beside every other figure: the memory copy
(``DeviceCopy``, 64 MiB on the CPU, 1 GiB on a GPU) and the achievable matrix product
(``MatmulAchievable``, burst). On a shared host the machine's own speed moves 10-30% over minutes,
so a step in a history of single runs may be the machine, not the code. ``attribute`` says, per step:

* ``machine``: every ceiling of the same machine and environment moved the same way, from the
  level before the step to the level after it (the median of each over the commits of that level),
  by at least ``LIKE_SHARE`` of the step (in the direction better or worse, so a slower time and a
  lower GB/s are the same way);
* ``code``: the ceilings were measured on both levels and none moved so;
* ``unknown``: some moved so and some did not (a change to one ceiling's own workload, or a host
  whose memory alone was taken), no ceiling was measured on both levels, or the figure names no
  device or no better direction; the row says which.

Levels, not the two commits beside the step: one run of a ceiling on the shared VM reads 10-20%
apart from the next (an achievable product at 0.15 TFLOP/s between two at 0.12 and 0.09), which
alone moved a ceiling by as much as a planted step. asv's step detection (``report.steps``) stays the
detector: this only labels what it found. No torch.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from devbench.records import spec
from devbench.records.spec import direction

MiB, GiB = 2**20, 2**30

#: the ceilings of a run, by the device a figure runs on: (name, benchmark, params)
CEILINGS: dict[str, list[tuple[str, str, dict[str, object]]]] = {
    "cpu": [
        ("host copy 64 MiB", spec.DEVICE_COPY_GBPS.benchmark, {"device": "cpu", "nbytes": 64 * MiB}),
        ("achievable float32", spec.ACHIEVABLE_TFLOPS.benchmark, {"device": "cpu", "dtype": "float32", "run": "burst"}),
    ],
    "cuda": [
        ("device copy 1 GiB", spec.DEVICE_COPY_GBPS.benchmark, {"device": "cuda", "nbytes": GiB}),
        ("achievable bfloat16", spec.ACHIEVABLE_TFLOPS.benchmark,
         {"device": "cuda", "dtype": "bfloat16", "run": "burst"}),
    ],
}  # fmt: skip

#: a ceiling that moved the same way by at least this share of a figure's step (in log terms) moved with it
LIKE_SHARE = 0.5

MACHINE, CODE, UNKNOWN = "machine", "code", "unknown"


def _matches(frame: pd.DataFrame, bench: str, params: dict[str, object]) -> pd.Series:
    hit = pd.Series(frame["benchmark"].isin([bench]).to_numpy(), index=frame.index)  # on the categories
    if not hit.any():
        return hit
    sub = frame.loc[hit]  # the params compared on that benchmark's rows only, not the whole history's
    for name, value in params.items():
        if name not in frame:
            return pd.Series(False, index=frame.index)
        if isinstance(value, int | float):  # a numeric column holds NaN elsewhere: 67108864.0
            same = pd.to_numeric(sub[name], errors="coerce") == value
        else:
            same = sub[name].astype(str) == str(value)
        hit.loc[sub.index] &= same.to_numpy()
    return hit


def ceiling_values(frame: pd.DataFrame) -> pd.DataFrame:
    """Every ceiling's value per machine, environment and commit (``machine, env, device, ceiling, commit,
    value``: the median where a commit ran twice)."""
    cols = ["machine", "env", "device", "ceiling", "commit", "value"]
    if frame.empty or "status" not in frame:
        return pd.DataFrame(columns=cols)
    # the ceilings' benchmarks first: a few rows, not a copy of the whole history
    wanted = frame[frame["benchmark"].isin({bench for ceilings in CEILINGS.values() for _, bench, _ in ceilings})]
    ok = wanted[(wanted["status"] == "ok") & pd.to_numeric(wanted["value"], errors="coerce").gt(0)]
    parts = []
    for device, ceilings in CEILINGS.items():
        for name, bench, params in ceilings:
            rows = ok[_matches(ok, bench, params)]
            if rows.empty:
                continue
            got = rows.groupby(["machine", "env", "commit"], observed=True)["value"].median().reset_index()
            parts.append(got.assign(device=device, ceiling=name))
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    for c in ("machine", "env", "commit"):
        out[c] = out[c].astype(str)
    return out[cols]


def _devices(frame: pd.DataFrame) -> dict[tuple[str, str, str, str], str]:
    """The device each series runs on, by (machine, env, benchmark, params); absent when it names none."""
    if "device" not in frame:
        return {}
    keys = ["machine", "env", "benchmark", "params"]
    named = frame[[*keys, "device"]]
    named = named[named["device"].notna()].drop_duplicates(keys)
    return {(str(r.machine), str(r.env), str(r.benchmark), str(r.params)): str(r.device)
            for r in named.itertuples()}  # fmt: skip


def attribute(steps: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``steps`` (``report.steps.detect``) with ``cause`` (machine, code, unknown) and ``ceilings`` (how each
    ceiling moved between the step's two commits, or why none is read)."""
    out = steps.copy()
    if out.empty:
        return out.assign(cause=pd.Series(dtype=object), ceilings=pd.Series(dtype=object))
    values = ceiling_values(frame)
    lookup = {(r.machine, r.env, r.device, r.ceiling, r.commit): float(r.value) for r in values.itertuples()}
    mine = [c for c in ("machine", "env", "benchmark", "params", "device") if c in frame]
    devices = _devices(frame.loc[frame["benchmark"].isin(set(out["benchmark"])), mine])  # only the steps' series
    causes, notes = [], []
    for r in out.itertuples():
        key = (str(r.machine), str(r.env), str(r.benchmark), str(r.params))
        way = direction(str(r.benchmark), str(r.unit))
        device = devices.get(key)
        if not way:
            causes.append(UNKNOWN)
            notes.append("the figure's unit says no better direction")
            continue
        if device not in CEILINGS:
            causes.append(UNKNOWN)
            notes.append("the figure names no device with ceilings")
            continue
        # the step in "better" terms: positive when the figure got better
        better = math.log(float(r.ratio)) * (1 if way == "higher" else -1)
        levels = [_level(r, "level_before", "commit_before"), _level(r, "level_after", "commit_after")]
        moved, read = [], []
        for name, _, _ in CEILINGS[device]:
            before, after = (_median(lookup, key[0], key[1], device, name, commits) for commits in levels)
            if before is None or after is None:
                continue
            shift = math.log(after / before)  # a ceiling is higher-is-better
            read.append(f"{name} {100 * (after / before - 1):+.0f}%")
            moved.append(shift * better > 0 and abs(shift) >= LIKE_SHARE * abs(better))
        if not read:
            causes.append(UNKNOWN)
            notes.append("no ceiling measured on both levels")
        else:
            causes.append(MACHINE if all(moved) else CODE if not any(moved) else UNKNOWN)
            notes.append(", ".join(read))
    return out.assign(cause=causes, ceilings=notes)


def _level(row: object, column: str, fallback: str) -> list[str]:
    """The commits of a step's level (``steps.detect``'s ``level_before``/``level_after``), else its one commit."""
    commits = str(getattr(row, column, "") or "").split()
    return commits or [str(getattr(row, fallback))]


def _median(lookup: dict, machine: str, env: str, device: str, name: str, commits: list[str]) -> float | None:
    got = [v for c in commits if (v := lookup.get((machine, env, device, name, c))) is not None]
    return float(np.median(got)) if got else None


def with_ceilings(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``ceiling`` (the name of the run's ceiling a figure is measured against) and
    ``of_ceiling`` (the figure over that ceiling's value in the same run: machine, environment, commit).
    GB/s figures on a device are measured against that device's memory copy, TFLOP/s figures against the
    achievable product of their device (float32 on a CPU, bfloat16 on a GPU); others are left empty."""
    out = frame.assign(ceiling="", of_ceiling=np.nan)
    if out.empty or "device" not in out or "unit" not in out:
        return out
    values = ceiling_values(out)
    if values.empty:
        return out
    unit, device = out["unit"].astype(str), out["device"].astype(str)
    for dev, ceilings in CEILINGS.items():
        for (name, _, _), want in zip(ceilings, ("GB/s", "TFLOP/s"), strict=True):
            rows = (device == dev) & (unit == want)
            if not rows.any():
                continue
            mine = values[(values["device"] == dev) & (values["ceiling"] == name)]
            if mine.empty:
                continue
            ref = mine.set_index(["machine", "env", "commit"])["value"]
            keys = pd.MultiIndex.from_arrays([out.loc[rows, c].astype(str) for c in ("machine", "env", "commit")])
            found = ref.reindex(keys).to_numpy(dtype=float)
            value = pd.to_numeric(out.loc[rows, "value"], errors="coerce").to_numpy(dtype=float)
            out.loc[rows, "of_ceiling"] = value / found
            out.loc[rows, "ceiling"] = np.where(np.isfinite(found), name, "")
    return out
