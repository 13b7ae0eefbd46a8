"""A fake swept benchmark and the helpers that run its points as asv's forkserver would, for the measuring
process's tests (``tests/test_sweep*.py``)."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

from devbench.engine import sweep

BENCH = '''
import os
from pathlib import Path

from devbench.engine.suite import Benchmark, instrumented, with_samples
from devbench.engine.prepare import once

LOG = Path(os.environ["FAKE_LOG"])


def note(what):
    with open(LOG, "a") as out:
        out.write(f"{os.getpid()} {what}\\n")


@instrumented
class Fake(Benchmark):
    params = [["cpu", "cuda"], [1, 2]]
    param_names = ["device", "n"]
    swept = True
    skips = [{"where": {"device": ["cuda"], "n": [2]}, "reason": "declared: never here"}]
    timeout = float(os.environ.get("FAKE_TIMEOUT", "300"))

    def setup(self, device, n):
        if device == "cuda":
            raise NotImplementedError("no CUDA in the fake")
        note(f"build {device} {n}")
        self.n = once(("Fake", device, n), lambda: note(f"made {n}") or n)

    def teardown(self, device, n):
        note(f"teardown {device} {n}")

    def track_a(self, device, n):
        note(f"measure a {n}")
        if n == 2 and os.environ.get("FAKE_FAIL"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return with_samples([float(self.n)] * 3)

    def track_b(self, device, n):
        note(f"measure b {n}")
        if n == 2 and os.environ.get("FAKE_FAIL_B"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if n == 2 and os.environ.get("FAKE_SLEEP"):
            import time

            time.sleep(60)
        return with_samples([10.0 * self.n] * 3)

    track_a.unit = track_b.unit = "x"


@instrumented
class Shared(Benchmark):
    params = [["up", "down"], [1, 2]]
    param_names = ["way", "n"]
    swept = True
    built_by = ["n"]
    timeout = float(os.environ.get("FAKE_SHARED_TIMEOUT", "300"))

    def setup(self, way, n):
        note(f"build {way} {n}")
        if os.environ.get(f"FAKE_SLEEP_{way.upper()}_{n}"):  # a long build, or a long set-up over it
            import time

            time.sleep(float(os.environ[f"FAKE_SLEEP_{way.upper()}_{n}"]))
        if way == "down" and os.environ.get("FAKE_FAIL_SHARED"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if way == "down" and os.environ.get("FAKE_AFTER"):  # set up only once the asked point has its reply
            import time

            for _ in range(100):
                if Path(os.environ["FAKE_AFTER"]).exists():
                    break
                time.sleep(0.1)
            else:
                note("down set up before the asked point had its reply")
        self.base = once(("Shared", n), lambda: note(f"made {n}") or n)
        self.sign = 1.0 if way == "up" else -1.0

    def track_a(self, way, n):
        note(f"measure {way} {n}")
        return with_samples([self.sign * self.base] * 3)

    track_a.unit = "x"
'''


def fake_suite(tmp_path, monkeypatch):
    """The fake benchmark as a package in ``tmp_path``, every point through the measuring process (the
    ``suite_dir`` fixture of conftest.py); its measuring processes stopped after the test."""
    pkg = tmp_path / "fakebench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bench_fake.py").write_text(textwrap.dedent(BENCH))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log.txt"))
    monkeypatch.setenv(sweep.DIR_ENV, str(tmp_path / "sweep"))
    monkeypatch.setenv(sweep.MODE_ENV, "all")
    monkeypatch.delenv(sweep.SERVER_ENV, raising=False)
    monkeypatch.delenv(sweep.SELECT_ENV, raising=False)
    yield tmp_path
    _stop_servers(tmp_path)


def _servers(root: Path) -> set[int]:
    journal = root / "sweep" / "journal.jsonl"
    pids = {json.loads(line)["pid"] for line in journal.read_text().splitlines()} if journal.exists() else set()
    log = root / "log.txt"
    if log.exists():
        pids |= {int(line.split()[0]) for line in log.read_text().splitlines()}
    return pids - {os.getpid()}


def _stop_servers(root: Path) -> None:
    """SIGTERM the measuring processes this test started, each checked to be one first (a pid can be reused)."""
    for pid in _servers(root):
        try:
            if "devbench.engine.measuring" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGTERM)
        except (FileNotFoundError, ProcessLookupError):
            pass


def _point(method: str, *args, cls: str = "bench_fake.Fake") -> dict:
    """One point as asv runs it: a forked process that sets up, calls the figure and tears down (``cls``: the
    module and class in the fake package)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the point
        os.close(read)
        try:
            import importlib

            module, name = cls.rsplit(".", 1)
            bench = getattr(importlib.import_module(f"fakebench.{module}"), name)()
            try:
                bench.setup(*args)
                out = {"result": getattr(bench, method)(*args)}
            except NotImplementedError as skip:
                out = {"skip": str(skip)}
            except Exception as exc:  # noqa: BLE001
                out = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                bench.teardown(*args)
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)


def _settle() -> None:
    """Wait until the measuring process the points ask (if one runs) has done what the last reply let it do ahead
    (the asked figure's twins, the points beside it): a ``ping`` from a forked child, as a point would ask, is
    answered only then. Starts no process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            conn = sweep._connect(sweep._address(sweep.asking_owner()))
            if conn is not None:
                with conn, conn.makefile("r") as reply:
                    conn.settimeout(120)
                    conn.sendall(b'{"op": "ping"}\n')
                    reply.readline()
        finally:
            os._exit(0)
    os.close(write)
    os.close(read)
    os.waitpid(pid, 0)


def _log(root: Path, made: bool = False) -> list[str]:
    """What the fake's workloads did, once the measuring process is done with what it measures ahead
    (``_settle``), tear-downs aside (the measuring process tears a workload down when the next is built or after a
    few seconds without a request) and, unless ``made``, what ``once`` built."""
    _settle()
    path = root / "log.txt"
    lines = [line.split(" ", 1)[1] for line in path.read_text().splitlines()] if path.exists() else []
    return [x for x in lines if not x.startswith("teardown") and (made or not x.startswith("made"))]
