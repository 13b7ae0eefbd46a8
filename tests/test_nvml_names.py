"""The NVML the code and its fake speak is nvidia-ml-py's: every function and constant the code names exists in
the installed ``pynvml`` (with the values the code copies), and the fake provides nothing the real module lacks
or spells with another value. A name looked up only as an older driver's fallback is listed with why."""

import inspect
import re
import sys
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_nvml  # noqa: E402

#: names the code looks up with getattr only where the newer one is missing, or that are not module attributes
FALLBACKS = {
    "nvmlDeviceGetCurrentClocksThrottleReasons": "read when a driver before R535 answers the new name FunctionNotFound",
    "nvmlReturn": "a field of c_nvmlFieldValue_t, read from nvmlDeviceGetFieldValues' values",
}


def _named() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "src" / "devbench").rglob("*.py"):
        names |= set(re.findall(r"\b(nvml[A-Z]\w*|NVML_[A-Z0-9_]+)\b", path.read_text()))
    return names


def test_every_nvml_name_the_code_uses_exists_in_nvidia_ml_py():
    named = _named()
    assert "nvmlDeviceGetNvLinkRemotePciInfo" in named  # the topology's link reader, by its real name
    missing = sorted(n for n in named if n not in FALLBACKS and not hasattr(pynvml, n))
    assert not missing, f"not in pynvml {getattr(pynvml, '__version__', '')}: {missing}"
    assert "nvmlReturn" in dict(pynvml.c_nvmlFieldValue_t._fields_)


def test_the_constants_the_code_copies_have_nvmls_values():
    from devbench.records import nvlink, topology

    assert topology.NVLINK_MAX_LINKS == pynvml.NVML_NVLINK_MAX_LINKS
    assert topology.NVLINK_DEVICE_SWITCH == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    assert nvlink.NVLINK_TX_KIB_FIELD == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    levels = {pynvml.NVML_TOPOLOGY_INTERNAL, pynvml.NVML_TOPOLOGY_SINGLE, pynvml.NVML_TOPOLOGY_MULTIPLE,
              pynvml.NVML_TOPOLOGY_HOSTBRIDGE, pynvml.NVML_TOPOLOGY_NODE, pynvml.NVML_TOPOLOGY_SYSTEM}  # fmt: skip
    assert set(topology.TOPOLOGY) == levels


def test_the_fake_provides_only_what_nvidia_ml_py_has_with_its_values():
    fake = fake_nvml.sxm8()
    provided = {n for n in dir(fake) if n.startswith(("nvml", "NVML_"))}
    provided |= {n for n in dir(fake_nvml) if n.startswith("NVML_")}
    assert "nvmlDeviceGetNvLinkRemotePciInfo" in provided
    absent = sorted(n for n in provided if not hasattr(pynvml, n))
    assert not absent, f"the fake has what pynvml lacks: {absent}"
    for name in sorted(n for n in provided if n.startswith("NVML_")):
        value = getattr(fake, name, getattr(fake_nvml, name, None))
        assert value == getattr(pynvml, name), f"{name}: the fake says {value}, pynvml {getattr(pynvml, name)}"
    for name in sorted(n for n in provided if n.startswith("nvml")):
        real, ours = pynvml.__dict__[name], getattr(fake, name)
        want = len([p for p in inspect.signature(real).parameters.values() if p.default is inspect.Parameter.empty])
        have = len(inspect.signature(ours).parameters)
        assert have >= want, f"{name}: pynvml takes {want} arguments, the fake {have}"


def test_the_clock_event_reasons_are_nvidia_ml_pys_and_none_is_dropped():
    """Every reason bit nvidia-ml-py names is named here with its value (a newer driver's BoardLimit and
    Reliability among them); a bit no one names is kept by its value."""
    from devbench.records import gpustate

    ours = {**gpustate.THROTTLE_BITS, **gpustate.OTHER_BITS}
    prefix = "nvmlClocksThrottleReason"
    real = {re.sub(r"(?<!^)(?=[A-Z])", "_", n[len(prefix):]).lower(): v for n, v in vars(pynvml).items()
            if n.startswith(prefix) and n[len(prefix):] not in ("All", "None", "UserDefinedClocks")}  # fmt: skip
    assert real == ours
    assert pynvml.nvmlClocksThrottleReasonAll == sum(ours.values())
    assert gpustate.throttling(0x4 | 0x200) == ["sw_power_cap", "board_limit"]
    assert gpustate.throttling(0x1 | 0x1000) == ["unknown_0x1000"] and "gpu_idle" in gpustate.reasons(0x1 | 0x1000)


def _constants_in(path: Path) -> dict[str, object]:
    """Every NVML_ name a test file sets to a literal (``NVML_A = 1``, ``NVML_A, NVML_B = 1, 2``), in any fake."""
    import ast

    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for name, value in zip(names, values, strict=False):
                if isinstance(name, ast.Name) and name.id.startswith("NVML_") and isinstance(value, ast.Constant):
                    out[f"{path.name}: {name.id}"] = (name.id, value.value)
    return out


def test_every_fake_in_the_tests_spells_nvml_constants_with_their_real_values():
    found = {k: v for p in sorted((ROOT / "tests").glob("*.py")) for k, v in _constants_in(p).items()}
    assert "test_gpustate.py: NVML_CLOCK_SM" in found and "test_devices.py: NVML_P2P_CAPS_INDEX_NVLINK" in found
    wrong = {k: (v, getattr(pynvml, n, "absent")) for k, (n, v) in found.items() if getattr(pynvml, n, None) != v}
    assert not wrong, f"fakes that disagree with pynvml (theirs, pynvml's): {wrong}"
