import json

import pytest
import torch
from torch import nn

from devbench import cli
from devbench.engine import devices
from devbench.engine.devices import (
    CrossDeviceError,
    check_same_device,
    cpu,
    describe,
    gpu,
    move,
    try_all_gpus,
    try_gpu,
)


def test_cpu_and_gpu_names():
    assert cpu() == torch.device("cpu")
    assert gpu() == torch.device("cuda", 0)
    assert gpu(1) == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="-1"):
        gpu(-1)


@pytest.mark.parametrize("count, i, expected", [(0, 0, "cpu"), (1, 0, "cuda:0"), (1, 1, "cpu"), (2, 1, "cuda:1")])
def test_try_gpu_falls_back_to_cpu(monkeypatch, count, i, expected):
    monkeypatch.setattr(devices, "num_gpus", lambda: count)
    assert try_gpu(i) == torch.device(expected)


def test_try_all_gpus(monkeypatch):
    monkeypatch.setattr(devices, "num_gpus", lambda: 0)
    assert try_all_gpus() == [cpu()]
    monkeypatch.setattr(devices, "num_gpus", lambda: 2)
    assert try_all_gpus() == [gpu(0), gpu(1)]


def test_this_machine_without_gpu_gives_cpu():
    if devices.num_gpus():
        pytest.skip("this machine has a GPU")
    assert try_gpu() == cpu()
    assert try_all_gpus() == [cpu()]


def test_same_device_move_returns_same_tensor():
    x = torch.arange(6.0).reshape(2, 3)
    assert move(x, "cpu") is x
    assert move(x, cpu()) is x


def test_move_to_other_device_copies():
    x = torch.arange(6.0)
    y = move(x, "meta")
    assert y is not x
    assert y.device.type == "meta" and y.shape == x.shape
    assert move(y, "meta") is y


def test_module_move_same_object_and_in_place():
    net = nn.Sequential(nn.Linear(3, 2))
    assert move(net, "cpu") is net
    moved = move(net, "meta")
    assert moved is net  # nn.Module.to moves in place
    assert net[0].weight.device.type == "meta"


def test_move_rejects_other_types():
    with pytest.raises(TypeError, match="list"):
        move([1, 2], "cpu")


def test_cross_device_error_names_both_devices():
    x = torch.ones(2, 3)
    y = torch.ones(2, 3, device="meta")
    with pytest.raises(CrossDeviceError) as err:
        check_same_device(x, y, op="add")
    msg = str(err.value)
    assert "add" in msg and "cpu" in msg and "meta" in msg
    assert "argument 1" in msg


def test_same_device_check_returns_device():
    assert check_same_device(torch.ones(1), torch.zeros(2)) == cpu()
    with pytest.raises(ValueError):
        check_same_device()


def test_describe_without_gpu_says_so():
    rec = describe()
    assert rec["host"]["cpu_count"] >= 1
    assert rec["torch"]["version"] == torch.__version__
    if rec["gpu_count"] == 0:
        assert rec["gpus"] == []
        assert rec["notes"], "a record without GPUs must say why"
    json.dumps(rec)  # serializable


def test_describe_never_raises_on_broken_driver(monkeypatch):
    def broken():
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(devices, "num_gpus", broken)
    rec = describe()
    assert rec["gpu_count"] == 0
    assert any("driver exploded" in n for n in rec["notes"])


def test_describe_reports_gpus_from_torch(monkeypatch):
    """The GPU branch of describe(), fed by fake device properties."""

    class Props:
        name, total_memory, multi_processor_count, major, minor = "NVIDIA H100 80GB HBM3", 80 * 2**30, 132, 9, 0
        uuid, pci_domain_id, pci_bus_id, pci_device_id = "0b42632a-bc5c", 0, 0x3B, 0

    monkeypatch.setattr(devices, "num_gpus", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda i, j: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    monkeypatch.setattr(devices, "_nvml_info", lambda n: {"nvml": "unavailable: test"})
    rec = describe()
    assert rec["gpu_count"] == 2
    assert rec["gpus"][1] == {
        "index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_gib": 80.0,
        "sm_count": 132,
        "compute_capability": "9.0",
        "uuid": "GPU-0b42632a-bc5c",
        "pci_bus_id": "00000000:3B:00.0",
    }
    assert rec["peer_access"] == {"0->1": True, "1->0": True}
    assert any("NVML" in n for n in rec["notes"])
    assert devices.gpu_summary(rec)["gpu"] == "2 x NVIDIA H100 80GB HBM3"
    table = cli.format_info(rec)
    assert "NVIDIA H100 80GB HBM3" in table and "0->1: yes" in table
    assert "    GPU-0b42632a-bc5c, PCI 00000000:3B:00.0" in table  # the board CUDA's device 1 is
    # a link trained below its maximum is named, with what its copies are judged against
    rec["gpus"][1].update(pcie_gen=4, pcie_width=16, pcie_gen_max=5, pcie_width_max=16)
    table = cli.format_info(rec)
    assert "gen4 x16 (max gen5 x16)" in table
    assert "note: GPU 1: PCIe link trained at Gen4 x16, below its Gen5 x16" in table


def test_info_command_table(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and torch.__version__ in out
    assert "cpu" in out


def test_info_command_json(capsys):
    assert cli.main(["info", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["torch"]["version"] == torch.__version__
    assert "gpu_count" in rec


@pytest.mark.cuda
def test_gpu_same_device_identity():
    z = torch.ones(2, 3, device=gpu(0))
    assert z.cuda(0) is z
    assert move(z, gpu(0)) is z


def test_as_device_gives_cuda_an_index_and_leaves_others():
    assert devices.as_device("cpu") == torch.device("cpu")
    assert devices.as_device("meta") == torch.device("meta")
    assert devices.as_device(1) == torch.device("cuda:1")
    assert devices.as_device("cuda:1") == torch.device("cuda", 1)


class _FakePynvml:
    """Three GPUs in NVML's order c, a, b; CUDA sees a and b (in that order). a<->b over NVLink."""

    NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK = 2, 0  # nvidia-ml-py's values

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return b"580.1"

    def nvmlDeviceGetCount(self):
        return 3

    def nvmlDeviceGetHandleByIndex(self, i):
        return "cab"[i]

    def nvmlDeviceGetIndex(self, h):
        return "cab".index(h)

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetPciInfo(self, h):
        raise RuntimeError("no PCI info")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return {"a": 5, "b": 4, "c": 3}[h]

    nvmlDeviceGetMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    nvmlDeviceGetMaxPcieLinkWidth = nvmlDeviceGetCurrPcieLinkWidth

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        if "c" in (a, b):
            raise RuntimeError("not supported")
        return 0


def test_nvml_facts_follow_the_cuda_device_not_nvmls_index(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", _FakePynvml())
    cuda = [{"uuid": "GPU-a", "pci_bus_id": None}, {"uuid": "GPU-b", "pci_bus_id": None}]
    info = devices._nvml_info(cuda)
    assert info["driver"] == "580.1"
    assert [(g["nvml_index"], g["pcie_gen"]) for g in info["gpus"]] == [(1, 5), (2, 4)]
    assert info["nvlink_peers"] == {"0->1": True, "1->0": True}
    missing = devices._nvml_info([{"uuid": "GPU-z", "pci_bus_id": None}])
    assert missing["gpus"] == [{"nvml_index": None}] and missing["nvlink_peers"] == {}
