"""What a user sees in optuna-dashboard after a search: the objective is named, and no
proposal stays WAITING once the search has ended (real Optuna on SQLite)."""

from __future__ import annotations

import optuna

from arithsweep.search.propose.searcher import ConstrainedOptunaSearch
from arithsweep.search.report.results import retire_waiting
from arithsweep.search.space.spaces import load_space
from arithsweep.search.trials.configs import ProposalSizer


def _searcher(url: str, name: str) -> ConstrainedOptunaSearch:
    """A searcher over the tiny space on add3, as a search builds one (sampler seed 0)."""
    return ConstrainedOptunaSearch(load_space("tiny").ray_define_by_run(), target=0.99,
                                   study_name=name, storage_url=url,
                                   sizer=ProposalSizer({"task": "add3"}), seed=0)


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


def test_the_study_best_is_a_verified_model_not_a_held_out_estimate(tmp_path):
    """A proposal that reached the target held-out is told to Optuna only once verified: the
    smaller one that verification rejected becomes infeasible (so optuna-dashboard's best line
    skips it), the verified one is the study's best, and one never verified when the search
    ends is infeasible too."""
    from arithsweep.search import run_settings
    from arithsweep.search.propose.verdicts import tell_verified

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    search = _searcher(url, "v")
    state = run_settings.register("v", run_settings.DriverState(
        trials=3, deadline=None, verifier=lambda candidate: {}))
    try:
        for tid in ("small", "large", "late"):
            assert isinstance(search.suggest(tid), dict)
        numbers = {tid: search._ot_trials[tid].number for tid in ("small", "large", "late")}
        search.on_trial_complete("small", result={"params": 100, "best_em": 0.995})
        search.on_trial_complete("large", result={"params": 200, "best_em": 0.999})
        running = optuna.trial.TrialState.RUNNING
        study = optuna.load_study(study_name="v", storage=url)
        assert {t.number for t in study.get_trials(states=(running,))} == set(numbers.values())
        state.verified["small"] = {"qualifies": False, "exact_match": 0.95}
        state.verified["large"] = {"qualifies": True, "exact_match": 0.998}
        search.on_trial_complete("late", result={"params": 50, "best_em": 0.992})
        assert tell_verified("v", 0.99) == 2  # "late" has no verdict yet: it keeps waiting
        assert tell_verified("v", 0.99, final=True) == 1
        study = optuna.load_study(study_name="v", storage=url)
        by_number = {t.number: t for t in study.get_trials()}
        small, large, late = (by_number[numbers[k]] for k in ("small", "large", "late"))
        assert all(t.state == optuna.trial.TrialState.COMPLETE for t in (small, large, late))
        assert study.best_trial.number == large.number
        assert small.system_attrs["constraints"][0] > 0.03  # 0.99 - 0.95
        assert small.user_attrs["verification"] == "rejected by verification"
        assert large.user_attrs["verified_em"] == 0.998
        assert late.system_attrs["constraints"][0] > 0
        assert late.user_attrs["verification"] == "not verified"
    finally:
        run_settings.unregister("v")


def test_a_resumed_search_still_tells_the_proposals_it_held_for_verification(tmp_path):
    """Killed after a proposal reached the target but before it was told: the resumed
    searcher neither fails it as an orphan nor leaves it RUNNING; it is told from the verdict
    in verified.json (here `state.verified`), and one with no verdict when the search ends."""
    from arithsweep.search import run_settings
    from arithsweep.search.propose.verdicts import tell_verified

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = _searcher(url, "r")
    run_settings.register("r", run_settings.DriverState(
        trials=3, deadline=None, verifier=lambda candidate: {}))
    try:
        for tid in ("kept", "unverified", "orphan"):
            assert isinstance(first.suggest(tid), dict)
        numbers = {tid: first._ot_trials[tid].number for tid in ("kept", "unverified", "orphan")}
        first.on_trial_complete("kept", result={"params": 100, "best_em": 0.995})
        first.on_trial_complete("unverified", result={"params": 90, "best_em": 0.996})
        first._ot_trials.pop("orphan")  # asked, but no Tune trial owned it at the save
        first.save(str(tmp_path / "searcher.pkl"))
    finally:
        run_settings.unregister("r")  # the process dies: the driver's state goes with it

    state = run_settings.register("r", run_settings.DriverState(
        trials=3, deadline=None, verifier=lambda candidate: {},
        verified={"kept": {"qualifies": True, "exact_match": 0.997}}))
    try:
        resumed = _searcher(url, "r")
        resumed.restore(str(tmp_path / "searcher.pkl"))
        assert set(state.awaiting) == {"kept", "unverified"}
        assert tell_verified("r", 0.99) == 1
        assert tell_verified("r", 0.99, final=True) == 1
        by_number = {t.number: t for t in optuna.load_study(study_name="r",
                                                            storage=url).get_trials()}
        kept, unverified, orphan = (by_number[numbers[k]]
                                    for k in ("kept", "unverified", "orphan"))
        assert kept.state == optuna.trial.TrialState.COMPLETE
        assert kept.user_attrs["verification"] == "verified" and kept.value == 100
        assert unverified.user_attrs["verification"] == "not verified"
        assert unverified.system_attrs["constraints"][0] > 0
        assert orphan.state == optuna.trial.TrialState.FAIL
    finally:
        run_settings.unregister("r")
