"""scripts/research/replay_stops.py: the default's stops replayed on an --all-passes run, priced, verdicts unchanged."""

import csv
import json
from pathlib import Path

#: head/base of each pass (one pair of blocks a pass): spread far beyond the floor, inside it, and 1.5x
RATIOS = {
    "wild": [0.5, 0.6, 2.0, 1.8, 0.5, 2.0, 0.7, 1.6],
    "quiet": [1.001, 0.999] * 4,
    "slower": [1.5] * 8,
}


def _finished(folder: Path, all_passes: bool = True, ratios: dict[str, list[float]] = RATIOS) -> Path:
    """One pair of blocks a pass per figure, 10 s a figure and 5 s beside the figures (workers, caches) a pass."""
    folder.mkdir()
    figures = {}
    passes = max(len(r) for r in ratios.values())
    with open(folder / "pairs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["benchmark", "params", "unit", "process_pair", "pair", "base", "head"])
        for name, values in ratios.items():
            for p, r in enumerate(values):
                w.writerow([f"bench_x.time_{name}", "", "seconds", p, 0, 1.0, r])
            figures[f"bench_x.time_{name}"] = {
                "state": "done", "reason": "", "stopped_after": None, "benchmark": f"bench_x.time_{name}", "idx": 0,
                "values": [], "names": [], "unit": "seconds", "seconds": 10.0 * len(values),
                "pass_seconds": [10.0] * len(values),
            }  # fmt: skip
    record = {
        "passes": [{"figures": len(ratios), "seconds": 10.0 * len(ratios) + 5.0}] * passes,
        "options": {"min_passes": 8, "max_passes": 10, "all_passes": all_passes},
        "figures": figures, "floor": 0.02, "confidence": 0.99,
    }  # fmt: skip
    (folder / "run.json").write_text(json.dumps(record))
    return folder


def test_figures_certain_to_stay_undecided_stop_early_and_the_cost_follows(tmp_path, capsys, script):
    assert script("replay_stops").main([str(_finished(tmp_path / "run")), "--full-run-s", "100", "--same"]) == 0
    out = capsys.readouterr().out
    assert "8 passes, 4.7 min (2.8 full runs) with every figure to the end" in out
    # the wild figure stops after 4 passes (2 give too few Walsh averages to be certain); the others run 8:
    # 4 x 10 + 8 x 10 + 8 x 10 s of figures and 8 x 5 s of passes
    assert "4.0 min (2.4 full runs)" in out
    assert "figures by the pass they stop after: 4: 1, 8: 2" in out and "verdicts that change: 0" in out


def test_a_run_that_already_stopped_early_or_no_run_is_refused(tmp_path, capsys, script):
    assert script("replay_stops").main([str(_finished(tmp_path / "run", all_passes=False))]) == 2
    assert "not an --all-passes run" in capsys.readouterr().err
    assert script("replay_stops").main([str(tmp_path / "nothing")]) == 2
    assert "no run.json and pairs.csv" in capsys.readouterr().err


#: 8 passes of 4 pairs of blocks: the first pair of each pass wild, the other three equal
WILD_FIRST = [[r, 1.0, 1.0, 1.0] for r in [0.5, 2.0, 0.6, 1.8, 0.5, 2.0, 0.7, 1.6]]


def _four_pairs(folder: Path, ratios: list[list[float]] = WILD_FIRST) -> Path:
    """One figure, 8 passes of 4 pairs of blocks with these head/base ratios; 30 s a pass, 10 of them set-up."""
    folder.mkdir()
    with open(folder / "pairs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["benchmark", "params", "unit", "process_pair", "pair", "base", "head"])
        for p, pass_ratios in enumerate(ratios):
            for k, ratio in enumerate(pass_ratios):
                w.writerow(["bench_x.Mixed.time_it", "", "seconds", p, k, 1.0, ratio])
    figure = {
        "state": "done", "reason": "", "stopped_after": None, "benchmark": "bench_x.Mixed.time_it", "idx": 0,
        "values": [], "names": [], "unit": "seconds", "seconds": 240.0, "setup_seconds": 80.0,
        "pass_seconds": [30.0] * 8,
    }  # fmt: skip
    record = {
        "passes": [{"figures": 1, "seconds": 35.0}] * 8,
        "options": {"min_passes": 8, "max_passes": 10, "all_passes": True},
        "figures": {"bench_x.Mixed.time_it": figure}, "floor": 0.02, "confidence": 0.99,
    }  # fmt: skip
    (folder / "run.json").write_text(json.dumps(record))
    return folder


def test_fewer_pairs_are_replayed_from_the_first_and_priced_by_their_turns(tmp_path, capsys, script):
    folder = _four_pairs(tmp_path / "run")
    assert script("replay_stops").main([str(folder), "--same"]) == 0
    out = capsys.readouterr().out
    # every pass's median is the three equal pairs: an interval of width 0, detectable = the 2% floor
    assert "8 passes, 4.7 min with every figure to the end" in out
    assert any(line.split() == ["Mixed", "1", "2.0", "1"] for line in out.splitlines())
    assert script("replay_stops").main([str(folder), "--pairs", "1", "--same"]) == 0
    out = capsys.readouterr().out
    # each pass: 5 s of its own, 10 s of set-up, 20 s of turns for 4 kept pairs and the first -> 2/5 of them
    assert "at most 1 pairs of blocks a pass: 8 passes, 3.1 min with every figure to the end" in out
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["Mixed"])
    assert row[1] == "1" and float(row[2]) > 50 and row[3] == "0"  # only the wild first pairs are left


def test_fewer_than_one_pair_is_refused(tmp_path, capsys, script):
    assert script("replay_stops").main([str(_four_pairs(tmp_path / "run")), "--pairs", "0"]) == 2
    assert "--pairs must be at least 1, got 0" in capsys.readouterr().err


def _ten_passes(folder: Path) -> Path:
    """Ten passes: a figure either side of the floor's edge, and a 1.5x slowdown with one pass inside the
    floor (the fifth)."""
    return _finished(folder, ratios={"straddle": [0.9, 1.1] * 5, "outlier": [1.5] * 4 + [1.01] + [1.5] * 5})


def test_fewer_passes_at_most_stop_sooner_and_lose_the_verdicts_more_passes_give(tmp_path, capsys, script):
    """At most 10 passes, 2 values are too few to be certain; at most 8, two values either side of the floor's
    edge are (the interval is their range). The slowdown with one pass inside the floor is slower from 10
    values and undecided from 8: the replay says so and exits 1."""
    folder = _ten_passes(tmp_path / "run")
    assert script("replay_stops").main([str(folder), "--screen", "0", "--same"]) == 0
    out = capsys.readouterr().out
    assert "figures by the pass they stop after: 6: 1, 10: 1" in out and "verdicts that change: 0" in out
    assert script("replay_stops").main([str(folder), "--max-passes", "8", "--same"]) == 1
    out = capsys.readouterr().out
    assert "at most 8 passes: 10 passes" in out and "verdicts from 8 on, at most 8)" in out
    # the outlier cannot be slower once its fifth value is in: certain after the sixth pass
    assert "figures by the pass they stop after: 2: 1, 6: 1" in out
    assert "bench_x.time_outlier: slower -> undecided" in out
    # 2 x 10 s + 6 x 10 s of figures, 6 x 5 s of passes
    assert "the screen through 4, same sought, verdicts from 8 on, at most 8): 1.8 min" in out


def test_the_screen_stops_figures_whose_first_two_passes_disagree(tmp_path, capsys, script):
    """After 2 passes the straddling figure (0.9 then 1.1: their mean inside the floor, and no pair of processes
    showing a change on its own) could no longer be decided after 9 passes and, looking for changes only,
    stops; the slowdown's first four agree, so it runs on past the screen (its 5th is inside the floor) and
    stays slower. Seeking same too, the straddling figure may still end same: the screen leaves it, and
    futility stops it after 4. Without the screen it also needs 4 passes."""
    folder = _ten_passes(tmp_path / "run")
    assert script("replay_stops").main([str(folder), "--full-run-s", "100"]) == 0
    out = capsys.readouterr().out
    assert "figures by the pass they stop after: 2: 1, 10: 1" in out and "verdicts that change: 0" in out
    # 2 x 10 s + 10 x 10 s of figures and 10 x 5 s of passes
    assert "the screen through 4, changes only, verdicts from 8 on, at most 10): 2.8 min (1.7 full runs)" in out
    assert script("replay_stops").main([str(folder), "--full-run-s", "100", "--same"]) == 0
    out = capsys.readouterr().out
    assert "figures by the pass they stop after: 4: 1, 10: 1" in out and "verdicts that change: 0" in out
    assert script("replay_stops").main([str(folder), "--screen", "0"]) == 0
    assert "no screen, changes only, verdicts from 8 on, at most 10): 3.2 min" in capsys.readouterr().out


def test_fewer_passes_at_most_than_the_minimum_are_refused(tmp_path, capsys, script):
    assert script("replay_stops").main([str(_ten_passes(tmp_path / "run")), "--max-passes", "6"]) == 2
    assert "--max-passes must be at least the replay's --min-passes (8), got 6" in capsys.readouterr().err


def test_a_sweep_is_charged_only_while_a_figure_that_reads_it_runs(tmp_path, capsys, script):
    """A pass's setup_cache seconds (run.json's caches) count only up to the last pass a figure that reads it is
    replayed to run; a record without them is charged every pass's whole overhead."""
    folder = _finished(tmp_path / "run", ratios={"wild": RATIOS["wild"], "slower": RATIOS["slower"]})
    record = json.loads((folder / "run.json").read_text())
    wild = record["figures"]["bench_x.time_wild"]
    wild.update(in_cache=True, setup_cache="bench_x:1")
    record["passes"] = [{"figures": 2, "seconds": 20.0 + 25.0, "caches": {"bench_x:1": 20.0}}] * 8
    (folder / "run.json").write_text(json.dumps(record))
    assert script("replay_stops").main([str(folder), "--full-run-s", "100", "--same"]) == 0
    out = capsys.readouterr().out
    # the wild figure (the sweep) stops after 4 passes: 4 x 10 + 8 x 10 s of figures, 8 x 5 s of workers and
    # 4 x 20 s of its sweep
    assert "figures by the pass they stop after: 4: 1, 8: 1" in out and "4.0 min (2.4 full runs)" in out
    # the median of what the figures outside the sweep can detect, apart: the slowdown's, the floor
    assert any(line.split() == ["all", "but", "sweeps", "1", "2.0", "1"] for line in out.splitlines())

    # a record without caches (an older run): every pass's whole overhead is charged, as it ran
    record["passes"] = [{"figures": 2, "seconds": 45.0}] * 8
    (folder / "run.json").write_text(json.dumps(record))
    assert script("replay_stops").main([str(folder), "--full-run-s", "100", "--same"]) == 0
    assert "5.3 min (3.2 full runs)" in capsys.readouterr().out  # 4 x 10 + 8 x 10 s of figures, 8 x 25 s beside


def test_the_default_gives_up_the_same_verdicts_that_same_seeks(tmp_path, capsys, script):
    """The quiet figure (every pass inside the floor) ends same after 8 passes when same is sought; replayed as
    compare's default (changes only) it stops after 2, undecided, and the replay says so and exits 1. The
    slowdown runs on and stays slower."""
    folder = _finished(tmp_path / "run")
    assert script("replay_stops").main([str(folder), "--same"]) == 0
    assert "the screen through 4, same sought, verdicts from 8 on" in capsys.readouterr().out
    assert script("replay_stops").main([str(folder)]) == 1
    out = capsys.readouterr().out
    assert "the screen through 4, changes only, verdicts from 8 on" in out
    assert "figures by the pass they stop after: 2: 1, 4: 1, 8: 1" in out
    assert "bench_x.time_quiet: same -> undecided" in out and "time_slower" not in out


def test_a_change_planted_on_the_runs_own_noise_is_counted_as_the_rule_and_every_pass_call_it(tmp_path, capsys,
                                                                                             script):
    """``--shift 0.5`` replays every head block 50% slower: the quiet figure and the slowdown (now 2.25x) are
    slower by the rule and by every pass; the wild one (its values spread far past 50%) by neither. A time
    grows, a rate falls; a record is left as it was. An A/A replay counts its verdicts too (none false here)."""
    folder = _finished(tmp_path / "run")
    assert script("replay_stops").main([str(folder), "--same"]) == 0
    assert "verdicts: faster 0, slower 1, same 1, undecided 1; from every pass of the run: faster 0, slower 1, " \
        "same 1, undecided 1" in capsys.readouterr().out
    assert script("replay_stops").main([str(folder), "--shift", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "verdicts (every head block 50% slower): faster 0, slower 2, same 0, undecided 1; from every pass of " \
        "the run: faster 0, slower 2, same 0, undecided 1" in out
    assert "called slower, by family (replayed / every pass of the run, of the figures): bench_x 2/2 of 3" in out
    from devbench.compare.runner import Combination, Figure
    from devbench.records.spec import RECORDS

    slowed = script("replay_stops").slowed
    rate = Figure(Combination("bench_x.X.track_tflops", 0, (), (), "TFLOP/s"), a=[[2.0]], b=[[3.0]])
    assert slowed(rate, 0.5).b == [[2.0]] and slowed(rate, 0.5).a == [[2.0]]
    record = Figure(Combination(sorted(RECORDS)[0], 0, (), (), ""), a=[[1.0]], b=[[1.0]])
    assert slowed(record, 0.5).b == [[1.0]]


def test_more_passes_are_estimated_from_the_figures_own_pass_values(tmp_path, capsys, script):
    """``--passes N`` draws N of a figure's own pass values, half from the passes set up base first: the wild
    figure's 8 values cannot bound a 99% interval with fewer than 8 and give a narrower one with 32; the
    1.5x slowdown's equal values give the floor at any count."""
    folder = _finished(tmp_path / "run")
    assert script("replay_stops").main([str(folder), "--same", "--passes", "32"]) == 0
    out = capsys.readouterr().out
    assert "could detect with 32 pairs of processes, estimated by drawing that many of its own pass values" in out
    estimated = out.split("estimated by drawing")[1]
    rows = {line.split()[0]: line.split() for line in estimated.splitlines()[1:] if line.startswith("  ")}
    assert rows["bench_x"][1] == "3"  # the three figures, one family
    assert "all but sweeps" not in out  # no sweep among them
    module = script("replay_stops")
    figures, _ = module.read_finished(folder)
    wild = next(f for f in figures if f.combo.benchmark.endswith("wild"))
    slower = next(f for f in figures if f.combo.benchmark.endswith("slower"))
    rng = module.random.Random(0)
    assert module.resampled(wild, 4, 0.02, 0.99, rng) == float("inf")  # 4 values: no 99% interval
    at_8, at_32 = (module.resampled(wild, n, 0.02, 0.99, rng) for n in (8, 32))
    assert 0.02 < at_32 < at_8 < float("inf")
    assert abs(module.resampled(slower, 32, 0.02, 0.99, rng) - 0.02) < 1e-12


def test_the_drawn_values_keep_the_set_up_orders_apart(tmp_path, script):
    """A figure whose passes set up base first read +10% and the others -10% (the order's effect, no change):
    every draw holds as many of each, so its interval always spans both, never only one. Drawn from all
    values alike, half of the draws of two would hold one side only (an interval of width 0) and every
    draw of 12 would be as likely to lean one way: the estimate would not be the span of both."""
    module = script("replay_stops")
    figures, _ = module.read_finished(_finished(tmp_path / "run", ratios={"orders": [1.1, 0.9] * 5}))
    from devbench.records import verdict as V

    both = 1.02 * (1.1 / 0.9) ** 0.5 - 1
    assert V.signed_rank_k(2, 0.5) >= 1
    for n, confidence in ((12, 0.99), (2, 0.5)):  # at 50% two values bound an interval: their range
        draws = [module.resampled(figures[0], n, 0.02, confidence, module.random.Random(seed), draws=1)
                 for seed in range(40)]  # fmt: skip
        assert all(abs(d - both) < 1e-9 for d in draws), (n, draws)


def test_fewer_than_two_passes_to_estimate_are_refused(tmp_path, capsys, script):
    assert script("replay_stops").main([str(_finished(tmp_path / "run")), "--passes", "1"]) == 2
    assert "--passes must be at least 2, got 1" in capsys.readouterr().err


def test_fewer_passes_to_a_verdict_are_replayed_from_a_longer_run(tmp_path, capsys, script):
    """A run of 12 passes with verdicts from 12, replayed with verdicts from 8: the 1.5x slowdown is decided
    after 8 instead of 12, and stays slower; a minimum above the run's own, or none, is refused."""
    folder = _finished(tmp_path / "run", ratios={"slower": [1.5] * 12})
    record = json.loads((folder / "run.json").read_text())
    record["options"].update(min_passes=12, max_passes=12)
    (folder / "run.json").write_text(json.dumps(record))
    assert script("replay_stops").main([str(folder)]) == 0
    assert "figures by the pass they stop after: 12: 1" in capsys.readouterr().out
    assert script("replay_stops").main([str(folder), "--min-passes", "8", "--max-passes", "10"]) == 0
    out = capsys.readouterr().out
    assert "verdicts from 8 on, at most 10 passes: 12 passes" in out
    assert "figures by the pass they stop after: 8: 1" in out and "verdicts that change: 0" in out
    for bad in ("13", "0"):
        assert script("replay_stops").main([str(folder), "--min-passes", bad]) == 2
        err = capsys.readouterr().err
        assert f"--min-passes must be from 1 to the run's own (12: it kept every figure to that many only), got {bad}" \
            in err
