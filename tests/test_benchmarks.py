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

from devbench.suite import DEVICES  # noqa: E402

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


def test_there_are_benchmark_modules():
    assert "bench_devices" in MODULES


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
