#!/usr/bin/env python3
"""Thin entry point: ``python scripts/collectives.py --help`` is ``python -m devbench.collectives --help``.

Under torchrun: ``torchrun --nproc-per-node 2 scripts/collectives.py``.
"""

import sys

from devbench.collectives import main

if __name__ == "__main__":
    sys.exit(main())
