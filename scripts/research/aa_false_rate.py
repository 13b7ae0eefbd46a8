#!/usr/bin/env python3
"""How often devbench compare calls an unchanged figure faster or slower by chance: its stopping and verdict
rules (``devbench.compare.stopping``, ``judge``) run on synthetic A/A passes, no timing.

    python scripts/research/aa_false_rate.py            # 20,000 figures per row
    python scripts/research/aa_false_rate.py 2000       # fewer

Each pass is one pair of processes whose value, the log ratio head / base, is drawn from N(0, sigma): an
unchanged figure on a host whose passes spread by sigma. Per sigma and floor, the share of figures called:
with one look at 10 or at 14 passes, and with the default looks (a screen after 4, a verdict at 10, 12 and 14),
with and without the screen. The repeated looks are not corrected for: this measures what they cost.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from devbench.compare import judge, stopping  # noqa: E402
from devbench.compare.runner import Combination, Figure  # noqa: E402
from devbench.records import verdict as V  # noqa: E402

FIRST, LAST, SCREEN, CONFIDENCE = 10, 14, 4, 0.99
CALLED = (V.FASTER, V.SLOWER)


def _figure(values: list[float]) -> Figure:
    fig = Figure(Combination("bench_x.time_y", 0, (), (), "seconds"))
    for v in values:
        fig.a.append([1.0])
        fig.b.append([math.exp(v)])
    return fig


def _called(fig: Figure, floor: float) -> bool:
    return judge.verdict_row(fig, floor, CONFIDENCE)["verdict"] in CALLED


def _looked(values: list[float], floor: float, screen: int) -> bool:
    """The default procedure: a pass at a time, stopped where ``stopping.settled`` says so."""
    fig = _figure([])
    for done, v in enumerate(values, 1):
        fig.a.append([1.0])
        fig.b.append([math.exp(v)])
        if done < LAST and stopping.settled(fig, LAST - done, floor, CONFIDENCE, decide=done >= FIRST,
                                            screen=screen, changes_only=True):  # fmt: skip
            break
    return _called(fig, floor)


def main(trials: int) -> None:
    draw = random.Random(1)
    print(f"{trials} A/A figures a row, {CONFIDENCE:.0%} intervals; the share called faster or slower")
    print(f"{'sigma':>6} {'floor':>6} {'one look at 10':>15} {'at 14':>7} {'default looks':>14} {'no screen':>10}")
    for floor in (0.02, 0.0):
        for sigma in (0.01, 0.05, 0.1, 0.2):
            counts = [0, 0, 0, 0]
            for _ in range(trials):
                values = [draw.gauss(0.0, sigma) for _ in range(LAST)]
                counts[0] += _called(_figure(values[:FIRST]), floor)
                counts[1] += _called(_figure(values), floor)
                counts[2] += _looked(values, floor, SCREEN)
                counts[3] += _looked(values, floor, 0)
            shares = [c / trials for c in counts]
            print(f"{sigma:>6} {floor:>6} {shares[0]:>15.4f} {shares[1]:>7.4f} {shares[2]:>14.4f} {shares[3]:>10.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
