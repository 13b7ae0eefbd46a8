#!/usr/bin/env python3
"""Thin entry point: ``python scripts/report.py --help`` is ``devbench report --help``."""

import sys

from devbench.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
