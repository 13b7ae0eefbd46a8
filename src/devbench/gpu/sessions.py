"""Processes run as one session: a stage of ``devbench gpu-run`` started, limited in time, and ended whole.

asv starts its forkserver, each benchmark's process and each ``setup_cache`` in process groups of their own,
but they stay in the session a stage opened (as ``scripts/group.sh`` does for ``make test``): ending every
process of the session ends all of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

from devbench.engine.owners import alive, process_state


def session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (Linux's /proc; elsewhere only its leader, if alive)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    pids = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            if os.getsid(int(name)) == sid and not _zombie(int(name)):
                pids.append(int(name))
        except OSError:  # gone meanwhile, or not ours to ask
            continue
    if not names:
        try:
            os.kill(sid, 0)
            pids.append(sid)
        except OSError:
            pass
    return pids


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and only waits to be reaped (it runs nothing and cannot be killed): every thread
    of it, not its main one alone (another can still be in a driver call)."""
    return not alive(pid)


def kill_session(sid: int, wait_s: float = 10.0) -> list[int]:
    """SIGKILL every process of session ``sid`` until none is left (or ``wait_s`` passes); returns those left.

    A process group is not enough: asv starts its forkserver, each benchmark's process and each
    ``setup_cache`` with ``setpgid(0, 0)``, in groups of their own, but they stay in the session
    that ``_group_run`` opened (as ``scripts/group.sh`` does for ``make test``). A process that
    opens a session of its own would escape; nothing the suite starts does.
    """
    deadline = time.monotonic() + wait_s
    while True:
        left = session_pids(sid)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _group_run(cmd: list[str], timeout_s: float, log: Any, **kwargs: Any) -> tuple[int, float, list[int]]:
    """Run ``cmd`` in a session of its own, its output to ``log``; at the limit (or on Ctrl-C or SIGTERM)
    end every process of that session. Returns the exit code (124 at the time limit), the seconds it ran and the
    processes of the session that outlived SIGKILL (named on stdout)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
    try:
        code = proc.wait(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        stuck = _say_stuck(_reaped(proc, kill_session(proc.pid)))
        return 124, time.monotonic() - start, stuck
    except BaseException:
        _say_stuck(_reaped(proc, kill_session(proc.pid)))
        raise
    # a stage that ended by itself may still have left processes in its session (an orphaned world); one that is
    # killed takes seconds to exit while the driver frees its GPU memory (tens of GB): not stuck for that
    stuck = _say_stuck(kill_session(proc.pid))
    return code, time.monotonic() - start, stuck


def _reaped(proc: subprocess.Popen, left: list[int]) -> list[int]:
    """``left`` once the stage's leader is reaped, or with it where it does not end (stuck in the kernel: a wait
    without a bound would hang the run)."""
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        return sorted(set(left) | {proc.pid})
    return [pid for pid in left if alive(pid)]  # those that ended meanwhile are not stuck


def _say_stuck(left: list[int]) -> list[int]:
    """Name the processes that outlived SIGKILL: stuck in the kernel (a CUDA driver call, state D), they hold their
    GPUs, and the stages after this one may find them held."""
    if left:
        states = [f"{pid} ({process_state(pid)})" for pid in left]
        print(f"gpu-run: warning: {len(left)} process(es) of the stage outlived SIGKILL: {', '.join(states)}; a GPU "
              "one holds stays held (nvidia-smi names them)", flush=True)
    return left
