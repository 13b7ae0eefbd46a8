"""gpu-run's health lines: each headline GPU figure of a run beside what its machine should do.

Reads the asv results a run saved and the GPU state ``devbench.records.gpustate`` recorded while each figure was
timed, and judges them with ``devbench.report.health.verdict``, as the report and the CSV do. No torch import:
``devbench info --json`` is run as a process for the GPU's facts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


def figure_value(results: Path, sha: str, name: str, params: tuple) -> float | None:
    """The figure asv saved for benchmark ``name`` at ``params`` (commit ``sha``), or None; read by the report's
    reader (``devbench.report.load``)."""
    from devbench.report.load import saved_results, value_at

    want = tuple(repr(p) for p in params)
    for data in saved_results(results, sha):
        value = value_at(data, name, want)
        if value is not None:
            return value
    return None


def _pair(pairs: dict[str, dict[str, Any]] | None, point: Any, kind: str) -> Any:
    """The NVML path (``devbench info``'s ``pair_paths``, as ``topology.PairPath``) a peer figure or a ring's
    busbw is judged against: the pair's own, or the slowest pair of the ring; None without the topology."""
    if not pairs or kind not in ("peer", "busbw"):
        return None
    from devbench.records.topology import PairPath, slowest

    def path(key: str) -> PairPath | None:
        p = pairs.get(key)
        if p is None:
            return None
        i, j = (int(x) for x in key.split("->"))
        return PairPath.from_record(i, j, p)

    if kind == "peer":
        route = point.values.get("route", "0->1")
        if route in pairs:
            return path(route)
        ring = [path(k) for k in pairs]  # the peer matrix: judged against the slowest pair there is
    else:
        world = int(point.values.get("world", 2))
        ring = [path(f"{r}->{(r + 1) % world}") for r in range(world)]
    return slowest(ring)


def health_lines(results: Path, sha: str, gpu: dict[str, Any], states: list[dict[str, Any]] | None = None,
                 pairs: dict[str, dict[str, Any]] | None = None) -> list[str]:  # fmt: skip
    """Each headline GPU figure of this run (``spec.HEALTH_POINTS``) beside what the machine should do
    (``devbench.report.health.verdict``, as the report and the CSV judge them), with the GPU's state while it ran
    (``states``: ``gpustate`` records): the clock and throttle reasons of a product, the board's power limits,
    the PCIe link a pinned copy trained at under load."""
    from devbench.records import gpustate, spec
    from devbench.records.expected import path_label
    from devbench.report.health import verdict

    lines = []
    for point, kind in spec.HEALTH_POINTS:
        name, params, label = point.figure.benchmark, point.params, point.label
        value = figure_value(results, sha, name, params)
        if value is None:
            continue
        path = None
        if point.figure is spec.PEER_COPY_GBPS:  # the path its copies took, from the same run's figures
            access = figure_value(results, sha, spec.PEER_ACCESS.benchmark, params)
            share = figure_value(results, sha, spec.PEER_NVLINK_SHARE.benchmark, params)
            path = None if access is None else path_label(bool(access), None, share)
            label = f"{label} ({path})" if path else label
        cls, figure = name.rsplit(".", 1)
        record = gpustate.while_timed(states or [], cls, dict(point.values), figure=figure) or {}
        state = {"clock_mhz": record.get("sm_clock_mhz"), "throttle": record.get("throttling") or [],
                 **{k: record.get(k) for k in ("pcie_gen", "pcie_width", "power_limit_w", "default_power_limit_w")}}
        ring = ((str(point.values.get("op")), int(point.values.get("world", 0)), int(point.values.get("nbytes", 0)))
                if kind == "busbw" else None)  # fmt: skip
        health = verdict(kind, value, gpu, {k: v for k, v in state.items() if v}, path=path,
                         pair=_pair(pairs, point, kind), ring=ring)  # fmt: skip
        lines.append(f"  {label:<28} {value:>9.4g}  {health.verdict:<7} {health.reason}")
    return lines


def print_health(repo: Path, python: str, machine: str, sha: str, since: float | None = None,
                 timeout_s: float = 120.0) -> None:  # fmt: skip
    """Print the headline GPU figures' health (GPU 0's facts from ``devbench info --json``); nothing without a GPU.
    ``since``: when this run started (seconds since the epoch): an earlier run's state never judges its figures.
    ``timeout_s``: what the run leaves it; an ``info`` that does not answer in it is a note, not the run's end."""
    try:
        out = subprocess.run([python, "-m", "devbench.cli", "info", "--json"], cwd=repo, capture_output=True,
                             text=True, timeout=timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        print(f"health: no lines: `devbench info --json` gave no answer in the {timeout_s:.3g} s the budget left",
              flush=True)  # fmt: skip
        return
    try:
        gpus = json.loads(out.stdout).get("gpus", []) if out.returncode == 0 else []
    except ValueError:
        gpus = []
    if not gpus:
        return
    from devbench.records import gpustate

    states = gpustate.load(repo / gpustate.GPUSTATE_DIR, machine=machine)  # this run's machine: no other's state
    states = [r for r in states if since is None or float(r.get("time", 0.0)) >= since]  # and this run's records
    pairs = json.loads(out.stdout).get("pair_paths") if out.returncode == 0 else None
    lines = health_lines(repo / ".asv" / "results" / machine, sha, gpus[0], states, pairs)
    if lines:
        print(f"health: GPU 0 ({gpus[0].get('name')}), each figure against what this machine should do", flush=True)
        print("\n".join(lines), flush=True)
