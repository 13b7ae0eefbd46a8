"""Each side's code: a commit's ``benchmarks/``, ``src/`` and ``asv.conf.json``, exported with ``git archive``.

Nothing is installed and no package index is needed: each side's worker runs in the given
Python's environment (the torch already there) with the side's own ``src/`` first on its path.
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from devbench.compare.options import ABError

#: what the benchmarks run: every Python file of what a side exports (``export``) and its asv configuration.
#: Two commits with the same ones here measure the same code; documentation beside them does not count. Any
#: module of ``src/`` counts, not only the workloads: every benchmark imports ``devbench`` itself.
BENCHMARK_CODE = ("asv.conf.json", "benchmarks", "src")


@dataclass(frozen=True)
class Side:
    name: str  # "base" or "head"
    rev: str  # what the user typed
    sha: str
    tree: Path  # exported benchmarks/ and src/


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if out.returncode != 0:
        raise ABError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"git {' '.join(args)} failed")
    return out.stdout.strip()


def resolve(repo: Path, rev: str) -> str:
    """The full hash of ``rev`` (a branch, tag or hash), or ``ABError`` naming it."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        raise ABError(f"{rev!r} is not a commit of the repository at {repo}") from None


def benchmark_code(repo: Path, sha: str) -> str:
    """The git blob ids of the code the benchmarks run at ``sha`` (Python files and asv.conf.json), as one string."""
    listing = git(repo, "ls-tree", "-r", sha, "--", *BENCHMARK_CODE)
    blobs = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        if path.endswith(".py") or path == "asv.conf.json":
            blobs.append(f"{path}={meta.split()[2]}")
    return " ".join(sorted(blobs))


def export(repo: Path, sha: str, dest: Path) -> None:
    """The commit's ``benchmarks/``, ``src/`` and ``asv.conf.json`` under ``dest`` (git archive)."""
    listed = git(repo, "ls-tree", "--name-only", sha).split("\n")
    wanted = [p for p in ("benchmarks", "src", "asv.conf.json") if p in listed]
    if "benchmarks" not in wanted:
        raise ABError(f"commit {sha[:8]} has no benchmarks/: not an asv benchmark commit")
    dest.mkdir(parents=True)
    with tempfile.TemporaryFile() as tar:
        subprocess.run(["git", "archive", "--format=tar", sha, *wanted], cwd=repo, stdout=tar, check=True)
        tar.seek(0)
        with tarfile.open(fileobj=tar) as t:
            t.extractall(dest, filter="data")


def export_sides(repo: Path, revs: list[tuple[str, str]], work: Path) -> list[Side]:
    sides = []
    for name, rev in revs:
        sha = resolve(repo, rev)
        tree = work / name
        export(repo, sha, tree)
        sides.append(Side(name, rev, sha, tree))
    return sides
