import os
import signal

import pytest


def pytest_configure(config):
    """SIGTERM (a CI timeout, ``kill``) stops the run as Ctrl-C does: pytest unwinds, every fixture's
    clean-up runs, and each child a test started is stopped with it (``asv_fixture.run_group``). By
    default Python would die at once and leave them running. A process forked by a test keeps the
    default: it dies on SIGTERM, as the code under test expects."""
    main = os.getpid()

    def interrupt(signum, frame):
        if os.getpid() != main:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def pytest_collection_modifyitems(config, items):
    # imported here: the process that only hands tests to pytest-xdist's workers never needs torch
    import torch

    from devbench.engine.devices import num_gpus

    if torch.backends.cuda.is_built() and num_gpus() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def script():
    """``script("name")``: ``scripts/research/<name>.py`` loaded as a module (the scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "scripts" / "research" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def small_cpu_cache(monkeypatch):
    """The CPU's last-level cache taken as 8 MiB: a copy rotates over 32 MiB of buffers. Some hosts report a
    last-level cache of hundreds of MiB (this VM's Xeon: 480 MiB), where a 1 MiB copy rotates over 1,024 sets,
    2 GiB to fill and check: half a minute for a test of what one set shows. A GPU's L2 stays its own
    (``transfer.CPU_CACHE_ENV``, which make test's asv dry run sets too)."""
    from devbench.workloads import transfer as T

    monkeypatch.setenv(T.CPU_CACHE_ENV, str(8 * T.MiB))


@pytest.fixture
def suite_dir(tmp_path, monkeypatch):
    """A fake swept benchmark's package, every point through the measuring process (``tests/sweep_fixture.py``)."""
    from sweep_fixture import fake_suite

    yield from fake_suite(tmp_path, monkeypatch)
