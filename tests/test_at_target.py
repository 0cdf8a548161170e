"""A proposal reached the target when its own stop rule said so, not only when its held-out
estimate did: on a small task checked on every problem the whole check decides (mul2's start
shape stopped "reached target" at 97.6% held-out and was never verified before this).

    python -m pytest -q tests/test_at_target.py
"""

from __future__ import annotations

from types import SimpleNamespace

from arithsweep.search.report.results import trial_rows
from arithsweep.search.trials.packs import at_target


def _result(tmp_path, **metrics):
    return SimpleNamespace(error=None, config={}, metrics={"trial_id": "t1", "params": 17376,
                                                           **metrics},
                           path=str(tmp_path / "trial_t1"),
                           checkpoint=SimpleNamespace(path=str(tmp_path / "ck")))


def test_at_target_reads_the_stop_rule_as_well_as_the_estimate():
    assert at_target({"best_em": 0.995}, 0.99)
    assert at_target({"best_em": 0.976, "stop_reason": "reached target"}, 0.99)
    assert not at_target({"best_em": 0.976, "stop_reason": "plateau"}, 0.99)
    assert not at_target({}, 0.99)


def test_a_trial_its_whole_check_passed_is_feasible(tmp_path):
    reached = _result(tmp_path, best_em=0.976, stop_reason="reached target")
    (row,) = trial_rows([reached], 0.99)
    assert row["feasible"] and row["stop_reason"] == "reached target"
    (row,) = trial_rows([_result(tmp_path, best_em=0.976, stop_reason="plateau")], 0.99)
    assert not row["feasible"]
