"""Each GPU figure judged against what its own machine should do (synthetic machine records, no GPU)."""

from __future__ import annotations

import pytest

from devbench.records import expected as E

H100_GEN4 = {"name": "NVIDIA H100 80GB HBM3", "pcie_gen": 4, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
H200 = {"name": "NVIDIA H200", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}


def test_a_pinned_copy_at_half_a_gen4_link_that_trained_at_gen4_under_load_is_low_with_that_reason():
    # judged against what a healthy Gen5 x16 host reaches (the GPU's own link), not against the link as trained
    want = E.expected("h2d", H100_GEN4)
    assert (want.value, want.floor) == (52.0, 48.0) and "azurehpc-health-checks" in want.source
    half_gen4 = E.pcie_gbps(4, 16) / 2
    low = E.judge(half_gen4, "d2h", H100_GEN4)
    assert low.verdict == "low" and "PCIe link trained at Gen4 x16, below its Gen5 x16" in low.reason
    assert "below its pass floor 48" in low.reason
    assert E.judge(47.0, "h2d", H200).verdict == "low"  # under the fleet floor on a whole Gen5 x16 link
    # another link has no public copy figure: its rate after encoding, 70% of it the floor
    gen3 = {"name": "NVIDIA L4", "pcie_gen": 3, "pcie_width": 16, "pcie_gen_max": 3, "pcie_width_max": 16}
    assert E.expected("h2d", gen3).value == pytest.approx(E.pcie_gbps(3, 16))
    assert E.judge(0.75 * E.pcie_gbps(3, 16), "h2d", gen3).verdict == "ok"


def test_a_pageable_copy_is_not_judged_against_the_link_and_says_why():
    pageable = E.judge(8.0, "h2d", H200, pageable=True)
    assert pageable.verdict == "not judged" and pageable.share is None
    assert "staged by the driver" in pageable.reason and "rather than by the PCIe link" in pageable.reason


def test_the_h200_runs_committed_figures_read_ok_with_its_gen5_link():
    # reports/gpu/h200: pinned h2d 256 MiB 55.1 GB/s, a 1 GiB device copy 4,236 GB/s read plus written,
    # achievable bf16 burst 718 and sustained 693 (at 1,500 MHz, sw_power_cap), float16 n=8192 649
    for value, kind, kw in [(55.06, "h2d", {}), (4236.0, "device_copy", {}), (717.9, "achievable:bfloat16", {}),
                            (692.9, "achievable:bfloat16", {"throttle": ["sw_power_cap"], "clock_mhz": 1500.0}),
                            (649.0, "matmul:float16", {})]:
        health = E.judge(value, kind, H200, **kw)
        assert health.verdict == "ok", (value, kind, health)
    for pageable_gbps in (8.3, 9.7):  # the pageable copies: not judged, never low
        assert E.judge(pageable_gbps, "h2d", H200, pageable=True).verdict == "not judged"


def test_float16_is_judged_against_bfloat16s_achievable_figure_where_the_datasheet_rates_them_alike():
    """No public achievable float16 figure exists; on GPUs whose datasheet gives float16 and bfloat16 one dense rate
    (the same tensor cores), bfloat16's achievable figure is float16's too, and the reason says so. Judged against
    the datasheet instead, a healthy H200's float16 n=8192 (649 TFLOP/s) read 66% of 989.4: low."""
    fp16 = E.expected("matmul:float16", H200)
    assert fp16.value == 794.5 and "float16 has bfloat16's datasheet rate on this GPU (989.4 each)" in fp16.source
    assert E.judge(649.0, "matmul:float16", H200).verdict == "ok"
    assert E.judge(450.0, "matmul:float16", H200).verdict == "low"
    v100 = E.expected("matmul:float16", {"name": "Tesla V100-SXM2-32GB"})  # no bfloat16 rate: its datasheet alone
    assert "datasheet dense float16" in v100.source and "bfloat16" not in v100.source


@pytest.mark.parametrize("tflops", [650.0, 680.0, 700.0])
@pytest.mark.parametrize("capped", [False, True])
def test_a_healthy_h200_bf16_product_is_not_low_with_or_without_a_power_cap(tflops, capped):
    kw = {"throttle": ["sw_power_cap"], "clock_mhz": 1515.0} if capped else {}
    health = E.judge(tflops, "matmul:bfloat16", H200, **kw)
    assert health.verdict == "ok", health
    assert "794.5" in health.reason and "mamf-finder" in health.reason
    if capped:
        assert "at 1515 of 1830 MHz" in health.reason and "sw_power_cap" in health.reason


def test_a_slow_product_at_boost_clock_with_no_throttle_reason_is_low():
    slow = E.judge(450.0, "matmul:bfloat16", H200, clock_mhz=1980.0)
    assert slow.verdict == "low" and "no reason could be read" in slow.reason
    # a thermal slowdown is a fault: named, and the expected figure is not lowered for it
    hot = E.judge(450.0, "matmul:bfloat16", H200, throttle=["hw_thermal_slowdown"], clock_mhz=1200.0)
    assert hot.verdict == "low" and "throttled while it ran: hw_thermal_slowdown" in hot.reason
    assert hot.share == pytest.approx(450.0 / 794.5)


def test_an_unknown_gpu_or_link_is_unknown_and_says_why():
    odd = {"name": "Made-up Accelerator 9000"}
    for kind, why in [("device_copy", "not in devbench.records.expected.MODELS"),
                      ("h2d", "did not report the PCIe link"),
                      ("matmul:bfloat16", "no datasheet bfloat16 figure")]:  # fmt: skip
        health = E.judge(100.0, kind, odd)
        assert health.verdict == "unknown" and health.share is None and why in health.reason
    no_link = E.judge(10.0, "peer", {"name": "NVIDIA L4"})
    assert no_link.reason == "L4 has no NVLink, and NVML did not report the PCIe link"
    assert E.judge(100.0, "busbw", odd).verdict == "unknown"
    with pytest.raises(ValueError, match="unknown kind 'nvme'"):
        E.expected("nvme", H200)


def test_gpu_models_are_matched_by_whole_name_from_one_table():
    assert all(m.source and (m.memory_gbps is None or m.memory_gbps > 0) for m in E.MODELS)
    # names that contain another model's name are not that model
    assert E.model("NVIDIA L40S") is None and E.model("NVIDIA L4").label == "L4"
    assert E.model("NVIDIA GH200 480GB").label == "GH200 480GB" and E.model("NVIDIA H200").label == "H200 SXM"
    assert E.model("NVIDIA GH200 144G HBM3e").label == "GH200 144G HBM3e" and E.model("NVIDIA GH200").label == "GH200"
    assert E.model("NVIDIA H100") is None  # NVML's 94 GB SXM5 board: no source here gives its memory or floors
    assert E.model("1 x NVIDIA H200").label == "H200 SXM"  # as asv's machine record names the GPUs
    assert E.model("NVIDIA A100-SXM4-80GB").label == "A100 SXM 80GB" and E.model("NVIDIA A100X") is None
    assert E.gpu_peak("NVIDIA GH200 480GB", "bfloat16") == 989.4 and E.gpu_peak("NVIDIA L40S", "bfloat16") is None
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
    """Against the link's maximum, as a host copy is: an idle GPU trains its link down, so the record's "as
    trained" may read Gen1 and would pass a pair whose copies crawl at Gen1's rate."""
    l4 = {"name": "NVIDIA L4", "pcie_gen": 3, "pcie_width": 16, "pcie_gen_max": 4, "pcie_width_max": 16}
    want = E.expected("peer", l4)
    assert want.value == pytest.approx(E.pcie_gbps(4, 16)) and "L4 has no NVLink: PCIe Gen4 x16" in want.source
    idle = {**l4, "pcie_gen": 1}
    assert E.judge(0.9 * E.pcie_gbps(1, 16), "peer", idle).verdict == "low"
    low = E.judge(5.0, "busbw", l4)
    assert low.verdict == "low" and "PCIe link trained at Gen3 x16, below its Gen4 x16" in low.reason
    # over PCIe, a PCIe P2P path is the expected one, not a reason
    assert "not NVLink" not in E.judge(5.0, "peer", l4, path="PCIe P2P").reason


def test_a_lowered_power_limit_is_a_fault_named_never_an_excuse():
    """The H200's sustained 693 TFLOP/s ran under sw_power_cap at 1,515 MHz: at its default 700 W limit that is
    healthy; with the limit lowered to 500 W the same clock excuse would pass a board held back by its setting."""
    capped = {"throttle": ["sw_power_cap"], "clock_mhz": 1515.0}
    default = {**H200, "power_limit_w": 700.0, "default_power_limit_w": 700.0}
    assert E.judge(693.27, "achievable:bfloat16", default, **capped).verdict == "ok"
    lowered = {**H200, "power_limit_w": 500.0, "default_power_limit_w": 700.0}
    held = E.judge(600.0, "achievable:bfloat16", lowered, **capped)
    assert held.verdict == "low" and "power limit 500 W, lowered from the board's default 700 W" in held.reason
    assert "at 1515 of" not in held.reason  # judged at the full figure, not at the clock the limit allowed
    copy = E.judge(4266.0, "device_copy", lowered)  # a copy the limit did not hold back: ok, the fault still named
    assert copy.verdict == "ok" and "lowered from the board's default" in copy.reason
    assert E.lowered_limit({"power_limit_w": 699.0, "default_power_limit_w": 700.0}) is None  # rounding
    assert E.lowered_limit({"power_limit_w": 700.0}) is None  # no default read: nothing claimed


def test_a_product_at_the_power_limit_is_judged_against_what_the_model_sustains_where_a_source_says_it():
    """gpu-fryer's table gives an H100 SXM's held bf16 8192 x 8192 products as ~730 TFLOP/s. A product under
    sw_power_cap on one is judged against that, not the burst figure scaled by its clock: a board that caps at
    1,000 MHz at its default limit (too many watts for its clock) reads low, where the clock would excuse it."""
    h100 = {"name": "NVIDIA H100 80GB HBM3", "power_limit_w": 700.0, "default_power_limit_w": 700.0}
    capped = {"throttle": ["sw_power_cap"]}
    healthy = E.judge(700.0, "matmul:bfloat16", h100, clock_mhz=1600.0, **capped)
    assert healthy.verdict == "ok" and "730 sustained" in healthy.reason and "gpu-fryer" in healthy.reason
    sick = E.judge(434.0, "matmul:bfloat16", h100, clock_mhz=1000.0, **capped)
    assert sick.verdict == "low" and "below 70% of it (no public pass floor)" in sick.reason
    half = E.judge(700.0, "matmul:float16", h100, clock_mhz=1600.0, **capped)  # one datasheet rate with bf16
    assert "730 sustained" in half.reason and "float16 has bfloat16's datasheet rate" in half.reason
    # no cap: a burst, against mamf-finder's burst figure; no sustained figure (tf32, an H200): the clock rule
    assert "794.5 (" in E.judge(750.0, "matmul:bfloat16", h100, clock_mhz=1980.0).reason
    assert E.sustained(E.model("NVIDIA H200"), "bfloat16") is None
    assert "at 1515 of 1830 MHz" in E.judge(693.0, "matmul:bfloat16", H200, clock_mhz=1515.0, **capped).reason


def test_nvlink_pairs_joined_by_a_few_of_each_gpus_links_are_judged_on_those_links_and_on_each_gpus_total():
    """A V100 cube mesh joins each pair by 1 or 2 of a GPU's 6 links, a 4-way bridge by some of its links: healthy,
    not "links down". A copy is expected at its links' rate; a link down counts on the GPU's active links."""
    from devbench.records.topology import PairPath

    v100 = {"name": "Tesla V100-SXM2-32GB", "pcie_gen": 3, "pcie_width": 16}
    found = E.model(v100["name"])
    per_link = found.nvlink_gbps / found.nvlink_links
    one, two = PairPath(0, 1, 1, False, "PCIe switch", 6), PairPath(0, 3, 2, False, "host bridge", 6)
    assert E.expected("peer", v100, one).value == pytest.approx(per_link)
    assert E.expected("peer", v100, two).value == pytest.approx(2 * per_link)
    assert E.judge(0.9 * 2 * per_link, "peer", v100, pair=two).verdict == "ok"
    assert E.judge(0.5 * 2 * per_link, "peer", v100, pair=two).verdict == "low"
    down = E.judge(0.9 * per_link, "peer", v100, pair=PairPath(0, 1, 1, False, "PCIe switch", 5))
    assert down.verdict == "low" and "NVLink: 5 of 6 links active" in down.reason
    assert E.judge(0.9 * per_link, "peer", v100, pair=PairPath(0, 1, 1, False, None)).verdict == "ok"  # not read
    h100 = {"name": "NVIDIA H100 80GB HBM3"}  # through NVSwitches: the pair has every link of the fewer GPU's
    assert "17 of 18 links active" in E.judge(400.0, "peer", h100, pair=PairPath(0, 1, 17, True, None)).reason
    assert E.judge(400.0, "peer", h100, pair=PairPath(0, 1, 18, True, None, 18)).verdict == "ok"


def test_each_gh200_board_has_only_its_own_sources_figures_and_no_pcie_figure_judges_its_copies():
    """mamf-finder measured the 900 W, 141 GiB HBM3e board, gpu-fryer the 480GB one: neither figure is the other's.
    Host copies cross NVLink-C2C and NVLink differs by variant: no PCIe figure judges them."""
    hbm3e, lpddr = {"name": "NVIDIA GH200 144G HBM3e"}, {"name": "NVIDIA GH200 480GB", "pcie_gen": 5, "pcie_width": 16}
    assert E.expected("achievable:bfloat16", hbm3e).value == 828.6
    assert E.expected("achievable:bfloat16", lpddr).value == 989.4  # its datasheet: no public achievable figure
    assert E.sustained(E.model(lpddr["name"]), "bfloat16")[0] == 705.0 and E.sustained(E.model(hbm3e["name"]),
                                                                                         "bfloat16") is None
    for kind in ("h2d", "d2h", "peer", "busbw"):
        assert E.judge(50.0, kind, lpddr).verdict == "unknown"
    assert "NVLink-C2C" in E.judge(50.0, "h2d", lpddr).reason


def test_a_health_check_that_sets_its_own_floor_for_a_models_hosts_decides_there():
    """azurehpc-health-checks passes an H100 NVL host's pinned copies at 52 GB/s, not the SXM hosts' 48."""
    nvl = {"name": "NVIDIA H100 NVL", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
    low = E.judge(50.0, "h2d", nvl)
    assert low.verdict == "low" and "nc80adis_h100_v5" in low.reason
    assert E.judge(50.0, "h2d", H200).verdict == "ok"
    assert E.judge(53.0, "h2d", nvl).verdict == "ok"
