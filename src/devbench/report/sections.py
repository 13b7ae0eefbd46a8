"""The report's sections: each a title, a sentence, a table and maybe a plot, built once from the frame.

``build`` picks the sections that apply (suite-specific ones only where their
benchmarks ran) and the plots (``devbench.report.plots``); ``devbench.report.writers``
writes them as Markdown, HTML, CSV and PNG. No torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from devbench.records.spec import size_label
from devbench.report import asvrule as C
from devbench.report import changes as CH
from devbench.report import derive as D
from devbench.report import plots as P
from devbench.report import steps as ST
from devbench.report.ceilings import attribute
from devbench.report.derive import latest, where_label
from devbench.report.gpusections import _fleet, _gpu_state, _health, _peers
from devbench.report.load import Loaded
from devbench.report.parts import MAX_ROWS, Report, Section, _clip, _human, sig  # noqa: F401 - _human: tests
from devbench.report.records import newest_sweeps

# --- Sections -------------------------------------------------------------------------------------------


def _problem_rows(problems: list) -> pd.DataFrame:
    """One row per kind of problem: the same message (its file counts aside) for many benchmarks is one row
    naming them, so that a history measured with older benchmark code does not fill the report's first page."""
    import re

    groups: dict[str, list] = {}
    for p in problems:
        groups.setdefault(re.sub(r"^\d+ ", "N ", p.message), []).append(p)
    rows = []
    for key, members in groups.items():
        if len(members) == 1:
            rows.append((members[0].path, members[0].message))
            continue
        names = [m.path for m in members]
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        message = key.replace("N result file(s)", "some result files")
        rows.append((f"{len(names)} benchmarks or files: {shown}", message))
    return pd.DataFrame({"file or benchmark": [r[0] for r in rows], "problem": [r[1] for r in rows]})

def _machines(loaded: Loaded) -> Section:
    f = loaded.frame
    wanted = ("gpu", "gpu_count", "cuda", "driver", "cpu", "num_cpu")
    cols = [f"machine_{c}" for c in wanted if f"machine_{c}" in f.columns]
    t = f.drop_duplicates("machine")[["machine", *cols]].rename(columns=lambda c: c.removeprefix("machine_"))
    envs = f.groupby("machine")["env"].nunique().rename("envs")
    commits = f.groupby("machine")["commit"].nunique().rename("commits")
    t = t.merge(envs, on="machine").merge(commits, on="machine")
    if f["torch_version"].notna().any():
        tv = (
            f.dropna(subset=["torch_version"])
            .groupby("machine")["torch_version"]
            .agg(lambda s: ", ".join(sorted(set(map(str, s)))))
        )
        t = t.merge(tv.rename("torch (imported)"), on="machine", how="left")
        t = t.fillna({"torch (imported)": "not recorded"})
    return Section("Machines", "What each machine is, as asv and `devbench machine` recorded it.", t.astype(str))


def _throughput(frame: pd.DataFrame, tp: pd.DataFrame) -> Section | None:
    if tp.empty:
        return None
    t = tp.assign(where=where_label(tp), col=tp["device"].astype(str) + " " + tp["dtype"].astype(str))
    table = t.pivot_table(index=["where", "n"], columns="col", values="tflops", aggfunc="first").reset_index()
    table.columns.name = None
    text = (
        "Square matmul, TFLOP/s (2n^3 per product), latest commit per machine; blank: skipped on that machine "
        "(the reason is in the run log). A sustained figure: blocks of about 0.1 s back to back after warm-up "
        "(the burst figure, from idle, is in the achievable table); on a GPU, products shorter than 100 us are "
        "timed with the stream held, so they are the device's time without the launch. Plot: higher is better; "
        "GPU solid, CPU dashed, a GPU's datasheet dense "
        "peak for each dtype dotted (devbench.records.expected); both axes logarithmic."
    )
    return Section("Matmul throughput (TFLOP/s)", text, sig(table), plot="throughput")


def _peak(tp_frame: pd.DataFrame) -> Section | None:
    # rows with a fraction, and those a search at another commit could not divide (they say where it was)
    other_run = tp_frame["peak_source"].astype(str).str.startswith("no search at this commit")
    fp = tp_frame[tp_frame["fraction"].notna() | other_run]
    if fp.empty:
        return None
    t = fp.assign(where=where_label(fp))
    order = t.sort_values(["fraction", "tflops"], na_position="first")
    best = order.groupby(["where", "device", "dtype"], sort=True).tail(1).sort_values("fraction", na_position="last")
    table = best[["where", "device", "dtype", "n", "tflops", "peak", "fraction", "peak_source"]].copy()
    table["fraction"] = [f"{100 * f:.1f}%" if pd.notna(f) else "n/a" for f in table["fraction"]]
    table["peak"] = [f"{p:.4g}" if pd.notna(p) else "n/a" for p in table["peak"]]
    text = (
        "Best measured square-matmul TFLOP/s against a peak: the achievable figure (the best shape "
        "bench_achievable found on that device and dtype, burst, sustained or search, whichever is highest) "
        "where its burst and sustained ran at the same commit and environment as the square products, else a "
        "known GPU's datasheet dense figure (devbench.records.expected). Figures of two runs are not divided: they can "
        "differ in code and in the host's hour. A CPU without a search at its commit gets no fraction, and "
        "its row says where the latest search was; unknown GPUs get none either. A ceiling is never below a "
        "product timed in the same run: where a square product beat the search's best (a search on a busy "
        "host), that product is the peak and the row says so."
    )
    return Section("Fraction of peak", text, sig(table))


def _achievable(ach: pd.DataFrame) -> Section | None:
    if ach.empty:
        return None
    t = ach.assign(of_datasheet=ach["of_datasheet"].map(lambda f: None if pd.isna(f) else f"{100 * f:.1f}%"),
                   shape=ach["shape"].map(lambda s: s if isinstance(s, str) and s and s != "nan" else "not recorded"))
    searched = sorted(ach.loc[ach["search_tflops"].notna(), "machine"].astype(str).unique())
    t = t.drop(columns=["env", "commit", "commit_short"], errors="ignore")  # the run, for fraction_of_peak
    t = t.rename(columns={"machine": "where", "shape": "best shape (m x k x n)", "search_tflops": "search",
                          "datasheet": "datasheet", "of_datasheet": "achievable / datasheet"})  # fmt: skip
    text = (
        "The fastest matmul found by a bounded search over shapes (m x k x n around the sizes cuBLAS and MKL "
        "favour, every product checked against float64; mamf-finder's question), TFLOP/s, higher is better. "
        "`search`: the best shape's figure during the search (its 3 fastest shapes timed again for half a "
        "second each, the fastest of those: the fastest brief figure alone reads high); "
        "`best`: that shape timed as mamf-finder's table is made (a twentieth of a second of warm-up, then a "
        "tenth of a second of calls): compare this one with that table; `burst`: that shape after a second of "
        "idling, a quarter of a second of work; `sustained`: after five seconds of back-to-back work (power and "
        "heat settle: what a long training step gets). MHz and W: the median SM clock and board power sampled "
        "while the figure was timed (GPUs, NVML). `achievable / datasheet` uses the highest of these. Searched on: "
        + (", ".join(searched) or "none of these machines") + " (a machine without the search's own records, "
        "`.asv/achievable`, has its asv figures here and no shape)."
    )
    return Section("Maximum achievable matmul (TFLOP/s)", text, sig(t.dropna(axis=1, how="all")))


def _speedup(frame: pd.DataFrame, tp: pd.DataFrame) -> Section | None:
    sp = D.gpu_speedup(frame, tp)
    if sp.empty:
        return None
    cross = D.crossover(sp)
    t = sp.assign(where=where_label(sp))
    table = t.pivot_table(index=["where", "n"], columns="dtype", values="speedup", aggfunc="first").reset_index()
    table.columns.name = None
    xs = ", ".join(
        f"{r.dtype}: n={int(r.crossover_n)}" if not math.isnan(r.crossover_n) else f"{r.dtype}: never"
        for r in cross.itertuples()
    )
    return Section("GPU / CPU speedup", f"GPU throughput over CPU per size. The GPU wins from: {xs}.", sig(table))


def _by_size(df: pd.DataFrame, index: list[str], columns: str, values: str) -> pd.DataFrame:
    """One row per ``index`` and message size (shown as "4 KiB"), one column per value of ``columns``."""
    table = df.pivot_table(index=[*index, "nbytes"], columns=columns, values=values, aggfunc="first").reset_index()
    table.columns.name = None
    table["nbytes"] = table["nbytes"].map(size_label)
    return table.rename(columns={"nbytes": "size"})


def _bandwidth(bw: pd.DataFrame) -> Section | None:
    if bw.empty:
        return None
    table = _by_size(bw.assign(where=where_label(bw)), ["where"], "copy", "gbps")
    text = (
        "Decimal GB/s of bytes copied (nvbandwidth's convention); on-device copies also read what they write, so "
        "their read+write figure is twice this. `on-device cpu` is a host memory copy: the line host<->device "
        "copies are held against. Plot: higher is better; pinned host memory solid, pageable dashed, on-device "
        "dotted; both axes logarithmic."
    )
    return Section("Copy bandwidth (GB/s)", text, sig(table), plot="bandwidth")


#: copies up to this size get a microseconds-per-copy table: below it a copy is latency, not bandwidth
LATENCY_MAX_BYTES = 1024 * 1024


def _latency(bw: pd.DataFrame) -> Section | None:
    small = bw[bw["nbytes"].astype(float) <= LATENCY_MAX_BYTES]
    small = small[small["gbps"] > 0]
    if small.empty:
        return None
    us = small.assign(us=small["nbytes"].astype(float) / (small["gbps"] * 1e3), where=where_label(small))
    table = _by_size(us, ["where"], "copy", "us")
    text = (
        "Microseconds per copy up to 1 MiB (the bandwidth figures above, as time): lower is better. On a GPU a "
        "copy shorter than 100 us is timed with its stream held by a spin kernel while the copies are queued "
        "(nvbandwidth's method), so this is the device's time per copy without the host's launch; copies the "
        "host waits for (pageable or blocking) include it. The launch itself is in the launch overhead table."
    )
    return Section("Small copies: latency (us)", text, sig(table))


def _launch(frame: pd.DataFrame) -> Section | None:
    ls = D.launch_split(frame)
    if ls.empty:
        return None
    t = ls.assign(where=where_label(ls)).drop(columns=["machine", "env"])
    t = t[["where", *[c for c in t.columns if c != "where"]]].dropna(axis=1, how="all")
    text = (
        "A small task's microseconds per call, lower is better: `per_call` syncs after every call (a loop that "
        "reads each result), `queued` runs calls back to back, `held` queues them behind a spin kernel (the "
        "device's own time), `graph` replays 32 calls from a CUDA graph. The split: `work` = held, `launch` = "
        "queued - held (what the host's launches cost beyond the work), `sync` = per_call - queued. On the CPU "
        "there is no queue to hold and no graph: work and launch are one."
    )
    return Section("Launch overhead of small tasks (us)", text, sig(t))


def _logging(frame: pd.DataFrame) -> Section | None:
    lr = D.logging_ratio(frame)
    if lr.empty:
        return None
    t = lr.assign(where=where_label(lr))
    table = t.pivot_table(
        index=["where", "device", "steps", "n"], columns="strategy", values="ratio", aggfunc="first"
    ).reset_index()
    table.columns.name = None
    text = "Loop time of each way of logging a norm per step, over keeping the norms on the device (1.0)."
    return Section("Logging: per step vs on the device", text, sig(table))


def _parallel(frame: pd.DataFrame) -> Section | None:
    ps = D.parallel_scaling(frame)
    if ps.empty:
        return None
    t = ps.assign(where=where_label(ps))
    table = t[["where", "mode", "n", "lanes", "ideal", "speedup", "efficiency"]].copy()
    table["efficiency"] = (100 * table["efficiency"]).round(1).astype(str) + "%"
    text = ("Sequential over parallel time of the same work; efficiency is the speedup over its ideal: one per "
            "device the lanes run on (two streams share one GPU, whose SMs a large product already fills: ideal 1).")
    return Section("Parallel scaling", text, table.round(3))


def _collectives(cb: pd.DataFrame) -> Section | None:
    if cb.empty:
        return None
    run = cb["runner"] + ", " + cb["backend"] + " x" + cb["world"].astype(str)
    table = _by_size(cb.assign(where=cb["machine"].astype(str), run=run), ["where", "run"], "op", "busbw")
    text = (
        "Bus bandwidth, decimal GB/s (nccl-tests: algorithm bandwidth = size / time, x 2(n-1)/n for all_reduce, "
        "x (n-1)/n for all_gather and reduce_scatter, x 1 for broadcast and the send/recv ring), every result "
        "checked on every rank. `asv`: the suite's local world; `torchrun`: `python -m devbench.worlds.collectives`. "
        "Plot: higher is better; the suite's runs solid, torchrun files dashed; both axes logarithmic."
    )
    return Section("Collectives: bus bandwidth (GB/s)", text, sig(table), plot="collectives")


def _drop_constant(table: pd.DataFrame | None) -> pd.DataFrame | None:
    """Without ``where``/``machine``/``env`` columns that hold one value (the Machines section names it)."""
    if table is None or len(table) == 0:
        return table
    same = [c for c in ("where", "machine", "env") if c in table.columns and table[c].nunique(dropna=False) <= 1]
    return table.drop(columns=same) if same else table


def _all_latest(frame: pd.DataFrame) -> Section:
    lat = latest(frame)
    ok = lat[lat["status"] == "ok"]
    table = ok[["machine", "env", "benchmark", "params", "value", "unit"]].astype({"unit": object})
    # every value with its unit (a time scaled as asv shows it: 5.13ms), so no row has a blank unit
    table["value"] = [_human(v, u) for v, u in zip(table["value"], table["unit"], strict=True)]
    table = table.drop(columns="unit")
    counts = lat["status"].value_counts()
    text = (
        f"Latest commit per machine and environment: {counts.get('ok', 0)} measured, "
        f"{counts.get('skipped', 0)} skipped (n/a), {counts.get('failed', 0)} failed. Every row is in the CSV."
    )
    clipped, more = _clip(table)
    return Section("Every benchmark (latest commit)", text, clipped, more=more)


# --- Building -------------------------------------------------------------------------------


def build(
    loaded: Loaded,
    *,
    pair: tuple[str, str] | None = None,
    factor: float = 1.1,
    plots: bool = True,
    verdicts: pd.DataFrame | None = None,
    verdicts_source: str = "",
    verdicts_host: str = "",
    steps: pd.DataFrame | None = None,
    drawn: Callable[[], dict[str, bytes]] | None = None,
) -> Report:
    """Every section for this frame; suite-specific ones only where their benchmarks ran.

    ``pair`` is the (base, head) of "Between two commits" (``compare.commit_pair``);
    ``verdicts`` a ``devbench compare`` table; ``steps`` the current results' ``steps.detect`` where the
    caller found them (else found here); ``drawn()`` returns the plots where they are drawn elsewhere
    (``devbench report`` draws them in a forked child while this builds the tables), else they are drawn
    here when ``plots``.
    """
    f = loaded.frame
    cur = f[f["version_current"]]  # what the comparisons read: asv's rule, one version of a benchmark's code
    commits = C.commits_in(f)
    lat = latest(D.named(f))  # what the tables read: what each machine measured last, by whichever version
    counts = f["status"].value_counts()
    where = loaded.results_dir.name if loaded.results_dir else "results"
    summary = [
        f"Results: `{where}` - {f['machine'].nunique()} machine(s), {len(commits)} commit(s), "
        f"{f['env'].nunique()} environment(s), {len(f)} results ({counts.get('ok', 0)} measured, "
        f"{counts.get('skipped', 0)} skipped, {counts.get('failed', 0)} failed).",
    ]
    if commits:
        last = f[f["commit"] == commits[-1]]["date"].iloc[0]
        summary.append(f"Latest commit: `{commits[-1][:8]}` ({last:%Y-%m-%d}).")
    rep = Report("devbench report", summary)
    rep.sections.append(_machines(loaded))
    if loaded.env_legend is not None and not loaded.env_legend.empty:
        legend = loaded.env_legend
        if legend["machine"].nunique() == 1:
            legend = legend.drop(columns="machine")
        text = "What each environment label stands for."
        if (legend[["python", "torch"]] == "not recorded").any(axis=None):
            text += (" `not recorded`: no run record of that environment beside these results (`.asv/runinfo`, "
                     "which the suite's `RunInfo` benchmark writes in every run, and gpu-run packs).")
        rep.sections.append(Section("Environments", text, legend))
    skipped = [p for p in loaded.problems if p.kind == "input"]
    if skipped:
        rep.sections.append(Section("Problems", "These inputs were skipped:", _problem_rows(skipped)))
    tp = D.matmul_throughput(lat)
    bw = D.transfer_bandwidth(lat)
    cb = D.collective_bandwidth(lat, loaded.collectives)
    for sec in (
        _throughput(lat, tp),
        _achievable(D.achievable(lat, loaded.achievable)),
        _peak(D.fraction_of_peak(lat, tp, loaded.achievable)),
        _speedup(lat, tp),
        _bandwidth(bw),
        _latency(bw),
        _launch(lat),
        _logging(lat),
        _parallel(lat),
        _collectives(cb),
        _fleet(loaded.fleet),
        _peers(newest_sweeps(loaded.peers) if loaded.peers is not None else None),
        _health(lat, tp, bw, cb, newest_sweeps(loaded.peers) if loaded.peers is not None else None),
        _gpu_state(lat),
    ):
        if sec is not None:
            rep.sections.append(sec)
    sec = CH.verdicts(verdicts, verdicts_source, verdicts_host)
    if sec is not None:
        rep.sections.append(sec)
    if pair is not None:
        rep.sections.append(CH.changes(cur, pair[0], pair[1], f))
    for by in ("machine", "env"):
        sec = CH.across(cur, by, factor)
        if sec is not None:
            rep.sections.append(sec)
    after = []  # the sections after the history's, built while the steps are still being found
    older = [p for p in loaded.problems if p.kind == "version"]
    if older:
        after.append(Section(
            "Benchmarks whose code changed within the history",
            f"{len(older)} benchmark(s) have results measured by an older version of their code (asv versions a "
            "benchmark by its source; devbench also by its work_version). The tables show what each machine measured "
            "last, by whichever version; the comparisons above leave out results of another version than "
            "benchmarks.json's, as asv does.", folded=pd.DataFrame({"benchmark": [p.path for p in older],
                                            "older results": [p.message.split(" ", 1)[0] for p in older]}),
            folded_title=f"the {len(older)} benchmarks"))  # fmt: skip
    after.append(_all_latest(f))
    found = steps if steps is not None else ST.detect(cur)
    hist, flagged = CH.history(cur, attribute(found, cur))
    rep.sections += [hist, *after] if hist is not None else after
    for sec in rep.sections:
        if sec.title in ("Machines", "Environments"):
            continue
        if not sec.more:  # a clipped table's rows may all be one machine's while the rest are not: keep who
            sec.table = _drop_constant(sec.table)
        sec.folded = _drop_constant(sec.folded)
    if drawn is not None:
        rep.plots.update(drawn())
    elif plots:
        rep.plots.update(plot_all(loaded, flagged))
    return rep


def plot_all(loaded: Loaded, steps: pd.DataFrame) -> dict[str, bytes]:
    """Every plot the report has data for, by name (``steps``: ``steps.detect`` of the current results)."""
    cur = loaded.frame[loaded.frame["version_current"]]
    lat = latest(D.named(loaded.frame))
    out = {}
    for key, png in (
        ("throughput", lambda: P.plot_throughput(D.matmul_throughput(lat))),
        ("bandwidth", lambda: P.plot_bandwidth(D.transfer_bandwidth(lat))),
        ("collectives", lambda: P.plot_collectives(D.collective_bandwidth(lat, loaded.collectives))),
        ("fleet", lambda: P.plot_fleet(loaded.fleet)),
        ("history", lambda: P.plot_history(cur, steps)),
    ):
        if (drawn := png()) is not None:
            out[key] = drawn
    return out
