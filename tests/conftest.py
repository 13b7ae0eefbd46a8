import pytest
import torch

from devbench.devices import num_gpus


def pytest_collection_modifyitems(config, items):
    if torch.backends.cuda.is_built() and num_gpus() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
