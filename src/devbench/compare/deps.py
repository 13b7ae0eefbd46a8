"""Which files a benchmark module's figures can depend on, so that a compare measures only what can have changed.

The rule (docs/compare.md, "What can have changed"): a figure of ``benchmarks/bench_<name>.py`` depends on

* that module and ``benchmarks/__init__.py``;
* every module of the project it imports, and every module those import, found in the source of each
  (``import devbench.x``, ``from devbench.x import y``, ``from devbench import x``, relative imports), at
  module level and inside functions alike: a lazy import counts;
* every file of the project that is neither Python nor Markdown under ``src/`` and ``benchmarks/`` (a data
  file the code may read at run time: no reading of the code can prove it does not);
* every project module a string of its source names whole (``"devbench.engine.measuring"``, run as
  ``python -m``: the measuring process that builds and times the swept classes' figures is started so);
* and, where a module imports by a name it computes (``importlib.import_module(name)``, ``__import__``), every
  Python file of the project: the import cannot be read.

Granularity: whole files, byte for byte. Two sides whose files in that set are identical, run by the same
Python, time the same code: ``devbench compare`` lists their figures as ``same code`` and does not measure
them (``--measure-all`` measures them anyway). Read from the exported trees; nothing is imported.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

#: the packages of the project whose modules count (anything else is the environment's)
PROJECT = ("devbench", "benchmarks")
#: a string that names a project module whole: a module run by name (``python -m``) counts as imported
MODULE_NAME = re.compile(r"(?:devbench|benchmarks)(?:\.[A-Za-z_]\w*)+")


def _module_file(tree: Path, dotted: str) -> Path | None:
    """The file of project module ``dotted`` in ``tree`` (``src/`` layout for devbench), or None."""
    parts = dotted.split(".")
    if parts[0] not in PROJECT:
        return None
    base = tree / "src" if parts[0] == "devbench" else tree
    for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _package(tree: Path, path: Path) -> str:
    """The dotted package a file of ``tree`` belongs to (for relative imports)."""
    rel = path.relative_to(tree / "src" if path.is_relative_to(tree / "src") else tree)
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts if path.name == "__init__.py" else parts[:-1]).removesuffix(".__init__")


def imports(tree: Path, path: Path) -> tuple[set[Path], bool]:
    """The project files ``path`` imports (every import in its source, inside functions too), and whether it
    imports by a computed name (then every file may be one of them)."""
    source = ast.parse(path.read_text(), filename=str(path))
    found: set[Path] = set()
    dynamic = False
    package = _package(tree, path)
    for node in ast.walk(source):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*up, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [module, *(f"{module}.{a.name}" for a in node.names)]  # an imported name may be a module
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__"):
                arg = node.args[0] if node.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names = [arg.value]
                else:
                    dynamic = True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
            names = [node.value]  # started by its name (``[sys.executable, "-m", name]``), or looked up by it
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # a package's __init__ runs on the way to its module
                hit = _module_file(tree, ".".join(parts[:i]))
                if hit is not None:
                    found.add(hit)
    return found, dynamic


def closure(tree: Path, module: Path) -> set[Path]:
    """Every file of ``tree`` the figures of benchmark module ``module`` can depend on (the module's rule)."""
    seen: set[Path] = set()
    todo = [module, tree / "benchmarks" / "__init__.py"]
    everything = False
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        found, dynamic = imports(tree, path)
        everything |= dynamic
        todo.extend(found - seen)
    roots = [tree / "src", tree / "benchmarks"]
    data = {p for r in roots if r.is_dir() for p in r.rglob("*") if p.is_file()
            and p.suffix not in (".py", ".pyc", ".md") and "__pycache__" not in p.parts}  # fmt: skip
    if everything:
        seen |= {p for r in roots if r.is_dir() for p in r.rglob("*.py") if "__pycache__" not in p.parts}
    return seen | data


def digest(tree: Path, module: Path) -> str:
    """One hash of every file in ``closure`` (names relative to the tree, and bytes)."""
    h = hashlib.sha256()
    for path in sorted(closure(tree, module)):
        h.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def unchanged_modules(base: Path, head: Path) -> dict[str, bool]:
    """Each benchmark module of either tree ("bench_x") -> whether its figures run byte-identical code on both."""
    names = {p.stem for t in (base, head) for p in (t / "benchmarks").glob("bench_*.py")}
    out = {}
    for name in sorted(names):
        a, b = base / "benchmarks" / f"{name}.py", head / "benchmarks" / f"{name}.py"
        out[name] = a.is_file() and b.is_file() and digest(base, a) == digest(head, b)
    return out
