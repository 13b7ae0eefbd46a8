"""The report's two halves (a forked child for the second): order, small jobs, errors."""

import os
import time

import pytest

from devbench.report import parallel


def test_halves_come_back_in_order_and_small_jobs_stay_here(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    assert parallel.in_halves(lambda a, b: list(range(a, b)), 10, min_items=4) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert parallel.in_halves(lambda a, b: (a, b), 3, min_items=4) == [(0, 3)]
    monkeypatch.setattr(parallel, "cores", lambda: 1)
    assert parallel.in_halves(lambda a, b: (a, b), 10, min_items=4) == [(0, 10)]


def test_the_childs_failure_is_raised_here_with_its_message(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)

    def work(a, b):
        if a:
            raise ValueError("bad file in the second half")
        return a

    with pytest.raises(RuntimeError, match="ValueError: bad file in the second half"):
        parallel.in_halves(work, 10, min_items=2)


def test_forked_work_comes_back_and_runs_here_when_it_cannot_fork(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    job = parallel.Forked(lambda: {"pid": os.getpid(), "rows": list(range(3))})
    assert job.forked
    got = job.result()
    assert got["rows"] == [0, 1, 2] and got["pid"] != os.getpid()
    assert job.result() is got  # asked twice, run once
    monkeypatch.setattr(parallel, "cores", lambda: 1)
    here = parallel.Forked(lambda: os.getpid())
    assert not here.forked and here.result() == os.getpid()


def test_a_forked_child_no_longer_wanted_is_stopped(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    mark = tmp_path / "finished"
    with parallel.Forked(lambda: (time.sleep(30), mark.write_text("late"))) as job:
        proc = job._proc
    assert not proc.is_alive() and not mark.exists()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        parallel.Forked(lambda: 1 / 0).result()


def test_a_forked_result_larger_than_a_pipe_holds_comes_back_whole(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    job = parallel.Forked(lambda: (os.getpid(), list(range(100_000))))  # more than a pipe holds
    assert job.forked
    pid, rows = job.result()
    assert pid != os.getpid() and rows == list(range(100_000)) and job.result() == (pid, rows)
