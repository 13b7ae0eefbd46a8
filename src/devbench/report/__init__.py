"""asv result histories into pandas, and the report made from them. Never imports torch.

- ``load.load_results(dir)``: one tidy frame of every machine, environment, commit,
  benchmark and parameter combination (asv's own ``asv.util.load_json`` reads the files);
- ``derive``: TFLOP/s and GB/s from times, GPU/CPU speedup and crossover, logging ratios,
  parallel scaling, fraction of peak;
- ``compare``: commit vs commit with asv compare's rule, machine vs machine, env vs env, history;
- ``render``: Markdown, HTML, CSV and PNG, written atomically; ``cli``: ``devbench report``.
"""

from devbench.report.load import Loaded, ReportError, load_results

__all__ = ["Loaded", "ReportError", "load_results"]
