import pytest
import torch

from devbench.workloads.model import (
    MODEL_INPUTS,
    TrainStep,
    build_model,
    check_forward,
    check_state,
    load_state,
    parameter_model,
    prepare_batch,
    save_state,
)

CPU = torch.device("cpu")


@pytest.mark.parametrize("name", list(MODEL_INPUTS))
def test_models_build_and_forward(name):
    net = build_model(name, CPU)
    x = torch.randn(4, MODEL_INPUTS[name])
    assert check_forward(net, x).shape[0] == 4


def test_check_forward_catches_wrong_output():
    net = build_model("lazy_linear", CPU)

    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = net

        def forward(self, x):
            return self.inner(x) + (1.0 if x.dtype == torch.float32 else 0.0)

    with pytest.raises(AssertionError, match="float64"):
        check_forward(Broken(), torch.randn(4, 20))


def test_lazy_model_moves_to_meta():
    net = build_model("lazy_linear", torch.device("meta"))
    assert net[0].weight.device.type == "meta" and net[0].weight.shape == (1, 20)


def test_prepare_batch_moves_all():
    out = prepare_batch([torch.ones(2), torch.zeros(3)], torch.device("meta"))
    assert [t.device.type for t in out] == ["meta", "meta"]


@pytest.mark.parametrize("name", list(MODEL_INPUTS))
def test_train_step_learns(name):
    step = TrainStep(name, CPU, pinned=False)
    step.check()


def test_parameter_counts():
    assert sum(p.numel() for p in parameter_model("1M").parameters()) == 1_001_000
    with pytest.raises(ValueError, match="3M"):
        parameter_model("3M")


def test_state_roundtrip(tmp_path):
    model = parameter_model("1M")
    save_state(model, tmp_path / "m.pt")
    loaded = load_state(tmp_path / "m.pt", CPU)
    check_state(loaded, model, CPU)
    loaded["weight"][0, 0] += 1
    with pytest.raises(AssertionError, match="weight"):
        check_state(loaded, model, CPU)


@pytest.mark.cuda
def test_state_roundtrip_gpu(tmp_path):
    dev = torch.device("cuda")
    model = parameter_model("1M").to(dev)
    save_state(model, tmp_path / "m.pt")
    check_state(load_state(tmp_path / "m.pt", dev), model, dev)
    TrainStep("mlp", dev, pinned=True).check()


def test_prefetching_needs_cuda_and_says_so():
    from devbench.workloads.model import PrefetchedTrainStep, prefetch_reason

    assert "CUDA" in prefetch_reason(CPU)
    with pytest.raises(ValueError, match="copy stream needs a CUDA device"):
        PrefetchedTrainStep("mlp", CPU)


@pytest.mark.cuda
def test_prefetched_step_trains_on_the_batch_it_copied():
    from devbench.workloads.model import PrefetchedTrainStep

    step = PrefetchedTrainStep("mlp", torch.device("cuda", 0))
    step.check()
    assert step.copy_stream != torch.cuda.current_stream(step.device)  # made once, beside the compute stream
