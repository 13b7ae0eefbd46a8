"""``python -m devbench.worlds.collectives``: collective bandwidth across processes and machines.

Under ``torchrun`` (one or many nodes) every process it starts is one rank; run alone,
it starts ``--nproc`` local ranks itself. Each op and size is checked on every rank and
timed the way nccl-tests does (see ``devbench.workloads.collectives``); rank 0 prints
an nccl-tests-style table as it goes and writes the figures as JSON under ``--out``
(default ``.asv/collectives``), where ``devbench report`` picks them up.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXAMPLES = """\
examples:
  # a laptop or CI box: 2 CPU processes (gloo)
  torchrun --nproc-per-node 2 -m devbench.worlds.collectives
  python -m devbench.worlds.collectives --nproc 2            # the same without torchrun
  # one node, 8 GPUs (NCCL)
  torchrun --nproc-per-node 8 -m devbench.worlds.collectives
  # 2 nodes x 8 GPUs: run on each node, NODE_RANK 0 and 1, MASTER = node 0's address
  torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE_RANK \\
      --rdzv-backend c10d --rdzv-endpoint $MASTER:29500 --rdzv-id devbench -m devbench.worlds.collectives
  # a quick look at small messages only
  torchrun --nproc-per-node 2 -m devbench.worlds.collectives --ops all_reduce --max-size 1MiB
  # all_gather and reduce_scatter out of place and in place, as nccl-tests reports them
  torchrun --nproc-per-node 8 -m devbench.worlds.collectives --ops all_gather,reduce_scatter --in-place

exit status: 0 figures written; 1 a rank failed (its rank is named); 2 bad arguments.
"""

#: where the figures go unless --out says otherwise; `devbench report` looks here
DEFAULT_OUT = ".asv/collectives"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devbench.worlds.collectives",
        description=(
            "Time all_reduce, all_gather, reduce_scatter, broadcast and a send/recv ring over message sizes "
            "(nccl-tests' -b/-e/-f), check every result on every rank, and report time, algorithm bandwidth "
            "and bus bandwidth (nccl-tests' factors). gloo on CPUs, NCCL on GPUs."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--ops", default="all", help="comma-separated ops, or 'all' (default)")
    p.add_argument("--min-size", default="4KiB", help="smallest message, nccl-tests' size (default: %(default)s)")
    p.add_argument("--max-size", default="256MiB", help="largest message (default: %(default)s)")
    p.add_argument("--factor", type=int, default=4, help="size step factor (default: %(default)s)")
    p.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default="auto",
        help="auto: NCCL when every local rank has a GPU, else gloo (default)",
    )
    p.add_argument("--nproc", type=int, default=2, help="ranks to start when not under torchrun (default: 2)")
    p.add_argument("--target-ms", type=float, default=50.0, help="length of one timed block (default: 50)")
    p.add_argument("--samples", type=int, default=3, help="timed blocks per size; the median is kept (default: 3)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds before a stuck world of local ranks is stopped; under torchrun, which stops its "
                        "own, the most one collective waits (at most 120) (default: %(default)s)")  # fmt: skip
    p.add_argument("--out", default=DEFAULT_OUT, help="directory for the JSON figures (default: %(default)s)")
    p.add_argument("--machine", help="machine name in the figures (default: asv's machine name, else hostname)")
    p.add_argument("--no-write", action="store_true", help="print the table only")
    p.add_argument(
        "--in-place",
        action="store_true",
        help="also time all_gather and reduce_scatter in place (nccl-tests' second column; all_reduce and "
        "broadcast are in place in torch.distributed)",
    )
    return p


def _plan(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    from devbench.workloads.collectives import OPS, parse_size, size_range

    ops = list(OPS) if args.ops == "all" else [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise ValueError(f"--ops {args.ops!r}: choose among {', '.join(OPS)} or 'all'")
    sizes = size_range(parse_size(args.min_size), parse_size(args.max_size), args.factor)
    if args.samples < 1 or args.target_ms <= 0 or args.timeout <= 0:
        raise ValueError("--samples, --target-ms and --timeout must be positive")
    return ops, sizes


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def record(rows: list[dict[str, Any]], *, machine: str, backend: str, world: int, hosts: list[str]) -> dict[str, Any]:
    """The JSON document rank 0 writes: who ran what, where, and the rows."""
    import torch

    from devbench.engine.devices import describe, nccl_version

    info = describe()
    return {
        "format": "devbench-collectives/1",
        "machine": machine,
        "hosts": sorted(set(hosts)),
        "nodes": len(set(hosts)),
        "backend": backend,
        "world": world,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl_version() if backend == "nccl" else None,
        "gpus": [g.get("name") for g in info.get("gpus", [])] if backend == "nccl" else [],
        "cpu": info["host"].get("cpu"),
        "commit": _commit(),
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "rows": rows,
    }


def write_record(doc: dict[str, Any], out_dir: str | os.PathLike[str]) -> Path:
    """Write ``doc`` atomically as ``<machine>-<backend>-w<world>-<time>.json`` under ``out_dir``."""
    from devbench.records.files import write_atomic

    stamp = doc["finished"].replace(":", "").replace("-", "").replace("+0000", "Z")
    name = f"{doc['machine']}-{doc['backend']}-w{doc['world']}-{stamp}.json"
    path = Path(out_dir) / name
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return path


def _torchrun_main(args: argparse.Namespace, ops: list[str], sizes: list[int]) -> int:
    import torch.distributed as dist

    from devbench.records.files import default_machine
    from devbench.workloads.collectives import HEADER, print_row, sweep
    from devbench.worlds.world import join_torchrun, torchrun_rank

    backend, rank, world, device = join_torchrun(args.backend, args.timeout)

    def body() -> int:
        hosts: list[Any] = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
        if rank == 0:
            print(f"# devbench collectives: {backend}, {world} ranks on {len(set(hosts))} node(s)", flush=True)
            print(HEADER, flush=True)
        try:
            rows = sweep(device, ops, sizes, target_s=args.target_ms / 1e3, samples=args.samples,
                         progress=print_row, in_place=args.in_place)  # fmt: skip
        except Exception as exc:
            print(f"devbench collectives: rank {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            raise
        if rank == 0 and not args.no_write:
            for row in rows:
                row["backend"] = backend
            doc = record(rows, machine=args.machine or default_machine(), backend=backend, world=world, hosts=hosts)
            print(f"# wrote {write_record(doc, args.out)}", flush=True)
        return 0

    return torchrun_rank(body)


def _local_main(args: argparse.Namespace, ops: list[str], sizes: list[int]) -> int:
    from devbench.records.files import default_machine
    from devbench.workloads.collectives import HEADER, sweep_rank
    from devbench.worlds.world import (
        RankFailed,
        RanksStuck,
        WorldTimeout,
        backend_reason,
        resolve_backend,
        spawn_world,  # fmt: skip
    )

    backend = resolve_backend(args.backend, args.nproc)
    reason = backend_reason(backend, args.nproc)
    if reason and not (backend == "gloo" and args.nproc >= 2):
        print(f"devbench collectives: {reason}", file=sys.stderr)
        return 2
    print(f"# devbench collectives: {backend}, {args.nproc} local ranks (spawned; no torchrun)", flush=True)
    if reason:
        print(f"# note: {reason}; figures are of an oversubscribed host", flush=True)
    print(HEADER, flush=True)
    try:
        rows = spawn_world(
            sweep_rank,
            args.nproc,
            args=(backend, ops, sizes, args.target_ms / 1e3, args.samples, True, args.in_place),
            backend=backend,
            timeout_s=args.timeout,
        )[0]
    except (RankFailed, WorldTimeout, RanksStuck) as exc:  # a stuck rank: named, its GPU held, no traceback
        print(f"devbench collectives: {exc}", file=sys.stderr)
        return 1
    if not args.no_write:
        host = socket.gethostname() or platform.node()
        doc = record(rows, machine=args.machine or default_machine(), backend=backend, world=args.nproc,
                     hosts=[host] * args.nproc)  # fmt: skip
        print(f"# wrote {write_record(doc, args.out)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        ops, sizes = _plan(args)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    from devbench.worlds.world import under_torchrun

    if under_torchrun():
        return _torchrun_main(args, ops, sizes)
    if args.nproc < 2:
        print(f"{parser.prog}: error: --nproc must be >= 2, got {args.nproc}", file=sys.stderr)
        return 2
    return _local_main(args, ops, sizes)


if __name__ == "__main__":
    sys.exit(main())
