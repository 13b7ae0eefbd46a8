"""The benchmarks/README template is a benchmark that passes make test's checks: written into a scratch copy of the
suite, it imports without CUDA, asv discovers and checks it, it sets up (building, checking and warming its
workload), skips where its device is missing, times, and the work lock records it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devbench.engine import worklock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_benchmarks import GUARD  # noqa: E402

RUN = """
import sys
sys.path.insert(0, {root!r})
from asv_runner.discovery import disc_benchmarks
found = [b for b in disc_benchmarks({bench!r}) if b.name.startswith("bench_template.")]
assert found and all(b.check({bench!r}) for b in found), [b.name for b in found]
from benchmarks.bench_template import Square
from devbench.engine import prepare
from devbench.engine.suite import DEVICES
names = list(Square.param_names)
assert list(Square.params[names.index("device")]) == DEVICES
bench = Square()
bench.setup("cpu", 256)
assert bench.mm.check_call_s, "timed work that was never checked"
bench.time_matmul("cpu", 256)
bench.teardown("cpu", 256)
try:
    Square().setup("cuda", 256)
    print("cuda ran")
except NotImplementedError as exc:
    print("skipped:", exc)
print("ok", len(found), sorted(k[0] for k in prepare._BUILT))
"""


def _template() -> str:
    text = (ROOT / "benchmarks" / "README.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found, "benchmarks/README.md has no python template"
    return found.group(1)


@pytest.fixture
def scratch(tmp_path):
    """A copy of the suite (its benchmarks and the package's source, which the work lock reads) with the README's
    template as a new benchmark module."""
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "benchmarks" / "bench_template.py").write_text(_template())
    return tmp_path


def test_the_readme_template_passes_the_suites_checks(scratch):
    env = {"PATH": "/usr/bin:/bin", "DEVBENCH_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(scratch / "src")}  # fmt: skip
    # no CUDA at import: the template and every other module, with CUDA's entry points booby-trapped
    modules = sorted(p.stem for p in (scratch / "benchmarks").glob("bench_*.py"))
    out = subprocess.run([sys.executable, "-c", GUARD.format(root=str(scratch), modules=modules)],
                         capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    # asv's discovery and signature check, then a set-up, a timed call and a skip, as asv's dry run does
    code = textwrap.dedent(RUN).format(root=str(scratch), bench=str(scratch / "benchmarks"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ok 1 ['Square']" in out.stdout, out.stdout
    assert "skipped: " in out.stdout or "cuda ran" in out.stdout
    # the work lock names the new class until make work-lock records it; then it holds
    assert worklock.check(scratch) == ["bench_template.Square is a new benchmark class (work_version 1)"]
    worklock.write(scratch)
    assert worklock.check(scratch) == []


def test_the_template_touches_at_most_three_files_and_names_eight_concepts():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    checklist = text.split("## The checklist, file by file")[1].split("\nThen ")[0]
    assert len(re.findall(r"^\d+\. \*\*`", checklist, re.M)) <= 3
    concepts = re.findall(r"^\| (\d+) \|", text, re.M)
    assert concepts == [str(i) for i in range(1, len(concepts) + 1)] and len(concepts) <= 8
    # every devbench name the template imports is among them
    imported = {n.strip() for line in re.findall(r"^from devbench\S* import (.+)$", _template(), re.M)
                for n in line.split(",")}  # fmt: skip
    table = text.split("before `make test` passes:")[1].split("What a newcomer may leave out")[0]
    assert {"Benchmark", "DEVICES", "ready", "require_device", "synchronize"} <= imported
    assert all(name in table for name in imported - {"Matmul"}), imported
