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

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"
