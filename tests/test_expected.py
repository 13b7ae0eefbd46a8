"""Each GPU figure judged against what its own machine should do (synthetic machine records, no GPU)."""

from __future__ import annotations

import pytest

from devbench import expected as E

H100_GEN4 = {"name": "NVIDIA H100 80GB HBM3", "pcie_gen": 4, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
H200 = {"name": "NVIDIA H200", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}


def test_a_link_trained_at_gen4_is_judged_against_gen4_and_half_of_it_is_low_with_that_reason():
    want = E.expected("h2d", H100_GEN4)
    assert want.value == pytest.approx(16 * 16 * 128 / 130 / 8)  # 31.5 GB/s, not Gen5's 63.0
    assert "Gen4 x16" in want.source
    low = E.judge(want.value / 2, "h2d", H100_GEN4)
    assert low.verdict == "low" and low.share == pytest.approx(0.5)
    assert "PCIe link trained at Gen4 x16, below its Gen5 x16" in low.reason
    pageable = E.judge(5.0, "d2h", H100_GEN4, pageable=True)
    assert "pageable host memory" in pageable.reason
    assert E.judge(0.9 * want.value, "h2d", H100_GEN4).verdict == "ok"


def test_the_h200_runs_figures_are_ok_against_its_link_and_memory():
    # reports/gpu/h200: pinned h2d 256 MiB at 55.3 GB/s, a 1 GiB device copy at 4,266 GB/s read plus written
    h2d = E.judge(55.29, "h2d", H200)
    assert h2d.verdict == "ok" and h2d.share == pytest.approx(55.29 / (32 * 16 * 128 / 130 / 8))
    copy = E.judge(4266.0, "device_copy", H200)
    assert copy.verdict == "ok" and copy.share == pytest.approx(4266 / 4800)
    assert "H200" in copy.reason and "datasheet" in copy.reason
    slow = E.judge(600.0, "matmul:bfloat16", H200, throttle=["sw_power_cap"])
    assert slow.verdict == "low" and "throttled while it ran: sw_power_cap" in slow.reason


def test_an_unknown_gpu_or_link_is_unknown_and_says_why():
    odd = {"name": "Made-up Accelerator 9000"}
    for kind, why in [("device_copy", "not in devbench.expected.MODELS"), ("h2d", "did not report the PCIe link"),
                      ("matmul:bfloat16", "no datasheet bfloat16 figure")]:  # fmt: skip
        health = E.judge(100.0, kind, odd)
        assert health.verdict == "unknown" and health.share is None and why in health.reason
    no_link = E.judge(10.0, "peer", {"name": "NVIDIA L4"})
    assert no_link.reason == "L4 has no NVLink, and NVML did not report the PCIe link"
    assert E.judge(100.0, "busbw", odd).verdict == "unknown"
    with pytest.raises(ValueError, match="unknown kind 'nvme'"):
        E.expected("nvme", H200)


def test_every_known_gpu_names_its_source_and_the_most_specific_key_wins():
    assert all(m.source and m.memory_gbps > 0 for m in E.MODELS)
    assert E.model("NVIDIA H100 PCIe").label == "H100 PCIe"
    assert E.model("NVIDIA H100 80GB HBM3").label == "H100 SXM"
    assert E.model("NVIDIA H200 NVL").label == "H200 NVL"
    assert E.model("Tesla V100-PCIE-32GB").label == "V100 PCIe"
    assert E.pcie_gbps(3, 16) == pytest.approx(15.75, rel=1e-3) and E.pcie_gbps(None, 16) is None
    assert E.link_note(H200) is None


def test_a_gpu_pair_and_a_collective_are_judged_against_one_direction_of_nvlink_with_the_path_as_reason():
    # H200 SXM: NVLink 900 GB/s both ways, 450 one way; nccl-tests' busbw reads against one direction
    want = E.expected("peer", H200)
    assert want.value == 450.0 and "NVLink per direction" in want.source and "H200 datasheet" in want.source
    assert E.judge(400.0, "peer", H200, path="NVLink").verdict == "ok"
    staged = E.judge(20.0, "peer", H200, path="through host")
    assert staged.verdict == "low" and "peer access off" in staged.reason
    pcie = E.judge(50.0, "peer", H200, path="PCIe P2P")
    assert pcie.verdict == "low" and "the copy took PCIe P2P, not NVLink" in pcie.reason
    assert "no reason could be read" in E.judge(200.0, "peer", H200, path="NVLink").reason
    assert "not NVLink" not in E.judge(200.0, "peer", H200, path="P2P").reason  # no counters, no topology: unknown
    bus = E.expected("busbw", H200)
    assert bus.value == 450.0 and "as nccl-tests reads busbw" in bus.source
    assert E.judge(360.0, "busbw", H200).verdict == "ok"


def test_a_model_without_nvlink_is_judged_against_its_pcie_link_and_names_a_link_trained_low():
    l4 = {"name": "NVIDIA L4", "pcie_gen": 3, "pcie_width": 16, "pcie_gen_max": 4, "pcie_width_max": 16}
    want = E.expected("peer", l4)
    assert want.value == pytest.approx(E.pcie_gbps(3, 16)) and "L4 has no NVLink: PCIe Gen3 x16" in want.source
    low = E.judge(5.0, "busbw", l4)
    assert low.verdict == "low" and "PCIe link trained at Gen3 x16, below its Gen4 x16" in low.reason
    # over PCIe, a PCIe P2P path is the expected one, not a reason
    assert "not NVLink" not in E.judge(5.0, "peer", l4, path="PCIe P2P").reason
