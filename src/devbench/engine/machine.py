"""Record this machine for asv, with the accelerator fields asv does not know about.

``asv machine --yes`` stores the host (os, arch, cpu, num_cpu, ram) in
``~/.asv-machine.json``; asv copies every key of that entry into each result's
``params`` and into ``machine.json``, so the GPU fields added here travel with the
results into ``asv publish`` and ``devbench report``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from devbench.engine.devices import describe, gpu_summary


def record_machine(machine: str | None = None, config: str | None = None) -> dict[str, Any]:
    """Run ``asv machine --yes`` and add ``gpu``, ``gpu_count``, ``cuda``, ``driver``.

    Returns the stored machine entry. Raises ``RuntimeError`` when asv fails.
    """
    from asv.machine import Machine, MachineCollection

    defaults = Machine.get_defaults()
    name = machine or defaults["machine"]
    cmd = [sys.executable, "-m", "asv", "machine", "--yes"]
    if config:
        cmd += ["--config", config]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stderr or proc.stdout}")
    if name == defaults["machine"]:
        entry = dict(MachineCollection.load(name))
    else:
        # `asv machine --yes --machine NAME` would store the name alone (asv asks nothing
        # once a field is given and drops values equal to its defaults): store asv's own
        # defaults under NAME instead.
        entry = {**defaults, "machine": name}
    entry.update(gpu_summary(describe()))
    MachineCollection.save(name, entry)
    return entry
