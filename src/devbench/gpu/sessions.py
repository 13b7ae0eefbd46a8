"""The stages of ``devbench gpu-run``: the run's clock and record of its stages (``Run``), and each stage's
processes run as one session, started, limited in time, and ended whole.

asv starts its forkserver, each benchmark's process and each ``setup_cache`` in process groups of their own,
but they stay in the session a stage opened (as ``scripts/group.sh`` does for ``make test``): ending every
process of the session ends all of them.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devbench.engine import sweep
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


#: how long a stage killed at its limit may take to end (a killed process frees tens of GB of GPU memory in
#: seconds), and to reap its leader; each at most what the budget leaves after the stage (``Run.stage``)
KILL_WAIT_S = 10.0
REAP_S = 5.0
#: held back at a run's end for its last stage's kill: the waits of a stage that ends there share it
KILL_HOLD_S = 6.0

#: seconds held back for the packing after the last stage
PACK_S = 5.0
#: the health lines after the stages: one `devbench info --json` (imports torch, reads NVML)
HEALTH_S = 5.0
#: ``nvidia-smi -q`` after the stages (it answers in a second or two on one GPU, in seconds on a node)
SMI_AFTER_S = 5.0


def end_s(costs: Any) -> float:
    """What ends a run after its last stage, held back from every stage: the packing, the last stage's kill
    (``KILL_HOLD_S``: a stage killed at its limit), and on a GPU the health lines and ``nvidia-smi -q`` (each
    bounded by what is left of the budget)."""
    return PACK_S + KILL_HOLD_S + (HEALTH_S + SMI_AFTER_S if costs.gpus else 0.0)


def kill_session(sid: int, wait_s: float = KILL_WAIT_S) -> list[int]:
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


def _group_run(cmd: list[str], timeout_s: float, log: Any, kill_wait_s: float = KILL_WAIT_S,
               **kwargs: Any) -> tuple[int, float, list[int]]:  # fmt: skip
    """Run ``cmd`` in a session of its own, its output to ``log``; at the limit (or on Ctrl-C or SIGTERM)
    end every process of that session. Returns the exit code (124 at the time limit), the seconds it ran and the
    processes of the session that outlived SIGKILL (named on stdout). A kill at the limit waits at most
    ``kill_wait_s`` for the session's processes to end, and as long again for its leader to be reaped."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
    try:
        code = proc.wait(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        stuck = _say_stuck(_reaped(proc, kill_session(proc.pid, kill_wait_s), min(REAP_S, kill_wait_s)))
        return 124, time.monotonic() - start, stuck
    except BaseException:
        _say_stuck(_reaped(proc, kill_session(proc.pid)))
        raise
    # a stage that ended by itself may still have left processes in its session (an orphaned world); one that is
    # killed takes seconds to exit while the driver frees its GPU memory (tens of GB): not stuck for that
    stuck = _say_stuck(kill_session(proc.pid))
    return code, time.monotonic() - start, stuck


def _reaped(proc: subprocess.Popen, left: list[int], wait_s: float = 5.0) -> list[int]:
    """``left`` once the stage's leader is reaped, or with it where it does not end in ``wait_s`` (stuck in the
    kernel: a wait without a bound would hang the run)."""
    try:
        proc.wait(timeout=wait_s)
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


#: a stage given less than this is not started: asv alone takes seconds to start
MIN_STAGE_S = 10.0
#: a stage's exit when it was not started: a process of an earlier stage is stuck (``Run.stuck``)
STUCK_RC = 125

class Stopped(Exception):
    """Ctrl-C, SIGTERM or SIGHUP: the exit code says which."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code

    @property
    def why(self) -> str:
        return {128 + signal.SIGTERM: "terminated (SIGTERM)", 128 + signal.SIGHUP: "hung up (SIGHUP)"}.get(
            self.code, "stopped")

    @staticmethod
    def on_signal(signum: int, frame: object) -> None:
        raise Stopped(128 + signum)


#: asv's discovery of the suite, in a folder of the run's own while it runs (``Run.discovery``)
DISCOVERY_NAME = "asv-discovery.json"


class Run:
    """One ``gpu-run``: its options, its clock and the record of its stages."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.repo = Path(args.repo).resolve()
        self.out = Path(args.out).resolve()
        self.start = time.monotonic()
        self.started_at = time.time()
        self.stages: list[dict[str, Any]] = []
        self.stage_started = time.time()
        self.checked: str | None = None  # the run's folder of checked workloads (prepare.check_once)
        self.discovery: Path | None = None  # asv's discovery, made by the listing, for each stage (gpu.asvrun)
        self.holder: sweep.Holder | None = None  # owns the measuring process of the stages before the tests
        #: why no stage starts any more: processes of a stage outlived SIGKILL (stuck in a driver call, their GPU
        #: held); what ran beside them would not be measured alone, and a world on their GPU could hang
        self.stuck: str | None = None
        #: held back after the stages (the packing, the health lines, ``KILL_HOLD_S``): a stage's kill at its limit
        #: never waits into the rest of it
        self.end_s = KILL_HOLD_S

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.start)

    def release(self) -> None:
        """Let the held measuring process go; one that does not end (stuck in a driver call) stops the run."""
        if self.holder is not None and self.holder.release():
            self.stuck = "the measuring process of the earlier stages did not end (stuck in a driver call?)"
            print(f"gpu-run: warning: {self.stuck}", flush=True)

    def stage(self, name: str, cmd: list[str], limit_s: float, estimate_s: float, log_path: Path | None = None,
              env: dict[str, str] | None = None) -> int:  # fmt: skip
        print(f"== {name}: expected {estimate_s:.0f} s, limit {max(0.0, limit_s):.0f} s "
              f"({max(0.0, self.left()):.0f} s of the budget left)", flush=True)  # fmt: skip
        if self.stuck:
            print(f"== {name}: not started: {self.stuck}", flush=True)
            self.stages.append({"stage": name, "estimate_s": estimate_s, "actual_s": 0.0, "rc": None,
                                "note": f"not started: {self.stuck}"})  # fmt: skip
            return STUCK_RC
        if limit_s < MIN_STAGE_S:
            print(f"== {name}: skipped, out of time", flush=True)
            self.stages.append({"stage": name, "estimate_s": estimate_s, "actual_s": 0.0, "rc": None,
                                "note": "skipped: out of time"})  # fmt: skip
            return 124
        self.stage_started = time.time()
        # a kill at the limit waits (twice: the session, then its leader) within what the budget leaves after it
        slack = self.left() - limit_s - (self.end_s - KILL_HOLD_S)
        kill_wait = max(KILL_HOLD_S / 2, min(KILL_WAIT_S, slack / 2))
        with open(log_path, "w") if log_path else open(os.devnull, "w") as sink:
            log = sink if log_path else None
            try:
                code, took, stuck = _group_run(cmd, limit_s, log, kill_wait, cwd=self.repo, env=env)
            except BaseException:
                took = round(time.time() - self.stage_started, 1)
                self.stages.append({"stage": name, "estimate_s": round(estimate_s, 1), "rc": None,
                                    "actual_s": took, "note": "stopped"})  # fmt: skip
                raise
        if log_path:
            sys.stdout.write(log_path.read_text()[-4000:])
        if stuck:
            self.stuck = (f"{len(stuck)} process(es) of stage {name!r} outlived SIGKILL ({', '.join(map(str, stuck))}) "
                          "and hold what they held, a GPU too")  # fmt: skip
        note = "stopped at its time limit" if code == 124 else ""
        print(f"== {name}: exit {code} in {took:.1f} s (expected {estimate_s:.0f} s) {note}".rstrip(), flush=True)
        self.stages.append({"stage": name, "estimate_s": round(estimate_s, 1), "actual_s": round(took, 1), "rc": code,
                            "note": note})  # fmt: skip
        return code
