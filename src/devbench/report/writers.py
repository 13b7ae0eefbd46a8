"""The report's files: Markdown for a pull request, an HTML page with the plots, the tidy CSV, PNG plots.

Every file is written atomically: to a temporary file in the same folder, flushed, then
renamed over the old one, so a crash leaves the previous file or the new one, never half
of one. No torch.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from devbench.records.files import md_escape, write_atomic
from devbench.report.ceilings import with_ceilings
from devbench.report.health import with_health
from devbench.report.load import Loaded
from devbench.report.parts import Report

FORMATS = ("md", "html", "csv", "parquet", "png")
#: the tidy frame's own formats (written before the report's tables are built)
TABLE_FORMATS = ("csv", "parquet")

def _md_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "_none_"
    from tabulate import tabulate

    # rows as plain lists: tabulate prints None as its missingval, and a frame column would turn None back into NaN
    rows = [[md_escape(v) if isinstance(v, str) else None if _missing(v) else v for v in row]
            for row in table.astype(object).itertuples(index=False)]  # fmt: skip
    return tabulate(rows, [md_escape(str(c)) for c in table.columns], tablefmt="pipe", floatfmt=".4g",
                    missingval="n/a")  # fmt: skip


def _missing(value: object) -> bool:
    """None, NaN, pandas' NA or NaT: a cell with nothing measured."""
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and value != value)


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
        if sec.folded is not None and not sec.folded.empty:
            out += [f"<details><summary>{html.escape(sec.folded_title)}</summary>", "", _md_table(sec.folded), ""]
            out += ["</details>", ""]
    return "\n".join(out)


CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222;
line-height:1.45}p{max-width:75em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%}code{background:#f3f3f3;padding:0 .2em}details{margin:.5em 0}summary{cursor:pointer}"""


def _inline(text: str) -> str:
    """Our own sentences' Markdown (`code`, **bold**) as HTML, everything else escaped."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


_NUMBER_CELL = re.compile(r"<td>([-+]?[0-9][0-9.,]*(?:e[-+]?[0-9]+)?\s*(?:%|[a-zμ]*s|x)?)</td>")


def _html_table(table: pd.DataFrame) -> str:
    """An escaped HTML table; cells that are numbers (with a unit or %) are right-aligned."""
    out = table.to_html(index=False, na_rep="n/a", float_format=lambda v: f"{v:.4g}", border=0, escape=True)
    return _NUMBER_CELL.sub(r'<td class="num">\1</td>', out)


def to_html(rep: Report) -> str:
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(rep.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(rep.title)}</h1>",
    ]
    out += [f"<p>{_inline(s)}</p>" for s in rep.summary]
    for sec in rep.sections:
        out.append(f"<h2>{html.escape(sec.title)}</h2>")
        if sec.text:
            out.append(f"<p>{_inline(sec.text)}</p>")
        if sec.plot and sec.plot in rep.plots:
            data = base64.b64encode(rep.plots[sec.plot]).decode("ascii")
            out.append(f"<img alt='{html.escape(sec.title)}' src='data:image/png;base64,{data}'>")
        if sec.table is not None:
            out.append(_html_table(sec.table))
            if sec.more:
                out.append(f"<p>... and {sec.more} more rows in the CSV.</p>")
        if sec.folded is not None and not sec.folded.empty:
            out.append(
                f"<details><summary>{html.escape(sec.folded_title)}</summary>{_html_table(sec.folded)}</details>"
            )
    out.append("</body></html>")
    return "\n".join(out)


def as_text_where_mixed(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding more than one type (an int param in one benchmark, a str in another) as text.

    The frame keeps each benchmark's own types; a columnar file needs one type per column.
    Missing values stay missing.
    """
    fixed = {}
    for col in frame.columns:
        if frame[col].dtype == object:
            kind = pd.api.types.infer_dtype(frame[col], skipna=True)
            if kind not in ("string", "empty"):
                fixed[col] = frame[col].map(lambda v: v if v is None or (isinstance(v, float) and v != v) else str(v))
    return frame.assign(**fixed) if fixed else frame


def to_parquet(frame: pd.DataFrame) -> bytes:
    """The tidy frame as Parquet (pyarrow): a history pandas, polars or DuckDB read without asv's JSON."""
    import io

    buf = io.BytesIO()
    as_text_where_mixed(frame).to_parquet(buf, index=False, engine="pyarrow")
    return buf.getvalue()


def _mixed_columns(frame: pd.DataFrame) -> list[str]:
    """Object columns holding more than one type (see ``as_text_where_mixed``)."""
    return [
        col for col in frame.columns
        if frame[col].dtype == object and pd.api.types.infer_dtype(frame[col], skipna=True) not in ("string", "empty")
    ]  # fmt: skip


def _csv_ready(chunk: pd.DataFrame, mixed: Sequence[str]) -> pd.DataFrame:
    """``chunk`` with mixed columns as text and time-zone-aware times as ISO strings, each formatted once.

    (Arrow formats a time zone-aware timestamp per value, slowly: over half the CSV's time on
    a 500,000-row history, which has few distinct times.)
    """
    fixed = {c: chunk[c].map(lambda v: v if v is None or (isinstance(v, float) and v != v) else str(v)) for c in mixed}
    for col in chunk.columns:
        if isinstance(chunk[col].dtype, pd.DatetimeTZDtype):
            codes, uniques = pd.factorize(chunk[col])
            fixed[col] = (
                pd.Series(pd.Categorical.from_codes(codes, [t.isoformat() for t in uniques]), index=chunk.index)
                .astype(object)
                .where(codes >= 0, None)
            )
    return chunk.assign(**fixed) if fixed else chunk


#: rows converted and written at a time: the CSV is streamed, never held whole in memory
CSV_CHUNK_ROWS = 50_000


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """The tidy frame as CSV at ``path``, streamed in chunks with pyarrow's writer (C++, about 4x faster
    than pandas' on large histories), else pandas'. Write it inside a staged folder (``files.staged_dir``)."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pa_csv
    except ImportError:
        frame.to_csv(path, index=False)
        return
    mixed = _mixed_columns(frame)
    writer = schema = text = None
    try:
        for start in range(0, max(len(frame), 1), CSV_CHUNK_ROWS):
            chunk = _csv_ready(frame.iloc[start : start + CSV_CHUNK_ROWS], mixed)
            table = pa.Table.from_pandas(chunk, schema=schema, preserve_index=False)
            if writer is None:
                schema = table.schema
                # categorical columns as plain strings: Arrow's cast of each chunk and its writer's plain
                # strings take less than its writer on dictionaries (the same file, 0.1 s less on 500,000 rows)
                text = pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                                  for f in schema])  # fmt: skip
                writer = pa_csv.CSVWriter(str(path), text)
            writer.write_table(table.cast(text))
    finally:
        if writer is not None:
            writer.close()


def to_csv(frame: pd.DataFrame) -> bytes:
    """The tidy frame as CSV bytes (small frames; ``write_csv`` streams large ones to a file)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.csv"
        write_csv(frame, path)
        return path.read_bytes()


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
        part = out_dir / ".results.csv.part"  # renamed over the CSV when whole (the folder is staged too)
        write_csv(with_ceilings(with_health(loaded.frame, loaded.peers)), part)
        part.replace(path)
        written.append(path)
    if "parquet" in formats:
        path = out_dir / "results.parquet"
        write_atomic(path, to_parquet(with_ceilings(with_health(loaded.frame, loaded.peers))))
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
