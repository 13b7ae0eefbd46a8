"""asv result histories into pandas, and the report made from them. Never imports torch.

- ``load.load_results(dir)``: one tidy frame of every machine, environment, commit,
  benchmark and parameter combination (asv's own ``asv.util.load_json`` reads the files);
- ``derive``: TFLOP/s and GB/s from times, GPU/CPU speedup and crossover, logging ratios,
  parallel scaling, fraction of peak;
- ``asvrule``: commit vs commit with asv compare's rule, machine vs machine, env vs env, history;
- ``sections``, ``plots``, ``writers``: the report's parts, drawn and written atomically as Markdown, HTML,
  CSV, Parquet and PNG; ``cli``: ``devbench report``.

The package itself imports nothing: ``devbench --help`` and every other command build their parsers
from ``report.cli`` without importing pandas or asv.
"""
