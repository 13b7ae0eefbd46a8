"""The coordinator's side of paired measurement: worker processes and their strict turns.

A ``Worker`` is one side's benchmark process (``worker.py`` run in that side's exported tree).
``paired_turns`` has two of them time one block each in strict alternation, ``A B A B ...``:
never both at once (on two cores they would contend), every block right after one of the other
side, and each pair of adjacent blocks is one observation, ``log(B / A)``. A host that drifts
over seconds or minutes moves both blocks of a pair alike, and the drift cancels inside the pair
(docs/design.md, "Verdicts").

No torch and no asv here: the coordinator never imports the benchmarks.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

WORKER = Path(__file__).with_name("worker.py")
#: ``devbench.engine.prepare.CHECKED_ENV`` (not imported: the suite imports torch, the coordinator never does)
CHECKED_ENV = "DEVBENCH_CHECKED"


class WorkerError(RuntimeError):
    """A worker that failed to start, died, or did not answer in time; the message says which and why."""


class BlockError(Exception):
    """A figure's first block failed on a side (its benchmark's own error): the figure is not measured."""


@dataclass
class Worker:
    """One side's benchmark process. ``request`` sends one JSON line and waits for the reply."""

    side: str
    python: str
    tree: Path
    log: IO[bytes]
    env: dict[str, str]
    timeout_s: float = 600.0
    proc: subprocess.Popen | None = None
    benchmarks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the CUDA devices the side's torch sees (``None``: it could not be told)
    cuda_devices: int | None = None
    #: what the side runs on: Python, torch, its CUDA and cuDNN (the worker's hello; empty: not told)
    environment: dict[str, Any] = field(default_factory=dict)
    _reply_fd: int = -1
    _buffer: bytes = b""
    _sent: int = 0  # requests sent: each carries its number as its ``id``, and its reply the same

    @property
    def who(self) -> str:
        """The side and its Python, as an error names them: "head (/venvs/torch-2.14/bin/python)"."""
        return f"{self.side} ({self.python})"

    def start(self) -> Worker:
        """Start the process and wait until it has listed its benchmarks."""
        return self.spawn().ready()

    def spawn(self) -> Worker:
        """Start the process; ``ready`` waits for its list of benchmarks. Two sides' workers are spawned
        together and then awaited (``start_both``): each imports torch and the suite, a second or more, and
        nothing is timed while they do."""
        read_fd, write_fd = os.pipe()
        # the tree's own code first; what the caller's PYTHONPATH held after it (packages installed with
        # --target, as scripts/device-run.sh does for asv on a machine with no package index)
        paths = [str(self.tree / "src"), str(self.tree), *filter(None, [self.env.get("PYTHONPATH")])]
        # this side's workloads checked by an earlier process of the compare (devbench.engine.suite.CHECKED_ENV)
        env = {**self.env, "PYTHONPATH": os.pathsep.join(paths), CHECKED_ENV: str(self.tree / ".checked")}
        try:
            self.proc = subprocess.Popen(
                [self.python, str(WORKER), str(self.tree / "benchmarks"), str(write_fd), str(self.tree / ".kept")],
                cwd=self.tree, env=env, stdin=subprocess.PIPE, stdout=self.log, stderr=self.log,
                pass_fds=(write_fd,), start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(write_fd)
        self._reply_fd = read_fd
        return self

    def ready(self) -> Worker:
        hello = self._read(self.timeout_s)
        if "benchmarks" not in hello:
            raise WorkerError(f"{self.who}: the benchmark process did not list its benchmarks: {hello}")
        self.benchmarks = {b["name"]: b for b in hello["benchmarks"]}
        self.environment = hello.get("environment") or {}
        count = hello.get("cuda_devices")
        self.cuda_devices = count if isinstance(count, int) else None
        return self

    def request(self, op: str, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self._sent += 1
        try:
            self.proc.stdin.write((json.dumps({"op": op, "id": self._sent, **fields}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerError(f"{self.who}: the benchmark process has ended (see the log)") from None
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read(timeout_s, deadline)
            if reply.get("id") == self._sent:
                return reply
            if reply.get("ended") and op in ("turn", "close"):
                # the combination's process died before it noted this request (it may have read it, and taken it
                # with it): the worker answers later turns and the close, and its answer to this one, if it comes,
                # is dropped by its id like any other late one
                self.log.write(f"{self.side}: the process ended before it answered {op}: {reply}\n".encode())
                return {"closed": True} if op == "close" else {**reply, "id": self._sent}
            # the worker's answer, for a combination's process that died, to a request that process had answered
            self.log.write(f"{self.side}: dropped an answer to an earlier request: {reply}\n".encode())

    def _read(self, timeout_s: float, deadline: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s if deadline is None else deadline
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"{self.who}: no answer from the benchmark process in {timeout_s:.0f} s")
            ready, _, _ = select.select([self._reply_fd], [], [], min(left, 1.0))
            if not ready:
                if self.proc is not None and self.proc.poll() is not None:
                    raise WorkerError(f"{self.who}: the benchmark process exited with {self.proc.returncode}")
                continue
            chunk = os.read(self._reply_fd, 65536)
            if not chunk:
                code = self.proc.wait(5) if self.proc is not None else None
                raise WorkerError(f"{self.who}: the benchmark process exited with {code} (see the log)")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def stop(self) -> None:
        """End the worker and every process it forked (its own process group)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self._reply_fd >= 0:
            os.close(self._reply_fd)
            self._reply_fd = -1
        self.proc = None


@dataclass(frozen=True)
class Opened:
    """What opening one combination on one side gave: ready to time, skipped, or failed."""

    state: str  # "ready", "skip" or "error"
    reason: str = ""
    number: int = 0


def open_combination(worker: Worker, name: str, idx: int, block_s: float, select: str = "") -> Opened:
    """Fork ``worker``'s process for one combination and set it up. ``select`` (a regular expression of
    asv's ``name(params)``) tells a ``setup_cache`` that measures many figures which one is read."""
    reply = worker.request("open", name=name, idx=idx, block_s=block_s, select=select)
    if reply.get("ready"):
        return Opened("ready", number=int(reply.get("number", 1)))
    if "skip" in reply:
        return Opened("skip", str(reply["skip"]))
    return Opened("error", str(reply.get("error", reply)))


def close_combination(worker: Worker) -> None:
    reply = worker.request("close")
    if not reply.get("closed"):
        raise WorkerError(f"{worker.side}: the combination did not close: {reply}")


def turn(worker: Worker, first: bool = False) -> float:
    """One block on ``worker``: its figure, NaN when the block failed (the reason goes to the log). A failed
    ``first`` block (the side's first call of the figure) raises ``BlockError`` with the reason instead."""
    reply = worker.request("turn")
    value = reply.get("value")
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return float(value)
    if first or reply.get("ended"):  # its first call failed, or its process is gone: the figure is not measured
        raise BlockError(f"{worker.side}: {reply.get('error', reply)}")
    worker.log.write(f"{worker.side}: a block gave no figure: {reply}\n".encode())
    return math.nan


def paired_turns(
    a: Worker, b: Worker, pairs: int, budget_s: float = math.inf, warm_up: bool = True, a_first: bool = True
) -> list[tuple[float, float]]:
    """Up to ``pairs`` pairs of blocks in strict alternation, ``A B A B ...`` (``B A B A ...`` when not
    ``a_first``): each (a, b) pair is two adjacent blocks, and every block follows a block of the other side.

    Not ``A B B A``: there a side's block sometimes follows its own, which runs faster (its caches and
    threads still warm), and in a short sequence one side gets that more often than the other (on the
    2-vCPU VM a CPU matmul's launch overhead read 15% faster in such a block, and an A/A comparison
    called seven figures faster). The caller alternates ``a_first`` between pairs of processes.

    A first pair is not kept: it is each side's first call of the figure (the worker times none in
    set-up), and the first block after the other side's set-up reads slow (on the 2-vCPU VM a 1 MiB
    host copy's first turn ran at a tenth of its speed). A failure in it raises ``BlockError``. Its time
    sizes the rest: no more pairs than fit ``budget_s``, so a figure whose one call lasts seconds (a
    sustained load) costs seconds, not minutes, per pass. When the first pair alone outlasts
    ``budget_s`` it is the one pair kept: such a call is seconds long and warms itself up, so its first
    run reads as a later one (docs/design.md, "Verdicts"), and running it again would double the
    figure's cost. Without ``warm_up`` (a figure read from a cache) exactly ``pairs``.
    """
    first, second = (a, b) if a_first else (b, a)
    count = pairs
    if warm_up:
        started = time.monotonic()
        v1 = turn(first, first=True)
        v2 = turn(second, first=True)
        one_pair = max(time.monotonic() - started, 1e-6)
        fit = int(budget_s / one_pair) if math.isfinite(budget_s) else pairs
        if fit < 1:
            # a pair that alone outlasts the budget is a call of seconds, whose first run reads as its
            # later ones (its own warm-up is inside it): kept, not run again
            return [(v1, v2) if a_first else (v2, v1)]
        count = min(pairs, fit)
    out = []
    for _ in range(count):
        v1 = turn(first)
        v2 = turn(second)
        out.append((v1, v2) if a_first else (v2, v1))
    return out
