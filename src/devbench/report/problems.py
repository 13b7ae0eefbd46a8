"""What the report tells people about its input: a fatal error, or a problem it skipped. No torch."""

from __future__ import annotations

from dataclasses import dataclass


class ReportError(Exception):
    """Input the report cannot work with; the message names what is wrong."""


@dataclass
class Problem:
    """Something in the results the report could not use, kept for the warning and the report."""

    path: str
    message: str
    #: "input" (a file or record skipped), or "version" (results of an older version of a benchmark's code: kept
    #: in the tables, left out of comparisons; a note beside the comparisons, not a problem with the input)
    kind: str = "input"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"
