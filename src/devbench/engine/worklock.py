"""The work lock: a change to the work a benchmark times is a decision, recorded in the repository.

asv versions a benchmark by the source of its own method and set-up. The work it times lives
in ``devbench.workloads`` and the engine (``devbench.engine.measure``), which asv does not hash, so a
change there (a lane's work made 4x longer, a copy that was a no-op made real) runs the
history on across it and shows as a regression. Hashing those modules into every version would
cut every history at every refactor instead.

The benchmark modules' own work is fingerprinted too: their helpers (a function a figure calls, a module
constant) as ``bench_x.name``, and each benchmark class's methods and timing attributes that asv does not
version (a helper method, ``teardown``, ``sample_time``) as ``bench_x.Class.name``. asv versions a figure by the
source of its method, ``setup`` and ``setup_cache`` alone, so an edit to what they call would otherwise run the
history on as well.

So each ``suite.Benchmark`` class carries a ``work_version`` (1 unless raised), which ``suite``
folds into its asv version, and ``benchmarks/work-lock.json`` records a fingerprint of every
definition in the watched modules (each function, class and constant on its own, as its syntax tree
without docstrings, imports and annotations: comments, layout, docs, import paths, type hints and the
module a definition lives in do not count) with every class's ``work_version``. When a definition
changes, ``check`` fails (``tests/test_worklock.py``, so ``make test``) and names the benchmark
classes that reach it (the names a class uses, and theirs, transitively): for each, raise
``work_version`` if the work it times changed, then ``make work-lock`` records the decision. Nothing
here imports torch or the benchmarks: the files are parsed, not run.

``python -m devbench.engine.worklock`` checks (exit 1 with what changed); ``--write`` records.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LOCK = Path("benchmarks") / "work-lock.json"
#: the work and the engine, relative to the repository root
WATCHED = ("src/devbench/workloads/*.py", "src/devbench/engine/measure.py", "src/devbench/engine/blocks.py",
           "src/devbench/engine/bursts.py", "src/devbench/engine/precision.py", "src/devbench/engine/lanes.py",
           "src/devbench/engine/copyblocks.py")
BENCHMARKS = "benchmarks/bench_*.py"
PACKAGE = "devbench"
ABOUT = (
    "What the work of each benchmark was when last decided. A change to a watched definition fails make test "
    "until recorded: raise the work_version of every benchmark class whose work changed, then run make work-lock "
    "(devbench.engine.worklock)."
)


class LockError(Exception):
    """A file the lock needs cannot be read or parsed; the message names it."""


class _Strip(ast.NodeTransformer):
    """Drops what does no work: import statements (where a name comes from is not what it does: a
    moved helper or a reordered import is no change of work) and type annotations."""

    def visit_Import(self, node: ast.AST) -> None:
        return None

    visit_ImportFrom = visit_Import

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        if not node.body:
            node.body = [ast.Pass()]
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:  # a dataclass's field without a default: its name and place count, not its type
            return ast.Expr(value=node.target)
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Names bound under another name anywhere in a module (``from x import A as B``: B -> A)."""
    return {a.asname: a.name.rsplit(".", 1)[-1] for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
            for a in n.names if a.asname and a.asname != a.name}  # fmt: skip


class _Unalias(ast.NodeTransformer):
    """Names used under an alias, by the name they were imported as: ``B`` (``import A as B``) reads as ``A``,
    so that importing another definition under the same alias is a change of the code that uses it."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in self.aliases:
            return ast.copy_location(ast.Name(id=self.aliases[node.id], ctx=node.ctx), node)
        return node


def fingerprint(source: str, name: str = "<source>") -> str:
    """SHA-256 of ``source``'s syntax tree without docstrings, imports and annotations: comments, layout,
    docs, where a name is imported from and type hints do not count."""
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError as exc:
        raise LockError(f"{name}: cannot parse line {exc.lineno}: {exc.msg}") from None
    tree = _Strip().visit(tree)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()


def _read(path: Path, root: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"cannot read {path.relative_to(root)}: {exc}") from None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


@dataclass
class Tree:
    """What the lock records of a repository, and which benchmark classes reach which watched definition."""

    definitions: dict[str, str] = field(default_factory=dict)  # definition's name -> fingerprint
    where: dict[str, list[str]] = field(default_factory=dict)  # definition's name -> the watched files holding it
    work_versions: dict[str, int] = field(default_factory=dict)  # "bench_x.Class" -> work_version
    users: dict[str, list[str]] = field(default_factory=dict)  # definition's name -> benchmark classes reaching it

    def as_lock(self) -> dict:
        return {"about": ABOUT, "definitions": dict(sorted(self.definitions.items())),
                "work_versions": dict(sorted(self.work_versions.items()))}  # fmt: skip


def _work_version(cls: ast.ClassDef, where: str) -> int:
    for node in cls.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "work_version" for t in targets):
                value = node.value
                if not (isinstance(value, ast.Constant) and type(value.value) is int and value.value >= 1):
                    raise LockError(f"{where}: work_version must be a literal int >= 1")
                return value.value
    return 1


#: statements whose blocks run at their own level: a definition inside one (``if TORCH_NEW: def f(): ...``,
#: ``try: ... except ImportError: f = None``) is a definition of the module or class that holds it
_COMPOUND = ast.If | ast.Try | getattr(ast, "TryStar", ast.Try) | ast.With | ast.For | ast.While  # TryStar: 3.11


def _flat(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body``'s statements with those inside compound statements (``_COMPOUND``) in their place, in order."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, _COMPOUND):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ExceptHandler):
                    out.extend(_flat(child.body))
                elif isinstance(child, ast.stmt):
                    out.extend(_flat([child]))
        else:
            out.append(node)
    return out


def _defined(node: ast.stmt) -> list[str]:
    """The names a module-level statement defines: a function, a class, or assigned names, also inside an ``if``,
    ``try``, ``with`` or loop (that whole statement is then their definition); [] for anything else."""
    if isinstance(node, _COMPOUND):
        return list(dict.fromkeys(name for inner in _flat([node]) for name in _defined(inner)))
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _refs(node: ast.AST) -> set[str]:
    """Names a piece of code may reach: its names, and every attribute it reads (``transfer.Copy``,
    ``devbench.workloads.copies.Copy``); more than it reaches, never less."""
    return _names(node) | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _pieces(text: str, rel: str) -> dict[str, ast.Module]:
    """A watched module's definitions, each as a module of its own (the statement that defines it), and the rest
    of its module-level code under ``<rest of FILE>``; imports and docstrings do not count."""
    tree = ast.parse(text, filename=rel)
    tree = _Unalias(_aliases(tree)).visit(tree)
    pieces: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = _defined(node)
        if not names and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring or a bare string
        for name in names or [f"<rest of {rel}>"]:
            pieces.setdefault(name, []).append(node)
    return {name: ast.Module(body=body, type_ignores=[]) for name, body in pieces.items()}


def scan(root: Path) -> Tree:
    """Fingerprints of the watched modules' definitions (functions, classes, constants: each on its own, so a
    definition moved to another module is the same work), and every benchmark class with its work_version and
    the definitions it reaches (the names it uses, and theirs, transitively)."""
    tree = Tree()
    watched = sorted({p for pattern in WATCHED for p in root.glob(pattern) if p.name != "__init__.py"})
    found: dict[str, list[tuple[str, str]]] = {}  # name -> (file, fingerprint) of each watched definition
    refs: dict[str, set[str]] = {}
    for path in watched:
        rel = path.relative_to(root).as_posix()
        text = _read(path, root)
        try:
            pieces = _pieces(text, rel)
        except SyntaxError as exc:
            raise LockError(f"{rel}: cannot parse line {exc.lineno}: {exc.msg}") from None
        rest = f"<rest of {rel}>"
        for name, piece in pieces.items():
            found.setdefault(name, []).append((rel, fingerprint(ast.unparse(piece), rel)))
            refs.setdefault(name, set()).update(_refs(piece) | ({rest} if rest in pieces and name != rest else set()))
    for name, got in found.items():
        # one name in several modules: each module's own counts (swapping their bodies is a change)
        prints = [fp for _, fp in got] if len(got) == 1 else [f"{rel}:{fp}" for rel, fp in sorted(got)]
        tree.definitions[name] = prints[0][:16] if len(prints) == 1 else hashlib.sha256(
            "".join(prints).encode()).hexdigest()[:16]  # fmt: skip
        tree.where[name] = sorted({rel for rel, _ in got})
    users: dict[str, set[str]] = {name: set() for name in tree.definitions}
    for path in sorted(root.glob(BENCHMARKS)):
        _scan_benchmarks(tree, users, found, refs, path, path.relative_to(root).as_posix(), _read(path, root))
    tree.users = {name: sorted(u) for name, u in users.items()}
    return tree


#: asv's benchmark kinds by name prefix: asv versions such a method (and ``setup``, ``setup_cache``) by its source
ASV_PREFIXES = ("time_", "track_", "mem_", "peakmem_", "timeraw_")
#: a benchmark class's attributes that say how it is planned, listed or named, not what it times
NOT_WORK = {"headline", "skips", "work_version", "params", "param_names", "pretty_name", "timeout"}


def _class_work(cls: ast.ClassDef) -> dict[str, ast.AST]:
    """What a benchmark class does beyond what asv versions: its other methods (a helper a figure calls, its
    ``teardown``) and its attributes that set how it is timed (``sample_time``, ``sample_cap``, ``swept``, ...), by
    name; not its ``plan_`` attributes nor ``NOT_WORK``."""
    out: dict[str, ast.AST] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):  # ``track_x.unit = ...`` names a figure: not work
            names = [t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                     if isinstance(t, ast.Name)]  # fmt: skip
        elif isinstance(node, _COMPOUND):  # a method or attribute defined under an ``if``: that whole statement
            names = _defined(node)
        else:
            continue
        for name in names:
            if not name.startswith((*ASV_PREFIXES, "plan_")) and name not in {"setup", "setup_cache", *NOT_WORK}:
                out[name] = node
    return out


def _scan_benchmarks(tree: Tree, users: dict[str, set[str]], found: dict, refs: dict[str, set[str]], path: Path,
                     rel: str, text: str) -> None:  # fmt: skip
    """One benchmark module: each benchmark class's work_version and the watched definitions it reaches, and
    the module's own work, fingerprinted: its helpers (``bench_x.name``: a function a figure calls, a constant)
    and each class's methods and timing attributes that asv does not version (``bench_x.Class.name``)."""
    module = ast.parse(text, filename=rel)
    module = _Unalias(_aliases(module)).visit(module)
    # the module's helpers (functions, constants such as ``BLOCK_S = COPY_BLOCK_S``, and classes: a mixin, a
    # benchmark class another one extends), each with every statement that defines it
    statements: dict[str, list[ast.stmt]] = {}
    for n in module.body:
        for name in _defined(n):
            statements.setdefault(name, []).append(n)
    helpers = {name: ast.Module(body=body, type_ignores=[]) for name, body in statements.items()}
    benchmarks: dict[str, set[str]] = {}  # the module's classes that extend the suite's base -> their bases
    classes = [n for n in _flat(module.body) if isinstance(n, ast.ClassDef)]
    for cls in classes:
        bases = {b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases
                 if isinstance(b, ast.Name | ast.Attribute)}  # fmt: skip
        if bases & ({"Benchmark"} | benchmarks.keys()):
            benchmarks[cls.name] = bases & benchmarks.keys()
    asv_classes = {c.name for c in classes if any(isinstance(f, ast.FunctionDef) and f.name.startswith(ASV_PREFIXES)
                                                  for f in c.body)}  # fmt: skip
    own = {name: node for name, node in helpers.items() if name not in benchmarks.keys() | asv_classes}

    def record(name: str, node: ast.AST, who: set[str]) -> None:
        tree.definitions[name] = fingerprint(ast.unparse(node), rel)[:16]
        tree.where[name] = [rel]
        users.setdefault(name, set()).update(who)

    for name, node in own.items():
        record(f"{path.stem}.{name}", node, set())
    for cls in (c for c in classes if c.name in benchmarks):
        key = f"{path.stem}.{cls.name}"
        tree.work_versions[key] = _work_version(cls, f"{rel}: {cls.name}")
        family = {cls.name}  # the class, and the module's benchmark classes that extend it: they inherit its work
        while grown := {c for c, bases in benchmarks.items() if c not in family and bases & family}:
            family |= grown
        for name, node in _class_work(cls).items():
            record(f"{key}.{name}", node, {f"{path.stem}.{c}" for c in family})
        # names the class uses, and those of the module's helpers it uses (transitively)
        used, todo = set(), [cls]
        while todo:
            for name in _refs(todo.pop()) - used:
                used.add(name)
                if name in helpers:
                    todo.append(helpers[name])
        # the watched definitions among them (a name imported, or read off an imported module), and theirs
        reach: set[str] = set()
        todo_names = [n for n in used if n in found]
        while todo_names:
            name = todo_names.pop()
            if name in reach:
                continue
            reach.add(name)
            todo_names.extend(n for n in refs.get(name, ()) if n in found and n not in reach)
        for name in reach:
            users[name].add(key)
        for name in used & own.keys():
            users[f"{path.stem}.{name}"].add(key)


def read_lock(root: Path) -> dict:
    path = root / LOCK
    if not path.exists():
        return {"definitions": {}, "work_versions": {}}
    try:
        data = json.loads(_read(path, root))
    except json.JSONDecodeError as exc:
        raise LockError(f"{LOCK} is not valid JSON ({exc}); run make work-lock to write it again") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in ("definitions", "work_versions")):
        raise LockError(f"{LOCK} lacks its 'definitions' and 'work_versions' tables; run make work-lock")
    return data


def check(root: Path) -> list[str]:
    """What changed since the lock was written, one line each (empty: the lock holds)."""
    now, lock = scan(root), read_lock(root)
    problems = []
    was, is_ = lock["definitions"], now.definitions
    for name in sorted(was.keys() | is_.keys()):
        if was.get(name) == is_.get(name):
            continue
        if name not in is_:
            problems.append(f"{name} is gone")
            continue
        what = "is new" if name not in was else "changed"
        who = now.users.get(name) or []
        used = f"; the work of {', '.join(who)}" if who else "; no benchmark class uses it"
        problems.append(f"{name} in {', '.join(now.where[name])} {what}{used}")
    was, is_ = lock["work_versions"], now.work_versions
    for key in sorted(was.keys() | is_.keys()):
        if key not in was:
            problems.append(f"{key} is a new benchmark class (work_version {is_[key]})")
        elif key not in is_:
            problems.append(f"{key} is gone")
        elif was[key] != is_[key]:
            problems.append(f"{key}: work_version {was[key]} -> {is_[key]}")
    return problems


def advice(problems: list[str]) -> str:
    lines = [f"{LOCK} is out of date:", *(f"  {p}" for p in problems)]
    lines += [
        "For each benchmark class named, decide whether the work it times changed (its sizes, durations,",
        "what it computes or copies, how it is timed). Where it did, raise the class's work_version: asv then",
        "keeps its figures from before apart, so the history shows no false step and devbench compare does",
        "not judge across the change. Then record the decision: make work-lock",
    ]
    return "\n".join(lines)


def write(root: Path) -> Path:
    """Write the lock for the tree as it is, atomically."""
    path = root / LOCK
    text = json.dumps(scan(root).as_lock(), indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".work-lock.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devbench.engine.worklock",
        description="Check (default) or record (--write) benchmarks/work-lock.json: the fingerprint of every "
        "definition of the work a benchmark times (devbench.workloads, the engine's timing) and every "
        "benchmark class's work_version. Exit 0: the lock holds; 1: something changed (listed); 2: an error.",
    )
    parser.add_argument("--write", action="store_true", help="record the tree as it is (after deciding the versions)")
    parser.add_argument("--root", default=".", help="the repository root (default: the current directory)")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    try:
        if not (root / "benchmarks").is_dir():
            raise LockError(f"{root} has no benchmarks/ folder: pass the repository root with --root")
        if args.write:
            try:
                before = check(root)
            except LockError as exc:  # a lock of another format, or a damaged one: the decision records anew
                before = [f"the lock before could not be read ({exc})"]
            path = write(root)
            print(f"wrote {path.relative_to(root)}" + (f" ({len(before)} change(s) recorded)" if before else ""))
            for p in before:
                print(f"  {p}")
            return 0
        problems = check(root)
        classes = len(read_lock(root)["work_versions"])
    except LockError as exc:
        print(f"devbench.engine.worklock: {exc}", file=sys.stderr)
        return 2
    if problems:
        print(advice(problems), file=sys.stderr)
        return 1
    print(f"{LOCK} holds: {classes} benchmark classes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
