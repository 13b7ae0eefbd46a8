"""``devbench validate``: the suite's latest figures against independent measurements.

For a representative subset (matmul float32 at 256/1,024/4,096 on each device here,
host memory copies at 1 MiB and 64 MiB; on a GPU also pinned host->device and
device->host at 256 MiB, the 1 GiB device copy and bf16 matmul at 8,192:
``spec.VALIDATED_GPU``) this reads the suite's latest asv result for this machine and
measures the same workload in this process, in alternating rounds: with
``torch.utils.benchmark.Timer.blocked_autorange`` (the reference), with the suite's own
method (``devbench.engine.measure``'s ``calls_for`` and ``measure``, median over blocks: what the
``track_`` benchmarks run), and on a GPU with a plain loop between two
CUDA events. Verdicts:

  ok     the recorded figure is within the tolerance of the reference;
  OFF    the suite's method, run now beside the reference, disagrees with it: the
         method is wrong for this workload;
  DRIFT  the method agrees with the reference now, but the recorded figure does not:
         the machine ran at another speed when asv measured (a shared or throttled
         host), or the asv run differed from this process.
  HELD   (GPU) the suite times this figure with the stream held by a spin kernel:
         the device's own time, which Timer's back-to-back loop cannot see when the
         host's dispatch is the slower side. Held may be faster than Timer, never
         slower by more than the tolerance (that is OFF); the recorded figure is
         compared with the method run now (DRIFT as above).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from devbench.records import spec

EXIT_OK, EXIT_MISMATCH, EXIT_NO_RESULTS, EXIT_DRIFT, EXIT_FAILED = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Check:
    """One figure to validate: which suite figure, at which params, and how to rebuild its workload."""

    label: str
    figure: spec.Figure
    values: Mapping[str, Any] = field(hash=False)
    needs_gpu: bool = False
    #: "workload": the suite's own workload object; "plain_mm": a bare ``torch.mm(a, b)``
    #: on one pair of fresh random inputs, timed in a loop as a user would by hand (back to back for
    #: seconds, so a sustained figure, as the suite's is; bench_achievable has the burst one)
    reference: str = "workload"

    @property
    def benchmark(self) -> str:
        return self.figure.benchmark

    @property
    def params(self) -> str:
        """The report's params label, e.g. ``"device=cpu, dtype=float32, n=256"``."""
        return self.figure.label(**self.values)

    @property
    def unit(self) -> str:
        return self.figure.unit

    @property
    def selector(self) -> str:
        """asv's name of the point (``--bench`` matches it)."""
        return spec.Point(self.figure, dict(self.values)).selector


def checks(gpu: bool) -> list[Check]:
    """The subset for a machine with or without a GPU; the GPU figures are ``spec.VALIDATED_GPU``, which
    ``devbench gpu-run`` never drops."""
    out = [Check(p.label, p.figure, dict(p.values)) for p in spec.VALIDATED_CPU]
    if gpu:
        out += [Check(p.label, p.figure, dict(p.values), True) for p in spec.VALIDATED_GPU]
        bf16 = spec.VALIDATED_PLAIN_OF
        out.append(Check(f"  {spec.VALIDATED_PLAIN_MM}", bf16.figure, dict(bf16.values), True, "plain_mm"))
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
    suite: float  # the recorded asv figure
    reference: float  # Timer, now
    events: float  # CUDA events, now (NaN on the CPU)
    commit: str
    method: float = math.nan  # the suite's method, now, beside the reference
    held: bool = False  # the method timed the device's work with the stream held
    #: the plain torch.mm row: the suite's own workload by Timer, now (the figure it checks: the workload must not
    #: lose to a bare product of the same shape, a gap no recorded figure or host speed explains)
    workload: float = math.nan
    #: the most the device can do in the figure's unit (its datasheet peak): a held figure above it timed nothing
    ceiling: float = math.nan

    @property
    def ratio(self) -> float:
        return self.suite / self.reference if self.reference else math.nan

    @property
    def method_ratio(self) -> float:
        return self.method / self.reference if self.reference else math.nan


def _off(ratio: float, tolerance: float) -> bool:
    return not math.isfinite(ratio) or abs(ratio - 1.0) > tolerance


def verdict(row: Row, tolerance: float) -> str:
    """``ok``, ``OFF`` (the method disagrees with the reference), ``DRIFT`` (only the recorded figure
    does) or ``HELD`` (device time, at least as fast as the reference's dispatch-bound loop)."""
    if math.isfinite(row.workload) and _off(row.workload / row.reference if row.reference else math.nan, tolerance):
        return "OFF"  # the suite's workload, measured now, is not a plain product's speed
    if row.held and math.isfinite(row.method):
        if not math.isfinite(row.method_ratio) or row.method_ratio < 1.0 - tolerance:
            return "OFF"  # device time slower than a loop that includes the dispatch: impossible
        if math.isfinite(row.ceiling) and row.method > row.ceiling * (1.0 + tolerance):
            return "OFF"  # faster than the device's peak: the held blocks timed nothing
        return "HELD" if not _off(row.method / row.suite if row.suite else math.nan, tolerance) else "DRIFT"
    if math.isfinite(row.method) and _off(row.method_ratio, tolerance):
        return "OFF"
    if not _off(row.ratio, tolerance):
        return "ok"
    return "DRIFT" if math.isfinite(row.method) and math.isfinite(row.ratio) else "OFF"


def judge(rows: Sequence[Row], tolerance: float) -> list[str]:
    """Labels of the rows that are not ok (OFF or DRIFT)."""
    return [r.label for r in rows if verdict(r, tolerance) not in ("ok", "HELD")]


def exit_status(rows: Sequence[Row], tolerance: float) -> int:
    verdicts = {verdict(r, tolerance) for r in rows}
    return EXIT_MISMATCH if "OFF" in verdicts else EXIT_DRIFT if "DRIFT" in verdicts else EXIT_OK


def _fmt(x: float) -> str:
    return f"{x:10.4g}" if math.isfinite(x) else f"{'-':>10}"


def format_table(rows: Sequence[Row], tolerance: float) -> str:
    head = (
        f"{'figure':<30} {'unit':<8} {'suite':>10} {'Timer':>10} {'ratio':>7} {'method':>10} {'ratio':>7} "
        f"{'events':>10}  commit    verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        method_ratio = f"{r.method_ratio:7.3f}" if math.isfinite(r.method) else f"{'-':>7}"
        figures = f"{_fmt(r.suite)} {_fmt(r.reference)} {r.ratio:7.3f} {_fmt(r.method)} {method_ratio} {_fmt(r.events)}"
        lines.append(f"{r.label:<30} {r.unit:<8} {figures}  {r.commit}  {verdict(r, tolerance)}")
    return "\n".join(lines)


# --- Reference measurements (torch is imported here only) -------------------------------------------------


def _workload(c: Check):
    """The callable to time, the device it runs on, and its work per call in the figure's unit x seconds."""
    import torch

    from devbench.workloads.matmul import Matmul
    from devbench.workloads.transfer import Copy, host_device_copy

    v = c.values
    if c.figure is spec.MATMUL_TFLOPS:
        work = spec.matmul_flops(v["n"]) / 1e12
        dev = torch.device(v["device"])
        if c.reference == "plain_mm":
            a, b = (torch.randn(v["n"], v["n"], device=dev).to(getattr(torch, v["dtype"])) for _ in range(2))
            return (lambda: torch.mm(a, b)), dev, work
        mm = Matmul(v["n"], v["dtype"], dev)
        mm.check()
        return mm, dev, work
    nbytes = v["nbytes"]
    if c.figure is spec.HOST_DEVICE_GBPS:
        copy = host_device_copy(v["direction"], nbytes, torch.device("cuda"), v["memory"], v["mode"] == "non_blocking")
    else:
        copy = Copy(nbytes, torch.device(v["device"]), torch.device(v["device"]))
    copy.check()
    return copy, copy.timing_device, nbytes / 1e9


def _ceiling(c: Check) -> float:
    """The device's datasheet peak in a GPU product's unit (NaN elsewhere or unknown): no held block is faster."""
    if c.figure is not spec.MATMUL_TFLOPS or c.values.get("device") != "cuda":
        return math.nan
    import torch

    from devbench.records.models import gpu_peak

    try:
        peak = gpu_peak(torch.cuda.get_device_name(0), str(c.values.get("dtype")))
    except (RuntimeError, AssertionError):  # no CUDA here: no peak to hold it to
        return math.nan
    return float(peak) if peak else math.nan


def _timer(fn: Callable[[], object], min_run_time: float):
    """One ``blocked_autorange`` Measurement; Timer synchronizes CUDA around each block of calls itself."""
    import torch
    import torch.utils.benchmark as tb

    m = tb.Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return m.blocked_autorange(min_run_time=min_run_time)


@dataclass(frozen=True)
class Measured:
    """Figures measured now, in the check's unit (see ``measure``), and the rounds that gave them."""

    timer: float
    method: float
    events: float
    held: bool = False
    rounds: int = 0


#: the fewest alternating rounds after which a figure may stop: two rounds that agree can be one quiet stretch
MIN_ROUNDS = 3
#: the rounds have settled when each figure's per-round values lie within this share of the tolerance (their range
#: over their median): more rounds in the same conditions then move no ratio by more than a fraction of what the
#: verdict resolves
SETTLED_SHARE = 0.25


def settled(per_round: Sequence[Sequence[float]], tolerance: float) -> bool:
    """Whether the rounds so far settle every figure: at least ``MIN_ROUNDS``, and in each column (Timer's, the
    method's and, on a GPU, the events' figure of each round; NaN columns left out) a range within
    ``SETTLED_SHARE`` of the tolerance, relative to its median. Derived from the verdict's own scale, not from a
    host's noise: a noisy host keeps alternating to the last round, a steady GPU stops at the third."""
    if len(per_round) < MIN_ROUNDS:
        return False
    for column in zip(*per_round, strict=True):
        values = [v for v in column if math.isfinite(v)]
        if not values:
            continue
        mid = statistics.median(values)
        if mid <= 0 or (max(values) - min(values)) / mid > SETTLED_SHARE * tolerance:
            return False
    return True


def measure(c: Check, min_run_time: float = 0.2, rounds: int = 7, tolerance: float | None = None) -> Measured:
    """Timer, the suite's method and (on a GPU) a plain CUDA-event loop, alternating for at most ``rounds`` rounds.

    Each round runs one ``blocked_autorange`` of ``min_run_time`` seconds, then
    ``ceil(11 / rounds)`` of the suite's blocks (``devbench.engine.measure``: ``calls_for`` sizes a
    block to ``MATMUL_BLOCK_S`` of products or ``COPY_BLOCK_S`` of copies), then 5 blocks of
    50 calls between CUDA events. Alternating puts reference and method in the same
    stretches of time, so a host that changes speed moves both. Each figure is the median
    over all its blocks (Timer's: ``Measurement.times``). With a ``tolerance``, the rounds stop once they
    have ``settled`` every figure (at least ``MIN_ROUNDS``).
    """
    from devbench.engine import measure as engine
    from devbench.workloads.matmul import tf32

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    fn, device, work = _workload(c)
    block_s = engine.MATMUL_BLOCK_S if c.figure is spec.MATMUL_TFLOPS else engine.COPY_BLOCK_S
    per_round = -(-engine.SAMPLES // rounds)
    timer: list[float] = []
    method = events = None
    seen: list[tuple[float, float, float]] = []  # each round's Timer, method and events figure (rates)
    with tf32(getattr(fn, "allow_tf32", False)):
        engine.warm_up(fn, device)
        plan = engine.plan_blocks(fn, device, target_s=block_s, may_hold=not getattr(fn, "host_waits", False))
        for _ in range(rounds):
            times = _timer(fn, min_run_time).times  # per-call seconds of every Timer block
            timer += times
            m = engine.measure(fn, device, plan, blocks=per_round)
            method = m if method is None else method + m
            e = engine.measure(fn, device, calls=50, blocks=5) if device.type == "cuda" else None
            if e is not None:
                events = e if events is None else events + e
            seen.append((work / statistics.median(times), m.rate(work), e.rate(work) if e is not None else math.nan))
            if tolerance is not None and settled(seen, tolerance):
                break
    events_rate = events.rate(work) if events else math.nan
    return Measured(work / statistics.median(timer), method.rate(work), events_rate, plan.hold, len(seen))


# --- Command line ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="devbench validate",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        epilog="examples:\n  make bench && devbench validate\n  devbench validate --tolerance 0.05 --machine h100\n\n"
        "exit status: 0 all within tolerance; 1 the suite's method disagrees with the reference (OFF);\n"
        "2 no results for this machine (or a bad option); 3 the method agrees but a recorded figure\n"
        "is off (DRIFT: the machine's speed changed since the asv run).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=".asv/results", help="asv results directory (default: %(default)s)")
    p.add_argument("--machine", help="asv machine name of this host (default: from ~/.asv-machine.json)")
    p.add_argument("--tolerance", type=float, default=0.10, help="allowed |ratio - 1| (default: %(default)s)")
    p.add_argument(
        "--min-run-time", type=float, default=0.2, help="seconds of Timer measurement per round (default: 0.2)"
    )
    p.add_argument(
        "--rounds", type=int, default=7,
        help=f"at most this many alternating rounds of reference and method per figure; fewer once {MIN_ROUNDS} "
        f"rounds agree within {SETTLED_SHARE:.0%}% of the tolerance (default: 7)"
    )
    p.add_argument("--gpu-only", action="store_true",
                   help="only the figures measured on a GPU (what `devbench gpu-run --gpu-only` ran)")
    p.add_argument("--bench", metavar="REGEX",
                   help="only the figures whose asv name(params) this regular expression matches, as asv's --bench")


def run(args: argparse.Namespace) -> int:
    from devbench.report.load import ReportError, load_results

    if args.tolerance <= 0:
        print(f"devbench validate: error: --tolerance must be > 0, got {args.tolerance}", file=sys.stderr)
        return EXIT_NO_RESULTS
    if args.rounds < 1 or args.min_run_time <= 0:
        print("devbench validate: error: --rounds must be >= 1 and --min-run-time > 0, got "
              f"{args.rounds} and {args.min_run_time}", file=sys.stderr)  # fmt: skip
        return EXIT_NO_RESULTS
    try:
        only = re.compile(args.bench) if args.bench else None
    except re.error as exc:
        print(f"devbench validate: error: --bench {args.bench!r} is not a regular expression: {exc}",
              file=sys.stderr)  # fmt: skip
        return EXIT_NO_RESULTS
    from devbench.records.files import default_machine, this_hosts_machines

    machine = args.machine or default_machine()
    here = this_hosts_machines()
    foreign = machine not in here
    if foreign:
        print(f"devbench validate: warning: {machine!r} is not this host's asv machine ({', '.join(sorted(here))}): "
              "its results are compared with what this host measures now, so a DRIFT says the hosts differ",
              file=sys.stderr)  # fmt: skip
    try:
        loaded = load_results(args.results, machines=[machine], benchmarks=r"^bench_(matmul|transfer)\.")
    except ReportError as exc:
        print(f"devbench validate: no results to validate: {exc}\nRun `make bench` on this machine first.",
              file=sys.stderr)  # fmt: skip
        return EXIT_NO_RESULTS

    from devbench.engine.devices import num_gpus
    from devbench.engine.measure import default_threads, threads_pinned

    try:
        threads = default_threads()
    except ValueError as exc:  # DEVBENCH_THREADS that is no count
        print(f"devbench validate: error: {exc}", file=sys.stderr)
        return EXIT_NO_RESULTS
    if args.gpu_only and not num_gpus():
        print("devbench validate: error: --gpu-only, but torch sees no CUDA GPU here", file=sys.stderr)
        return EXIT_NO_RESULTS
    wanted = [c for c in checks(gpu=num_gpus() > 0) if (c.needs_gpu or not args.gpu_only)
              and (only is None or only.search(c.selector))]  # fmt: skip
    if not wanted:
        print(f"devbench validate: error: --bench {args.bench!r} selects none of the figures it checks",
              file=sys.stderr)  # fmt: skip
        return EXIT_NO_RESULTS
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
        f"on the same workloads; 'method' is the suite's own timing method run now, alternating with the "
        f"Timer over at most {args.rounds} round(s), fewer once {MIN_ROUNDS} agree within "
        f"{SETTLED_SHARE:.0%} of the tolerance. Ratios are figure / Timer.\n"
    )
    rows: list[Row] = []
    timers: dict[tuple, float] = {}  # each workload's Timer now, by its figure and values: the plain row's own
    with threads_pinned(threads):  # as the benchmarks pin them; the caller's count comes back after
        for c in wanted:
            if c.label not in figures:
                continue
            print(f"  measuring {c.label} ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            try:
                now = measure(c, args.min_run_time, args.rounds, tolerance=args.tolerance)
            except Exception as exc:  # noqa: BLE001 - a check that failed, a setting this GPU refuses, no memory
                print(f"devbench validate: error: {c.label.strip()}: {type(exc).__name__}: {exc}", file=sys.stderr)
                return EXIT_FAILED
            # a line of its own (torch may warn while it measures): gpu-run prices a later validate from these
            print(f"  measured {c.label.strip()} in {time.perf_counter() - started:.1f} s "
                  f"({now.rounds} of {args.rounds} rounds)", file=sys.stderr, flush=True)  # fmt: skip
            value, commit = figures[c.label]
            key = (c.benchmark, tuple(sorted(c.values.items())))
            if c.reference == "workload":
                timers[key] = now.timer
            rows.append(Row(c.label, c.unit, value, now.timer, now.events, commit, now.method, now.held,
                            timers.get(key, math.nan) if c.reference == "plain_mm" else math.nan,
                            _ceiling(c)))  # fmt: skip
    print(format_table(rows, args.tolerance))
    for label in missing:
        print(f"no suite result for {label}: not measured")
    status = exit_status(rows, args.tolerance)
    off = [r.label for r in rows if verdict(r, args.tolerance) == "OFF"]
    drift = [r.label for r in rows if verdict(r, args.tolerance) == "DRIFT"]
    if off:
        print(f"\n{len(off)} figure(s) OFF: the suite's method is more than {args.tolerance:.0%} from the reference "
              f"measured beside it (the plain torch.mm row: the suite's workload from a plain product, both by "
              f"Timer now; a held figure: above the device's datasheet peak): {', '.join(off)}")  # fmt: skip
    if drift and foreign:
        print(f"\n{len(drift)} figure(s) DRIFT: the method agrees with the reference now, the recorded figure is "
              f"more than {args.tolerance:.0%} off: {', '.join(drift)}. {machine!r} is another host: run validate "
              "there to check its figures.")  # fmt: skip
    elif drift:
        print(f"\n{len(drift)} figure(s) DRIFT: the method agrees with the reference now, the recorded figure is "
              f"more than {args.tolerance:.0%} off: {', '.join(drift)}. The machine ran at another speed during "
              "the asv run; re-run on a quiet machine (scripts/research/host_noise.py tells whether it is "
              "one).")  # fmt: skip
    held = [r.label for r in rows if verdict(r, args.tolerance) == "HELD"]
    if held:
        print(f"\n{len(held)} figure(s) HELD: timed with the stream held (the GPU's own time, no dispatch); "
              f"Timer's loop includes the host's dispatch, so held may be faster: {', '.join(held)}")  # fmt: skip
    if status == EXIT_OK:
        print(f"\nall {len(rows)} figures agree with the reference (or, HELD, are at least as fast)")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
