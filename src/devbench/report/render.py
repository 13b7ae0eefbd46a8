"""The report: Markdown for a pull request, an HTML page with the plots, the tidy CSV, PNG plots.

A report is a list of sections (title, text, table, plot) built once from the frame and
written in each format. Every file is written atomically: to a temporary file in the same
folder, flushed, then renamed over the old one, so a crash leaves the previous report or
the new one, never half of one. No torch import.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from asv.util import human_value

from devbench.files import write_atomic
from devbench.report import compare as C
from devbench.report import derive as D
from devbench.report.load import Loaded

FORMATS = ("md", "html", "csv", "png")

#: Rows of a long table shown before "... N more"; the CSV has everything.
MAX_ROWS = 40


@dataclass
class Section:
    title: str
    text: str = ""
    table: pd.DataFrame | None = None
    plot: str | None = None  # key into Report.plots
    more: int = 0  # rows left out of the table


@dataclass
class Report:
    title: str
    summary: list[str]
    sections: list[Section] = field(default_factory=list)
    plots: dict[str, bytes] = field(default_factory=dict)


# --- Helpers --------------------------------------------------------------------------------------------


def _human(value: float, unit: str | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "seconds":
        return human_value(value, "seconds")
    return f"{value:.4g}"


def _size(nbytes: float) -> str:
    n = int(nbytes)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _clip(table: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    if len(table) > MAX_ROWS:
        return table.head(MAX_ROWS), len(table) - MAX_ROWS
    return table, 0


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


def _where(df: pd.DataFrame) -> pd.Series:
    """A short label of machine (and environment, when there are several) per row."""
    if df["env"].nunique() > 1:
        return df["machine"].astype(str) + " / " + df["env"].astype(str)
    return df["machine"].astype(str)


# --- Sections -------------------------------------------------------------------------------------------


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
    return Section("Machines", "What each machine is, as asv and `devbench machine` recorded it.", t.astype(str))


def _throughput(frame: pd.DataFrame, tp: pd.DataFrame) -> Section | None:
    if tp.empty:
        return None
    t = tp.assign(where=_where(tp), col=tp["device"].astype(str) + " " + tp["dtype"].astype(str))
    table = t.pivot_table(index=["where", "n"], columns="col", values="tflops", aggfunc="first").reset_index()
    table.columns.name = None
    text = (
        "Square matmul, TFLOP/s (2n^3 per product), latest commit per machine; blank: skipped on that machine "
        "(the reason is in the run log)."
    )
    return Section("Matmul throughput (TFLOP/s)", text, table.round(4), plot="throughput")


def _peak(tp_frame: pd.DataFrame) -> Section | None:
    fp = tp_frame.dropna(subset=["fraction"])
    if fp.empty:
        return None
    t = fp.assign(where=_where(fp))
    best = t.sort_values("fraction").groupby(["where", "device", "dtype"], sort=True).tail(1)
    table = best[["where", "device", "dtype", "n", "tflops", "peak", "fraction", "peak_source"]].copy()
    table["fraction"] = (100 * table["fraction"]).round(1).astype(str) + "%"
    text = (
        "Best measured TFLOP/s against a peak: the datasheet dense figure for known GPUs (devbench.peaks), "
        "and for the CPU its own best measured figure. Unknown GPUs get no fraction."
    )
    return Section("Fraction of peak", text, table.round(4))


def _speedup(frame: pd.DataFrame, tp: pd.DataFrame) -> Section | None:
    sp = D.gpu_speedup(frame, tp)
    if sp.empty:
        return None
    cross = D.crossover(sp)
    t = sp.assign(where=_where(sp))
    table = t.pivot_table(index=["where", "n"], columns="dtype", values="speedup", aggfunc="first").reset_index()
    table.columns.name = None
    xs = ", ".join(
        f"{r.dtype}: n={int(r.crossover_n)}" if not math.isnan(r.crossover_n) else f"{r.dtype}: never"
        for r in cross.itertuples()
    )
    return Section("GPU / CPU speedup", f"GPU throughput over CPU per size. The GPU wins from: {xs}.", table.round(3))


def _by_size(df: pd.DataFrame, index: list[str], columns: str, values: str) -> pd.DataFrame:
    """One row per ``index`` and message size (shown as "4 KiB"), one column per value of ``columns``."""
    table = df.pivot_table(index=[*index, "nbytes"], columns=columns, values=values, aggfunc="first").reset_index()
    table.columns.name = None
    table["nbytes"] = table["nbytes"].map(_size)
    return table.rename(columns={"nbytes": "size"})


def _bandwidth(bw: pd.DataFrame) -> Section | None:
    if bw.empty:
        return None
    table = _by_size(bw.assign(where=_where(bw)), ["where"], "copy", "gbps")
    text = (
        "Decimal GB/s of bytes copied (nvbandwidth's convention); on-device copies also read what they write, so "
        "their read+write figure is twice this. `on-device cpu` is a host memory copy: the line host<->device "
        "copies are held against."
    )
    return Section("Copy bandwidth (GB/s)", text, table.round(3), plot="bandwidth")


def _logging(frame: pd.DataFrame) -> Section | None:
    lr = D.logging_ratio(frame)
    if lr.empty:
        return None
    t = lr.assign(where=_where(lr))
    table = t.pivot_table(
        index=["where", "device", "steps", "n"], columns="strategy", values="ratio", aggfunc="first"
    ).reset_index()
    table.columns.name = None
    text = "Loop time of each way of logging a norm per step, over keeping the norms on the device (1.0)."
    return Section("Logging: per step vs on the device", text, table.round(3))


def _parallel(frame: pd.DataFrame) -> Section | None:
    ps = D.parallel_scaling(frame)
    if ps.empty:
        return None
    t = ps.assign(where=_where(ps))
    table = t[["where", "mode", "n", "lanes", "speedup", "efficiency"]].copy()
    table["efficiency"] = (100 * table["efficiency"]).round(1).astype(str) + "%"
    return Section("Parallel scaling", "Sequential over parallel time of the same work; ideal = lanes.", table.round(3))


def _collectives(cb: pd.DataFrame) -> Section | None:
    if cb.empty:
        return None
    run = cb["runner"] + ", " + cb["backend"] + " x" + cb["world"].astype(str)
    table = _by_size(cb.assign(where=cb["machine"].astype(str), run=run), ["where", "run"], "op", "busbw")
    text = (
        "Bus bandwidth, decimal GB/s (nccl-tests: algorithm bandwidth = size / time, x 2(n-1)/n for all_reduce, "
        "x (n-1)/n for all_gather and reduce_scatter, x 1 for broadcast and the send/recv ring), every result "
        "checked on every rank. `asv`: the suite's local world; `torchrun`: `python -m devbench.collectives`."
    )
    return Section("Collectives: bus bandwidth (GB/s)", text, table.round(3), plot="collectives")


def _gpu_state(frame: pd.DataFrame) -> Section | None:
    if "gpu_throttled" not in frame.columns or frame["gpu_throttled"].isna().all():
        return None
    seen = frame[frame["gpu_throttled"].notna() & (frame["status"] == "ok")]
    bad = seen[seen["gpu_throttled"].astype(bool)]
    text = (
        f"{len(seen)} GPU figures of the latest results carry the GPU's NVML state (read after set-up and before "
        f"tear-down, with NVML's power and thermal violation counters); {len(bad)} were measured while the GPU "
        "was held back (an active throttle reason, or violation time that grew). nvbench discards such samples; "
        "devbench keeps them and lists them here."
    )
    if bad.empty:
        per = seen.groupby("machine", observed=True).agg(figures=("value", "size"), state=("gpu_state", "first"))
        return Section("GPU state", text, per.reset_index())
    table = bad.assign(where=_where(bad))[["where", "benchmark", "params", "value", "unit", "gpu_state"]]
    return Section("GPU state: figures measured while throttled", text, table)


def _changes(frame: pd.DataFrame, base: str, head: str, factor: float) -> Section:
    cmp = C.compare_commits(frame, base, head, factor)
    flagged = cmp[cmp["mark"].isin(["+", "-", "!", "*", "x"])]
    text = (
        f"`{base[:8]}` -> `{head[:8]}`, factor {factor}, asv compare's rule (ratio past the factor and 99% "
        f"confidence intervals apart). {len(flagged)} of {len(cmp)} results changed."
    )
    table = flagged[["mark", "change", "machine", "env", "benchmark", "params", "before", "after", "ratio", "unit"]]
    table = table.assign(
        before=[_human(v, u) for v, u in zip(table["before"], table["unit"], strict=True)],
        after=[_human(v, u) for v, u in zip(table["after"], table["unit"], strict=True)],
        ratio=table["ratio"].round(3),
    ).drop(columns="unit")
    clipped, more = _clip(table)
    return Section("Changes between commits", text, clipped, more=more)


def _across(frame: pd.DataFrame, by: str, factor: float) -> Section | None:
    if frame[by].nunique() < 2:
        return None
    cmp = C.compare_groups(latest_common(frame, by), by, factor)
    if cmp.empty:
        return None
    cmp = cmp.dropna(subset=["ratio"])
    label = "Machines" if by == "machine" else "Environments"
    table = cmp[[f"{by}_a", f"{by}_b", "benchmark", "params", "before", "after", "ratio", "mark", "change", "unit"]]
    table = table.assign(
        before=[_human(v, u) for v, u in zip(table["before"], table["unit"], strict=True)],
        after=[_human(v, u) for v, u in zip(table["after"], table["unit"], strict=True)],
        ratio=table["ratio"].round(3),
    ).drop(columns="unit")
    table = table.reindex(table["ratio"].sub(1).abs().sort_values(ascending=False).index)
    clipped, more = _clip(table)
    text = (
        f"Same commit, {by} B against {by} A (ratio B / A), largest differences first; the mark uses asv "
        f"compare's rule with factor {factor}."
    )
    return Section(f"{label} compared", text, clipped, more=more)


def latest_common(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    """Rows of the most recent commit that more than one ``by`` group ran."""
    groups = frame.groupby("commit")[by].nunique()
    shared = groups[groups > 1].index
    if shared.empty:
        return frame.iloc[0:0]
    sub = frame[frame["commit"].isin(shared)]
    last = sub.sort_values("date")["commit"].iloc[-1]
    return sub[sub["commit"] == last]


def _history(frame: pd.DataFrame, factor: float) -> tuple[Section | None, pd.DataFrame]:
    h = C.history(frame, factor)
    if h.empty:
        return None, h
    flagged = h[h["mark"].isin(["+", "-", "!", "*"])]
    text = (
        f"Each commit against the previous one on the same machine and environment; {len(flagged)} of {len(h)} "
        f"steps flagged by asv compare's rule (factor {factor})."
    )
    table = flagged[["machine", "env", "benchmark", "params", "commit_before", "commit_after", "ratio", "mark"]].copy()
    table["commit_before"] = table["commit_before"].str[:8]
    table["commit_after"] = table["commit_after"].str[:8]
    table["ratio"] = table["ratio"].round(3)
    clipped, more = _clip(table)
    return Section("History", text, clipped, plot="history", more=more), flagged


def _all_latest(frame: pd.DataFrame) -> Section:
    lat = latest(frame)
    ok = lat[lat["status"] == "ok"]
    table = ok[["machine", "env", "benchmark", "params", "value", "unit"]].astype({"unit": object})
    table["value"] = [_human(v, u) for v, u in zip(table["value"], table["unit"], strict=True)]
    table.loc[table["unit"] == "seconds", "unit"] = ""
    counts = lat["status"].value_counts()
    text = (
        f"Latest commit per machine and environment: {counts.get('ok', 0)} measured, "
        f"{counts.get('skipped', 0)} skipped (n/a), {counts.get('failed', 0)} failed. Every row is in the CSV."
    )
    clipped, more = _clip(table)
    return Section("Every benchmark (latest commit)", text, clipped, more=more)


# --- Plots ----------------------------------------------------------------------------------------------


def _figure_png(draw: Callable[[object], None], ncols: int = 1, nrows: int = 1) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(6.4 * ncols, 4.2 * nrows), squeeze=False)
    try:
        draw(axes)
        # fixed margins: tight_layout costs seconds with log axes and many ticks
        fig.subplots_adjust(left=0.13, right=0.98, bottom=0.14, top=0.9, wspace=0.22, hspace=0.55)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        return buf.getvalue()
    finally:
        plt.close(fig)


def _loglog_per_machine(
    df: pd.DataFrame, line: str, x: str, y: str, xlabel: str, ylabel: str, style: Callable[[str], str]
) -> bytes | None:
    """One log-log panel per machine (at most 4), one line per value of ``line``."""
    if df.empty:
        return None
    from matplotlib.ticker import FuncFormatter

    where = _where(df)
    wheres = sorted(where.unique())[:4]

    def draw(axes):
        for ax, w in zip(axes.flat, wheres, strict=False):
            for label, g in df[where == w].groupby(line):
                g = g.sort_values(x)
                ax.plot(g[x], g[y], marker="o", ls=style(str(label)), label=str(label))
            ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=w)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)

    return _figure_png(draw, ncols=len(wheres))


def plot_throughput(tp: pd.DataFrame) -> bytes | None:
    """TFLOP/s vs n per device and dtype (GPU solid, CPU dashed)."""
    lines = tp.assign(line=tp["device"].astype(str) + " " + tp["dtype"].astype(str))
    return _loglog_per_machine(
        lines, "line", "n", "tflops", "n (n x n @ n x n)", "TFLOP/s", lambda s: "-" if s.startswith("cuda") else "--"
    )


def plot_bandwidth(bw: pd.DataFrame) -> bytes | None:
    """GB/s vs bytes per copy kind (pinned solid, pageable dashed, on-device dotted)."""

    def style(copy: str) -> str:
        return "--" if "pageable" in copy else ":" if copy.startswith("on-device") else "-"

    return _loglog_per_machine(bw, "copy", "nbytes", "gbps", "bytes per copy", "GB/s (decimal)", style)


def plot_collectives(cb: pd.DataFrame) -> bytes | None:
    """Bus bandwidth vs size per op, one panel per machine (torchrun files dashed)."""
    if cb.empty:
        return None
    lines = cb.assign(
        env=cb["runner"] + " " + cb["backend"] + " x" + cb["world"].astype(str),
        line=cb["op"] + " (" + cb["runner"] + ")",
    )
    return _loglog_per_machine(
        lines, "line", "nbytes", "busbw", "message size (bytes)", "bus bandwidth, GB/s",
        lambda s: "-" if s.endswith("(asv)") else "--",
    )  # fmt: skip


def plot_history(frame: pd.DataFrame, flagged: pd.DataFrame, limit: int = 6) -> bytes | None:
    ok = frame[frame["status"] == "ok"]
    if ok["commit"].nunique() < 2:
        return None
    series = ["machine", "env", "benchmark", "params"]
    chosen = flagged[series].drop_duplicates().head(limit)
    if len(chosen) < limit:
        counts = ok.groupby(series, observed=True).size().sort_values(ascending=False).reset_index()[series]
        chosen = pd.concat([chosen, counts]).drop_duplicates().head(limit)
    ncols = 2 if len(chosen) > 1 else 1
    nrows = math.ceil(len(chosen) / ncols)

    picked = ok.merge(chosen.assign(_series=range(len(chosen))), on=series).sort_values("date")
    by_series = dict(list(picked.groupby("_series")))

    def draw(axes):
        for i, (ax, key) in enumerate(zip(axes.flat, chosen.itertuples(index=False), strict=False)):
            sub = by_series.get(i, picked.iloc[0:0])
            x = range(len(sub))
            ax.plot(x, sub["value"], marker="o", ms=3)
            if sub["ci_99_a"].notna().any():
                ax.fill_between(x, sub["ci_99_a"], sub["ci_99_b"], alpha=0.2)
            step = max(1, len(sub) // 8)  # at most ~8 commit labels per axis
            ax.set_xticks(list(x)[::step], sub["commit_short"].iloc[::step], rotation=45, fontsize=7)
            ax.set_title(f"{key.benchmark.split('.', 1)[-1]}\n{key.params} [{key.machine}]", fontsize=8)
            ax.set_ylabel(sub["unit"].iloc[0] if len(sub) else "")
            ax.grid(True, alpha=0.3)
        for ax in list(axes.flat)[len(chosen) :]:
            ax.set_visible(False)

    return _figure_png(draw, ncols=ncols, nrows=nrows)


# --- Building and writing -------------------------------------------------------------------------------


def build(
    loaded: Loaded,
    *,
    base: str | None = None,
    head: str | None = None,
    factor: float = 1.1,
    plots: bool = True,
) -> Report:
    """Every section for this frame; suite-specific ones only where their benchmarks ran."""
    f = loaded.frame
    cur = f[f["version_current"]]
    commits = C.commits_in(f)
    lat = latest(cur)
    counts = f["status"].value_counts()
    summary = [
        f"Results: `{loaded.results_dir}` - {f['machine'].nunique()} machine(s), {len(commits)} commit(s), "
        f"{f['env'].nunique()} environment(s), {len(f)} results ({counts.get('ok', 0)} measured, "
        f"{counts.get('skipped', 0)} skipped, {counts.get('failed', 0)} failed).",
    ]
    if commits:
        last = f[f["commit"] == commits[-1]]["date"].iloc[0]
        summary.append(f"Latest commit: `{commits[-1][:8]}` ({last:%Y-%m-%d}).")
    rep = Report("devbench report", summary)
    rep.sections.append(_machines(loaded))
    if loaded.problems:
        rep.sections.append(
            Section(
                "Problems",
                "These inputs were skipped or are left out of comparisons:",
                pd.DataFrame(
                    {
                        "file or benchmark": [p.path for p in loaded.problems],
                        "problem": [p.message for p in loaded.problems],
                    }
                ),
            )
        )
    tp = D.matmul_throughput(lat)
    bw = D.transfer_bandwidth(lat)
    cb = D.collective_bandwidth(lat, loaded.collectives)
    for sec in (
        _throughput(lat, tp),
        _peak(D.fraction_of_peak(lat, tp)),
        _speedup(lat, tp),
        _bandwidth(bw),
        _logging(lat),
        _parallel(lat),
        _collectives(cb),
        _gpu_state(lat),
    ):
        if sec is not None:
            rep.sections.append(sec)
    pair = (base, head) if base and head else C.default_pair(cur) if len(commits) >= 2 else None
    if pair is not None:
        rep.sections.append(_changes(cur, pair[0], pair[1], factor))
    for by in ("machine", "env"):
        sec = _across(cur, by, factor)
        if sec is not None:
            rep.sections.append(sec)
    hist, flagged = _history(cur, factor)
    if hist is not None:
        rep.sections.append(hist)
    rep.sections.append(_all_latest(cur))
    if plots:
        for key, png in (
            ("throughput", plot_throughput(tp)),
            ("bandwidth", plot_bandwidth(bw)),
            ("collectives", plot_collectives(cb)),
            ("history", plot_history(cur, flagged)),
        ):
            if png is not None:
                rep.plots[key] = png
    return rep


def _md_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "_none_"
    shown = table.astype(object).where(table.notna(), None)  # tabulate prints None as missingval
    return shown.to_markdown(index=False, floatfmt=".4g", missingval="n/a")


def to_markdown(rep: Report, plot_files: dict[str, str]) -> str:
    out = [f"# {rep.title}", "", *rep.summary, ""]
    for sec in rep.sections:
        out += [f"## {sec.title}", ""]
        if sec.text:
            out += [sec.text, ""]
        if sec.plot and sec.plot in plot_files:
            out += [f"![{sec.title}]({plot_files[sec.plot]})", ""]
        if sec.table is not None:
            out += [_md_table(sec.table), ""]
            if sec.more:
                out += [f"... and {sec.more} more rows in the CSV.", ""]
    return "\n".join(out)


CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}img{max-width:100%}code{background:#f3f3f3}"""


def to_html(rep: Report) -> str:
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(rep.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(rep.title)}</h1>",
    ]
    out += [f"<p>{html.escape(s)}</p>" for s in rep.summary]
    for sec in rep.sections:
        out.append(f"<h2>{html.escape(sec.title)}</h2>")
        if sec.text:
            out.append(f"<p>{html.escape(sec.text)}</p>")
        if sec.plot and sec.plot in rep.plots:
            data = base64.b64encode(rep.plots[sec.plot]).decode("ascii")
            out.append(f"<img alt='{html.escape(sec.title)}' src='data:image/png;base64,{data}'>")
        if sec.table is not None:
            out.append(sec.table.to_html(index=False, na_rep="n/a", float_format=lambda v: f"{v:.4g}", border=0))
            if sec.more:
                out.append(f"<p>... and {sec.more} more rows in the CSV.</p>")
    out.append("</body></html>")
    return "\n".join(out)


def to_csv(frame: pd.DataFrame) -> bytes:
    """The tidy frame as CSV: pyarrow's writer (C++, about 4x faster on large histories), else pandas'."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pa_csv
    except ImportError:
        return frame.to_csv(index=False).encode("utf-8")
    # Arrow formats a time zone-aware timestamp per value, slowly (over half the CSV's time
    # on a 500,000-row history); a history has few distinct times: format each once.
    dates = {}
    for col in frame.columns:
        if isinstance(frame[col].dtype, pd.DatetimeTZDtype):
            codes, uniques = pd.factorize(frame[col])
            dates[col] = pd.Categorical.from_codes(codes, [t.isoformat() for t in uniques])
    if dates:
        frame = frame.assign(**dates)
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), sink)
    return sink.getvalue().to_pybytes()


def write(rep: Report | None, loaded: Loaded, out_dir: Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write the chosen formats under ``out_dir``; return the files written (``rep`` may be None for csv only)."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format(s) {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    written: list[Path] = []
    plot_files: dict[str, str] = {}
    if "png" in formats:
        for key, png in rep.plots.items():
            path = out_dir / f"{key}.png"
            write_atomic(path, png)
            written.append(path)
            plot_files[key] = path.name
    if "csv" in formats:
        path = out_dir / "results.csv"
        write_atomic(path, to_csv(loaded.frame))
        written.append(path)
    if "md" in formats:
        path = out_dir / "report.md"
        write_atomic(path, to_markdown(rep, plot_files))
        written.append(path)
    if "html" in formats:
        path = out_dir / "report.html"
        write_atomic(path, to_html(rep))
        written.append(path)
    return written
