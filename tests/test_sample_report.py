"""The sample report shows what the runs have: every achievable figure asv recorded, and a version change as a
note beside the comparisons, not a problem at the top."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from devbench.report import derive as D
from devbench.report.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_an_achievable_figure_without_search_records_has_its_row():
    base = {"machine": "h200", "env": "e", "commit": "c" * 40, "commit_short": "cccccccc", "date": 1,
            "status": "ok", "version_current": True, "machine_gpu": "1 x NVIDIA H200",
            "benchmark": "bench_achievable.MatmulAchievable.track_tflops", "device": "cuda", "dtype": "bfloat16"}
    frame = pd.DataFrame([{**base, "run": "burst", "value": 721.0}, {**base, "run": "sustained", "value": 693.0}])
    searches = pd.DataFrame([{"machine": "vm", "device": "cpu", "dtype": "float32", "shape": "2048x4096x512",
                              "search_tflops": 0.19}])  # fmt: skip
    for found in (None, searches):
        rows = D.achievable(frame, found)
        gpu = rows[rows["machine"] == "h200"].iloc[0]
        assert (gpu["burst"], gpu["sustained"]) == (721.0, 693.0) and gpu["datasheet"] > 900
    both = D.achievable(frame, searches)
    assert set(both["machine"]) == {"h200", "vm"}


def test_the_sample_report_puts_version_changes_beside_the_comparisons(tmp_path):
    out = tmp_path / "sample"
    assert main(["--results", str(ROOT / "reports" / "asv-results"), "--out", str(out), "--format", "md",
                 "--quiet"]) == 0  # fmt: skip
    text = (out / "report.md").read_text()
    titles = re.findall(r"^## (.+)$", text, re.M)
    assert "older version" not in text.split("## Matmul throughput")[0]  # not among the first things read
    note = titles.index("Benchmarks whose code changed within the history")
    assert note > titles.index("Maximum achievable matmul (TFLOP/s)")
    achievable = text.split("## Maximum achievable matmul (TFLOP/s)")[1].split("\n## ")[0]
    # the H200's asv figures (best, burst, sustained) and its search's best shape on one row: the search record names
    # the device it ran on, cuda:0, asv's figures the kind, cuda
    row = r"\| h200 +\| cuda +\| bfloat16 +\| 4096x16384x2048 .*\| +727\.9 +\| +717\.9 +\| +692\.9"
    assert re.search(row, achievable), achievable
    assert "cuda:0" not in achievable
