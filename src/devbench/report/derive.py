"""Figures asv does not compute: throughput from times, speedups, crossover, ratios, fraction of peak.

Each function takes the tidy frame of ``load_results`` and returns a small tidy frame
keyed by machine, environment and commit. Only rows with a value (``status == "ok"``) of
the current benchmark version are used. Benchmarks a function does not know are ignored,
so these are empty on other projects' results.
"""

from __future__ import annotations

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


def named(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows whose params ``benchmarks.json`` names: not a result whose benchmark it lists with another count of
    params, or not at all (``report.table`` labels those ``param0=...``), which no table can place. The tables
    take each machine's ``latest`` of these, so a newer unnamed run does not hide an older named one."""
    params = frame["params"]
    if isinstance(params.dtype, pd.CategoricalDtype):  # each label tested once, not once per row
        unnamed = params.cat.categories.astype(str).str.startswith("param0=")
        if not unnamed.any():
            return frame
        codes = params.cat.codes.to_numpy()
        return frame[~(np.asarray(unnamed)[codes] & (codes >= 0))]
    return frame[~params.astype(str).str.startswith("param0=")]


def where_label(df: pd.DataFrame) -> pd.Series:
    """A short label of machine (and environment, when there are several) per row."""
    if df["env"].nunique() > 1:
        return df["machine"].astype(str) + " / " + df["env"].astype(str)
    return df["machine"].astype(str)


def usable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with a value (each machine's latest, ``latest``, whichever version of the code measured them: the
    tables show what each machine last measured; only the comparisons keep to one version)."""
    return frame[frame["status"] == "ok"]


def _rows(frame: pd.DataFrame, figure: spec.Figure) -> pd.DataFrame:
    """The usable rows of one figure, with its params as columns (none when it was not measured)."""
    cols = figure.params
    sub = usable(frame)
    sub = sub[sub["benchmark"] == figure.benchmark]
    missing = [c for c in cols if c not in sub.columns]
    if sub.empty or missing:
        return pd.DataFrame(columns=[*KEYS, *cols, "value"])
    # rows without the figure's params (a result file newer than benchmarks.json: asv names them ``param0``...)
    # cannot be placed in its table
    sub = sub.dropna(subset=list(cols))
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


#: what a pageable non_blocking copy is labelled: the driver stages it through a pinned buffer while the host waits
#: (to host: until it is done; to a GPU: until the last piece is staged), whatever it asked for
PAGEABLE_NON_BLOCKING = "pageable non_blocking (staged: the host waits)"


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
    achievable / datasheet. A row for every figure asv recorded, with or without the search's side records
    (``searches``: the shape and the search's own figure)."""
    cols = ["machine", "device", "dtype", "shape", "search_tflops", "best", "burst", "sustained",
            "best_mhz", "burst_mhz", "sustained_mhz", "best_w", "burst_w", "sustained_w", "datasheet", "of_datasheet",
            "env", "commit", "commit_short"]  # fmt: skip
    keys = ["machine", "device", "dtype"]
    if searches is None or searches.empty:
        out = pd.DataFrame(columns=[*keys, "shape", "search_tflops"])
    else:
        out = searches[[*keys, "shape", "search_tflops"]].copy()
    out = out.astype({k: str for k in keys})
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
            out = out.merge(r.astype({k: str for k in keys}), on=keys, how="outer")
    if out.empty:
        return pd.DataFrame(columns=cols)
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
                    shape = f"{hit.shape}, " if isinstance(hit.shape, str) else ""
                    where = f"above the search's best ({shape}{hit.top:.4g})"
                    tp.loc[idx, ["peak", "peak_source"]] = [float(best["tflops"]), f"n={int(best['n'])}, {where}"]
                else:
                    shape = f" ({hit.shape})" if isinstance(hit.shape, str) else ""  # NaN: no search record kept
                    tp.loc[idx, ["peak", "peak_source"]] = [hit.top, f"achievable{shape}"]
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


