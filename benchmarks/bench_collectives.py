"""Collectives across local processes with torch.distributed, as nccl-tests reports them.

A world of local processes is started by the benchmark itself (``devbench.worlds.world``): gloo
ranks on the CPU, NCCL ranks one per GPU. Starting a world costs a server process that
imports torch (about 2 s on a 2-vCPU VM) and a fork per rank, so ``setup_cache`` starts one world per
backend and world size, checks and times every op and size in it (the ``sweep`` of
``devbench.workloads.collectives``), and stops it; the ``track_`` figures read that
sweep. Times are the mean over ranks of each rank's median block (nccl-tests' convention);
each figure's samples are its blocks, each the mean over ranks of one block.
Multi-node runs use ``python -m devbench.worlds.collectives`` under torchrun instead. Before a
world's sweep, its ranks run a pre-flight (``devbench.worlds.world.preflight_rank``: an all_reduce of
one element and one large enough for NCCL's large-message path, within a minute) that proves it can
exchange data, in the same processes and group as the sweep after it; a world that cannot is skipped
with the reason. Each world is bounded on its own and within the class's
timeout: one that fails or hangs is skipped with why, the others keep what they measured.
"""

import functools
import time

from devbench.engine.measure import blocks_per_figure
from devbench.engine.suite import Benchmark, selected, with_samples
from devbench.records.files import stage_left_s
from devbench.records.spec import MiB, bus_factor, gbps
from devbench.workloads.collectives import OPS, SIZES, sweep_rank
from devbench.worlds.world import (
    BACKENDS,
    PREFLIGHT_S,
    STUCK,
    UNFINISHED,
    PreflightFailed,
    RanksStuck,
    backend_reason,
    preflight_rank,
    preflight_reason,
    spawn_world,
)

WORLDS = [2, 4, 8]

#: the figures read from one sweep row
TRACKS = ("track_time", "track_algbw", "track_busbw")
#: seconds a world (its pre-flight, then its sweep) may take at most; each is also bounded by an equal share, with
#: the worlds still to run, of what is left of the class's ``timeout`` less ``MARGIN_S`` (asv kills a set-up cache
#: at its timeout, and pickles it only when it returns)
WORLD_S = 900.0
MARGIN_S = 30.0
#: the least time a world's sweep is started with (its rows at 3 blocks each take seconds on NVLink)
MIN_SWEEP_S = 10.0
#: the least a pre-flight is given where the time left is short of ``PREFLIGHT_S`` and a sweep: no less than the
#: start of a world ``plan_cache_s`` prices (a gloo pre-flight took 1.4 s on the VM; an NCCL world's start has
#: not been measured here); one that runs out of it is named with the time it had
PREFLIGHT_MIN_S = 20.0


class Collectives(Benchmark):
    """all_reduce, all_gather, reduce_scatter, broadcast, send/recv ring; 4 KiB to 256 MiB.

    ``nbytes`` is nccl-tests' size (see ``devbench.workloads.collectives``). gloo runs
    where there are as many cores as ranks; NCCL where there are as many GPUs.
    """

    params = [list(BACKENDS), WORLDS, list(OPS), SIZES]
    param_names = ["backend", "world", "op", "nbytes"]
    timeout = 1200.0
    #: devbench gpu-run (devbench.gpu.plan): 1 MiB and 256 MiB first; the sweep is set-up cache, the figures read it
    headline = [{"nbytes": [MiB, 256 * MiB]}]
    #: a world per backend and size, each started, swept through every op and size, and stopped; gloo
    #: ranks need a core each, NCCL ranks a GPU each (world.backend_reason)
    #: a world's pre-flight, ranks and process group start it (a tenth: a gloo world that read a few rows took
    #: 1.4 s on the VM); its sweep times only the rows the run reads (``by_points``: the rest, shared by its points)
    plan_cache_s = {"per": ["backend", "world"], "s": {"gloo": 20.0, "nccl": 15.0}, "by_points": 0.9}
    plan_needs = [{"where": {"backend": ["gloo"]}, "cores_from": "world"},
                  {"where": {"backend": ["nccl"]}, "gpus_from": "world"}]  # fmt: skip
    #: NCCL worlds run in gpu-run's last stage, after every single-GPU point: a world that fails or hangs costs
    #: nothing else (devbench.gpu.plan)
    plan_last = [{"backend": ["nccl"]}]
    plan_setup_s = 0.0
    plan_s = 0.0
    #: what a world needs of its gpu-run stage when the set-up cache starts (below, it starts none): gpu-run plans
    #: no point of this class into a stage that leaves less
    plan_min_stage_s = MARGIN_S + PREFLIGHT_MIN_S + MIN_SWEEP_S
    figures_in_setup_cache = True  # devbench compare: one pair of figures per pair of processes

    def setup_cache(self):
        """Each world on its own: one that fails or hangs is skipped with why, and what the others measured is
        kept; a rank stuck beyond SIGKILL holds its GPU, so no later world of its backend starts on it."""
        worlds, stuck = {}, {}
        deadline, bound = time.monotonic() + self.timeout - MARGIN_S, f"of the class's {self.timeout:g} s"
        stage_left = stage_left_s()  # gpu-run stops its asv stage then: a world ends first, so what ran is kept
        if stage_left is not None and time.monotonic() + stage_left - MARGIN_S < deadline:
            deadline, bound = time.monotonic() + stage_left - MARGIN_S, "before gpu-run's stage ends"
        # every row of a world, unless this run selects fewer (devbench compare's extra rounds: suite.selected)
        selected = {(b, w): [(op, n) for op in OPS for n in SIZES if _read(b, w, op, n)] for b in BACKENDS
                    for w in WORLDS}  # fmt: skip
        to_run = [k for k, only in selected.items() if only and not backend_reason(*k)]
        for backend in BACKENDS:
            for world in WORLDS:
                reason = backend_reason(backend, world) or stuck.get(backend)
                if reason:
                    worlds[f"{backend}/{world}"] = {"skip": reason}
                    continue
                only = selected[(backend, world)]
                if not only:
                    worlds[f"{backend}/{world}"] = {"skip": "no figure of this world selected in this run"}
                    continue
                # an equal share of what is left with the worlds still to run, or the least a world needs where the
                # share is less: one that hangs to its limit leaves the later ones theirs (one that ends early, more)
                left = deadline - time.monotonic()
                share = max(left / max(1, len(to_run) - to_run.index((backend, world))),
                            min(left, PREFLIGHT_MIN_S + MIN_SWEEP_S))  # fmt: skip
                # a pre-flight first, within a minute, in the world's own ranks: a world whose NCCL init hangs (no
                # P2P in a VM, a wrong network interface) is skipped with the ranks' own lines, not waited on for the
                # sweep's 15 minutes; one that passes goes on to its sweep with no second start of its ranks
                # bounded by what is left: a pre-flight and then at least a short sweep end before the deadline
                pre_s = min(PREFLIGHT_S, share - MIN_SWEEP_S)
                if pre_s < PREFLIGHT_MIN_S:  # a pre-flight and a sweep no longer fit
                    worlds[f"{backend}/{world}"] = {"skip": f"no time left {bound}"}
                    continue
                every = len(only) == len(OPS) * len(SIZES)
                # 3 blocks a row, or DEVBENCH_BLOCKS (asv --quick in make test, devbench compare)
                fn = functools.partial(sweep_rank, samples=blocks_per_figure(3), only=None if every else only)
                try:
                    rows = spawn_world(fn, world, args=(backend,), backend=backend,
                                       timeout_s=min(WORLD_S, share), quiet=True,
                                       first=(preflight_rank, pre_s))[0]  # fmt: skip
                except PreflightFailed as exc:
                    failed = preflight_reason(exc.cause, backend, pre_s)
                    if UNFINISHED in failed and pre_s < PREFLIGHT_S:
                        failed += f" (it had {pre_s:.0f} s of its {PREFLIGHT_S:g}: what was left {bound})"
                    worlds[f"{backend}/{world}"] = {"skip": failed}
                    if STUCK in failed:
                        stuck[backend] = f"not started: a rank of the {world}-rank {backend} pre-flight is stuck"
                    continue
                except Exception as exc:  # noqa: BLE001 - any failure of this world (its ranks' start too) is its own
                    worlds[f"{backend}/{world}"] = {"skip": f"the {world}-rank {backend} world failed: {exc}"}
                    if isinstance(exc, RanksStuck):
                        ranks = ", ".join(str(r) for r, _pid, _state in exc.stuck)
                        stuck[backend] = (f"not started: rank(s) {ranks} of the {world}-rank {backend} world are "
                                          f"stuck beyond SIGKILL and hold their devices")  # fmt: skip
                        if exc.results is not None:  # stuck in its teardown, its work done: the rows stand
                            rows = exc.results[0]
                            worlds[f"{backend}/{world}"] = {"rows": {f"{r['op']}/{r['nbytes']}": r for r in rows}}
                    continue
                worlds[f"{backend}/{world}"] = {"rows": {f"{r['op']}/{r['nbytes']}": r for r in rows}}
        return worlds

    def setup(self, worlds, backend, world, op, nbytes):
        entry = worlds[f"{backend}/{world}"]
        if "skip" in entry:
            raise NotImplementedError(entry["skip"])
        row = entry["rows"].get(f"{op}/{nbytes}")
        if row is None:
            raise NotImplementedError(f"{op} {nbytes} B not measured in this run (not selected)")
        self.row = row

    def _samples(self, per_second_of):
        return with_samples((per_second_of(t / 1e6) for t in self.row["block_us"]), self.row["iters"])

    def track_time(self, worlds, backend, world, op, nbytes):
        return self._samples(lambda s: s)

    track_time.unit = "seconds"

    def track_algbw(self, worlds, backend, world, op, nbytes):
        return self._samples(lambda s: gbps(nbytes, s))

    track_algbw.unit = "GB/s"

    def track_busbw(self, worlds, backend, world, op, nbytes):
        return self._samples(lambda s: gbps(nbytes, s) * bus_factor(op, world))

    track_busbw.unit = "GB/s"


def _read(backend: str, world: int, op: str, nbytes: int) -> bool:
    """Whether this run reads the sweep row of (op, nbytes) in this world (asv's --bench, suite.selected)."""
    name = f"{__name__.rsplit('.', 1)[-1]}.{Collectives.__name__}"
    return any(selected(f"{name}.{track}", (backend, world, op, nbytes)) for track in TRACKS)
