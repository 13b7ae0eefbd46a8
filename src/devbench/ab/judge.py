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
confidence and the sweep, like any other figure, is called by chance at most ``1 - confidence`` of
the time. Every other figure has its own pairs of processes and its own interval at the run's
confidence; the floor keeps those from being called by chance, since their intervals are a few
percent wide, while a sweep's gloo figures spread by tens of percent from world to world, and 45 of
them at 1% each called about one in three A/A runs by chance (reports/compare-aa).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from devbench import verdict as V
from devbench.ab.runner import Figure, pair_logs
from devbench.spec import direction


def process_pair_logs(fig: Figure) -> list[float]:
    """Each pass's figure: the median log ratio head/base of its pairs (passes with none are left out)."""
    return [statistics.median(logs) for logs in pair_logs(fig) if logs]


def sweep_sizes(figures: Sequence[Figure]) -> dict[str, int]:
    """How many figures of this run each ``setup_cache`` sweep measures (those not skipped, failed or changed)."""
    sizes: dict[str, int] = {}
    for f in figures:
        if f.combo.in_cache and f.combo.setup_cache and f.state not in ("skip", "error", "changed"):
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


def fewest_passes(confidence: float) -> int:
    """The fewest pairs of processes that give an interval at ``confidence`` (8 at 99%, 14 at 1 - 0.01/45)."""
    return next(n for n in range(1, 1000) if V.signed_rank_k(n, confidence) > 0)


def most_passes(confidence: float, min_passes: int, max_passes: int) -> int:
    """The passes a figure judged at ``confidence`` may get: ``max_passes``, or, when its interval needs more
    than ``min_passes`` pairs (one of a sweep's figures), as many beyond its fewest as the others get beyond
    ``min_passes`` (16 for one of 45 at 99%, with the default 8 and 10)."""
    return max(max_passes, fewest_passes(confidence) + max_passes - min_passes)


def settled(
    fig: Figure, left: int, floor: float, confidence: float, decide: bool = True, screen: int = 0,
    changes_only: bool = False,
) -> bool:
    """Whether ``fig`` may stop: decided now (when ``decide``), or certain to stay undecided whatever ``left``
    more passes bring. Only after an even number of passes: each side set up first as often.

    Through the first ``screen`` passes (0: none; none at or after the fewest) it also stops when it could
    no longer be decided after the fewest passes that give its interval (``fewest_passes``: 8 at 99%, where
    the interval is the range of the values): its first pairs of processes already disagree, one beyond
    the floor's edge where another is not. Only the passes beyond the fewest (up to ``max_passes``) could
    still decide such a figure, and they are kept for the figures whose first pairs agree. A screened
    figure is ``undecided``, so the screen never makes a verdict, false or true, that running on would not
    have made; what it costs is the figures that the passes beyond the fewest would have decided
    (docs/design.md, "Verdicts").

    With ``changes_only`` the figure is looked at only for ``faster`` and ``slower``: it stops as soon as
    neither can be reached any more, even while its interval could still fit inside the floor (no ``same``
    is sought, and the passes it would take are saved)."""
    units = process_pair_logs(fig)
    if not units:
        return True  # nothing measured on some side: more passes will not judge it
    if len(fig.a) % 2:
        return False
    _, lo, hi = V.paired_interval(units, confidence)
    if decide and V.decide(lo, hi, floor) != V.UNDECIDED:
        return True
    if len(fig.a) <= screen:
        fewest = fewest_passes(confidence)
        if len(units) < fewest and V.futile(units, fewest, floor, confidence, same=not changes_only):
            return True
    return V.futile(units, len(units) + left, floor, confidence, same=not changes_only)


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
    if fig.state in ("skip", "error", "changed"):
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
