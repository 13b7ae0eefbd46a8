"""Verdicts from pairs: each figure's change, its interval, and whether it may stop.

The unit of evidence is a **pair of adjacent blocks**, one of each side: its log ratio head/base.
The change is the one-sample Hodges-Lehmann estimate over every pair of every pass, with the
distribution-free interval that inverts the Wilcoxon signed-rank test (``verdict.paired_interval``).
Pairs of one pass share their two processes; pooling them is sound because a process's own
offset (its layout) is small beside the block-to-block noise on the hosts measured
(docs/noise.md: 0-2.3% against 3-20%), and several passes sample it. Verdicts are
``verdict.decide``'s: beyond the floor on one side, inside it, or undecided.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from devbench import verdict as V
from devbench.ab.runner import Figure, pair_logs
from devbench.spec import direction


def pooled_logs(fig: Figure) -> list[float]:
    """Every pair's log ratio head/base, pass after pass."""
    return [d for logs in pair_logs(fig) for d in logs]


def settled(fig: Figure, left: int, floor: float, confidence: float, pairs: int) -> bool:
    """Whether ``fig`` may stop: decided now, or certain to stay undecided whatever ``left`` more passes of
    ``pairs`` pairs each bring."""
    units = pooled_logs(fig)
    if not units:
        return True  # nothing measured on some side: more passes will not judge it
    _, lo, hi = V.paired_interval(units, confidence)
    if V.decide(lo, hi, floor) != V.UNDECIDED:
        return True
    return V.futile(units, len(units) + left * pairs, floor, confidence)


def verdict_row(fig: Figure, floor: float, confidence: float) -> dict[str, Any]:
    combo = fig.combo
    way = direction(combo.benchmark, combo.unit)
    row: dict[str, Any] = {
        "benchmark": combo.benchmark, "params": combo.label, "unit": combo.unit, "better": way,
        "base": math.nan, "head": math.nan, "ratio": math.nan, "ratio_lo": math.nan, "ratio_hi": math.nan,
        "floor": floor, "verdict": V.UNDECIDED, "n_base": 0, "n_head": 0, "pairs": 0, "detectable": math.inf,
        "stopped_after": fig.stopped_after if fig.stopped_after is not None else "", "note": "",
    }  # fmt: skip
    if fig.state in ("skip", "error", "changed"):
        row["note"] = fig.reason
        return row
    units = pooled_logs(fig)
    a = [v for block in fig.a for v in block if v > 0]
    b = [v for block in fig.b for v in block if v > 0]
    row.update(n_base=len(fig.a), n_head=len(fig.b), pairs=len(units))
    if a:
        row["base"] = statistics.median(a)
    if b:
        row["head"] = statistics.median(b)
    if not units:
        row["note"] = "no pair of blocks gave a figure on both sides (see the log)"
        return row
    mid, lo, hi = V.paired_interval(units, confidence)
    verdict = V.decide(lo, hi, floor)
    if verdict in (V.UP, V.DOWN):  # decide says up or down; the unit says which is better
        verdict = V.FASTER if (verdict == V.UP) == (way == "higher") else V.SLOWER
    row.update(
        ratio=math.exp(mid), ratio_lo=math.exp(lo), ratio_hi=math.exp(hi), verdict=verdict,
        detectable=V.detectable(lo, hi, floor),
    )  # fmt: skip
    return row


def judge_all(figures: Sequence[Figure], floor: float, confidence: float) -> Any:
    """One row per judged figure (records of the machine, with no better direction, are left out)."""
    import pandas as pd

    rows = [verdict_row(f, floor, confidence) for f in figures if direction(f.combo.benchmark, f.combo.unit)]
    return pd.DataFrame(rows)
