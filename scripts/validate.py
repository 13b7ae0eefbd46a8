#!/usr/bin/env python3
"""Thin entry point: ``python scripts/validate.py --help`` is ``devbench validate --help``."""

import sys

from devbench.validate import main

if __name__ == "__main__":
    sys.exit(main())
