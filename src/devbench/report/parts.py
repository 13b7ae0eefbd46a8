"""The report's building blocks: a section, the report, and how a figure and a long table are shown."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd
from asv.util import human_value

#: Rows of a long table shown before "... N more"; the CSV has everything.
MAX_ROWS = 40


@dataclass
class Section:
    title: str
    text: str = ""
    table: pd.DataFrame | None = None
    plot: str | None = None  # key into Report.plots
    more: int = 0  # rows left out of the table
    #: rows a reader may open but should not read as findings (undecided, noise): <details>
    folded: pd.DataFrame | None = None
    folded_title: str = ""


@dataclass
class Report:
    title: str
    summary: list[str]
    sections: list[Section] = field(default_factory=list)
    plots: dict[str, bytes] = field(default_factory=dict)


def _human(value: float, unit: str | None, with_unit: bool = True) -> str:
    """A figure as people read it: seconds scaled (asv's ``human_value``), others with their unit
    (``with_unit=False`` where the table has a unit column)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "seconds":
        return human_value(value, "seconds")
    number = f"{value:.4g}"
    return f"{number} {unit}" if with_unit and isinstance(unit, str) and unit else number


def _clip(table: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    if len(table) > MAX_ROWS:
        return table.head(MAX_ROWS), len(table) - MAX_ROWS
    return table, 0


def _pct(ratio: float) -> str:
    return "n/a" if pd.isna(ratio) else f"{100 * (ratio - 1):+.1f}%"


def sig(table: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Numbers to ``digits`` significant digits (4.848e-05, not a rounded 0): a table of figures that span
    a microsecond product and an 8,192 GPU product keeps both readable."""

    def one(x: object) -> object:
        if isinstance(x, float) and math.isfinite(x) and x != 0:
            return float(f"{x:.{digits}g}")
        return x

    return table.map(one)
