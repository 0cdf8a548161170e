"""What a user sees in optuna-dashboard after a search: the objective is named, and no
proposal stays WAITING once the search has ended (real Optuna on SQLite)."""

from __future__ import annotations

import optuna

from arithsweep.search.searcher import ConstrainedOptunaSearch, retire_waiting
from arithsweep.search.spaces import load_space
from arithsweep.search.trial import ProposalSizer


def test_the_objective_is_named_and_queued_proposals_are_retired(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = load_space("tiny")
    ConstrainedOptunaSearch(space.ray_define_by_run(), target=0.99, study_name="s",
                            storage_url=url, sizer=ProposalSizer({"task": "add3"}),
                            start=space.start)
    study = optuna.load_study(study_name="s", storage=url)
    assert study.metric_names == ["parameters"]
    waiting = optuna.trial.TrialState.WAITING
    assert len(study.get_trials(states=(waiting,))) == len(space.start) >= 1
    assert retire_waiting("s", url) == len(space.start)
    trials = optuna.load_study(study_name="s", storage=url).get_trials()
    assert not [t for t in trials if t.state == waiting]
    assert all(t.state == optuna.trial.TrialState.FAIL for t in trials)
