"""The measuring process: one per asv run and GPU, which builds each workload once and times all its figures.

asv runs every point (a benchmark method at one combination of params) in a process of its own. On a GPU
that process pays a CUDA context, cuBLAS's start and the workload's build, check and warm-up before its
first sample (1.4 s on an H200), and a workload's two to four figures pay it two to four times. For a class
that sets ``swept = True`` (``devbench.engine.suite``), a point on a GPU asks this process instead:

* ``prepare`` (from the point's ``setup``): build the workload with the class's own ``setup``, unless this
  process holds it already or has its figure waiting; a skip (``NotImplementedError``) comes back as one;
* ``measure`` (from the point's ``track_`` method): the figure, timed here; the workload's other figures that
  the run selects (``suite.selected``) are timed right after it, from the same built workload, and each waits
  to be asked once (asv's next round asks again and is measured again, never served twice).

The process starts on the first point's request and is owned by that point's parent (asv's forkserver or
its main process, the same for the whole ``asv run``), or by the process ``OWNER_ENV`` names (``held``:
``devbench gpu-run`` holds one over its consecutive asv calls): it ends when its owner does, or after ``IDLE_S``
idle. A CUDA error fails the figure it happened in, and the process ends: the next point starts a fresh
one. Every build and every figure is appended to ``journal.jsonl`` in its folder (what was built, how long
each figure sampled): ``devbench gpu-run`` and the tests read it. The protocol is one JSON line each way
over a Unix socket. No asv here: the class's own methods do the work. This module is the asking side (``ask``,
starting the process, the settings it passes, the hooks the suite registers); the process itself is
``devbench.engine.measuring``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from devbench.engine.owners import (  # noqa: F401 - sweep's names
    OWNER_ENV,
    Holder,
    alive,
    asking_owner,
    held,
    sockets,
)

#: where the measuring processes keep their logs and journal (gpu-run sets one per run; sockets: ``owners.sockets``)
DIR_ENV = "DEVBENCH_SWEEP_DIR"
#: ``auto`` (default: a swept class's GPU points), ``all`` (every point of a swept class, the CPU's too: the
#: tests' switch), ``off`` (every point in its own process, as asv alone runs it)
MODE_ENV = "DEVBENCH_SWEEP"
#: set in the measuring process itself: its classes run their own methods
SERVER_ENV = "DEVBENCH_SWEEP_SERVER"
MODES = ("auto", "all", "off")
#: a measuring process ends after this long without a request
IDLE_S = 60.0
#: a built workload is let go after this long without a request (not in a compare's turns: ``TURNS_ENV``)
EVICT_IDLE_S = 5.0
#: how long a point waits for a measuring process to start (an interpreter, torch, a CUDA context)
START_S = 180.0


def mode(default: str = "auto") -> str:
    """``DEVBENCH_SWEEP``'s value (``default`` when unset); a bad value names itself."""
    value = os.environ.get(MODE_ENV, "") or default
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


def in_server() -> bool:
    return bool(os.environ.get(SERVER_ENV))


def folder() -> Path:
    base = os.environ.get(DIR_ENV)
    return Path(base) if base else Path(tempfile.gettempdir()) / f"devbench-sweep-{os.getuid()}"


def _address(owner: int) -> Path:
    """The socket of ``owner``'s measuring process for this interpreter, its folder, this process's visible GPUs and
    the commit asv runs (``asv run --launch-method spawn`` makes asv itself every point's parent, for every commit:
    a process that imported one commit's code never measures another's): in a short folder of its own (a Unix
    socket's path is at most 107 bytes), its log in ``folder()``."""
    ident = (f"{sys.executable}|{os.environ.get('CUDA_VISIBLE_DEVICES', '')}|{sys.path}|{folder()}|"
             f"{os.environ.get('ASV_COMMIT', '')}")  # fmt: skip
    return sockets() / f"m{owner}-{hashlib.sha1(ident.encode()).hexdigest()[:10]}.sock"


def _log_of(path: Path) -> Path:
    return folder() / path.with_suffix(".log").name


#: asv's ``--bench`` pattern of this run, when ``devbench compare`` runs it. asv selects parameter
#: combinations by matching ``name(repr(param), ...)`` but does not tell a ``setup_cache`` which it chose.
SELECT_ENV = "DEVBENCH_BENCH"
#: what a point's own environment says of its measurement: set in the measuring process for each request
#: (a compare's child selects one combination, a gpu-run stage its points; blocks, checks and threads)
PASSED_ENV = (SELECT_ENV, "DEVBENCH_BLOCKS", "DEVBENCH_CHECKED", "DEVBENCH_THREADS", "DEVBENCH_MACHINE",
              "DEVBENCH_TURNS", "ASV_COMMIT", "ASV_ENV_NAME")  # fmt: skip
#: set by ``devbench compare``'s worker for the benchmarks it runs (``compare.worker.TURNS_ENV``): the sides take
#: turns, and a side waits out the other's, however long: its measuring process keeps the workload until the next
#: build, never letting it go on idling (its tear-down and the allocator's release would land in the other's turn)
TURNS_ENV = "DEVBENCH_TURNS"


def selected(name: str, params: Iterable[object]) -> bool:
    """Whether asv runs benchmark ``name`` ("module.Class.method") at ``params`` in this run.

    ``True`` unless ``SELECT_ENV`` names a pattern that ``name(repr(p), ...)`` does not match, as
    asv's ``--bench`` would not. A ``setup_cache`` that measures many figures in one go uses it
    to measure only the figures that will be read (``devbench compare``'s extra rounds).
    """
    pattern = os.environ.get(SELECT_ENV)
    if not pattern:
        return True
    params = list(params)  # asv names a benchmark without params by its name alone
    return re.search(pattern, f"{name}({', '.join(repr(p) for p in params)})" if params else name) is not None


def figures_of(cls: type) -> list[str]:
    """The ``track_`` methods of ``cls``, in the order the class defines them (a swept class has no other kind)."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        names += [n for n, f in vars(klass).items() if n.startswith("track_") and callable(f) and n not in names]
    return names


_EVICTED: list = []
_MEASURING: list = []
_MEASURED: list = []


def on_evict(hook) -> None:
    """Call ``hook()`` whenever the measuring process lets a workload go (``prepare.once``'s cache forgets it)."""
    if hook not in _EVICTED:
        _EVICTED.append(hook)


def on_figure(before, after) -> None:
    """Call ``before(bench, params)`` before each figure of a workload is timed and ``after(bench, params, figure)``
    after it (the suite records the GPU's state while each figure was timed, keyed by that figure, not while the
    workload then waits to be let go)."""
    if (before, after) not in zip(_MEASURING, _MEASURED, strict=True):
        _MEASURING.append(before)
        _MEASURED.append(after)


class MeasuringError(RuntimeError):
    """The measuring process failed a point (the message says how) or could not be reached."""


def _now() -> float:
    return time.time()


def ask(request: dict, timeout_s: float) -> dict:
    """Send ``request`` to this asv run's measuring process (started if there is none) and return its reply."""
    owner = asking_owner()
    path = _address(owner)
    # when it was sent (the wall clock both processes share): a request that waited its point's whole timeout
    # behind earlier work is answered, not measured (``measuring.time_left``)
    # ``run``: the asv call that asks (this point's parent), whose figures measured ahead are no other call's
    request = {**request, "env": {k: os.environ.get(k) for k in PASSED_ENV}, "timeout_s": timeout_s, "sent": _now(),
               "run": os.getppid()}  # fmt: skip
    try:
        with _connected(path, owner) as conn:
            conn.settimeout(timeout_s)
            conn.sendall((json.dumps(request) + "\n").encode())
            with conn.makefile("r") as reply:
                line = reply.readline()
    except (ConnectionError, TimeoutError):  # no reply within the point's time: the process's log says why
        line = ""
    if not line:
        point = f"{request.get('op')} {request.get('name')}{tuple(request.get('params', ()))}"
        log = _log_of(path)
        raise MeasuringError(f"no reply from the measuring process to {point} (ended, or out of time); log: {log}")
    return json.loads(line)


@contextlib.contextmanager
def _connected(path: Path, owner: int):
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.parent.stat().st_uid != os.getuid():
        raise MeasuringError(f"{path.parent} belongs to another user: the measuring process's socket is not safe there")
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time
        conn = _connect(path)
        if conn is None:
            conn = _start(path, owner)
    try:
        yield conn
    finally:
        conn.close()


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        return conn
    except OSError:
        conn.close()
        return None


def _start(path: Path, owner: int) -> socket.socket:
    """Start a measuring process for ``owner`` at ``path`` and connect to it."""
    path.unlink(missing_ok=True)
    log = _log_of(path)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, SERVER_ENV: "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())}  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "devbench.engine.measuring", "--socket", str(path),
                                 "--owner", str(owner), "--spawned", repr(time.time()),
                                 "--journal", str(folder() / "journal.jsonl")],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, close_fds=True,
                                start_new_session=os.environ.get(OWNER_ENV) == str(owner),  # outlives the call
                                cwd=folder())  # asv's point runs in a folder it removes after the point  # fmt: skip
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        conn = _connect(path)
        if conn is not None:
            return conn
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise MeasuringError(f"the measuring process exited with {proc.returncode} before it listened:\n{tail}")
        time.sleep(0.05)
    proc.kill()
    raise MeasuringError(f"the measuring process did not listen within {START_S:.0f} s (log: {log})")
