"""scripts/group.sh, which make test's streams run under: one SIGTERM ends every process they started."""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

GROUP = Path(__file__).resolve().parents[1] / "scripts" / "group.sh"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped by its parent) counts as ended
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _pgid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[2])


def _wait_gone(pids: list[int], timeout_s: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_sigterm_ends_the_command_and_what_it_started(tmp_path):
    pids = tmp_path / "pids"
    # a shell that starts two grandchildren and writes their PIDs, as make starts asv; the second
    # in a process group of its own, as asv starts its forkserver
    script = (
        f"sleep 300 & echo $! >> {pids}; "
        f"{shlex.quote(sys.executable)} -c 'import os, time; os.setpgid(0, 0); time.sleep(300)' & echo $! >> {pids}; "
        f"echo $$ >> {pids}; wait"
    )
    proc = subprocess.Popen([str(GROUP), "sh", "-c", script])
    deadline = time.monotonic() + 20
    while (not pids.exists() or len(pids.read_text().split()) < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 3 and all(_alive(p) for p in started)
    while _pgid(started[1]) != started[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pgid(started[1]) == started[1]  # out of the command's process group
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert _wait_gone(started) == []


def test_the_commands_exit_status_is_passed_on_and_no_command_is_refused():
    assert subprocess.run([str(GROUP), "sh", "-c", "exit 3"]).returncode == 3
    assert subprocess.run([str(GROUP), "true"]).returncode == 0
    out = subprocess.run([str(GROUP)], capture_output=True, text=True)
    assert out.returncode == 2 and "usage: scripts/group.sh COMMAND" in out.stderr
