"""``devbench validate``: the suite's latest figures against independent measurements.

For a representative subset (matmul float32 at 256/1,024/4,096 on each device here,
host memory copies at 1 MiB and 64 MiB; on a GPU also pinned host->device and
device->host at 256 MiB and bf16 matmul at 8,192) this measures the same workload in
this process with ``torch.utils.benchmark.Timer.blocked_autorange`` (and, on a GPU, a
plain loop between two CUDA events), reads the suite's latest asv result for this
machine, and prints suite figure, reference figure and their ratio. A ratio off by more
than the tolerance fails the run: the suite's timing method would be wrong (or the
machine changed under it).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

EXIT_OK, EXIT_MISMATCH, EXIT_NO_RESULTS = 0, 1, 2


@dataclass(frozen=True)
class Check:
    """One figure to validate: where the suite keeps it and how to rebuild its workload."""

    label: str
    benchmark: str
    params: str  # the report's params label, e.g. "device=cpu, dtype=float32, n=256"
    unit: str
    needs_gpu: bool = False
    #: "workload": the suite's own workload object; "plain_mm": a bare ``torch.mm(a, b)``
    #: on one pair of fresh random inputs, the way a user would time it by hand
    reference: str = "workload"


def checks(gpu: bool) -> list[Check]:
    """The subset for a machine with or without a GPU."""
    devices = ["cpu", "cuda"] if gpu else ["cpu"]
    out = [
        Check(f"matmul float32 n={n} {d}", "bench_matmul.MatmulSquare.track_tflops",
              f"device={d}, dtype=float32, n={n}", "TFLOP/s", d == "cuda")
        for d in devices
        for n in (256, 1024, 4096)
    ]  # fmt: skip
    out += [
        Check(
            f"host copy {label}", "bench_transfer.DeviceCopy.track_gbps_copied", f"device=cpu, nbytes={nbytes}", "GB/s"
        )
        for label, nbytes in (("1 MiB", 1 << 20), ("64 MiB", 64 << 20))
    ]
    if gpu:
        out += [
            Check(f"pinned {d} 256 MiB", "bench_transfer.HostDevice.track_gbps",
                  f"direction={d}, memory=pinned, mode=non_blocking, nbytes={256 << 20}", "GB/s", True)
            for d in ("h2d", "d2h")
        ]  # fmt: skip
        out += [
            Check(label, "bench_matmul.MatmulSquare.track_tflops", "device=cuda, dtype=bfloat16, n=8192", "TFLOP/s",
                  True, reference)
            for label, reference in (("matmul bfloat16 n=8192 cuda", "workload"),
                                     ("  vs plain torch.mm loop", "plain_mm"))
        ]  # fmt: skip
    return out


def suite_figures(frame, machine: str, wanted: Sequence[Check]) -> dict[str, tuple[float, str]]:
    """The latest measured value (and its commit) of each check on ``machine``."""
    sub = frame[(frame["machine"] == machine) & (frame["status"] == "ok") & frame["version_current"]]
    out: dict[str, tuple[float, str]] = {}
    for c in wanted:
        rows = sub[(sub["benchmark"] == c.benchmark) & (sub["params"] == c.params)]
        if len(rows):
            last = rows.sort_values(["date", "started_at"]).iloc[-1]
            out[c.label] = (float(last["value"]), str(last["commit"])[:8])
    return out


@dataclass(frozen=True)
class Row:
    label: str
    unit: str
    suite: float
    reference: float
    events: float
    commit: str

    @property
    def ratio(self) -> float:
        return self.suite / self.reference if self.reference else math.nan


def judge(rows: Sequence[Row], tolerance: float) -> list[str]:
    """Labels of the rows whose suite/reference ratio is off by more than ``tolerance``."""
    return [r.label for r in rows if not math.isfinite(r.ratio) or abs(r.ratio - 1.0) > tolerance]


def format_table(rows: Sequence[Row], tolerance: float) -> str:
    head = f"{'figure':<30} {'unit':<8} {'suite':>10} {'Timer':>10} {'events':>10} {'ratio':>7}  commit    verdict"
    lines = [head, "-" * len(head)]
    bad = set(judge(rows, tolerance))
    for r in rows:
        events = f"{r.events:10.4g}" if math.isfinite(r.events) else f"{'-':>10}"
        verdict = "OFF" if r.label in bad else "ok"
        figures = f"{r.suite:10.4g} {r.reference:10.4g} {events} {r.ratio:7.3f}"
        lines.append(f"{r.label:<30} {r.unit:<8} {figures}  {r.commit}  {verdict}")
    return "\n".join(lines)


# --- Reference measurements (torch is imported here only) -------------------------------------------------


def _workload(c: Check):
    import torch

    from devbench.workloads.matmul import Matmul, flops
    from devbench.workloads.transfer import Copy, host_device_copy

    fields = dict(p.split("=", 1) for p in c.params.split(", "))
    if c.reference == "plain_mm":
        n, dtype = int(fields["n"]), getattr(torch, fields["dtype"])
        dev = torch.device("cuda")
        a, b = (torch.randn(n, n, device=dev).to(dtype) for _ in range(2))
        return (lambda: torch.mm(a, b)), dev, flops(n) / 1e12
    if c.benchmark.endswith("track_tflops"):
        dev = torch.device("cuda" if fields["device"] == "cuda" else "cpu")
        mm = Matmul(int(fields["n"]), fields["dtype"], dev)
        mm.check()
        return mm, dev, flops(int(fields["n"])) / 1e12
    nbytes = int(fields["nbytes"])
    if "direction" in fields:
        copy = host_device_copy(fields["direction"], nbytes, torch.device("cuda"), "pinned", non_blocking=True)
    else:
        copy = Copy(nbytes, torch.device("cpu"), torch.device("cpu"))
    copy.check()
    return copy, copy.timing_device, nbytes / 1e9


def _timer_seconds(fn: Callable[[], object], min_run_time: float) -> float:
    """Median seconds per call; Timer synchronizes CUDA around each block of calls itself."""
    import torch
    import torch.utils.benchmark as tb

    m = tb.Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return m.blocked_autorange(min_run_time=min_run_time).median


def _event_seconds(fn: Callable[[], object], device, calls: int = 50, samples: int = 5) -> float:
    import torch

    times = []
    with torch.cuda.device(device):
        for _ in range(samples):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / calls)
    return sorted(times)[len(times) // 2]


def measure(c: Check, min_run_time: float = 1.0) -> tuple[float, float]:
    """(Timer figure, CUDA-event figure or NaN) in the check's unit."""
    from devbench.workloads.matmul import tf32

    fn, device, work = _workload(c)
    with tf32(getattr(fn, "allow_tf32", False)):
        for _ in range(3):
            fn()
        timer = work / _timer_seconds(fn, min_run_time)
        events = work / _event_seconds(fn, device) if device.type == "cuda" else math.nan
    return timer, events


# --- Command line ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="devbench validate",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        epilog="examples:\n  make bench && devbench validate\n  devbench validate --tolerance 0.05 --machine h100\n\n"
        "exit status: 0 all within tolerance; 1 a figure is off; 2 no results for this machine.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=".asv/results", help="asv results directory (default: %(default)s)")
    p.add_argument("--machine", help="asv machine name of this host (default: from ~/.asv-machine.json)")
    p.add_argument("--tolerance", type=float, default=0.10, help="allowed |ratio - 1| (default: %(default)s)")
    p.add_argument("--min-run-time", type=float, default=1.0, help="seconds per Timer measurement (default: 1)")


def run(args: argparse.Namespace) -> int:
    from devbench.report.load import ReportError, load_results

    if args.tolerance <= 0:
        print(f"devbench validate: error: --tolerance must be > 0, got {args.tolerance}", file=sys.stderr)
        return EXIT_NO_RESULTS
    from devbench.machine import default_machine

    machine = args.machine or default_machine()
    try:
        loaded = load_results(args.results, machines=[machine], benchmarks=r"^bench_(matmul|transfer)\.")
    except ReportError as exc:
        print(f"devbench validate: no results to validate: {exc}\nRun `make bench` on this machine first.",
              file=sys.stderr)  # fmt: skip
        return EXIT_NO_RESULTS

    from devbench.devices import num_gpus
    from devbench.suite import pin_threads

    threads = pin_threads()
    wanted = checks(gpu=num_gpus() > 0)
    figures = suite_figures(loaded.frame, machine, wanted)
    missing = [c.label for c in wanted if c.label not in figures]
    if not figures:
        print(f"devbench validate: machine {machine!r} has no results for the validated benchmarks in "
              f"{args.results}.\nRun `make bench` (or at least bench_matmul and bench_transfer) first.",
              file=sys.stderr)  # fmt: skip
        return EXIT_NO_RESULTS
    print(
        f"Comparing the suite's latest results on machine {machine!r} with torch.utils.benchmark.Timer "
        f"(blocked_autorange, {threads} threads{', and CUDA events' if num_gpus() else ''}) measured now, "
        "on the same workloads.\n"
    )
    rows = []
    for c in wanted:
        if c.label not in figures:
            continue
        print(f"  measuring {c.label} ...", file=sys.stderr, flush=True)
        timer, events = measure(c, args.min_run_time)
        value, commit = figures[c.label]
        rows.append(Row(c.label, c.unit, value, timer, events, commit))
    print(format_table(rows, args.tolerance))
    for label in missing:
        print(f"no suite result for {label}: not measured")
    bad = judge(rows, args.tolerance)
    if bad:
        print(f"\n{len(bad)} figure(s) off by more than {args.tolerance:.0%}: {', '.join(bad)}")
        return EXIT_MISMATCH
    print(f"\nall {len(rows)} figures within {args.tolerance:.0%} of the reference")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
