"""A swept class's points (``swept = True``): on a GPU each asks the run's measuring process
(``devbench.engine.sweep``) to build its workload and time its figure, rather than doing it in asv's process; and
the class's declared ``skips``, which a point raises before any set-up, asked or not. ``suite.instrumented`` routes a
swept class through here (``route``). Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import base64
import functools
import os
import pickle
import sys
import time
from collections.abc import Callable

from devbench.engine import sweep
from devbench.engine.devices import no_cuda_reason
from devbench.engine.gpuwatch import _short, cpu_point
from devbench.engine.sweep import figures_of

#: asv_runner's benchmark kinds, by the prefix of the method's name
BENCHMARK_PREFIXES = ("time_", "timeraw_", "track_", "mem_", "peakmem_")


def declared_skip(bench: object, args: tuple) -> str | None:
    """The reason of the first of the class's ``skips`` entries that the point ``args`` matches, or None.

    ``skips = [{"where": {param: [values]}, "reason": "..."}]``: points that never run, whatever the machine
    (a GPU-only mode on the CPU, a size the CPU curve stops before). ``@instrumented`` raises the reason before
    ``setup`` runs, and ``devbench.gpu.plan`` reads the same entries, so a planned run does not price them."""
    names = list(getattr(bench, "param_names", []))
    values = args[len(args) - len(names) :] if names else ()
    for entry in getattr(bench, "skips", ()) or ():
        where = entry["where"]
        if all(name in names and values[names.index(name)] in wanted for name, wanted in where.items()):
            return entry["reason"]
    return None


def _on_sweep(bench: object, args: tuple) -> bool:
    """Whether this point is measured by the measuring process (``devbench.engine.sweep``'s modes)."""
    if sweep.in_server():
        return False
    mode = sweep.mode()
    if mode != "auto":
        return mode == "all"
    return not cpu_point(bench, args) and no_cuda_reason() is None


#: set by devbench compare's worker (``compare.worker.TURNS_ENV``): a set-up's figure is asked turn after turn, and no
#: asv clock counts from the set-up (``sweep.TURNS_ENV``: the measuring process keeps its workload meanwhile)
TURNS_ENV = sweep.TURNS_ENV


def _ask(bench: object, op: str, name: str, args: tuple) -> dict:
    module = type(bench).__module__
    file = getattr(sys.modules.get(module), "__file__", None)
    request = {"op": op, "name": name, "module": module, "file": file, "params": list(args)}
    # asv hands a set-up cache's result first (where it is not None): sent pickled
    if callable(getattr(bench, "setup_cache", None)) and len(args) == len(getattr(bench, "param_names", ())) + 1:
        request["params"] = list(args[1:])
        request["cache"] = base64.b64encode(pickle.dumps(args[0])).decode("ascii")
    # asv's timeout counts from the point's start, its set-up included: the figure asked after a set-up may take
    # what is left of it (its watchdog in the measuring process then ends a hung figure before asv kills the point,
    # not a build's time later); a figure asked again on the same set-up (a compare's turns) has the whole of it
    timeout = float(getattr(bench, "timeout", 300.0))
    request["class_timeout_s"] = timeout  # what each figure measured ahead for the class's other points may take
    if op == "prepare" and not os.environ.get(TURNS_ENV):
        bench._devbench_prepared = time.monotonic()
    elif op == "measure" and "_devbench_prepared" in bench.__dict__:
        timeout -= time.monotonic() - bench.__dict__.pop("_devbench_prepared")
    reply = sweep.ask(request, timeout_s=max(1.0, timeout))
    if reply.get("retry"):  # the process failed before it touched this point (and ended): a fresh one measures it
        reply = sweep.ask(request, timeout_s=max(1.0, timeout))
    if "skip" in reply:
        raise NotImplementedError(reply["skip"])
    if "error" in reply:
        raise sweep.MeasuringError(f"{reply['error']} (in the measuring process)\n{reply.get('traceback', '')}")
    return reply


def _own(method: Callable[..., object]) -> Callable[..., object]:
    """An inherited benchmark method as a method of the inheriting class (its source, asv's, is the parent's)."""

    @functools.wraps(method)
    def own(self, *args):
        return method(self, *args)

    return own


def _swept_setup(setup: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(setup)
    def wrapped(self, *args):
        self._devbench_asks = _on_sweep(self, args)
        if not self._devbench_asks:
            return setup(self, *args)
        reason = declared_skip(self, args)
        if reason:
            raise NotImplementedError(reason)
        _ask(self, "prepare", _short(type(self)), args)

    wrapped.devbench_swept = True
    return wrapped


def _swept_teardown(teardown: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(teardown)
    def wrapped(self, *args):
        if not getattr(self, "_devbench_asks", False):  # the measuring process tears its own workloads down
            teardown(self, *args)

    wrapped.devbench_swept = True
    return wrapped


def _swept_figure(method: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(method)
    def wrapped(self, *args):
        if getattr(self, "_devbench_asks", False):
            return _ask(self, "measure", f"{_short(type(self))}.{method.__name__}", args)["result"]
        from devbench.engine import precision

        with precision.capped(getattr(self, "sample_cap", None)):
            return method(self, *args)

    wrapped.devbench_swept = True
    return wrapped


def route(cls: type) -> None:
    """Route a swept class's points through the measuring process where ``_on_sweep`` says so."""
    bad = [n for n in dir(cls) if n.startswith(BENCHMARK_PREFIXES) and not n.startswith("track_")]
    if bad:
        raise TypeError(f"{cls.__name__} is swept: its figures are track_ figures (a time_ figure is asv's clock "
                        f"in the asking process), not {bad}")  # fmt: skip
    # its own and its inherited set-up, tear-down and figures, each routed once (a swept parent's already are)
    for name in ("setup", "teardown", *figures_of(cls)):
        method = getattr(cls, name)
        if not getattr(method, "devbench_swept", False):
            wrap = {"setup": _swept_setup, "teardown": _swept_teardown}.get(name, _swept_figure)
            setattr(cls, name, wrap(method))
