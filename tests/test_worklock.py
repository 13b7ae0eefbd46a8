"""Work versions: a change to the work a benchmark times is decided, recorded, and keeps its history apart."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
from asv_runner.benchmarks.time import TimeBenchmark
from asv_runner.benchmarks.track import TrackBenchmark

from devbench.engine import suite, worklock

REPO = Path(__file__).resolve().parents[1]


def test_the_committed_lock_holds():
    """A change to devbench.workloads or the engine fails here until its work_versions are decided and recorded."""
    problems = worklock.check(REPO)
    assert not problems, worklock.advice(problems)


def test_fingerprint_ignores_comments_layout_docstrings_imports_and_hints_but_not_code():
    base = 'import math\n\ndef f(n):\n    """Doc."""\n    return n * 2\n'
    same = [
        'def f(n):\n    """Another doc, longer."""\n    return n * 2  # a comment\n',
        "import math\n\ndef f(n):\n\n    return (n *\n            2)\n",
        "from os import path\nimport math\n\ndef f(n: int) -> int:\n    from x import y\n    return n * 2\n",
    ]
    assert {worklock.fingerprint(s) for s in same} == {worklock.fingerprint(base)}
    for changed in ("def f(n):\n    return n * 4\n", "def f(m):\n    return m * 2\n", "LANE_S = 0.2\n" + base,
                    "LANE_S: float = 0.2\n" + base):
        assert worklock.fingerprint(changed) != worklock.fingerprint(base)
    with pytest.raises(worklock.LockError, match="x.py: cannot parse line 1"):
        worklock.fingerprint("def f(:\n", "x.py")


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def tree(tmp_path):
    """A repository with the suite's layout: two workloads, the engine, two benchmark modules."""
    _write(tmp_path, "src/devbench/engine/measure.py", "BLOCK_S = 0.1\n")
    _write(tmp_path, "src/devbench/workloads/__init__.py", "")
    _write(
        tmp_path,
        "src/devbench/workloads/lanes.py",
        """
        from devbench.engine.measure import BLOCK_S

        LANE_S = 0.05
        UNUSED_S = 1.0

        class Pair:
            lane_s = LANE_S
            block_s = BLOCK_S
        """,
    )
    _write(tmp_path, "src/devbench/workloads/copies.py", "class Copy:\n    pass\n")
    _write(
        tmp_path,
        "benchmarks/bench_lanes.py",
        """
        from devbench.engine.suite import Benchmark
        from devbench.workloads.lanes import Pair

        def build():
            return Pair()

        class Lanes(Benchmark):
            def setup(self):
                self.pair = build()  # uses the workload through a helper

            def time_pair(self):
                pass

        class Plain:  # not a Benchmark: asv's own class, no work version
            def time_x(self):
                pass
        """,
    )
    _write(
        tmp_path,
        "benchmarks/bench_copies.py",
        """
        from devbench.engine.suite import Benchmark
        from devbench.workloads.copies import Copy

        class Copies(Benchmark):
            work_version = 3

            def setup(self):
                self.copy = Copy()
        """,
    )
    worklock.write(tmp_path)
    return tmp_path


def test_a_changed_workload_names_the_benchmarks_that_time_it_until_recorded(tree, capsys):
    lock = json.loads((tree / worklock.LOCK).read_text())
    assert lock["work_versions"] == {"bench_copies.Copies": 3, "bench_lanes.Lanes": 1}
    assert set(lock["definitions"]) == {"BLOCK_S", "LANE_S", "UNUSED_S", "Pair", "Copy", "bench_lanes.build"}
    assert worklock.check(tree) == [] and worklock.main(["--root", str(tree)]) == 0

    # a benchmark module's own helper is the work of the classes that call it (asv hashes the method alone)
    bench = tree / "benchmarks/bench_lanes.py"
    before = bench.read_text()
    bench.write_text(before.replace("return Pair()", "return Pair(), Pair()"))
    assert worklock.check(tree) == ["bench_lanes.build in benchmarks/bench_lanes.py changed; the work of "
                                    "bench_lanes.Lanes"]  # fmt: skip
    # every statement that defines a helper counts, not only its last
    bench.write_text(before + "\nbuild.note = 'x'\n")
    worklock.write(tree)
    bench.write_text(before.replace("return Pair()", "return Pair(), Pair()") + "\nbuild.note = 'x'\n")
    assert [p.split(" in ")[0] for p in worklock.check(tree)] == ["bench_lanes.build"]
    bench.write_text(before)
    worklock.write(tree)

    # a comment or docstring is not a change of the work
    lanes = tree / "src/devbench/workloads/lanes.py"
    lanes.write_text('"""Lanes."""\n' + lanes.read_text() + "# the lanes\n")
    assert worklock.check(tree) == []

    # the work is: the benchmark that times it is named, through its helper, and no other
    lanes.write_text(lanes.read_text().replace("LANE_S = 0.05", "LANE_S = 0.2"))
    assert worklock.check(tree) == ["LANE_S in src/devbench/workloads/lanes.py changed; the work of bench_lanes.Lanes"]
    assert worklock.main(["--root", str(tree)]) == 1
    err = capsys.readouterr().err
    assert "out of date" in err and "raise the class's work_version" in err and "make work-lock" in err

    # the engine is the work of every benchmark that uses a workload built on it
    (tree / "src/devbench/engine/measure.py").write_text("BLOCK_S = 0.2\n")
    assert "BLOCK_S in src/devbench/engine/measure.py changed; the work of bench_lanes.Lanes" in worklock.check(tree)

    # the decision: Lanes's work changed; recorded, the lock holds again
    bench = tree / "benchmarks/bench_lanes.py"
    bench.write_text(
        bench.read_text().replace("class Lanes(Benchmark):\n", "class Lanes(Benchmark):\n    work_version = 2\n")
    )
    assert "bench_lanes.Lanes: work_version 1 -> 2" in worklock.check(tree)
    assert worklock.main(["--root", str(tree), "--write"]) == 0
    assert "3 change(s) recorded" in capsys.readouterr().out
    assert worklock.check(tree) == []
    assert json.loads((tree / worklock.LOCK).read_text())["work_versions"]["bench_lanes.Lanes"] == 2

    # new and gone modules and classes are named too
    (tree / "src/devbench/workloads/copies.py").unlink()
    _write(tree, "benchmarks/bench_new.py",
           "from devbench.engine.suite import Benchmark\n\nclass New(Benchmark):\n    pass\n")
    assert worklock.check(tree) == [
        "Copy is gone",
        "bench_new.New is a new benchmark class (work_version 1)",
    ]


def test_a_definition_is_the_work_it_does_wherever_it_lives(tree):
    """Functions, not modules: a definition moved to another module is no change, and a change to one names only
    the classes that reach it."""
    lanes = tree / "src/devbench/workloads/lanes.py"
    lanes.write_text(lanes.read_text().replace("UNUSED_S = 1.0\n", ""))
    (tree / "src/devbench/workloads/spare.py").write_text("UNUSED_S = 1.0\n")
    assert worklock.check(tree) == []  # moved whole: the same work
    (tree / "src/devbench/workloads/spare.py").write_text("UNUSED_S = 2.0\n")
    assert worklock.check(tree) == ["UNUSED_S in src/devbench/workloads/spare.py changed; no benchmark class uses it"]
    copies = tree / "src/devbench/workloads/copies.py"
    copies.write_text("class Copy:\n    calls = 2\n")
    assert "Copy in src/devbench/workloads/copies.py changed; the work of bench_copies.Copies" in worklock.check(tree)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: (t / worklock.LOCK).write_text("{"), "work-lock.json is not valid JSON"),
        (lambda t: (t / worklock.LOCK).write_text("[]"), "lacks its 'definitions' and 'work_versions'"),
        (
            lambda t: _write(
                t,
                "benchmarks/bench_bad.py",
                "from devbench.engine.suite import Benchmark\n\nclass Bad(Benchmark):\n    work_version = '2'\n",
            ),
            "benchmarks/bench_bad.py: Bad: work_version must be a literal int >= 1",
        ),
        (lambda t: _write(t, "src/devbench/workloads/broken.py", "def f(:\n"), "broken.py: cannot parse line 1"),
    ],
)
def test_a_bad_lock_or_source_exits_2_naming_it(tree, capsys, edit, message):
    edit(tree)
    assert worklock.main(["--root", str(tree)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_no_benchmarks_folder_exits_2(tmp_path, capsys):
    assert worklock.main(["--root", str(tmp_path)]) == 2
    assert "has no benchmarks/ folder" in capsys.readouterr().err


@suite.instrumented
class Versioned(suite.Benchmark):
    work_version = 2

    def setup(self):
        self.x = 1

    def time_x(self):
        pass

    def track_y(self):
        return 1.0


@suite.instrumented
class Unversioned(suite.Benchmark):
    def setup(self):
        self.x = 1

    def time_x(self):
        pass


def _asv_version(cls, method, kind=TimeBenchmark):
    """The version asv_runner's discovery gives the benchmark (the bound method, its instance, its module)."""
    inst = cls()
    func = getattr(inst, method)
    return kind(f"bench.{cls.__name__}.{method}", func, [func, inst, sys.modules[__name__]]).version


def test_work_version_folds_into_the_version_asv_records():
    plain = _asv_version(Unversioned, "time_x")
    assert len(plain) == 64 and "-work" not in plain  # asv's own hash of the source: old histories stay current
    versioned = _asv_version(Versioned, "time_x")
    track = _asv_version(Versioned, "track_y", TrackBenchmark)
    assert versioned.endswith("-work2") and track.endswith("-work2") and track != versioned  # each method its own

    # an edit of the benchmark's own code still starts a new series, as asv's version does
    @suite.instrumented
    class Edited(suite.Benchmark):
        work_version = 2

        def setup(self):
            self.x = 2

        def time_x(self):
            pass

    assert _asv_version(Edited, "time_x").endswith("-work2") and _asv_version(Edited, "time_x") != versioned

    # a set-up inherited counts, as in asv's own version: the same method under another parent's set-up differs
    @suite.instrumented
    class UnderVersioned(Versioned):
        work_version = 2

        def time_z(self):
            pass

    @suite.instrumented
    class UnderEdited(Edited):
        work_version = 2

        def time_z(self):
            pass

    assert _asv_version(UnderVersioned, "time_z") != _asv_version(UnderEdited, "time_z")

    # a class with no source file (built in a REPL or by exec) still gets a version, from its bytecode
    ns = {}
    exec("from devbench.engine.suite import Benchmark, instrumented\n@instrumented\nclass X(Benchmark):\n"
         "    work_version = 3\n    def time_a(self):\n        return 1\n", ns)  # fmt: skip
    assert ns["X"].time_a.version.endswith("-work3")

    with pytest.raises(TypeError, match="Bad.work_version must be an int >= 1, got 0"):
        suite.instrumented(type("Bad", (suite.Benchmark,), {"work_version": 0}))


def test_the_suite_keeps_the_changed_work_apart():
    """ParallelMatmul's lanes went from 0.05 to 0.2 s, then shared 0.4 s among them, then took turns going first,
    and ManySmallCopies began to copy on the CPU: both raised their work_version, as DeviceCopy did when its figures
    moved to the measuring process and its CPU copies to a rotation over every last-level cache; the figures whose
    work never changed keep asv's own version."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.bench_matmul import MatmulSpeedup
        from benchmarks.bench_parallel import ParallelMatmul
        from benchmarks.bench_transfer import DeviceCopy, ManySmallCopies
    finally:
        sys.path.remove(str(REPO))
    assert ParallelMatmul.track_parallel_time.version.endswith("-work7")
    assert ManySmallCopies.track_time.version.endswith("-work3")
    assert DeviceCopy.track_gbps_read_write.version.endswith("-work3")
    assert not hasattr(MatmulSpeedup.track_gpu_over_cpu, "version")  # swept, its work the same


def test_a_class_reaches_its_work_however_it_names_it(tmp_path):
    """An alias, a dotted path, a mixin, ``suite.Benchmark`` and a benchmark that extends another: each reaches the
    workload, so a change to it names the class."""
    _write(tmp_path, "src/devbench/workloads/copies.py", "class Copy:\n    size = 1\n")
    _write(tmp_path, "src/devbench/workloads/mix.py", "SETS = 2\n")
    _write(tmp_path, "benchmarks/bench_ways.py", """
        import devbench.workloads.copies
        from devbench.engine import suite
        from devbench.engine.suite import Benchmark
        from devbench.workloads.copies import Copy as C
        from devbench.workloads.mix import SETS


        class Mixin:
            sets = SETS


        class Aliased(Benchmark):
            def setup(self):
                self.c = C()


        class Dotted(suite.Benchmark):
            def setup(self):
                self.c = devbench.workloads.copies.Copy()


        class Mixed(Mixin, Benchmark):
            pass


        class Child(Mixed):
            pass
        """)
    worklock.write(tmp_path)
    (tmp_path / "src/devbench/workloads/copies.py").write_text("class Copy:\n    size = 2\n")
    (tmp_path / "src/devbench/workloads/mix.py").write_text("SETS = 3\n")
    assert worklock.check(tmp_path) == [
        "Copy in src/devbench/workloads/copies.py changed; the work of bench_ways.Aliased, bench_ways.Dotted",
        "SETS in src/devbench/workloads/mix.py changed; the work of bench_ways.Child, bench_ways.Mixed",
    ]


@pytest.mark.parametrize(("before", "after"), [
    # two modules' definitions of one name swap bodies
    ({"a.py": "SIZES = [1]\n", "b.py": "SIZES = [2]\n"}, {"a.py": "SIZES = [2]\n", "b.py": "SIZES = [1]\n"}),
    # another definition imported under the same alias
    ({"a.py": "from devbench.workloads.b import FAST_S as T\n\ndef run():\n    return T\n",
      "b.py": "FAST_S = 1\nSLOW_S = 2\n"},
     {"a.py": "from devbench.workloads.b import SLOW_S as T\n\ndef run():\n    return T\n",
      "b.py": "FAST_S = 1\nSLOW_S = 2\n"}),
    # a dataclass gains a field without a default
    ({"a.py": "from dataclasses import dataclass\n\n@dataclass\nclass P:\n    n: int\n", "b.py": ""},
     {"a.py": "from dataclasses import dataclass\n\n@dataclass\nclass P:\n    n: int\n    m: int\n", "b.py": ""}),
])  # fmt: skip
def test_a_change_of_the_work_that_moves_no_line_of_a_definition_is_still_a_change(tmp_path, before, after):
    for name, text in before.items():
        _write(tmp_path, f"src/devbench/workloads/{name}", text)
    _write(tmp_path, "benchmarks/bench_x.py", "from devbench.engine.suite import Benchmark\n\nclass X(Benchmark):\n"
                                              "    pass\n")  # fmt: skip
    worklock.write(tmp_path)
    for name, text in after.items():
        (tmp_path / f"src/devbench/workloads/{name}").write_text(text)
    assert worklock.check(tmp_path), "a change of the work went unseen"


def test_a_class_that_extends_a_benchmark_versions_its_inherited_figures_itself():
    """Raising ``work_version`` on a class that extends another benchmark class starts a new series for every
    figure it has, inherited ones included; the parent's stay as they were."""

    class Parent(suite.Benchmark):
        work_version = 2

        def track_a(self):
            return 1.0

    class Child(Parent):
        work_version = 3

    assert _asv_version(Parent, "track_a", TrackBenchmark).endswith("-work2")
    assert _asv_version(Child, "track_a", TrackBenchmark).endswith("-work3")
    assert Child().track_a() == 1.0


def test_a_swept_subclass_routes_its_inherited_figures_through_the_measuring_process():
    class Plain(suite.Benchmark):
        def setup(self):
            pass

        def track_a(self):
            return 1.0

    class Swept(Plain):
        swept = True

    assert getattr(Swept.track_a, "devbench_swept", False) and getattr(Swept.setup, "devbench_swept", False)
    assert not getattr(Plain.track_a, "devbench_swept", False)  # the parent is as it was

    class Again(Swept):  # a swept parent's figures are routed once, not twice
        pass

    assert Again.track_a is Swept.track_a and Again.setup is Swept.setup


def test_a_benchmark_classs_own_helpers_and_timing_attributes_are_its_work(tmp_path):
    """asv versions a figure by the source of the method, ``setup`` and ``setup_cache``: a helper method the figure
    calls, or the block length a class sets, changes the work with no new version unless the lock says so; a
    subclass inherits both. How a class is planned or listed (``plan_``, ``headline``) is not its work."""
    _write(tmp_path, "src/devbench/workloads/__init__.py", "")
    _write(tmp_path, "src/devbench/engine/measure.py", "BLOCK_S = 0.1\n")
    source = """
        from devbench.engine.suite import Benchmark

        class Base(Benchmark):
            sample_time = 0.05
            plan_s = 1.0
            headline = [{"n": [1]}]

            def _twice(self):
                return 2

            def track_x(self):
                return self._twice()

            track_x.unit = "x"

        class Child(Base):
            pass
        """
    _write(tmp_path, "benchmarks/bench_b.py", source)
    worklock.write(tmp_path)
    lock = json.loads((tmp_path / worklock.LOCK).read_text())
    assert {"bench_b.Base._twice", "bench_b.Base.sample_time"} <= set(lock["definitions"])
    assert not {k for k in lock["definitions"] if "plan_s" in k or "headline" in k or "track_x" in k}
    bench = tmp_path / "benchmarks/bench_b.py"
    bench.write_text(bench.read_text().replace("return 2", "return 3").replace("plan_s = 1.0", "plan_s = 2.0"))
    assert worklock.check(tmp_path) == ["bench_b.Base._twice in benchmarks/bench_b.py changed; the work of "
                                        "bench_b.Base, bench_b.Child"]  # fmt: skip


def test_a_definition_under_an_if_or_a_try_is_work_too(tmp_path):
    """A helper defined under a module-level ``if``/``try`` (or a class's ``if``) is as much the work as one defined
    plainly: an edit to it, or to the condition that picks it, names the class that uses it."""
    _write(tmp_path, "src/devbench/workloads/__init__.py", "")
    _write(tmp_path, "src/devbench/engine/measure.py", "BLOCK_S = 0.1\n")
    source = """
        import os
        from devbench.engine.suite import Benchmark

        if os.environ.get("X"):
            def _pick():
                return 1
        else:
            def _pick():
                return 2

        try:
            LIMIT = int(os.environ["L"])
        except KeyError:
            LIMIT = 4

        class Uses(Benchmark):
            if LIMIT > 2:
                sample_time = 0.05
            else:
                sample_time = 0.2

            def track_x(self):
                return _pick() + LIMIT

        class Other(Benchmark):
            def track_y(self):
                return 0
        """
    _write(tmp_path, "benchmarks/bench_c.py", source)
    worklock.write(tmp_path)
    lock = json.loads((tmp_path / worklock.LOCK).read_text())
    assert {"bench_c._pick", "bench_c.LIMIT", "bench_c.Uses.sample_time"} <= set(lock["definitions"])
    for old, new, changed in (("return 2", "return 5", "bench_c._pick"), ("LIMIT = 4", "LIMIT = 8", "bench_c.LIMIT"),
                              ("sample_time = 0.2", "sample_time = 0.1", "bench_c.Uses.sample_time")):  # fmt: skip
        _write(tmp_path, "benchmarks/bench_c.py", source.replace(old, new))
        assert worklock.check(tmp_path) == [f"{changed} in benchmarks/bench_c.py changed; the work of bench_c.Uses"]
