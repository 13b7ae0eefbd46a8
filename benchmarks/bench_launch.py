"""Launch overhead of small tasks: per call with a sync, queued, with the stream held, from a CUDA graph.

The same checked task (``devbench.workloads.launch``) timed four ways, in microseconds
per call, so the report can split a small task's time into the device's work (``held``),
the host's launch (``queued`` minus ``held``) and the wait for the result (``per_call``
minus ``queued``); ``graph`` shows what replaying the launches from a CUDA graph saves.
On the CPU ``held`` and ``graph`` skip with the reason: there is no queue to hold.
"""

import torch

from devbench.engine.blocks import HELD_MAX_CALLS, hold_reason
from devbench.engine.devices import synchronize
from devbench.engine.measure import COPY_BLOCK_S, BlockPlan, block_calls, calls_for, measure, one_call_s, warm_up
from devbench.engine.suite import DEVICES, Benchmark, once, require_device, with_samples
from devbench.workloads.launch import GRAPH_CALLS, TASKS, SmallTask, graph_reason, graphed

MODES = ["per_call", "queued", "held", "graph"]


def _task(task: str, device: torch.device) -> SmallTask:
    t = SmallTask(task, device)
    t.clear()
    warm_up(t, device)
    t.check()
    return t


class LaunchOverhead(Benchmark):
    """Microseconds per call of a small task, timed four ways (``mode``).

    ``per_call``: each call followed by a device sync, as a loop that reads every result
    would run. ``queued``: calls back to back between two events, so the host's launch
    rate or the device, whichever is slower. ``held``: the stream held by a spin kernel
    while the calls are queued, so the device's own time. ``graph``: 32 calls captured
    in a CUDA graph and replayed.
    """

    params = [DEVICES, TASKS, MODES]
    param_names = ["device", "task", "mode"]
    #: devbench gpu-run runs these first (devbench.gpu.plan)
    headline = [{"device": ["cuda"]}]
    samples_gpu_state = False  # microseconds a call: no sampling thread beside it
    swept = True
    skips = [{"where": {"device": ["cpu"], "mode": ["held"]}, "reason": hold_reason(torch.device("cpu"))},
             {"where": {"device": ["cpu"], "mode": ["graph"]},
              "reason": graph_reason(torch.device("cpu"))}]  # fmt: skip

    def setup(self, device, task, mode):
        self.device = require_device(device)
        reason = hold_reason(self.device) if mode == "held" else graph_reason(self.device) if mode == "graph" else None
        if reason:
            raise NotImplementedError(reason)
        t = once(("LaunchOverhead", device, task), lambda: _task(task, self.device))
        self.per = 1
        if mode == "per_call":

            def fn():
                t()
                synchronize(self.device)

            self.fn = fn
        elif mode == "graph":
            self.fn = once(("LaunchOverhead.graph", device, task), lambda: graphed(t))
            self.per = GRAPH_CALLS
        else:
            self.fn = t
        warm_up(self.fn, self.device)
        if mode == "held":
            one = one_call_s(self.fn, self.device)
            self.plan = BlockPlan(min(block_calls(one, COPY_BLOCK_S), HELD_MAX_CALLS), hold=True)
        else:
            self.plan = BlockPlan(calls_for(self.fn, self.device, target_s=COPY_BLOCK_S))

    def track_us(self, device, task, mode):
        m = measure(self.fn, self.device, self.plan)
        return with_samples((1e6 * t / self.per for t in m.per_call), self.plan.calls * self.per)

    track_us.unit = "us"
