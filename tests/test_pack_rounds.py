"""A pack's proposals keep a lone trial's rules: a near miss in a pack earns its next round,
trained alone after the pack's, and reports it under its own `p<j>/` keys.

    .venv/bin/python -m pytest tests/test_pack_rounds.py -q
"""

from __future__ import annotations

import pytest
from test_finishers import _fake_tune, _trial_setup


def test_a_near_miss_in_a_pack_gets_its_next_round_as_a_lone_trial_does(monkeypatch, tmp_path):
    pytest.importorskip("ray")
    from arithsweep.search.trials import trainable
    from arithsweep.search.trials.packs import key

    # target 1.0 and a near-miss distance of 1: every proposal is a near miss that does not
    # reach, on any machine; the finishers off, so each goes on to a retrained round
    over = {"steps": 200, "eval_every": 100, "finish_rounds": 0, "target": 1.0, "seeds": 2}
    setups = [_trial_setup(lr=lr, **over) for lr in (1e-2, 3e-3)]
    fake = _fake_tune(monkeypatch, tmp_path)
    trainable.TrialRunner(setups, {"extra_rounds": 1, "near_miss": 1.0}, {}).run()
    last = fake.rows[-1]
    for j in (0, 1):
        # round 2: its best seed alone for twice the steps, counted after round 1's
        assert last[key(j, "rounds")] == 2 and last[key(j, "step")] == 200 + 400, last
        assert last[key(j, "seeds_trained")] == 2  # a retrained seed is no new seed
        # (a round's last row goes again with its end-of-round state)
        steps = list(dict.fromkeys(r[key(j, "step")] for r in fake.rows if key(j, "em") in r))
        assert steps == [100, 200, 300, 400, 500, 600], steps
    assert last["rounds"] == 2 and last["stop_reason"] == "pack done"
