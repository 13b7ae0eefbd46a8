"""Verdicts from pairs: each figure's change, its interval, and whether it may stop.

The unit of evidence is a **pair of processes** (one pass): its figure is the median of the log
ratios head/base of its pairs of adjacent blocks, so drift of the host has cancelled inside it. The
change is the one-sample Hodges-Lehmann estimate over the pairs of processes, with the
distribution-free interval that inverts the Wilcoxon signed-rank test (``verdict.paired_interval``).
Pooling the pairs of blocks of every pass instead treated them as independent of their two
processes, which they are not: in a whole-suite A/A run on the 2-vCPU VM the process set up second
read up to 6% apart from the first on small copies, in every pass, and pooling called five figures
faster or slower (docs/noise.md). Which side is set up first alternates by pass, so that effect
turns into spread between passes, which this interval counts. Verdicts are ``verdict.decide``'s.

The figures one ``setup_cache`` sweep measures at once (the collectives: one pair of worlds a pass
gives every op and size) are judged as one family: each interval is at ``1 - (1 - confidence) / m``
for the sweep's ``m`` figures of the run (Bonferroni), so that all ``m`` hold together at the run's
confidence at any one look (the looks after each even pass are not counted in the split: over a sweep's
three, the chance of a call is bounded by about 2.4% at 99%: docs/design.md, the sweep as one family).
Every other figure has its own pairs of processes and its own interval at the run's
confidence; the floor keeps those from being called by chance, since their intervals are a few
percent wide, while a sweep's gloo figures spread by tens of percent from world to world, and 45 of
them at 1% each called about one in three A/A runs by chance (reports/compare-aa).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from devbench.compare.runner import Figure, pair_logs
from devbench.records import verdict as V
from devbench.records.spec import direction


def process_pair_logs(fig: Figure) -> list[float]:
    """Each pass's figure: the median log ratio head/base of its pairs (passes with none are left out)."""
    return [statistics.median(logs) for logs in pair_logs(fig) if logs]


def sweep_sizes(figures: Sequence[Figure]) -> dict[str, int]:
    """How many figures of this run each ``setup_cache`` sweep measures (those not skipped, failed or changed)."""
    sizes: dict[str, int] = {}
    for f in figures:
        if f.combo.in_cache and f.combo.setup_cache and f.state not in ("skip", "error", "changed", "same code"):
            sizes[f.combo.setup_cache] = sizes.get(f.combo.setup_cache, 0) + 1
    return sizes


def confidence_of(fig: Figure, sizes: dict[str, int], confidence: float) -> float:
    """The confidence of ``fig``'s own interval: the run's, or split among the figures of its sweep."""
    m = sizes.get(fig.combo.setup_cache or "", 1) if fig.combo.in_cache else 1
    return 1 - (1 - confidence) / m if m > 1 else confidence


def confidences(figures: Sequence[Figure], confidence: float) -> dict[str, float]:
    """Each figure's own confidence, by selector (``confidence_of``)."""
    sizes = sweep_sizes(figures)
    return {f.combo.selector: confidence_of(f, sizes, confidence) for f in figures}


def verdict_row(fig: Figure, floor: float, confidence: float) -> dict[str, Any]:
    combo = fig.combo
    way = direction(combo.benchmark, combo.unit)
    row: dict[str, Any] = {
        "benchmark": combo.benchmark, "params": combo.label, "unit": combo.unit, "better": way,
        "base": math.nan, "head": math.nan, "ratio": math.nan, "ratio_lo": math.nan, "ratio_hi": math.nan,
        "floor": floor, "verdict": V.UNDECIDED, "n_base": 0, "n_head": 0, "pairs": 0, "detectable": math.inf,
        "stopped_after": fig.stopped_after if fig.stopped_after is not None else "", "note": "",
        "confidence": confidence,
    }  # fmt: skip
    if fig.state in ("skip", "error", "changed", "same code"):
        row["note"] = fig.reason
        return row
    units = process_pair_logs(fig)
    a = [v for block in fig.a for v in block if v > 0]
    b = [v for block in fig.b for v in block if v > 0]
    row.update(n_base=len(units), n_head=len(units), pairs=sum(len(x) for x in pair_logs(fig)))
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
    """One row per judged figure (records of the machine, with no better direction, are left out), each at
    its own confidence (``confidence_of``)."""
    import pandas as pd

    own = confidences(figures, confidence)
    rows = [verdict_row(f, floor, own[f.combo.selector])
            for f in figures if direction(f.combo.benchmark, f.combo.unit)]  # fmt: skip
    return pd.DataFrame(rows)
