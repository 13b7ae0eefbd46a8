"""Figures asv does not compute: throughput from times, speedups, crossover, ratios, fraction of peak.

Each function takes the tidy frame of ``load_results`` and returns a small tidy frame
keyed by machine, environment and commit. Only rows with a value (``status == "ok"``) of
the current benchmark version are used. Benchmarks a function does not know are ignored,
so these are empty on other projects' results.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from devbench.peaks import gpu_peak

KEYS = ["machine", "env", "commit", "commit_short", "date"]


def usable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with a value, measured by the benchmark's current code."""
    return frame[(frame["status"] == "ok") & frame["version_current"]]


def _rows(frame: pd.DataFrame, benchmark: str, *cols: str) -> pd.DataFrame:
    sub = usable(frame)
    sub = sub[sub["benchmark"] == benchmark]
    missing = [c for c in cols if c not in sub.columns]
    if sub.empty or missing:
        return pd.DataFrame(columns=[*KEYS, *cols, "value"])
    return sub[[*KEYS, *cols, "value", *(c for c in sub.columns if c.startswith("machine_"))]]


def matmul_throughput(frame: pd.DataFrame) -> pd.DataFrame:
    """TFLOP/s per device, dtype and n: the suite's ``track_tflops``, else 2n^3 / ``time_matmul``."""
    cols = ["device", "dtype", "n"]
    tracked = _rows(frame, "bench_matmul.MatmulSquare.track_tflops", *cols).assign(source="track_tflops")
    timed = _rows(frame, "bench_matmul.MatmulSquare.time_matmul", *cols)
    if not timed.empty:
        n = timed["n"].astype(float)
        timed = timed.assign(value=2 * n**3 / timed["value"] / 1e12, source="2n^3 / time_matmul")
    parts = [d for d in (tracked, timed) if not d.empty]
    if not parts:
        return pd.DataFrame(columns=[*KEYS, *cols, "tflops", "source"])
    # a tracked figure wins over one derived from a time
    both = pd.concat(parts, ignore_index=True).drop_duplicates([*KEYS, *cols], keep="first")
    return both.rename(columns={"value": "tflops"}).reset_index(drop=True)


#: Benchmarks whose ``nbytes`` param and time give a bandwidth, and what they move.
BANDWIDTH_SOURCES = {
    "bench_transfer.HostDevice.track_gbps": "track",
    "bench_transfer.DeviceCopy.track_gbps_copied": "track",
    "bench_transfer.PeerCopy.track_gbps": "track",
    "bench_transfer.HostDevice.time_copy": "time",
    "bench_transfer.DeviceCopy.time_copy": "time",
    "bench_transfer.PeerCopy.time_copy": "time",
}


def transfer_bandwidth(frame: pd.DataFrame) -> pd.DataFrame:
    """GB/s (decimal, bytes copied) per copy kind and size; from ``track_*`` or nbytes / time."""
    out = []
    for bench, how in BANDWIDTH_SOURCES.items():
        sub = usable(frame)
        sub = sub[sub["benchmark"] == bench]
        if sub.empty or "nbytes" not in sub.columns:
            continue
        sub = sub.copy()
        if how == "time":
            sub["value"] = sub["nbytes"].astype(float) / sub["value"] / 1e9
        cls = bench.split(".")[1]
        if cls == "HostDevice":
            sub["copy"] = sub["direction"].astype(str) + " " + sub["memory"].astype(str) + " " + sub["mode"].astype(str)
        elif cls == "DeviceCopy":
            sub["copy"] = "on-device " + sub["device"].astype(str)
        else:
            sub["copy"] = "peer " + sub["route"].astype(str)
        sub["source"] = bench.rsplit(".", 1)[-1] if how == "track" else "nbytes / " + bench.rsplit(".", 1)[-1]
        out.append(sub[[*KEYS, "copy", "nbytes", "value", "source"]])
    if not out:
        return pd.DataFrame(columns=[*KEYS, "copy", "nbytes", "gbps", "source"])
    both = pd.concat(out, ignore_index=True).drop_duplicates([*KEYS, "copy", "nbytes"], keep="first")
    return both.rename(columns={"value": "gbps"}).reset_index(drop=True)


def gpu_speedup(frame: pd.DataFrame, throughput: pd.DataFrame | None = None) -> pd.DataFrame:
    """GPU over CPU TFLOP/s per dtype and n (tf32 on the GPU against float32 on the CPU).

    The suite's ``MatmulSpeedup.track_gpu_over_cpu`` (both sides in one process) where it
    ran; otherwise the ratio of the two devices' throughput from ``MatmulSquare``.
    """
    cols = [*KEYS, "dtype", "n", "speedup", "source"]
    direct = _rows(frame, "bench_matmul.MatmulSpeedup.track_gpu_over_cpu", "dtype", "n")
    if len(direct):
        direct = direct.rename(columns={"value": "speedup"}).assign(source="track_gpu_over_cpu")[cols]
    tp = matmul_throughput(frame) if throughput is None else throughput
    ratio = None
    if len(tp):
        gpu = tp[tp["device"] == "cuda"]
        cpu = tp[tp["device"] == "cpu"].copy()
        cpu_tf32 = cpu[cpu["dtype"] == "float32"].assign(dtype="tf32")
        cpu = pd.concat([cpu, cpu_tf32], ignore_index=True)
        merged = gpu.merge(cpu, on=[*KEYS, "dtype", "n"], suffixes=("_gpu", "_cpu"))
        if len(merged):
            merged["speedup"] = merged["tflops_gpu"] / merged["tflops_cpu"]
            ratio = merged.assign(source="MatmulSquare cuda / cpu")[cols]
    parts = [p for p in (direct, ratio) if p is not None and len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True).drop_duplicates([*KEYS, "dtype", "n"], keep="first")


def crossover(speedups: pd.DataFrame) -> pd.DataFrame:
    """Smallest n from which the GPU wins at every larger measured n (NaN: it never does)."""
    rows = []
    for key, grp in speedups.groupby([*KEYS, "dtype"], sort=True, dropna=False):
        grp = grp.sort_values("n")
        wins = (grp["speedup"] >= 1.0).to_numpy()
        ns = grp["n"].to_numpy()
        from_here = np.flip(np.logical_and.accumulate(np.flip(wins)))
        n = ns[from_here][0] if from_here.any() else np.nan
        rows.append({**dict(zip([*KEYS, "dtype"], key, strict=True)), "crossover_n": n, "sizes": len(ns)})
    return pd.DataFrame(rows, columns=[*KEYS, "dtype", "crossover_n", "sizes"])


def logging_ratio(frame: pd.DataFrame) -> pd.DataFrame:
    """Each logging strategy's loop time over ``on_device``'s, per device, steps and n."""
    cols = ["device", "strategy", "steps", "n"]
    t = _rows(frame, "bench_logging.LogNorms.time_loop", *cols)
    if t.empty:
        return pd.DataFrame(columns=[*KEYS, *cols, "ratio"])
    base = t[t["strategy"] == "on_device"][[*KEYS, "device", "steps", "n", "value"]]
    merged = t.merge(base, on=[*KEYS, "device", "steps", "n"], suffixes=("", "_on_device"))
    merged["ratio"] = merged["value"] / merged["value_on_device"]
    return merged[[*KEYS, *cols, "ratio"]].reset_index(drop=True)


def parallel_scaling(frame: pd.DataFrame) -> pd.DataFrame:
    """Sequential over parallel time, and that over the number of lanes (GPUs for ``gpus``, else 2)."""
    seq = _rows(frame, "bench_parallel.ParallelMatmul.time_sequential", "mode", "n")
    par = _rows(frame, "bench_parallel.ParallelMatmul.time_parallel", "mode", "n")
    cols = [*KEYS, "mode", "n", "lanes", "speedup", "efficiency"]
    if seq.empty or par.empty:
        return pd.DataFrame(columns=cols)
    m = seq.merge(par[[*KEYS, "mode", "n", "value"]], on=[*KEYS, "mode", "n"], suffixes=("_seq", "_par"))
    gpus = pd.to_numeric(m.get("machine_gpu_count", pd.Series(2, index=m.index)), errors="coerce").fillna(2)
    m["lanes"] = np.where(m["mode"] == "gpus", np.maximum(gpus, 2), 2).astype(int)
    m["speedup"] = m["value_seq"] / m["value_par"]
    m["efficiency"] = m["speedup"] / m["lanes"]
    return m[cols].reset_index(drop=True)


COLLECTIVE_COLUMNS = ["machine", "env", "runner", "backend", "world", "op", "nbytes", "time_us", "algbw", "busbw"]


def collective_bandwidth(frame: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Bus and algorithm bandwidth per op and size: the suite's ``Collectives`` tracks
    (``runner`` "asv"), and the latest ``python -m devbench.collectives`` file per
    machine, backend, world size and node count (``runner`` "torchrun", see
    ``load_collectives``)."""
    parts = []
    cols = ["backend", "world", "op", "nbytes"]
    bus = _rows(frame, "bench_collectives.Collectives.track_busbw", *cols)
    if not bus.empty:
        alg = _rows(frame, "bench_collectives.Collectives.track_algbw", *cols)
        tim = _rows(frame, "bench_collectives.Collectives.track_time", *cols)
        t = bus.rename(columns={"value": "busbw"})[[*KEYS, *cols, "busbw"]]
        t = t.merge(alg.rename(columns={"value": "algbw"})[[*KEYS, *cols, "algbw"]], on=[*KEYS, *cols], how="left")
        t = t.merge(tim.rename(columns={"value": "time"})[[*KEYS, *cols, "time"]], on=[*KEYS, *cols], how="left")
        t["time_us"] = t["time"] * 1e6
        parts.append(t.assign(runner="asv"))
    if runs is not None and not runs.empty:
        runs = runs.sort_values("finished")
        last = runs.groupby(["machine", "backend", "world", "nodes"])["file"].transform("last")
        r = runs[runs["file"] == last]
        parts.append(r.assign(runner=np.where(r["nodes"] > 1, r["nodes"].astype(str) + " nodes", "torchrun")))
    if not parts:
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    out = pd.concat([p[COLLECTIVE_COLUMNS] for p in parts], ignore_index=True)
    return out.astype({"world": int, "nbytes": int})


def fraction_of_peak(frame: pd.DataFrame, throughput: pd.DataFrame | None = None) -> pd.DataFrame:
    """Measured TFLOP/s over a peak: the GPU's datasheet figure, or the CPU's best measured one.

    Unknown GPUs get no fraction (NaN), not an error.
    """
    tp = matmul_throughput(frame) if throughput is None else throughput
    cols = [*KEYS, "device", "dtype", "n", "tflops", "peak", "peak_source", "fraction"]
    if tp.empty:
        return pd.DataFrame(columns=cols)
    tp = tp.copy()
    gpu_names = usable(frame).drop_duplicates("machine").set_index("machine")
    gpu_names = gpu_names["machine_gpu"] if "machine_gpu" in gpu_names else pd.Series(dtype=object)
    best_cpu = tp[tp["device"] == "cpu"].groupby([*KEYS, "dtype"], dropna=False)["tflops"].transform("max")
    tp["peak"] = np.nan
    tp["peak_source"] = ""
    tp.loc[best_cpu.index, "peak"] = best_cpu
    tp.loc[best_cpu.index, "peak_source"] = "best measured on this CPU"
    for idx, row in tp[tp["device"] == "cuda"].iterrows():
        name = gpu_names.get(row["machine"])
        peak = gpu_peak(str(name) if name is not None else None, str(row["dtype"]))
        if peak:
            tp.loc[idx, ["peak", "peak_source"]] = [peak, f"datasheet ({name})"]
    tp["fraction"] = tp["tflops"] / tp["peak"]
    return tp[cols].reset_index(drop=True)
