"""The health verdicts: each GPU figure against what its machine should do (``devbench.records.expected``).

One function, ``verdict``, judges a figure: the report's health section (``health``), the CSV and Parquet
columns (``with_health``) and gpu-run's health lines (``devbench.gpu.gpuhealth``) all call it, each with the
GPU state recorded while the figure was timed (``state_of``), the path a GPU pair's copy took and the pair a
ring's busbw is judged on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from devbench.records import spec
from devbench.report.derive import _gpu_names, usable, where_label


def _link(text: object) -> dict:
    """The PCIe fields of an asv machine's ``pcie`` entry ("gen5 x16 (max gen5 x16)"), as ``expected`` reads them."""
    import re

    found = re.findall(r"gen(\d+) x(\d+)", str(text or ""))
    if not found:
        return {}
    gen, width = (int(v) for v in found[0])
    top_gen, top_width = (int(v) for v in found[-1])
    return {"pcie_gen": gen, "pcie_width": width, "pcie_gen_max": top_gen, "pcie_width_max": top_width}


#: the copies judged: pinned and pageable host<->device, and the on-device copy, at 64 MiB and more (smaller
#: ones measure latency, not the link)
HEALTH_MIN_BYTES = 64 * 2**20

#: and the square products of this size and more (a 1,024 product cannot fill a GPU of 132 SMs)
HEALTH_MIN_N = 4096

#: why a host<->device figure is not judged without the link
NO_LINK = "the machine's asv record names no PCIe link (devbench machine records it)"


def verdict(kind: str, measured: float, gpu: dict[str, Any], state: dict[str, Any] | None = None,
            path: str | None = None, pair: Any = None, ring: tuple | None = None) -> Any:
    """The verdict on one GPU figure (``expected.Health``): ``kind`` as ``expected`` names it (``h2d``, ``d2h``,
    ``pageable``, ``device_copy``, ``matmul:<dtype>``, ``peer``, ``busbw``), ``gpu`` the machine's facts (its
    model's name and the PCIe link its asv record names), ``state`` what was recorded while the figure was timed
    (``state_of``): the link a copy trained at under load replaces the record's, the board's power limits and
    the clock and throttle reasons a product ran at go to ``expected.judge``. ``path``: how a GPU pair's copy
    travelled; ``pair``: the NVML path it (or a ring's slowest pair) is judged on; ``ring``: a busbw's (op,
    ranks, message bytes), which decides whether a public pass floor applies (a floor set at a larger message
    does not)."""
    from devbench.records.expected import PAGEABLE_NOTE, Health, judge

    if kind == "pageable":
        return Health("not judged", None, PAGEABLE_NOTE)
    state = state or {}
    facts = facts_while_timed(kind, gpu, state)
    if kind in ("h2d", "d2h") and "pcie_gen" not in facts:
        return Health("unknown", None, NO_LINK)
    return judge(measured, kind, facts, throttle=state.get("throttle") or None, path=path,
                 clock_mhz=state.get("clock_mhz"), pair=pair, ring=ring)  # fmt: skip


def facts_while_timed(kind: str, gpu: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The machine's facts as the figure ran: the PCIe link a copy trained at under load in place of the
    machine record's (an idle GPU trains its link down: the record's may read Gen1), and the board's power limit
    and its default. The expected figure reads the link's maximum (``expected._link``); the link as trained
    names the fault where a copy is low."""
    facts = dict(gpu)
    if kind in ("h2d", "d2h", "peer", "busbw") and state.get("pcie_gen") and state.get("pcie_width"):
        facts.update(pcie_gen=state["pcie_gen"], pcie_width=state["pcie_width"])
    facts.update({k: state[k] for k in ("power_limit_w", "default_power_limit_w") if state.get(k)})
    return facts


#: the report frame's columns of the GPU state while a figure was timed (``records.attach_gpu_state``)
STATE_COLUMNS = {"gpu_mhz": "clock_mhz", "gpu_reasons": "throttle", "gpu_pcie_gen": "pcie_gen",
                 "gpu_pcie_width": "pcie_width", "gpu_power_limit_w": "power_limit_w",
                 "gpu_default_power_limit_w": "default_power_limit_w"}  # fmt: skip


def state_of(values: dict[str, Any]) -> dict[str, Any]:
    """A figure's recorded GPU state as ``verdict`` reads it, from the report frame's ``gpu_*`` columns of its
    row; empty where nothing was recorded."""
    seen: dict[str, Any] = {}
    for col, key in STATE_COLUMNS.items():
        v = values.get(col)
        if key == "throttle":
            seen[key] = [t for t in v.split(", ") if t and t != "nan"] if isinstance(v, str) else []
        elif v is not None and pd.notna(v):
            seen[key] = int(v) if key.startswith("pcie") else float(v)
    return {k: v for k, v in seen.items() if v}


def health(frame: pd.DataFrame, throughput: pd.DataFrame, bandwidth: pd.DataFrame,
           collectives: pd.DataFrame | None = None, peers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each GPU machine's figures against what the machine should do (``devbench.records.expected``): the expected
    figure, the share, ``ok``/``low``/``unknown`` and why. Judged: host<->device, device and GPU -> GPU copies
    of 64 MiB and more (a GPU pair's copy with the path it took), the largest square product per dtype, the
    slowest and the median pair of the newest peer matrix (``peers``, ``records.load_peers``), and each NCCL
    collective's bus bandwidth at its largest size (``collectives``, ``collective_bandwidth``). A machine's
    PCIe link comes from its asv record's ``pcie`` (``devbench machine``); without it the host<->device
    figures are ``unknown``."""
    cols = ["where", "figure", "measured", "unit", "verdict", "share", "reason"]
    names = _gpu_names(frame)
    if names.empty:
        return pd.DataFrame(columns=cols)
    first = usable(frame).drop_duplicates("machine").set_index("machine")
    links = first["machine_pcie"] if "machine_pcie" in first else pd.Series(dtype=object)
    paths = _peer_paths(frame)
    rows = []

    def gpu_of(machine: str) -> dict | None:
        name = names.get(machine)
        if name is None or str(name) in ("none", "nan", ""):
            return None
        return {"name": str(name).split(" x ", 1)[-1], **_link(links.get(machine))}

    def where(r: Any) -> str:
        return str(where_label(pd.DataFrame([r._asdict()])).iloc[0])

    states = _states_while_timed(frame)

    def state(r: Any, figure: spec.Figure, **values: Any) -> dict:
        """The clock, throttle reasons and PCIe link recorded while this figure was timed (empty: none)."""
        return states.get((str(r.machine), str(r.env), str(r.commit), figure.benchmark, figure.label(**values)), {})

    for r in bandwidth.itertuples():
        gpu = gpu_of(r.machine)
        kind = str(r.copy)
        if gpu is None or float(r.nbytes) < HEALTH_MIN_BYTES:
            continue
        if kind.startswith(("h2d", "d2h")):
            figure, measured = f"{kind} {spec.size_label(int(r.nbytes))}", float(r.gbps)
            parts = kind.split()
            seen = state(r, spec.HOST_DEVICE_GBPS, direction=parts[0], memory=parts[1], mode=parts[2],
                         nbytes=int(r.nbytes)) if len(parts) >= 3 else {}  # fmt: skip
            # a pageable copy is not judged, link or no link
            health_ = verdict("pageable" if "pageable" in kind else kind[:3], measured, gpu, seen)
        elif kind == "on-device cuda":
            measured = 2 * float(r.gbps)  # the memory reads and writes every byte copied
            seen = state(r, spec.DEVICE_COPY_RW_GBPS, device="cuda", nbytes=int(r.nbytes))
            health_ = verdict("device_copy", measured, gpu, seen)
            figure = f"device copy {spec.size_label(int(r.nbytes))}, read + written"
        elif kind.startswith("peer "):
            route, measured = kind.split(" ", 1)[1], float(r.gbps)
            path = paths.get((r.machine, r.env, r.commit, route, int(float(r.nbytes))))
            seen = state(r, spec.PEER_COPY_GBPS, route=route, nbytes=int(r.nbytes))
            health_ = verdict("peer", measured, gpu, seen, path=path)
            figure = f"GPU {route} {spec.size_label(int(r.nbytes))}" + (f" ({path})" if path else "")
        else:
            continue
        rows.append([where(r), figure, measured, "GB/s", health_.verdict, health_.share, health_.reason])
    gpu_tp = throughput[throughput["device"] == "cuda"] if not throughput.empty else throughput
    if not gpu_tp.empty:
        # the largest size per dtype, where one product can fill the GPU: a small one is not meant to reach the peak
        large = gpu_tp[gpu_tp["n"].astype(float) >= HEALTH_MIN_N]
        top = large.sort_values("n").groupby(["machine", "env", "dtype"]).tail(1)
        for r in top.itertuples():
            gpu = gpu_of(r.machine)
            if gpu is None:
                continue
            seen = state(r, spec.MATMUL_TFLOPS, device="cuda", dtype=r.dtype, n=int(r.n))
            health_ = verdict(f"matmul:{r.dtype}", float(r.tflops), gpu, seen)
            rows.append([where(r), f"matmul {r.dtype} n={int(r.n)}", float(r.tflops), "TFLOP/s", health_.verdict,
                         health_.share, health_.reason])  # fmt: skip
    for machine, pairs in ({} if peers is None or peers.empty else dict(tuple(peers.groupby("machine")))).items():
        gpu = gpu_of(machine)
        if gpu is None:
            continue
        for nbytes, one in pairs.groupby("nbytes"):
            one = one.sort_values("gbps").reset_index(drop=True)
            # the median pair, unless it is the slowest one (two GPUs: two pairs)
            picks = [("slowest", 0), ("median", (len(one) - 1) // 2)][: 2 if len(one) > 2 else 1]
            for which, r in ((w, one.iloc[i]) for w, i in picks):
                path = str(r["path"]) if isinstance(r.get("path"), str) and r["path"] else None
                health_ = verdict("peer", float(r["gbps"]), gpu, path=path, pair=_pair_of(r))
                figure = f"peer matrix {which}: GPU {r['src']}->{r['dst']} {spec.size_label(int(nbytes))}"
                rows.append([str(machine), figure + (f" ({path})" if path else ""), float(r["gbps"]), "GB/s",
                             health_.verdict, health_.share, health_.reason])  # fmt: skip
    nccl = collectives[collectives["backend"] == "nccl"] if collectives is not None and len(collectives) else None
    if nccl is not None and not nccl.empty:
        large = nccl[nccl["nbytes"].astype(float) >= HEALTH_MIN_BYTES]
        top = large.sort_values("nbytes").groupby(["machine", "env", "runner", "world", "op"]).tail(1)
        for r in top.itertuples():
            gpu = gpu_of(r.machine)
            if gpu is None or not pd.notna(r.busbw):
                continue
            health_ = verdict("busbw", float(r.busbw), gpu, pair=_ring_pair(peers, str(r.machine), int(r.world)),
                              ring=(str(r.op), int(r.world), int(r.nbytes)))  # fmt: skip
            figure = f"{r.op} busbw, {r.world} GPUs, {spec.size_label(int(r.nbytes))}"
            rows.append([where(r), figure, float(r.busbw), "GB/s", health_.verdict, health_.share, health_.reason])
    return pd.DataFrame(rows, columns=cols)


def _states_while_timed(frame: pd.DataFrame) -> dict[tuple, dict]:
    """(machine, env, commit, benchmark, params) -> the GPU state while that figure was timed (``state_of``), from
    the columns ``records.attach_gpu_state`` adds; rows without them are left out."""
    present = [c for c in STATE_COLUMNS if c in frame.columns]
    if not present:
        return {}
    out = {}
    keys = ["machine", "env", "commit", "benchmark", "params"]
    for values in frame.reindex(columns=[*keys, *present]).to_dict("records"):
        seen = state_of(values)
        if seen:
            out[tuple(str(values[k]) for k in keys)] = seen
    return out


def _ring_pair(peers: pd.DataFrame | None, machine: str, world: int) -> Any:
    """The slowest pair (``topology.slowest``) of an NCCL ring of ``world`` ranks on ``machine`` (rank r to r + 1),
    from the NVML paths PeerMatrix recorded; None where it recorded none."""
    if peers is None or peers.empty or "nvlinks" not in peers:
        return None
    from devbench.records.topology import slowest
    from devbench.report.records import newest_sweeps

    mine = newest_sweeps(peers[peers["machine"].astype(str) == machine])

    hops = {(k, (k + 1) % world) for k in range(world)}
    return slowest(_pair_of(r) for _, r in mine.iterrows() if (int(r["src"]), int(r["dst"])) in hops)


def _pair_of(row: Any) -> Any:
    """A peer matrix row's NVML path (``topology.PairPath``) where PeerMatrix recorded one, else None."""
    from devbench.records.topology import PairPath

    links = row.get("nvlinks")
    if links is None or not pd.notna(links):
        return None
    return PairPath.from_record(row["src"], row["dst"], dict(row))


def _peer_paths(frame: pd.DataFrame) -> dict[tuple, str]:
    """(machine, env, commit, route, nbytes) -> the path a ``PeerCopy`` took (``expected.path_label``), from its
    ``track_peer_access`` and ``track_nvlink_share`` figures of the same run."""
    from devbench.records.expected import path_label

    sub = usable(frame)
    access = sub[sub["benchmark"] == spec.PEER_ACCESS.benchmark]
    if access.empty or "route" not in access or "nbytes" not in access:
        return {}
    share = sub[sub["benchmark"] == spec.PEER_NVLINK_SHARE.benchmark]
    key = ["machine", "env", "commit", "route", "nbytes"]
    access, share = access.dropna(subset=key), share.dropna(subset=key)  # a result asv names no params of
    shares = {tuple(k): v for *k, v in share[[*key, "value"]].itertuples(index=False)}
    out = {}
    for *k, v in access[[*key, "value"]].itertuples(index=False):
        nvlink_share = shares.get(tuple(k))
        k[-1] = int(float(k[-1]))
        out[tuple(k)] = path_label(bool(float(v)), None, None if nvlink_share is None else float(nvlink_share))
    return out


#: a peer record belongs to a PeerMatrix figure timed within this many seconds of it (its sweep's run)
SAME_SWEEP_S = 12 * 3600


def _matrix_pick(peers: pd.DataFrame | None, machine: str, nbytes: float, which: str,
                 started: Any = None) -> tuple[Any, str | None]:  # fmt: skip
    """The pair a peer matrix's ``slowest`` or ``median`` figure is (the section's choice, from the peer records
    of the same sweep: the one nearest the figure's time, within ``SAME_SWEEP_S``, else without a time the
    newest): its NVML path and the path its copy took; (None, None) without records of that sweep."""
    if peers is None or peers.empty or not pd.notna(nbytes):
        return None, None
    one = peers[(peers["machine"].astype(str) == machine) & (peers["nbytes"].astype(float) == float(nbytes))]
    when = pd.Timestamp(started).timestamp() if started is not None and pd.notna(started) else None
    if when is not None and "time" in one:  # an older commit's figure is not that sweep's: its own sweep
        gap = (one["time"].astype(float) - when).abs()
        one = one[(gap <= SAME_SWEEP_S) & (gap == gap.min())]
    elif "time" in one and not one.empty:
        one = one[one["time"] == one["time"].max()]
    if one.empty:
        return None, None
    one = one.sort_values("gbps").reset_index(drop=True)
    r = one.iloc[0 if which == "slowest" or len(one) <= 2 else (len(one) - 1) // 2]
    path = str(r["path"]) if isinstance(r.get("path"), str) and r["path"] else None
    return _pair_of(r), path


def with_health(frame: pd.DataFrame, peers: pd.DataFrame | None = None) -> pd.DataFrame:
    """``frame`` with ``expected``, ``expected_source``, ``health`` (ok, low, unknown, not judged) and
    ``health_reason`` on the GPU figures the health section judges, every commit of them (the history's own
    normal); empty elsewhere. For the CSV and Parquet: each row judged by ``verdict`` as the section judges it,
    at the state it ran in, a pair's copy with the path it took, a ring's busbw and the peer matrix's pairs on
    their NVML paths (``peers``, ``records.load_peers``)."""
    out = frame.assign(expected=np.nan, expected_source="", health="", health_reason="")
    if "machine_gpu" not in out or out.empty:
        return out
    judged_benchmarks = [f.benchmark for f in (spec.HOST_DEVICE_GBPS, spec.DEVICE_COPY_RW_GBPS, spec.MATMUL_TFLOPS,
                                               spec.PEER_COPY_GBPS, spec.PEER_MATRIX_SLOWEST,
                                               spec.PEER_MATRIX_MEDIAN, spec.COLLECTIVE_BUSBW)]  # fmt: skip
    rows = out.index[out["benchmark"].isin(judged_benchmarks).to_numpy()]  # on the categories: no text per row
    if rows.empty:
        return out
    judged_rows = _judged(out.loc[rows], frame, peers)
    for col in ("expected", "expected_source", "health", "health_reason"):
        out.loc[rows, col] = judged_rows[col]
    return out


def _judged(out: pd.DataFrame, frame: pd.DataFrame, peers: pd.DataFrame | None) -> pd.DataFrame:
    """``with_health``'s columns for the rows of the benchmarks the health section judges."""
    from devbench.records.expected import expected

    bench, value = out["benchmark"].astype(str), pd.to_numeric(out["value"], errors="coerce")

    def col(name: str) -> pd.Series:
        return out[name].astype(str) if name in out else pd.Series("", index=out.index)

    nbytes = pd.to_numeric(out["nbytes"], errors="coerce") if "nbytes" in out else pd.Series(np.nan, index=out.index)
    n = pd.to_numeric(out["n"], errors="coerce") if "n" in out else pd.Series(np.nan, index=out.index)
    kinds = pd.Series("", index=out.index)
    copies = (bench == spec.HOST_DEVICE_GBPS.benchmark) & (nbytes >= HEALTH_MIN_BYTES)
    kinds[copies] = col("direction")[copies]
    kinds[copies & (col("memory") == "pageable")] = "pageable"
    device = (bench == spec.DEVICE_COPY_RW_GBPS.benchmark) & (col("device") == "cuda")
    kinds[device & (nbytes >= HEALTH_MIN_BYTES)] = "device_copy"
    products = (bench == spec.MATMUL_TFLOPS.benchmark) & (col("device") == "cuda") & (n >= HEALTH_MIN_N)
    kinds[products] = "matmul:" + col("dtype")[products]
    kinds[(bench == spec.PEER_COPY_GBPS.benchmark) & (nbytes >= HEALTH_MIN_BYTES)] = "peer"
    matrix = {spec.PEER_MATRIX_SLOWEST.benchmark: "slowest", spec.PEER_MATRIX_MEDIAN.benchmark: "median"}
    kinds[bench.isin(list(matrix))] = "peer"
    nccl = (bench == spec.COLLECTIVE_BUSBW.benchmark) & (col("backend") == "nccl")
    kinds[nccl & (nbytes >= HEALTH_MIN_BYTES)] = "busbw"
    judged = (kinds != "") & value.notna() & out["machine_gpu"].notna()  # a skipped or failed run: no figure
    if not judged.any():
        return out
    paths = _peer_paths(frame)
    for i, row in out[judged].iterrows():
        kind, machine = kinds[i], str(row["machine"])
        gpu = {"name": str(row["machine_gpu"]).split(" x ", 1)[-1], **_link(row.get("machine_pcie"))}
        path = pair = ring = None
        if kind == "peer" and bench[i] in matrix:
            pair, path = _matrix_pick(peers, machine, nbytes[i], matrix[bench[i]], row.get("started_at"))
        elif kind == "peer":
            path = paths.get((row["machine"], row["env"], row["commit"], str(row.get("route")), int(nbytes[i])))
        elif kind == "busbw":
            ring = (str(row["op"]), int(float(row["world"])), int(nbytes[i]))
            pair = _ring_pair(peers, machine, ring[1])
        state = state_of(row.to_dict())
        got = verdict(kind, float(value[i]), gpu, state, path=path, pair=pair, ring=ring)
        if kind != "pageable":  # the expected figure of the facts the verdict used
            facts = facts_while_timed(kind, gpu, state)
            want = expected(kind, facts, pair, ring) if kind in ("peer", "busbw") else expected(kind, facts)
            out.at[i, "expected"] = want.value if want.value is not None else np.nan
        if got.expected is not None:  # what the verdict held it against: a sustained figure, one at its clock
            out.at[i, "expected"] = got.expected
        out.at[i, "expected_source"] = (got.reason if got.verdict in ("not judged", "unknown")
                                        else got.source or want.source)  # fmt: skip
        out.at[i, "health"] = got.verdict
        out.at[i, "health_reason"] = got.reason
    return out
