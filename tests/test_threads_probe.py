"""scripts/research/threads_probe.py: every setting measured in turns, written whole, bad input refused."""

import csv
import json
import os

import pytest


def test_one_round_measures_every_workload_and_thread_count(tmp_path, capsys, script):
    import torch

    before = torch.get_num_threads()
    try:
        assert script("threads_probe").main(["--rounds", "1", "--busy-max", "0", "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(before)
    rows = list(csv.DictReader(open(tmp_path / "threads.csv")))
    cores = len(os.sched_getaffinity(0))
    assert {(r["workload"], r["threads"]) for r in rows} == {
        (w, str(t)) for w in ("step", "matmul") for t in range(1, cores + 1)
    }
    assert all(float(r["median_us"]) > 0 and r["busy"] == "0" and r["rounds"] == "1" for r in rows)
    assert json.loads((tmp_path / "threads.json").read_text())["cores"] == cores
    assert not list(tmp_path.glob("*.tmp"))
    assert "median us" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--busy-max", "-1"]])
def test_bad_input_exits_2(argv, capsys, script):
    with pytest.raises(SystemExit) as exc:
        script("threads_probe").main(argv)
    assert exc.value.code == 2 and "--rounds >= 1" in capsys.readouterr().err


def test_a_step_whose_float32_product_is_wrong_is_refused(monkeypatch, script):
    import torch

    matmul = torch.Tensor.__matmul__
    off = lambda x, y: matmul(x, y) * (1.01 if x.dtype == torch.float32 else 1)  # noqa: E731
    monkeypatch.setattr(torch.Tensor, "__matmul__", off)
    with pytest.raises(AssertionError, match="float64"):
        script("threads_probe")._step_fn()
