"""The plan as gpu-run prints it (a table per stage: points, estimate, what the budget drops) and records it in
plan.json."""

from __future__ import annotations

from typing import Any

from devbench.gpu.plan import STAGES, Plan, _order, stage_of


def summary_rows(plan: Plan) -> list[dict[str, Any]]:
    """One row per benchmark: its points, those kept, skipped and dropped, the seconds its kept points' figures are
    expected to sample, and those of the builds its kept points are the first to make (``Plan.estimate_parts``)."""
    _, builds = plan.estimate_parts()
    rows: dict[str, dict[str, Any]] = {}
    for p in plan.points:
        row = rows.setdefault(p.benchmark, {"benchmark": p.benchmark, "points": 0, "run": 0, "skip": 0,
                                            "dropped": 0, "cut": 0, "estimate_s": 0.0,
                                            "build_s": builds.get(p.benchmark, 0.0)})  # fmt: skip
        row["points"] += 1
        row[p.state] += 1
        if p.state == "run":
            row["estimate_s"] += p.estimate_s
    return list(rows.values())


def format_plan(plan: Plan) -> str:
    """The plan as a person reads it before the run starts."""
    c = plan.costs
    lines = [
        f"plan: {len(plan.kept())} of {len(plan.points)} points in {plan.rounds} round(s); "
        f"budget {plan.budget_s:.0f} s, of which {plan.reserve_s:.0f} s held for tests, validate and packing",
        f"costs: a process {c.launch_s:.2f} s"
        + (f", its CUDA context {c.cuda_context_s:.2f} s ({c.gpus} GPU(s)), a GPU set-up {c.gpu_setup_s:.2f} s"
           + (f", a workload's check {c.gpu_check_s:.2f} s (once per run)" if c.gpu_check_s else "")
           if c.gpus else ", no CUDA device")
        + f", an asv call {c.stage_call_s:.1f} s"
        + ("; the CPU's searches here: " + ", ".join(f"{k.split(':', 1)[-1]} {v:.0f} s" for k, v in c.expected_searches)
           if c.expected_searches else ""),
        "",
        f"{'benchmark':<56} {'points':>6} {'run':>5} {'skip':>5} {'drop':>5} {'sample':>8} {'build':>7}",
    ]
    for row in summary_rows(plan):
        lines.append(f"{row['benchmark']:<56} {row['points']:>6} {row['run']:>5} {row['skip']:>5} "
                     f"{row['dropped']:>5} {row['estimate_s']:>7.1f}s {row['build_s']:>6.1f}s")  # fmt: skip
    parts, _ = plan.estimate_parts()
    lines.append(f"{'expected, asv calls and set-up caches included':<80} {plan.estimate_s():>7.1f}s")
    lines.append("of which: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in parts.items() if seconds))
    # each stage what it adds to the ones before it: the measuring process they share is priced where it starts
    parts, so_far, before = [], [], 0.0
    for s in STAGES:
        ps = [p for p in plan.kept() if stage_of(p) == s]
        if ps:
            so_far += ps
            total = plan.estimate_s(points=so_far)
            parts.append(f"{s} {len(ps)} points, {total - before:.0f} s")
            before = total
    lines.append("asv stages: " + "; ".join(parts))
    dropped = plan.dropped()
    if dropped:
        lines += ["", f"dropped by the budget ({len(dropped)} points, lowest priority first):"]
        by_bench: dict[str, list[str]] = {}
        for p in reversed(_order(dropped)):
            by_bench.setdefault(p.benchmark, []).append(p.label)
        for name, labels in by_bench.items():
            shown = "; ".join(labels[:4]) + (f"; and {len(labels) - 4} more" if len(labels) > 4 else "")
            lines.append(f"  {name}: {shown}")
    skipped = [p for p in plan.points if p.state == "skip"]
    if skipped:
        reasons = sorted({p.reason for p in skipped})
        lines += ["", f"skipped ({len(skipped)} points): " + "; ".join(reasons)]
    return "\n".join(lines)


def to_json(plan: Plan) -> dict[str, Any]:
    return {
        "budget_s": plan.budget_s,
        "reserve_s": plan.reserve_s,
        "rounds": plan.rounds,
        "costs": plan.costs.__dict__,
        "estimate_s": plan.estimate_s(),
        "points": [
            {"benchmark": p.benchmark, "params": p.label, "tier": p.tier, "state": p.state, "reason": p.reason,
             "estimate_s": round(p.estimate_s, 3)}  # fmt: skip
            for p in plan.points
        ],
    }
