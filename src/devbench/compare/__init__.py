"""``devbench compare``: two commits measured in paired, time-adjacent turns, a verdict per figure.

How a comparison runs (docs/design.md, "Verdicts"), module by module:

1. ``cli``: the command line; ``options``: the run's settings as one frozen record.
2. ``export``: each commit's ``benchmarks/``, ``src/`` and ``asv.conf.json``, exported with
   ``git archive``; nothing is installed.
3. ``selection``: the figures asked for, less the machine's records, the twins and (without
   CUDA) the GPU combinations.
4. ``run``, ``runner`` and ``session``: passes of paired processes. In each pass one worker per
   side (``worker.py``, run in that side's tree) forks a process per combination; the two
   processes set up their workload (checked by the first process of each side), then take
   strict turns, A B A B ..., one block each.
5. ``stopping``: after each even pass, which figures stop (decided, certain to stay undecided,
   or screened: no longer decidable after ``robust_passes``, whatever one pair of processes read).
6. ``judge``: per figure, each pair of processes gives the median log ratio of its pairs of
   blocks; the change is their Hodges-Lehmann estimate with a distribution-free interval
   (``devbench.records.verdict``).
7. ``record``: the table, ``compare.md``, ``compare.csv``, ``pairs.csv`` and ``run.json``, and
   reading a finished one back (``--from``).
"""
