"""How the plan prices what the measuring process runs (``devbench.gpu.plan``, ``devbench.engine.sweep``), and the
achievable search that starts from a model's known best shape."""

import dataclasses

import pytest
import torch

from devbench.engine import precision
from devbench.gpu import plan as P
from devbench.records import expected
from devbench.workloads import achievable as A

COSTS = P.Costs(launch_s=0.01, cuda_context_s=0.3, asv_call_s=6.0, gpus=1, gpu_setup_s=0.8)


def _bench(name, params, names, **attrs):
    return {"name": name, "params": [[repr(v) for v in p] for p in params], "param_names": names, **attrs}


def _swept():
    grid = ([["cpu", "cuda"], [64, 1024]], ["device", "n"])
    return {f"bench_m.Mat.{m}": _bench(f"bench_m.Mat.{m}", *grid, swept=True, sample_time=0.1)
            for m in ("track_time", "track_tflops")}  # fmt: skip


def test_a_swept_gpu_point_is_a_fork_its_workload_built_once_and_one_measuring_process_started():
    plan = P.make_plan(_swept(), lambda s: True, COSTS, budget_s=1000, reserve_s=0)
    gpu = [p for p in plan.points if "'cuda'" in p.values]
    cpu = [p for p in plan.points if "'cpu'" in p.values]
    figure = P.SIZING_S + precision.MIN_SAMPLES * 0.1
    assert all(p.swept and p.estimate_s == pytest.approx(COSTS.launch_s + figure) for p in gpu)
    assert not any(p.swept for p in cpu)  # the CPU's points keep their processes
    # two workloads (n=64, n=1024), each built once for its two figures, and one measuring process
    cpu_s = sum(p.estimate_s for p in cpu)
    expected_s = COSTS.stage_call_s + COSTS.sweep_start_s + 2 * P.SETUP_S + 4 * (COSTS.launch_s + figure) + cpu_s
    assert plan.estimate_s() == pytest.approx(expected_s)
    assert COSTS.sweep_start_s == pytest.approx((6.0 - P.ASV_START_S) / 2 + 0.3 + 0.8)  # no asv of its own
    # without a GPU no measuring process is priced
    none = P.make_plan(_swept(), lambda s: True, P.Costs(launch_s=0.01, cuda_context_s=0.0, asv_call_s=6.0, gpus=0),
                       budget_s=1000, reserve_s=0)  # fmt: skip
    assert not any(p.swept for p in none.points)


def test_the_stages_before_the_tests_share_one_measuring_process_and_a_held_one_is_not_priced_again():
    listing = _swept()
    for bench in listing.values():
        bench["headline"] = [{"n": [64]}]  # n=64 in the headline stage, n=1024 in the rest
    plan = P.make_plan(listing, lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    stages = {P.stage_of(p) for p in plan.kept()}
    assert stages == {"headline", "rest"}
    figure = P.SIZING_S + precision.MIN_SAMPLES * 0.1
    points_s = 2 * P.SETUP_S + 4 * (COSTS.launch_s + figure)
    # two asv calls, one measuring process start (gpu-run holds it over both: sweep.held)
    assert plan.estimate_s() == pytest.approx(2 * COSTS.stage_call_s + COSTS.sweep_start_s + points_s)
    rest = [p for p in plan.kept() if P.stage_of(p) == "rest"]
    alone = plan.estimate_s(points=rest, group=lambda p: "rest")
    plan.sweep_up = True  # the headline stage started it and it is held: the rest pays none
    assert alone - plan.estimate_s(points=rest, group=lambda p: "rest") == pytest.approx(COSTS.sweep_start_s)


def test_the_plan_says_what_its_estimate_pays_for_and_which_benchmark_builds_each_workload():
    """``estimate_parts`` adds up to ``estimate_s``; each workload's build is named by the first of its figures that
    builds it, and the plan's table and its "of which" line show them."""
    from devbench.gpu import plantext

    listing = _swept()
    for bench in listing.values():
        bench["headline"] = [{"n": [64]}]
    plan = P.make_plan(listing, lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    parts, builds = plan.estimate_parts()
    assert sum(parts.values()) == pytest.approx(plan.estimate_s()) and set(parts) == set(P.PARTS)
    assert parts["asv calls"] == pytest.approx(2 * COSTS.stage_call_s)
    assert parts["measuring process"] == pytest.approx(COSTS.sweep_start_s)
    figure = P.SIZING_S + precision.MIN_SAMPLES * 0.1
    assert parts["sampling"] == pytest.approx(4 * (COSTS.launch_s + figure))
    first = min(listing)  # the figures run in name order: track_tflops builds, track_time reads its build
    assert builds == {first: pytest.approx(2 * P.SETUP_S)} and parts["builds"] == pytest.approx(2 * P.SETUP_S)
    rows = {r["benchmark"]: r for r in plantext.summary_rows(plan)}
    assert rows[first]["build_s"] == pytest.approx(2 * P.SETUP_S) and rows[max(listing)]["build_s"] == 0.0
    text = plantext.format_plan(plan)
    assert "of which: asv calls " in text and f"builds {2 * P.SETUP_S:.1f} s" in text


def test_a_cpu_products_block_is_priced_at_least_one_call_at_this_hosts_rate_for_its_dtype():
    """A square product's CPU block lasts at least one call: its FLOP over what the probe timed this CPU's n=1,024
    product of that dtype at (``Costs.cpu_flops``). A GPU point, a dtype without a rate, a small product and any
    other figure keep their blocks of ``sample_time``; the rates travel in plan.json and come back as they were."""
    import json

    from devbench.records import spec

    grid = ([["cpu", "cuda"], ["float32", "float16"], [64, 4096]], ["device", "dtype", "n"])
    listing = {name: _bench(name, *grid, swept=True, sample_time=0.1, unit="TFLOP/s")
               for name in (spec.MATMUL_TFLOPS.benchmark, "bench_m.Other.track_tflops")}  # fmt: skip
    rate = 5e10  # 50 GFLOP/s: a 4,096 product is 2.75 s
    costs = P.Costs(0.01, 0.3, 5.0, 1, cpu_flops=P.searches_of({"float32": rate}))
    by = {p.selector: p for p in P.make_plan(listing, lambda s: True, costs, 1000, 0, sweep_cpu=True,
                                             call_flop=spec.call_flop).points}  # fmt: skip
    assert spec.call_flop(spec.MATMUL_TIME.benchmark, {"n": "64"}) == spec.matmul_flops(64)
    assert spec.call_flop("bench_m.Other.track_tflops", {"n": "64"}) is None

    def sampled(name, *values):
        return by[f"{name}({', '.join(repr(v) for v in values)})"].estimate_s - costs.launch_s

    blocks = lambda block: P.SIZING_S + precision.capped_samples(*precision.DEFAULT_CAP, block) * block  # noqa: E731
    square = spec.MATMUL_TFLOPS.benchmark
    assert sampled(square, "cpu", "float32", 4096) == pytest.approx(blocks(spec.matmul_flops(4096) / rate))
    assert sampled(square, "cpu", "float32", 64) == pytest.approx(blocks(0.1))  # a call far under a block
    assert sampled(square, "cpu", "float16", 4096) == pytest.approx(blocks(0.1))  # no rate for its dtype
    assert sampled("bench_m.Other.track_tflops", "cpu", "float32", 4096) == pytest.approx(blocks(0.1))
    assert sampled(square, "cuda", "float32", 4096) == pytest.approx(P.SIZING_S + precision.MIN_SAMPLES * 0.1)
    assert P.Costs.from_record(json.loads(json.dumps(costs.__dict__))) == costs


def test_a_class_cap_prices_a_host_bound_figure_at_its_cap():
    """A capped figure is priced at its cap's end, seconds or blocks, where that leaves it 12 samples or more (from
    12, asv's interval can narrow); a cap that ends sooner stops it at 8 (``precision.capped_samples``)."""
    assert P.swept_sample_s({"sample_time": 0.05}) == pytest.approx(P.SIZING_S + 8 * 0.05)
    assert P.swept_sample_s({"sample_time": 0.2, "sample_cap": [1.0, 11]}) == pytest.approx(P.SIZING_S + 8 * 0.2)
    assert P.swept_sample_s({"sample_time": 0.05, "sample_cap": [1.0, 11]}) == pytest.approx(P.SIZING_S + 1.0)
    assert P.swept_sample_s({"sample_time": 0.2, "sample_cap": [1.0, 14]}) == pytest.approx(P.SIZING_S + 14 * 0.2)
    assert P.swept_sample_s({"plan_s": 1.6}) == 1.6


def test_a_known_models_search_is_priced_short():
    grid = ([["cuda"], ["float32", "bfloat16"], ["best"]], ["device", "dtype", "run"])
    bench = _bench("bench_a.Ach.track_tflops", *grid,
                   plan_cache_s={"per": ["device", "dtype"], "s": {"cuda": 55.0}, "known_s": 20.0})  # fmt: skip
    values_bf16, values_f32 = ("'cuda'", "'bfloat16'", "'best'"), ("'cuda'", "'float32'", "'best'")
    assert P.cache_units(bench, values_bf16, True)[1] == 20.0
    assert P.cache_units(bench, values_f32, True)[1] == 20.0  # a model searched: every dtype starts from its shapes
    assert P.cache_units(bench, values_bf16, False)[1] == 55.0


def test_the_h200s_shapes_are_known_by_model_name_alone():
    assert expected.known_shapes("NVIDIA H200", "bfloat16") == [(4096, 16384, 2048)]
    assert expected.known_shapes("NVIDIA H200", "float32") == [(4096, 16384, 2048)]  # the model's other dtypes'
    assert expected.known_shapes("NVIDIA GH200 480GB", "bfloat16") == []  # another model
    assert expected.known_shapes(None, "bfloat16") == []


def test_a_known_shape_is_searched_with_its_neighbours_and_the_squares_only():
    cuda = torch.device("cuda", 0)  # candidates reads the device's type only
    shapes = A.candidates(cuda, "bfloat16", None, known=[(2048, 16384, 2048)])
    squares = [(s, s, s) for s in A.GPU_SQUARES]
    assert shapes[: len(squares)] == squares and shapes[len(squares)] == (2048, 16384, 2048)
    assert sorted(shapes[len(squares) + 1 :]) == sorted([(4096, 16384, 2048), (2048, 12288, 2048),
                                                         (2048, 16384, 4096)])  # fmt: skip
    full = A.candidates(cuda, "bfloat16", None)
    assert len(full) > len(shapes) and set(shapes) <= set(full)
    two = A.candidates(cuda, "float32", None, known=[(2048, 16384, 2048), (4096, 4096, 4096)])
    assert len(two) == len(set(two))  # a shape two known shapes share is timed once
    # a value off the grid: its nearest grid values on either side
    assert sorted(A.neighbours((3000, 4096, 2048), A.GPU_DIMS, A.GPU_K)) == sorted(
        [(2048, 4096, 2048), (4096, 4096, 2048), (3000, 8192, 2048), (3000, 4096, 4096)])  # fmt: skip
    assert A.known_shapes(torch.device("cpu"), "bfloat16") == []


def test_a_point_that_reads_its_setup_caches_sweep_is_priced_no_cuda_context_and_no_check():
    """A world's readers make no CUDA context and check nothing: the world checked every op in its sweep."""
    grid = ([["nccl"], [2]], ["backend", "world"])
    reader = _bench("bench_c.Coll.track_busbw", *grid, plan_setup_s=0.0, plan_s=0.0, figures_in_setup_cache=True)
    other = _bench("bench_c.Other.track_x", *grid, plan_setup_s=0.0, plan_s=0.0)
    costs = dataclasses.replace(COSTS, gpu_check_s=0.25)
    plan = P.make_plan({b["name"]: b for b in (reader, other)}, lambda s: True, costs, budget_s=1000, reserve_s=0)
    by = {p.benchmark: p for p in plan.points}
    assert by["bench_c.Coll.track_busbw"].estimate_s == pytest.approx(COSTS.launch_s)
    assert by["bench_c.Other.track_x"].estimate_s == pytest.approx(COSTS.launch_s + COSTS.cuda_context_s)
    assert by["bench_c.Coll.track_busbw"].check is None and by["bench_c.Other.track_x"].check is not None
    alone = plan.estimate_s(points=[by["bench_c.Coll.track_busbw"]])
    assert plan.estimate_s(points=list(by.values())) == pytest.approx(
        alone + plan.estimate_s(points=[by["bench_c.Other.track_x"]]) - costs.stage_call_s)
    assert alone == pytest.approx(costs.stage_call_s + COSTS.launch_s)  # no check priced


def test_with_the_cpu_switched_onto_the_measuring_process_its_points_are_priced_as_a_gpus():
    plan = P.make_plan(_swept(), lambda s: True, COSTS, budget_s=1000, reserve_s=0, sweep_cpu=True)
    cpu = [p for p in plan.points if "'cpu'" in p.values]
    assert all(p.swept for p in cpu)
    # on the CPU a figure is priced at its cap (a shared host rarely gives 0.5%): 11 blocks of 0.1 s, where asv's
    # interval is their range, so at 8 (``precision.capped_samples``)
    assert all(p.estimate_s == pytest.approx(COSTS.launch_s + P.SIZING_S + 0.8) for p in cpu)


def test_a_bad_sweep_mode_is_named_before_gpu_run_starts(monkeypatch):
    import argparse

    from devbench.gpu.gpuargs import add_arguments
    from devbench.gpu.gpuargs import check as _check

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    monkeypatch.setenv("DEVBENCH_SWEEP", "yes")
    assert "DEVBENCH_SWEEP='yes'" in _check(parser.parse_args(["--plan-only"]))


def test_a_swept_family_is_learned_whole_from_asvs_durations():
    """The first figure asked carries the build and its twin's sampling in asv's duration; the twin's is ~0."""
    from devbench.gpu.costs import _learn

    plan = P.make_plan(_swept(), lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    ran = [p for p in plan.points if p.state == "run"]
    total = sum(p.estimate_s for p in ran)
    _learn(plan, ran, {"bench_m.Mat.track_time": 2 * total, "bench_m.Mat.track_tflops": 0.0})
    assert plan.scales == {"bench_m.Mat.track_time": pytest.approx(2.0), "bench_m.Mat.track_tflops": pytest.approx(2.0)}


def test_a_family_a_stop_cut_into_is_not_learned():
    """The stage stopped in the family: its saved points' durations and the builds journaled for points cut before
    their figures were saved no longer match, so it keeps its price."""
    from devbench.gpu.costs import _learn

    plan = P.make_plan(_swept(), lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    ran = [p for p in plan.points if p.state == "run"]
    ran[-1].state = "cut"
    total = sum(p.estimate_s for p in ran)
    _learn(plan, ran, {"bench_m.Mat.track_time": 0.25 * total, "bench_m.Mat.track_tflops": 0.0})
    assert plan.scales == {}


def test_a_host_clock_figure_on_the_cpu_is_priced_the_seconds_asv_gave_a_time_figure():
    bench = {"sample_time": 0.05, "unit": "seconds", "repeat": [3, 40, 2.0]}
    assert P.swept_sample_s(bench, gpu=False) == pytest.approx(P.SIZING_S + 2.0)
    assert P.swept_sample_s(bench, gpu=True) == pytest.approx(P.SIZING_S + 8 * 0.05)


def test_a_figure_counted_from_anothers_blocks_is_priced_no_sampling_where_that_figure_runs_beside_it(monkeypatch):
    grid = ([["cuda"], [64]], ["device", "n"])
    listing = {f"bench_c.Copy.{m}": _bench(f"bench_c.Copy.{m}", *grid, swept=True, sample_time=0.1)
               for m in ("track_copied", "track_read_write")}  # fmt: skip
    shared = {"bench_c.Copy.track_read_write": "bench_c.Copy.track_copied"}
    sampling = P.SIZING_S + precision.MIN_SAMPLES * 0.1
    plan = P.make_plan(listing, lambda s: True, COSTS, budget_s=1000, reserve_s=0, same_blocks=shared)
    by = {p.benchmark: p for p in plan.points}
    assert by["bench_c.Copy.track_read_write"].estimate_s == pytest.approx(COSTS.launch_s)
    assert by["bench_c.Copy.track_copied"].estimate_s == pytest.approx(COSTS.launch_s + sampling)
    both = plan.estimate_s()
    # its partner not selected: the figure measures the blocks itself, and the plan prices that
    alone = P.make_plan(listing, lambda s: "read_write" in s, COSTS, budget_s=1000, reserve_s=0, same_blocks=shared)
    (rw,) = alone.kept()
    assert alone.estimate_s() == pytest.approx(both - COSTS.launch_s)  # one fork fewer, the sampling the same
    assert alone.point_s(rw) == pytest.approx(COSTS.launch_s + sampling)
    # fit prices a pair the same whichever it keeps first: a budget of exactly both sizes' pairs keeps them all
    grid2 = ([["cuda"], [64, 128]], ["device", "n"])
    listing2 = {f"bench_c.Copy.{m}": _bench(f"bench_c.Copy.{m}", *grid2, swept=True, sample_time=0.1)
                for m in ("track_copied", "track_read_write")}  # fmt: skip
    whole = P.make_plan(listing2, lambda s: True, COSTS, budget_s=1000, reserve_s=0, same_blocks=shared)
    exact = whole.estimate_s()
    order = P._order
    for first in ("read_write", "copied"):
        def ordered(ps, first=first):
            return sorted(order(ps), key=lambda q: first not in q.benchmark)

        monkeypatch.setattr(P, "_order", ordered)
        plan = P.make_plan(listing2, lambda s: True, COSTS, budget_s=1000, reserve_s=0, same_blocks=shared)
        P.fit(plan, exact)
        assert len(plan.kept()) == 4, (first, [p.selector for p in plan.dropped()])


def test_a_figure_counted_from_anothers_blocks_at_some_points_only_prices_its_own_sampling_elsewhere():
    grid = ([["cuda"], ["blocking", "non_blocking"]], ["device", "mode"])
    listing = {f"bench_c.Copy.{m}": _bench(f"bench_c.Copy.{m}", *grid, swept=True, sample_time=0.1)
               for m in ("track_gbps", "track_time")}  # fmt: skip
    shared = {"bench_c.Copy.track_time": ("bench_c.Copy.track_gbps", {"mode": ["blocking"]})}
    plan = P.make_plan(listing, lambda s: True, COSTS, budget_s=1000, reserve_s=0, same_blocks=shared)
    times = {p.values[1]: p for p in plan.points if p.benchmark.endswith("track_time")}
    assert times["'blocking'"].partner == "bench_c.Copy.track_gbps('cuda', 'blocking')"
    assert times["'blocking'"].estimate_s == pytest.approx(COSTS.launch_s)
    assert times["'non_blocking'"].partner is None
    own = COSTS.launch_s + P.SIZING_S + precision.MIN_SAMPLES * 0.1
    assert times["'non_blocking'"].estimate_s == pytest.approx(own)


def test_what_a_stage_cost_is_learned_over_what_it_was_priced():
    """A figure counted from another's blocks that ran without it was priced its own sampling: asv's duration is
    read against that, so a family that cost what it was priced learns a scale of 1, not up to 4."""
    from devbench.gpu.costs import _learn

    grid = ([["cuda"], [64]], ["device", "n"])
    listing = {f"bench_c.Copy.{m}": _bench(f"bench_c.Copy.{m}", *grid, swept=True, sample_time=0.1)
               for m in ("track_copied", "track_read_write")}  # fmt: skip
    shared = {"bench_c.Copy.track_read_write": "bench_c.Copy.track_copied"}
    plan = P.make_plan(listing, lambda s: "read_write" in s, COSTS, budget_s=1000, reserve_s=0, same_blocks=shared)
    (rw,) = plan.kept()
    _learn(plan, [rw], {rw.benchmark: plan.point_s(rw)})
    assert plan.scales[rw.benchmark] == pytest.approx(1.0)


def test_a_re_plan_leaves_free_what_this_runs_stages_say_a_plan_can_be_short():
    from devbench.gpu.costs import REFIT_MARGIN, STAGE_SPREAD, refit_margin

    assert refit_margin([]) == REFIT_MARGIN and refit_margin([(50.0, 40.0)]) == REFIT_MARGIN  # nothing re-planned
    # re-planned stages that ran under their estimate (a search priced at its bound): the stage's spread alone
    assert refit_margin([(57.0, 39.0), (21.0, 18.8), (84.0, 21.0)]) == pytest.approx(STAGE_SPREAD)
    assert refit_margin([(58.0, 44.0), (22.0, 22.9)]) == pytest.approx(22.9 / 22.0 - 1 + STAGE_SPREAD)
    assert refit_margin([(58.0, 44.0), (22.0, 40.0)]) == REFIT_MARGIN  # far over: never more than the first margin


def test_a_swept_workloads_build_is_priced_at_what_this_runs_builds_of_its_class_took(tmp_path):
    """The measuring process's journal says what each build took (a CPU copy rotating over gigabytes of buffers
    takes seconds where the plan declared 0.3 s): the workloads still to build are priced that, and the family's
    sampling is learned from asv's duration less those builds."""
    import json

    from devbench.gpu.costs import _learn
    from devbench.gpu.gpupack import builds_since

    journal = tmp_path / "journal.jsonl"
    rows = [{"pid": 1, "t": 90.0, "built": "bench_m.Mat", "params": ["cuda", 64], "seconds": 9.0},
            {"pid": 1, "t": 110.0, "built": "bench_m.Mat", "params": ["cuda", 64], "seconds": 3.0},
            {"pid": 1, "t": 111.0, "figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 0.8},
            {"pid": 1, "t": 112.0, "beside": "bench_h.Copy", "params": ["d2h", 64], "seconds": 0.5}]
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut by a ki')
    builds = builds_since(journal, since=100.0)
    # the stage's own, a point set up over another's build among them, a torn last line skipped
    assert builds == {"bench_m.Mat": [3.0], "bench_h.Copy": [0.5]}

    plan = P.make_plan(_swept(), lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    first, *later = sorted(plan.kept(), key=lambda p: p.values)
    sampling = sum(p.estimate_s for p in plan.kept() if p.values == first.values)
    ran = [p for p in plan.kept() if p.values == first.values]
    _learn(plan, ran, {"bench_m.Mat.track_time": 3.0 + sampling, "bench_m.Mat.track_tflops": 0.0}, builds)
    assert plan.scales["bench_m.Mat.track_time"] == pytest.approx(1.0)  # the build is not the sampling's cost
    unbuilt = next(p for p in later if p.values != first.values)
    assert plan.built_s(unbuilt) == pytest.approx(3.0) and unbuilt.built_s == pytest.approx(P.SETUP_S)


def test_what_no_stage_measured_is_priced_at_least_at_what_the_measured_families_cost_together():
    """A stage priced at a search's bound that ran short (0.3 of its estimate) pulls the stages' ratio to 1; the
    families measured so far ran at 1.5x together: a family first met in the fill is priced 1.5x."""
    from devbench.gpu.costs import _scale

    plan = P.make_plan(_swept(), lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    stages = [(60.0, 70.0), (85.0, 28.0)]
    assert _scale(stages) == pytest.approx(1.0)
    plan.learned = {"bench_a.A": (10.0, 20.0), "bench_b.B": (10.0, 10.0)}
    assert _scale(stages, plan) == pytest.approx(1.5)
    plan.learned = {"bench_a.A": (10.0, 5.0)}
    assert _scale(stages, plan) == pytest.approx(1.0)  # never below 1: a quick family says little of another



def _journal(path, rows):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")


def test_a_recorded_figure_that_stopped_at_its_cap_before_asvs_interval_could_narrow_is_priced_at_the_fewest(tmp_path):
    """A journaled figure held wider than 0.5% at 9 to 11 samples was not within 0.5% at 8 either (asv's interval
    there is its range, which more samples only widen): the stop rule now ends it at 8, and it is priced 8 of its
    samples. One that was precise, or took 12 samples or more, is priced all it took."""
    from devbench.gpu.recorded import recorded_from

    rows = [
        {"figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 1.1, "samples": 11, "precise": False},
        {"figure": "bench_m.Mat.track_time", "params": ["cuda", 1024], "seconds": 1.1, "samples": 11, "precise": True},
        {"figure": "bench_m.Mat.track_tflops", "params": ["cuda", 64], "seconds": 1.3, "samples": 13,
         "precise": False},
        {"figure": "bench_m.Mat.track_tflops", "params": ["cuda", 1024], "seconds": 0.8, "samples": 8,
         "precise": False},
    ]
    _journal(tmp_path / "journal.jsonl", rows)
    (tmp_path / "plan.json").write_text("{}")
    figures, _ = recorded_from(tmp_path / "plan.json")
    assert figures == pytest.approx({"bench_m.Mat.track_time('cuda', 64)": 0.8,
                                     "bench_m.Mat.track_time('cuda', 1024)": 1.1,
                                     "bench_m.Mat.track_tflops('cuda', 64)": 1.3,
                                     "bench_m.Mat.track_tflops('cuda', 1024)": 0.8})  # fmt: skip


def test_another_machines_journal_prices_the_figures_and_builds_it_recorded(tmp_path):
    """``--costs-from``'s journal: a figure that run measured is priced its own sampling; the other points of its
    class scaled as its recorded ones ran against their estimate; a workload it built, at its slowest build (the
    first, which checked it) with the check inside (no check priced beside); the blocks figures share, what the
    slowest of the group took, whether or not the plan holds the others."""
    import io
    import tarfile

    from devbench.gpu.recorded import recorded_from, seed

    (tmp_path / "plan.json").write_text("{}")
    assert recorded_from(tmp_path / "plan.json") == ({}, {})  # no journal: nothing recorded
    rows = [
        {"figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 9.0},  # superseded below
        {"figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 0.2},
        {"figure": "bench_m.Mat.track_tflops", "params": ["cuda", 64], "seconds": 0.0},  # beside its partner
        {"figure": "bench_m.Mat.track_time", "params": ["cuda", 1024], "error": "CUDA error", "seconds": 5.0},
        {"built": "bench_m.Mat", "params": ["cuda", 64], "seconds": 2.5},
        {"built": "bench_m.Mat", "params": ["cuda", 64], "seconds": 0.4},  # built again later, unchecked
        {"beside": "bench_m.Mat", "params": ["cpu", 64], "seconds": 0.5},  # another point's build turned for it
        {"figure": "bench_m.Mat.track_time", "params": ["cpu", 64], "seconds": float("nan")},
        {"figure": "bench_m.Mat.track_time", "params": "oops"},
    ]
    packed = io.BytesIO()
    _journal(tmp_path / "j", rows)
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        tar.add(tmp_path / "j", arcname=".asv/sweep/journal.jsonl")
    (tmp_path / "results.tgz").write_bytes(packed.getvalue())
    figures, builds = recorded_from(tmp_path / "plan.json")  # from the packed results when none lies beside
    assert figures == {"bench_m.Mat.track_time('cuda', 64)": 0.2, "bench_m.Mat.track_tflops('cuda', 64)": 0.0}
    assert builds == {("built", "bench_m.Mat", "'cuda'", "64"): 2.5, ("built", "bench_m.Mat", "'cpu'", "64"): 0.5}
    _journal(tmp_path / "journal.jsonl", rows[:2])  # beside the plan: read first
    assert recorded_from(tmp_path / "plan.json")[0] == {"bench_m.Mat.track_time('cuda', 64)": 0.2}

    costs = P.Costs(launch_s=0.01, cuda_context_s=0.3, asv_call_s=6.0, gpus=1, gpu_setup_s=0.8, gpu_check_s=0.3)
    shared = {"bench_m.Mat.track_tflops": "bench_m.Mat.track_time"}  # tflops counts track_time's blocks
    plan = P.make_plan(_swept(), lambda s: True, costs, budget_s=1000, reserve_s=0, same_blocks=shared)
    by = {p.selector: p for p in plan.points}
    small, big = by["bench_m.Mat.track_time('cuda', 64)"], by["bench_m.Mat.track_time('cuda', 1024)"]
    twin = by["bench_m.Mat.track_tflops('cuda', 64)"]
    declared = big.estimate_s - costs.launch_s
    twin_alone = twin.alone_s
    # points priced from their own record (the twin: its partner); both workloads: n=1024 from its nearest, n=64
    assert seed(plan, figures, builds, shared) == (1, 2)
    assert small.estimate_s == pytest.approx(costs.launch_s + 0.2)  # the slowest of its group, the twin's 0.0
    assert twin.estimate_s == pytest.approx(costs.launch_s)  # sampled by its partner where both run
    ratio = 0.2 / declared  # what the recorded point took over its estimate: the unrecorded one scaled alike
    assert big.estimate_s == pytest.approx(costs.launch_s + declared * max(ratio, 0.25))
    assert twin.alone_s == pytest.approx(twin_alone * max(ratio, 0.25))
    assert (small.built_s, small.check) == (2.5, None)  # its check inside its build
    # the other size, from the nearest recorded build of its class on its kind of device, grown with its size
    assert (big.built_s, big.check, big.built_known) == (pytest.approx(2.5 * 1024 / 64), None, True)
    assert by["bench_m.Mat.track_time('cpu', 64)"].estimate_s == pytest.approx(
        P.make_plan(_swept(), lambda s: True, costs, 1000, 0).points[0].estimate_s)  # not swept: as declared
    # the plan holds the figure that reads the shared blocks, not the one the record sampled them for: priced as
    # the group's slowest, not at what reading them took
    alone = P.make_plan(_swept(), lambda s: "track_tflops" not in s, costs, 1000, 0, same_blocks=shared)
    reads = {"bench_m.Mat.track_time('cuda', 64)": 0.0, "bench_m.Mat.track_tflops('cuda', 64)": 0.3}
    seed(alone, reads, {}, shared)
    lead = next(p for p in alone.points if p.selector == "bench_m.Mat.track_time('cuda', 64)")
    assert lead.estimate_s == pytest.approx(costs.launch_s + 0.3)


def test_a_plan_is_priced_from_this_machines_journal_over_a_committed_run_of_its_gpu_model(tmp_path):
    import json

    from devbench.gpu.recorded import prices_sources, recorded

    given = tmp_path / "elsewhere" / "plan.json"
    assert prices_sources(tmp_path, "NVIDIA H200", str(given)) == [(given, False)]  # --costs-from alone
    assert prices_sources(tmp_path, "NVIDIA H200", None) == []  # nothing recorded: the declared prices
    gpu = tmp_path / "reports" / "gpu"
    for name, text in (("h200", json.dumps({"costs": {"gpu_model": "NVIDIA H200"}})), ("broken", "not json"),
                       ("nocosts", json.dumps({"stages": []})), ("list", "[1, 2]")):  # fmt: skip
        (gpu / name).mkdir(parents=True)
        (gpu / name / "plan.json").write_text(text)
        _journal(gpu / name / "journal.jsonl", [])
    older = gpu / "h200-older"
    older.mkdir()
    (older / "plan.json").write_text(json.dumps({"costs": {"gpu_model": "NVIDIA H200"}}))
    _journal(older / "journal.jsonl", [{"figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 9.0,
                                        "t": 1.0}])  # fmt: skip
    _journal(gpu / "h200" / "journal.jsonl", [
        {"figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 0.5, "t": 2.0},
        {"figure": "bench_m.Mat.track_time", "params": ["cpu", 64], "seconds": 7.0, "t": 2.0},  # its host's CPU
    ])  # fmt: skip
    assert prices_sources(tmp_path, "NVIDIA H200", None) == [(gpu / "h200" / "plan.json", True)]  # the newest run
    assert prices_sources(tmp_path, "NVIDIA H100 80GB HBM3", None) == [] and prices_sources(tmp_path, "", None) == []
    own = tmp_path / ".asv" / "sweep" / "journal.jsonl"  # earlier gpu-runs on this machine: over the committed run
    own.parent.mkdir(parents=True)
    _journal(own, [{"figure": "bench_m.Mat.track_time", "params": ["cuda", 1024], "seconds": 0.25}])
    sources = prices_sources(tmp_path, "NVIDIA H200", None)
    assert sources == [(gpu / "h200" / "plan.json", True), (own, False)]
    costs = P.Costs(launch_s=0.01, cuda_context_s=0.3, asv_call_s=6.0, gpus=1, gpu_setup_s=0.8)
    plan = P.make_plan(_swept(), lambda s: True, costs, 1000, 0, sweep_cpu=True)
    figures, _ = recorded(plan, sources)
    assert figures == {"bench_m.Mat.track_time('cuda', 64)": 0.5,  # another host's record: its GPU points alone
                       "bench_m.Mat.track_time('cuda', 1024)": 0.25}  # fmt: skip


def test_a_committed_run_prices_the_figure_that_counts_a_gpu_points_blocks_though_the_plan_leaves_it_out(tmp_path):
    """Another host's record prices the GPU points alone, and with them the figures that count their blocks: the
    plan holding only the figure whose blocks another sampled is priced what the sampling took."""
    from devbench.gpu.recorded import recorded, seed

    journal = tmp_path / "journal.jsonl"
    _journal(journal, [{"figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 0.0},
                       {"figure": "bench_m.Mat.track_tflops", "params": ["cuda", 64], "seconds": 3.0}])  # fmt: skip
    shared = {"bench_m.Mat.track_tflops": "bench_m.Mat.track_time"}
    plan = P.make_plan(_swept(), lambda s: "track_tflops" not in s, COSTS, 1000, 0, same_blocks=shared)
    figures, builds = recorded(plan, [(journal, True)], shared)
    assert figures["bench_m.Mat.track_tflops('cuda', 64)"] == 3.0
    seed(plan, figures, builds, shared)
    lead = next(p for p in plan.points if p.selector == "bench_m.Mat.track_time('cuda', 64)")
    assert lead.estimate_s == pytest.approx(COSTS.launch_s + 3.0)


def test_the_newest_line_of_a_journal_dates_it_and_a_line_without_a_time_is_passed_over(tmp_path):
    from devbench.gpu.recorded import _newest

    journal = tmp_path / "journal.jsonl"
    journal.write_text("")
    assert _newest(journal) == 0.0
    _journal(journal, [{"t": 5.0}, {"pid": 1}, {"t": float("nan")}])
    assert _newest(journal) == 5.0


def test_figures_share_blocks_only_where_spec_says_they_do():
    """HostDevice's time counts its GB/s' blocks at blocking copies alone: a non-blocking GB/s is priced its own
    sampling, not the larger of its and the time's."""
    from devbench.gpu.recorded import seed

    grid = ([["cuda"], ["blocking", "non_blocking"]], ["device", "mode"])
    listing = {f"bench_c.Copy.{m}": _bench(f"bench_c.Copy.{m}", *grid, swept=True, sample_time=0.1)
               for m in ("track_gbps", "track_time")}  # fmt: skip
    shared = {"bench_c.Copy.track_time": ("bench_c.Copy.track_gbps", {"mode": ["blocking"]})}
    plan = P.make_plan(listing, lambda s: True, COSTS, 1000, 0, same_blocks=shared)
    figures = {f"bench_c.Copy.{m}('cuda', '{mode}')": s for m, mode, s in
               (("track_gbps", "blocking", 0.5), ("track_time", "blocking", 2.0),
                ("track_gbps", "non_blocking", 0.5), ("track_time", "non_blocking", 2.0))}  # fmt: skip
    seed(plan, figures, {}, shared)
    by = {p.selector: p for p in plan.points}
    assert by["bench_c.Copy.track_gbps('cuda', 'blocking')"].estimate_s == pytest.approx(COSTS.launch_s + 2.0)
    assert by["bench_c.Copy.track_gbps('cuda', 'non_blocking')"].estimate_s == pytest.approx(COSTS.launch_s + 0.5)
    assert by["bench_c.Copy.track_time('cuda', 'non_blocking')"].estimate_s == pytest.approx(COSTS.launch_s + 2.0)


def test_an_unrecorded_build_is_priced_from_its_classs_nearest_recorded_one():
    """Of the builds of its class on its kind of device: the nearest at its sizes or larger and the nearest at its
    sizes or smaller (grown with the size), the dearer; nearest in sizes, then in words; nothing where none of the
    class was built there."""
    from devbench.gpu.priced import nearest_build as _nearest

    builds = {("built", "bench_t.Copy", "'h2d'", "'pinned'", "4096"): 0.08,
              ("built", "bench_t.Copy", "'h2d'", "'pinned'", "268435456"): 0.34,
              ("built", "bench_t.Copy", "'d2h'", "'pinned'", "268435456"): 0.04,
              ("built", "bench_t.Mat", "'cuda'", "'float32'", "4096"): 0.5,
              ("built", "bench_t.Mat", "'cuda'", "'float16'", "8192"): 2.6,
              ("built", "bench_t.Mat", "'cpu'", "'float32'", "1024"): 0.03}  # fmt: skip
    assert _nearest(("built", "bench_t.Copy", "'d2h'", "'pinned'", "4096"), builds) == pytest.approx(0.08)
    # between a 4 KiB build and 256 MiB ones: the dearer of the two sides (the smaller grown with the size)
    assert _nearest(("built", "bench_t.Copy", "'d2h'", "'pinned'", "16384"), builds) == pytest.approx(0.32)
    assert _nearest(("built", "bench_t.Copy", "'d2h'", "'pinned'", "1073741824"), builds) == pytest.approx(0.16)
    assert _nearest(("built", "bench_t.Mat", "'cuda'", "'float16'", "4096"), builds) == pytest.approx(0.5)
    assert _nearest(("built", "bench_t.Mat", "'cuda'", "'tf32'", "1024"), builds) == pytest.approx(0.5)
    assert _nearest(("built", "bench_t.Mat", "'cuda'", "'float32'", "6000"), builds) == pytest.approx(2.6)
    assert _nearest(("built", "bench_t.Mat", "'cpu'", "'tf32'", "4096"), builds) == pytest.approx(0.12)
    assert _nearest(("built", "bench_t.Other", "'cuda'", "64"), builds) is None


def test_a_re_plan_keeps_a_recorded_builds_price_and_learns_the_others_from_this_run():
    """A workload priced from a recorded build keeps that price when a stage journals slower builds of its class (a
    3 s product at n=8192 said nothing of one at n=64), scaled as this run's builds ran against their records; one
    priced by declaration takes the class's slowest."""
    plan = P.make_plan(_swept(), lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    known, declared = sorted({p.built: p for p in plan.points if p.built}.values(), key=lambda p: p.values)
    known.built_s, known.built_known = 0.05, True
    plan.builds["bench_m.Mat"] = [3.0]
    assert plan.built_s(known) == pytest.approx(0.05) and plan.built_s(declared) == pytest.approx(3.0)
    # the class's records scaled as this run's builds of recorded workloads ran against theirs (a record of older
    # code or a busier day), never one size's build for another's price; within 0.25-4x
    small, large, guessed = (dataclasses.replace(known, built=("built", "bench_m.Mat", "'cuda'", n))
                             for n in ("16", "8192", "32"))  # fmt: skip
    small.built_s, large.built_s, guessed.built_s = 0.17, 4.03, 0.17  # each with the 0.13 s gap before a build
    small.built_own, large.built_own = 0.04, 3.9  # the record's own builds; the third priced from its neighbour's
    plan.points += [small, large, guessed]
    plan.built_now[small.built] = 0.02  # the small one built in half its recorded time
    assert plan.build_ratio("bench_m.Mat") == pytest.approx(0.5) and plan.built_s(large) == pytest.approx(4.03 * 0.5)
    plan.built_now[small.built] = 1.0
    assert plan.built_s(large) == pytest.approx(4.03 * 4.0)
    plan.built_now = {guessed.built: 9.0}  # a guessed price says nothing of this run's speed
    assert plan.build_ratio("bench_m.Mat") == 1.0 and plan.build_ratio("bench_other.X") == 1.0
    # a workload no record prices: this run's build of its class nearest it in size, with the run's gap before a
    # build, not the class's slowest (a 3 s n=8192 build for an n=64 one); none of its class built yet: the slowest
    plan.built_now, plan.gap_now = {("built", "bench_m.Mat", "'cuda'", "1024"): 0.06}, 0.1
    assert plan.built_s(declared) == pytest.approx(0.06 + 0.1)
    plan.built_now = {}
    assert plan.built_s(declared) == pytest.approx(3.0)


def test_a_set_up_cache_priced_per_unit_pays_asvs_process_for_it_once_a_call_and_a_cuda_context_for_a_gpu():
    """asv runs ``setup_cache`` in a fresh interpreter in every call that runs one of the class's points: an import of
    the suite once per stage, whatever the units, and a CUDA context where it searches on the GPU; a world's set-up
    cache (its ranks are processes of their own) makes none."""
    grid = ([["cpu", "cuda"], ["float32", "bfloat16"]], ["device", "dtype"])
    search = _bench("bench_a.Ach.track_tflops", *grid, setup_cache="bench_a:9", swept=True, plan_s=0.5,
                    plan_cache_s={"per": ["device", "dtype"], "s": {"cpu": 30.0, "cuda": 20.0}})  # fmt: skip
    world = _bench("bench_c.Coll.track_busbw", [["nccl"], [2]], ["backend", "world"], setup_cache="bench_c:5",
                   plan_s=0.0, plan_setup_s=0.0, figures_in_setup_cache=True,
                   plan_cache_s={"per": ["backend", "world"], "s": {"nccl": 15.0}})  # fmt: skip
    plan = P.make_plan({b["name"]: b for b in (search, world)}, lambda s: True, COSTS, budget_s=1000, reserve_s=0)
    assert plan.cache_s == {"bench_a": pytest.approx(COSTS.import_s), "bench_c": pytest.approx(COSTS.import_s)}
    assert plan.cache_gpu == {"bench_a"}
    by = {p.selector: p for p in plan.points}
    gpu = [by["bench_a.Ach.track_tflops('cuda', 'float32')"], by["bench_a.Ach.track_tflops('cuda', 'bfloat16')"]]
    cpu = [by["bench_a.Ach.track_tflops('cpu', 'float32')"]]
    alone = plan.estimate_s(points=gpu, group=lambda p: "s")
    fixed = COSTS.stage_call_s + COSTS.import_s + COSTS.cuda_context_s + COSTS.sweep_start_s + 2 * 20.0
    assert alone == pytest.approx(fixed + sum(plan.built_s(p) + p.estimate_s for p in gpu))
    on_cpu = plan.estimate_s(points=cpu, group=lambda p: "s")
    assert on_cpu == pytest.approx(COSTS.stage_call_s + COSTS.import_s + 30.0 + cpu[0].estimate_s)
    reader = by["bench_c.Coll.track_busbw('nccl', 2)"]
    assert plan.estimate_s(points=[reader], group=lambda p: "s") == pytest.approx(
        COSTS.stage_call_s + COSTS.import_s + 15.0 + reader.estimate_s)  # no CUDA context of its own
    # fit prices what estimate_s does: every point fits in what they cost together, and not in a hair less
    every = [p for p in plan.points if p.state != "skip"]
    whole = plan.estimate_s(points=every, group=lambda p: "s")
    P.fit(plan, whole, group=lambda p: "s")
    assert len(plan.kept()) == len(every)
    P.fit(plan, whole - 0.01, group=lambda p: "s")
    assert len(plan.kept()) < len(every)


def test_a_gpu_search_is_priced_at_what_the_recorded_search_of_its_model_and_dtype_took(tmp_path):
    """``achievable.jsonl`` beside a committed run's plan.json: the newest search of each dtype on that GPU model,
    its finalists included; a search of another model, or the CPU's, prices nothing; a read stays a read."""
    import json

    from devbench.gpu.recorded import searches_from, seed_searches

    def made(when, device="NVIDIA H200", **more):
        return {"made": {"device": device, "when": f"2026-11-28T0{when}:00:00Z", **more}}

    rows = [{"device": "cuda:0", "dtype": "bfloat16", "seconds": 9.0, **made(1)},
            {"device": "cuda:0", "dtype": "bfloat16", "seconds": 2.35, **made(2)},
            {"device": "cuda:0", "dtype": "bfloat16", "seconds": 9.0, "cached": True, **made(1)},  # a read, later
            {"device": "cuda:0", "dtype": "bfloat16", "seconds": 0.5, **made(3, quick=True)},  # make test's
            {"device": "cuda:0", "dtype": "float32", "seconds": 3.0, **made(3, "NVIDIA H100")},
            {"device": "cpu", "dtype": "float32", "seconds": 8.5, **made(4, machine="h200")}]
    (tmp_path / "plan.json").write_text("{}")
    (tmp_path / "achievable.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "torn")
    searches = searches_from([(tmp_path / "plan.json", True)], "NVIDIA H200")
    assert searches == {("cuda", "bfloat16"): 2.35}  # another host's CPU search says nothing of this one
    # a run's folder as gpu-run packs it: the searches inside its results.tgz
    import io
    import tarfile

    packed = tmp_path / "packed"
    packed.mkdir()
    (packed / "plan.json").write_text("{}")
    with tarfile.open(packed / "results.tgz", "w:gz") as tar:
        data = (tmp_path / "achievable.jsonl").read_bytes()
        info = tarfile.TarInfo(".asv/achievable/h200.jsonl")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert searches_from([(packed / "plan.json", True)], "NVIDIA H200") == {("cuda", "bfloat16"): 2.35}
    grid = ([["cpu", "cuda"], ["float32", "bfloat16"]], ["device", "dtype"])
    search = _bench("bench_a.Ach.track_tflops", *grid, setup_cache="bench_a:9", swept=True, plan_s=0.5,
                    plan_cache_s={"per": ["device", "dtype"], "s": {"cpu": 30.0, "cuda": 46.5}, "known_s": 11.5})
    listing = {search["name"]: search}
    costs = dataclasses.replace(COSTS, model_searched=True)
    plan = P.make_plan(listing, lambda s: True, costs, budget_s=1000, reserve_s=0)
    assert seed_searches(plan, listing, searches) == 1
    unit = {p.values[:2]: p.unit_s for p in plan.points}
    assert unit == {("'cuda'", "'bfloat16'"): 2.35, ("'cuda'", "'float32'"): 11.5,
                    ("'cpu'", "'bfloat16'"): 30.0, ("'cpu'", "'float32'"): 30.0}
    # this host's own journal: its project's searches price its CPU's, in place of the probe's expectation (within
    # the bound), where they are this host's (the machine's name) and the user's cache does not hold them
    sweep_dir, found = tmp_path / "own" / ".asv" / "sweep", tmp_path / "own" / ".asv" / "achievable"
    sweep_dir.mkdir(parents=True)
    found.mkdir()
    (sweep_dir / "journal.jsonl").write_text("")
    own = [{"device": "cpu", "dtype": "float32", "seconds": 12.0, **made(5, "cpu", machine="vm", threads=2)},
           {"device": "cpu", "dtype": "bfloat16", "seconds": 3.0, **made(6, "cpu", machine="vm", threads=2)},
           {"device": "cpu", "dtype": "float32", "seconds": 47.0, **made(7, "cpu", machine="vm", threads=1)},
           {"device": "cpu", "dtype": "float32", "seconds": 1.0, **made(8, "cpu", machine="other", threads=2)}]
    (found / "vm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in own))
    mine = searches_from([(sweep_dir / "journal.jsonl", False)], "NVIDIA H200", "vm", threads=2)
    assert mine == {("cpu", "float32"): 12.0, ("cpu", "bfloat16"): 3.0}  # not one thread's, not another host's
    cached = dataclasses.replace(costs, cached_searches=("cpu:bfloat16",))
    again = P.make_plan(listing, lambda s: True, cached, budget_s=1000, reserve_s=0)
    read = {p.values[:2]: p.unit_s for p in again.points}[("'cpu'", "'bfloat16'")]
    assert seed_searches(again, listing, mine) == 1
    unit = {p.values[:2]: p.unit_s for p in again.points}
    assert unit[("'cpu'", "'float32'")] == 12.0 and unit[("'cpu'", "'bfloat16'")] == read  # a read stays a read


def test_each_build_but_a_turn_of_one_is_priced_the_recorded_gap_before_builds(tmp_path):
    """Between one record and the next build's start the measuring process took the next request and let the last
    workload go (0.13 s on the H200): each build of its own pays the median of that; a point set up over an earlier
    point's build (``built_by``) pays none; a gap across stages (the process waiting for asv) says nothing."""
    import json

    from devbench.gpu.recorded import build_gap, seed

    rows = [{"pid": 1, "t": 10.0, "built": "bench_h.Copy", "params": ["h2d", 64], "seconds": 1.0},
            {"pid": 1, "t": 10.5, "figure": "bench_h.Copy.track_gbps", "params": ["h2d", 64], "seconds": 0.4},
            {"pid": 1, "t": 11.6, "built": "bench_h.Copy", "params": ["h2d", 128], "seconds": 1.0},  # gap 0.1
            {"pid": 1, "t": 11.7, "beside": "bench_h.Copy", "params": ["d2h", 128], "seconds": 0.05},
            {"pid": 2, "t": 12.0, "built": "bench_h.Copy", "params": ["h2d", 256], "seconds": 1.0},  # its first
            {"pid": 1, "t": 12.2, "built": "bench_h.Copy", "params": ["d2h", 64], "seconds": 0.2},  # gap 0.3
            {"pid": 1, "t": 500.0, "built": "bench_h.Copy", "params": ["d2h", 256], "seconds": 0.2}]  # a stage apart
    (tmp_path / "plan.json").write_text("{}")
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert build_gap([(tmp_path / "plan.json", True)]) == pytest.approx(0.2)
    assert build_gap([(tmp_path / "elsewhere" / "plan.json", True)]) == 0.0

    bench = _bench("bench_h.Copy.track_gbps", [["h2d", "d2h"], [64, 128]], ["direction", "nbytes"], swept=True,
                   plan_gpus=1, sample_time=0.05, built_by=["nbytes"])  # fmt: skip
    plan = P.make_plan({bench["name"]: bench}, lambda s: True, COSTS, budget_s=1000, reserve_s=0)
    turns = {p.values: p.turn for p in plan.points}
    assert turns == {("'h2d'", "64"): False, ("'h2d'", "128"): False, ("'d2h'", "64"): True, ("'d2h'", "128"): True}
    # a run that selects one direction builds each of its points' buffers itself: none is a turn
    alone = P.make_plan({bench["name"]: bench}, lambda s: "d2h" in s, COSTS, budget_s=1000, reserve_s=0)
    assert [p.turn for p in alone.points] == [False, False]
    seed(plan, {}, {}, None, gap_s=0.2)
    assert {p.values: p.built_s for p in plan.points} == pytest.approx(
        {("'h2d'", "64"): P.SETUP_S + 0.2, ("'h2d'", "128"): P.SETUP_S + 0.2,
         ("'d2h'", "64"): P.SETUP_S, ("'d2h'", "128"): P.SETUP_S})  # fmt: skip


def test_a_measuring_processs_start_is_not_learned_as_the_first_familys_sampling(tmp_path):
    """The first point of a stage waits for the measuring process to start (to listen, then to import its class):
    its asv duration holds that, which the plan prices apart (``sweep_start_s``); what the family's sampling is
    learned from leaves it out, as it leaves out the builds."""
    import json

    from devbench.gpu.costs import _learn
    from devbench.gpu.gpupack import builds_since, starts_since

    rows = [{"pid": 7, "t": 99.0, "started": "bench_m.Mat", "seconds": 9.0},  # an earlier stage's
            {"pid": 8, "t": 103.0, "started": "bench_m.Mat", "seconds": 3.5},  # its first build began at 103
            {"pid": 8, "t": 104.0, "built": "bench_m.Mat", "params": ["cuda", 64], "seconds": 1.0},
            {"pid": 8, "t": 105.0, "figure": "bench_m.Mat.track_time", "params": ["cuda", 64], "seconds": 0.8}]
    journal = tmp_path / "journal.jsonl"
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert starts_since(journal, since=100.0) == {"bench_m.Mat": pytest.approx(3.5)}
    assert builds_since(journal, since=100.0) == {"bench_m.Mat": [1.0]}  # a start is no build, nor a gap
    # a later build of the stage carries what the process spent before it (the release of the last workload):
    # asv's duration holds it, and the plan prices it with the build (``recorded.build_gap``)
    later = tmp_path / "later.jsonl"
    later.write_text(journal.read_text() + json.dumps(
        {"pid": 8, "t": 106.3, "built": "bench_m.Mat", "params": ["cuda", 1024], "seconds": 1.0}) + "\n")
    assert builds_since(later, since=100.0) == {"bench_m.Mat": [1.0, pytest.approx(1.3)]}
    from devbench.gpu.gpupack import builds_by_key_since

    # by workload, each build's own seconds: what the ratio to its record reads (a gap can hold other work)
    assert builds_by_key_since(later, since=100.0) == {("built", "bench_m.Mat", "'cuda'", "64"): 1.0,
                                                       ("built", "bench_m.Mat", "'cuda'", "1024"): 1.0}

    plan = P.make_plan(_swept(), lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0)
    ran = [p for p in plan.kept() if p.values == ("'cuda'", "64")]
    sampling = sum(p.estimate_s for p in ran)
    took = {"bench_m.Mat.track_time": 1.0 + 3.5 + sampling, "bench_m.Mat.track_tflops": 0.0}
    _learn(plan, ran, took, builds_since(journal, 100.0), starts_since(journal, 100.0))
    assert plan.scales["bench_m.Mat.track_time"] == pytest.approx(1.0)


def test_a_kept_figures_workload_keeps_its_other_figures_before_other_points():
    """A figure validate reads is kept whatever it costs; its workload's other figure costs its sampling alone
    beside it and is kept next, before another family's point that comes earlier in priority: left for a later
    stage, it would build the workload again (the H200's ParallelMatmul n=8192 pair: built twice, 9.4 and 11 s)."""
    listing = _swept()
    other = _bench("bench_a.Cheap.track_x", [["cuda"], [1, 2, 3]], ["device", "k"], swept=True, sample_time=0.1)
    listing[other["name"]] = other
    keep = frozenset({"bench_m.Mat.track_tflops('cuda', 1024)"})
    every = P.make_plan(listing, lambda s: "'cuda'" in s, COSTS, budget_s=1000, reserve_s=0, keep=keep)
    by = {p.selector: p for p in every.points}
    lead, sibling = by["bench_m.Mat.track_tflops('cuda', 1024)"], by["bench_m.Mat.track_time('cuda', 1024)"]
    cheap = [p for p in every.points if p.benchmark == "bench_a.Cheap.track_x"]
    assert lead.built == sibling.built
    # room for the kept figure, its sibling's sampling and one more point of anything
    room = every.estimate_s(points=[lead, sibling, cheap[0], by["bench_m.Mat.track_tflops('cuda', 64)"]])
    P.fit(every, room)
    assert lead.state == sibling.state == "run"


def test_a_journal_prices_each_workload_from_the_newest_process_that_built_it(tmp_path):
    """An older run's builds (older code, a busier day) do not price this one's: each workload's builds of the newest
    process that built it count (its slowest there: the first checks), a process told apart by its start where its
    pid comes back in a later run."""
    import json

    from devbench.gpu.recorded import recorded_from

    rows = [{"pid": 7, "t": 1.0, "started": "bench_m.Mat", "seconds": 1.0},
            {"pid": 7, "t": 2.0, "built": "bench_m.Mat", "params": ["cpu", 64], "seconds": 12.3},
            {"pid": 8, "t": 3.0, "built": "bench_m.Mat", "params": ["cpu", 128], "seconds": 5.0},
            {"pid": 7, "t": 90.0, "started": "bench_m.Mat", "seconds": 1.0},  # the same pid, a later run
            {"pid": 7, "t": 91.0, "built": "bench_m.Mat", "params": ["cpu", 64], "seconds": 1.3},
            {"pid": 7, "t": 92.0, "built": "bench_m.Mat", "params": ["cpu", 64], "seconds": 0.2},  # unchecked
            {"pid": 9, "t": 93.0, "built": "bench_m.Mat", "params": ["cpu", 128], "seconds": 0.9}]
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, builds = recorded_from(tmp_path / "journal.jsonl")
    assert builds == {("built", "bench_m.Mat", "'cpu'", "64"): 1.3, ("built", "bench_m.Mat", "'cpu'", "128"): 0.9}


def test_a_world_goes_only_into_a_stage_that_leaves_its_set_up_what_it_needs_to_start():
    """A world's set-up refuses to start with less than its class's ``plan_min_stage_s`` of its stage left (its
    pre-flight, a least sweep, the margin after): the plan keeps its points out of a shorter stage, counting asv's
    start, the groups asv runs before the world's set-up cache (by ``setup_cache`` key, each where its first
    benchmark falls in name order) and the set-up process's import, rather than plan points that would only say
    "no time left"."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    bench = importlib.import_module("benchmarks.bench_collectives")
    need = bench.Collectives.plan_min_stage_s
    assert need == bench.MARGIN_S + bench.PREFLIGHT_MIN_S + bench.MIN_SWEEP_S
    grid = ([["gloo"], [2]], ["backend", "world"])
    world = _bench("bench_c.Coll.track_busbw", *grid, plan_setup_s=0.0, plan_s=0.0, figures_in_setup_cache=True,
                   plan_min_stage_s=need, setup_cache="bench_c:75")  # fmt: skip
    first = _bench("bench_a.First.track_x", *grid, plan_setup_s=5.0, plan_s=0.0)
    last = _bench("bench_z.Last.track_x", *grid, plan_setup_s=3.0, plan_s=0.0)
    listing = {b["name"]: b for b in (world, first, last)}
    plan = P.make_plan(listing, lambda s: True, COSTS, budget_s=1000, reserve_s=0)
    by = {p.benchmark.split(".")[1]: p for p in plan.points}
    assert by["Coll"].min_stage_s == need and by["First"].min_stage_s == 0 and by["Coll"].cache_key == "bench_c:75"
    # asv runs every benchmark without a set-up cache as one group, where the first of them falls: both ahead
    assert {p.benchmark for p in P.ahead_of(list(by.values()), by["Coll"])} == {first["name"], last["name"]}
    assert P.ahead_of([by["Coll"], by["Last"]], by["Coll"]) == []  # a group whose first benchmark sorts later
    pair = [by["First"], by["Last"]]
    ahead = plan.estimate_s(points=pair, group=lambda p: "fill") + COSTS.import_s
    kept = list(by.values())
    assert P.room_to_start(plan, kept, "fill", ahead + need + 0.5) == kept
    alone = P.room_to_start(plan, [by["Coll"]], "fill", COSTS.stage_call_s + COSTS.import_s + need + 0.5)
    assert alone == [by["Coll"]]  # nothing ahead: asv's start and its own process's import alone
    short = P.room_to_start(plan, kept, "fill", ahead + need - 0.5)
    assert short == pair and (by["Coll"].state, by["Coll"].reason) == ("dropped", P.SHORT_STAGE)
    # a re-plan without the world leaves its room to the others; it waits, dropped, for a later stage
    P.fit(plan, 1000, group=lambda p: "fill", exclude=[by["Coll"]])
    assert (by["Coll"].state, by["Coll"].reason) == ("dropped", P.SHORT_STAGE) and by["First"].state == "run"
    P.fit(plan, 1000, group=lambda p: "fill")
    assert by["Coll"].state == "run"


def test_the_h200s_known_shape_is_the_best_its_committed_search_found():
    """A search starts where the last one ended: the shape ``expected`` names for the H200 is the best of the newest
    search its source file holds, after the finals."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    records = [json.loads(line) for line in (root / "reports" / "gpu" / "h200" / "achievable.jsonl").open()]
    newest = max((r for r in records if r["device"].startswith("cuda") and r["dtype"] == "bfloat16"),
                 key=lambda r: r["time"])  # fmt: skip
    best = newest["best"]
    assert expected.known_shapes("NVIDIA H200", "bfloat16")[0] == (best["m"], best["k"], best["n"])
    assert "reports/gpu/h200/achievable.jsonl" in expected.model("NVIDIA H200").best_shapes_source
