"""The report's comparison rule, including the path taken when asv no longer has its private helper."""

from __future__ import annotations

import pandas as pd
import pytest
from asv.commands.compare import _is_result_better as asv_rule

from devbench.report import asvrule as C
from devbench.report.fields import STATS


def _ss(a, b, repeat=10):
    return ({"ci_99_a": a, "ci_99_b": b, "q_25": a, "q_75": b, "number": 1, "repeat": repeat}, None)


CASES = [
    (1.0, 2.0, _ss(0.9, 1.1), _ss(1.9, 2.1), 1.1),  # apart and past the factor: better
    (1.0, 2.0, _ss(0.5, 2.5), _ss(1.5, 2.5), 1.1),  # intervals overlap: not better
    (1.0, 1.05, _ss(0.99, 1.01), _ss(1.04, 1.06), 1.1),  # apart but within the factor
    (1.0, 2.0, _ss(0.5, 2.5, repeat=1), _ss(1.5, 2.5, repeat=1), 1.1),  # one repeat: the factor alone
    (1.0, 2.0, (None, None), (None, None), 1.1),  # no statistics: the factor alone
]


@pytest.mark.parametrize("case", CASES)
def test_fallback_rule_agrees_with_asv(case):
    assert C.is_result_better_fallback(*case) == asv_rule(*case)


def test_pairing_works_on_the_fallback_path(monkeypatch):
    """If asv moved ``_is_result_better``, comparisons run on the fallback (it once raised AttributeError)."""
    monkeypatch.setattr(C, "_is_result_better", C.is_result_better_fallback)

    def side(value, lo, hi):
        row = {"benchmark": "b.T.time_x", "params": "", "unit": "seconds", "status": "ok", "value": value}
        row["version"] = "v"
        row.update(dict(zip(STATS, [lo, hi, lo, hi, 1, 10], strict=True)))
        return pd.DataFrame([row])

    out = C.pair(side(1.0, 0.9, 1.1), side(2.0, 1.9, 2.1), ["benchmark", "params"])
    assert out.loc[0, "mark"] == "+" and out.loc[0, "change"] == "worse"
    out = C.pair(side(1.0, 0.5, 2.5), side(2.0, 1.5, 2.5), ["benchmark", "params"])
    assert out.loc[0, "mark"] == " "
