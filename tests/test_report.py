"""The report on real asv output (a fixture project run by asv itself), its errors, and its math."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from asv.util import human_value
from asv_runner.statistics import get_err

from devbench.records import files, spec
from devbench.report import asvrule as C
from devbench.report import derive as D
from devbench.report import health as H
from devbench.report.cli import main
from devbench.report.fields import parse_param
from devbench.report.load import ReportError, load_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from asv_fixture import History, asv, make_history  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hist(tmp_path_factory) -> History:
    return make_history(tmp_path_factory.mktemp("asvfix"))


@pytest.fixture
def results_copy(hist, tmp_path) -> Path:
    dst = tmp_path / "results"
    shutil.copytree(hist.results, dst)
    return dst


def _row(frame, **where):
    sub = frame
    for k, v in where.items():
        sub = sub[sub[k] == v]
    assert len(sub) == 1, f"{where}: {len(sub)} rows"
    return sub.iloc[0]


# --- Loading ---------------------------------------------------------------------------------------------


def test_one_row_per_machine_env_commit_benchmark_and_params(hist):
    loaded = load_results(hist.results)
    f = loaded.frame
    assert len(f) == 4 * 10  # 4 result files; Suite: 2 benchmarks x 4 combos, plus 2 plain ones
    assert set(f["machine"]) == {"alpha", "beta"}
    assert set(f["commit"]) == set(hist.commits)
    assert set(f["env"]) == {hist.env_name(hist.py1), hist.env_name(hist.py2)}
    assert not f.duplicated(["machine", "env", "commit", "benchmark", "params"]).any()
    assert loaded.problems == []


def test_params_are_typed_columns(hist):
    f = load_results(hist.results).frame
    assert str(f["n"].dtype) == "Int64"
    assert set(f["n"].dropna()) == {4, 8}
    assert set(f["device"].dropna()) == {"cpu", "cuda"}
    assert _row(f, machine="beta", benchmark="bench_fix.Suite.track_rate", device="cpu", n=8)["params"] == (
        "device=cpu, n=8"
    )


def test_skipped_and_failed_stay_distinguishable(hist):
    f = load_results(hist.results).frame
    assert set(f.loc[f["device"] == "cuda", "status"]) == {"skipped"}
    assert set(f.loc[f["benchmark"] == "bench_fix.time_fails", "status"]) == {"failed"}
    assert f.loc[f["status"] != "ok", "value"].isna().all()
    assert f.loc[f["status"] == "ok", "value"].notna().all()


def test_units_types_stats_and_machine_fields(hist):
    f = load_results(hist.results).frame
    rate = _row(f, machine="beta", benchmark="bench_fix.Suite.track_rate", device="cpu", n=8)
    assert (rate["type"], rate["unit"], rate["value"]) == ("track", "GB/s", 16.0)
    assert rate["machine_gpu"] == "NVIDIA H100 80GB HBM3" and rate["machine_gpu_count"] == "1"
    sleep = _row(
        f, machine="alpha", env=hist.env_name(hist.py1), commit=hist.commits[1], name="time_sleep", device="cpu", n=4
    )
    assert sleep["type"] == "time" and sleep["unit"] == "seconds"
    assert sleep["ci_99_a"] <= sleep["value"] <= sleep["ci_99_b"]
    assert sleep["repeat"] == 15 and sleep["number"] == 1
    assert 0.038 < sleep["value"] < 0.1  # 10 ms x 4 of sleep
    assert sleep["date"] == pd.Timestamp("2026-01-02", tz="UTC")


def test_values_equal_asv_show(hist):
    f = load_results(hist.results).frame
    out = asv(
        hist.project, hist.project.parent / "home", "show", hist.commits[1][:8],
        "--machine", "alpha", "-E", f"existing:{hist.py1}",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for n in (4, 8):
        row = _row(
            f,
            machine="alpha",
            env=hist.env_name(hist.py1),
            commit=hist.commits[1],
            name="time_sleep",
            device="cpu",
            n=n,
        )
        stats = {k: row[k] for k in ("ci_99_a", "ci_99_b", "q_25", "q_75", "number", "repeat")}
        text = human_value(row["value"], "seconds", err=get_err(row["value"], stats))
        assert text in out.stdout, f"{text} not in asv show output"


def test_every_value_and_statistic_equals_asv_results_api(hist):
    """The loader reads the files' columns itself (for speed); asv's ``Results`` must agree on every cell."""
    from asv.results import Results

    f = load_results(hist.results).frame
    checked = 0
    for path in sorted(hist.results.glob("*/*.json")):
        if path.name == "machine.json":
            continue
        res = Results.load(str(path), machine_name=path.parent.name)
        for key in res.get_all_result_keys():
            params = res.get_result_params(key)
            values = res.get_result_value(key, params)
            stats = res.get_result_stats(key, params)
            rows = f[(f["file"] == str(path.relative_to(hist.results))) & (f["benchmark"] == key)]
            assert len(rows) == len(values)
            for (_, row), value, stat in zip(rows.iterrows(), values, stats or [None] * len(values), strict=True):
                if value is None:
                    assert row["status"] == "failed" and math.isnan(row["value"])
                elif math.isnan(value):
                    assert row["status"] == "skipped" and math.isnan(row["value"])
                else:
                    assert row["status"] == "ok" and row["value"] == value
                for name in ("ci_99_a", "ci_99_b", "q_25", "q_75", "number", "repeat"):
                    want = (stat or {}).get(name)
                    assert math.isnan(row[name]) if want is None else row[name] == want, (key, name)
                checked += 1
            assert row["version"] == res.benchmark_version[key]
    assert checked == 40


def test_result_file_of_another_machine_is_named_and_skipped(results_copy):
    victim = next((results_copy / "alpha").glob("*-*.json"))
    shutil.copy(victim, results_copy / "beta" / "00000000-moved.json")
    loaded = load_results(results_copy)
    assert len(loaded.frame) == 40
    [problem] = loaded.problems
    assert problem.path.endswith("00000000-moved.json") and "machine name is not 'beta'" in problem.message


def test_comparison_matches_asv_compare(hist):
    out = asv(
        hist.project, hist.project.parent / "home", "compare", hist.commits[0][:8], hist.commits[1][:8],
        "--machine", "alpha", "-E", f"existing:{hist.py1}", "--factor", "1.1",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    theirs = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[4].startswith("bench_fix."):
            theirs[cells[4]] = (cells[0], cells[3])
    assert len(theirs) == 10
    f = load_results(hist.results, machines=["alpha"], envs=[hist.env_name(hist.py1)]).frame
    ours = C.compare_commits(f, hist.commits[0], hist.commits[1], factor=1.1)
    for row in ours.itertuples():
        values = re.findall(r"=(\S+?)(?:,|$)", row.params)
        args = ", ".join(repr(parse_param(v)) if not v.isdigit() else v for v in values)
        name = f"{row.benchmark}({args})" if values else row.benchmark
        mark, ratio = theirs[name]
        assert row.mark.strip() == mark, name
        if ratio == "n/a":
            assert math.isnan(row.ratio), name
        else:
            assert f"{row.ratio:.2f}" == ratio.lstrip("~"), name
    assert set(ours.loc[ours["mark"] == "+", "params"]) == {"device=cpu, n=4", "device=cpu, n=8"}


def test_machine_and_env_comparisons_on_the_same_commit(hist):
    f = load_results(hist.results).frame
    m = C.compare_groups(f, "machine")
    m = m[m["env"] == hist.env_name(hist.py1)]  # beta ran py1 only: alpha's py2 rows have no partner
    rate = m[(m["benchmark"] == "bench_fix.Suite.track_rate") & (m["params"] == "device=cpu, n=8")].iloc[0]
    assert (rate["machine_a"], rate["machine_b"], rate["ratio"]) == ("alpha", "beta", 2.0)
    assert rate["change"] == "better"  # GB/s: larger is better
    e = C.compare_groups(f, "env")
    sleep = e[(e["benchmark"] == "bench_fix.Suite.time_sleep") & (e["params"] == "device=cpu, n=8")].iloc[0]
    # py1 slept 10 ms per unit on c2, py2 5 ms; which env is the baseline depends on how their paths sort
    if sleep["env_a"] == hist.env_name(hist.py2):
        assert sleep["ratio"] == pytest.approx(2.0, rel=0.1) and (sleep["mark"], sleep["change"]) == ("+", "worse")
    else:
        assert sleep["ratio"] == pytest.approx(0.5, rel=0.1) and (sleep["mark"], sleep["change"]) == ("-", "better")


def test_history_flags_the_slowdown(hist):
    f = load_results(hist.results).frame
    h = C.history(f)
    flagged = h[h["mark"] != " "]
    assert set(flagged["params"]) == {"device=cpu, n=4", "device=cpu, n=8"}
    assert set(flagged["machine"]) == {"alpha"}


def test_filters(hist):
    assert set(load_results(hist.results, machines=["beta"]).frame["machine"]) == {"beta"}
    assert set(load_results(hist.results, commits=[hist.commits[0][:6]]).frame["commit"]) == {hist.commits[0]}
    assert set(load_results(hist.results, benchmarks=r"track_").frame["name"]) == {"track_rate", "track_plain"}
    with pytest.raises(ReportError, match="no machine named gamma.*known: alpha, beta"):
        load_results(hist.results, machines=["gamma"])
    with pytest.raises(ReportError, match="no environment named nope"):
        load_results(hist.results, envs=["nope"])


# --- Bad input -------------------------------------------------------------------------------------------


def test_corrupt_file_is_named_and_the_rest_loads(results_copy, tmp_path, capsys):
    victim = next((results_copy / "alpha").glob(f"{C.commits_in(load_results(results_copy).frame)[0][:8]}-*.json"))
    victim.write_text(victim.read_text()[:200])
    loaded = load_results(results_copy)
    assert len(loaded.frame) == 30
    assert [p.path for p in loaded.problems] == [str(victim)]
    assert main(["--results", str(results_copy), "--out", str(tmp_path / "out"), "--format", "md"]) == 0
    assert victim.name in capsys.readouterr().err
    assert victim.name.split("-")[0] in (tmp_path / "out" / "report.md").read_text()  # env name: a label


def test_damaged_fields_name_the_file_and_the_rest_loads(results_copy):
    files = sorted((results_copy / "alpha").glob("*-*.json"))
    data = json.loads(files[0].read_text())
    i = data["result_columns"].index("params")
    key = next(k for k, e in sorted(data["results"].items()) if len(e) > i and e[i])  # a parameterized one
    data["results"][key][i] = {"device": "cpu"}  # valid JSON, not asv's shape
    files[0].write_text(json.dumps(data))
    data = json.loads(files[1].read_text())
    j = data["result_columns"].index("stats_q_25")
    for entry in data["results"].values():
        if len(entry) > j and isinstance(entry[j], list):
            entry[j] = ["?"] * len(entry[j])
    files[1].write_text(json.dumps(data))
    loaded = load_results(results_copy)
    [problem] = loaded.problems
    assert problem.path == f"{files[0]}: {key}" and "parameters are not lists" in problem.message
    assert len(loaded.frame) == 36  # a bad benchmark costs its 4 rows, not the file's 10
    rows = loaded.frame[loaded.frame["file"] == str(files[1].relative_to(results_copy))]
    assert len(rows) == 10 and rows["q_25"].isna().all() and rows["ci_99_a"].notna().any()


def test_changed_benchmark_version_is_flagged_and_not_compared(results_copy):
    path = results_copy / "benchmarks.json"
    data = json.loads(path.read_text())
    data["bench_fix.Suite.time_sleep"]["version"] = "0" * 64
    path.write_text(json.dumps(data))
    loaded = load_results(results_copy)
    stale = loaded.frame[~loaded.frame["version_current"]]
    assert set(stale["benchmark"]) == {"bench_fix.Suite.time_sleep"}
    assert any("older version" in p.message and p.path == "bench_fix.Suite.time_sleep" for p in loaded.problems)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing", "does not exist"),
        (lambda d: d, "is empty"),
        (lambda d: (d / "notes.txt").write_text("hi") and d, "not an asv results directory"),
    ],
)
def test_bad_results_directories_exit_2_with_the_reason(tmp_path, capsys, make, message):
    target = make(tmp_path)
    assert main(["--results", str(target), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "devbench report: error:" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--machine", "gamma"], "no machine named gamma"),
        (["--env", "nope"], "no environment named nope"),
        (["--benchmarks", "("], "not a regular expression"),
        (["--format", "pdf"], "choose among"),
        (["--since", "2030-01-01"], "nothing to report"),
        (["--since", "yesterday-ish"], "is not a date"),
        (["--since", "NaT"], "is not a date"),
        (["--base", "ffffffff"], "no results for commit"),
        (["--factor", "0.5"], "--factor must be >= 1.0"),
    ],
)
def test_bad_options_exit_2_naming_the_option(hist, tmp_path, capsys, args, message):
    assert main(["--results", str(hist.results), "--out", str(tmp_path / "out"), *args]) == 2
    assert message in capsys.readouterr().err


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "--machine" in out and "exit status" in out


# --- Output ----------------------------------------------------------------------------------------------


def test_full_report_on_another_projects_results(hist, tmp_path):
    out = tmp_path / "out"
    assert main(["--results", str(hist.results), "--out", str(out), "--quiet"]) == 0
    # two commits: no series has the three points step detection needs, so no history plot
    assert {p.name for p in out.iterdir()} == {"report.md", "report.html", "results.csv", ".devbench-output"}
    md = (out / "report.md").read_text()
    for title in ("## Machines", "## Between two commits", "## Machines compared", "## Environments compared"):
        assert title in md
    # c2 sleeps twice as long, but one run per commit is never called a regression
    between = md.split("## Between two commits")[1].split("\n## ")[0]
    assert "undecided" in between and "<details><summary>" in between and "| slower |" not in between
    assert "time_sleep" in between
    assert "Matmul" not in md  # no suite-specific section for someone else's benchmarks
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 40 and {"value", "status", "ci_99_a", "machine_gpu", "n"} <= set(csv.columns)
    html = (out / "report.html").read_text()
    assert html.startswith("<!doctype html>")
    assert "<details><summary>" in html and "<code>" in html and "`" not in html.split("<body>")[1].split("<img")[0]
    assert not list(out.glob(".*.tmp"))


def test_write_atomic_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "report.md"
    files.write_atomic(target, "old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        files.write_atomic(target, "new" * 1000)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_a_table_the_writing_child_cannot_write_fails_the_report_and_keeps_the_old_one(hist, tmp_path, monkeypatch,
                                                                                          capsys):
    """The CSV is written in a forked child beside the tables: its error ends the report with exit 2 and one line
    naming it, the previous report is left whole and nothing staged is left beside it."""
    from devbench.report import writers
    from devbench.report.cli import main
    from devbench.report.parallel import can_fork

    out = tmp_path / "rep"
    assert main(["--results", str(hist.results), "--out", str(out), "--quiet"]) == 0
    before = (out / "report.md").read_text()

    def full(frame, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writers, "write_csv", full)
    assert main(["--results", str(hist.results), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    assert "could not write the csv" in err or not can_fork()  # one core: written here, the error as staged_dir's
    assert (out / "report.md").read_text() == before and (out / "results.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_report_never_imports_torch(hist, tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from devbench.cli import main\n"
        f"sys.exit(main(['report', '--results', {str(hist.results)!r}, '--out', {str(tmp_path)!r}, '--quiet']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# --- Derived figures on frames shaped like this suite's ----------------------------------------------------


def _frame(rows):
    base = {
        "machine": "m",
        "env": "e",
        "commit": "c" * 40,
        "commit_short": "cccccccc",
        "date": pd.Timestamp("2026-01-01", tz="UTC"),
        "status": "ok",
        "version_current": True,
        "machine_gpu": "NVIDIA H100 80GB HBM3",
        "machine_gpu_count": "2",
    }
    return pd.DataFrame([{**base, **r} for r in rows])


def test_matmul_throughput_speedup_crossover_and_peak():
    rows = []
    for n, cpu_t, gpu_t in [(16, 1e-6, 1e-5), (256, 1e-3, 2e-4), (4096, 1.0, 2e-3)]:
        rows.append({"benchmark": "bench_matmul.MatmulSquare.track_time", "device": "cpu", "dtype": "float32", "n": n,
                     "value": cpu_t})  # fmt: skip
        rows.append({"benchmark": "bench_matmul.MatmulSquare.track_time", "device": "cuda", "dtype": "float32",
                     "n": n, "value": gpu_t})  # fmt: skip
    f = _frame(rows)
    tp = D.matmul_throughput(f)
    got = _row(tp, device="cuda", n=4096)
    assert got["tflops"] == pytest.approx(2 * 4096**3 / 2e-3 / 1e12)
    sp = D.gpu_speedup(f)
    assert _row(sp, n=16)["speedup"] == pytest.approx(0.1)
    assert _row(sp, n=4096)["speedup"] == pytest.approx(500.0)
    assert D.crossover(sp)["crossover_n"].tolist() == [256]
    peak = D.fraction_of_peak(f)
    cuda = _row(peak, device="cuda", n=4096)
    assert cuda["peak"] == 67.0 and cuda["fraction"] == pytest.approx(cuda["tflops"] / 67.0)
    cpu = peak[peak["device"] == "cpu"]
    assert cpu["fraction"].isna().all()  # no search on this CPU: no peak (its own best would always say 100%)


def test_achievable_search_is_the_peak_and_sits_beside_the_datasheet():
    """The best searched shape is the fraction-of-peak denominator; burst and sustained join it with MHz and W."""
    rows = [
        {"benchmark": "bench_matmul.MatmulSquare.track_tflops", "device": d, "dtype": "bfloat16", "n": 4096, "value": v}
        for d, v in (("cpu", 0.3), ("cuda", 600.0))
    ]
    rows += [
        {"benchmark": "bench_achievable.MatmulAchievable.track_tflops", "device": "cuda", "dtype": "bfloat16",
         "run": run, "value": v, "gpu_mhz": mhz, "gpu_watts": w}
        for run, v, mhz, w in (("burst", 790.0, 1980.0, 600.0), ("sustained", 700.0, 1755.0, 700.0))
    ]  # fmt: skip
    rows += [
        {"benchmark": "bench_achievable.MatmulAchievable.track_tflops", "device": "cpu", "dtype": "bfloat16",
         "run": run, "value": v}
        for run, v in (("burst", 0.35), ("sustained", 0.33))
    ]  # fmt: skip
    f = _frame(rows)
    searches = pd.DataFrame([
        {"machine": "m", "device": "cpu", "dtype": "bfloat16", "shape": "2048x1024x2048", "search_tflops": 0.4},
        {"machine": "m", "device": "cuda", "dtype": "bfloat16", "shape": "2048x13312x2048", "search_tflops": 780.0},
    ])  # fmt: skip
    ach = D.achievable(f, searches)
    gpu = _row(ach, device="cuda")
    assert (gpu["burst"], gpu["sustained"], gpu["burst_mhz"], gpu["sustained_w"]) == (790.0, 700.0, 1980.0, 700.0)
    assert gpu["datasheet"] == 989.4 and gpu["of_datasheet"] == pytest.approx(790.0 / 989.4)
    assert math.isnan(_row(ach, device="cpu")["datasheet"])
    peak = D.fraction_of_peak(f, searches=searches)
    cpu, cuda = _row(peak, device="cpu"), _row(peak, device="cuda")
    assert cpu["peak"] == 0.4 and cpu["fraction"] == pytest.approx(0.75) and "2048x1024x2048" in cpu["peak_source"]
    assert cuda["peak"] == 790.0 and cuda["peak_source"] == "achievable (2048x13312x2048)"
    # asv's figures without the search's side record (its shape): the source says achievable, never "nan"
    (unshaped,) = set(D.fraction_of_peak(f, searches=searches.iloc[:0])[lambda t: t["device"] == "cuda"]["peak_source"])
    assert unshaped == "achievable"


def test_a_search_of_another_commit_divides_nothing():
    """Square products of one run over the achievable figure of another mix code and hours (the sample's VM
    bf16 squares ran at a tenth of a search a day later: "9.9% of peak"): a CPU gets no fraction and its row
    says where the latest search was; a GPU falls back to its datasheet."""
    from devbench.report import sections

    old = {"commit": "a" * 40, "commit_short": "aaaaaaaa"}
    new = {"commit": "b" * 40, "commit_short": "bbbbbbbb", "date": pd.Timestamp("2026-01-02", tz="UTC")}
    rows = [
        {
            "benchmark": "bench_matmul.MatmulSquare.track_tflops",
            "device": d,
            "dtype": "bfloat16",
            "n": n,
            "value": v,
            **old,
        }
        for d, n, v in (("cpu", 1024, 0.04), ("cpu", 4096, 0.03), ("cuda", 4096, 600.0))
    ]
    rows += [
        {
            "benchmark": "bench_achievable.MatmulAchievable.track_tflops",
            "device": d,
            "dtype": "bfloat16",
            "run": run,
            "value": v,
            **new,
        }
        for d, run, v in (("cpu", "burst", 0.39), ("cpu", "sustained", 0.38), ("cuda", "burst", 790.0))
    ]
    f = _frame(rows)
    searches = pd.DataFrame([
        {"machine": "m", "device": "cpu", "dtype": "bfloat16", "shape": "512x1024x512", "search_tflops": 0.41},
        {"machine": "m", "device": "cuda", "dtype": "bfloat16", "shape": "2048x13312x2048", "search_tflops": 780.0},
    ])  # fmt: skip
    peak = D.fraction_of_peak(f, searches=searches)
    cpu = peak[peak["device"] == "cpu"]
    assert cpu["fraction"].isna().all() and cpu["peak"].isna().all()
    assert set(cpu["peak_source"]) == {"no search at this commit (latest at bbbbbbbb)"}
    cuda = _row(peak, device="cuda")
    assert cuda["peak"] == 989.4 and cuda["peak_source"].startswith("datasheet")
    table = sections._peak(peak).table
    row = table[table["device"] == "cpu"].iloc[0]
    assert (row["n"], row["fraction"]) == (1024, "n/a")  # the best square of the run, with no fraction
    assert list(table["device"]) == ["cuda", "cpu"]  # fractions first
    shown = sections._achievable(D.achievable(f, searches)).table
    assert not {"env", "commit", "commit_short"} & set(shown.columns)  # the run pairs figures; it is not shown
    # a search whose burst and sustained have no results (they failed) belongs to no run: nothing divided
    lone = pd.concat([searches, pd.DataFrame([{"machine": "m", "device": "cpu", "dtype": "float32",
                                               "shape": "512x512x512", "search_tflops": 0.2}])])  # fmt: skip
    f32 = _frame([{**rows[0], "dtype": "float32"}])
    (source,) = set(D.fraction_of_peak(f32, searches=lone)["peak_source"])
    assert source == "no search at this commit (the latest has no burst or sustained result)"
    # the same commit: divided
    same = _frame([{**r, "commit": "b" * 40, "commit_short": "bbbbbbbb"} for r in rows])
    cpu = _row(D.fraction_of_peak(same, searches=searches), device="cpu", n=1024)
    assert cpu["peak"] == 0.41 and cpu["fraction"] == pytest.approx(0.04 / 0.41)
    # a search below a square product of the same run (made on a busy host, or cut short) is no ceiling:
    # the square is, and no fraction passes 100%
    low = searches.assign(search_tflops=[0.023, 780.0])
    busy = _frame([{**r, "commit": "b" * 40, "commit_short": "bbbbbbbb"}
                   | ({"value": 0.001} if r["benchmark"].endswith("MatmulAchievable.track_tflops") else {})
                   for r in rows])  # fmt: skip
    peak = D.fraction_of_peak(busy, searches=low)
    cpu = _row(peak, device="cpu", n=1024)
    assert cpu["peak"] == pytest.approx(0.04) and cpu["fraction"] == pytest.approx(1.0)
    assert cpu["peak_source"] == "n=1024, above the search's best (512x1024x512, 0.023)"
    assert (peak["fraction"].dropna() <= 1.0).all()


def test_unknown_gpu_gets_no_fraction():
    f = _frame([{"benchmark": "bench_matmul.MatmulSquare.track_tflops", "device": "cuda", "dtype": "float32",
                 "n": 1024, "value": 10.0, "machine_gpu": "Mystery GPU 9000"}])  # fmt: skip
    assert math.isnan(D.fraction_of_peak(f)["fraction"].iloc[0])


def test_crossover_needs_every_larger_size_to_win():
    sp = _frame([{"dtype": "float32", "n": n, "speedup": s} for n, s in [(16, 2.0), (64, 0.5), (256, 1.5)]])
    assert D.crossover(sp)["crossover_n"].tolist() == [256]
    never = _frame([{"dtype": "float32", "n": 16, "speedup": 0.5}])
    assert math.isnan(D.crossover(never)["crossover_n"].iloc[0])


PAR_SEQ = "bench_parallel.ParallelMatmul.track_sequential_time"
PAR_PAR = "bench_parallel.ParallelMatmul.track_parallel_time"


def test_a_figure_whose_params_the_results_do_not_name_is_left_out_of_its_table():
    """A result file newer than its benchmarks.json (copied in from another checkout) has figures asv lists under
    no name: their params read ``param0``, ``param1``. A table that needs ``device`` cannot place them; the
    others still fill it."""
    f = _frame(
        [
            {"benchmark": "bench_transfer.DeviceCopy.track_time", "device": "cpu", "nbytes": 1 << 30, "value": 0.1},
            {"benchmark": "bench_transfer.DeviceCopy.track_time", "param0": "cpu", "param1": 4096, "value": 1e-6,
             "machine": "other"},
        ]
    )  # fmt: skip
    bw = D.transfer_bandwidth(f)
    assert list(bw["copy"]) == ["on-device cpu"] and bw["machine"].tolist() == [f["machine"].iloc[0]]


def test_bandwidth_from_time_and_logging_and_parallel_ratios():
    f = _frame(
        [
            {"benchmark": "bench_transfer.DeviceCopy.track_time", "device": "cpu", "nbytes": 1 << 30, "value": 0.1},
            {"benchmark": "bench_transfer.HostDevice.track_gbps", "direction": "h2d", "memory": "pageable",
             "mode": "non_blocking", "nbytes": 4096, "value": 1.0, "unit": "GB/s"},
            {"benchmark": "bench_logging.LogNorms.track_time", "device": "cpu", "strategy": "on_device",
             "steps": 100, "n": 100, "value": 0.01},
            {"benchmark": "bench_logging.LogNorms.track_time", "device": "cpu", "strategy": "per_step_item",
             "steps": 100, "n": 100, "value": 0.05},
            {"benchmark": PAR_SEQ, "mode": "gpus", "n": 1024, "value": 2.0},
            {"benchmark": PAR_PAR, "mode": "gpus", "n": 1024, "value": 1.25},
            {"benchmark": PAR_SEQ, "mode": "streams", "n": 4096, "value": 1.03},
            {"benchmark": PAR_PAR, "mode": "streams", "n": 4096, "value": 1.0},
        ]
    )  # fmt: skip
    bw = D.transfer_bandwidth(f)
    assert _row(bw, copy="on-device cpu")["gbps"] == pytest.approx((1 << 30) / 0.1 / 1e9)
    assert _row(bw, copy="h2d pageable non_blocking (staged: the host waits)")["gbps"] == 1.0  # what it really is
    lr = D.logging_ratio(f)
    assert _row(lr, strategy="per_step_item")["ratio"] == pytest.approx(5.0)
    scaling = D.parallel_scaling(f).set_index("mode")
    ps = scaling.loc["gpus"]
    assert (ps["lanes"], ps["ideal"], ps["speedup"], ps["efficiency"]) == (2, 2, 1.6, 0.8)
    # two streams on one GPU: a product that fills it gains nothing from the second, so 1.03x is 103%, not 51%
    streams = scaling.loc["streams"]
    assert (streams["lanes"], streams["ideal"]) == (2, 1)
    assert streams["efficiency"] == pytest.approx(1.03)


def test_change_words_follow_the_unit():
    assert C._change("+", "seconds") == "worse" and C._change("-", "seconds") == "better"
    assert C._change("+", "GB/s") == "better" and C._change("-", "TFLOP/s") == "worse"
    assert C._change("+", "x") == "larger" and C._change("!", "seconds") == "failed"


def test_default_pair_skips_a_newer_commit_from_another_machine():
    day = pd.Timestamp("2026-11-01", tz="UTC")
    f = pd.DataFrame(
        {
            "commit": ["a", "b", "c", "c"],
            "machine": ["vm", "vm", "h200", "h200"],
            "env": ["e", "e", "e", "e"],
            "date": [day, day + pd.Timedelta(days=1), day + pd.Timedelta(days=2), day + pd.Timedelta(days=2)],
        }
    )
    assert C.default_pair(f) == ("a", "b")  # c ran on another machine only: nothing to compare it with
    f.loc[len(f)] = ["a", "h200", "e", day]
    assert C.default_pair(f) == ("a", "c")
    assert C.default_pair(f[f["commit"] == "a"]) is None


def test_ab_verdicts_show_each_interval_or_say_it_has_none():
    """compare.csv as the report reads it (empty cells are NaN): a figure with too few pairs for an
    interval says so."""
    import io

    from devbench.report import changes, sections

    text = (
        "benchmark,params,unit,verdict,ratio,ratio_lo,ratio_hi,base,head,floor,note,stopped_after\n"
        "b.track_x,n=1,GB/s,undecided,1.3,0.0,inf,1.0,1.3,0.1,,3\n"
        "b.track_y,n=2,GB/s,undecided,1.2,0.0,inf,1.0,1.2,0.1,,\n"
        "b.track_z,n=3,GB/s,undecided,1.1,0.9,1.4,1.0,1.1,0.1,,\n"
    )
    table = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=["", "nan"], dtype={"params": str})
    sec = changes.verdicts(table, "cmp")
    assert list(sec.folded["interval"]) == ["unbounded", "unbounded", "[-10.0%, +40.0%]"]
    assert "pairs of processes taking turns" in sec.text
    # base and head carry their unit (a bare "1.3" could be GB/s, us or a ratio); seconds are scaled
    assert list(sec.folded["base"]) == ["1 GB/s"] * 3
    assert list(sec.folded["head"]) == ["1.3 GB/s", "1.2 GB/s", "1.1 GB/s"]
    assert sections._human(2.5e-6, "seconds") == human_value(2.5e-6, "seconds")
    assert sections._human(12.5, "us") == "12.5 us" and sections._human(12.5, "us", with_unit=False) == "12.5"
    assert sections._human(float("nan"), "us") == "n/a"


def test_ab_verdicts_say_when_a_figure_was_measured_on_one_side_only():
    """A compare.csv row with a note (no result on one side) shows that instead of a change; older
    compare folders, without the column, still load."""
    from devbench.report import changes

    rows = {
        "benchmark": ["b.track_x", "b.track_y"], "params": ["n=1", "n=2"], "unit": ["GB/s", "GB/s"],
        "verdict": ["undecided", "undecided"], "ratio": [1.2, float("nan")], "ratio_lo": [0.9, float("nan")],
        "ratio_hi": [1.6, float("nan")], "base": [1.0, 2.0], "head": [1.2, float("nan")], "floor": [0.1, 0.1],
        "note": [float("nan"), "no result on head: failed or skipped there (see the log), or the benchmark is gone"],
    }  # fmt: skip
    sec = changes.verdicts(pd.DataFrame(rows), "cmp")
    assert list(sec.folded["change"]) == ["+20.0%", "no result on head"]
    # the verdicts count the figures judged; the one not judged is counted apart, not as undecided
    assert "**1** undecided, **1** not judged." in sec.text
    older = changes.verdicts(pd.DataFrame(rows).drop(columns="note").iloc[:1], "cmp")
    assert list(older.folded["change"]) == ["+20.0%"]
    changed = {**rows, "note": [float("nan"), "benchmark changed: its asv version differs between base and head"]}
    changed["ratio"] = [1.2, 4.0]
    assert list(changes.verdicts(pd.DataFrame(changed), "cmp").folded["change"]) == ["benchmark changed", "+20.0%"]


def test_ab_verdicts_say_how_the_compare_measured_from_its_run_record(tmp_path):
    """The A/B section carries a line from compare's run.json (machine, pairs of processes, time);
    without a readable record it says nothing of it."""
    from devbench.report import changes, cli

    record = {"machine": "vm", "seconds": 540.0, "options": {"min_passes": 3, "max_passes": 6}}
    (tmp_path / "run.json").write_text(json.dumps(record))
    line = cli._host_line(tmp_path / "run.json")
    assert line == "host: vm; each figure from 3 to 6 pairs of processes taking turns, 9.0 min in all."
    sides = {"base": {"sha": "a" * 40}, "head": {"sha": "a" * 40}}
    (tmp_path / "run.json").write_text(json.dumps({**record, "sides": sides}))
    assert cli._host_line(tmp_path / "run.json").endswith("Both sides are commit aaaaaaaa: an A/A run, where any "
                                                          "faster or slower is false.")  # fmt: skip
    sides["head"]["sha"] = "b" * 40
    (tmp_path / "run.json").write_text(json.dumps({**record, "sides": sides}))
    assert "A/A" not in cli._host_line(tmp_path / "run.json")
    # with the figures' own passes: how many pairs of processes they got, the skipped ones left out
    figures = {"x(1)": {"state": "stopped", "pass_seconds": [1.0, 1.0]},
               "x(2)": {"state": "done", "pass_seconds": [1.0] * 6},
               "x(3)": {"state": "skip", "pass_seconds": [0.1]}}  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps({**record, "figures": figures}))
    assert cli._host_line(tmp_path / "run.json") == ("host: vm; each figure measured by 2 to 6 pairs of processes "
                                                     "taking turns (a verdict needs 3), 9.0 min in all.")  # fmt: skip
    rows = {"benchmark": ["b.track_x"], "params": ["n=1"], "unit": ["GB/s"], "verdict": ["same"], "ratio": [1.0],
            "ratio_lo": [0.99], "ratio_hi": [1.01], "base": [1.0], "head": [1.0], "floor": [0.1]}  # fmt: skip
    assert "Host: vm; each figure" in changes.verdicts(pd.DataFrame(rows), "cmp", line).text
    assert cli._host_line(tmp_path / "absent.json") == ""
    (tmp_path / "run.json").write_text("{")
    assert cli._host_line(tmp_path / "run.json") == ""


def test_tables_keep_significant_digits_and_every_value_its_unit():
    """A 64x64 CPU product's 4.848e-05 TFLOP/s is not shown as 0; a time_ row's value carries its unit; an
    environment named after its torch says which torch."""
    from devbench.report import parts, records

    shown = parts.sig(pd.DataFrame({"tflops": [4.8481234e-05, 0.0, 712.3456, float("nan")]}))
    assert shown["tflops"].iloc[0] == 4.848e-05 and shown["tflops"].iloc[1] == 0.0 and shown["tflops"].iloc[2] == 712.3
    legend = records.env_legend(pd.DataFrame({"env": ["virtualenv-py3.11-torch2.13.0", "existing-py_x"],
                                              "machine": ["m", "m"]}))  # fmt: skip
    assert list(legend["torch"]) == ["2.13.0 (from the name)", "not recorded"]
    # one environment with a run record makes the column's others NaN, not None: still not recorded, not "nan"
    mixed = pd.DataFrame({"env": ["virtualenv-py3.11-torch2.13.0", "existing-py_x", "existing-py_y"],
                          "machine": ["m", "m", "n"], "torch_version": [None, None, "2.13.0+cpu"],
                          "python": ["3.11", "/x/bin/python", "/y/bin/python"],
                          "env_torch": ["2.13.0", None, None]})  # fmt: skip
    labels = records.env_labels(mixed)
    torch = records.env_legend(mixed).set_index("environment")["torch"]
    assert labels["virtualenv-py3.11-torch2.13.0"] == "py3.11 torch2.13.0 (virtualenv)"
    assert (torch[labels["virtualenv-py3.11-torch2.13.0"]], torch[labels["existing-py_x"]],
            torch[labels["existing-py_y"]]) == ("2.13.0 (from the name)", "not recorded", "2.13.0+cpu")  # fmt: skip
    from devbench.report.load import Loaded
    from devbench.report.sections import _machines

    machines = _machines(Loaded(mixed.assign(commit="c"), [])).table.set_index("machine")["torch (imported)"]
    assert machines.to_dict() == {"m": "not recorded", "n": "2.13.0+cpu"}


def test_the_same_problem_for_many_benchmarks_is_one_row_naming_them():
    from devbench.report.problems import Problem
    from devbench.report.sections import _problem_rows

    old = "result file(s) measured an older version of this benchmark's code"
    problems = [Problem(f"bench_x.B{i}.time_a", f"{i % 3 + 1} {old}") for i in range(8)]
    problems.append(Problem("results/vm/broken.json", "not JSON"))
    rows = _problem_rows(problems)
    assert len(rows) == 2
    first = rows.iloc[0]
    assert first["file or benchmark"].startswith("8 benchmarks or files: bench_x.B0.time_a, ")
    assert first["file or benchmark"].endswith("and 2 more")
    assert first["problem"] == "some result files measured an older version of this benchmark's code"
    assert rows.iloc[1].tolist() == ["results/vm/broken.json", "not JSON"]


def test_the_health_section_judges_each_gpu_figure_against_its_machine(tmp_path):
    results = tmp_path / "asv" / "results"
    shutil.copytree(REPO / "reports" / "asv-results", results)
    record = results / "h200" / "machine.json"
    data = json.loads(record.read_text())
    data["pcie"] = "gen5 x16 (max gen5 x16)"  # the link the H200 had, as devbench machine records it
    record.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert main(["--results", str(results), "--out", str(out), "--format", "md,csv", "--quiet"]) == 0
    md = (out / "report.md").read_text()
    section = md.split("## Health: each GPU figure against its machine", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| ")}
    # the committed H200 figures read healthy: no row is low
    assert not [k for k, line in rows.items() if "| low " in line], rows
    assert "| ok " in rows["h2d pinned blocking 256 MiB"] and "of 52" in rows["h2d pinned blocking 256 MiB"]
    pageable = [k for k in rows if "pageable" in k]
    assert pageable and all("| not judged " in rows[k] for k in pageable)  # bounded by staging, not the link
    assert " ok " in rows["device copy 1 GiB, read + written"] and "4010" in rows["device copy 1 GiB, read + written"]
    assert "matmul tf32 n=1024" not in rows  # too small to fill the GPU: not judged against the peak
    assert " ok " in rows["matmul float32 n=8192"]
    assert not any("cpu" in k for k in rows)  # the CPU's own copies are not GPU figures
    csv = pd.read_csv(out / "results.csv")
    assert "low" not in set(csv["health"].dropna()) and "not judged" in set(csv["health"].dropna())
    # without the link in the machine record, its host<->device figures are unknown, and the row says why
    data.pop("pcie")
    record.write_text(json.dumps(data))
    assert main(["--results", str(results), "--out", str(out), "--format", "md", "--quiet"]) == 0
    assert "names no PCIe link (devbench machine records it)" in (out / "report.md").read_text()


def _gpu_rows(machine_gpu: str, pcie: str, rows: list[tuple[str, dict, float]]) -> pd.DataFrame:
    """A frame as load_results gives it: one machine and commit, one row per (benchmark, params, value)."""
    base = {"machine": "box", "env": "e", "commit": "c" * 40, "commit_short": "cccccccc", "date": 1,
            "status": "ok", "version_current": True, "machine_gpu": machine_gpu, "machine_pcie": pcie}  # fmt: skip
    return pd.DataFrame([{**base, "benchmark": b, **p, "value": v} for b, p, v in rows])


def test_the_health_section_judges_gpu_pairs_and_nccl_busbw_against_nvlink_with_the_path_as_reason():
    mib = 2**20
    frame = _gpu_rows("8 x NVIDIA H100 80GB HBM3", "gen5 x16 (max gen5 x16)", [
        ("bench_transfer.PeerCopy.track_gbps", {"route": "0->1", "nbytes": str(256 * mib)}, 380.0),
        ("bench_transfer.PeerCopy.track_peer_access", {"route": "0->1", "nbytes": str(256 * mib)}, 1.0),
        ("bench_transfer.PeerCopy.track_nvlink_share", {"route": "0->1", "nbytes": str(256 * mib)}, 0.99),
        ("bench_transfer.PeerCopy.track_gbps", {"route": "1->0", "nbytes": str(256 * mib)}, 24.0),
        ("bench_transfer.PeerCopy.track_peer_access", {"route": "1->0", "nbytes": str(256 * mib)}, 0.0),
        ("bench_transfer.PeerCopy.track_gbps", {"route": "0->1", "nbytes": str(mib)}, 90.0),  # too small to judge
        *[("bench_collectives.Collectives.track_busbw", {"backend": "nccl", "world": "8", "op": "all_reduce",
                                                        "nbytes": str(n)}, v)
          for n, v in ((64 * mib, 300.0), (256 * mib, 200.0))],
        ("bench_collectives.Collectives.track_busbw", {"backend": "gloo", "world": "2", "op": "all_reduce",
                                                       "nbytes": str(256 * mib)}, 3.0),
        ("bench_collectives.Collectives.track_busbw", {"backend": "nccl", "world": "4", "op": "all_reduce",
                                                       "nbytes": str(256 * mib)}, float("nan")),  # skipped
    ])  # fmt: skip
    frame.loc[frame["value"].isna(), "status"] = "skipped"
    peers = pd.DataFrame([{"machine": "box", "nbytes": 256 * mib, "src": s, "dst": d, "gbps": g, "path": p}
                          for s, d, g, p in ((0, 1, 390.0, "NVLink"), (1, 0, 385.0, "NVLink"),
                                             (0, 2, 60.0, "PCIe P2P"))])  # fmt: skip
    table = H.health(frame, D.matmul_throughput(frame), D.transfer_bandwidth(frame),
                     D.collective_bandwidth(frame), peers)  # fmt: skip
    rows = {r.figure: r for r in table.itertuples()}
    ok = rows["GPU 0->1 256 MiB (NVLink)"]
    assert ok.verdict == "ok" and ok.share == pytest.approx(380 / 450) and "NVLink per direction" in ok.reason
    staged = rows["GPU 1->0 256 MiB (through host)"]
    assert staged.verdict == "low" and "peer access off" in staged.reason
    assert not any("1 MiB" in f for f in rows)
    slow = rows["peer matrix slowest: GPU 0->2 256 MiB (PCIe P2P)"]
    assert slow.verdict == "low" and "the copy took PCIe P2P, not NVLink" in slow.reason
    assert rows["peer matrix median: GPU 1->0 256 MiB (NVLink)"].verdict == "ok"
    # with each pair's NVML path recorded: a pair short of links is low and named, though its copy reads well
    linked = peers.assign(nvlinks=[18, 17, 0], switched=[True, True, False], pcie=["PCIe switch"] * 3)
    by_path = {r.figure: r for r in H.health(frame, D.matmul_throughput(frame), D.transfer_bandwidth(frame), None,
                                             linked).itertuples()}  # fmt: skip
    median = by_path["peer matrix median: GPU 1->0 256 MiB (NVLink)"]
    assert median.verdict == "low" and "NVLink: 17 of 18 links active" in median.reason
    # an NCCL ring of 8 ranks passes 0->1: its busbw is judged on that pair's recorded path
    ring = H.health(frame, D.matmul_throughput(frame), D.transfer_bandwidth(frame), D.collective_bandwidth(frame),
                    linked.assign(nvlinks=[17, 18, 0]))  # fmt: skip
    bus8 = {r.figure: r for r in ring.itertuples()}["all_reduce busbw, 8 GPUs, 256 MiB"]
    assert bus8.verdict == "low" and "NVLink: 17 of 18 links active" in bus8.reason
    two = H.health(frame, D.matmul_throughput(frame), D.transfer_bandwidth(frame), None, peers.iloc[:2])
    assert [f for f in two["figure"] if f.startswith("peer matrix")] == [
        "peer matrix slowest: GPU 1->0 256 MiB (NVLink)"]  # two GPUs, two pairs: the median is the slowest
    # the largest NCCL size only (200 of 450: low), nccl-tests' reading named; gloo is not a GPU figure
    bus = rows["all_reduce busbw, 8 GPUs, 256 MiB"]
    assert bus.verdict == "low" and bus.share == pytest.approx(200 / 480) and "nccl-tests reads busbw" in bus.reason
    assert "NVLink SHARP" in bus.reason and "pass floor 460" in bus.reason  # 8 GPUs on NVSwitch: SHARP's figure
    assert [f for f in rows if "busbw" in f] == ["all_reduce busbw, 8 GPUs, 256 MiB"]
    # the CSV's columns judge the same figures, every size of 64 MiB and more
    marked = H.with_health(frame)
    judged = marked[marked["health"] != ""]
    assert set(judged["benchmark"]) == {"bench_transfer.PeerCopy.track_gbps",
                                        "bench_collectives.Collectives.track_busbw"}
    assert len(judged) == 4  # the skipped world of 4 is not judged
    copies = judged["benchmark"] == "bench_transfer.PeerCopy.track_gbps"
    assert (judged.loc[copies, "expected"] == 450.0).all() and (judged.loc[~copies, "expected"] == 480.0).all()


def test_a_copy_kind_declared_in_spec_alone_is_rendered(monkeypatch):
    """A new copy benchmark needs its identity in ``spec.COPY_KINDS`` and nothing in the report."""
    new = spec.Figure("bench_transfer.RingCopy.track_gbps", ("lanes", "nbytes"), spec.GBPS)
    monkeypatch.setattr(spec, "COPY_KINDS", {**spec.COPY_KINDS, new: ("lanes",)})
    f = _frame([{"benchmark": "bench_transfer.RingCopy.track_gbps", "lanes": "4", "nbytes": 1 << 20, "value": 3.0,
                 "unit": "GB/s"}])  # fmt: skip
    bw = D.transfer_bandwidth(f)
    assert list(bw["copy"]) == ["RingCopy 4"] and list(bw["gbps"]) == [3.0]


def test_an_existing_environment_says_the_python_and_torch_its_run_record_names(results_copy, hist):
    """asv records an "existing" environment's interpreter path, not its version: the suite's run record
    (``.asv/runinfo``, beside the results) says which Python and torch ran, and the legend shows them."""
    import json

    from devbench.report import records

    before = load_results(results_copy).frame
    env = hist.env_name(hist.py1)
    when = pd.to_datetime(before.loc[before["env"] == env, "started_at"]).dropna().max().timestamp()
    machine = str(before.loc[before["env"] == env, "machine"].iloc[0])  # a record labels its own machine's results
    folder = results_copy.parent / "runinfo"
    folder.mkdir()
    (folder / f"{env}.jsonl").write_text(json.dumps({"time": when, "env_name": env, "machine": machine,
                                                     "torch": "2.13.0+cpu", "cuda": None, "python": "3.11.7"}) + "\n")
    frame = load_results(results_copy).frame
    legend = records.env_legend(frame).set_index("environment")
    mine = legend.loc[records.env_labels(frame)[env]]
    assert (mine["python"], mine["torch"]) == ("3.11.7", "2.13.0+cpu")


def test_a_table_cell_with_nothing_measured_reads_n_a_in_markdown_as_in_html():
    """A float column with a gap, a text column with a gap, pandas' NA: each reads n/a, never nan or <NA>."""
    from devbench.report.writers import _md_table

    table = pd.DataFrame({"where": ["h200", None], "tflops": [1.5, float("nan")],
                          "n": pd.array([1024, None], dtype="Int64")})  # fmt: skip
    lines = _md_table(table).splitlines()
    assert "nan" not in lines[3] and "<NA>" not in lines[3] and lines[3].count("n/a") == 3
    assert "1.5" in lines[2] and "1024" in lines[2]


def test_a_newer_run_whose_params_are_not_named_does_not_hide_the_named_one():
    """A machine's newest result of a benchmark that ``benchmarks.json`` lists with another count of params reads
    ``param0=...``: the tables take the machine's newest run they can place, not nothing."""
    from devbench.report.derive import latest, named

    f = _frame(
        [
            {"benchmark": "bench_transfer.DeviceCopy.track_time", "device": "cpu", "nbytes": 1 << 30, "value": 0.1,
             "params": "device=cpu, nbytes=1073741824"},
            {"benchmark": "bench_transfer.DeviceCopy.track_time", "param0": "cpu", "param1": 4096, "value": 1e-6,
             "params": "param0=cpu, param1=4096", "commit": "d" * 40, "date": pd.Timestamp("2026-02-01", tz="UTC")},
        ]
    )  # fmt: skip
    assert D.transfer_bandwidth(latest(f)).empty  # the newest run alone: nothing the table can place
    assert list(D.transfer_bandwidth(latest(named(f)))["copy"]) == ["on-device cpu"]


def test_a_peer_copy_result_without_named_params_is_left_out_of_the_paths():
    from devbench.report import health as H

    rows = [{"benchmark": b, "route": route, "nbytes": nbytes, "value": 1.0}
            for b in ("bench_transfer.PeerCopy.track_peer_access", "bench_transfer.PeerCopy.track_nvlink_share")
            for route, nbytes in (("0->1", 1 << 26), (None, float("nan")))]  # fmt: skip
    paths = H._peer_paths(_frame(rows))
    assert [k[-2:] for k in paths] == [("0->1", 1 << 26)]
