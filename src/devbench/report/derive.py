"""Figures asv does not compute: throughput from times, speedups, crossover, ratios, fraction of peak.

Each function takes the tidy frame of ``load_results`` and returns a small tidy frame
keyed by machine, environment and commit. Only rows with a value (``status == "ok"``) of
the current benchmark version are used. Benchmarks a function does not know are ignored,
so these are empty on other projects' results.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from devbench.records import spec
from devbench.records.expected import gpu_peak

KEYS = ["machine", "env", "commit", "commit_short", "date"]


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """Each machine, environment and benchmark's rows from its most recent commit (by commit date).

    Per benchmark, so a run of one family on a newer commit does not hide the others.
    """
    if frame.empty:
        return frame
    keys = ["machine", "env", "benchmark"]
    order = frame[[*keys, "date", "commit"]].sort_values(["date", "commit"])
    last = order.drop_duplicates(keys, keep="last")
    return frame.merge(last[[*keys, "commit"]], on=[*keys, "commit"])


def where_label(df: pd.DataFrame) -> pd.Series:
    """A short label of machine (and environment, when there are several) per row."""
    if df["env"].nunique() > 1:
        return df["machine"].astype(str) + " / " + df["env"].astype(str)
    return df["machine"].astype(str)


def usable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with a value, measured by the benchmark's current code."""
    return frame[(frame["status"] == "ok") & frame["version_current"]]


def _rows(frame: pd.DataFrame, figure: spec.Figure) -> pd.DataFrame:
    """The usable rows of one figure, with its params as columns (none when it was not measured)."""
    cols = figure.params
    sub = usable(frame)
    sub = sub[sub["benchmark"] == figure.benchmark]
    missing = [c for c in cols if c not in sub.columns]
    if sub.empty or missing:
        return pd.DataFrame(columns=[*KEYS, *cols, "value"])
    return sub[[*KEYS, *cols, "value", *(c for c in sub.columns if c.startswith("machine_"))]]


def matmul_throughput(frame: pd.DataFrame) -> pd.DataFrame:
    """TFLOP/s per device, dtype and n: the suite's ``track_tflops``, else 2n^3 / its seconds (``track_time``)."""
    cols = ["device", "dtype", "n"]
    tracked = _rows(frame, spec.MATMUL_TFLOPS).assign(source="track_tflops")
    timed = _rows(frame, spec.MATMUL_TIME)
    if not timed.empty:
        flop = spec.matmul_flops(timed["n"].astype(float))
        timed = timed.assign(value=spec.tflops(flop, timed["value"]), source="2n^3 / track_time")
    parts = [d for d in (tracked, timed) if not d.empty]
    if not parts:
        return pd.DataFrame(columns=[*KEYS, *cols, "tflops", "source"])
    # a tracked figure wins over one derived from a time
    both = pd.concat(parts, ignore_index=True).drop_duplicates([*KEYS, *cols], keep="first")
    return both.rename(columns={"value": "tflops"}).reset_index(drop=True)


#: what a pageable non_blocking copy is labelled: staged and synchronous, whatever it asked for
PAGEABLE_NON_BLOCKING = "pageable non_blocking (staged, synchronous)"


def transfer_bandwidth(frame: pd.DataFrame) -> pd.DataFrame:
    """GB/s (decimal, bytes copied) per copy kind and size; from ``track_*`` or nbytes / time.

    A copy's kind is its benchmark's params other than ``nbytes`` (``spec.COPY_KINDS``),
    e.g. "h2d pinned non_blocking", "on-device cpu", "peer 0->1".
    """
    out = []
    # the suite's own copy kinds read as they always have; any other that spec declares, by its class's name
    prefix = {"HostDevice": "", "DeviceCopy": "on-device ", "PeerCopy": "peer "}
    for figure, kind_params in spec.COPY_KINDS.items():
        sub = _rows(frame, figure)
        if sub.empty:
            continue
        method = figure.benchmark.rsplit(".", 1)[-1]
        if figure.unit == spec.SECONDS:
            sub = sub.assign(value=spec.gbps(sub["nbytes"].astype(float), sub["value"]), source=f"nbytes / {method}")
        else:
            sub = sub.assign(source=method)
        kind = sub[list(kind_params)].astype(str).agg(" ".join, axis=1)
        # CUDA stages a copy from pageable memory through a pinned buffer and returns when it is
        # done: non_blocking=True asks for an asynchronous copy that does not happen
        kind = kind.str.replace("pageable non_blocking", PAGEABLE_NON_BLOCKING, regex=False)
        cls = figure.benchmark.split(".")[1]
        sub = sub.assign(copy=prefix.get(cls, f"{cls} ") + kind)
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
    direct = _rows(frame, spec.MATMUL_SPEEDUP)
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
    cols = list(spec.LOG_NORMS_TIME.params)
    t = _rows(frame, spec.LOG_NORMS_TIME)
    if t.empty:
        return pd.DataFrame(columns=[*KEYS, *cols, "ratio"])
    base = t[t["strategy"] == "on_device"][[*KEYS, "device", "steps", "n", "value"]]
    merged = t.merge(base, on=[*KEYS, "device", "steps", "n"], suffixes=("", "_on_device"))
    merged["ratio"] = merged["value"] / merged["value_on_device"]
    return merged[[*KEYS, *cols, "ratio"]].reset_index(drop=True)


def parallel_scaling(frame: pd.DataFrame) -> pd.DataFrame:
    """Sequential over parallel time, and that over its ideal (``spec.parallel_ideal``: the GPUs for ``gpus``,
    2 CPU threads, 1 for two streams on one GPU)."""
    seq = _rows(frame, spec.PARALLEL_SEQUENTIAL)
    par = _rows(frame, spec.PARALLEL_PARALLEL)
    cols = [*KEYS, "mode", "n", "lanes", "ideal", "speedup", "efficiency"]
    if seq.empty or par.empty:
        return pd.DataFrame(columns=cols)
    m = seq.merge(par[[*KEYS, "mode", "n", "value"]], on=[*KEYS, "mode", "n"], suffixes=("_seq", "_par"))
    gpus = pd.to_numeric(m.get("machine_gpu_count", pd.Series(2, index=m.index)), errors="coerce").fillna(2)
    m["lanes"] = np.where(m["mode"] == "gpus", np.maximum(gpus, 2), 2).astype(int)
    m["speedup"] = m["value_seq"] / m["value_par"]
    m["ideal"] = [spec.parallel_ideal(mode, lanes) for mode, lanes in zip(m["mode"], m["lanes"], strict=True)]
    m["efficiency"] = m["speedup"] / m["ideal"]
    return m[cols].reset_index(drop=True)


COLLECTIVE_COLUMNS = ["machine", "env", "runner", "backend", "world", "op", "nbytes", "time_us", "algbw", "busbw"]


def collective_bandwidth(frame: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Bus and algorithm bandwidth per op and size: the suite's ``Collectives`` tracks
    (``runner`` "asv"), and the latest ``python -m devbench.worlds.collectives`` file per
    machine, backend, world size and node count (``runner`` "torchrun", see
    ``load_collectives``)."""
    parts = []
    cols = list(spec.COLLECTIVE_BUSBW.params)
    bus = _rows(frame, spec.COLLECTIVE_BUSBW)
    if not bus.empty:
        alg = _rows(frame, spec.COLLECTIVE_ALGBW)
        tim = _rows(frame, spec.COLLECTIVE_TIME)
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


def _gpu_names(frame: pd.DataFrame) -> pd.Series:
    names = usable(frame).drop_duplicates("machine").set_index("machine")
    return names["machine_gpu"] if "machine_gpu" in names else pd.Series(dtype=object)


def achievable(frame: pd.DataFrame, searches: pd.DataFrame | None) -> pd.DataFrame:
    """Per machine, device and dtype: the best searched shape, its best (brief, as mamf-finder's table), burst
    and sustained TFLOP/s with the clock and power sampled while they ran, and (GPUs) the datasheet peak and
    achievable / datasheet."""
    cols = ["machine", "device", "dtype", "shape", "search_tflops", "best", "burst", "sustained",
            "best_mhz", "burst_mhz", "sustained_mhz", "best_w", "burst_w", "sustained_w", "datasheet", "of_datasheet",
            "env", "commit", "commit_short"]  # fmt: skip
    if searches is None or searches.empty:
        return pd.DataFrame(columns=cols)
    out = searches[["machine", "device", "dtype", "shape", "search_tflops"]].copy()
    sub = usable(latest(frame))
    sub = sub[sub["benchmark"] == spec.ACHIEVABLE_TFLOPS.benchmark]
    if not sub.empty and {"device", "dtype", "run"} <= set(sub.columns):  # no params without benchmarks.json
        extra = [c for c in ("gpu_mhz", "gpu_watts") if c in sub.columns]
        sub = sub[["machine", "device", "dtype", "run", "value", "env", "commit", "commit_short", *extra]]
        sub = sub.astype({"machine": str, "env": str, "commit": str, "commit_short": str})
        for run in ("best", "burst", "sustained"):
            r = sub[sub["run"] == run].drop(columns="run").drop_duplicates(["machine", "device", "dtype"], keep="last")
            if r.empty:  # not timed in this run (an older suite had no ``best``): its columns stay empty
                continue
            r = r.rename(columns={"value": run, "gpu_mhz": f"{run}_mhz", "gpu_watts": f"{run}_w"})
            if "commit" in out.columns:  # the run that timed burst and sustained: one asv run, one commit
                r = r.drop(columns=["env", "commit", "commit_short"])
            out = out.merge(r, on=["machine", "device", "dtype"], how="left")
    for c in cols:
        if c not in out.columns:
            out[c] = np.nan
    names = _gpu_names(frame)
    best = out[["search_tflops", "best", "burst", "sustained"]].max(axis=1)
    out["datasheet"] = [
        gpu_peak(str(names.get(m)), str(d)) if dev == "cuda" and names.get(m) is not None else None
        for m, dev, d in zip(out["machine"], out["device"], out["dtype"], strict=True)
    ]
    out["datasheet"] = pd.to_numeric(out["datasheet"], errors="coerce")
    out["of_datasheet"] = best / out["datasheet"]
    return out[cols].reset_index(drop=True)


def fraction_of_peak(
    frame: pd.DataFrame, throughput: pd.DataFrame | None = None, searches: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Measured TFLOP/s over a peak: the achievable figure (best searched shape) where the search's
    burst and sustained were timed at the same commit, machine and environment as the square figure,
    else a GPU's datasheet figure. A CPU with no such search gets no fraction (its own best would say
    100%), and ``peak_source`` says where its latest search was: a square figure of one commit over an
    achievable one of another mixes two runs of different code (the sample's VM bf16 squares of
    0fa10676 ran at a tenth of the search at 4a52877c: 9.9% "of peak").

    Unknown GPUs get no fraction (NaN), not an error.
    """
    tp = matmul_throughput(frame) if throughput is None else throughput
    cols = [*KEYS, "device", "dtype", "n", "tflops", "peak", "peak_source", "fraction"]
    if tp.empty:
        return pd.DataFrame(columns=cols)
    tp = tp.copy()
    names = _gpu_names(frame)
    tp["peak"] = np.nan
    tp["peak_source"] = ""
    for idx, row in tp[tp["device"] == "cuda"].iterrows():
        name = names.get(row["machine"])
        peak = gpu_peak(str(name) if name is not None else None, str(row["dtype"]))
        if peak:
            tp.loc[idx, ["peak", "peak_source"]] = [peak, f"datasheet ({name})"]
    ach = achievable(frame, searches)
    if not ach.empty:
        ach = ach.assign(top=ach[["search_tflops", "best", "burst", "sustained"]].max(axis=1))
        key = {(str(r.machine), str(r.device), str(r.dtype)): r for r in ach.itertuples()}
        for idx, row in tp.iterrows():
            hit = key.get((str(row["machine"]), str(row["device"]), str(row["dtype"])))
            if hit is None or not hit.top > 0:
                continue
            if (str(hit.env), str(hit.commit)) == (str(row["env"]), str(row["commit"])):
                # a ceiling is never below a product timed in the same run: a search made on a busy host, or
                # cut short, can read under a plain square product (the 0.023 against 0.105 TFLOP/s)
                mine = tp[["machine", "env", "commit", "device", "dtype"]].eq(
                    row[["machine", "env", "commit", "device", "dtype"]]
                ).all(axis=1)
                best = tp[mine].loc[tp[mine]["tflops"].astype(float).idxmax()]
                if float(best["tflops"]) > float(hit.top):
                    where = f"above the search's best ({hit.shape}, {hit.top:.4g})"
                    tp.loc[idx, ["peak", "peak_source"]] = [float(best["tflops"]), f"n={int(best['n'])}, {where}"]
                else:
                    tp.loc[idx, ["peak", "peak_source"]] = [hit.top, f"achievable ({hit.shape})"]
            elif pd.isna(tp.loc[idx, "peak"]):
                at = hit.commit_short if isinstance(hit.commit_short, str) else None  # NaN: a search, no results
                tp.loc[idx, "peak_source"] = (
                    f"no search at this commit (latest at {at})"
                    if at
                    else "no search at this commit (the latest has no burst or sustained result)"
                )
    tp["peak_source"] = tp["peak_source"].mask(tp["peak"].isna() & (tp["peak_source"] == ""), "no peak known")
    tp["fraction"] = tp["tflops"] / tp["peak"]
    return tp[cols].reset_index(drop=True)


def launch_split(frame: pd.DataFrame) -> pd.DataFrame:
    """Microseconds per call of each small task, four ways, and the split they give.

    ``work`` is the held figure (the device's own time), ``launch`` what queued calls
    cost beyond it (the host's launch rate, when it is the slower side), ``sync`` what a
    sync after every call adds beyond queued calls. A split needs its two figures; a
    negative difference (noise) is shown as 0.
    """
    rows = _rows(latest(frame), spec.LAUNCH_US)
    cols = ["machine", "env", "device", "task", "per_call", "queued", "held", "graph", "work", "launch", "sync"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    t = rows.pivot_table(index=["machine", "env", "device", "task"], columns="mode", values="value", aggfunc="last")
    t = t.reset_index()
    t.columns.name = None
    for c in ("per_call", "queued", "held", "graph"):
        if c not in t.columns:
            t[c] = np.nan
    order = {task: i for i, task in enumerate(("add 1", "add 1000", "matmul 64", "matmul 256"))}
    t = t.sort_values(
        ["machine", "env", "device", "task"], key=lambda c: c.map(order).fillna(99) if c.name == "task" else c
    )
    t["work"] = t["held"]
    t["launch"] = (t["queued"] - t["held"]).clip(lower=0)
    t["sync"] = (t["per_call"] - t["queued"]).clip(lower=0)
    return t[cols]


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


def health(frame: pd.DataFrame, throughput: pd.DataFrame, bandwidth: pd.DataFrame,
           collectives: pd.DataFrame | None = None, peers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each GPU machine's figures against what the machine should do (``devbench.records.expected``): the expected
    figure, the share, ``ok``/``low``/``unknown`` and why. Judged: host<->device, device and GPU -> GPU copies
    of 64 MiB and more (a GPU pair's copy with the path it took), the largest square product per dtype, the
    slowest and the median pair of the newest peer matrix (``peers``, ``records.load_peers``), and each NCCL
    collective's bus bandwidth at its largest size (``collectives``, ``collective_bandwidth``). A machine's
    PCIe link comes from its asv record's ``pcie`` (``devbench machine``); without it the host<->device
    figures are ``unknown``."""
    from devbench.records.expected import Health, judge

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
            if len(parts) >= 3:
                seen = state(r, spec.HOST_DEVICE_GBPS, direction=parts[0], memory=parts[1], mode=parts[2],
                             nbytes=int(r.nbytes))  # fmt: skip
                if seen.get("pcie_gen") and seen.get("pcie_width"):  # the link as trained under this copy
                    gpu = {**gpu, "pcie_gen": seen["pcie_gen"], "pcie_width": seen["pcie_width"]}
            if "pcie_gen" in gpu or "pageable" in kind:  # a pageable copy is not judged, link or no link
                health_ = judge(measured, kind[:3], gpu, pageable="pageable" in kind)
            else:
                health_ = Health("unknown", None, "the machine's asv record names no PCIe link (devbench machine "
                                 "records it)")  # fmt: skip
        elif kind == "on-device cuda":
            measured = 2 * float(r.gbps)  # the memory reads and writes every byte copied
            health_ = judge(measured, "device_copy", gpu)
            figure = f"device copy {spec.size_label(int(r.nbytes))}, read + written"
        elif kind.startswith("peer "):
            route, measured = kind.split(" ", 1)[1], float(r.gbps)
            path = paths.get((r.machine, r.env, r.commit, route, int(float(r.nbytes))))
            health_ = judge(measured, "peer", gpu, path=path)
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
            health_ = judge(float(r.tflops), f"matmul:{r.dtype}", gpu, throttle=seen.get("throttle"),
                            clock_mhz=seen.get("clock_mhz"))  # fmt: skip
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
                health_ = judge(float(r["gbps"]), "peer", gpu, path=path, pair=_pair_of(r))
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
            health_ = judge(float(r.busbw), "busbw", gpu, pair=_ring_pair(peers, str(r.machine), int(r.world)))
            figure = f"{r.op} busbw, {r.world} GPUs, {spec.size_label(int(r.nbytes))}"
            rows.append([where(r), figure, float(r.busbw), "GB/s", health_.verdict, health_.share, health_.reason])
    return pd.DataFrame(rows, columns=cols)


def _states_while_timed(frame: pd.DataFrame) -> dict[tuple, dict]:
    """(machine, env, commit, benchmark, params) -> the GPU state while that figure was timed: ``clock_mhz``,
    ``throttle`` (reasons) and ``pcie_gen``/``pcie_width`` (the link under that work), from the columns
    ``records.attach_gpu_state`` adds; rows without them are left out."""
    if "gpu_mhz" not in frame.columns:
        return {}
    out = {}
    cols = ["machine", "env", "commit", "benchmark", "params", "gpu_mhz", "gpu_reasons", "gpu_pcie_gen",
            "gpu_pcie_width"]  # fmt: skip
    sub = frame.reindex(columns=cols)
    for machine, env, commit, bench, params, mhz, reasons, gen, width in sub.itertuples(index=False):
        seen = {"clock_mhz": float(mhz) if pd.notna(mhz) else None,
                "throttle": [t for t in str(reasons).split(", ") if t] if isinstance(reasons, str) else [],
                "pcie_gen": int(gen) if pd.notna(gen) else None, "pcie_width": int(width) if pd.notna(width) else None}
        if any(v for v in seen.values()):
            out[(str(machine), str(env), str(commit), str(bench), str(params))] = seen
    return out


def _ring_pair(peers: pd.DataFrame | None, machine: str, world: int) -> Any:
    """The slowest pair (fewest NVLinks) of an NCCL ring of ``world`` ranks on ``machine`` (rank r to r + 1),
    from the NVML paths PeerMatrix recorded; None where it recorded none."""
    if peers is None or peers.empty or "nvlinks" not in peers:
        return None
    mine = peers[peers["machine"].astype(str) == machine]
    ring = [_pair_of(r) for _, r in mine.iterrows()
            if (int(r["src"]), int(r["dst"])) in {(k, (k + 1) % world) for k in range(world)}]  # fmt: skip
    ring = [p for p in ring if p is not None]
    return min(ring, key=lambda p: p.nvlinks) if ring else None


def _pair_of(row: Any) -> Any:
    """A peer matrix row's NVML path (``topology.PairPath``) where PeerMatrix recorded one, else None."""
    from devbench.records.topology import PairPath

    links = row.get("nvlinks")
    if links is None or not pd.notna(links):
        return None
    pcie = row.get("pcie")
    return PairPath(int(row["src"]), int(row["dst"]), int(links), bool(row.get("switched")),
                    str(pcie) if isinstance(pcie, str) else None)  # fmt: skip


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
    shares = {tuple(k): v for *k, v in share[[*key, "value"]].itertuples(index=False)}
    out = {}
    for *k, v in access[[*key, "value"]].itertuples(index=False):
        nvlink_share = shares.get(tuple(k))
        k[-1] = int(float(k[-1]))
        out[tuple(k)] = path_label(bool(float(v)), None, None if nvlink_share is None else float(nvlink_share))
    return out


def with_health(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``expected``, ``expected_source`` and ``health`` (ok, low, unknown, not judged) on the GPU
    figures the health section judges, every commit of them (the history's own normal); empty elsewhere. For the
    CSV and Parquet: one ``expected`` per machine and kind, each row judged at the state it ran in."""
    from devbench.records.expected import PAGEABLE_NOTE, expected, judge

    out = frame.assign(expected=np.nan, expected_source="", health="")
    if "machine_gpu" not in out or out.empty:
        return out
    bench, value = out["benchmark"].astype(str), pd.to_numeric(out["value"], errors="coerce")

    def col(name: str) -> pd.Series:
        return out[name].astype(str) if name in out else pd.Series("", index=out.index)

    nbytes = pd.to_numeric(out["nbytes"], errors="coerce") if "nbytes" in out else pd.Series(np.nan, index=out.index)
    n = pd.to_numeric(out["n"], errors="coerce") if "n" in out else pd.Series(np.nan, index=out.index)
    kinds = pd.Series("", index=out.index)
    copies = (bench == spec.HOST_DEVICE_GBPS.benchmark) & (nbytes >= HEALTH_MIN_BYTES)
    kinds[copies] = col("direction")[copies]
    device = (bench == spec.DEVICE_COPY_RW_GBPS.benchmark) & (col("device") == "cuda")
    kinds[device & (nbytes >= HEALTH_MIN_BYTES)] = "device_copy"
    products = (bench == spec.MATMUL_TFLOPS.benchmark) & (col("device") == "cuda") & (n >= HEALTH_MIN_N)
    kinds[products] = "matmul:" + col("dtype")[products]
    kinds[(bench == spec.PEER_COPY_GBPS.benchmark) & (nbytes >= HEALTH_MIN_BYTES)] = "peer"
    kinds[bench.isin([spec.PEER_MATRIX_SLOWEST.benchmark, spec.PEER_MATRIX_MEDIAN.benchmark])] = "peer"
    nccl = (bench == spec.COLLECTIVE_BUSBW.benchmark) & (col("backend") == "nccl")
    kinds[nccl & (nbytes >= HEALTH_MIN_BYTES)] = "busbw"
    pageable = copies & (col("memory") == "pageable")
    kinds[pageable] = "pageable"
    judged = (kinds != "") & value.notna()  # a skipped or failed run has no figure to judge
    if not judged.any():
        return out
    out.loc[pageable & judged, ["expected_source", "health"]] = [PAGEABLE_NOTE, "not judged"]
    judged &= ~pageable
    mhz = pd.to_numeric(out["gpu_mhz"], errors="coerce") if "gpu_mhz" in out else pd.Series(np.nan, index=out.index)
    reasons = col("gpu_reasons") if "gpu_reasons" in out else pd.Series("", index=out.index)
    for (_machine, kind), rows in out[judged].groupby([out["machine"][judged], kinds[judged]]).groups.items():
        first = out.loc[rows[0]]
        name = str(first["machine_gpu"]).split(" x ", 1)[-1]
        link = _link(first.get("machine_pcie"))
        gpu = {"name": name, **link}
        want = expected(kind, gpu)
        if kind in ("h2d", "d2h") and not link:
            want = type(want)(None, "no PCIe link in the machine's asv record (devbench machine records it)")
        if want.value is None:
            out.loc[rows, ["expected_source", "health"]] = [want.source, "unknown"]
            continue
        out.loc[rows, "expected"] = want.value
        out.loc[rows, "expected_source"] = want.source
        # each row judged as the health section judges it: a product at the clock its power cap held it to
        out.loc[rows, "health"] = [
            judge(float(value[i]), kind, gpu, throttle=[t for t in reasons[i].split(", ") if t and t != "nan"],
                  clock_mhz=float(mhz[i]) if pd.notna(mhz[i]) else None).verdict
            for i in rows
        ]  # fmt: skip
    return out
