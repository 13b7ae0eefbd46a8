"""What a ``devbench compare`` was asked to do: one frozen record, built once at the command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: two-sided confidence of each figure's interval (asv compare's 99%): 8 pairs of processes are the fewest
#: that give it (``verdict.signed_rank_k``)
CONFIDENCE = 0.99
#: the smallest change a verdict is given for (relative): a smaller one is ``same`` when the interval
#: fits inside it. A declared size of effect, not a fit to any host's noise
FLOOR = 0.02
#: pairs of processes (passes) before the first verdicts, and at most: even, so that each side is set up
#: first as often (docs/noise.md). At 10 the 99% interval leaves out the three most extreme Walsh averages
#: at each end (at 8 it is the values' range, which one disturbed pair of processes holds hostage)
MIN_PASSES = 10
MAX_PASSES = 14
#: through this many passes, after each even one, a figure stops when it could no longer be decided after
#: ``stopping.robust_passes`` (9 at 99%) whatever those bring: one pair of processes cannot stop it
SCREEN = 4
#: pairs of adjacent blocks per pair of processes: even, so that each side goes first as often. Eight, not
#: four: on the 2-vCPU VM a cache-sized copy's pairs of blocks spread by 30-130% within one pair of
#: processes, and 8 brought the median detectable change of the CPU copies from 17.6% to 9.8% and of the
#: products from 11.5% to 7.8% for 30% more time a pass (reports/compare-power)
PAIRS = 8
#: the turns of one figure in one pass take at most about this long (seconds): a figure whose call lasts
#: long (a sustained load, a whole sweep) gets fewer pairs, never fewer than 2
FIGURE_S = 2.5
#: a ``time_`` benchmark's block lasts at least this long (asv's sample_time of the suite; a class that declares
#: a longer sample_time gets blocks that long: ``runner.block_length``)
BLOCK_S = 0.05
#: blocks inside each ``track_`` figure of the suite's engine (``devbench.engine.measure`` reads DEVBENCH_BLOCKS):
#: one, since the pairs carry the evidence and a shorter turn leaves the host less time to drift in it
TRACK_BLOCKS = 1


class ABError(Exception):
    """Bad input or a failed step, with a one-line reason (exit 2)."""


class Terminated(Exception):
    """SIGTERM (``kill``, a CI job's timeout): the run stops and cleans up as on Ctrl-C (exit 143)."""


@dataclass(frozen=True)
class Options:
    base: str | None
    head: str
    repo: Path
    out: Path
    python: str
    bench: str | None = None
    machine: str | None = None
    confidence: float = CONFIDENCE
    floor: float = FLOOR
    min_passes: int = MIN_PASSES
    max_passes: int = MAX_PASSES
    screen: int = SCREEN
    #: also seek ``same``: a figure that may still end inside the floor runs on until it can no longer be
    #: decided (by default a figure stops once it can be neither faster nor slower)
    same: bool = False
    pairs: int = PAIRS
    block_s: float = BLOCK_S
    figure_s: float = FIGURE_S
    track_blocks: int = TRACK_BLOCKS
    twins: bool = False
    keep: bool = False
    #: no figure stops before ``min_passes`` (for an A/A run that measures what each figure can detect)
    all_passes: bool = False
    from_dir: Path | None = None
    #: seconds one request to a benchmark process may take (a set-up, one block) before it is given up
    request_timeout_s: float = 600.0
    #: measure figures whose code is byte-identical on both sides too (``deps``); the A/A runs that test the method
    measure_all: bool = False
    #: each side's Python (its environment: torch, CUDA, cuDNN); None: ``python`` for that side
    base_python: str | None = None
    head_python: str | None = None

    def python_of(self, side: str) -> str:
        """The Python whose packages run side ``side`` ("base" or "head")."""
        own = self.base_python if side == "base" else self.head_python
        return own or self.python

    def check(self) -> None:
        """``ABError`` naming the first bad value."""
        from devbench.records import verdict as V

        if not 0 < self.confidence < 1:
            raise ABError(f"--confidence must be in (0, 1), got {self.confidence}")
        if not 0 <= self.floor < 10:
            raise ABError(f"--floor must be in [0, 10) (a relative change: 0.02 is 2%), got {self.floor}")
        if self.pairs < 1:
            raise ABError(f"--pairs must be at least 1, got {self.pairs}")
        if self.figure_s <= 0:
            raise ABError(f"--figure-s must be > 0, got {self.figure_s}")
        if self.block_s <= 0:
            raise ABError(f"--block-s must be > 0, got {self.block_s}")
        if self.track_blocks < 1:
            raise ABError(f"--track-blocks must be at least 1, got {self.track_blocks}")
        if self.max_passes < self.min_passes:
            raise ABError(f"--max-passes ({self.max_passes}) must be at least --min-passes ({self.min_passes})")
        if self.from_dir is None and V.signed_rank_k(self.max_passes, self.confidence) == 0:
            least = next(n for n in range(2, 100, 2) if V.signed_rank_k(n, self.confidence) > 0)
            raise ABError(
                f"--max-passes {self.max_passes} cannot give a {self.confidence:.0%} interval (every figure would be "
                f"undecided); use at least {least} passes, or a lower --confidence"
            )
        if self.from_dir is None and self.max_passes % 2:
            raise ABError(f"--max-passes must be even, got {self.max_passes}: the passes take turns at which side "
                          "sets up first, and an odd number gives one side the first set-up once more")
        if self.min_passes < 1:
            raise ABError(f"--min-passes must be at least 1, got {self.min_passes}")
        if self.screen < 0:
            raise ABError(f"--screen must be 0 (no screen) or a number of passes, got {self.screen}")
        if self.bench:
            import re

            try:
                re.compile(self.bench)
            except re.error as exc:
                raise ABError(f"--bench {self.bench!r} is not a regular expression: {exc}") from None
