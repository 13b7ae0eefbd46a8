"""Which figures a comparison measures: the user's ``--bench``, less what is never judged or cannot run here."""

from __future__ import annotations

import re

from devbench.compare.runner import Combination, Figure, combinations

#: parameter values that need CUDA (a device, a backend): on a machine without it every such combination skips
GPU_VALUES = ("cuda", "nccl")


def bench_pattern(bench: str | None, twins: bool, gpu: bool = True) -> str:
    """One regular expression over asv's ``name('value', ...)``: ``bench`` (all when None), without what a
    compare never judges.

    Left out: the twins (``spec.TWINS``) unless ``twins``; the records of the machine
    (``spec.RECORDS``: never judged); and, when ``gpu`` is false (no CUDA device for the
    benchmarks' Python), every combination with a value of ``GPU_VALUES``, each of which would
    cost two forked processes to skip.
    """
    from devbench.records.spec import RECORDS, TWINS

    left_out = set(RECORDS) | (set() if twins else set(TWINS))
    skip = "|".join(re.escape(k) for k in sorted(left_out))
    keep = f"(?=.*(?:{bench}))" if bench else ""
    no_gpu = "" if gpu else "(?!.*'(?:" + "|".join(GPU_VALUES) + ")')"
    return f"^{keep}{no_gpu}(?!(?:{skip})(?:\\(|$))"


def sees_cuda(counts: list[int | None]) -> bool:
    """Whether the benchmarks' torch sees a CUDA device, from each worker's count (``Worker.cuda_devices``);
    True when a count is unknown, so that nothing is left out."""
    return any(n is None or n > 0 for n in counts) or not counts


def plan_figures(base: dict[str, dict], head: dict[str, dict], pattern: str) -> list[Figure]:
    """A figure for every selected combination of either side's listing (``worker.py``'s).

    One that only one side has is not measured (it is new or gone); one whose benchmark's asv
    version differs between the sides is not measured either: the sides would time different
    work (its method, set-up or ``work_version`` changed), as ``asv compare`` marks with ``x``.
    """
    on_base = {(c.benchmark, c.values): c for c in combinations(base, pattern)}
    on_head = {(c.benchmark, c.values): c for c in combinations(head, pattern)}
    figures = []
    for key in sorted(on_base.keys() | on_head.keys()):
        combo: Combination = on_head.get(key) or on_base[key]
        fig = Figure(combo)
        name = combo.benchmark
        if key not in on_head:
            fig.state, fig.reason = "skip", "no result on head: the benchmark or parameter is gone"
        elif key not in on_base:
            fig.state, fig.reason = "skip", "no result on base: the benchmark or parameter is new"
        else:
            fig.base_idx = on_base[key].idx  # a value added or removed on head moves head's indices, not base's
            versions = (base[name].get("version", ""), head[name].get("version", ""))
            fig.versions = versions
            if versions[0] != versions[1]:
                fig.state, fig.reason = "changed", (
                    "benchmark changed: its asv version differs between base and head (its code or work_version "
                    "changed), so the sides would time different work"
                )
        figures.append(fig)
    return figures
