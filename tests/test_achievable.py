"""The achievable-matmul search: its bounds, the check of every product it times, and its record."""

import json
from pathlib import Path

import pytest
import torch

from devbench.engine.measure import threads_pinned
from devbench.workloads import achievable as A
from devbench.workloads.matmul import Matmul

CPU = torch.device("cpu")
GPU = torch.device("cuda", 0)  # only as a value: nothing here touches CUDA


def test_squares_come_first_and_the_grid_stays_inside_its_bounds():
    cpu = A.candidates(CPU, "float32")
    assert cpu[: len(A.CPU_SQUARES)] == [(s, s, s) for s in A.CPU_SQUARES]
    assert len(cpu) == len(set(cpu))
    for m, k, n in cpu[len(A.CPU_SQUARES) :]:
        assert m in A.CPU_DIMS and n in A.CPU_DIMS and k in A.CPU_K
    gpu = A.candidates(GPU, "bfloat16")
    assert gpu[0] == (4096, 4096, 4096) and max(max(s) for s in gpu) <= max(A.GPU_K)


def test_shapes_that_would_not_fit_in_memory_are_left_out():
    everything = A.candidates(GPU, "bfloat16")
    free = 2 * A.shape_bytes((4096, 4096, 4096), "bfloat16") / 0.5 / 2  # room for 4096^3 and nothing larger
    fitting = A.candidates(GPU, "bfloat16", free_bytes=int(free))
    assert fitting and len(fitting) < len(everything)
    assert all(A.shape_bytes(s, "bfloat16") <= A.MEMORY_SHARE * free for s in fitting)
    assert A.shape_bytes((8, 8, 8), "float32") == 2 * 3 * 64 * 4


def test_the_budget_stops_the_search_between_shapes(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(A.time, "perf_counter", lambda: clock[0])

    def fake(shape, dtype, device, block_s=A.SEARCH_BLOCK_S, blocks=A.SEARCH_BLOCKS):
        clock[0] += 10.0  # every shape costs 10 s
        return A.ShapeResult(*shape, tflops=float(sum(shape)), error=0.0)

    shapes = [(1, 1, 1), (2, 2, 2), (3, 3, 3), (9, 9, 9)]
    s = A.search(CPU, "float32", shapes, budget_s=15.0, time_one=fake)
    assert [r.shape for r in s.results] == [(1, 1, 1), (2, 2, 2)] and s.left == 2
    assert s.best.shape == (2, 2, 2)
    record = s.as_record()
    assert record["best"] == {"m": 2, "k": 2, "n": 2, "tflops": 6.0} and record["left"] == 2
    assert len(record["searched"]) == 2 and len(record["final"]) == 2  # the finalists run past the budget
    with pytest.raises(ValueError, match="budget"):
        A.search(CPU, "float32", shapes, budget_s=0)
    with pytest.raises(ValueError, match="no shape"):
        A.search(CPU, "float32", [], budget_s=1)


def test_every_searched_product_is_checked_against_float64(monkeypatch):
    checked = []
    real = Matmul.check
    monkeypatch.setattr(Matmul, "check", lambda self: checked.append(self.shape) or real(self))
    shapes = [(32, 64, 16), (16, 16, 16), (64, 32, 48)]
    s = A.search(CPU, "float32", shapes, budget_s=60.0)
    # every shape, and every finalist again: each product is checked before each timing
    assert checked[:3] == shapes and sorted(checked[3:]) == sorted(shapes) and [r.shape for r in s.results] == shapes
    assert all(r.tflops > 0 and r.error < 1e-5 for r in s.results + s.final)
    assert s.best.tflops == max(r.tflops for r in s.final)


def test_the_best_is_the_fastest_finalist_on_its_second_longer_look():
    """The grid's fastest of many brief figures reads high: its best few are timed again, longer, and
    the best of that second look wins, whichever it was on the first."""
    first = {(1, 1, 1): 1.0, (2, 2, 2): 5.0, (3, 3, 3): 4.0, (4, 4, 4): 4.5, (5, 5, 5): 3.0}
    second = {(2, 2, 2): 3.0, (3, 3, 3): 3.9, (4, 4, 4): 3.5}  # the first look's winner was lucky
    timed = []

    def fake(shape, dtype, device, block_s=A.SEARCH_BLOCK_S, blocks=A.SEARCH_BLOCKS):
        final = (block_s, blocks) == (A.FINAL_BLOCK_S, A.FINAL_BLOCKS)
        timed.append((shape, final))
        return A.ShapeResult(*shape, tflops=(second if final else first)[shape], error=0.0)

    s = A.search(CPU, "bfloat16", list(first), budget_s=60.0, time_one=fake)
    assert [sh for sh, final in timed if final] == [(2, 2, 2), (4, 4, 4), (3, 3, 3)]  # the top 3, fastest first
    assert A.FINAL_BLOCK_S * A.FINAL_BLOCKS > A.SEARCH_BLOCK_S * A.SEARCH_BLOCKS
    assert s.best.shape == (3, 3, 3) and s.best.tflops == 3.9
    record = s.as_record()
    assert record["best"] == {"m": 3, "k": 3, "n": 3, "tflops": 3.9}
    assert [r["tflops"] for r in record["final"]] == [3.0, 3.5, 3.9] and len(record["searched"]) == 5
    # one shape timed (a spent budget, or a grid of one): no second look, the grid's figure stands
    one = A.search(CPU, "bfloat16", [(2, 2, 2)], budget_s=60.0, time_one=fake)
    assert one.final == [] and one.best.tflops == 5.0
    assert A.search(CPU, "bfloat16", list(first), budget_s=60.0, time_one=fake, finalists=0).best.tflops == 5.0


def test_a_shape_that_computes_garbage_is_never_timed(monkeypatch):
    monkeypatch.setattr(Matmul, "__call__", lambda self: self.outputs[0].zero_())
    with pytest.raises(AssertionError, match="32x64x16 float32 on cpu"):
        A.search(CPU, "float32", [(32, 64, 16)], budget_s=10.0)


def test_rectangular_products_are_right_and_counted():
    mm = Matmul(16, "float32", CPU, m=32, k=64)
    assert mm.shape == (32, 64, 16) and mm.flops == 2 * 32 * 64 * 16 and mm.label == "32x64x16"
    assert mm().shape == (32, 16) and mm.check() < 1e-5
    assert Matmul(8, "float32", CPU).label == "n=8"
    with pytest.raises(ValueError, match="dimensions"):
        Matmul(8, "float32", CPU, m=0)


def test_what_is_not_searched_says_why():
    assert "GPU tensor-core" in A.search_reason(CPU, "tf32")
    assert A.search_reason(GPU, "bfloat16") is None
    with pytest.raises(ValueError, match="int8"):
        A.search_reason(CPU, "int8")


def test_a_search_is_cached_per_machine_threads_and_kind_of_run(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(A.SEARCH_ENV, raising=False)
    monkeypatch.delenv("DEVBENCH_BLOCKS", raising=False)
    monkeypatch.setattr("devbench.records.files.default_machine", lambda: "box")
    searches = []

    def fake_search(device, dtype, shapes, budget):
        searches.append(dtype)
        return A.Search(str(device), dtype, [A.ShapeResult(*shapes[-1], tflops=1.0, error=0.0)], budget_s=budget)

    monkeypatch.setattr(A, "search", fake_search)
    shapes = [(8, 8, 8), (16, 8, 8)]
    first = A.searched(CPU, "float32", shapes, 5.0)
    again = A.searched(CPU, "float32", shapes, 5.0)
    assert searches == ["float32"] and not first["cached"] and again["cached"]
    assert again["best"] == {"m": 16, "k": 8, "n": 8, "tflops": 1.0}
    # the record says where and when it was made
    assert again["made"]["machine"] == "box" and again["made"]["threads"] == torch.get_num_threads()
    assert again["made"]["quick"] is False and again["made"]["when"].endswith("Z")
    A.searched(CPU, "float32", [(8, 8, 8)], 5.0)  # another grid: another search
    monkeypatch.setenv(A.SEARCH_ENV, "fresh")
    A.searched(CPU, "float32", shapes, 5.0)
    assert searches == ["float32"] * 3
    monkeypatch.delenv(A.SEARCH_ENV)
    # a quick run (make test's asv --quick, compare's passes) searches for itself, never for a real run
    monkeypatch.setenv("DEVBENCH_BLOCKS", "1")
    assert A.searched(CPU, "float32", shapes, 5.0)["made"]["quick"] is True
    assert searches == ["float32"] * 4
    monkeypatch.delenv("DEVBENCH_BLOCKS")
    assert A.searched(CPU, "float32", shapes, 5.0)["cached"]  # the real run's own search, not the quick one
    # another thread count is another machine for a CPU search
    with threads_pinned(max(1, torch.get_num_threads() + 1)):
        assert not A.searched(CPU, "float32", shapes, 5.0)["cached"]
    assert searches == ["float32"] * 5


def test_the_plan_knows_which_searches_the_set_up_cache_will_read_from_the_cache(monkeypatch, tmp_path):
    """``cached_searches`` asks what ``setup_cache`` will search (``search_inputs``, checked against the class's
    own call) and whether this user's cache holds it: gpu-run then prices that search as a read."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    import benchmarks.bench_achievable as B

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(A.SEARCH_ENV, raising=False)
    monkeypatch.delenv("DEVBENCH_BLOCKS", raising=False)
    monkeypatch.setattr("devbench.records.files.default_machine", lambda: "box")
    monkeypatch.setenv("DEVBENCH_BENCH", r"MatmulAchievable\.track_tflops\('cpu', 'float32'")
    asked = []

    def fake_search(device, dtype, shapes, budget):
        asked.append((dtype, [tuple(s) for s in shapes], budget))
        return A.Search(str(device), dtype, [A.ShapeResult(*shapes[0], tflops=1.0, error=0.0)], budget_s=budget)

    monkeypatch.setattr(A, "search", fake_search)
    monkeypatch.setattr(B, "write_records", lambda folder, records: None)
    with threads_pinned(torch.get_num_threads()):  # both pin the threads as a run does: put back after
        assert A.cached_searches(0) == []
        B.MatmulAchievable().setup_cache()  # the class's own search: what search_inputs says it searches
        shapes, budget = A.search_inputs(CPU, "float32")
        assert asked == [("float32", shapes, budget)]
        assert A.cached_searches(0) == ["cpu:float32"]
        monkeypatch.setenv(A.SEARCH_ENV, "fresh")
        assert A.cached_searches(0) == []


def test_a_shape_bound_set_in_the_environment_narrows_the_grid_and_keys_the_cache(monkeypatch, tmp_path):
    """``DEVBENCH_SEARCH_BYTES`` (make test's dry run) leaves the grid's shapes that take more out of what
    ``setup_cache`` searches (the smallest stays where none fits); a cached search of the whole grid is not read for
    it; a bad value is named."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(A.SEARCH_ENV, raising=False)
    monkeypatch.delenv(A.SEARCH_BYTES_ENV, raising=False)
    monkeypatch.setattr("devbench.records.files.default_machine", lambda: "box")
    searched = []

    def fake_search(device, dtype, shapes, budget):
        searched.append([tuple(s) for s in shapes])
        return A.Search(str(device), dtype, [A.ShapeResult(*shapes[0], tflops=1.0, error=0.0)], budget_s=budget)

    monkeypatch.setattr(A, "search", fake_search)
    room = 32 * 2**20
    with threads_pinned(torch.get_num_threads()):
        whole, budget = A.search_inputs(CPU, "float32")
        assert budget == A.CPU_BUDGET_S and max(A.shape_bytes(s, "float32") for s in whole) > room
        A.searched(CPU, "float32", whole, budget)  # the whole grid's search, cached
        monkeypatch.setenv(A.SEARCH_BYTES_ENV, str(room))
        shapes, budget = A.search_inputs(CPU, "float32")
        assert budget == A.CPU_BUDGET_S
        assert shapes == [s for s in whole if A.shape_bytes(s, "float32") <= room] and len(shapes) > 1
        assert A.cached_searches(0) == []  # the whole grid's search does not stand for this one
        assert A.searched(CPU, "float32", shapes, budget)["cached"] is False
        assert A.cached_searches(0) == ["cpu:float32"]
        monkeypatch.setenv(A.SEARCH_BYTES_ENV, "1")
        assert A.search_inputs(CPU, "float32")[0] == [min(whole, key=lambda s: A.shape_bytes(s, "float32"))]
    assert searched == [whole, shapes]
    for bad in ("soon", "0", "-1", "1.5"):
        monkeypatch.setenv(A.SEARCH_BYTES_ENV, bad)
        with pytest.raises(ValueError, match=f"DEVBENCH_SEARCH_BYTES='{bad}'"):
            A.search_inputs(CPU, "float32")


def test_a_cached_search_is_priced_as_a_read():
    from devbench.gpu import plan as P

    bench = {"name": "bench_a.Ach.track_tflops", "params": [["'cpu'"], ["'float32'", "'bfloat16'"], ["'best'"]],
             "param_names": ["device", "dtype", "run"],
             "plan_cache_s": {"per": ["device", "dtype"], "s": {"cpu": 75.0}, "cached_s": 1.0}}  # fmt: skip
    assert P.cache_units(bench, ("'cpu'", "'float32'", "'best'"), cached=("cpu:float32",))[1] == 1.0
    assert P.cache_units(bench, ("'cpu'", "'bfloat16'", "'best'"), cached=("cpu:float32",))[1] == 75.0


def test_a_cpu_search_is_priced_at_what_this_host_is_expected_to_take_at_most_its_bound():
    from devbench.gpu import plan as P

    bench = {"name": "bench_a.Ach.track_tflops", "params": [["'cpu'"], ["'float32'", "'bfloat16'"], ["'best'"]],
             "param_names": ["device", "dtype", "run"],
             "plan_cache_s": {"per": ["device", "dtype"], "s": {"cpu": 75.0}, "cached_s": 1.0}}  # fmt: skip
    expected = {"cpu:float32": 12.5, "cpu:bfloat16": 200.0}
    assert P.cache_units(bench, ("'cpu'", "'float32'", "'best'"), expected=expected)[1] == 12.5
    assert P.cache_units(bench, ("'cpu'", "'bfloat16'", "'best'"), expected=expected)[1] == 75.0  # its bound
    assert P.cache_units(bench, ("'cpu'", "'float32'", "'best'"), cached=("cpu:float32",), expected=expected)[1] == 1.0
    # the probe's figures travel in plan.json and come back as they were (gpu-run --costs-from)
    costs = P.Costs(0.01, 0.0, 5.0, 0, expected_searches=P.searches_of(expected))
    assert P.Costs.from_record(json.loads(json.dumps(costs.__dict__))) == costs


def test_the_expected_search_follows_the_grid_to_its_budget_then_prices_its_largest_as_finalists():
    shapes = [(1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 4)]
    seen = []

    def shape_s(shape, block_s, blocks):
        seen.append((shape, block_s == A.FINAL_BLOCK_S))
        return 10.0 if block_s == A.SEARCH_BLOCK_S else 1.0

    # the search looks at the clock between shapes: the second starts within the budget and ends past it
    assert A.search_s(shapes, 15.0, shape_s) == 20.0 + min(A.FINALISTS, 2)
    assert [s for s, final in seen if final] == [(2, 2, 2), (1, 1, 1)][: A.FINALISTS]
    assert A.search_s(shapes[:1], 15.0, shape_s) == 10.0  # one shape: no finalists


def test_this_hosts_cpu_searches_are_priced_for_every_dtype_it_searches(monkeypatch):
    calls = []
    monkeypatch.setattr(A, "time_shape", lambda shape, dtype, device: calls.append((shape, dtype)))
    got = A.expected_cpu_searches_s()
    searched = [d for d in A.SEARCHED if not A.search_reason(torch.device("cpu"), d)]
    assert sorted(got) == sorted(f"cpu:{d}" for d in searched) and all(v > 0 for v in got.values())
    assert [d for _, d in calls] == searched  # one small shape timed whole per dtype, for what a shape costs beside
    # the probe times the rates once (``cpu_rates``: each searched dtype and float64) and prices the searches with them
    rates = A.cpu_rates()
    measured = [d for d in A.DTYPES if d not in A.SEARCHED and not A.cpu_skip_reason(d, 1024)]  # float16 where fast
    assert sorted(rates) == sorted([*searched, *measured, "float64"]) and all(r > 0 for r in rates.values())
    monkeypatch.setattr(A, "_rate", lambda dtype, n=1024: pytest.fail("timed again"))
    given = A.expected_cpu_searches_s(rates)  # priced with the rates given: none timed again
    assert sorted(given) == sorted(got) and all(v > 0 for v in given.values())


def test_a_search_made_in_an_earlier_stage_is_priced_as_a_read_in_the_stages_after_it():
    from devbench.gpu import gpurun
    from devbench.gpu import plan as P

    assert gpurun.SEARCH_ENV == A.SEARCH_ENV  # gpu-run reads the switch without importing torch
    bench = {"name": "bench_a.Ach.track_tflops", "params": [["'cpu'"], ["'float32'"], ["'best'", "'burst'"]],
             "param_names": ["device", "dtype", "run"], "plan_s": 1.0,
             "plan_cache_s": {"per": ["device", "dtype"], "s": {"cpu": 75.0}, "cached_s": 1.0}}  # fmt: skip
    plan = P.make_plan({bench["name"]: bench}, lambda s: True, P.Costs(0.01, 0.0, 5.0, 0), 1000, 0)
    best, burst = plan.points
    assert best.unit == burst.unit and best.unit_s == burst.unit_s == 75.0 and best.unit_read_s == 1.0
    best.done = True
    P.made(plan, [best])
    assert burst.unit_s == 1.0 and best.unit_s == 75.0  # what ran keeps its price; what is to come reads it
    best.state = "cut"  # a stage cut before its search ended made nothing to read
    burst.unit_s = 75.0
    P.made(plan, [best])
    assert burst.unit_s == 75.0


def test_the_hold_before_a_burst_or_a_sustained_figure_is_capped_only_where_asked(monkeypatch):
    """``DEVBENCH_HOLD_S`` (make test's dry run) shortens the idle before a burst and the load before a sustained
    figure's blocks, never the blocks; unset, both last what the caller asks; a bad value is named."""
    from devbench.engine import bursts

    slept, loaded = [], []
    monkeypatch.setattr(bursts.time, "sleep", slept.append)
    monkeypatch.setattr(bursts, "run_for", lambda fn, device, seconds, calls: loaded.append(seconds))
    monkeypatch.setattr(bursts, "_sampled", lambda fn, device, calls, blocks, sampler: (calls, blocks))
    monkeypatch.delenv(bursts.HOLD_ENV, raising=False)
    assert bursts.burst(lambda: None, CPU, 1e-3)[1] == 5 and bursts.sustained(lambda: None, CPU, 1e-3)[1] == 5
    assert slept == [bursts.BURST_IDLE_S] and loaded == [bursts.SUSTAIN_FIRST_S]
    monkeypatch.setenv(bursts.HOLD_ENV, "0.1")
    calls = bursts.sustained(lambda: None, CPU, 1e-3)[0]
    bursts.burst(lambda: None, CPU, 1e-3, idle_s=0.05)
    assert loaded[-1] == 0.1 and slept[-1] == 0.05  # a shorter hold than the cap is kept
    assert calls == bursts.block_calls(1e-3, bursts.SUSTAINED_S / 5)  # the counted blocks as long as before
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(bursts.HOLD_ENV, bad)
        with pytest.raises(ValueError, match="DEVBENCH_HOLD_S"):
            bursts.sustained(lambda: None, CPU, 1e-3)
