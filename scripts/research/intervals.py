"""Each figure's 99% interval in two asv result files of the same suite, before and after a change of method.

    python scripts/research/intervals.py BEFORE.json AFTER.json

Pairs every figure of BEFORE with AFTER's (a ``time_`` figure with the ``track_`` figure that took its place,
``RENAMED``), leaves out the collectives (their sweep is not what changed), and prints, for the host-clock
figures and for the others, the median half-width of asv's 99% interval over the median, how many are within
0.5%, 1% and 5%, and the median number of samples; then the same per benchmark. Reads the JSON as asv wrote
it; imports neither asv nor torch.
"""

from __future__ import annotations

import json
import math
import statistics
import sys

#: the time_ figures the measuring process renamed, and their track_ figures
RENAMED = {"time_matmul": "track_time", "time_copy": "track_time", "time_loop": "track_time",
           "time_add": "track_time", "time_forward": "track_time", "time_train_step": "track_time",
           "time_save": "track_save_time", "time_load": "track_load_time", "time_batch": "track_time",
           "time_move": "track_time", "time_read": "track_time", "time_parallel": "track_parallel_time",
           "time_sequential": "track_sequential_time"}  # fmt: skip


def load(path: str) -> dict[tuple[str, int], tuple[float, int | None]]:
    """(benchmark, combination) -> (half of asv's 99% interval over the median, samples)."""
    data = json.load(open(path))
    cols = data["result_columns"]
    out = {}
    for name, row in data["results"].items():
        r = dict(zip(cols, row, strict=False))
        values = r["result"] if isinstance(r["result"], list) else [r["result"]]
        lo = r.get("stats_ci_99_a") or [None] * len(values)
        hi = r.get("stats_ci_99_b") or [None] * len(values)
        reps = r.get("stats_repeat") or [None] * len(values)
        for i, v in enumerate(values):
            if v is None or (isinstance(v, float) and math.isnan(v)) or v == 0 or lo[i] is None or hi[i] is None:
                continue
            out[(name, i)] = ((hi[i] - lo[i]) / 2 / abs(v), reps[i])
    return out


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
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/research/intervals.py BEFORE.json AFTER.json")
    main(sys.argv[1], sys.argv[2])
