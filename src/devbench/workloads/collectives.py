"""Collectives with torch.distributed, measured and reported the way nccl-tests does.

Each rank calls these inside an initialized process group (gloo on CPUs, NCCL on GPUs).
``size`` is nccl-tests' "size": the bytes of the whole buffer the operation is about -
the all_reduce / broadcast buffer, all_gather's output (each rank gives size / n), the
reduce_scatter input (each rank keeps size / n), and what each rank sends in the
send/recv ring. Times are per operation, averaged over the ranks as nccl-tests does
(the slowest rank is kept too). Algorithm bandwidth is size / time; bus bandwidth
multiplies it by nccl-tests' factor, so figures are comparable across world sizes and
with nccl-tests' own tables:

    all_reduce 2(n-1)/n;  all_gather, reduce_scatter (n-1)/n;  broadcast, send/recv 1.

Every buffer holds small integers in float32 that differ by rank and position, so sums
are exact and the check compares every element on every rank against what it must be.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from devbench.engine.devices import synchronize
from devbench.engine.measure import Measurement, block_calls
from devbench.records.spec import COLLECTIVE_OPS as OPS
from devbench.records.spec import KiB, MiB, bus_factor, gbps

#: nccl-tests' message sizes, 4 KiB to 256 MiB in steps of 4x
SIZES = [4 * KiB * 4**i for i in range(9)]
DTYPE = torch.float32
#: the ops with an in-place form beside the out-of-place one (nccl-tests reports both)
IN_PLACE_OPS = ("all_gather", "reduce_scatter")
#: positions cycle through this many values, so every value stays an exact float32 sum
_PERIOD = 251


# torch 2.13 renamed the flat-tensor forms (the old names warn); older releases have only those
_ALL_GATHER = getattr(dist, "all_gather_single", None) or getattr(dist, "all_gather_into_tensor", None)
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or getattr(dist, "reduce_scatter_tensor", None)


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth, decimal GB/s: size / time."""
    return gbps(nbytes, seconds)


def busbw(op: str, world: int, nbytes: float, seconds: float) -> float:
    """Bus bandwidth, decimal GB/s: algorithm bandwidth x ``bus_factor``."""
    return algbw(nbytes, seconds) * bus_factor(op, world)


def _cycle(count: int, scale: int, device: torch.device) -> torch.Tensor:
    """scale x (1 + position mod 251) as float32: one period, tiled (exact: small integers)."""
    period = torch.arange(1, _PERIOD + 1, dtype=DTYPE, device=device).mul_(scale)
    return period.repeat(-(-count // _PERIOD))[:count]


#: elements compared at a time by ``_holds_cycle``: a whole number of periods, 4 MiB of float32
_CHECK_STEP = _PERIOD * 4096


def _holds_cycle(t: torch.Tensor, scale: int, offset: int = 0) -> bool:
    """Whether ``t[j] == scale x (1 + (offset + j) mod 251)`` for every ``j``.

    Compared a slice at a time against one reference slice: no tensor the size of ``t`` is made
    (on a 2-vCPU VM, fresh pages for an expected 256 MiB cost most of a second per rank).
    """
    if t.numel() == 0:
        return True
    step = min(_CHECK_STEP, t.numel())
    phase = offset % _PERIOD
    ref = _cycle(phase + step, scale, t.device)[phase:]
    return all(torch.equal(t[s : s + step], ref[: min(step, t.numel() - s)]) for s in range(0, t.numel(), step))


def _values(count: int, rank: int, device: torch.device) -> torch.Tensor:
    """Rank ``rank``'s data: (rank + 1) x (1 + position mod 251), exact in float32."""
    return _cycle(count, rank + 1, device)


@dataclass
class Collective:
    """One collective of ``nbytes`` (nccl-tests' size) on this rank's ``device``.

    Buffers are allocated and filled here, outside any timed region. ``check()`` runs the
    operation once on fresh data and compares every element; the timed calls then reuse
    the buffers. A sum into its own input (all_reduce, in-place reduce_scatter) would grow
    by the world size each call and reach float32's infinity within about 128 / log2(world)
    calls, so those buffers are timed holding zeros, a fixed point of the sum: the bytes
    moved and the additions done are the same, and the values stay finite.
    """

    op: str
    nbytes: int
    device: torch.device
    #: nccl-tests' in-place form of all_gather and reduce_scatter: the rank's input is its own
    #: chunk of the output (all_gather) or its output is its chunk of the input (reduce_scatter).
    #: all_reduce and broadcast are in place in torch.distributed, send/recv has no such form.
    in_place: bool = False
    rank: int = field(init=False)
    world: int = field(init=False)
    count: int = field(init=False)
    _fresh: bool = field(init=False, default=False, repr=False)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown collective {self.op!r}; expected one of {OPS}")
        self.device = torch.device(self.device)
        if self.in_place and self.op not in IN_PLACE_OPS:
            raise ValueError(f"{self.op} has no separate in-place form here; in place: {', '.join(IN_PLACE_OPS)}")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        itemsize = torch.empty(0, dtype=DTYPE).element_size()
        if self.nbytes < 1 or self.nbytes % (itemsize * self.world):
            raise ValueError(
                f"size {self.nbytes} B: must be a positive multiple of {itemsize * self.world} B "
                f"({itemsize}-byte elements split over {self.world} ranks)"
            )
        self.count = self.nbytes // itemsize
        self._fill()

    @property
    def chunk(self) -> int:
        """Elements each rank gives (all_gather) or keeps (reduce_scatter)."""
        return self.count // self.world

    @property
    def accumulates(self) -> bool:
        """Whether each call adds into data the next call reads (its values would grow)."""
        return self.op == "all_reduce" or (self.op == "reduce_scatter" and self.in_place)

    def _fill(self) -> None:
        self._fresh = True
        n, r, dev = self.count, self.rank, self.device
        mine = slice(r * self.chunk, (r + 1) * self.chunk)
        if self.op == "all_gather":
            self.out = torch.full((n,), -1.0, dtype=DTYPE, device=dev)
            if self.in_place:
                self.out[mine] = _values(self.chunk, r, dev)
                self.inp = self.out[mine]
            else:
                self.inp = _values(self.chunk, r, dev)
        elif self.op == "reduce_scatter":
            self.inp = _values(n, r, dev)
            self.out = self.inp[mine] if self.in_place else torch.full((self.chunk,), -1.0, dtype=DTYPE, device=dev)
        elif self.op == "broadcast":
            self.inp = _values(n, r, dev) if r == 0 else torch.full((n,), -1.0, dtype=DTYPE, device=dev)
            self.out = self.inp
        elif self.op == "send_recv":
            self.inp = _values(n, r, dev)
            self.out = torch.full((n,), -1.0, dtype=DTYPE, device=dev)
        else:
            self.inp = _values(n, r, dev)
            self.out = self.inp

    def __call__(self) -> None:
        self._fresh = False
        if self.op == "all_reduce":
            dist.all_reduce(self.inp, op=dist.ReduceOp.SUM)
        elif self.op == "all_gather":
            _ALL_GATHER(self.out, self.inp)
        elif self.op == "reduce_scatter":
            _REDUCE_SCATTER(self.out, self.inp, op=dist.ReduceOp.SUM)
        elif self.op == "broadcast":
            dist.broadcast(self.inp, src=0)
        else:  # a ring: every rank sends to the next and receives from the previous at once
            nxt, prev = (self.rank + 1) % self.world, (self.rank - 1) % self.world
            reqs = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, self.inp, nxt), dist.P2POp(dist.irecv, self.out, prev)]
            )
            for req in reqs:
                req.wait()

    def expected_pieces(self) -> list[tuple[int, int, int, int]]:
        """What ``self.out`` must hold after one call on fresh data, as pieces ``(start, length, scale,
        offset)``: ``out[start + j] == scale x (1 + (offset + j) mod 251)`` for ``j < length``."""
        n, w, sum_scale = self.count, self.world, self.world * (self.world + 1) // 2
        if self.op == "all_reduce":
            return [(0, n, sum_scale, 0)]
        if self.op == "all_gather":
            return [(r * self.chunk, self.chunk, r + 1, 0) for r in range(w)]
        if self.op == "reduce_scatter":
            return [(0, self.chunk, sum_scale, self.rank * self.chunk)]
        if self.op == "broadcast":
            return [(0, n, 1, 0)]
        return [(0, n, (self.rank - 1) % w + 1, 0)]

    def expected(self) -> torch.Tensor:
        """What ``self.out`` must hold after one call on fresh data (the pieces, made whole)."""
        parts = [
            _cycle(offset + length, scale, self.device)[offset:] for _, length, scale, offset in self.expected_pieces()
        ]
        return torch.cat(parts)

    def check(self) -> None:
        """Run once on fresh data; raise naming the rank, op and size unless every element is right.

        The buffers then hold that call's result, which the timed calls overwrite with the same
        bytes (a summing op's are zeroed, see the class): no second fill. At 256 MiB on a 2-vCPU
        host each fill is a few tenths of a second of page faults and writes.
        """
        if not self._fresh:
            self._fill()
        self()
        synchronize(self.device)
        if not all(_holds_cycle(self.out[a : a + n], scale, off) for a, n, scale, off in self.expected_pieces()):
            want = self.expected()
            wrong = int((self.out != want).sum())
            raise AssertionError(
                f"rank {self.rank}: {self.op} of {self.nbytes} B over {self.world} ranks: "
                f"{wrong} of {want.numel()} elements wrong"
            )
        if self.accumulates:
            self.inp.zero_()


def _agree(value: float, op: dist.ReduceOp, device: torch.device) -> float:
    """The same number on every rank (max or sum over ranks)."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return float(t.item())


def _agree_all(values: Sequence[float], device: torch.device) -> list[float]:
    """The sum over ranks of each of ``values`` (one all_reduce for all of them)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def _block(coll: Collective, iters: int) -> float:
    """Seconds per operation on this rank: a barrier, then ``iters`` back-to-back calls.

    Not ``measure.time_block``: the block starts at a barrier across ranks, and NCCL runs
    on streams of its own, so a host clock between full synchronizations brackets it.
    """
    dist.barrier()
    synchronize(coll.device)
    start = time.perf_counter()
    for _ in range(iters):
        coll()
    synchronize(coll.device)
    return (time.perf_counter() - start) / iters


def measure(
    coll: Collective,
    target_s: float = 0.05,
    samples: int = 3,
    warmup: int = 2,
    max_iters: int = 1000,
) -> dict[str, Any]:
    """Time ``coll`` (after its ``check()``) on every rank and return one nccl-tests row (the same on every rank).

    The number of calls per block is chosen from one timed call so that a block lasts
    about ``target_s`` (at least one call), and all ranks agree on it. Each rank keeps the
    median of ``samples`` blocks; the row's time is the mean over ranks, ``time_max``
    the slowest rank.
    """
    # the check ran one call; a call that fills a block on its own is warm after a second one, the
    # sizing call (at 256 MiB on a 2-vCPU host, 2 more calls would cost a second). Every rank agrees
    # on ``one``, so every rank makes the same calls.
    one = _agree(_block(coll, 1), dist.ReduceOp.MAX, coll.device)
    if one < target_s:
        for _ in range(warmup):
            coll()
        one = _agree(_block(coll, 1), dist.ReduceOp.MAX, coll.device)
    iters = block_calls(one, target_s, max_calls=max_iters)
    blocks = Measurement(tuple(_block(coll, iters) for _ in range(samples)), iters)
    world = coll.world
    mean = _agree(blocks.median, dist.ReduceOp.SUM, coll.device) / world
    slowest = _agree(blocks.median, dist.ReduceOp.MAX, coll.device)
    # block i of every rank ran between the same barriers: their mean is one sample of the row
    block_s = _agree_all(blocks.per_call, coll.device)
    return {
        "op": coll.op + (IN_PLACE_SUFFIX if coll.in_place else ""),
        "nbytes": coll.nbytes,
        "count": coll.count,
        "dtype": str(DTYPE).removeprefix("torch."),
        "world": world,
        "iters": iters,
        "time_us": mean * 1e6,
        "time_max_us": slowest * 1e6,
        "algbw": algbw(coll.nbytes, mean),
        "busbw": busbw(coll.op, world, coll.nbytes, mean),
        "block_us": [t / world * 1e6 for t in block_s],
    }


def sweep(
    device: torch.device,
    ops: Sequence[str] = OPS,
    sizes: Iterable[int] = SIZES,
    target_s: float = 0.05,
    samples: int = 3,
    progress: Any = None,
    in_place: bool = False,
    only: Iterable[tuple[str, int]] | None = None,
) -> list[dict[str, Any]]:
    """Check and time every op at every size on this rank; every rank gets the same rows.

    ``progress`` (rank 0 only, if given) is called with each finished row. ``in_place`` adds,
    after each of ``IN_PLACE_OPS``, its in-place form (op named ``"<op> in-place"``). ``only``:
    the (op, size) pairs to measure, of those ``ops`` and ``sizes`` give (all when ``None``).
    """
    wanted = None if only is None else {(op, int(n)) for op, n in only}
    rows = []
    variants = [(op, False) for op in ops]
    if in_place:
        variants = [v for op in ops for v in ([(op, False), (op, True)] if op in IN_PLACE_OPS else [(op, False)])]
    sizes = list(sizes)
    for op, placed in variants:
        for nbytes in sizes:
            if wanted is not None and (op, nbytes) not in wanted:
                continue
            coll = Collective(op, nbytes, device, in_place=placed)
            coll.check()
            row = measure(coll, target_s=target_s, samples=samples)
            rows.append(row)
            if progress is not None and coll.rank == 0:
                progress(row)
            del coll
    return rows


def parse_size(text: str) -> int:
    """``"4KiB"``, ``"64 MiB"``, ``"1GiB"``, ``"4096"`` -> bytes."""
    t = text.strip().replace(" ", "")
    units = {"GiB": 1 << 30, "MiB": MiB, "KiB": KiB, "G": 1 << 30, "M": MiB, "K": KiB}
    unit = next((u for u in units if t.endswith(u)), "")
    number, scale = (t[: -len(unit)], units[unit]) if unit else (t, 1)
    try:
        value = int(number) * scale
    except ValueError:
        raise ValueError(f"size {text!r}: expected a number of bytes like 4096, 4KiB or 64MiB") from None
    if value < 1:
        raise ValueError(f"size {text!r}: must be positive")
    return value


def size_range(lo: int, hi: int, factor: int = 4) -> list[int]:
    """``lo``, ``lo * factor``, ... up to ``hi`` (nccl-tests' -b/-e/-f)."""
    if lo > hi:
        raise ValueError(f"smallest size {lo} B is larger than the largest {hi} B")
    if factor < 2:
        raise ValueError(f"size factor must be >= 2, got {factor}")
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


#: how an in-place row's op is named in tables and files
IN_PLACE_SUFFIX = " in-place"


HEADER = (
    f"{'size (B)':>12} {'count':>11} {'type':>7} {'op':>23} {'time (us)':>11} "
    f"{'max (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}"
)


def format_row(row: dict[str, Any]) -> str:
    """One line of the nccl-tests-style table."""
    return (
        f"{row['nbytes']:>12} {row['count']:>11} {row['dtype']:>7} {row['op']:>23} {row['time_us']:>11.1f} "
        f"{row['time_max_us']:>11.1f} {row['algbw']:>11.3f} {row['busbw']:>11.3f}"
    )


def print_row(row: dict[str, Any]) -> None:
    print(format_row(row), flush=True)


def sweep_rank(
    rank: int,
    world: int,
    backend: str,
    ops: Sequence[str] = OPS,
    sizes: Sequence[int] = SIZES,
    target_s: float = 0.05,
    samples: int = 3,
    progress: bool = False,
    in_place: bool = False,
    only: Sequence[tuple[str, int]] | None = None,
) -> list[dict[str, Any]]:
    """``sweep`` on this rank's device; the function ``spawn_world`` runs on every rank.

    ``progress``: rank 0 prints each row of the table as it is measured.
    """
    from devbench.engine.devices import rank_device

    rows = sweep(rank_device(backend, rank), ops, sizes, target_s=target_s, samples=samples,
                 progress=print_row if progress else None, in_place=in_place, only=only)  # fmt: skip
    for row in rows:
        row["backend"] = backend
    return rows
