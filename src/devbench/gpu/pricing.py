"""What a machine costs a time-boxed run, per process and per asv call: ``Costs``, measured by gpu-run's probe
(``devbench.gpu.costs.probe_costs``) or read from another machine's recorded plan.json. Nothing here imports torch
or asv; ``devbench.gpu.plan`` prices its points with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: what asv costs to start beside importing the suite (its command, environment and result files): ``asv_call_s``
#: is this plus two imports of the suite, its discovery's and its forkserver's (measured by gpu-run's probe)
ASV_START_S = 2.0


@dataclass(frozen=True)
class Costs:
    """What the machine costs per process and per asv call, measured before planning."""

    launch_s: float  # fork of asv's forkserver
    cuda_context_s: float  # first CUDA call of a process (0 without CUDA)
    asv_call_s: float  # one plain asv run: start, discovery, forkserver's import of the suite
    gpus: int  # CUDA devices visible (0: none, or a CPU-only torch)
    gpu_setup_s: float = 0.0  # a GPU point's set-up beyond SETUP_S: cuBLAS start-up and a warm product, probed
    cores: int = 0  # CPU cores (0: not known, no point is skipped for want of cores)
    #: a GPU workload's float64 check, paid once per run by the first process that sets the workload up
    #: (``prepare.check_once``: gpu-run hands its processes one record of what was checked). 0 where the
    #: record of another machine has no such figure: there ``gpu_setup_s`` holds the check as well.
    gpu_check_s: float = 0.0
    #: the first GPU's name as torch gives it ("NVIDIA H200")
    gpu_model: str = ""
    #: whether earlier searches found best shapes on that model
    #: (``devbench.records.expected.known_shapes``: gpu-run fills
    #: it): the achievable search then times those, their neighbours and the squares, not the whole grid
    model_searched: bool = False
    #: ``device:dtype`` of the achievable searches this machine's user cache holds for the run (the probe:
    #: ``devbench.workloads.achievable.cached_searches``): their set-up cache reads them, priced ``cached_s``
    cached_searches: tuple[str, ...] = ()
    #: ``(device:dtype, seconds)`` of the CPU searches a run would make, as this host is expected to take them
    #: (the probe: ``devbench.workloads.achievable.expected_cpu_searches_s``): priced so, at most their bound
    expected_searches: tuple[tuple[str, float], ...] = ()
    #: ``(dtype, FLOP/s)`` of an n=1,024 product on this host's CPU, per dtype it searches (the probe:
    #: ``devbench.workloads.achievable.cpu_rates``): a CPU product's block lasts at least one call
    #: (``declared.call_s``), at n=4,096 seconds on a small host where a block is priced a tenth of one
    cpu_flops: tuple[tuple[str, float], ...] = ()
    #: selectors of the figures that machine's recorded run held wider than 0.5% (``recorded.imprecise_from``): the
    #: measuring process samples them to their class's cap, and they are priced so
    imprecise: tuple[str, ...] = ()
    #: seconds the CUDA tests and validate took where a recorded run gives them (``gpu-run --costs-from``), else 0:
    #: gpu-run holds its defaults back for them
    tests_s: float = 0.0
    validate_s: float = 0.0
    #: ``(label, seconds)`` of each figure that recorded validate measured (its log beside the plan.json): a run
    #: that validates fewer (``--gpu-only``) holds back less
    validate_each: tuple[tuple[str, float], ...] = ()
    #: seconds that recorded run spent before its plan (its probe and listing; ``gpu-run --costs-from``), else None:
    #: a plan for that machine charges its budget those, not what this machine took to list the suite
    planned_after_s: float | None = None

    @property
    def import_s(self) -> float:
        """An interpreter importing the suite: one of the two imports ``asv_call_s`` holds beside asv's own start."""
        return max(0.0, self.asv_call_s - ASV_START_S) / 2

    @property
    def stage_call_s(self) -> float:
        """One asv call of a gpu-run stage: ``asv_call_s`` but its discovery's import (gpu-run's listing serves)."""
        return self.asv_call_s - self.import_s

    @property
    def sweep_start_s(self) -> float:
        """A measuring process's start: an import of the suite, its CUDA context and a GPU set-up's cuBLAS start."""
        return self.import_s + self.cuda_context_s + self.gpu_setup_s

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Costs:
        """Costs as ``to_json`` wrote them in a plan.json (another machine's, for ``gpu-run --plan-only``)."""
        known = {f for f in cls.__dataclass_fields__}
        missing = {"launch_s", "cuda_context_s", "asv_call_s", "gpus"} - set(record)
        if missing:
            raise ValueError(f"the costs record lacks {sorted(missing)}")
        fields = {k: v for k, v in record.items() if k in known}
        for name, field in cls.__dataclass_fields__.items():  # a number where the field is one, a name where a name
            value, kind = fields.get(name), field.type
            if value is None or kind not in ("float", "int", "str", "bool", "float | None"):
                continue
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if (kind in ("float", "int", "float | None") and not number or kind == "int" and not isinstance(value, int)
                    or kind == "str" and not isinstance(value, str) or kind == "bool" and not isinstance(value, bool)):
                raise ValueError(f"its costs' {name!r} is {value!r}, not a{'n' if kind == 'int' else ''} {kind}")
        for name in ("cached_searches", "imprecise"):
            if name in fields:
                fields[name] = tuple(fields[name])
        if "expected_searches" in fields:
            fields["expected_searches"] = searches_of(fields["expected_searches"])
        for name in ("validate_each", "cpu_flops"):
            if name in fields:
                fields[name] = searches_of(fields[name])
        return cls(**fields)


def searches_of(value: Any) -> tuple[tuple[str, float], ...]:
    """``(name, seconds)`` pairs (``Costs.expected_searches``, ``validate_each``) from a mapping or a plan.json."""
    pairs = value.items() if isinstance(value, dict) else value
    return tuple(sorted((str(k), float(v)) for k, v in pairs))
