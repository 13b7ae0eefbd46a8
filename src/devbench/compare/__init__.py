"""``devbench compare``: two commits measured in paired, time-adjacent turns, a verdict per figure.

How a comparison runs (docs/design.md, "Verdicts"):

1. ``export``: each commit's ``benchmarks/`` and ``src/`` are exported with ``git archive``;
   nothing is installed.
2. ``selection``: the figures asked for, less the machine's records, the twins and (without
   CUDA) the GPU combinations.
3. ``runner`` and ``session``: passes of paired processes. In each pass one worker per side
   (``worker.py``, run in that side's tree) forks a process per combination; the two processes
   set up and check their workload, then take strict turns, A B A B ..., one block each.
4. ``judge``: per figure, each pair of processes gives the median log ratio of its pairs of
   blocks; the change is their Hodges-Lehmann estimate with a distribution-free interval
   (``devbench.verdict``); a figure stops once decided, once it can be neither faster nor slower
   (with ``--same``: once it can no longer be decided at all), or after the 2nd or 4th pass when
   its pairs of processes disagree (the screen: no longer decidable after 8).
5. ``output``: the table, ``compare.md``, ``compare.csv``, ``pairs.csv`` and ``run.json``.

``options`` holds the run's settings as one frozen record; ``command`` is the command line.
"""
