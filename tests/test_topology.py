"""Topology from NVML and the verdicts it gives, on simulated nodes (``fake_nvml``: the pynvml calls by name)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devbench.records import topology
from devbench.report.health import verdict
from devbench.worlds import fleet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_nvml import NODES  # noqa: E402


def _paths(node: str):
    nv = NODES[node]()
    return nv, topology.pair_paths(nv, [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())])


def _gpu(nv) -> dict:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    gen, width = h.pcie
    return {"name": nv.nvmlDeviceGetName(h), "pcie_gen": gen, "pcie_width": width, "pcie_gen_max": gen,
            "pcie_width_max": width}  # fmt: skip


def test_each_pairs_path_is_read_from_nvml():
    _, sxm = _paths("8x H100 SXM")
    assert len(sxm) == 56 and all(p.nvlinks == 18 and p.switched for p in sxm.values())
    assert sxm[(0, 1)].pcie == "PCIe switch" and sxm[(0, 2)].pcie == "NUMA node"
    assert sxm[(0, 4)].pcie == "across sockets"
    assert sxm[(0, 1)].label == "NVLink x18 via NVSwitch"
    _, pcie = _paths("8 PCIe GPUs, two sockets, two switches")
    assert all(p.nvlinks == 0 for p in pcie.values())
    assert pcie[(0, 3)].label == "PCIe switch" and pcie[(3, 4)].label == "across sockets"
    _, bridged = _paths("2 bridged H100 NVL")
    assert bridged[(0, 1)].nvlinks == 12 and not bridged[(0, 1)].switched and bridged[(0, 1)].label == "NVLink x12"
    _, unbridged = _paths("2 unbridged H100 NVL")
    assert unbridged[(0, 1)].nvlinks == 0 and unbridged[(0, 1)].label == "PCIe switch"
    _, broken = _paths("8x H100 SXM, GPU 3 with a link down")
    assert {p.nvlinks for k, p in broken.items() if 3 in k} == {17}
    assert {p.nvlinks for k, p in broken.items() if 3 not in k} == {18}


def _judge_pairs(figures, gpu, paths):
    """Each pair's copy judged as the report judges a PeerCopy: on its own NVML path."""
    return {pair: verdict("peer", gbps, gpu, pair=paths.get(pair)) for pair, gbps in figures.items()}


def _judge_ring(busbw, world, gpu, paths):
    """A ring's busbw judged as the report judges one: on the ring's slowest pair."""
    return verdict("busbw", busbw, gpu, pair=topology.slowest(topology.ring_paths(paths, world)))


def test_a_healthy_node_reads_healthy_and_a_broken_one_names_its_link_down():
    nv, healthy = _paths("8x H100 SXM")
    figures = {pair: 380.0 for pair in healthy}
    assert {h.verdict for h in _judge_pairs(figures, _gpu(nv), healthy).values()} == {"ok"}
    nv, broken = _paths("8x H100 SXM, GPU 3 with a link down")
    figures = {pair: 360.0 if 3 in pair else 380.0 for pair in broken}  # 17 of 18 links: a little slower
    verdicts = _judge_pairs(figures, _gpu(nv), broken)
    low = sorted(pair for pair, h in verdicts.items() if h.verdict == "low")
    assert low == sorted(pair for pair in broken if 3 in pair)  # GPU 3's pairs, and nothing else
    assert all("NVLink: 17 of 18 links active" in verdicts[pair].reason for pair in low)
    # the ring of 4 ranks passes GPU 3: its busbw is judged on that pair; a ring of 2 does not and reads ok
    ring4 = _judge_ring(370.0, 4, _gpu(nv), broken)
    assert ring4.verdict == "low" and "17 of 18 links" in ring4.reason
    assert _judge_ring(370.0, 2, _gpu(nv), broken).verdict == "ok"


def test_pcie_pairs_are_judged_against_pcie_and_a_pair_across_sockets_is_not_judged():
    nv, paths = _paths("8 PCIe GPUs, two sockets, two switches")
    figures = {pair: 24.0 for pair in paths}  # 76% of a Gen4 x16 link
    verdicts = _judge_pairs(figures, _gpu(nv), paths)
    assert {verdicts[p].verdict for p in paths if paths[p].pcie == "PCIe switch"} == {"ok"}
    across = [verdicts[p] for p in paths if paths[p].pcie == "across sockets"]
    assert across and {h.verdict for h in across} == {"unknown"} and "two sockets" in across[0].reason
    assert not [p for p, h in verdicts.items() if h.verdict == "low"]


@pytest.mark.parametrize("node, gbps, expected", [("2 bridged H100 NVL", 250.0, 300.0),
                                                  ("2 unbridged H100 NVL", 50.0, 63.0)])  # fmt: skip
def test_a_bridged_pair_is_judged_against_its_bridge_and_an_unbridged_one_against_pcie(node, gbps, expected):
    nv, paths = _paths(node)
    health = _judge_pairs({(0, 1): gbps}, _gpu(nv), paths)[(0, 1)]
    assert health.verdict == "ok" and health.share == pytest.approx(gbps / expected, rel=0.01)
    from devbench.records.expected import expected as want

    assert want("peer", _gpu(nv)).value is None  # without the topology an NVL pair is not assumed bridged


def test_the_fleet_flags_the_gpu_at_half_clock_and_not_two_that_share_a_switch():
    """The broken node's GPU 5 runs at half clock: its products read half. The copies are injected as timed one
    GPU at a time (``fleet.in_turns``, whose exclusivity ``tests/test_fleet.py`` holds): GPUs 0 and 1 behind one
    switch each read the switch's whole rate, and no one is flagged for sharing it."""
    ranks = []
    for r in range(8):
        figures = {"matmul_burst": 700.0 / (2 if r == 5 else 1), "matmul_sustained": 680.0 / (2 if r == 5 else 1),
                   "h2d_pinned": 53.0, "d2h_pinned": 53.0, "device_copy": 2900.0}  # fmt: skip
        ranks.append({"identity": {"rank": r}, "figures": figures})
    assert fleet.flagged_ranks(fleet.judge(ranks)) == [5]


def test_devbench_info_shows_each_pairs_path_from_nvml(monkeypatch):
    """``devices._nvml_info`` through the fake, as pynvml: the pairs' NVLinks and PCIe path in the record, and in
    ``devbench info``'s table."""
    from devbench.cli import format_info
    from devbench.engine import devices

    nv = NODES["8x H100 SXM, GPU 3 with a link down"]()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    cuda = [{"uuid": f"GPU-{i:08d}-fake", "pci_bus_id": nv.gpus[i].bus} for i in range(8)]
    info = devices._nvml_info(cuda)
    assert info["nvml"] == "ok" and info["pair_paths"]["0->1"]["label"] == "NVLink x18 via NVSwitch"
    assert info["pair_paths"]["3->4"]["nvlinks"] == 17 and info["pair_paths"]["3->4"]["pcie"] == "across sockets"
    record = {"host": {}, "torch": {"version": "2.13.0", "cuda_runtime": "13.0", "cudnn": None}, "driver": "580",
              "gpu_count": 2, "gpus": [], "notes": [], "peer_access": {"3->4": True},
              "pair_paths": info["pair_paths"]}  # fmt: skip
    monkeypatch.setattr("devbench.cli._rows", lambda r: [])
    assert "3->4: yes (NVLink x17 via NVSwitch; PCIe: across sockets)" in format_info(record)


def test_a_simulated_node_drives_the_plan_its_worlds_fit_and_nccl_runs_last():
    """The plan's GPUs from the fake node's NVML count: an 8-GPU node runs NCCL worlds of 2, 4 and 8 ranks in
    the last stage; the pair of NVL cards runs only the world of 2."""
    from devbench.gpu import plan as P

    bench = {"name": "bench_collectives.Collectives.track_busbw", "param_names": ["backend", "world"],
             "params": [["'gloo'", "'nccl'"], ["2", "4", "8"]], "plan_last": [{"backend": ["nccl"]}],
             "plan_needs": [{"where": {"backend": ["gloo"]}, "cores_from": "world"},
                            {"where": {"backend": ["nccl"]}, "gpus_from": "world"}]}  # fmt: skip
    for node, runs in (("8x H100 SXM", {"2", "4", "8"}), ("2 bridged H100 NVL", {"2"})):
        gpus = NODES[node]().nvmlDeviceGetCount()
        costs = P.Costs(launch_s=0.01, cuda_context_s=0.3, asv_call_s=7.5, gpus=gpus, cores=96)
        plan = P.make_plan({bench["name"]: bench}, lambda s: True, costs, 1000.0, 0.0)
        nccl = [p for p in plan.points if p.values[0] == "'nccl'"]
        assert {p.values[1] for p in nccl if p.state == "run"} == runs
        assert all(P.stage_of(p) == "last" for p in nccl if p.state == "run")


def test_under_cuda_visible_devices_info_reads_the_gpus_the_process_runs_on(monkeypatch):
    """CUDA_VISIBLE_DEVICES=2,3 on the broken node: CUDA's devices 0 and 1 are NVML's 2 and 3 (matched by UUID, never
    by index), so their facts and their pair's path are NVML's 2 and 3's, GPU 3's link down included."""
    from devbench.engine import devices

    nv = NODES["8x H100 SXM, GPU 3 with a link down"]()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    visible = [2, 3]
    cuda = [{"uuid": nv.nvmlDeviceGetUUID(nv.gpus[i]), "pci_bus_id": None} for i in visible]
    info = devices._nvml_info(cuda)
    assert [g["nvml_index"] for g in info["gpus"]] == visible
    _, every = _paths("8x H100 SXM, GPU 3 with a link down")
    seen, nvml = info["pair_paths"]["0->1"], every[(2, 3)]
    assert (seen["nvlinks"], seen["switched"], seen["pcie"]) == (nvml.nvlinks, nvml.switched, nvml.pcie)
    assert seen["nvlinks"] == 17 and every[(0, 1)].nvlinks == 18  # GPU 3's link down, seen as CUDA's device 1


def test_a_bridged_pair_with_a_link_down_reads_low_and_names_it():
    """NVML reports 11 of the bridge's 12 links active: the pair's copy reads low whatever it measured, through the
    code a real node runs (``topology.pair_paths`` on the NVML calls, then the one verdict)."""
    nv, paths = _paths("2 bridged H100 NVL, one link down")
    assert paths[(0, 1)].nvlinks == 11 and paths[(1, 0)].nvlinks == 11
    health = _judge_pairs({(0, 1): 280.0}, _gpu(nv), paths)[(0, 1)]  # 93% of the bridge's 300 GB/s
    assert health.verdict == "low" and "NVLink: 11 of 12 links active" in health.reason


def test_a_4_way_bridge_joins_each_pair_by_some_links_healthy_and_a_link_down_there_reads_low():
    """Each H200 NVL of a 4-way bridge reaches each other by 6 of its 18 links: a healthy node reads ok, each pair
    against 6 links' rate, and never "links down"; one link down is low on the GPUs that lost it."""
    nv, paths = _paths("4 H200 NVL, 4-way bridge")
    assert {(p.nvlinks, p.gpu_links, p.switched) for p in paths.values()} == {(6, 18, False)}
    per_pair = 450.0 * 6 / 18  # the product brief's 900 GB/s both ways over 18 links, 6 of them
    verdicts = _judge_pairs({pair: 0.9 * per_pair for pair in paths}, _gpu(nv), paths)
    assert {h.verdict for h in verdicts.values()} == {"ok"}
    assert all("6 of a healthy H200 NVL's 18 links" in h.reason for h in verdicts.values())
    nv, broken = _paths("4 H200 NVL, 4-way bridge, a 0-1 link down")
    verdicts = _judge_pairs({pair: 0.9 * per_pair for pair in broken}, _gpu(nv), broken)
    low = sorted(pair for pair, h in verdicts.items() if h.verdict == "low")
    assert low == sorted(pair for pair in broken if 0 in pair or 1 in pair)
    assert all("NVLink: 17 of 18 links active" in verdicts[pair].reason for pair in low)
    assert verdicts[(2, 3)].verdict == "ok"


def test_a_driver_that_does_not_say_what_is_at_a_links_end_still_reads_nvswitch(monkeypatch):
    """Without NVML's NVLink remote device type, an HGX node's links to its NVSwitches point at no GPU: read by NVML's
    NVLink peer-to-peer status, they are the switches' (18 links a pair), not PCIe; a link down still shows."""
    import fake_nvml

    def unsupported(self, h, link):
        raise fake_nvml.NVMLError("NVML_ERROR_FUNCTION_NOT_FOUND")

    monkeypatch.setattr(fake_nvml.FakeNVML, "nvmlDeviceGetNvLinkRemoteDeviceType", unsupported)
    _, sxm = _paths("8x H100 SXM")
    assert all(p.nvlinks == 18 and p.switched for p in sxm.values())
    _, broken = _paths("8x H100 SXM, GPU 3 with a link down")
    assert {p.nvlinks for k, p in broken.items() if 3 in k} == {17}
    _, bridged = _paths("2 bridged H100 NVL")  # a bridge's links point at the other GPU: direct, as before
    assert bridged[(0, 1)].nvlinks == 12 and not bridged[(0, 1)].switched
    _, pcie = _paths("8 PCIe GPUs, two sockets, two switches")
    assert all(p.nvlinks == 0 for p in pcie.values())
