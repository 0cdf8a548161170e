"""A search trial's later rounds keep what the earlier ones found.

The best model of the finished rounds is saved in the trial's state folder as the next round
begins; a checkpoint holds it whenever the round under way does worse. A continued near-miss
round (`near_miss_round: continue`) starts from it; every
checkpoint it reports carries that start inside `best/` (named relatively, so the verified and
published model retrains from any copy of it), and a trial restored mid-round (Tune after a
crash, `search --resume`) finds its start in the restored checkpoint, not in the temporary
folder of the worker that died.

    .venv/bin/python -m pytest tests/test_continue_round.py -q
"""

from __future__ import annotations

import contextlib
import json

import pytest
from test_finishers import _fake_tune, _trial_setup

from arithsweep.core.hashing import sha256_file

FIRST_ROUND = 1400  # steps of the first round, trained from scratch
# the finishers' trial with them off, so the trial goes on to a continued round; a state at
# every evaluation, so a checkpoint mid-round exists to restore from. Target 1.0 and a
# near-miss distance of 1: every first round is a near miss that does not reach, on any
# machine (where round 1 ends, ~96% here, depends on the last bits of training)
CONTINUED = {"steps": FIRST_ROUND, "eval_every": 200, "finish_rounds": 0,
             "near_miss_round": "continue", "checkpoint_every": 200, "target": 1.0}
ALWAYS_NEAR = {"extra_rounds": 1, "near_miss": 1.0}


class _Restored:
    """The tune.Checkpoint a restored trial gets (local storage)."""

    def __init__(self, path) -> None:
        self.path = str(path)

    @contextlib.contextmanager
    def as_directory(self):
        yield self.path


def test_a_continued_round_carries_its_start_and_a_restored_one_finds_it(
        monkeypatch, tmp_path):
    pytest.importorskip("ray")
    from arithsweep.core.model.checkpoint import load_checkpoint
    from arithsweep.search.trials import state, trainable

    # best/ holds the continued round's model at every checkpoint, as if round 1 had nothing
    # better: whether round 2 beats round 1 at a given evaluation depends on the last bits of
    # training (an AVX-512 machine's round 2 fell below it once). The fallback to the earlier
    # rounds' best has its own test below.
    monkeypatch.setattr(state.TrialState, "rounds_best_em", lambda self, *_: -1.0)
    fake = _fake_tune(monkeypatch, tmp_path / "first")
    (tmp_path / "first").mkdir()
    trainable.TrialRunner([_trial_setup(**CONTINUED)], ALWAYS_NEAR, {}).run()
    assert fake.rows[-1]["rounds"] == 2, fake.rows[-1]
    second = [(ck, row) for ck, row in fake.checkpoints if row["step"] > FIRST_ROUND]
    assert len(second) >= 2, "the continued round must write states"
    for ck, _ in second:
        best = ck / "best"
        assert json.loads((best / "config.json").read_text())["train"]["init_from"] == "start"
        assert sha256_file(best / "start" / "model.safetensors") == sha256_file(
            ck / "state" / "rounds-best" / "model.safetensors")
        assert load_checkpoint(best).meta["init_from_sha256"] == sha256_file(
            best / "start" / "model.safetensors")

    # restored from its first state of the continued round: the worker's folder is gone
    ck, row = second[0]
    start_sha = sha256_file(ck / "state" / "rounds-best" / "model.safetensors")
    again = _fake_tune(monkeypatch, tmp_path / "again")
    (tmp_path / "again").mkdir()
    monkeypatch.setattr(again, "get_checkpoint", lambda: _Restored(ck))
    trainable.TrialRunner([_trial_setup(**CONTINUED)], ALWAYS_NEAR, {}).run()
    steps = [r["step"] for r in again.rows if "em" in r]
    assert steps and steps[0] > row["step"]  # it went on mid-round, not from its start
    assert again.rows[-1]["rounds"] == 2
    last, _ = again.checkpoints[-1]
    assert sha256_file(last / "best" / "start" / "model.safetensors") == start_sha


def test_a_round_that_does_worse_keeps_the_earlier_rounds_best(monkeypatch, tmp_path,
                                                                add2_trained):
    """A trial's checkpoints hold the best model of all its rounds: add10-tbukic-s1's 38 p
    reached 91% in round 1, its retrained round 2 stayed at chance, and its checkpoint held
    round 2's model, so the 91% one was gone with Tune's older checkpoint."""
    pytest.importorskip("ray")
    from dataclasses import replace

    from arithsweep.core.training.population import train
    from arithsweep.search.trials import trainable

    _fake_tune(monkeypatch, tmp_path)
    setup = _trial_setup(**CONTINUED)
    weak = train(setup.task, setup.model_cfg, replace(setup.train_cfg, steps=20, eval_every=10))
    strong, _ = add2_trained  # every add2 problem right
    trial = trainable.TrialRunner([setup], {"extra_rounds": 1}, {})
    strong.save_best(trial.ts.rounds_best)
    trial.proposals[0].result = weak
    trial._write_best(tmp_path / "a")
    assert sha256_file(tmp_path / "a" / "best" / "model.safetensors") == sha256_file(
        trial.ts.rounds_best / "model.safetensors")
    # and the other way round: this round's model when it is the better one
    weak.save_best(trial.ts.rounds_best)
    trial.proposals[0].result = strong
    trial._write_best(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "best" / "config.json").read_text())["metrics"][
        "eval_exact_match"] == strong.best_em == 1.0
    trial.ts.close()
