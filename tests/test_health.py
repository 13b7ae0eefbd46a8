"""One verdict: the report's health section, the CSV's columns and gpu-run's health lines judge a figure alike."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

from devbench.records import spec
from devbench.report import derive as D
from devbench.report import health as H

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def _node() -> tuple[pd.DataFrame, pd.DataFrame]:
    """An 8-GPU node's latest figures of every kind the health section judges, with the GPU state recorded while
    they were timed (a link trained below its best, a product under a lowered power limit), and its peer records."""
    base = {"machine": "node", "env": "e", "commit": "c" * 40, "commit_short": "cccccccc", "date": 1, "status": "ok",
            "version_current": True, "machine_gpu": "8 x NVIDIA H100 80GB HBM3",
            "machine_pcie": "gen5 x16 (max gen5 x16)"}  # fmt: skip
    big = str(256 * MIB)
    rows = [
        ("bench_transfer.HostDevice.track_gbps", {"direction": "h2d", "memory": "pinned", "mode": "blocking",
                                                  "nbytes": big, "gpu_pcie_gen": 4, "gpu_pcie_width": 16}, 26.0),
        ("bench_transfer.HostDevice.track_gbps", {"direction": "d2h", "memory": "pinned", "mode": "blocking",
                                                  "nbytes": big}, 51.0),
        ("bench_transfer.HostDevice.track_gbps", {"direction": "h2d", "memory": "pageable", "mode": "blocking",
                                                  "nbytes": big}, 20.0),
        ("bench_transfer.HostDevice.track_gbps", {"direction": "h2d", "memory": "pinned", "mode": "blocking",
                                                  "nbytes": str(MIB)}, 20.0),  # too small: not judged anywhere
        ("bench_transfer.DeviceCopy.track_gbps_copied", {"device": "cuda", "nbytes": str(1024 * MIB)}, 1500.0),
        ("bench_transfer.DeviceCopy.track_gbps_read_write", {"device": "cuda", "nbytes": str(1024 * MIB)}, 3000.0),
        ("bench_matmul.MatmulSquare.track_tflops", {"device": "cuda", "dtype": "bfloat16", "n": "8192",
                                                    "gpu_mhz": 1410.0, "gpu_reasons": "sw_power_cap",
                                                    "gpu_power_limit_w": 500.0,
                                                    "gpu_default_power_limit_w": 700.0}, 560.0),
        ("bench_matmul.MatmulSquare.track_tflops", {"device": "cuda", "dtype": "float32", "n": "8192"}, 50.0),
        ("bench_transfer.PeerCopy.track_gbps", {"route": "0->1", "nbytes": big}, 380.0),
        ("bench_transfer.PeerCopy.track_peer_access", {"route": "0->1", "nbytes": big}, 1.0),
        ("bench_transfer.PeerCopy.track_nvlink_share", {"route": "0->1", "nbytes": big}, 0.99),
        ("bench_transfer.PeerMatrix.track_slowest_gbps", {"nbytes": big}, 60.0),
        ("bench_transfer.PeerMatrix.track_median_gbps", {"nbytes": big}, 385.0),
        ("bench_collectives.Collectives.track_busbw", {"backend": "nccl", "world": "8", "op": "all_reduce",
                                                       "nbytes": big}, 200.0),
    ]  # fmt: skip
    frame = pd.DataFrame([{**base, "benchmark": b, **p, "value": v} for b, p, v in rows])
    figures = {f.benchmark: f for f in spec.FIGURES}
    frame["params"] = [spec.params_label(figures[b].params, [p[k] for k in figures[b].params]) for b, p, _ in rows]
    peers = pd.DataFrame([{"machine": "node", "nbytes": 256 * MIB, "src": s, "dst": d, "gbps": g, "path": p,
                           "nvlinks": k, "switched": True, "pcie": "PCIe switch"}
                          for s, d, g, p, k in ((0, 1, 390.0, "NVLink", 18), (1, 0, 385.0, "NVLink", 17),
                                                (0, 2, 60.0, "PCIe P2P", 0))])  # fmt: skip
    return frame, peers


def test_the_csv_and_the_report_judge_every_health_row_alike():
    frame, peers = _node()
    section = H.health(frame, D.matmul_throughput(frame), D.transfer_bandwidth(frame),
                       D.collective_bandwidth(frame), peers)  # fmt: skip
    csv = H.with_health(frame, peers)
    judged = csv[csv["health"] != ""]
    assert len(section) == len(judged) == 10, (section, judged)
    for r in section.itertuples():
        twin = judged[(judged["value"] - r.measured).abs() < 1e-9]
        assert len(twin) == 1, r.figure
        got = twin.iloc[0]
        assert (got["health"], got["health_reason"]) == (r.verdict, r.reason), r.figure
    verdicts = {r.figure: r.verdict for r in section.itertuples()}
    # what the state recorded while each figure was timed decides, in both
    assert verdicts["h2d pinned blocking 256 MiB"] == "low"  # trained at gen4: named, and judged at gen5
    assert verdicts["h2d pageable blocking 256 MiB"] == "not judged"
    low = section[section["figure"] == "matmul bfloat16 n=8192"].iloc[0]
    assert low.verdict == "low" and "500" in low.reason and "700" in low.reason  # the lowered limit named
    assert verdicts["peer matrix median: GPU 1->0 256 MiB (NVLink)"] == "low"  # 17 of 18 links


def test_the_health_lines_judge_with_the_same_function(monkeypatch):
    """gpu-run's health lines call ``verdict``: a stand-in for it decides every line."""
    from devbench.gpu import gpuhealth

    calls, real = [], H.verdict

    def fake(kind, measured, gpu, state=None, path=None, pair=None, ring=None):
        calls.append((kind, measured, state))
        return real("h2d", 1.0, {"name": "NVIDIA H200"}, {})  # no link: unknown

    monkeypatch.setattr(H, "verdict", fake)
    monkeypatch.setattr(gpuhealth, "figure_value", lambda results, sha, name, params: 30.0)
    lines = gpuhealth.health_lines(Path("."), "s" * 40, {"name": "NVIDIA H200"})
    assert lines and len(calls) == len(lines) and all(" unknown " in ln for ln in lines)


def test_no_module_but_the_health_module_calls_the_judge():
    """``expected.judge`` is called from ``report.health.verdict`` alone: no second verdict grows elsewhere."""
    callers = []
    for path in (ROOT / "src" / "devbench").rglob("*.py"):
        tree = ast.parse(path.read_text())
        imported = any(isinstance(n, ast.ImportFrom) and n.module == "devbench.records.expected"
                       and any(a.name == "judge" for a in n.names) for n in ast.walk(tree))  # fmt: skip
        called = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "judge"
                     and getattr(n.func.value, "id", "") in ("expected", "E") for n in ast.walk(tree))  # fmt: skip
        if imported or called:
            callers.append(str(path.relative_to(ROOT)))
    assert callers == ["src/devbench/report/health.py"]


@pytest.mark.parametrize("kind", ["h2d", "d2h"])
def test_a_copy_without_a_link_is_unknown_and_says_why(kind):
    got = H.verdict(kind, 50.0, {"name": "NVIDIA H100 80GB HBM3"})
    assert (got.verdict, got.reason) == ("unknown", H.NO_LINK)
    linked = H.verdict(kind, 50.0, {"name": "NVIDIA H100 80GB HBM3"}, {"pcie_gen": 5, "pcie_width": 16})
    assert linked.verdict == "ok"


def test_public_pass_floors_decide_where_they_exist_and_the_verdict_says_which():
    """A GPU pair's NVLink copy and an 8-GPU all_reduce are judged against the fleet health checks' pass floors
    (335 and 460 GB/s on an H100 SXM); elsewhere against 70% of the expected figure, and the reason says so."""
    from devbench.records.topology import PairPath

    h100 = {"name": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_width": 16}
    nvlink = PairPath(0, 1, 18, True, "PCIe switch")
    low = H.verdict("peer", 330.0, h100, pair=nvlink)  # above 70% of 450, below the public floor
    assert low.verdict == "low" and "below its pass floor 335" in low.reason and "azurehpc" in low.reason
    assert H.verdict("peer", 340.0, h100, pair=nvlink).verdict == "ok"
    ring = H.verdict("busbw", 440.0, h100, pair=nvlink, ring=("all_reduce", 8))
    assert ring.verdict == "low" and "below its pass floor 460" in ring.reason
    at_16g = H.verdict("busbw", 440.0, h100, pair=nvlink, ring=("all_reduce", 8, 16 * 1024**3))
    assert at_16g.verdict == "low" and "below its pass floor 460" in at_16g.reason
    # the floor is the health check's 16 GiB message: at this suite's 256 MiB a healthy node may sit below it
    at_256m = H.verdict("busbw", 440.0, h100, pair=nvlink, ring=("all_reduce", 8, 256 * 1024**2))
    assert at_256m.verdict == "ok" and "at 16 GiB, not this message's size" in at_256m.reason
    slow = H.verdict("busbw", 300.0, h100, pair=nvlink, ring=("all_reduce", 8, 256 * 1024**2))
    assert slow.verdict == "low" and "below 70% of it (its public pass floor is a larger message's)" in slow.reason
    assert H.verdict("busbw", 440.0, h100, pair=nvlink, ring=("all_gather", 8)).verdict == "ok"  # no public floor
    gather = H.verdict("busbw", 300.0, h100, pair=nvlink, ring=("all_gather", 8))
    assert gather.verdict == "low" and "below 70% of it (no public pass floor)" in gather.reason


def test_the_csv_gives_the_expected_figure_of_the_facts_its_verdict_used():
    """A machine record without its PCIe link: the link the copy trained at (recorded while it ran) decides both the
    verdict and the CSV's expected figure, which never contradict each other."""
    base = {"machine": "m", "env": "e", "commit": "c" * 40, "date": 1, "status": "ok", "version_current": True,
            "machine_gpu": "1 x NVIDIA H100 80GB HBM3", "machine_pcie": None}  # fmt: skip
    frame = pd.DataFrame([{**base, "benchmark": spec.HOST_DEVICE_GBPS.benchmark, "direction": "h2d",
                           "memory": "pinned", "mode": "non_blocking", "nbytes": str(256 * MIB), "value": 50.0,
                           "gpu_pcie_gen": 5, "gpu_pcie_width": 16}])  # fmt: skip
    row = H.with_health(frame).iloc[0]
    assert (row["health"], row["expected"]) == ("ok", 52.0) and "Gen5 x16" in row["expected_source"]


def test_the_csv_gives_the_figure_a_capped_product_was_held_against():
    """A product under the board's power cap: the CSV's expected figure and its source are what the verdict held it
    against, a model's sustained figure (an H100: gpu-fryer's 730) or the burst figure at its clock (an H200)."""
    base = {"machine": "m", "env": "e", "commit": "c" * 40, "date": 1, "status": "ok", "version_current": True,
            "machine_pcie": None, "benchmark": "bench_matmul.MatmulSquare.track_tflops", "device": "cuda",
            "dtype": "bfloat16", "n": "8192", "gpu_reasons": "sw_power_cap", "gpu_power_limit_w": 700.0,
            "gpu_default_power_limit_w": 700.0}  # fmt: skip
    frame = pd.DataFrame([{**base, "machine_gpu": "1 x NVIDIA H100 80GB HBM3", "gpu_mhz": 1600.0, "value": 700.0},
                          {**base, "machine": "n", "machine_gpu": "1 x NVIDIA H200", "gpu_mhz": 1515.0,
                           "value": 693.0}])  # fmt: skip
    h100, h200 = H.with_health(frame).itertuples()
    assert (h100.health, h100.expected) == ("ok", 730.0) and "gpu-fryer" in h100.expected_source
    assert h200.health == "ok" and h200.expected == pytest.approx(794.5 * 1515 / 1830)
    assert "mamf-finder" in h200.expected_source


def test_an_older_peer_matrix_figure_is_not_judged_on_the_newest_sweeps_pairs():
    """The peer records are the newest sweep's: a PeerMatrix figure of an older run is judged without them."""
    base = {"machine": "node", "env": "e", "date": 1, "status": "ok", "version_current": True,
            "machine_gpu": "8 x NVIDIA H100 80GB HBM3", "benchmark": spec.PEER_MATRIX_MEDIAN.benchmark,
            "nbytes": str(256 * MIB), "value": 445.0}  # fmt: skip
    sweep_s = 1_800_000_000.0
    frame = pd.DataFrame([{**base, "commit": "a" * 40, "started_at": pd.Timestamp(sweep_s - 5 * 86400, unit="s")},
                          {**base, "commit": "b" * 40, "started_at": pd.Timestamp(sweep_s + 60, unit="s")}])
    peers = pd.DataFrame([{"machine": "node", "nbytes": 256 * MIB, "src": s, "dst": d, "gbps": g, "path": "NVLink",
                           "nvlinks": k, "switched": True, "pcie": "PCIe switch", "time": sweep_s}
                          for s, d, g, k in ((0, 1, 440.0, 18), (1, 0, 445.0, 17), (0, 2, 450.0, 18))])  # fmt: skip
    old, new = H.with_health(frame, peers).itertuples()
    assert "17 of 18 links" in new.health_reason and new.health == "low"  # that sweep's median pair
    assert "links active" not in old.health_reason and old.health == "ok"  # not that sweep's: no pair named


def test_a_peer_matrix_figure_is_judged_with_its_own_sweeps_pairs():
    """Two commits' sweeps on one machine: each figure takes the pairs of the sweep nearest its own time, not the
    newest; the section shows the newest."""
    from devbench.report.records import newest_sweeps

    def pair(time, src, dst, gbps, links):
        return {"machine": "node", "time": time, "nbytes": 256 * MIB, "src": src, "dst": dst, "gbps": gbps,
                "path": "NVLink", "nvlinks": links, "switched": True, "pcie": "PCIe switch", "gpu_links": links}

    peers = pd.DataFrame([pair(1000.0, 0, 1, 300.0, 17), pair(1000.0, 1, 0, 380.0, 18),  # the older: a link down
                          pair(9000.0, 0, 1, 379.0, 18), pair(9000.0, 1, 0, 381.0, 18)])  # fmt: skip
    old, _ = H._matrix_pick(peers, "node", 256 * MIB, "slowest", pd.Timestamp(1010.0, unit="s", tz="UTC"))
    new, _ = H._matrix_pick(peers, "node", 256 * MIB, "slowest", pd.Timestamp(9010.0, unit="s", tz="UTC"))
    assert (old.nvlinks, new.nvlinks) == (17, 18)
    assert H._matrix_pick(peers, "node", 256 * MIB, "slowest")[0].nvlinks == 18  # no time: the newest
    assert set(newest_sweeps(peers)["time"]) == {9000.0}
