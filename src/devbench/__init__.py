"""devbench: how fast PyTorch computes and moves data on CPUs and GPUs (an asv suite)."""

import os as _os

# Count GPUs through NVML so that asking does not initialize the CUDA driver in a
# process that asv later forks (see devbench.engine.devices). Must precede any torch.cuda call.
_os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

__version__ = "0.1.0"
