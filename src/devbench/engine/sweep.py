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
over a Unix socket. No asv here: the class's own methods do the work.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import importlib
import itertools
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable
from pathlib import Path

from devbench.engine import precision
from devbench.engine.owners import (  # noqa: F401 - sweep's names
    OWNER_ENV,
    Holder,
    _end_with,
    _exit,
    _watchdog,
    alive,
    asking_owner,
    held,
    sockets,
)

#: where the measuring processes keep their sockets, logs and journal (gpu-run sets one per run)
DIR_ENV = "DEVBENCH_SWEEP_DIR"
#: ``auto`` (default: a swept class's GPU points), ``all`` (every point of a swept class, the CPU's too: the
#: tests' switch), ``off`` (every point in its own process, as asv alone runs it)
MODE_ENV = "DEVBENCH_SWEEP"
#: set in the measuring process itself: its classes run their own methods
SERVER_ENV = "DEVBENCH_SWEEP_SERVER"
MODES = ("auto", "all", "off")
#: a measuring process ends after this long without a request
IDLE_S = 60.0
#: a built workload is let go after this long without a request (a compare's turns come back sooner)
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
    """The socket of ``owner``'s measuring process for this interpreter, its folder and this process's visible
    GPUs: in a short folder of its own (a Unix socket's path is at most 107 bytes), its log in ``folder()``."""
    ident = f"{sys.executable}|{os.environ.get('CUDA_VISIBLE_DEVICES', '')}|{sys.path}|{folder()}"
    return sockets() / f"m{owner}-{hashlib.sha1(ident.encode()).hexdigest()[:10]}.sock"


def _log_of(path: Path) -> Path:
    return folder() / path.with_suffix(".log").name


#: asv's ``--bench`` pattern of this run, when ``devbench compare`` runs it. asv selects parameter
#: combinations by matching ``name(repr(param), ...)`` but does not tell a ``setup_cache`` which it chose.
SELECT_ENV = "DEVBENCH_BENCH"
#: what a point's own environment says of its measurement: set in the measuring process for each request
#: (a compare's child selects one combination, a gpu-run stage its points; blocks, checks and threads)
PASSED_ENV = (SELECT_ENV, "DEVBENCH_BLOCKS", "DEVBENCH_CHECKED", "DEVBENCH_THREADS", "DEVBENCH_MACHINE")


def selected(name: str, params: Iterable[object]) -> bool:
    """Whether asv runs benchmark ``name`` ("module.Class.method") at ``params`` in this run.

    ``True`` unless ``SELECT_ENV`` names a pattern that ``name(repr(p), ...)`` does not match, as
    asv's ``--bench`` would not. A ``setup_cache`` that measures many figures in one go uses it
    to measure only the figures that will be read (``devbench compare``'s extra rounds).
    """
    pattern = os.environ.get(SELECT_ENV)
    if not pattern:
        return True
    return re.search(pattern, f"{name}({', '.join(repr(p) for p in params)})") is not None


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


def ask(request: dict, timeout_s: float) -> dict:
    """Send ``request`` to this asv run's measuring process (started if there is none) and return its reply."""
    owner = asking_owner()
    path = _address(owner)
    request = {**request, "env": {k: os.environ.get(k) for k in PASSED_ENV}, "timeout_s": timeout_s}
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
        proc = subprocess.Popen([sys.executable, "-m", "devbench.engine.sweep", "--socket", str(path),
                                 "--owner", str(owner),
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


# --- The measuring process ------------------------------------------------------------------------------


class Server:
    """Holds one built workload at a time and the figures measured but not yet asked for."""

    lead: tuple = ()  # the set-up cache's result, first of every call's arguments, where the class has one
    held: tuple | None = None  # (name of the class, params, its set-up cache) of the built workload
    ahead: tuple | None = None  # (class, params) of the figure just asked, whose build other points may share

    def __init__(self, journal: Path):
        self.journal = journal
        self.held = None
        self.bench: object | None = None
        self.waiting: dict[tuple, dict] = {}  # (figure, params, set-up cache) -> reply, served once
        self.fatal = False  # a CUDA error: this process ends after its reply

    def _note(self, **record) -> None:
        with open(self.journal, "a") as out:
            out.write(json.dumps({"pid": os.getpid(), "t": time.time(), **record}) + "\n")

    def handle(self, request: dict) -> dict:
        op, name, params = request["op"], request["name"], tuple(request["params"])
        cls_name = name.rsplit(".", 1)[0] if op == "measure" else name
        if op == "prepare":
            if any(k[0].rsplit(".", 1)[0] == name and k[1:] == (params, request.get("cache")) for k in self.waiting):
                return {"ok": True, "waiting": True}
            return self._build(request, cls_name, params)
        if op == "measure":
            waiting = self.waiting.pop((name, params, request.get("cache")), None)
            if waiting is not None:
                return waiting
            built = self._build(request, cls_name, params)
            if "ok" not in built:
                return built
            return self._measure(name, params)
        return {"error": f"unknown request {op!r}"}

    def _evict(self) -> None:
        if self.bench is not None and self.held is not None:
            with contextlib.suppress(Exception):
                self.bench.teardown(*self.lead, *self.held[1])
        self.bench = self.held = None
        self.lead = ()
        for hook in _EVICTED:
            hook()

    def _build(self, request: dict, cls_name: str, params: tuple) -> dict:
        cache = request.get("cache")  # the class's setup_cache result, which asv hands its points first
        if self.held == (cls_name, params, cache):
            return {"ok": True}
        self._evict()
        bench = _benchmark_class(request["module"], request.get("file"), cls_name.rsplit(".", 1)[-1])()
        lead = (pickle.loads(base64.b64decode(cache)),) if cache is not None else ()
        t0 = time.monotonic()
        try:
            bench.setup(*lead, *params)
        except NotImplementedError as skip:
            with contextlib.suppress(Exception):
                bench.teardown(*lead, *params)
            return {"skip": str(skip)}
        except Exception as exc:  # noqa: BLE001 - the point that asked reports it
            failed = _failed(exc)
            self.fatal |= bool(failed.get("fatal"))
            return failed
        self.bench, self.held, self.lead = bench, (cls_name, params, cache), lead
        self._note(built=cls_name, params=list(params), seconds=round(time.monotonic() - t0, 4))
        return {"ok": True}

    def _measure(self, asked: str, params: tuple) -> dict:
        """``asked``, then every other figure of the held workload this run selects, one after the other, then the
        points that share its build (``_beside``)."""
        cls_name = asked.rsplit(".", 1)[0]
        figures = [asked] + [f"{cls_name}.{m}" for m in figures_of(type(self.bench))
                             if f"{cls_name}.{m}" != asked and selected(f"{cls_name}.{m}", params)]  # fmt: skip
        reply = self._figures(self.bench, params, figures, asked)
        self.ahead = (cls_name, params)  # after the reply is sent: the points that share this build (``_beside``)
        return reply  # the workload stays built: a compare's next turn asks the same figure again

    def _figures(self, bench: object, params: tuple, figures: list[str], asked: str | None = None) -> dict:
        """Time ``figures`` of ``bench`` (set up at ``params``) one after the other: ``asked``'s reply, the others
        kept to be asked for once."""
        reply: dict = {}
        for figure in figures:
            for hook in _MEASURING:
                with contextlib.suppress(Exception):
                    hook(bench, params)
            t0 = time.monotonic()
            try:
                result = {"result": getattr(bench, figure.rsplit(".", 1)[1])(*self.lead, *params)}
            except Exception as exc:  # noqa: BLE001
                result = _failed(exc)
            took = round(time.monotonic() - t0, 4)
            for hook in _MEASURED:
                with contextlib.suppress(Exception):
                    hook(bench, params, figure.rsplit(".", 1)[1])
            self._note(figure=figure, params=list(params), seconds=took, **precision.of_result(result))
            if figure == asked:
                reply = result
            else:
                self.waiting[(figure, params, self.held[2] if self.held else None)] = result
            if result.get("fatal"):
                self.fatal = True
                break
        return reply

    def go_ahead(self) -> None:
        """What the last figure asked lets this process do once its reply has gone: the points sharing its build."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None and not self.fatal and self.bench is not None:
            self._beside(*ahead)

    def _beside(self, cls_name: str, params: tuple) -> None:
        """Where the class names the params its build depends on (``built_by``) and the run names its selection
        (``SELECT_ENV``: gpu-run, compare), the selected points that differ from ``params`` in the other params
        only, each set up and timed now, over the held build (``prepare.once`` keeps what they share): kept to be
        asked for. asv asks a class's points in its params' order, so these would otherwise come back after
        other builds. One that fails to set up is left to be asked for (it says why there)."""
        cls = type(self.bench)
        by, names = getattr(cls, "built_by", ()), list(getattr(cls, "param_names", ()))
        grid = [list(values) for values in getattr(cls, "params", ())]
        plain = all(isinstance(v, str | int | float | bool) for values in grid for v in values)  # as JSON gives back
        if not by or not os.environ.get(SELECT_ENV) or not plain or len(grid) != len(names) or set(by) - set(names):
            return
        same = [names.index(n) for n in by]
        for combo in itertools.product(*grid):
            if combo == params or any(combo[i] != params[i] for i in same):
                continue
            figures = [f"{cls_name}.{m}" for m in figures_of(cls) if selected(f"{cls_name}.{m}", combo)]
            if not figures or any((f, combo, self.held[2]) in self.waiting for f in figures):
                continue
            bench, t0 = cls(), time.monotonic()
            try:
                bench.setup(*self.lead, *combo)
            except Exception as exc:  # noqa: BLE001 - a skip or a failure: its own request says so
                if not isinstance(exc, NotImplementedError) and _failed(exc).get("fatal"):
                    self.fatal = True  # a CUDA error: this process ends, the next point starts a fresh one
                    return
                with contextlib.suppress(Exception):
                    bench.teardown(*self.lead, *combo)
                continue
            self._note(beside=cls_name, params=list(combo), seconds=round(time.monotonic() - t0, 4))
            self._figures(bench, combo, figures)
            with contextlib.suppress(Exception):
                bench.teardown(*self.lead, *combo)
            if self.fatal:
                return


def _benchmark_class(module: str, file: str | None, name: str) -> type:
    """The asking point's class, imported here as asv imported it (the folder above its package on the path)."""
    if file and module not in sys.modules:
        root = Path(file).resolve().parents[module.count(".")]
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    return getattr(importlib.import_module(module), name)


def _failed(exc: BaseException) -> dict:
    text = f"{type(exc).__name__}: {exc}"
    fatal = "CUDA" in text or "cuda" in type(exc).__module__ or type(exc).__name__ == "AcceleratorError"
    return {"error": text, "traceback": traceback.format_exc()[-4000:], "fatal": fatal}


@contextlib.contextmanager
def _environment(values: dict):
    """The asking point's measurement settings (``PASSED_ENV``) in this process while its request is served."""
    before = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if k in PASSED_ENV:
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        yield
    finally:
        for k, v in before.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def serve(path: Path, owner: int, journal: Path | None = None, idle_s: float = IDLE_S) -> None:
    """Answer requests at ``path`` until ``owner`` exits, ``idle_s`` pass without one (not under a holder, which
    bounds its life: a stage's search can keep it waiting longer), or a CUDA error; each build and figure appended
    to ``journal`` (default: beside the socket)."""
    if os.environ.get(OWNER_ENV) == str(owner):
        idle_s = float("inf")
    server = Server(journal or path.parent / "journal.jsonl")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    ours = os.stat(path).st_ino
    listener.listen(4)
    listener.settimeout(1.0)
    last = time.monotonic()
    threading.Thread(target=_end_with, args=(owner, path, ours), daemon=True).start()

    def close() -> None:
        listener.close()
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:  # another process's socket, started after this one's, stays
                path.unlink()
                path.with_suffix(".lock").unlink(missing_ok=True)

    try:
        while alive(owner) and time.monotonic() - last < idle_s:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if server.held is not None and time.monotonic() - last > EVICT_IDLE_S:
                    server._evict()  # no request for a while: the workload's memory goes back
                continue
            with conn, conn.makefile("r") as lines:
                line = lines.readline()
                if not line:
                    continue
                env, limit, sent = {}, 1e9, False
                try:
                    request = json.loads(line)
                    # a request that reaches its point's timeout ends this process just before it: a hung figure
                    # must not make every later point wait its timeout too, and the point, not the next one, sees
                    # the process go
                    env = request.get("env") if isinstance(request.get("env"), dict) else {}
                    limit = float(request.get("timeout_s") or 0) or 1e9
                    with _watchdog(limit, path, ours), _environment(env):
                        reply = server.handle(request)
                except Exception as exc:  # noqa: BLE001 - a bad request or an import that failed: say so, go on
                    reply = _failed(exc)
                    server.fatal |= bool(reply.get("fatal"))
                if server.fatal:
                    close()  # no later point may connect to a process that is ending
                with contextlib.suppress(OSError):  # a point killed while it waited: the figure waits no more
                    conn.sendall((json.dumps(reply) + "\n").encode())
                    sent = True
            # the reply has gone (the asked point's time holds its own figures only): the points that share its
            # build, each under its class's whole timeout, the next request waiting for them
            if sent:
                beside = float(getattr(server.bench, "timeout", 0) or 0) or limit
                with _watchdog(beside, path, ours), _environment(env):
                    server.go_ahead()
            else:
                server.ahead = None  # its point is gone: nothing is done ahead for it
            if server.fatal:
                close()
            last = time.monotonic()
            if server.fatal:
                break
    finally:
        server._evict()
        close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devbench.engine.sweep",
        description="The measuring process a swept benchmark's GPU points ask; they start it themselves.")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--owner", required=True, type=int, help="the process whose end ends this one")
    parser.add_argument("--journal", type=Path, help="where each build and figure is recorded (JSON lines)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop ends it cleanly: its socket goes
    try:
        serve(args.socket, args.owner, args.journal)
    except KeyboardInterrupt:  # the run's Ctrl-C or its end reaches this process's group too
        return 130
    return 0


if __name__ == "__main__":
    # run as the imported module, not as __main__: the suite registers its hooks (on_evict) on
    # devbench.engine.sweep, and
    # a second copy of this module's globals would never call them (every workload built would stay in memory)
    from devbench.engine.sweep import main as _main

    sys.exit(_main())
