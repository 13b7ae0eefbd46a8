"""The ``devbench`` command: info, machine, report, validate, compare, gpu-run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any


def _rows(record: dict[str, Any]) -> list[tuple[str, str]]:
    host, tor = record["host"], record["torch"]
    rows = [
        ("host", f"{host['hostname']} ({host['os']}, {host['arch']})"),
        ("cpu", f"{host['cpu']} - {host['cpu_count']} CPUs, torch uses {host['torch_threads']} threads"),
        ("python", host["python"]),
        ("torch", f"{tor['version']} ({'CUDA build' if tor['cuda_built'] else 'CPU-only build'})"),
        ("cuda runtime", tor["cuda_runtime"] or "none"),
        ("cudnn", str(tor["cudnn"]) if tor["cudnn"] else "none"),
        ("driver", record["driver"] or "unknown"),
        ("gpus", str(record["gpu_count"])),
    ]
    return rows


def format_info(record: dict[str, Any]) -> str:
    """``describe()`` as a table a person reads, like ``nvidia-smi``'s header."""
    from devbench.records.expected import link_note

    lines = [f"{k:<13} {v}" for k, v in _rows(record)]
    notes: list[str] = []
    if record["gpus"]:
        head = f"{'#':>2}  {'name':<28} {'memory':>10} {'SMs':>4} {'cc':>4}  {'PCIe':<24}"
        lines += ["", head, "-" * len(head)]
        for g in record["gpus"]:
            pcie = f"gen{g['pcie_gen']} x{g['pcie_width']}" if g.get("pcie_gen") else "n/a"
            if link_note(g):
                pcie += f" (max gen{g['pcie_gen_max']} x{g['pcie_width_max']})"
                notes.append(f"GPU {g['index']}: {link_note(g)}: its host<->device copies are judged against that")
            mem = f"{g.get('memory_gib', 0):.1f} GiB"
            lines.append(
                f"{g['index']:>2}  {str(g.get('name')):<28} {mem:>10} {g.get('sm_count', '?'):>4} "
                f"{g.get('compute_capability', '?'):>4}  {pcie:<24}"
            )
            if g.get("uuid") or g.get("pci_bus_id"):  # which board CUDA's device is, under CUDA_VISIBLE_DEVICES too
                lines.append(f"    {g.get('uuid') or 'uuid unknown'}, PCI {g.get('pci_bus_id') or 'unknown'}")
    if record.get("peer_access"):
        lines += ["", "peer access (P2P / NVLink):"]
        nvlink = record.get("nvlink_peers", {})
        paths = record.get("pair_paths", {})
        for pair, ok in record["peer_access"].items():
            link = {True: "NVLink", False: "no NVLink"}.get(nvlink.get(pair), "NVLink unknown")
            if pair in paths:  # NVML's topology: the links and the PCIe path
                link = f"{paths[pair]['label']}; PCIe: {paths[pair]['pcie'] or 'unknown'}"
            lines.append(f"  {pair}: {'yes' if ok else 'no'} ({link})")
    for note in [*record["notes"], *notes]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    from devbench.engine.devices import describe

    record = describe()
    print(json.dumps(record, indent=2, sort_keys=True) if args.json else format_info(record))
    return 0


def cmd_machine(args: argparse.Namespace) -> int:
    from devbench.engine.machine import record_machine

    try:
        entry = record_machine(args.machine, args.config)
    except RuntimeError as exc:
        print(f"devbench machine: {exc}", file=sys.stderr)
        return 1
    print(f"recorded machine {entry['machine']!r} for asv:")
    for key in ("os", "arch", "cpu", "num_cpu", "ram", "gpu", "gpu_count", "cuda", "driver"):
        print(f"  {key:<10} {entry.get(key)}")
    return 0


#: the subcommands whose modules are imported to build their parsers, and their one-line help
HELP = {
    "report": "asv results -> Markdown/HTML/CSV/PNG report (comparisons across commits, machines, envs)",
    "validate": "check the suite's latest figures against torch.utils.benchmark.Timer (and CUDA events)",
    "compare": "two commits measured in paired turns: faster, slower, same or undecided per figure (exit 1 if "
    "slower)",
    "gpu-run": "the whole suite in one time-boxed call (a lent or rented GPU machine): plan, asv run, CUDA tests, "
    "validate, packed into one folder",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``devbench`` parser. Given the ``command`` to run, the other subcommands of ``HELP`` are only named
    (their modules not imported: a tenth of a second before a report starts); without one, or with a name that
    is not a subcommand (for argparse's error), every subcommand is built whole."""
    parser = argparse.ArgumentParser(
        prog="devbench",
        description="devbench: how fast PyTorch computes and moves data on CPUs and GPUs.",
        epilog="examples:\n  devbench info\n  devbench info --json > machine.json\n  devbench machine\n"
        "  devbench report --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    whole = command not in (*HELP, "info", "machine")

    def wanted(name: str) -> bool:
        if whole or name == command:
            return True
        sub.add_parser(name, help=HELP[name])
        return False

    p = sub.add_parser("info", help="show this machine's CPU, torch build, CUDA, driver and GPUs",
                       description="What this machine is, as the suite records it with every run: its CPU and "
                       "threads, the torch build and its CUDA, the driver, and each GPU (name, UUID, memory, PCIe "
                       "link as trained and at most, NVLink peers), read with torch and NVML, changing "
                       "nothing.")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the full record as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "machine",
        help="run `asv machine --yes` and add GPU name/count, CUDA and driver to the entry",
        description="Record this host for asv (`asv machine --yes`, in ~/.asv-machine.json) with the GPU fields "
        "asv does not know: the GPU's name and count, CUDA and the driver, so results of different GPUs never "
        "share a machine name. Run it once per host before `asv run` (make bench runs it).",
    )
    p.add_argument("--machine", help="machine name (default: hostname, as asv does)")
    p.add_argument("--config", help="asv config file (default: asv.conf.json)")
    p.set_defaults(func=cmd_machine)

    if wanted("report"):
        _add_report(sub)
    if wanted("validate"):
        _add_validate(sub)
    if wanted("compare"):
        _add_compare(sub)
    if wanted("gpu-run"):
        _add_gpu_run(sub)
    return parser


def _add_report(sub) -> None:
    from devbench.report import cli as report_cli

    p = sub.add_parser(
        "report",
        help=HELP["report"],
        description=report_cli.build_parser().description,
        epilog=report_cli.EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report_cli.add_arguments(p)
    p.set_defaults(func=report_cli.run)


def _add_validate(sub) -> None:
    from devbench import validate

    p = sub.add_parser(
        "validate",
        help=HELP["validate"],
        description=validate.build_parser().description,
        epilog=validate.build_parser().epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_arguments(p)
    p.set_defaults(func=validate.run)


def _add_compare(sub) -> None:
    from devbench.compare import cli as compare_cli

    p = sub.add_parser(
        "compare",
        help=HELP["compare"],
        description="Measure BASE and HEAD in pairs of processes, one per side, that take strict turns (A B A B ...) "
        "timing one block each, offline in this Python's environment; judge every figure from the log ratios of "
        "adjacent blocks with a distribution-free interval against a floor. Drift of the host slower than one pair "
        "of blocks cancels inside the pair. By default it looks for changes: a figure that can no longer be "
        "faster or slower stops, undecided (--same also bounds the unchanged ones, at more cost). Exit 0: nothing "
        "slower; 1: a figure is slower; 2: bad input; "
        "130: interrupted (Ctrl-C); 143: terminated (kill).",
        epilog="examples:\n  devbench compare main HEAD\n  devbench compare v0.1 HEAD --bench MatmulSquare"
        "\n  devbench compare main HEAD --same                  # also bound what did not change"
        "\n  devbench compare HEAD HEAD --bench DeviceCopy --all-passes   # A/A: what this host can detect"
        "\n  devbench compare --from .asv/compare --floor 0.05 --out /tmp/again   # judged again, nothing measured"
        "\n  make compare BASE=main",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare_cli.add_arguments(p)
    p.set_defaults(func=compare_cli.run)


def _add_gpu_run(sub) -> None:
    from devbench.gpu import gpuargs, gpurun

    p = sub.add_parser(
        "gpu-run",
        help=HELP["gpu-run"],
        description="Plan the suite against a time budget (each benchmark's points and expected seconds, the "
        "headline points first, what the budget drops), print the plan, then run it with asv in stages (the "
        "headline points; the rest and then the long ones, each re-planned with what the stages so far cost; one "
        "measuring process for them), the tests that need CUDA and devbench validate, fills in the time they "
        "left, and pack asv results, GPU state, nvidia-smi before and after and the logs into --out. "
        "Exit 0: every stage passed; 1: a stage failed or ran out of time; 2: bad input; 130/143: interrupted.",
        epilog=gpuargs.EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gpuargs.add_arguments(p)
    p.set_defaults(func=gpurun.run)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(next((w for w in words if not w.startswith("-")), None)).parse_args(words)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
