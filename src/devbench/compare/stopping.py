"""When a figure may stop: decided, certain to stay undecided, or screened.

After every even pass (each side set up first as often) ``runner.run_passes`` asks ``settled`` of every
figure still running. A figure stops when its interval is decided (from ``--min-passes`` on), when no
passes to come could decide it (``verdict.futile``: stopping it loses no verdict), or, through the
screen's passes, when it could no longer be decided after ``robust_passes`` pairs of processes: the
fewest whose interval leaves out the most extreme value at each end, so that one pair of processes the
host disturbed can neither decide a figure nor stop one. ``limit`` gives each figure its most passes (a
sweep's figures, judged as one family, more) and ``stopper`` binds the rule to a run's options.
"""

from __future__ import annotations

from collections.abc import Callable

from devbench.compare.judge import confidence_of, process_pair_logs, sweep_sizes
from devbench.compare.options import Options
from devbench.compare.runner import Figure
from devbench.records import verdict as V


def fewest_passes(confidence: float) -> int:
    """The fewest pairs of processes that give an interval at ``confidence`` (8 at 99%, 14 at 1 - 0.01/45)."""
    return next(n for n in range(1, 1000) if V.signed_rank_k(n, confidence) > 0)


def most_passes(confidence: float, min_passes: int, max_passes: int) -> int:
    """The passes a figure judged at ``confidence`` may get: ``max_passes``, or, when its interval needs more
    than ``min_passes`` pairs (one of a sweep's figures), as many beyond its fewest as the others get beyond
    ``min_passes`` (18 for one of 45 at 99%, with the default 10 and 14)."""
    return max(max_passes, fewest_passes(confidence) + max_passes - min_passes)


def robust_passes(confidence: float) -> int:
    """The fewest pairs of processes whose interval at ``confidence`` leaves out the most extreme value at each
    end (``k`` >= 2: 9 at 99%). Below it the interval is the range of the values, so one pair of processes the
    host disturbed is its bound; from it on, that pair only moves a bound by one Walsh average (halfway to the
    next value), and a change of 2x that one pair reads as none is still called."""
    return next(n for n in range(1, 1000) if V.signed_rank_k(n, confidence) >= 2)


def settled(
    fig: Figure, left: int, floor: float, confidence: float, decide: bool = True, screen: int = 0,
    changes_only: bool = False,
) -> bool:
    """Whether ``fig`` may stop: decided now (when ``decide``), or certain to stay undecided whatever ``left``
    more passes bring. Only after an even number of passes: each side set up first as often.

    Through the first ``screen`` passes (0: none) it also stops when it could no longer be decided after
    ``robust_passes`` pairs of processes (9 at 99%), whatever they bring: the interval there leaves out the
    most extreme value at each end, so one pair of processes that reads apart from the others (a real 2x
    read as none by a pair the host disturbed) cannot stop the figure; two values that disagree, one beyond
    the floor's edge and one not, stop it only when their mean lies inside the floor, and four only when the
    second smallest and second largest of their Walsh averages straddle its edges. The screen judges the
    pairs of processes, the verdict's own unit, not their pairs of blocks: on a host where blocks spread by
    more than the change, no pair of processes' blocks all show a real 10% change, and a screen that asked
    for that stopped most such figures (docs/compare.md). A screened figure is ``undecided``, so the screen
    never makes a verdict, false or true, that running on would not have made; what it costs is the figures
    that more passes would have decided (docs/design.md, "Verdicts").

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
        at = robust_passes(confidence)
        if len(units) < at and V.futile(units, at, floor, confidence, same=not changes_only):
            return True
    return V.futile(units, len(units) + left, floor, confidence, same=not changes_only)


def own_confidence(opts: Options, figures: list[Figure]) -> Callable[[Figure], float]:
    """A figure's own confidence as the run stands (``confidence_of``): asked anew after each pass, since
    the figures of a sweep that skip (known after the first) do not split it."""
    return lambda fig: confidence_of(fig, sweep_sizes(figures), opts.confidence)


def limit(opts: Options, figures: list[Figure]) -> Callable[[Figure], int]:
    """The passes a figure measured in ``setup_cache`` may get: as many beyond the fewest its interval needs
    (14 for one of 45 figures of a sweep at 99%) as the others get beyond ``--min-passes``, rounded up to an even
    number: each side sweeps first as often as the other."""
    own = own_confidence(opts, figures)

    def passes(fig: Figure) -> int:
        most = most_passes(own(fig), opts.min_passes, opts.max_passes)
        return most + most % 2

    return passes


def stopper(opts: Options, figures: list[Figure]) -> Callable[..., bool]:
    own = own_confidence(opts, figures)
    return lambda fig, left, decide=True: settled(fig, left, opts.floor, own(fig), decide, opts.screen,
                                                      not opts.same)
