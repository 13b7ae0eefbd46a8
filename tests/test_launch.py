"""Small tasks for the launch-overhead split: checked outputs, CPU skips, and the report's split."""

import math

import pandas as pd
import pytest
import torch

from devbench.report import derive as D
from devbench.workloads import launch as L

CPU = torch.device("cpu")


@pytest.mark.parametrize("task", L.TASKS)
def test_every_task_computes_and_checks_its_output(task):
    t = L.SmallTask(task, CPU)
    t.clear()
    with pytest.raises(AssertionError, match=f"{task} on cpu"):
        t.check()  # cleared outputs are not the answer
    t()
    if t.mm is not None:
        t()  # a product per input set
    t.check()


def test_unknown_tasks_and_graphs_on_the_cpu_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="unknown task"):
        L.SmallTask("conv 3", CPU)
    assert "CUDA graphs" in L.graph_reason(CPU)
    with pytest.raises(ValueError, match="CUDA graphs"):
        L.graphed(L.SmallTask("add 1", CPU))


@pytest.mark.cuda
def test_a_graph_replays_the_task_and_its_outputs_are_checked():
    t = L.SmallTask("matmul 64", torch.device("cuda", 0))
    replay = L.graphed(t)
    t.clear()
    replay()
    t.check()


def test_the_report_splits_work_launch_and_sync():
    base = {"machine": "m", "env": "e", "commit": "c", "commit_short": "c", "date": pd.Timestamp("2026-01-01"),
            "status": "ok", "version_current": True, "benchmark": "bench_launch.LaunchOverhead.track_us"}  # fmt: skip
    rows = [
        {**base, "device": "cuda", "task": "add 1", "mode": mode, "value": v}
        for mode, v in (("per_call", 14.0), ("queued", 5.0), ("held", 1.5), ("graph", 1.8))
    ]
    rows += [
        {**base, "device": "cpu", "task": "add 1", "mode": mode, "value": v}
        for mode, v in (("per_call", 2.0), ("queued", 2.1))
    ]
    split = D.launch_split(pd.DataFrame(rows)).set_index("device")
    gpu, cpu = split.loc["cuda"], split.loc["cpu"]
    assert (gpu["work"], gpu["launch"], gpu["sync"], gpu["graph"]) == (1.5, 3.5, 9.0, 1.8)
    assert math.isnan(cpu["work"]) and math.isnan(cpu["launch"]) and cpu["sync"] == 0.0  # noise is not negative
