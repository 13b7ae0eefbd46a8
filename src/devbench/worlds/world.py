"""A world of local processes for torch.distributed, cleaned up on every path.

``spawn_world(fn, n)`` starts ``n`` processes forked from a server that imported torch once and
never touched CUDA (the ``forkserver`` start method: no CUDA state or threads inherited from
the caller, which may be asv's forkserver child, and no torch import per rank and world),
joins them into one process group over a file store in a private temp directory (no
port to race for), runs ``fn(rank, world, *args)`` on each and returns the ranks'
results in rank order. If a rank raises, dies, or the world outlives ``timeout_s``,
every other rank is terminated (then killed) and joined before ``RankFailed`` or
``WorldTimeout`` is raised, so no process outlives the call. ``first=(pre, limit_s)`` runs
``pre`` on every rank before ``fn``, in the same processes and group, under a limit of its own
(a pre-flight: ``preflight_rank``); its failure raises ``PreflightFailed``, and a world that
passes it goes on to ``fn`` without a second start.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Collection, Sequence
from datetime import timedelta
from typing import Any

from devbench.engine.devices import rank_device
from devbench.engine.owners import process_state

__all__ = ["BACKENDS", "PreflightFailed", "RankFailed", "PREFLIGHT_S", "RanksStuck", "STUCK", "UNFINISHED",
           "WorldTimeout", "backend_reason", "join_torchrun", "preflight_rank", "preflight_reason",
           "resolve_backend", "spawn_world", "under_torchrun"]  # fmt: skip

BACKENDS = ("gloo", "nccl")
#: seconds a terminated rank gets before it is killed
GRACE_S = 5.0
#: seconds a killed rank gets to be gone; one still there is stuck in the kernel (a CUDA driver call: state D)
KILL_WAIT_S = 10.0
#: seconds the ranks get to end by themselves once every result is in, before any signal: NCCL frees its
#: communicators and CUDA its contexts in the teardown, seconds on a node (``gpu.sessions`` waits as long)
TEARDOWN_S = 10.0
#: the pre-flight's limit: a one-element all_reduce, the process group's set-up included. NCCL's own init
#: on 8 GPUs takes seconds; one that has not joined after this is stuck (no P2P in a VM, a wrong interface)
PREFLIGHT_S = 60.0
#: lines of each rank's own output (NCCL's warnings among them) kept in a failure's message
LOG_LINES = 12
#: the most one collective (or the group's rendezvous) waits before the rank fails: NCCL's watchdog then ends the
#: process (TORCH_NCCL_ASYNC_ERROR_HANDLING's default), gloo raises. Far above the sweep's slowest call (256 MiB
#: over 8 gloo ranks sharing a CPU: seconds), far below a world's limit, which a hung collective would wait out
PG_TIMEOUT_S = 120.0


class RankFailed(RuntimeError):
    """A rank raised or died; ``rank`` says which, the message carries its traceback."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank


#: what a ``WorldTimeout`` message says, and so a pre-flight's reason where it ran out of its time
UNFINISHED = "did not finish within"


class WorldTimeout(TimeoutError):
    """The world did not finish within its time limit; ``ranks`` are those still running."""

    def __init__(self, ranks: Sequence[int], timeout_s: float, detail: str = "") -> None:
        super().__init__(f"ranks {list(ranks)} {UNFINISHED} {timeout_s:g} s; every rank was stopped"
                         + (f"\n{detail}" if detail else ""))  # fmt: skip
        self.ranks = list(ranks)


#: what a ``RanksStuck`` message says, and so a pre-flight's reason where one of its ranks stuck
STUCK = "did not end after SIGKILL"


class RanksStuck(RuntimeError):
    """Ranks that outlived SIGKILL: stuck in the kernel (a driver call), beyond any process's reach."""

    def __init__(self, stuck: Sequence[tuple[int, int, str]], results: list[Any] | None = None,
                 after: BaseException | None = None) -> None:  # fmt: skip
        named = "; ".join(f"rank {r} (pid {pid}, state {state})" for r, pid, state in stuck)
        super().__init__(f"{named} {STUCK}: stuck in the kernel, most likely a GPU driver call; "
                         "the GPU may need a reset by its administrator" + (f"; after: {after}" if after else ""))
        self.stuck = list(stuck)
        #: every rank's result where all were in before a rank stuck in its teardown: the world's work stands
        self.results = results


class PreflightFailed(RuntimeError):
    """A world's first phase (``spawn_world``'s ``first``: its pre-flight) failed or ran past its own limit, every
    rank stopped; ``cause`` is what it raised (``RankFailed``, ``WorldTimeout`` or ``RanksStuck``), ``limit_s`` the
    limit it had."""

    def __init__(self, cause: Exception, limit_s: float) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.limit_s = limit_s


def backend_reason(backend: str, world: int) -> str | None:
    """Why ``world`` local ranks of ``backend`` cannot run here, or None if they can.

    gloo ranks are CPU processes: more ranks than cores would time the scheduler. NCCL
    needs one GPU per rank. GPUs are counted through devbench (NVML), never by creating
    a CUDA context in this process.
    """
    from devbench.engine.devices import num_gpus

    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if world < 2:
        return f"a world of {world} rank has nothing to exchange"
    if backend == "gloo":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if world > cores:
            return f"{world} gloo ranks need {world} cores; this machine has {cores}"
        return None
    import torch

    if not torch.backends.cuda.is_built():
        return f"NCCL needs CUDA: torch {torch.__version__} is a CPU-only build"
    if not torch.distributed.is_nccl_available():
        return f"torch {torch.__version__} was built without NCCL"
    gpus = num_gpus()
    if gpus < world:
        return f"{world} NCCL ranks need {world} GPUs; this machine has {gpus}"
    return None


def resolve_backend(choice: str, local_world: int) -> str:
    """``auto``: NCCL when CUDA is there with a GPU for every local rank, else gloo; any other choice as given."""
    if choice != "auto":
        return choice
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        return "nccl"
    return "gloo"


def under_torchrun() -> bool:
    """Whether this process is a rank started by torchrun (its environment names rank, world and master)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))


def join_torchrun(choice: str, timeout_s: float) -> tuple[str, int, int, Any]:
    """Join torchrun's process group: ``(backend, rank, world, device)``; the caller destroys the group.

    ``choice`` goes through ``resolve_backend`` with this node's ranks (``LOCAL_WORLD_SIZE``);
    an NCCL rank binds its GPU (``device_id``) when it joins.
    """
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = resolve_backend(choice, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    device = rank_device(backend, int(os.environ["LOCAL_RANK"]))
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, timeout=timedelta(seconds=min(timeout_s, PG_TIMEOUT_S)), **kwargs)
    return backend, rank, world, device


def torchrun_rank(body: Callable[[], int]) -> int:
    """One torchrun rank's work in its joined group (``join_torchrun``): the group destroyed after ``body`` returns;
    after one that raised, the process ends at once, its traceback printed. Since torch 2.6
    ``destroy_process_group`` waits for the group's queued work, so a failed rank whose peers wait in a collective
    would hang in it; a rank that exits non-zero makes torchrun stop the others."""
    import sys

    import torch.distributed as dist

    try:
        status = body()
    except BaseException as exc:  # noqa: BLE001 - the process ends here, whatever it was
        code = 130 if isinstance(exc, KeyboardInterrupt) else exc.code if isinstance(exc, SystemExit) else 1
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)
    dist.destroy_process_group()
    return status


def _rank_main(
    fn: Callable[..., Any],
    rank: int,
    world: int,
    backend: str,
    store: str,
    timeout_s: float,
    args: tuple[Any, ...],
    results: Any,
    log: str | None = None,
    first: tuple[Callable[..., Any], Any] | None = None,
) -> None:
    """One rank: the process group joined, then ``first``'s function (a pre-flight) where given, its outcome put on
    its own queue, then ``fn``, its outcome on ``results``. A failure goes on the queue of the phase it ended: the
    group's set-up belongs to the first."""
    if log is not None:  # this rank's own output (NCCL's lines among it) to a file the parent reads on failure
        if backend == "nccl":
            os.environ.setdefault("NCCL_DEBUG", "WARN")  # NCCL says why an init fails only when asked
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    import torch
    import torch.distributed as dist

    # one intra-op thread per rank: the ranks share the cores, and gloo has its own threads
    torch.set_num_threads(1)
    phase = first[1] if first is not None else results
    try:
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            kwargs["device_id"] = rank_device(backend, rank)
        dist.init_process_group(
            backend,
            init_method=f"file://{store}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=min(timeout_s, PG_TIMEOUT_S)),
            **kwargs,
        )
        if backend == "gloo":
            # gloo builds its full mesh pair by pair, and one rank's init may return before a peer's has: a rank
            # whose fn ends at once would exit while that peer still connects to it ("Connection closed by
            # peer"). A barrier holds every rank until all are connected.
            dist.barrier()
        if first is not None:
            first[0](rank, world, *args)
            _send(phase, (rank, True, None))  # its result unused: nothing that may not pickle
            phase = results
        out = fn(rank, world, *args)
        _send(results, (rank, True, out))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it with the rank
        _send(phase, (rank, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _send(results: Any, item: tuple) -> None:
    """Put ``item`` and wait until the queue's feeder thread has written it to the pipe: the teardown after it (NCCL's
    destroy_process_group) may crash the rank, and an item still in the thread's buffer would die with it."""
    try:
        results.put(item)
        results.close()
        results.join_thread()
    except ValueError:  # closed already: the result went first, this is a failure after it
        pass


def _stop(procs: Sequence[Any], wait_s: float = 0.0) -> list[tuple[int, int, str]]:
    """Give every rank ``wait_s`` to end by itself, then terminate, then kill, every rank still running, and join
    it; returns (rank, pid, state) of those that outlived SIGKILL by ``KILL_WAIT_S`` (a rank stuck in a driver
    call cannot be killed: it is named, not waited for)."""
    started = [(r, p) for r, p in enumerate(procs) if p.pid is not None]  # start() itself may have failed
    deadline = time.monotonic() + wait_s
    for _, p in started:
        p.join(max(0.0, deadline - time.monotonic()))
    for _, p in started:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    for _, p in started:
        p.join(max(0.0, deadline - time.monotonic()))
    killed = [(r, p) for r, p in started if p.is_alive()]
    for _, p in killed:
        p.kill()
    deadline = time.monotonic() + KILL_WAIT_S
    for _, p in killed:
        p.join(max(0.0, deadline - time.monotonic()))
    return [(r, p.pid, process_state(p.pid)) for r, p in killed if p.is_alive()]


def _log_tails(logs: Sequence[str], ranks: Sequence[int]) -> str:
    """The last ``LOG_LINES`` lines each of ``ranks`` wrote (its own, NCCL's), for a failure's message."""
    parts = []
    for r in ranks:
        try:
            with open(logs[r], encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()[-LOG_LINES:]
        except OSError:
            continue
        if lines:
            parts.append(f"rank {r} printed:\n" + "\n".join(f"  {line}" for line in lines))
    return "\n".join(parts)


def _raise_root_cause(procs: Sequence[Any], results: Any, failed: dict[int, str], logs: Sequence[str] = (),
                      done: Collection[int] = ()) -> None:  # fmt: skip
    """Raise ``RankFailed`` for the rank that caused a failure.

    When one rank dies, its peers fail too ("connection closed by peer"), often first.
    Collect what arrives within a second, or until every rank has reported an error or ended;
    a rank that died without a word is the cause, else the first rank that reported an error.
    The others are named in the message. ``done``: the ranks that finished this phase (a pre-flight) and are past
    it; one that ends later in the next phase is not this one's cause.
    """
    done = set(done)
    settle = time.monotonic() + 1.0
    while time.monotonic() < settle:
        try:
            rank, ok, payload = results.get(timeout=0.1)
        except queue.Empty:
            if all(r in failed or p.exitcode is not None for r, p in enumerate(procs)):
                break  # nothing more can come but what an ended rank wrote just before it ended
            continue
        if not ok:
            failed.setdefault(rank, payload)
        else:
            done.add(rank)
    while True:  # what is already in the queue
        try:
            rank, ok, payload = results.get(timeout=0.05)
        except queue.Empty:
            break
        if not ok:
            failed.setdefault(rank, payload)
        else:
            done.add(rank)
    ended = [r for r, p in enumerate(procs) if r not in failed and p.exitcode not in (None, 0)]
    silent = [r for r in ended if r not in done] or ([] if failed else ended)
    if silent:
        cause, message = silent[0], f"exited with code {procs[silent[0]].exitcode} and no result"
    else:
        cause = next(iter(failed))
        message = failed[cause]
    others = [f"rank {r}: {m.splitlines()[0][:200]}" for r, m in failed.items() if r != cause]
    if others:
        message += "\n(then also failed: " + "; ".join(others) + ")"
    printed = _log_tails(logs, [cause]) if logs else ""
    if printed:
        message += "\n" + printed
    raise RankFailed(cause, message)


#: what the ranks' server imports once, before it forks them (importing these never touches CUDA)
PRELOAD = ["torch", "torch.distributed", "devbench.worlds.world"]


def _context() -> Any:
    """The ``forkserver`` context, its server preloading torch (it starts with the first world)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def spawn_world(
    fn: Callable[..., Any],
    world: int,
    args: Sequence[Any] = (),
    backend: str = "gloo",
    timeout_s: float = 600.0,
    quiet: bool = False,
    first: tuple[Callable[..., Any], float] | None = None,
) -> list[Any]:
    """Run ``fn(rank, world, *args)`` on ``world`` new processes in one process group.

    ``fn`` must be importable by name (a module-level function). Returns each rank's
    result in rank order. Raises ``RankFailed`` for the first rank that raised or died
    and ``WorldTimeout`` when ranks are still running after ``timeout_s``; either way
    every rank has been stopped and joined. ``quiet``: each rank's output goes to a file of
    its own, and a failure's message carries the last lines each rank printed (NCCL's among
    them); otherwise the ranks print where the caller does. A rank
    that outlives SIGKILL (stuck in a driver call) raises ``RanksStuck``, naming it.

    ``first=(pre, limit_s)``: every rank runs ``pre(rank, world, *args)`` first (its result unused), the group's
    set-up and it within ``limit_s`` of the start; a failure, a rank stuck or a run past that limit there raises
    ``PreflightFailed`` with the cause. ``timeout_s`` bounds the whole world, ``pre`` included.
    """
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    passed = [first is None]  # whether the first phase is behind the world: a failure after it is the world's own
    try:
        return _world(fn, world, tuple(args), backend, timeout_s, quiet, first, passed)
    except (RankFailed, WorldTimeout, RanksStuck) as exc:
        if passed[0] or first is None:
            raise
        raise PreflightFailed(exc, min(first[1], timeout_s)) from exc


def _world(fn: Callable[..., Any], world: int, args: tuple[Any, ...], backend: str, timeout_s: float, quiet: bool,
           first: tuple[Callable[..., Any], float] | None, passed: list[bool]) -> list[Any]:  # fmt: skip
    """``spawn_world``'s world: started, its phases gathered, every rank stopped; ``passed[0]`` set once every rank
    finished the first phase."""
    ctx = _context()
    results = ctx.Queue()
    queues = [results]
    phase = None
    if first is not None:
        phase = ctx.Queue()
        queues.append(phase)
    with tempfile.TemporaryDirectory(prefix="devbench-world-") as tmp:
        store = os.path.join(tmp, "store")
        logs = [os.path.join(tmp, f"rank-{rank}.log") for rank in range(world)]
        pre = (first[0], phase) if first is not None else None
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(fn, rank, world, backend, store, timeout_s, args, results, logs[rank] if quiet else None, pre),
                name=f"devbench-rank-{rank}",
                daemon=True,
            )
            for rank in range(world)
        ]
        start = time.monotonic()
        deadline = start + timeout_s
        got: dict[int, Any] | None = None
        try:
            for p in procs:
                p.start()
            if first is not None:
                limit = min(first[1], timeout_s)
                _gather(procs, phase, start + limit, limit, logs)
                passed[0] = True
            got = _gather(procs, results, deadline, timeout_s, logs)
        finally:
            # every result in: the ranks are in their teardown, which a signal would cut short
            stuck = _stop(procs, TEARDOWN_S if got is not None else 0.0)
            for q in queues:
                q.close()
                q.join_thread()
            if stuck:  # never left silently: a rank no signal can end holds its GPU until the machine is reset
                raise RanksStuck(stuck, None if got is None else [got[r] for r in range(len(procs))],
                                 sys.exc_info()[1])  # fmt: skip
    return [got[r] for r in range(len(procs))]


def _gather(procs: Sequence[Any], results: Any, deadline: float, limit_s: float, logs: Sequence[str]) -> dict[int, Any]:
    """Every rank's result on ``results`` by ``deadline`` (``WorldTimeout`` naming ``limit_s`` past it), or the
    ``RankFailed`` of the rank that caused a failure (``_raise_root_cause``)."""
    got: dict[int, Any] = {}
    while len(got) < len(procs):
        left = deadline - time.monotonic()
        if left <= 0:
            late = [r for r in range(len(procs)) if r not in got]
            raise WorldTimeout(late, limit_s, _log_tails(logs, late))
        try:
            rank, ok, payload = results.get(timeout=min(left, 0.2))
        except queue.Empty:
            if any(r not in got and p.exitcode not in (None, 0) for r, p in enumerate(procs)):
                _raise_root_cause(procs, results, {}, logs, got)
            continue
        if not ok:
            _raise_root_cause(procs, results, {rank: payload}, logs, got)
        got[rank] = payload
    return got


#: bytes of the pre-flight's second all_reduce: NCCL takes its large-message path (the Simple protocol, every
#: channel) well below 64 MiB, where a link or a P2P path that moves one element may still fail; gloo's ring
#: needs no more than a MiB to chunk its message
PREFLIGHT_LARGE = {"nccl": 64 << 20, "gloo": 1 << 20}


def preflight_rank(rank: int, world: int, backend: str, *_: Any) -> float:
    """One all_reduce of one element on this rank's device, then one of ``PREFLIGHT_LARGE`` bytes, then a ring of
    sends and receives of as many (NCCL sets up its point-to-point connections apart, on their first use), each
    checked: proves the group can exchange data, small and large, both ways the sweep does. It takes the world's
    arguments (``spawn_world``'s ``first``: the backend first) and uses the backend alone."""
    import torch
    import torch.distributed as dist

    device = rank_device(backend, rank)
    one = torch.ones(1, device=device)
    dist.all_reduce(one)
    large = torch.ones(PREFLIGHT_LARGE.get(backend, 1 << 20) // 4, device=device)
    dist.all_reduce(large)
    mine, got = torch.full_like(large, rank + 1.0), torch.zeros_like(large)
    if world > 1:  # the sweep's send_recv ring: to the next rank, from the previous one
        for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, (rank + 1) % world),
                                           dist.P2POp(dist.irecv, got, (rank - 1) % world)]):  # fmt: skip
            req.wait()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if float(one.item()) != world:
        raise AssertionError(f"the pre-flight's one-element all_reduce summed {float(one.item())}, not {world}")
    if not bool((large == world).all()):
        raise AssertionError(f"the pre-flight's {large.numel() * 4} B all_reduce did not sum to {world} everywhere")
    if world > 1 and not bool((got == (rank - 1) % world + 1.0).all()):
        raise AssertionError(f"the pre-flight's {got.numel() * 4} B receive on rank {rank} is not its previous rank's")
    return float(one.item())


def preflight_reason(exc: Exception, backend: str, timeout_s: float) -> str:
    """Why a pre-flight of ``backend`` with ``timeout_s`` failed, ``exc`` being what its world raised."""
    return (f"the pre-flight (an all_reduce of one element and one of {PREFLIGHT_LARGE.get(backend, 0) >> 20} MiB, "
            f"a ring of sends of as many, {timeout_s:g} s at most) failed: {exc}")  # fmt: skip
