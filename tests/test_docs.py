"""Docs that cannot drift: every path, section and test a doc, docstring or comment names exists.

Read from the repository's own files, no torch: a relative link in Markdown must resolve; a
path of the repository named in backticks or in a ``see`` (``benchmarks/README.md``,
``src/devbench/gpu/plan.py``, ``reports/gpu/h200/``) must exist; a section named beside a
Markdown file (``benchmarks/README.md, "Noise"``) must be one of its headings; a test named
as ``tests/test_x.py::test_y`` must be defined there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: where references are read: the project's text, not the evidence folders' own logs and tables
SOURCES = [
    *ROOT.glob("*.md"),
    *(ROOT / "docs").glob("*.md"),
    *(ROOT / "benchmarks").glob("*.md"),
    *(ROOT / "benchmarks").glob("*.py"),
    *(ROOT / "src" / "devbench").rglob("*.py"),
    *(ROOT / "scripts").rglob("*"),
    *(ROOT / "tests").glob("*.py"),
    *(ROOT / "reports").rglob("README.md"),
    *(ROOT / "reports").rglob("*.md"),
    ROOT / "Makefile",
    ROOT / "pyproject.toml",
]

#: top-level folders a repository path starts with
TOP = ("src/", "tests/", "docs/", "benchmarks/", "scripts/", "reports/", ".ci/")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(#[^)]*)?\)")
PATH = re.compile(r"(?<![\w./-])((?:src|tests|docs|benchmarks|scripts|reports|\.ci)/[\w./-]*[\w/])")
SECTION = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.md),? \"([^\"\n]+)\"")
TEST = re.compile(r"(tests/test_\w+\.py)::(test_\w+)")


def _sources() -> list[Path]:
    return sorted({p for p in SOURCES if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"})


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return ""


#: paths the project's commands make (``devbench report``'s default output): named, never committed
MADE = ("reports/latest",)


def _archived(path: Path) -> bool:
    """Whether ``path`` is packed in a ``runs.tar.xz`` of a folder above it (reports/: evidence compacted)."""
    import tarfile

    for folder in path.parents:
        archive = folder / "runs.tar.xz"
        if archive.is_file():
            with tarfile.open(archive) as tar:
                names = set(tar.getnames())
            member = str(path.relative_to(folder))
            return member in names or any(n.startswith(member + "/") for n in names)
    return False


def _exists(path: Path) -> bool:
    return path.exists() or _archived(path)


def _headings(md: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in _text(md).splitlines() if line.startswith("#")}


def _has_section(md: Path, section: str) -> bool:
    """A heading that is the section's name, or begins with it ("Verdicts" names "Verdicts: telling ...")."""
    return any(h == section or h.startswith((section + ":", section + ",", section + " (")) for h in _headings(md))


def broken_references(files: list[Path], root: Path = ROOT) -> list[str]:
    """Every reference in ``files`` to a path, section or test of ``root`` that does not exist, as text."""
    bad = []
    this = Path(__file__).resolve()
    for path in files:
        if path.resolve() == this:  # its own docstring names examples
            continue
        text = _text(path)
        where = path.relative_to(root)
        if path.suffix == ".md":
            for target, _anchor in LINK.findall(text):
                if re.match(r"^[a-z]+:", target):  # a URL
                    continue
                if not (path.parent / target).exists():
                    bad.append(f"{where}: link {target} does not resolve")
            text = LINK.sub("", text)  # a link's target is checked as a link, not again as a path
        # a test's own paths are fixtures it makes; its references to sections and tests are still read
        for name in [] if path.parent.name == "tests" else PATH.findall(text):
            candidate = name.rstrip("/.")
            if candidate.endswith("_") or candidate.startswith(MADE):  # a name's stem (bench_<x>), or an output
                continue
            if not _exists(root / candidate) and not _exists(path.parent / candidate):
                bad.append(f"{where}: {name} does not exist")
        for md, section in SECTION.findall(text):
            target = root / md if (root / md).exists() else path.parent / md
            if not target.exists():
                target = next((p for p in root.rglob(md) if ".venv" not in p.parts), target)
            if target.exists() and not _has_section(target, section):
                bad.append(f"{where}: {md} has no section {section!r}")
        for test_file, test in TEST.findall(text):
            if not (root / test_file).exists() or f"def {test}(" not in _text(root / test_file):
                bad.append(f"{where}: {test_file}::{test} does not exist")
    return bad


def test_every_path_section_and_test_the_docs_name_exists():
    bad = broken_references(_sources())
    assert not bad, "\n".join(bad)


def test_a_removed_path_section_or_test_is_found(tmp_path):
    """The check itself can fail: a fixture repository whose docs name what is not there."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_here():\n    pass\n")
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Noise\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "See [the guide](docs/guide.md) and [gone](docs/gone.md); `src/devbench/nothing.py`;\n"
        'docs/guide.md, "Noise" and docs/guide.md, "Quiet"; tests/test_a.py::test_here and '
        "tests/test_a.py::test_gone.\n"
    )
    bad = broken_references([doc], tmp_path)
    assert bad == [
        "README.md: link docs/gone.md does not resolve",
        "README.md: src/devbench/nothing.py does not exist",
        "README.md: docs/guide.md has no section 'Quiet'",
        "README.md: tests/test_a.py::test_gone does not exist",
    ]


@pytest.mark.parametrize("doc", ["README.md", "docs/design.md", "benchmarks/README.md", "reports/README.md"])
def test_the_main_docs_are_read(doc):
    assert ROOT / doc in _sources()


def test_reports_hold_evidence_not_an_archive():
    """reports/ holds what current claims rest on, compacted (bulk packed in runs.tar.xz, superseded runs
    deleted: git keeps them): at most 10 MB, 200 files and 13 folders beside its index (the sample's inputs lie
    as asv lays them out, its results beside their run records, collectives, fleet and search records)."""
    files = [p for p in (ROOT / "reports").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 10 * 2**20
    assert len(files) <= 200
    entries = [p for p in (ROOT / "reports").iterdir() if p.name != "README.md"]
    assert len(entries) <= 13, sorted(p.name for p in entries)


def test_the_packaging_file_is_read_too():
    """pyproject.toml's comments name files and sections as the docs do: they are checked with them."""
    assert ROOT / "pyproject.toml" in _sources()
