"""The report's PNG plots: throughput and bandwidth against size, collectives, history. No torch."""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import pandas as pd

from devbench.records.spec import direction, size_label
from devbench.report.derive import where_label


def _figure_png(draw: Callable[[object], None], ncols: int = 1, nrows: int = 1, tight: bool = True) -> bytes:
    """The figure ``draw`` fills, as PNG bytes; ``tight``: cropped to what it drew, a legend under a panel whole
    (matplotlib lays the figure out twice for it: a third of the history plot's time, whose legends sit inside)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # names and params come from results: "$" in them is text, never mathtext
    with matplotlib.rc_context({"text.parse_math": False}):
        return _draw(plt, draw, ncols, nrows, tight)


def _draw(plt, draw: Callable[[object], None], ncols: int, nrows: int, tight: bool = True) -> bytes:
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.4 * ncols, 4.2 * nrows), squeeze=False)
    try:
        draw(axes)
        # fixed margins: tight_layout costs seconds with log axes and many ticks; uncropped, margins in inches
        # (a title's two lines above, rotated commit labels below, tick labels and the unit to the left)
        width, height = 6.4 * ncols, 4.2 * nrows
        margins = {"left": 0.13, "right": 0.98, "bottom": 0.14, "top": 0.9} if tight else \
            {"left": 0.75 / width, "right": 1 - 0.15 / width, "bottom": 0.7 / height, "top": 1 - 0.45 / height}
        fig.subplots_adjust(wspace=0.22, hspace=0.55, **margins)
        buf = io.BytesIO()
        # zlib's fastest level: the same pixels, a fifth larger, a third less of savefig's time
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight" if tight else None,
                    pil_kwargs={"compress_level": 1})  # fmt: skip
        return buf.getvalue()
    finally:
        plt.close(fig)


def _loglog_per_machine(
    df: pd.DataFrame,
    line: str,
    x: str,
    y: str,
    xlabel: str,
    ylabel: str,
    style: Callable[[str], str],
    xfmt: Callable[[float], str] = lambda v: f"{v:g}",
    peaks: Callable[[pd.DataFrame], dict[str, float]] | None = None,
) -> bytes | None:
    """One log-log panel per machine (at most 4), one line per value of ``line``; plain tick labels."""
    if df.empty:
        return None
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    where = where_label(df)
    wheres = sorted(where.unique())[:4]

    def draw(axes):
        for ax, w in zip(axes.flat, wheres, strict=False):
            sub = df[where == w]
            for i, (label, g) in enumerate(sub.groupby(line)):
                g = g.sort_values(x)
                ax.plot(g[x], g[y], marker="o", ls=style(str(label)), label=str(label), color=f"C{i % 10}")
                for name, peak in (peaks(g) if peaks else {}).items():
                    ax.axhline(peak, ls=":", lw=1, color=f"C{i % 10}", label=name)
            ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=w)
            ticks = sorted(set(sub[x].astype(float)))
            ax.xaxis.set_major_locator(FixedLocator(ticks[:: max(1, len(ticks) // 8)]))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: xfmt(v)))
            ax.xaxis.set_minor_formatter(NullFormatter())
            lo, hi = ax.get_ylim()
            if hi < 100 * lo:  # two decades or less: 1, 2, 5 labels, else one value may be all there is
                ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="both", alpha=0.3)
            entries = len(ax.get_legend_handles_labels()[1])
            if entries > 6:  # a long legend under the panel: not over its data, nor the next panel's axis
                ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, borderaxespad=0.0)
            else:
                ax.legend(fontsize=7, loc="best")

    return _figure_png(draw, ncols=len(wheres))


def _datasheet(g: pd.DataFrame) -> dict[str, float]:
    """The datasheet dense peak of this GPU line's dtype (none for CPU lines and unknown GPUs)."""
    from devbench.records.expected import gpu_peak

    if g.empty or str(g["device"].iloc[0]) != "cuda" or "machine_gpu" not in g.columns:
        return {}
    peak = gpu_peak(str(g["machine_gpu"].iloc[0]), str(g["dtype"].iloc[0]))
    return {f"datasheet {g['dtype'].iloc[0]}": peak} if peak else {}


def plot_throughput(tp: pd.DataFrame) -> bytes | None:
    """TFLOP/s vs n per device and dtype (GPU solid, CPU dashed, datasheet peaks dotted)."""
    lines = tp.assign(line=tp["device"].astype(str) + " " + tp["dtype"].astype(str))
    return _loglog_per_machine(
        lines, "line", "n", "tflops", "n (n x n @ n x n)", "TFLOP/s (higher is better)",
        lambda s: "-" if s.startswith("cuda") else "--", peaks=_datasheet,
    )  # fmt: skip


def plot_bandwidth(bw: pd.DataFrame) -> bytes | None:
    """GB/s vs bytes per copy kind (pinned solid, pageable dashed, on-device dotted)."""

    def style(copy: str) -> str:
        return "--" if "pageable" in copy else ":" if copy.startswith("on-device") else "-"

    return _loglog_per_machine(
        bw, "copy", "nbytes", "gbps", "bytes per copy", "GB/s, decimal (higher is better)", style, xfmt=size_label
    )


def plot_collectives(cb: pd.DataFrame) -> bytes | None:
    """Bus bandwidth vs size per op, one panel per machine (torchrun files dashed)."""
    if cb.empty:
        return None
    lines = cb.assign(
        env=cb["runner"] + " " + cb["backend"] + " x" + cb["world"].astype(str),
        line=cb["op"] + " (" + cb["runner"] + ")",
    )
    return _loglog_per_machine(
        lines, "line", "nbytes", "busbw", "message size", "bus bandwidth, GB/s (higher is better)",
        lambda s: "-" if s.endswith("(asv)") else "--", xfmt=size_label,
    )  # fmt: skip


def plot_history(frame: pd.DataFrame, steps: pd.DataFrame, limit: int = 6) -> bytes | None:
    """The series with the largest detected steps, each normalised to its first commit, each of its steps marked."""
    if steps.empty:
        return None
    series = ["machine", "env", "benchmark", "params"]
    chosen = steps.drop_duplicates(series).head(limit)
    # the chosen series' rows first (a benchmark-name test), then the rest of the key: not the whole frame
    ok = frame[frame["benchmark"].isin(set(chosen["benchmark"]))]
    ok = ok[ok["status"] == "ok"]
    ncols = 2 if len(chosen) > 1 else 1
    nrows = math.ceil(len(chosen) / ncols)

    def draw(axes):
        for ax, step in zip(axes.flat, chosen.itertuples(index=False), strict=False):
            sel = (ok["machine"] == step.machine) & (ok["env"] == step.env)
            sel &= (ok["benchmark"] == step.benchmark) & (ok["params"] == step.params)
            sub = ok[sel].sort_values(["date", "commit"], kind="stable")
            first = float(sub["value"].iloc[0])
            x = list(range(len(sub)))
            ax.plot(x, sub["value"] / first, marker="o", ms=3)
            if sub["ci_99_a"].notna().any():
                ax.fill_between(x, sub["ci_99_a"] / first, sub["ci_99_b"] / first, alpha=0.2)
            commits = sub["commit"].tolist()
            one_sample = sub["ci_99_a"].isna().all() or ("repeat" in sub and (sub["repeat"] == 1).all())
            mine = (steps["machine"] == step.machine) & (steps["env"] == step.env)
            mine &= (steps["benchmark"] == step.benchmark) & (steps["params"] == step.params)
            faint = False
            for found in steps[mine].itertuples(index=False):  # every step of the series, not only its largest
                if found.commit_after not in commits:
                    continue
                i = commits.index(found.commit_after)
                # a step inside the interval of the point it starts at is drawn faint: the data barely hold it
                lo, hi = sub["ci_99_a"].iloc[i], sub["ci_99_b"].iloc[i]
                wide = bool(lo == lo and hi == hi and lo > 0 and hi / lo > max(found.ratio, 1 / found.ratio))
                ax.axvline(i - 0.5, color="0.6" if wide else "C3", ls=":" if wide else "--", lw=1,
                           label="step inside its interval" if wide and not faint else None)  # fmt: skip
                faint |= wide
            if faint:
                ax.legend(fontsize=6, loc="lower right")
            ax.set_ylim(0, 1.35 * float((sub["value"] / first).max()))  # a wide interval must not flatten the line
            step_every = max(1, len(sub) // 8)  # at most ~8 commit labels per axis
            ax.set_xticks(x[::step_every], sub["commit_short"].iloc[::step_every], rotation=45, fontsize=7)
            better = direction(step.benchmark, step.unit)
            title = f"{step.benchmark.split('.', 1)[-1]}\n{step.params} [{step.machine}]"
            if one_sample:
                title += " - one sample a point (--quick): no interval"
            ax.set_title(title, fontsize=8)
            ax.set_ylabel(f"{step.unit} / first ({better} is better)", fontsize=7)
            ax.grid(True, alpha=0.3)
        for ax in list(axes.flat)[len(chosen) :]:
            ax.set_visible(False)

    return _figure_png(draw, ncols=ncols, nrows=nrows, tight=False)  # its legends sit inside its panels


def plot_fleet(fleet: pd.DataFrame | None) -> bytes | None:
    """Each rank's deviation from the median of all ranks, per figure: bars, flagged ranks in red."""
    if fleet is None or fleet.empty:
        return None
    machines = sorted(fleet["machine"].unique())[:4]

    def draw(axes):
        for ax, machine in zip(axes.flat, machines, strict=False):
            sub = fleet[fleet["machine"] == machine]
            figures = list(dict.fromkeys(sub["figure"]))
            ranks = sorted(sub["rank"].unique())
            width = 0.8 / max(1, len(ranks))
            for j, rank in enumerate(ranks):
                g = sub[sub["rank"] == rank].set_index("figure").reindex(figures)
                colors = ["C3" if f else "C0" for f in g["flagged"].fillna(False)]
                xs = [i + (j - (len(ranks) - 1) / 2) * width for i in range(len(figures))]
                bars = ax.bar(xs, 100 * g["deviation"].fillna(0), width=width * 0.9, color=colors)
                if len(ranks) <= 16:
                    ax.bar_label(bars, labels=[f"rank {rank}"] * len(figures), fontsize=7, padding=2)
            ax.axhline(0, color="k", lw=0.8)
            ax.grid(True, axis="y", alpha=0.3)
            ax.set_xticks(range(len(figures)), [f.replace("_", " ") for f in figures], fontsize=8)
            ax.set(ylabel="% from the median of all ranks", title=f"{machine}: {len(ranks)} ranks at once; "
                   "higher is better; red = flagged slow")  # fmt: skip

    return _figure_png(draw, ncols=len(machines))
