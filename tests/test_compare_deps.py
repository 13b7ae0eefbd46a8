"""What a benchmark module's figures depend on (``devbench.compare.deps``): a compare measures only what can
have changed. Synthetic trees, as ``devbench compare`` exports them (``benchmarks/``, ``src/devbench/``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devbench.compare import deps
from devbench.compare.options import Options
from devbench.compare.run import SAME_CODE, mark_same_code
from devbench.compare.runner import Combination, Figure

FILES = {
    "benchmarks/__init__.py": "",
    "benchmarks/bench_copy.py": "from devbench.workloads.copy import run\n",
    "benchmarks/bench_norms.py": (
        "import devbench.engine.suite\n\n"
        "def setup():\n    from devbench.workloads import norms  # a lazy import counts\n    return norms\n"
    ),
    "src/devbench/__init__.py": "",
    "src/devbench/engine/suite.py": "from . import measure\n",
    "src/devbench/engine/measure.py": "X = 1\n",
    "src/devbench/workloads/__init__.py": "",
    "src/devbench/workloads/copy.py": "def run():\n    return 1\n",
    "src/devbench/workloads/norms.py": "def norm():\n    return 2\n",
    "src/devbench/workloads/table.csv": "a,b\n1,2\n",
    "src/devbench/README.md": "notes\n",
}


def _tree(root: Path, changed: dict[str, str] | None = None) -> Path:
    for rel, text in {**FILES, **(changed or {})}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _rel(tree: Path, paths: set[Path]) -> set[str]:
    return {str(p.relative_to(tree)) for p in paths}


def test_a_figure_depends_on_its_module_what_it_imports_lazily_too_and_the_data_files(tmp_path):
    tree = _tree(tmp_path)
    norms = _rel(tree, deps.closure(tree, tree / "benchmarks" / "bench_norms.py"))
    assert {"benchmarks/bench_norms.py", "src/devbench/engine/suite.py", "src/devbench/engine/measure.py",
            "src/devbench/workloads/norms.py", "src/devbench/workloads/__init__.py"} <= norms  # fmt: skip
    assert "src/devbench/workloads/copy.py" not in norms  # not imported: its change cannot reach these figures
    assert "src/devbench/workloads/table.csv" in norms  # a data file may be read at run time
    assert "src/devbench/README.md" not in norms  # documentation is not
    copy = _rel(tree, deps.closure(tree, tree / "benchmarks" / "bench_copy.py"))
    assert "src/devbench/workloads/norms.py" not in copy and "src/devbench/workloads/copy.py" in copy


@pytest.mark.parametrize(
    "changed, unchanged",
    [
        ({"src/devbench/workloads/norms.py": "def norm():\n    return 4\n"},
         {"bench_copy": True, "bench_norms": False}),
        ({"src/devbench/workloads/copy.py": "def run():\n    return 0\n"},
         {"bench_copy": False, "bench_norms": True}),
        ({"src/devbench/workloads/table.csv": "a,b\n1,3\n"}, {"bench_copy": False, "bench_norms": False}),
        ({"src/devbench/README.md": "other notes\n"}, {"bench_copy": True, "bench_norms": True}),
    ],
)
def test_only_the_modules_a_change_reaches_are_measured(tmp_path, changed, unchanged):
    base = _tree(tmp_path / "base")
    head = _tree(tmp_path / "head", changed)
    assert deps.unchanged_modules(base, head) == unchanged


def test_an_import_by_a_computed_name_makes_every_file_a_dependency(tmp_path):
    dynamic = "import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n"
    base = _tree(tmp_path / "base", {"benchmarks/bench_copy.py": "from devbench.workloads.copy import run\n"
                                     "import devbench.engine.suite\n",
                                     "src/devbench/engine/measure.py": dynamic})  # fmt: skip
    head = _tree(tmp_path / "head", {"benchmarks/bench_copy.py": "from devbench.workloads.copy import run\n"
                                     "import devbench.engine.suite\n", "src/devbench/engine/measure.py": dynamic,
                                     "src/devbench/workloads/norms.py": "def norm():\n    return 9\n"})  # fmt: skip
    assert deps.unchanged_modules(base, head)["bench_copy"] is False  # norms.py may be what measure imports


def test_a_module_run_by_its_name_is_a_dependency(tmp_path):
    """The measuring process is started as ``python -m devbench.engine.measuring``, imported by no benchmark: a
    change to it, or to what it imports, reaches every figure whose module starts it."""
    starts = ("import subprocess, sys\n\ndef start():\n"
              "    subprocess.Popen([sys.executable, '-m', 'devbench.engine.measuring'])\n")
    files = {"src/devbench/engine/measure.py": starts, "src/devbench/engine/measuring.py": "from . import timing\n",
             "src/devbench/engine/timing.py": "X = 1\n"}  # fmt: skip
    base = _tree(tmp_path / "base", files)
    head = _tree(tmp_path / "head", {**files, "src/devbench/engine/timing.py": "X = 2\n"})
    same = deps.unchanged_modules(base, head)
    assert same["bench_norms"] is False and same["bench_copy"] is True  # bench_copy never starts it
    assert tmp_path / "base/src/devbench/engine/timing.py" in deps.closure(base, base / "benchmarks/bench_norms.py")


def _figure(benchmark: str) -> Figure:
    combo = Combination(benchmark=benchmark, idx=0, values=(), names=(), unit="seconds")
    return Figure(combo)


def test_figures_whose_code_is_the_same_are_not_measured_unless_asked_or_the_environments_differ(tmp_path):
    base = _tree(tmp_path / "base")
    head = _tree(tmp_path / "head", {"src/devbench/workloads/norms.py": "def norm():\n    return 4\n"})
    trees = {"base": base, "head": head}
    opts = Options(base="a", head="b", repo=tmp_path, out=tmp_path / "out", python="/usr/bin/python3")
    figures = [_figure("bench_copy.Copy.time_copy"), _figure("bench_norms.Norms.time_loop")]
    assert mark_same_code(figures, opts, trees) == 1
    assert [f.state for f in figures] == ["same code", "running"] and figures[0].reason == SAME_CODE
    again = [_figure("bench_copy.Copy.time_copy")]
    assert mark_same_code(again, Options(**{**opts.__dict__, "measure_all": True}), trees) == 0
    two_envs = Options(**{**opts.__dict__, "head_python": "/venvs/torch-next/bin/python"})
    assert mark_same_code(again, two_envs, trees) == 0 and again[0].state == "running"
