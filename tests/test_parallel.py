"""The report's two halves (a forked child for the second): order, small jobs, errors."""

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
