"""A benchmark's workload made ready once per process: built (``once``), checked against its reference (in a
compare, once per side: ``check_once``) and warmed up (``ready`` does all three)."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from devbench.engine.gpuwatch import _cuda_identities

W = TypeVar("W")

_BUILT: dict[tuple, object] = {}


def forget_built() -> None:
    """Drop what ``once`` built (the measuring process, between workloads: their memory goes back)."""
    _BUILT.clear()


def once(key: tuple, build: Callable[[], object]) -> object:
    """``build()``'s result, built once per process and then reused.

    asv runs ``setup`` again before every sample of a ``time_`` benchmark (and asv runs
    each benchmark and parameter combination in a process of its own, which ends after
    it). A workload built, checked and warmed in ``build`` is therefore checked once per
    process, not once per sample: the float64 reference of a 4,096 CPU product costs
    seconds, and on a GPU the re-run set-up leaves the device idle between samples.
    """
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


#: set by ``devbench compare`` to a folder of its own per side: the workloads that side has checked in an
#: earlier process of the same compare (``check_once``); and by ``make test`` for its dry run of one commit.
#: Unset under asv otherwise: every process checks.
CHECKED_ENV = "DEVBENCH_CHECKED"


def check_once(key: tuple, check: Callable[[], object], warm: Callable[[], object]) -> None:
    """``check()``, or, where this side of a compare already checked ``key`` in an earlier process, ``warm()``.

    A check proves that the code and the inputs give the right answer; both are the same in every
    process of one side of a compare (the same exported tree, seeded inputs), so the first process that
    checks ``key`` proves it for the later ones, which only warm up (a check is a workload's first warm-up).
    asv and every other run check in every process (``make test``'s dry run sets a folder of its own: one
    commit, so one check of each workload is enough). A failed check records nothing.
    """
    folder = os.environ.get(CHECKED_ENV)
    mark = Path(folder) / hashlib.sha1(repr((key, _checked_scope())).encode()).hexdigest() if folder else None
    if mark is not None and mark.exists():
        warm()
        return
    check()
    if mark is not None:
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(repr(key) + "\n")


def ready(key: tuple, build: Callable[[], W]) -> W:
    """A workload built, checked and warmed: the one call a benchmark's ``setup`` makes for its work.

    ``build()`` makes the workload (an object that does its work when called, with ``check()`` against a
    reference and its ``device``); ``ready`` builds it once per process under ``key`` (``once``: asv runs
    ``setup`` before every sample), checks it (``check_once``: in a compare, once per side) and warms it up
    on its device, so the first timed call is neither the first call nor unchecked."""

    def made() -> W:
        work = build()
        device = getattr(work, "device", None)
        if device is None:
            raise TypeError(f"ready({key!r}): {type(work).__name__} has no device to warm it up on")

        def warm() -> None:
            from devbench.engine.measure import warm_up

            warm_up(work, device)

        check_once(key, lambda: (work.check(), warm()), warm)
        return work

    return once(key, made)


@functools.cache
def _work_fingerprint() -> str:
    """The source of the work a check proves (the files the work lock watches), as one hash; once per process."""
    return hashlib.sha1(b"".join(f.read_bytes() for f in _work_files())).hexdigest()


def _work_files() -> list[Path]:
    """The files the work lock watches (``worklock.WATCHED``: the workloads and the engine's timing), found beside
    this package wherever it is installed (a source tree, or a wheel in site-packages)."""
    from devbench.engine.worklock import WATCHED

    package = Path(__file__).resolve().parents[1]  # devbench/engine/prepare.py -> devbench/
    return sorted({f for pattern in WATCHED for f in package.glob(pattern.removeprefix("src/devbench/"))})


def _checked_scope() -> tuple:
    """What a check proves beyond its key: this code's work, this torch build (its version, CUDA and source
    revision), this host and the GPUs it ran on (by UUID): a folder of checks exported across commits, machines
    or torch builds never stands for a check here, a CPU point's either."""
    import platform

    ran_on = _cuda_identities() if torch.cuda.is_initialized() else []
    gpus = tuple(g.get("uuid") or g.get("pci_bus_id") for g in ran_on)
    build = (torch.__version__, torch.version.cuda, getattr(torch.version, "git_version", None))
    return _work_fingerprint(), *build, platform.node(), platform.machine(), gpus
