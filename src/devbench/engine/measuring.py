"""The measuring process itself: the server that a swept class's points ask (``devbench.engine.sweep``).

It holds one built workload at a time and the figures measured for it but not yet asked for; it answers
``prepare`` (build with the class's own ``setup``) and ``measure`` (the asked figure, then the workload's other
selected figures, then the points that share its build: ``built_by``), one JSON line each way over a Unix
socket, and appends each build and figure to the journal. It ends with its owner, after ``sweep.IDLE_S`` idle,
or after a CUDA error. ``python -m devbench.engine.measuring`` is started by ``sweep.ask``; nothing else
starts it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import importlib
import itertools
import json
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from devbench.engine import owners, precision
from devbench.engine.owners import OWNER_ENV, _end_with, _watchdog, alive, pid_line
from devbench.engine.sweep import (
    _EVICTED,
    _MEASURED,
    _MEASURING,
    EVICT_IDLE_S,
    IDLE_S,
    PASSED_ENV,
    SELECT_ENV,
    TURNS_ENV,
    figures_of,
    selected,
)


class Server:
    """Holds one built workload at a time and the figures measured but not yet asked for."""

    lead: tuple = ()  # the set-up cache's result, first of every call's arguments, where the class has one
    held: tuple | None = None  # (name of the class, params, its set-up cache) of the built workload
    #: (the figure just asked, its params, the other figures of its workload to time) once its reply is sent: those
    #: figures, then the points that share its build (``go_ahead``)
    ahead: tuple | None = None

    def __init__(self, journal: Path, spawned: float | None = None):
        self.journal = journal
        self.spawned = spawned  # when its asker started it (seconds since the epoch): journaled at its first build
        self.held = None
        self.bench: object | None = None
        self.waiting: dict[tuple, dict] = {}  # (figure, params, set-up cache) -> reply, served once
        #: the figure whose ask measured each waiting one ahead: asked again, it begins a new round (asv's next, a
        #: later stage's), and what its last ask measured ahead is no one's now (``_new_round``)
        self.origin: dict[tuple, tuple] = {}
        self.run: object = None  # the asv call that asks (the points' parent): another's waiting figures are not its
        self.fatal = False  # a CUDA error: this process ends after its reply
        self.lost = ""  # what an eviction's hook raised (a context an earlier figure broke shows here first)

    def _note(self, **record) -> None:
        with open(self.journal, "a") as out:
            out.write(json.dumps({"pid": os.getpid(), "t": time.time(), **record}) + "\n")

    def handle(self, request: dict) -> dict:
        if request.get("op") == "ping":  # answered once every earlier request, and what it let run ahead, is done
            return {"ok": True}
        op, name, params = request["op"], request["name"], tuple(request["params"])
        cls_name = name.rsplit(".", 1)[0] if op == "measure" else name
        if request.get("run") != self.run:  # another asv call (a gpu-run stage after another): it measures afresh
            self.waiting.clear()
            self.origin.clear()
            self.run = request.get("run")
        if op == "prepare":
            if any(k[0].rsplit(".", 1)[0] == name and k[1:] == (params, request.get("cache")) for k in self.waiting):
                return {"ok": True, "waiting": True}
            return self._build(request, cls_name, params)
        if op == "measure":
            key = (name, params, request.get("cache"))
            waiting = self.waiting.pop(key, None)
            if waiting is not None:
                self.origin.pop(key, None)
                return waiting
            self._new_round(key)
            built = self._build(request, cls_name, params)
            if "ok" not in built:
                return built
            return self._measure(name, params)
        return {"error": f"unknown request {op!r}"}

    def _new_round(self, asked: tuple) -> None:
        """``asked`` is measured (not served from ``waiting``): what its earlier ask measured ahead and no point
        collected since (asv failed or skipped that point, or a wider selection named it) is dropped, so this
        round measures it again instead of serving an earlier round's figure."""
        for key in [k for k, origin in self.origin.items() if origin == asked]:
            self.waiting.pop(key, None)
            del self.origin[key]

    def _evict(self) -> None:
        if self.bench is not None and self.held is not None:
            with contextlib.suppress(Exception):
                self.bench.teardown(*self.lead, *self.held[1])
        self.bench = self.held = None
        self.lead = ()
        for hook in _EVICTED:
            try:
                hook()
            except Exception as exc:  # noqa: BLE001 - a context an earlier figure broke: the next build says so
                self.lost = self.lost or f"{type(exc).__name__}: {exc}"

    def _build(self, request: dict, cls_name: str, params: tuple) -> dict:
        cache = request.get("cache")  # the class's setup_cache result, which asv hands its points first
        if self.held == (cls_name, params, cache):
            return {"ok": True}
        self._evict()
        if self.lost and _context_lost():  # nothing of this point ran: a fresh process measures it
            self.fatal = True
            return {"error": f"this measuring process's CUDA context failed while it let the last workload go "
                             f"({self.lost}): {cls_name}{params} is asked again of a fresh one", "fatal": True,
                    "retry": True}  # fmt: skip
        self.lost = ""
        bench = _benchmark_class(request["module"], request.get("file"), cls_name.rsplit(".", 1)[-1])()
        if self.spawned is not None:  # what the first point waited for before its build began: the start
            self._note(started=cls_name, seconds=round(max(0.0, time.time() - self.spawned), 4))
            self.spawned = None
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
        """``asked`` alone: its reply goes first (the asked point's time holds its own figure only); then, once it
        has gone, every other figure of the held workload this run selects and the points that share its build
        (``go_ahead``)."""
        cls_name = asked.rsplit(".", 1)[0]
        others = [f"{cls_name}.{m}" for m in figures_of(type(self.bench))
                  if f"{cls_name}.{m}" != asked and selected(f"{cls_name}.{m}", params)]  # fmt: skip
        reply = self._figures(self.bench, params, [asked], asked)
        self.ahead = (asked, params, others)
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
                key = (figure, params, self.held[2] if self.held else None)
                self.waiting[key] = result
                if self.origin_of is not None:
                    self.origin[key] = self.origin_of
            if result.get("fatal"):
                self.fatal = True
                break
        return reply

    #: the asked figure's key while what it lets this process do ahead is measured (``origin``)
    origin_of: tuple | None = None

    def go_ahead(self, watch=None) -> None:
        """What the last figure asked lets this process do once its reply has gone: the other figures of its
        workload, then the points sharing its build (``_beside``), each set of figures under ``watch()`` (a fresh
        watchdog of the class's timeout: a hung one ends this process, not the point that asked)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None or self.fatal or self.bench is None:
            return
        asked, params, others = ahead
        watch = watch or contextlib.nullcontext
        self.origin_of = (asked, params, self.held[2] if self.held else None)
        try:
            if others:
                with watch():
                    self._figures(self.bench, params, others)
            if not self.fatal:
                self._beside(asked.rsplit(".", 1)[0], params, watch)
        finally:
            self.origin_of = None

    def _beside(self, cls_name: str, params: tuple, watch=contextlib.nullcontext) -> None:
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
            with watch():
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
    """A failed point's reply; ``fatal`` (this process ends after it) where the error names CUDA or the process's
    CUDA context no longer works (a cuDNN, NCCL or wrapped error says nothing of CUDA)."""
    text = f"{type(exc).__name__}: {exc}"
    fatal = "CUDA" in text or "cuda" in type(exc).__module__ or type(exc).__name__ == "AcceleratorError"
    return {"error": text, "traceback": traceback.format_exc()[-4000:], "fatal": fatal or _context_lost()}


def time_left(request: dict, now: float | None = None) -> float:
    """Seconds a request's point still waits for its reply: its timeout less the time since it was sent (``sent``:
    it waited in the socket's queue while this process served earlier points, or the points beside them); its
    whole timeout where it carries no time; 1e9 where it names no timeout."""
    limit = float(request.get("timeout_s") or 0) or 1e9
    sent = request.get("sent")
    if isinstance(sent, int | float) and not isinstance(sent, bool):
        limit -= max(0.0, (time.time() if now is None else now) - sent)
    return limit


def _context_lost() -> bool:
    """Whether this process made a CUDA context that no longer works: a synchronize of any GPU it holds a context on
    raises (a sticky error; one on GPU 1 of a peer copy is not seen by synchronizing GPU 0). A GPU it never used is
    left alone: a synchronize there makes a context (about half a GiB of each of a node's other GPUs for the rest of
    this process, or an error where another process holds that GPU in exclusive mode)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    held = getattr(getattr(torch, "_C", None), "_cuda_hasPrimaryContext", None)  # CUDA builds: asks, makes none
    try:
        for index in range(torch.cuda.device_count()):
            if held is None or held(index):
                torch.cuda.synchronize(index)
    except Exception:  # noqa: BLE001 - any failure here means the context cannot be trusted
        return True
    return False


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


def _drop_draws() -> None:
    """The kept seeded draws (``measure.randn``) let go, where a workload loaded that module."""
    measure = sys.modules.get("devbench.engine.measure")
    if measure is not None:
        measure.drop_draws()


def _turn_away(listener: socket.socket) -> None:
    """Answer every point already queued at ``listener`` (its socket file gone: no more can come) with ``retry``:
    this process measures nothing more, and each asks a fresh one (``swept._ask``) instead of failing."""
    with contextlib.suppress(OSError):
        listener.setblocking(False)
        while True:
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            with contextlib.suppress(OSError), conn:
                conn.settimeout(1.0)
                conn.makefile("r").readline()
                conn.sendall((json.dumps({"retry": True, "error": "the measuring process was ending"}) + "\n").encode())


def serve(path: Path, owner: int, journal: Path | None = None, idle_s: float = IDLE_S,
          spawned: float | None = None) -> None:  # fmt: skip
    """Answer requests at ``path`` until ``owner`` exits, ``idle_s`` pass without one (not under a holder, which
    bounds its life: a stage's search can keep it waiting longer), or a CUDA error; each build and figure appended
    to ``journal`` (default: beside the socket), and first, where ``spawned`` says when its asker started it (seconds
    since the epoch), the seconds until its first build began, by that build's class (gpu-run learns a family's cost
    without them)."""
    if os.environ.get(OWNER_ENV) == str(owner):
        idle_s = float("inf")
    server = Server(journal or path.parent / "journal.jsonl", spawned)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    ours = os.stat(path).st_ino
    path.with_suffix(".pid").write_text(pid_line())  # a holder waits on this process, not on its socket
    listener.listen(4)
    listener.settimeout(1.0)
    last, turns = time.monotonic(), False
    threading.Thread(target=_end_with, args=(owner, path, ours), daemon=True).start()

    def close() -> None:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:  # another process's socket, started after this one's, stays
                path.unlink()  # first: no point connects from here on (the start lock stays: ``owners._exit``)
                path.with_suffix(".pid").unlink(missing_ok=True)
        _turn_away(listener)  # those that connected before it went ask a fresh process
        listener.close()

    owners.BEFORE_EXIT.append(lambda: _turn_away(listener))  # a watchdog's or the owner's end, mid-figure too

    try:
        while alive(owner) and time.monotonic() - last < idle_s:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                # no request for a while: the memory goes back, unless the asker takes turns with another side
                if time.monotonic() - last > EVICT_IDLE_S and not turns:
                    if server.held is not None:
                        server._evict()
                    _drop_draws()  # the kept draws too, a failed or skipped set-up's among them
                continue
            with conn, conn.makefile("r") as lines:
                line = lines.readline()
                if not line:
                    continue
                env, limit, sent, request = {}, 1e9, False, {}
                try:
                    request = json.loads(line)
                    # a request that reaches its point's timeout ends this process just before it: a hung figure
                    # must not make every later point wait its timeout too, and the point, not the next one, sees
                    # the process go
                    env = request.get("env") if isinstance(request.get("env"), dict) else {}
                    turns = bool(env.get(TURNS_ENV)) if request.get("op") != "ping" else turns
                    limit = time_left(request)
                    if limit <= 0:  # it waited behind earlier work until its point gave up: measure nothing for it
                        reply = {"error": f"not measured: the point's {request.get('timeout_s'):.0f} s had passed "
                                          "while its request waited behind earlier work", "fatal": False}  # fmt: skip
                    else:
                        with _watchdog(limit, path, ours), _environment(env):
                            try:
                                reply = server.handle(request)
                            except Exception as exc:  # noqa: BLE001 - an import that failed: say so, go on
                                reply = _failed(exc)  # under the watchdog: its synchronize may wait on a hung GPU
                                server.fatal |= bool(reply.get("fatal"))
                except Exception as exc:  # noqa: BLE001 - a bad request: say so, go on
                    reply = _failed(exc)
                    server.fatal |= bool(reply.get("fatal"))
                if server.fatal:
                    close()  # no later point may connect to a process that is ending
                with contextlib.suppress(OSError):  # a point killed while it waited: the figure waits no more
                    conn.sendall((json.dumps(reply) + "\n").encode())
                    sent = True
            # the reply has gone (the asked point's time holds its own figure only): the workload's other figures,
            # then the points that share its build, each under its class's whole timeout (a hung one ends this
            # process, and the points queued meanwhile ask a fresh one); the next request waits for them, its point's
            # time holding them, so the points beside share the build
            if sent:
                beside = float(request.get("class_timeout_s") or 0) or limit
                with _environment(env):
                    server.go_ahead(functools.partial(_watchdog, beside, path, ours))
            else:
                server.ahead = None  # its point is gone: nothing is done ahead for it
            if server.fatal:
                close()
            last = time.monotonic()
            if server.fatal:
                break
    finally:
        close()  # first: a point that asks while the workload is let go asks a fresh process, not this ending one
        server._evict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devbench.engine.measuring",
        description="The measuring process a swept benchmark's GPU points ask; they start it themselves.")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--owner", required=True, type=int, help="the process whose end ends this one")
    parser.add_argument("--journal", type=Path, help="where each build and figure is recorded (JSON lines)")
    parser.add_argument("--spawned", type=float, help="when the asker started it (seconds since the epoch)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop ends it cleanly: its socket goes
    try:
        serve(args.socket, args.owner, args.journal, spawned=args.spawned)
    except KeyboardInterrupt:  # the run's Ctrl-C or its end reaches this process's group too
        return 130
    return 0


if __name__ == "__main__":
    # run as the imported module, not as __main__: a second copy of this module's globals would hold a
    # second ``Server`` class the tests and hooks never see
    from devbench.engine.measuring import main as _main

    sys.exit(_main())
