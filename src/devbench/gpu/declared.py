"""What a benchmark class declares for a time-boxed run, read from asv's listing of it: its headline points, its
late ones, the GPUs and cores a point needs, its set-up caches' units, its declared skips, and what one of its
figures samples (with the defaults where it declares nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devbench.engine import precision

#: seconds of a combination's set-up when its class declares none
SETUP_S = 0.3

#: seconds of one ``track_`` figure that is not swept, when its class declares none: 11 blocks of 0.1 s and their
#: sizing, at most what it takes (a figure the stop rule ends at 8 takes less: ``precision.TRIMMED_SAMPLES``)
TRACK_S = 1.3

#: the same on a GPU, where a precise figure stops at 8 blocks (``precision.MIN_SAMPLES``)
TRACK_GPU_S = 1.0

#: seconds a swept figure spends sizing its blocks before the first (``measure.one_call_s``'s batches)
SIZING_S = 0.02

#: parameter values that need a CUDA device (as ``devbench.compare.selection``)
GPU_VALUES = ("'cuda'", "'nccl'")


def _matches(bench: dict[str, Any], values: tuple[str, ...], where: dict[str, Any], what: str) -> bool:
    names = list(bench.get("param_names", []))
    for name, wanted in where.items():
        if name not in names:
            raise ValueError(f"{bench['name']}: {what} names {name!r}, which is not a parameter ({names})")
        if values[names.index(name)] not in {repr(w) for w in wanted}:
            return False
    return True


def is_late(bench: dict[str, Any], values: tuple[str, ...]) -> bool:
    """Whether the class's ``plan_last`` (True, or ``[{param: [values]}, ...]`` as ``headline``) puts the point
    in the last stage: its own measurement is long (a search) or can hang (an NCCL world)."""
    late = bench.get("plan_last")
    if not late:
        return False
    if late is True:
        return True
    return any(_matches(bench, values, entry, "plan_last") for entry in (late if isinstance(late, list) else [late]))


def is_headline(bench: dict[str, Any], values: tuple[str, ...]) -> bool:
    """Whether the point matches one of the class's ``headline`` entries (each ``{param: [values]}``, every
    named parameter at one of its values). No ``headline``: every point is one."""
    headline = bench.get("headline")
    if not headline:
        return True
    entries = headline if isinstance(headline, list) else [headline]
    return any(_matches(bench, values, entry, "headline") for entry in entries)


def gpus_needed(bench: dict[str, Any], values: tuple[str, ...]) -> int:
    """GPUs the point needs: 1 for a ``'cuda'`` or ``'nccl'`` value, or what the class's ``plan_gpus`` says
    (a number for every point, or ``{param: {value: gpus}}``)."""
    need = 1 if any(v in GPU_VALUES for v in values) else 0
    declared = bench.get("plan_gpus", 0)
    if isinstance(declared, int | float):
        return max(need, int(declared))
    names = list(bench.get("param_names", []))
    for name, by_value in declared.items():
        if name not in names:
            raise ValueError(f"{bench['name']}: plan_gpus names {name!r}, which is not a parameter ({names})")
        for value, gpus in by_value.items():
            if values[names.index(name)] == repr(value):
                need = max(need, int(gpus))
    return need


def _value(bench: dict[str, Any], values: tuple[str, ...], name: str, what: str) -> str:
    names = list(bench.get("param_names", []))
    if name not in names:
        raise ValueError(f"{bench['name']}: {what} names {name!r}, which is not a parameter ({names})")
    return values[names.index(name)]


def needs(bench: dict[str, Any], values: tuple[str, ...]) -> tuple[int, int]:
    """(GPUs, cores) the point needs: ``gpus_needed``, and the class's ``plan_needs`` entries, each
    ``{"where": {param: [values]}, "gpus_from": param}`` or ``"cores_from"``: a matching point needs as many
    GPUs (cores) as that param's value (a world of N ranks, one per GPU or core)."""
    gpus, cores = gpus_needed(bench, values), 0
    for entry in bench.get("plan_needs", []) or []:
        if not _matches(bench, values, entry.get("where", {}), "plan_needs"):
            continue
        if "gpus_from" in entry:
            gpus = max(gpus, int(_value(bench, values, entry["gpus_from"], "plan_needs")))
        if "cores_from" in entry:
            cores = max(cores, int(_value(bench, values, entry["cores_from"], "plan_needs")))
    return gpus, cores


def cache_units(bench: dict[str, Any], values: tuple[str, ...], searched: bool = False, cached: tuple[str, ...] = (),
                expected: dict[str, float] | None = None) -> tuple[tuple[str, ...], float] | None:  # fmt: skip
    """The set-up cache unit this point needs, with its seconds: ``None`` where the class's ``plan_cache_s``
    is one figure for the module (or absent); else the point's values of the ``per`` params. ``known_s``: the
    seconds for a GPU point where ``searched`` (``Costs.model_searched``: the achievable search times the best
    shapes known for the model and their neighbours, not the whole grid); ``cached_s``: for a unit ``cached``
    names as ``device:dtype`` (``Costs.cached_searches``: the set-up cache reads an earlier search); ``expected``:
    seconds by ``device:dtype`` that a unit is expected to take on this machine (``Costs.expected_searches``),
    priced so where that is below the class's figure (its time bound)."""
    declared = bench.get("plan_cache_s")
    if not isinstance(declared, dict):
        return None
    per = list(declared.get("per", []))
    key = tuple(_value(bench, values, name, "plan_cache_s") for name in per)
    seconds = declared.get("s", 0.0)
    if "known_s" in declared and "'cuda'" in key and searched:
        seconds = declared["known_s"]
    if "cached_s" in declared and ":".join(k.strip("'") for k in key) in cached:  # read from the user's cache
        seconds = declared["cached_s"]
    if isinstance(seconds, dict):
        first = key[0].strip("'") if key else ""
        if first not in seconds:
            raise ValueError(f"{bench['name']}: plan_cache_s has no seconds for {per[0]}={first} ({sorted(seconds)})")
        seconds = seconds[first]
    name = ":".join(k.strip("'") for k in key)
    if expected and name in expected and name not in cached:
        seconds = min(float(seconds), float(expected[name]))
    return (bench["name"].rsplit(".", 1)[0], *key), float(seconds)


def declared_skip(bench: dict[str, Any], values: tuple[str, ...]) -> str | None:
    """The reason of the class's first ``skips`` entry the point matches (``swept.declared_skip``), or None."""
    for entry in bench.get("skips", []) or []:
        if _matches(bench, values, entry.get("where", {}), "skips"):
            return str(entry.get("reason", "skipped"))
    return None


def declared_plan_s(bench: dict[str, Any], values: tuple[str, ...]) -> float | None:
    """The class's ``plan_s`` for the point at ``values``: one figure, or ``{"per": param, "s": {value: seconds}}``
    where its figures take very different times (an achievable product's brief ``best``, its seconds-long
    ``sustained``); None where it declares none."""
    declared = bench.get("plan_s")
    if declared is None:
        return None
    if not isinstance(declared, dict):
        return float(declared)
    per = str(declared.get("per", ""))
    value = _value(bench, values, per, "plan_s").strip("'\"")
    seconds = declared.get("s", {})
    if value not in seconds:
        raise ValueError(f"{bench['name']}: plan_s has no seconds for {per}={value} ({sorted(seconds)})")
    return float(seconds[value])


def sample_s(bench: dict[str, Any], gpu: bool = False, values: tuple[str, ...] = ()) -> float:
    """Seconds one round of the benchmark spends sampling (its set-up and launch apart); ``gpu``: a GPU point."""
    kind = bench["name"].rsplit(".", 1)[-1].split("_", 1)[0]
    if kind != "time":
        declared = declared_plan_s(bench, values)
        return declared if declared is not None else TRACK_GPU_S if gpu else TRACK_S
    repeat = bench.get("repeat", 0)
    sample_time = float(bench.get("sample_time", 0.01))
    if isinstance(repeat, list | tuple) and len(repeat) == 3:
        most, cap = int(repeat[1]), float(repeat[2])
    elif repeat:
        most, cap = int(repeat), float(bench.get("timeout", 60.0))
    else:  # asv's default for repeat = 0
        most, cap = 10, 20.0
    warmup = float(bench.get("warmup_time", 0.1))
    return max(0.0, warmup) + min(cap, most * sample_time)


def call_s(bench: dict[str, Any], values: tuple[str, ...], cpu_flops: dict[str, float],
           call_flop: Callable[[str, dict[str, str]], float | None] | None = None) -> float:
    """Seconds one call of a CPU point takes here, where ``call_flop`` (``spec.call_flop``, which gpu-run hands the
    plan) gives its FLOP: those over the rate this host's CPU reached at n=1,024 in its dtype (``Costs.cpu_flops``);
    0 for a GPU point, another figure, or a dtype without a rate. A block lasts at least one call: at n=4,096 a
    float32 product took 0.4-2.7 s on the 2-vCPU VM, where a block is priced 0.1 s, and its stage ran at twice its
    estimate."""
    if call_flop is None or not cpu_flops:
        return 0.0
    got = dict(zip(bench.get("param_names", []), (v.strip("'\"") for v in values), strict=True))
    flop, rate = call_flop(bench["name"], got), cpu_flops.get(got.get("dtype", ""))
    return flop / rate if flop and rate and got.get("device") == "cpu" else 0.0


def swept_sample_s(bench: dict[str, Any], gpu: bool = True, precise: bool = True,
                   values: tuple[str, ...] = (), call: float = 0.0) -> float:  # fmt: skip
    """Seconds a swept class's figure samples (``devbench.engine.precision``): the class's ``plan_s``,
    else blocks of its
    ``sample_time``: on a GPU ``MIN_SAMPLES`` of them where the class sets no cap (precise), else, and on the CPU
    (a shared host rarely gives 0.5%), the cap: seconds or blocks, whichever ends later, or ``MIN_SAMPLES``
    blocks where that ends before asv's interval can narrow (``precision.capped_samples``); a host-clock figure on
    the CPU at least asv's ``repeat[2]`` (``suite.waited``). Not ``precise``: a recorded run held it wider than
    0.5% (``Costs.imprecise``), so it samples to its cap on a GPU too. ``call``: one call's seconds where known
    (``call_s``): a block lasts at least one."""
    if "plan_s" in bench:
        return float(declared_plan_s(bench, values))
    block = max(float(bench.get("sample_time", 0.05)), call)
    cap = bench.get("sample_cap")
    if gpu and not cap and precise:
        return SIZING_S + precision.MIN_SAMPLES * block
    seconds, blocks = (float(cap[0]), int(cap[1])) if cap else precision.DEFAULT_CAP
    if not gpu and bench.get("unit") == "seconds":  # a host-clock figure samples what asv gave a time_ one
        repeat = bench.get("repeat")
        seconds = max(seconds, float(repeat[2]) if isinstance(repeat, list | tuple) and len(repeat) == 3 else 2.0)
    # the cap's end, seconds or blocks; one that ends before asv's interval can narrow, MIN_SAMPLES blocks
    return SIZING_S + precision.capped_samples(seconds, blocks, block) * block
