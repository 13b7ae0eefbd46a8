"""Each figure's 99% interval in two asv result files of the same suite, before and after a change of method.

    python scripts/research/intervals.py BEFORE.json AFTER.json [--values REGEX]

Pairs every figure of BEFORE with AFTER's (a ``time_`` figure with the ``track_`` figure that took its place,
``RENAMED``), leaves out the collectives (their sweep is not what changed), and prints, for the host-clock
figures and for the others, the median half-width of asv's 99% interval over the median, how many are within
0.5%, 1% and 5%, and the median number of samples; then the same per benchmark. With ``--values``, each figure
whose ``name(params)`` the regular expression matches, its value and interval in both files and their ratio,
and the range of the ratios (two GPU runs of one model: ``--values GPU_SAME`` names the pinned copies, device
copies and products of n >= 4,096 that should agree within 3%). Reads the JSON as asv wrote it; imports neither
asv nor torch.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
import sys

#: the time_ figures the measuring process renamed, and their track_ figures
RENAMED = {"time_matmul": "track_time", "time_copy": "track_time", "time_loop": "track_time",
           "time_add": "track_time", "time_forward": "track_time", "time_train_step": "track_time",
           "time_save": "track_save_time", "time_load": "track_load_time", "time_batch": "track_time",
           "time_move": "track_time", "time_read": "track_time", "time_parallel": "track_parallel_time",
           "time_sequential": "track_sequential_time"}  # fmt: skip


#: the figures two healthy GPUs of one model should give within 3% (``--values``): pinned host<->device copies,
#: device copies, and GPU products of n >= 4,096
GPU_SAME = (r"HostDevice\.track_gbps\('(h2d|d2h)', 'pinned'|DeviceCopy\.track_gbps_copied\('cuda'"
            r"|MatmulSquare\.track_tflops\('cuda', '\w+', (4096|8192)\)")


def figures(path: str) -> dict[tuple[str, int], tuple[str, float, float | None, int | None]]:
    """(benchmark, combination) -> (its params as asv names them, value, half of asv's 99% interval over the
    value, samples), for every figure with a value."""
    data = json.load(open(path))
    cols = data["result_columns"]
    out = {}
    for name, row in data["results"].items():
        r = dict(zip(cols, row, strict=False))
        values = r["result"] if isinstance(r["result"], list) else [r["result"]]
        lo = r.get("stats_ci_99_a") or [None] * len(values)
        hi = r.get("stats_ci_99_b") or [None] * len(values)
        reps = r.get("stats_repeat") or [None] * len(values)
        combos = list(itertools.product(*r["params"])) if r.get("params") else [()]
        for i, v in enumerate(values):
            if v is None or (isinstance(v, float) and math.isnan(v)) or v == 0:
                continue
            width = (hi[i] - lo[i]) / 2 / abs(v) if lo[i] is not None and hi[i] is not None else None
            out[(name, i)] = (", ".join(combos[i]) if i < len(combos) else "", v, width, reps[i])
    return out


def load(path: str) -> dict[tuple[str, int], tuple[float, int | None]]:
    """(benchmark, combination) -> (half of asv's 99% interval over the median, samples)."""
    return {k: (w, n) for k, (_, _, w, n) in figures(path).items() if w is not None}


def values(before_path: str, after_path: str, pattern: str) -> None:
    """Each figure both files hold whose ``name(params)`` ``pattern`` matches: its value and interval in each, and
    AFTER over BEFORE; then the range of those ratios and the figures more than 3% apart."""
    before, after = figures(before_path), figures(after_path)
    rows = []
    for key, (params, v0, w0, _) in sorted(before.items()):
        if key not in after or not re.search(pattern, f"{key[0]}({params})"):
            continue
        _, v1, w1, _ = after[key]
        rows.append((key[0], params, v0, w0, v1, w1, v1 / v0))
    if not rows:
        print(f"no figure of both files matches {pattern!r}")
        return
    def pct(w): return f"+-{w:.1%}" if w is not None else "(no interval)"  # noqa: E704
    for name, params, v0, w0, v1, w1, ratio in rows:
        print(f"{name.split('.', 1)[1]:40s} {params:45s} {v0:10.4g} {pct(w0):>13s} {v1:10.4g} {pct(w1):>13s}  "
              f"{ratio:.3f}")  # fmt: skip
    ratios = [r[-1] for r in rows]
    apart = [f"{r[0].split('.', 1)[1]}({r[1]})" for r in rows if abs(r[-1] - 1) > 0.03]
    print(f"\n{len(rows)} figures: AFTER / BEFORE {min(ratios):.3f}-{max(ratios):.3f}; "
          f"{len(apart)} more than 3% apart{': ' + '; '.join(apart) if apart else ''}")  # fmt: skip


def renamed(name: str) -> str:
    cls, method = name.rsplit(".", 1)
    return f"{cls}.{RENAMED.get(method, method)}"


def main(before_path: str, after_path: str) -> None:
    before, after = load(before_path), load(after_path)
    pairs: dict[str, list] = {}
    for (name, i), (width, reps) in before.items():
        twin = (name, i) if (name, i) in after else (renamed(name), i)  # the same figure, or what took its place
        if "Collectives" in name or twin not in after:
            continue
        pairs.setdefault(name, []).append((width, after[twin][0], reps, after[twin][1]))
    host = [n for n in pairs if n.rsplit(".", 1)[1].startswith("time_")]
    kinds = {"host clock (time_, or the track_time in its place)": [r for n in host for r in pairs[n]],
             "the others": [r for n, rs in pairs.items() if n not in host for r in rs]}  # fmt: skip
    med = statistics.median
    for kind, rows in kinds.items():
        if not rows:
            continue
        b, a = [r[0] for r in rows], [r[1] for r in rows]
        within = " ".join(f"{t:.1%}: {sum(x <= t for x in b)} -> {sum(x <= t for x in a)};"
                          for t in (0.005, 0.01, 0.05))  # fmt: skip
        samples = f"{med([r[2] or 0 for r in rows])} -> {med([r[3] or 0 for r in rows])}"
        print(f"{kind}: {len(rows)} figures; median half-width {med(b):.1%} -> {med(a):.1%}; within {within} "
              f"median samples {samples}")  # fmt: skip
    print()
    for name, rows in sorted(pairs.items()):
        b = f"{med([r[0] for r in rows]):6.1%} ({med([r[2] or 0 for r in rows]):g} samples)"
        a = f"{med([r[1] for r in rows]):6.1%} ({med([r[3] or 0 for r in rows]):g})"
        print(f"{name:55s} {len(rows):3d}  {b} -> {a}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (2, 4) or (len(args) == 4 and args[2] != "--values"):
        sys.exit("usage: python scripts/research/intervals.py BEFORE.json AFTER.json [--values REGEX]")
    if len(args) == 4:
        values(args[0], args[1], GPU_SAME if args[3] == "GPU_SAME" else args[3])
    else:
        main(args[0], args[1])
