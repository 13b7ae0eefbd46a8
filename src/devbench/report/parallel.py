"""Work in a forked child beside this process: ``Forked`` and ``in_halves``. No torch.

The report's slow parts (reading 1,000 asv files, fitting 1,500 step models) are Python
loops bound to one core. A forked child inherits its inputs as they are in memory
(nothing is pickled on the way in), runs the work there and sends its result back
through a pipe while this process goes on with other work. Small jobs, one-core
machines and platforms without ``fork`` run the work in this process instead, when
the result is asked for.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def can_fork() -> bool:
    return cores() >= 2 and "fork" in multiprocessing.get_all_start_methods()


#: seconds a terminated child gets before it is killed
GRACE_S = 2.0


class Forked(Generic[T]):
    """``work()`` started in a forked child now; ``result()`` waits for it and returns it.

    With ``fork=False`` (or no second core, or no ``fork``) nothing starts until
    ``result()``, which then runs ``work()`` here. The child's exception is raised by
    ``result()`` as ``RuntimeError`` with its message. Fork before starting threads:
    a child forked while another thread holds a lock inherits the lock held.
    ``close()`` stops a child whose result is no longer wanted (an error, Ctrl-C here);
    use ``with Forked(...) as job:`` to have that done.
    """

    def __init__(self, work: Callable[[], T], fork: bool = True, name: str = "devbench-report-child") -> None:
        self._work = work
        self._got: list = []
        self._proc = None
        if not (fork and can_fork()):
            return
        ctx = multiprocessing.get_context("fork")
        self._receive, send = ctx.Pipe(duplex=False)

        def child() -> None:
            try:
                item = (True, work())
            except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
                item = (False, f"{type(exc).__name__}: {exc}")
            send.send(item)  # a send larger than the pipe's buffer waits until the parent reads
            send.close()

        self._proc = ctx.Process(target=child, name=name, daemon=True)
        # A collection in the child would touch every inherited container object, copying its pages;
        # frozen objects are left out of collections. (Measured on the 1,000-file history: no change in
        # peak memory either way; it is the usual guard for forking a large heap.)
        # (Left frozen where the caller froze them first: ``devbench report`` does, after loading.)
        frozen = gc.get_freeze_count() > 0
        gc.freeze()
        try:
            self._proc.start()
        finally:
            if not frozen:
                gc.unfreeze()
        send.close()  # the child holds the sending end now

    @property
    def forked(self) -> bool:
        return self._proc is not None

    def result(self) -> T:
        """The work's value, waiting for it (once; later calls return it again)."""
        if not self._got:
            self._got.append(self._next())
        return self._got[0]

    def _next(self):
        if self._proc is None:
            return self._work()
        try:
            ok, value = self._receive.recv()  # before join: a large result would block the child's send
        except EOFError:
            self._receive.close()
            self._proc.join()
            raise RuntimeError(f"the forked child ({self._proc.name}) died (exit {self._proc.exitcode})") from None
        self._receive.close()
        self._proc.join()
        self._proc = None
        if not ok:
            raise RuntimeError(f"the forked child failed: {value}")
        return value

    def close(self) -> None:
        """Stop the child if it is still running (its result is dropped)."""
        if self._proc is not None:
            self._proc.terminate()
            # a SIGTERM that lands between fork and the child's interpreter resetting its signal state
            # is lost where a Python handler for it was inherited (as under pytest): then kill
            self._proc.join(GRACE_S)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._receive.close()
            self._proc = None

    def __enter__(self) -> Forked[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_halves(work: Callable[[int, int], T], n: int, min_items: int) -> list[T]:
    """``[work(0, n)]``, or ``[work(0, half), work(half, n)]`` with the second half in a forked child.

    Results come back in order. The child's exception is raised here as ``RuntimeError`` with its
    message; an exception (or Ctrl-C) here stops the child first.
    """
    if n < min_items or not can_fork():
        return [work(0, n)]
    half = n // 2
    with Forked(lambda: work(half, n), name="devbench-report-half") as second:
        first = work(0, half)
        return [first, second.result()]
