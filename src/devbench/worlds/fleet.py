"""``python -m devbench.worlds.fleet``: the same short, checked set on every GPU at once, each judged against its peers.

Microsoft SuperBench's idea for a new box or cluster: run identical micro-benchmarks
on every device at the same time and flag the ones that fall behind the others. Under
``torchrun`` each process is one rank on one GPU (NCCL; one node or many); run alone
it starts ``--nproc`` local ranks itself. Every rank runs, in step with the others
(a barrier before each figure):

* matmul, burst (after idling) and sustained (after seconds of load): bf16 n=8192 on a
  GPU, float32 n=1024 on a CPU; every product checked against float64 first;
* pinned host->device and device->host copies (GPUs only), and a copy within the
  device's memory; every copy checked byte for byte first, and timed one rank at a
  time (GPUs behind one PCIe switch share it: copied at once, a healthy one would read
  a share and be flagged for its neighbour's traffic).

Rank 0 gathers the figures, compares each with the median over all ranks, flags the
ranks more than ``--threshold`` (default 5%) below it, prints a table and writes
``devbench-fleet/1`` JSON under ``--out`` (default ``.asv/fleet``), which
``devbench report`` picks up. Each rank records its host, GPU index, PCI bus id, UUID,
serial, and the SM clock and power NVML saw during its sustained matmul. On a CPU box the
ranks are gloo processes and the figures are of CPUs: the output says so.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import socket
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FORMAT = "devbench-fleet/1"
DEFAULT_OUT = ".asv/fleet"
DEFAULT_THRESHOLD = 0.05

#: name -> unit of every figure, in the order they are measured (higher is better for all)
FIGURES = {
    "matmul_burst": "TFLOP/s",
    "matmul_sustained": "TFLOP/s",
    "h2d_pinned": "GB/s",
    "d2h_pinned": "GB/s",
    "device_copy": "GB/s",
}

EXAMPLES = """\
examples:
  # a CPU box or CI: 2 gloo processes (figures are of CPUs)
  torchrun --nproc-per-node 2 -m devbench.worlds.fleet
  python -m devbench.worlds.fleet --nproc 2                  # the same without torchrun
  # one node, 8 GPUs (NCCL)
  torchrun --nproc-per-node 8 -m devbench.worlds.fleet
  # 8 nodes x 8 GPUs: on each node, NODE_RANK 0..7, MASTER = node 0's address
  torchrun --nnodes 8 --nproc-per-node 8 --node-rank $NODE_RANK \\
      --rdzv-backend c10d --rdzv-endpoint $MASTER:29500 --rdzv-id fleet -m devbench.worlds.fleet

exit status: 0 done (flagged ranks are marked SLOW); 1 a rank failed, or with --fail-on-slow a rank
was flagged; 2 bad arguments.
"""


# --- What one rank measures ------------------------------------------------------------------------------


def _sizes(device_type: str, quick: bool) -> dict[str, Any]:
    if device_type == "cuda":
        return {"dtype": "bfloat16", "n": 4096 if quick else 8192, "copy": (64 if quick else 256) << 20,
                "device_copy": (256 if quick else 1024) << 20}  # fmt: skip
    return {"dtype": "float32", "n": 256 if quick else 1024, "copy": 0, "device_copy": (8 if quick else 64) << 20}


def _timing(quick: bool) -> dict[str, float]:
    if quick:
        return {"idle_s": 0.2, "burst_s": 0.1, "first_s": 0.5, "sustained_s": 0.4}
    return {"idle_s": 1.0, "burst_s": 0.25, "first_s": 5.0, "sustained_s": 2.0}


def _repeated(fn: Callable[[], object], times: int) -> Callable[[], None]:
    def every() -> None:
        for _ in range(times):
            fn()

    return every


def _clocks(device: Any, summary: list[dict[str, Any]]) -> dict[str, Any]:
    """This rank's GPU from a ``gpustate.Sampler`` summary (all GPUs NVML sees), matched by bus id."""
    if device.type != "cuda" or not summary:
        return {}
    from devbench.engine.devices import cuda_identities
    from devbench.records import gpustate

    mine = cuda_identities()[device.index]
    nvml = {g["index"]: g for g in gpustate.snapshot()}
    for g in summary:
        ident = nvml.get(g["index"], {})
        if gpustate.match_nvml([mine], [ident]) == [0]:
            return {"sm_clock_mhz": g["sm_clock_mhz"], "power_w": g["power_w"], "throttling": g["throttling"],
                    "temperature_c": g["temperature_c"]}  # fmt: skip
    return {}


def identity(device: Any, rank: int, local_rank: int) -> dict[str, Any]:
    """Who this rank is: host, device, and for a GPU its name, UUID, PCI bus id and serial."""
    out: dict[str, Any] = {"rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "device": str(device)}
    if device.type != "cuda":
        from devbench.engine.devices import describe

        out["name"] = describe()["host"].get("cpu")
        return out
    import torch

    from devbench.engine.devices import cuda_identities

    out["name"] = torch.cuda.get_device_name(device)
    out.update(cuda_identities()[device.index])
    try:
        import pynvml

        from devbench.records import gpustate

        pynvml.nvmlInit()
        for i, h in enumerate(gpustate.all_handles(pynvml)):
            if h is not None and gpustate.match_nvml([out], [gpustate.nvml_identity(pynvml, h)]) == [0]:
                out["nvml_index"] = i  # before the serial, which some boards do not report
                serial = pynvml.nvmlDeviceGetSerial(h)
                out["serial"] = serial.decode() if isinstance(serial, bytes) else serial
                break
    except Exception:  # noqa: BLE001 - no NVML, or no serial on this board: the rest identifies it
        pass
    return out


def in_turns(rank: int, world: int, barrier: Callable[[], None], work: Callable[[], Any]) -> Any:
    """``work()`` on this rank while every other rank waits at ``barrier``: the ranks take turns, in rank order."""
    out = None
    for turn in range(world):
        barrier()
        if turn == rank:
            out = work()
    barrier()
    return out


def measure_rank(
    device: Any,
    barrier: Callable[[], None],
    slow: int = 1,
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
    turn: tuple[int, int] = (0, 1),
) -> dict[str, Any]:
    """Every figure of this rank: the products started together with the other ranks (``barrier``), the copies
    one rank at a time (``turn``: this rank and the world, ``in_turns``).

    GPUs behind one PCIe switch, or one socket's memory, share their bandwidth: copied at once, each would read
    a share of it and a healthy GPU could be flagged for its neighbour's traffic. A copy's figure is what its GPU
    does alone. ``slow`` > 1 does every call's work that many times (the figures count it once): a rank made
    slow by construction, to see the flagging work. Returns ``{"figures": {...}, "clocks": {...}}``.
    """
    from devbench.engine.bursts import burst, sustained
    from devbench.engine.measure import measure, one_call_s, plan_blocks, warm_up
    from devbench.records.gpustate import Sampler
    from devbench.records.spec import gbps
    from devbench.workloads.matmul import Matmul, tf32
    from devbench.workloads.transfer import Copy, host_device_copy, pinned_reason

    sizes, timing = _sizes(device.type, quick), _timing(quick)
    say = progress or (lambda _msg: None)
    figures: dict[str, float] = {}
    clocks: dict[str, Any] = {}
    mm = Matmul(sizes["n"], sizes["dtype"], device)
    with tf32(mm.allow_tf32):
        mm.check()
        fn = _repeated(mm, slow) if slow > 1 else mm
        warm_up(fn, device, repeats=2)
        one = one_call_s(fn, device)
        sampler = Sampler if device.type == "cuda" else None
        barrier()
        say("matmul burst")
        m, _ = burst(fn, device, one, idle_s=timing["idle_s"], burst_s=timing["burst_s"], sampler=sampler)
        figures["matmul_burst"] = mm.flops / m.median / 1e12
        barrier()
        say("matmul sustained")
        m, seen = sustained(fn, device, one, first_s=timing["first_s"], sustained_s=timing["sustained_s"],
                            sampler=sampler)  # fmt: skip
        figures["matmul_sustained"] = mm.flops / m.median / 1e12
        clocks = _clocks(device, seen)
    del mm
    copies: list[tuple[str, Any]] = []
    if device.type == "cuda" and not pinned_reason():
        copies += [(f"{d}_pinned", host_device_copy(d, sizes["copy"], device, "pinned", non_blocking=True))
                   for d in ("h2d", "d2h")]  # fmt: skip
    # a quick run (a smoke test) alternates two sets: rotating over 4x the last-level cache would fill and check
    # gigabytes per rank on a host that reports hundreds of MiB of L3
    copies.append(("device_copy", Copy(sizes["device_copy"], device, device, sets=2 if quick else 0)))
    for name, copy in copies:
        copy.check()
        fn = _repeated(copy, slow) if slow > 1 else copy
        warm_up(fn, device)
        say(name)

        def timed(fn: Callable[[], object] = fn, copy: Any = copy) -> float:
            plan = plan_blocks(fn, copy.timing_device, target_s=0.05, may_hold=not copy.host_waits)
            return gbps(copy.nbytes, measure(fn, copy.timing_device, plan, blocks=5).median)

        figures[name] = in_turns(*turn, barrier, timed)
        del copy
    return {"figures": figures, "clocks": clocks}


# --- Judging the ranks against each other (no torch) ----------------------------------------------------


#: the figures a rank's host decides as much as its GPU (its PCIe link, its CPU's memory): peers share the host too
HOST_FIGURES = ("h2d_pinned", "d2h_pinned")


def _peers(rank: dict[str, Any], name: str) -> tuple:
    """Which ranks a rank's figure is held against: the same GPU model, and for a host copy the same host."""
    ident = rank.get("identity", {})
    return (ident.get("name"), ident.get("host") if name in HOST_FIGURES else None)


def judge(ranks: Sequence[dict[str, Any]], threshold: float = DEFAULT_THRESHOLD) -> list[dict[str, Any]]:
    """Per rank and figure: its value, the median over its peers, the deviation and whether it is flagged.

    A rank's peers are the ranks of its GPU model (and, for a host copy, of its host): a healthy A100 beside H100s
    is not slow. A rank is flagged on a figure when it lies more than ``threshold`` below its peers' median
    (every figure here is higher-is-better); one without peers is held to itself and never flagged. One row per
    rank and figure it has.
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be between 0 and 1, got {threshold}")
    rows = []
    for name, unit in FIGURES.items():
        groups: dict[tuple, list[float]] = {}
        for r in ranks:
            if name in r.get("figures", {}):
                groups.setdefault(_peers(r, name), []).append(r["figures"][name])
        for r in ranks:
            if name not in r.get("figures", {}):
                continue
            med = statistics.median(groups[_peers(r, name)])
            v = r["figures"][name]
            dev = v / med - 1 if med > 0 else 0.0
            rows.append({"rank": r["identity"]["rank"], "figure": name, "unit": unit, "value": v, "median": med,
                         "deviation": dev, "flagged": dev < -threshold})  # fmt: skip
    return rows


def flagged_ranks(rows: Sequence[dict[str, Any]]) -> list[int]:
    return sorted({r["rank"] for r in rows if r["flagged"]})


def format_table(ranks: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], threshold: float) -> str:
    """One line per rank: who it is, each figure with its deviation from the median, and its flag."""
    names = [n for n in FIGURES if any(r["figure"] == n for r in rows)]
    by = {(r["rank"], r["figure"]): r for r in rows}
    head = f"{'rank':>4} {'host':<16} {'device':<8} {'id':<20} " + " ".join(f"{n:>22}" for n in names) + "  flag"
    lines = [head, "-" * len(head)]
    for r in sorted(ranks, key=lambda r: r["identity"]["rank"]):
        ident = r["identity"]
        rid = ident.get("pci_bus_id") or ident.get("uuid") or ident.get("name") or ""
        cells = []
        flag = False
        for n in names:
            row = by.get((ident["rank"], n))
            if row is None:
                cells.append(f"{'-':>22}")
                continue
            flag |= row["flagged"]
            cells.append(f"{row['value']:>12.4g} ({100 * row['deviation']:+5.1f}%)")
        host = str(ident.get("host", ""))[:16]
        lines.append(f"{ident['rank']:>4} {host:<16} {ident['device']:<8} {str(rid)[:20]:<20} " + " ".join(cells)
                     + ("  SLOW" if flag else ""))  # fmt: skip
    units = ", ".join(f"{n} {FIGURES[n]}" for n in names)
    lines.append(f"(deviation from the median of its peers, the ranks of its GPU model (host copies: and host); "
                 f"SLOW: more than {threshold:.0%} below it; {units})")  # fmt: skip
    return "\n".join(lines)


def document(ranks: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], *, machine: str, backend: str,
             threshold: float, quick: bool) -> dict[str, Any]:  # fmt: skip
    """The JSON rank 0 writes."""
    import torch

    kinds = {str(r["identity"]["device"]).split(":")[0] for r in ranks}
    return {
        "format": FORMAT,
        "machine": machine,
        "backend": backend,
        "world": len(ranks),
        "hosts": sorted({r["identity"]["host"] for r in ranks}),
        "measured": "GPUs" if kinds == {"cuda"} else "CPUs",
        "torch": torch.__version__,
        "quick": quick,
        "threshold": threshold,
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "units": dict(FIGURES),
        "ranks": list(ranks),
        "rows": list(rows),
    }


def write(doc: dict[str, Any], out_dir: str | os.PathLike[str]) -> Path:
    from devbench.records.files import write_atomic

    stamp = doc["finished"].replace(":", "").replace("-", "").replace("+0000", "Z")
    path = Path(out_dir) / f"{doc['machine']}-fleet-w{doc['world']}-{stamp}.json"
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return path


# --- Running it ------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devbench.worlds.fleet",
        description=(
            "Run a short, checked set (burst and sustained matmul, pinned host<->device copies, a device copy) on "
            "every GPU at once, compare each GPU with the median of its peers (its model's GPUs), and flag those "
            "more than --threshold below it. Under torchrun: one rank per GPU, one node or many; alone: --nproc "
            "local ranks."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="flag a rank this fraction below the median (default: %(default)s)")  # fmt: skip
    p.add_argument("--nproc", type=int, default=2, help="ranks to start when not under torchrun (default: 2)")
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes, shorter runs and a device copy over two buffer sets (a smoke test)")
    p.add_argument("--out", default=DEFAULT_OUT, help="directory for the JSON (default: %(default)s)")
    p.add_argument("--machine", help="name in the file (default: asv's machine name, else hostname)")
    p.add_argument("--no-write", action="store_true", help="print the table only")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds before a stuck world of local ranks is stopped; under torchrun, which stops its "
                        "own, the most one collective waits (at most 120) (default: %(default)s)")  # fmt: skip
    p.add_argument("--fail-on-slow", action="store_true", help="exit 1 when a rank is flagged (for scripts)")
    p.add_argument(
        "--slow-rank",
        type=int,
        default=None,
        metavar="R",
        help="testing: rank R does every call's work several times (--slow-factor), to see it flagged",
    )
    p.add_argument("--slow-factor", type=int, default=2, metavar="K",
                   help="how many times --slow-rank does each call's work (default: %(default)s); a short burst "
                        "on a noisy host can move 2x, so a check that must not flake uses more")  # fmt: skip
    return p


def rank_main(
    rank: int, world: int, backend: str, slow_rank: int | None, quick: bool, slow_factor: int = 2,
    local_rank: int | None = None,
) -> dict[str, Any]:
    """One rank's run inside an initialized process group: identity and figures. ``local_rank``: torchrun's, on
    its node; a world this process spawned (``spawn_world``) is one node, its ranks bound to their own devices
    (never a ``LOCAL_RANK`` inherited from the caller's environment: every rank would take one GPU)."""
    import torch.distributed as dist

    from devbench.engine.devices import rank_device

    local_rank = rank if local_rank is None else local_rank
    device = rank_device(backend, local_rank)
    if backend == "gloo":
        import torch

        torch.set_num_threads(1)  # the ranks share the cores

    def say(what: str) -> None:
        if rank == 0:
            print(f"# {what} on {world} rank(s) at once", flush=True)

    slow = slow_factor if slow_rank == rank else 1
    out = measure_rank(device, dist.barrier, slow=slow, quick=quick, progress=say,
                       turn=(dist.get_rank(), dist.get_world_size()))  # fmt: skip
    out["identity"] = identity(device, rank, local_rank)
    return out


def _finish(args: argparse.Namespace, ranks: list[dict[str, Any]], backend: str) -> int:
    from devbench.records.files import default_machine

    rows = judge(ranks, args.threshold)
    kinds = {str(r["identity"]["device"]).split(":")[0] for r in ranks}
    print(f"# measured {'GPUs' if kinds == {'cuda'} else 'CPUs (no GPU: gloo processes)'}", flush=True)
    print(format_table(ranks, rows, args.threshold), flush=True)
    if not args.no_write:
        doc = document(ranks, rows, machine=args.machine or default_machine(), backend=backend,
                       threshold=args.threshold, quick=args.quick)  # fmt: skip
        print(f"# wrote {write(doc, args.out)}", flush=True)
    slow = flagged_ranks(rows)
    if slow:
        print(f"# {len(slow)} rank(s) more than {args.threshold:.0%} below their peers: {slow}", flush=True)
    return 1 if slow and args.fail_on_slow else 0


def _torchrun_main(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from devbench.worlds.world import join_torchrun, torchrun_rank

    backend, rank, world, _ = join_torchrun("auto", args.timeout)

    def body() -> int:
        if rank == 0:
            print(f"# devbench fleet: {backend}, {world} ranks", flush=True)
        try:
            mine = rank_main(rank, world, backend, args.slow_rank, args.quick, args.slow_factor,
                             local_rank=int(os.environ["LOCAL_RANK"]))  # fmt: skip
        except Exception as exc:
            print(f"devbench fleet: rank {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            raise
        ranks: list[Any] = [None] * world
        dist.all_gather_object(ranks, mine)
        return _finish(args, ranks, backend) if rank == 0 else 0

    return torchrun_rank(body)


def _local_main(args: argparse.Namespace) -> int:
    from devbench.worlds.world import RankFailed, RanksStuck, WorldTimeout, resolve_backend, spawn_world

    backend = resolve_backend("auto", args.nproc)
    print(f"# devbench fleet: {backend}, {args.nproc} local ranks (spawned; no torchrun)", flush=True)
    try:
        ranks = spawn_world(rank_main, args.nproc, args=(backend, args.slow_rank, args.quick, args.slow_factor),
                            backend=backend,
                            timeout_s=args.timeout)  # fmt: skip
    except (RankFailed, WorldTimeout, RanksStuck) as exc:  # a stuck rank: named, its GPU held, no traceback
        print(f"devbench fleet: {exc}", file=sys.stderr)
        return 1
    return _finish(args, ranks, backend)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 < args.threshold < 1:
        parser.error(f"--threshold must be between 0 and 1, got {args.threshold}")
    from devbench.worlds.world import under_torchrun

    torchrun = under_torchrun()
    if not torchrun and args.nproc < 2:
        parser.error(f"--nproc must be >= 2 (a fleet of one has no peers), got {args.nproc}")
    world = int(os.environ["WORLD_SIZE"]) if torchrun else args.nproc
    if args.slow_rank is not None and not 0 <= args.slow_rank < world:
        parser.error(f"--slow-rank {args.slow_rank}: there are ranks 0 to {world - 1}")
    if args.slow_factor < 2:
        parser.error(f"--slow-factor must be >= 2 (the slow rank repeats each call's work), got {args.slow_factor}")
    return _torchrun_main(args) if torchrun else _local_main(args)


if __name__ == "__main__":
    sys.exit(main())
