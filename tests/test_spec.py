"""The spec (devbench.records.spec): formulas, labels, and every figure identity checked against benchmarks/."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devbench.records import spec

ROOT = Path(__file__).resolve().parents[1]


def _benchmark(key: str):
    """The class and method that asv key names in benchmarks/ (``AttributeError`` when it is gone)."""
    module, cls, method = key.split(".")
    sys.path.insert(0, str(ROOT))
    try:
        klass = getattr(importlib.import_module(f"benchmarks.{module}"), cls)
    finally:
        sys.path.remove(str(ROOT))
    return klass, getattr(klass, method)


@pytest.mark.parametrize("figure", spec.FIGURES, ids=lambda f: f.benchmark)
def test_every_figure_identity_names_a_benchmark_its_params_and_its_unit(figure):
    klass, method = _benchmark(figure.benchmark)
    assert tuple(klass.param_names) == figure.params, f"{figure.benchmark}: params are {klass.param_names}"
    unit = "seconds" if method.__name__.startswith("time_") else getattr(method, "unit", None)
    assert unit == figure.unit, f"{figure.benchmark}: unit is {unit!r}"


def test_copy_kinds_name_params_of_their_benchmark():
    for figure, kind in spec.COPY_KINDS.items():
        assert figure in spec.FIGURES and set(kind) < set(figure.params) and "nbytes" in figure.params


def test_a_renamed_benchmark_is_caught():
    with pytest.raises(AttributeError):
        _benchmark("bench_matmul.MatmulSquare.track_gflops")


def test_labels_follow_the_param_order_and_need_every_param():
    assert spec.MATMUL_TFLOPS.label(n=256, dtype="float32", device="cpu") == "device=cpu, dtype=float32, n=256"
    with pytest.raises(ValueError, match="takes params"):
        spec.MATMUL_TFLOPS.label(device="cpu")


@pytest.mark.parametrize(
    ("nbytes", "label"),
    [(4096, "4 KiB"), (1 << 20, "1 MiB"), (1 << 30, "1 GiB"), (3 << 20, "3 MiB"), (1000, "1000 B"), (6144, "6 KiB")],
)
def test_size_label(nbytes, label):
    assert spec.size_label(nbytes) == label


def test_formulas():
    assert spec.matmul_flops(2) == 16 and spec.matmul_flops(1024) == 2 * 1024**3
    assert spec.gbps(2e9, 1.0) == pytest.approx(2.0)
    assert spec.tflops(3e12, 1.5) == pytest.approx(2.0)
    assert spec.bus_factor("all_reduce", 4) == 1.5 and spec.bus_factor("all_gather", 4) == 0.75
    assert spec.bus_factor("broadcast", 8) == spec.bus_factor("send_recv", 8) == 1.0
    with pytest.raises(ValueError, match="unknown collective"):
        spec.bus_factor("scatter", 2)
    assert spec.better("GB/s") == "higher" and spec.better("seconds") == "lower" and spec.better("x") == ""


def _all_figures():
    sys.path.insert(0, str(ROOT))
    try:
        for path in sorted((ROOT / "benchmarks").glob("bench_*.py")):
            module = importlib.import_module(f"benchmarks.{path.stem}")
            for cls_name, klass in vars(module).items():
                if isinstance(klass, type) and klass.__module__ == module.__name__:
                    for attr in dir(klass):
                        if attr.startswith(("time_", "track_")):
                            yield f"{path.stem}.{cls_name}.{attr}", getattr(klass, attr)
    finally:
        sys.path.remove(str(ROOT))


def test_every_figure_says_which_way_is_better_or_is_a_record():
    """compare judges faster/slower by direction: a new ratio figure must say its own."""
    keys = []
    for key, method in _all_figures():
        keys.append(key)
        unit = "seconds" if method.__name__.startswith("time_") else method.unit
        assert spec.direction(key, unit) or key in spec.RECORDS, f"{key} ({unit}): add it to spec.RATIO_BETTER"
    assert set(spec.RATIO_BETTER) | set(spec.RECORDS) <= set(keys), "a direction names a figure that is gone"
    assert set(spec.TWINS) | set(spec.TWINS.values()) <= set(keys), "a twin names a figure that is gone"
    partners = {f: g[0] if isinstance(g, tuple) else g for f, g in spec.SAME_BLOCKS.items()}
    assert set(partners) | set(partners.values()) <= set(keys), "SAME_BLOCKS names a gone figure"
    assert all(f.rsplit(".", 1)[0] == g.rsplit(".", 1)[0] for f, g in partners.items())
    assert spec.direction("bench_logging.LogNorms.track_vs_on_device", "x") == "lower"
    assert spec.direction("bench_transfer.PeerCopy.track_peer_access", "bool") == ""


LAYERS = [
    # (module, packages it must not import)
    ("devbench.records.spec", ["torch", "asv", "pandas"]),
    ("devbench.records.verdict", ["torch", "asv", "pandas", "numpy"]),
    ("devbench.gpu.plan", ["torch", "asv", "asv_runner", "pandas"]),
    ("devbench.gpu.priced", ["torch", "asv", "asv_runner", "pandas"]),
    ("devbench.gpu.gpurun", ["torch", "asv", "asv_runner", "pandas", "devbench.report"]),  # it runs them, in processes
    # the coordinator never imports the benchmarks, torch or the report; the worker only asv_runner, when run
    ("devbench.compare.cli", ["torch", "asv", "asv_runner", "devbench.report", "benchmarks"]),
    ("devbench.compare.worker", ["torch", "asv", "asv_runner", "devbench.report", "pandas"]),
    # parses, never imports
    ("devbench.engine.worklock", ["torch", "asv", "pandas", "devbench.engine.suite", "benchmarks"]),
    ("devbench.report.cli", ["torch", "devbench.compare"]),
    ("devbench.report.sections", ["torch"]),
    ("devbench.engine.measure", ["asv", "devbench.engine.suite", "benchmarks"]),
    ("devbench.workloads.matmul", ["asv", "devbench.engine.suite", "benchmarks"]),
    ("devbench.workloads.transfer", ["asv", "devbench.engine.suite", "benchmarks"]),
    ("devbench.workloads.parallel", ["asv", "devbench.engine.suite", "benchmarks"]),
    ("devbench.workloads.norms", ["asv", "devbench.engine.suite", "benchmarks"]),
    ("devbench.workloads.model", ["asv", "devbench.engine.suite", "benchmarks"]),
    ("devbench.workloads.collectives", ["asv", "devbench.engine.suite", "benchmarks"]),
]


#: run in one interpreter: each module is imported in a child forked from a parent that has imported
#: nothing of devbench, so each child sees only what that one module pulls in. torch is imported once,
#: between the modules that must not load it and those that may (it imports none of the forbidden).
_LAYERING = """
import importlib, json, os, sys

def check(layers):
    failed = {}
    for module, forbidden in layers:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                importlib.import_module(module)
                bad = sorted(m for m in sys.modules for f in forbidden if m == f or m.startswith(f + "."))
                message = json.dumps(bad[:5])
            except BaseException as exc:
                message = json.dumps([f"import failed: {exc!r}"])
            os.write(write, message.encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            bad = json.loads(pipe.read() or '["no answer"]')
        os.waitpid(pid, 0)
        if bad:
            failed[module] = bad
    return failed

layers = json.loads(sys.argv[1])
failed = check([x for x in layers if "torch" in x[1]])
import torch  # noqa: E402
failed.update(check([x for x in layers if "torch" not in x[1]]))
print(json.dumps(failed))
"""


def test_layering():
    """Data flows one way (docs/design.md): a module never imports the layers above it. Each module is
    imported alone, in a process of its own."""
    out = subprocess.run([sys.executable, "-c", _LAYERING, json.dumps(LAYERS)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


def _import_graph() -> dict[str, set[str]]:
    """Every devbench module -> the devbench modules it imports anywhere in it (in functions too)."""
    import ast

    src = ROOT / "src"
    files = {".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (src / "devbench").rglob("*.py")}  # fmt: skip
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                deps |= {f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as a path that ends where it starts, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[node] = 2
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module, [module])):
            return found
    return []


def test_the_import_graph_has_no_cycle():
    """No module reaches itself through its imports, at module level or inside functions."""
    assert _cycle(_import_graph()) == []


def test_the_cycle_finder_finds_one_inside_functions_too():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    graph = _import_graph()  # imports inside functions are edges: validate imports the machine name lazily
    assert "devbench.records.files" in graph["devbench.validate"]
    assert "devbench.report.load" in graph["devbench.report.cli"]


#: (importer, imported) prefixes that must never meet, at module level or inside functions: a lower
#: layer never reaches up, and the report and the compare code read each other's files only
FORBIDDEN_IMPORTS = [
    ("devbench.report", "devbench.compare"),
    ("devbench.compare", "devbench.report"),
    ("devbench.records.gpustate", "devbench.engine.devices"),
    ("devbench.records.gpustate", "devbench.engine.machine"),
    ("devbench.records.files", "devbench"),
    ("devbench.records.spec", "devbench"),
    ("devbench.records.verdict", "devbench"),
    ("devbench.engine.measure", "devbench.workloads"),
    ("devbench.engine.measure", "devbench.engine.suite"),
    ("devbench.workloads", "devbench.engine.suite"),
    # the plan is pure arithmetic (and the stop rule's, which is arithmetic too); gpu-run drives the tools and
    # no tool drives it
    ("devbench.gpu.plan", "devbench"),
    ("devbench.gpu.priced", "devbench"),
    ("devbench.gpu.declared", "devbench"),
    ("devbench.gpu.pricing", "devbench"),
    ("devbench.compare", "devbench.gpu.gpurun"),
    ("devbench.report", "devbench.gpu.gpurun"),
]


#: (module, dependency) pairs a rule above would forbid and that are allowed: the plan prices figures by the
#: stop rule's own numbers (``devbench.engine.precision``: arithmetic, importing nothing of devbench) and reads
#: what a class declares through ``devbench.gpu.declared`` (arithmetic too) with a machine's ``devbench.gpu.pricing``;
#: its points and their prices are ``devbench.gpu.priced`` (arithmetic on a machine's pricing)
ALLOWED_IMPORTS = {("devbench.gpu.plan", "devbench.engine.precision"), ("devbench.gpu.plan", "devbench.gpu.declared"),
                   ("devbench.gpu.declared", "devbench.engine.precision"),
                   ("devbench.gpu.plan", "devbench.gpu.pricing"), ("devbench.gpu.plan", "devbench.gpu.priced"),
                   ("devbench.gpu.priced", "devbench.gpu.pricing")}  # fmt: skip


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_import_reaches_a_layer_above():
    graph = _import_graph()
    bad = [f"{m} -> {d}" for m, deps in graph.items() for d in deps if (m, d) not in ALLOWED_IMPORTS
           for a, b in FORBIDDEN_IMPORTS if _under(m, a) and _under(d, b)]  # fmt: skip
    assert not bad, bad


#: each folder of src/devbench and the folders it may import (docs/design.md, "Modules and data flow")
FOLDERS = {
    "records": set(),
    "engine": {"records"},
    "workloads": {"engine", "records", "logger"},
    "worlds": {"workloads", "engine", "records"},
    "report": {"records"},
    "compare": {"records"},
    "gpu": {"report", "compare", "engine", "records"},
}


def test_each_folder_imports_only_the_folders_below_it():
    def folder(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[0] == "devbench" else None

    bad = sorted({f"{m} -> {d}" for m, deps in _import_graph().items() for d in deps if folder(m) in FOLDERS
                  and folder(d) not in (None, folder(m)) and folder(d) not in FOLDERS[folder(m)]})  # fmt: skip
    assert not bad, bad


def test_no_source_file_outgrows_500_lines():
    """A module past 500 lines does more than one job: split it by job (CONTRIBUTING.md)."""
    files = [*(ROOT / "src" / "devbench").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long


def test_benchmark_identities_are_spelled_in_spec_alone():
    """The report, the plan, validate and the health lines name figures through ``devbench.records.spec``: a figure
    renamed there, or in ``benchmarks/``, cannot leave one of them reading a name nothing writes."""
    pattern = re.compile(r"bench_[a-z]+\.[A-Z]\w*\.(?:time|track|mem|peakmem|timeraw)_\w+")
    src = ROOT / "src" / "devbench"
    found = {str(p.relative_to(ROOT)): pattern.findall(p.read_text()) for p in src.rglob("*.py")}
    spelled = {path: names for path, names in found.items() if names and not path.endswith("devbench/records/spec.py")}
    assert not spelled, spelled
