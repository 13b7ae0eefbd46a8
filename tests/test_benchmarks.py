"""The suite follows docs/design.md's rules: no CUDA at import, machine-independent params."""

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchmarks  # noqa: E402

from devbench.engine.suite import DEVICES  # noqa: E402

MODULES = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))

GUARD = """
import sys, torch
def forbidden(*a, **k):
    raise AssertionError("CUDA touched at import time")
torch.cuda._lazy_init = forbidden
torch.cuda.device_count = forbidden
torch.cuda.is_available = forbidden
torch.cuda.init = forbidden
sys.path.insert(0, {root!r})
import importlib
for name in {modules!r}:
    importlib.import_module("benchmarks." + name)
assert not torch.cuda.is_initialized()
print("imported", len({modules!r}))
"""


def test_every_benchmark_module_defines_benchmarks_asv_will_find():
    """A ``bench_`` module whose classes lost their ``time_``/``track_`` methods (or were renamed away) would
    run nothing and say nothing: each module must give at least one benchmark class."""
    assert len(MODULES) >= 9
    found = {name.split(".", 1)[0] for name, _ in _benchmark_classes()}
    assert found == set(MODULES), set(MODULES) - found


def test_import_never_touches_cuda():
    code = GUARD.format(root=str(ROOT), modules=MODULES)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"imported {len(MODULES)}" in out.stdout


def _benchmark_classes():
    for name in MODULES:
        module = importlib.import_module(f"benchmarks.{name}")
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and any(
                m.startswith(("time_", "track_", "peakmem_", "mem_")) for m in dir(cls)
            ):
                yield f"{name}.{cls_name}", cls


@pytest.mark.parametrize("name, cls", list(_benchmark_classes()))
def test_device_param_is_machine_independent(name, cls):
    names = list(getattr(cls, "param_names", []))
    if "device" in names:
        params = cls.params if names != ["device"] or isinstance(cls.params[0], list) else [cls.params]
        assert list(params[names.index("device")]) == DEVICES, f"{name}: device param must be {DEVICES}"


@pytest.mark.parametrize("name, cls", list(_benchmark_classes()))
def test_track_benchmarks_declare_units(name, cls):
    for attr in dir(cls):
        if attr.startswith("track_"):
            assert getattr(getattr(cls, attr), "unit", None), f"{name}.{attr} has no unit"


@pytest.mark.parametrize("name", MODULES)
def test_no_imported_function_looks_like_a_benchmark(name):
    """asv takes any module-level ``time_*``/``track_*``/``mem_*``/``peakmem_*`` callable for a benchmark:
    an engine function imported by that name would be timed as one (``time_block`` once was)."""
    module = importlib.import_module(f"benchmarks.{name}")
    for attr, value in vars(module).items():
        if attr.startswith(("time_", "track_", "peakmem_", "mem_")) and callable(value):
            assert getattr(value, "__module__", None) == module.__name__, f"{name}.{attr} is imported, not a benchmark"


def _asv_check(root: Path) -> tuple[int, list[str]]:
    """What ``asv check`` runs in its benchmark process (asv_runner's discovery, then each benchmark's own
    ``check`` of its set-up, call and teardown signatures), here in-process: how many benchmarks, which fail."""
    from asv_runner.discovery import disc_benchmarks

    found = list(disc_benchmarks(str(root)))
    return len(found), [b.name for b in found if not b.check(str(root))]


def test_asv_check_passes_for_every_benchmark():
    """make test's asv dry run discovers the suite but does not check call signatures; this does (``asv check``
    in the test process, not two more processes importing torch)."""
    count, bad = _asv_check(ROOT / "benchmarks")
    assert count >= len(MODULES) and bad == []


def test_asv_check_names_a_benchmark_whose_setup_takes_the_wrong_arguments(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # asv_runner imports the suite as a package by its folder's name
    suite = tmp_path / "badsuite"
    suite.mkdir()
    (suite / "__init__.py").write_text("")
    (suite / "bench_bad.py").write_text(
        "class Bad:\n    params = [1, 2]\n    def setup(self):\n        pass\n    def time_it(self, n):\n        pass\n"
    )
    count, bad = _asv_check(suite)
    assert count == 1 and bad == ["bench_bad.Bad.time_it"]


@pytest.mark.parametrize("name, cls", list(_benchmark_classes()))
def test_every_benchmark_class_gets_what_asv_runs_around_it_from_the_base_class(name, cls):
    """Subclassing ``Benchmark`` is the whole of it: the set-up that pins threads, raises declared skips and records
    the GPU state comes with the base class (``Benchmark.__init_subclass__``), with no decorator to forget."""
    from devbench.engine.suite import Benchmark

    if not issubclass(cls, Benchmark):
        pytest.skip(f"{name} does not use the suite's base class")
    assert cls.__dict__.get("_devbench_instrumented"), f"{name} was not instrumented"
    assert getattr(cls.setup, "devbench_gpu_state", False) or "setup" not in dir(cls)
