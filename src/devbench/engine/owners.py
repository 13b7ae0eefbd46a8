"""Who owns a measuring process (``devbench.engine.sweep``): the asking point's parent, or a holder that
``devbench gpu-run`` keeps over its consecutive asv calls, so that one measuring process serves them all; and what
ends it (its owner's end, a request past its point's timeout), its socket gone first."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

#: the pid whose end ends the measuring processes started while it lives (``held``: ``devbench gpu-run`` holds one
#: over its consecutive asv calls, so that one measuring process, its CUDA context and cuBLAS's start serve them
#: all); unset, the asking point's parent (asv's forkserver: one asv call)
OWNER_ENV = "DEVBENCH_SWEEP_OWNER"


def asking_owner() -> int:
    """The owner of the measuring process this point asks: the held one where ``OWNER_ENV`` names a live one, else
    this point's parent."""
    value = os.environ.get(OWNER_ENV, "")
    return int(value) if value.isdigit() and alive(int(value)) else os.getppid()


#: bytes a Unix socket's path may hold (Linux's ``sun_path`` less its closing NUL)
SOCKET_PATH_MAX = 107
#: the longest socket name in the folder (``sweep._address``: an owner's pid of 7 digits, 10 hex digits)
_LONGEST_NAME = len("m9999999-0123456789.sock")


def sockets() -> Path:
    """The folder of the measuring processes' sockets: in the temporary folder where a socket's path there fits in
    ``SOCKET_PATH_MAX`` bytes, else in ``/tmp`` (a long ``TMPDIR``: a test's, a job scheduler's); the same for every
    process of one environment."""
    folder = f"devbench-sweep-{os.getuid()}"
    for base in (tempfile.gettempdir(), "/tmp"):
        fits = len(os.fsencode(os.path.join(base, folder))) + 1 + _LONGEST_NAME <= SOCKET_PATH_MAX
        if fits and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return Path(base) / folder
    return Path(tempfile.gettempdir()) / folder  # no short folder: binding the socket says why


class Holder:
    """A process that owns the measuring processes started while it lives: ``env()`` is what the asv calls that
    share them add to their environment (``OWNER_ENV``, the holder started on first use). A measuring process
    with a holder runs in a session of its own, so that the end of one asv call's session leaves it to the next
    call; it ends within a second of its holder, mid-figure too. ``release()`` ends the holder and waits, at most
    ``wait_s``, until their sockets are gone. A kill of the process that holds it ends the holder too (its pipe
    closes)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                         stdin=subprocess.PIPE)  # fmt: skip
        return {OWNER_ENV: str(self.proc.pid)}

    def release(self, wait_s: float = 30.0) -> bool:
        """End the owner and wait up to ``wait_s`` for its measuring processes to end; whether one did not (stuck
        in a driver call, or ending slower than that). A process removes its socket before it exits, and its exit
        can hang in the driver: the pid each wrote beside its socket says whether it ended; a socket, only where
        none wrote one."""
        proc, self.proc = self.proc, None
        if proc is None:
            return False
        pids = measuring_pids(proc.pid)
        proc.stdin.close()
        proc.kill()  # a forked child may hold the pipe open as well: its end alone would not end the holder
        proc.wait()
        deadline = time.monotonic() + wait_s

        def left() -> bool:
            if pids:  # the same process, not another given its pid since (its start time says)
                return any(alive(pid) and started_at(pid) in (start, None) for pid, start in pids)
            return any(sockets().glob(f"m{proc.pid}-*.sock"))

        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        return left()


def measuring_pids(owner: int) -> list[tuple[int, str | None]]:
    """The measuring processes ``owner`` owns: the pid and start time each wrote beside its socket (``pid_line``)."""
    pids = []
    for path in sockets().glob(f"m{owner}-*.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            words = path.read_text().split()
            pids.append((int(words[0]), words[1] if len(words) > 1 else None))
    return pids


def started_at(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks since boot (/proc/PID/stat's 22nd field), None where unknown: a pid and
    its start time name one process, where the pid alone can be given to another after it ends."""
    return _stat_field(f"/proc/{pid}/stat", 19)


def pid_line() -> str:
    """This process's pid and start time, as a measuring process writes them beside its socket."""
    return f"{os.getpid()} {started_at(os.getpid()) or ''}".strip()


@contextlib.contextmanager
def held(wait_s: float = 30.0) -> Iterator[Holder]:
    """A ``Holder`` for the block, released (and its measuring processes waited for) when it ends."""
    holder = Holder()
    try:
        yield holder
    finally:
        holder.release(wait_s)


def _stat(path: str | Path) -> list[str]:
    """The fields of a /proc ``stat`` file after the command's closing parenthesis (the state first); raises
    ``OSError`` where it cannot be read, ``IndexError`` where it is not one."""
    return Path(path).read_text(errors="replace").rsplit(")", 1)[1].split()


def _stat_field(path: str | Path, index: int) -> str | None:
    """One of ``_stat``'s fields, None where unreadable."""
    try:
        return _stat(path)[index]
    except (OSError, IndexError):
        return None


def process_state(pid: int) -> str:
    """A process's state letter from /proc (``D``: uninterruptible, in the kernel; ``Z``: ended, unreaped), ``?``
    where unknown."""
    return _stat_field(f"/proc/{pid}/stat", 0) or "?"


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (one of another user's counts); a zombie, which has ended and waits for its
    parent to reap it (in a container whose first process reaps nothing, for good), is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: the state follows the command's closing parenthesis in /proc/PID/stat
        state = _stat(f"/proc/{pid}/stat")[0]
    except (FileNotFoundError, ProcessLookupError):
        return not Path("/proc/self/stat").exists()  # reaped since the signal; without /proc, the signal's answer
    except (OSError, IndexError):
        return True
    if state not in ("Z", "X"):
        return True
    # the main thread ended; another may still be in the kernel (a driver call), the process with it
    tasks = Path(f"/proc/{pid}/task").glob("*/stat")
    return any(_stat_field(t, 0) not in ("Z", "X", None) for t in tasks)


@contextlib.contextmanager
def _watchdog(limit: float, path: Path, ours: int):
    """End this process just before ``limit`` seconds pass inside (``_exit``, 124)."""
    timer = threading.Timer(limit - min(5.0, 0.1 * limit), _exit, (path, ours, 124))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


#: called by ``_exit`` once the socket is gone, before the process ends (the measuring process turns away the
#: points already queued at its socket, which then ask a fresh one)
BEFORE_EXIT: list = []


def _exit(path: Path, ours: int, code: int) -> None:
    """End this process now, mid-figure too, its socket gone first (a holder waits for it to go). The start lock
    (``.lock``) stays: an asker may hold it, and a new file of that name would let a second asker start a second
    process beside the first."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == ours:
            path.unlink()
            path.with_suffix(".pid").unlink(missing_ok=True)
    for hook in BEFORE_EXIT:
        with contextlib.suppress(Exception):
            hook()
    os._exit(code)


def _end_with(owner: int, path: Path, ours: int) -> None:
    """End this process within a second of ``owner``: the run that asked is gone (a stopped gpu-run whose holder
    ended), and its GPU work with it."""
    while alive(owner):
        time.sleep(1.0)
    _exit(path, ours, 0)
