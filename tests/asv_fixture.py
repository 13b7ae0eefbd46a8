"""A tiny asv project, run by asv itself, so report tests read real asv output.

``make_history(tmp)`` creates a git repository with two commits and a suite whose values
come from ``scale.json``, then runs ``asv run`` four times:

=========  ======  =====  ======================================
machine    commit  env    values
=========  ======  =====  ======================================
alpha      c1      py1    sleep 5 ms per unit, rate x1
alpha      c2      py1    sleep 10 ms per unit (twice as slow)
alpha      c2      py2    sleep 5 ms per unit
beta       c2      py1    sleep 5 ms per unit, rate x2 (H100)
=========  ======  =====  ======================================

``Suite`` has a skipped (cuda) and measured (cpu) device param, a failing benchmark and a
``track_`` with a unit. py2 is a wrapper script around the same Python, which asv treats
as another environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SUITE = """
import json
import time
from pathlib import Path

SCALE = Path(__file__).resolve().parents[1] / "scale.json"


class Suite:
    params = [["cpu", "cuda"], [4, 8]]
    param_names = ["device", "n"]
    number = 1
    repeat = (15, 15, 10.0)  # 99% CI of the median: 15 samples keep it clear of one or two hiccups
    rounds = 1
    warmup_time = 0.0

    def setup(self, device, n):
        if device == "cuda":
            raise NotImplementedError("no CUDA in the fixture")
        self.scale = json.loads(SCALE.read_text())

    def time_sleep(self, device, n):
        time.sleep(self.scale["sleep_ms"] * n / 1e3)

    def track_rate(self, device, n):
        return self.scale["rate"] * n

    track_rate.unit = "GB/s"


def time_fails():
    raise ValueError("this benchmark always fails")


def track_plain():
    return 42.0
"""

MACHINE_FIELDS = {"arch": "x86_64", "cpu": "Fixture CPU", "num_cpu": "2", "os": "Linux", "ram": "1000"}


@dataclass
class History:
    project: Path
    results: Path
    commits: list[str]
    py1: str
    py2: str

    def env_name(self, python: str) -> str:
        return "existing-py" + python.replace(os.path.sep, "_")


def _git(cwd: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env.update({"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"})
    if date:
        env.update({"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def run_group(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` in a process group of its own, ended whole on a timeout, Ctrl-C or SIGTERM: asv
    forks benchmark processes, which outlive a killed asv otherwise. The group gets SIGTERM first, so a
    launcher whose workers lead sessions of their own (torchrun) stops them; SIGKILL after 10 s."""
    with subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          **kwargs) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.communicate(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def asv(project: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home)}
    env.pop("ASV_MACHINE", None)
    return run_group([sys.executable, "-m", "asv", *args], timeout=300, cwd=project, env=env)


def one_module_project(tmp: Path, module: str, source: str) -> tuple[Path, Path]:
    """A git repository whose suite is one module ``benchmarks/<module>.py`` and a HOME whose asv machine is
    ``m``: (the project, the home) for ``asv(...)``."""
    project = tmp / "project"
    (project / "benchmarks").mkdir(parents=True)
    (project / "benchmarks" / "__init__.py").write_text("")
    (project / "benchmarks" / f"{module}.py").write_text(source)
    conf = {"version": 1, "project": "t", "repo": ".", "branches": ["main"], "benchmark_dir": "benchmarks",
            "results_dir": "results", "html_dir": "html", "env_dir": "env", "environment_type": "existing"}  # fmt: skip
    (project / "asv.conf.json").write_text(json.dumps(conf))
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "one")
    home = tmp / "home"
    home.mkdir()
    (home / ".asv-machine.json").write_text(json.dumps({"m": {**MACHINE_FIELDS, "machine": "m"}, "version": 1}))
    return project, home


def terminate(proc: subprocess.Popen, timeout: float = 60) -> int:
    """SIGTERM to ``proc`` and its exit code; its whole session killed if it has not ended by ``timeout``."""
    try:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def make_history(tmp: Path) -> History:
    project = tmp / "project"
    (project / "benchmarks").mkdir(parents=True)
    (project / "benchmarks" / "__init__.py").write_text("")
    (project / "benchmarks" / "bench_fix.py").write_text(SUITE)
    conf = {
        "version": 1,
        "project": "fixture",
        "repo": ".",
        "branches": ["main"],
        "benchmark_dir": "benchmarks",
        "results_dir": "results",
        "html_dir": "html",
        "env_dir": "env",
        "environment_type": "existing",
    }
    (project / "asv.conf.json").write_text(json.dumps(conf))
    (project / ".gitignore").write_text("results/\nhtml/\nenv/\nscale.json\n")
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "one", date="2026-01-01T00:00:00+00:00")
    c1 = _git(project, "rev-parse", "HEAD")
    _git(project, "commit", "-q", "--allow-empty", "-m", "two", date="2026-01-02T00:00:00+00:00")
    c2 = _git(project, "rev-parse", "HEAD")

    home = tmp / "home"
    home.mkdir()
    machines = {
        "alpha": {**MACHINE_FIELDS, "machine": "alpha", "gpu": "none", "gpu_count": "0"},
        "beta": {**MACHINE_FIELDS, "machine": "beta", "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": "1"},
        "version": 1,
    }
    (home / ".asv-machine.json").write_text(json.dumps(machines))

    py1 = sys.executable
    wrapper = tmp / "alt" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\nexec "{py1}" "$@"\n')
    wrapper.chmod(0o755)
    py2 = str(wrapper)

    runs = [
        # sleeps of 20-80 ms: a busy 2-vCPU host oversleeps by a few ms, which would blur 1-2 ms steps
        ("alpha", c1, py1, {"sleep_ms": 5.0, "rate": 1.0}),
        ("alpha", c2, py1, {"sleep_ms": 10.0, "rate": 1.0}),
        ("alpha", c2, py2, {"sleep_ms": 5.0, "rate": 1.0}),
        ("beta", c2, py1, {"sleep_ms": 5.0, "rate": 2.0}),
    ]
    for machine, commit, python, scale in runs:
        (project / "scale.json").write_text(json.dumps(scale))
        out = asv(
            project, home, "run", "-E", f"existing:{python}", "--set-commit-hash", commit,
            "--machine", machine, "--launch-method", "forkserver",
        )  # fmt: skip
        if out.returncode not in (0, 2):  # asv exits 2 when a benchmark failed, as one does here
            raise RuntimeError(f"asv run failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return History(project, project / "results", [c1, c2], py1, py2)
