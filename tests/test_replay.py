"""Near misses the search deadline cut are trained again first on `--resume`, from their own
seeds (real Optuna on SQLite; arithsweep.search.trials.replay)."""

from __future__ import annotations

from arithsweep.search import run_settings
from arithsweep.search.propose.searcher import ConstrainedOptunaSearch
from arithsweep.search.space.spaces import load_space
from arithsweep.search.trials.configs import (
    RESUME_FROM,
    SEEDS_OF,
    ProposalSizer,
    build_trial,
    seed_block,
)
from arithsweep.search.trials.replay import REPLAY_OF, cut_near_misses, requeue


def _row(tid, params, best, reason="search deadline", number=0, **extra):
    return {"trial_id": tid, "params": params, "best_em": best, "stop_reason": reason,
            "errored": False, "feasible": best >= 0.99,
            "config": {"trial_number": number, **extra}}


def test_only_deadline_cut_near_misses_below_the_incumbent_are_picked_best_first():
    rows = [_row("cut", 51, 0.981, number=6),
            _row("cut-low", 53, 0.90, number=7),
            _row("far", 50, 0.30, number=8),  # not near: 0.99 - 0.30 > 0.25
            _row("plateau", 49, 0.98, reason="plateau", number=9),  # stopped on its own curve
            _row("big", 57, 0.985, number=10),  # as large as the incumbent: the bound skips it
            _row("done", 45, 0.995, number=11),  # reached the target: verified, not replayed
            _row("again", 52, 0.95, number=12, **{SEEDS_OF: 3})]  # a replay cut once more
    cut = cut_near_misses(rows, target=0.99, near_miss=0.25, incumbent=57)
    assert [c["trial_id"] for c in cut] == ["cut", "again", "cut-low"]
    assert [c[SEEDS_OF] for c in cut] == [6, 3, 7]  # a replay keeps the first trial's seeds
    no_incumbent = cut_near_misses(rows, 0.99, 0.25, None)
    assert [c["trial_id"] for c in no_incumbent] == ["big", "cut", "again", "cut-low"]
    errored = [{**rows[0], "errored": True}]
    assert cut_near_misses(errored, 0.99, 0.25, None) == []


def test_a_resumed_search_trains_a_cut_near_miss_first_with_the_cut_trials_seeds(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    const = {"task": "add3", "target": 0.99, "seed": 4}

    def searcher() -> ConstrainedOptunaSearch:
        return ConstrainedOptunaSearch(load_space("tiny").ray_define_by_run(), target=0.99,
                                       study_name="s", storage_url=url,
                                       sizer=ProposalSizer(const), seed=0)

    run_settings.register("s", run_settings.DriverState(trials=9, deadline=None))
    try:
        first = searcher()
        configs = {tid: first.suggest(tid) for tid in ("a", "b")}
        first.save(str(tmp_path / "searcher.pkl"))
    finally:
        run_settings.unregister("s")
    number = configs["b"]["trial_number"]
    rows = [_row("b", 100, 0.97, number=number)]

    assert requeue("s", url, cut_near_misses(rows, 0.99, 0.25, None)) == ["b"]
    assert requeue("s", url, cut_near_misses(rows, 0.99, 0.25, None)) == []  # once only

    run_settings.register("s", run_settings.DriverState(trials=9, deadline=None))
    try:
        resumed = searcher()
        resumed.restore(str(tmp_path / "searcher.pkl"))
        again = resumed.suggest("c")
        fresh = resumed.suggest("d")
    finally:
        run_settings.unregister("s")
    space_keys = [k for k in configs["b"] if k != "trial_number"]
    assert {k: again[k] for k in space_keys} == {k: configs["b"][k] for k in space_keys}
    assert again[SEEDS_OF] == number and again["trial_number"] > number
    assert SEEDS_OF not in fresh
    assert resumed._ot_trials["c"].user_attrs[REPLAY_OF] == number

    def seed(config):
        return build_trial({**config, "arithsweep": const}).train_cfg.seed

    assert seed(again) == seed(configs["b"]) == seed_block(const, number)
    assert seed(fresh) == seed_block(const, fresh["trial_number"]) != seed(again)


def test_a_trial_the_user_interrupted_is_not_called_cut_by_the_deadline():
    """Ctrl-C leaves a trial unfinished (a resume restarts it with its own seeds): it is not a
    deadline cut, so it is not replayed a second time."""
    from arithsweep.search.run_settings import DEADLINE, INTERRUPTED, ended_because

    for name, deadline, reason in (("late", 0.0, DEADLINE), ("ctrl-c", None, INTERRUPTED)):
        run_settings.register(name, run_settings.DriverState(trials=1, deadline=deadline))
        try:
            assert ended_because(name) == reason
        finally:
            run_settings.unregister(name)
    rows = [_row("stopped", 51, 0.98, reason=INTERRUPTED, number=6)]
    assert cut_near_misses(rows, 0.99, 0.25, None) == []


def test_a_resume_after_the_deadline_starts_trials_again(tmp_path):
    """The deadline leaves the concurrency limiter's saved live set full of trials Tune has
    ended for good; restored as saved, the resumed search never suggested anything (it sat
    idle until its own deadline). They leave the live set, and the limit is the new run's."""
    from ray.tune.search import ConcurrencyLimiter

    from arithsweep.search.propose.searcher import BudgetedSearchGenerator

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    inner = ConstrainedOptunaSearch(load_space("tiny").ray_define_by_run(), target=0.99,
                                    study_name="d", storage_url=url,
                                    sizer=ProposalSizer({"task": "add3"}), seed=0)
    gen = BudgetedSearchGenerator(inner, "d", max_concurrent=2)
    limiter = gen.searcher
    assert isinstance(limiter, ConcurrencyLimiter)
    saved = {"counter": 8, "total_samples": 20, "finished": True, "experiment": None}
    run_settings.register("d", run_settings.DriverState(
        trials=30, deadline=None, ended_trials={"cut1", "cut2"}, concurrency=1))
    try:
        limiter.set_state({**limiter.get_state(), "live_trials": {"cut1", "cut2"},
                           "num_unfinished_live_trials": 2})
        gen.set_state(saved)
        assert limiter.live_trials == set() and limiter.max_concurrent == 1
        assert gen._total_samples == 30 and not gen._finished
        assert isinstance(limiter.suggest("new"), dict)
        assert limiter.suggest("another") is None  # -j 1 on the resume: one at a time
    finally:
        run_settings.unregister("d")


def test_searches_with_different_seeds_train_different_seeds():
    """--seed 0, 1 and 2 once started from training seeds 0-7, 1-8 and 2-9 (one lucky seed
    decided all three add3 searches); now each --seed owns its blocks, while a search made
    before (no seed_scheme in its constants) keeps its old blocks on resume."""
    from arithsweep.search.trials.configs import SEED_SCHEME

    def seeds(seed, n, scheme=SEED_SCHEME, k=8):
        first = seed_block({"seed": seed, "seed_scheme": scheme}, n)
        return set(range(first, first + k * 4))  # 4x: the seeds of every round too

    drawn = [seeds(s, n) for s in range(3) for n in range(50)]
    assert sum(map(len, drawn)) == len(set().union(*drawn))  # no seed twice
    assert seed_block({"seed": 2}, 3) == 2 + 3 * (1 << 20)  # the old scheme, kept
    assert max(seeds((1 << 26) - 1, (1 << 16) - 1)) < 1 << 63


def test_a_restarted_trial_whose_optuna_trial_was_closed_does_not_end_the_search(tmp_path):
    """Tune restarts an interrupted trial on resume; if an older run had closed its Optuna
    trial, reporting to it raised UpdateFinishedTrialError and Tune ended the whole search
    with a traceback. Its results are now kept from Optuna, and the search goes on."""
    import optuna

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    search = ConstrainedOptunaSearch(load_space("tiny").ray_define_by_run(), target=0.99,
                                     study_name="x", storage_url=url,
                                     sizer=ProposalSizer({"task": "add3"}), seed=0)
    run_settings.register("x", run_settings.DriverState(trials=3, deadline=None))
    try:
        config = search.suggest("t")
        optuna.load_study(study_name="x", storage=url).tell(
            config["trial_number"], state=optuna.trial.TrialState.FAIL)
        search.on_trial_result("t", {"params": 100, "best_em": 0.5, "training_iteration": 1})
        search.on_trial_complete("t", result={"params": 100, "best_em": 0.6})
        assert isinstance(search.suggest("u"), dict)
    finally:
        run_settings.unregister("x")


def test_a_replay_continues_the_state_of_a_cut_trial_that_trained_alone(tmp_path):
    """Its checkpoint folder goes with the replay (trial_state continues it mid-run), the
    pack's folder for a proposal cut inside a pack (its part of the pack's state)."""
    alone = _row("a", 51, 0.98, number=6, **{})
    alone.update(pack_size=1, checkpoint=str(tmp_path / "checkpoint_000004" / "best"))
    packed = _row("b.p1", 52, 0.97, number=7)
    packed.update(pack_size=4, checkpoint=str(tmp_path / "checkpoint_000002" / "p1" / "best"))
    cut = cut_near_misses([alone, packed], target=0.99, near_miss=0.25, incumbent=None)
    assert [c[RESUME_FROM] for c in cut] == [str(tmp_path / "checkpoint_000004"),
                                             str(tmp_path / "checkpoint_000002")]
    url = f"sqlite:///{tmp_path / 'o.db'}"
    import optuna

    study = optuna.create_study(study_name="s", storage=url)
    for _ in range(8):
        study.add_trial(optuna.trial.create_trial(params={"x": 1.0}, values=[1.0],
                        distributions={"x": optuna.distributions.FloatDistribution(0, 2)}))
    requeue("s", url, cut)
    waiting = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert [t.user_attrs.get(RESUME_FROM) for t in waiting] == [c[RESUME_FROM] for c in cut]


def test_the_replay_of_a_proposal_cut_inside_a_pack_continues_its_part_of_the_state(
        monkeypatch, tmp_path):
    """A pack member the deadline cut is replayed alone from the pack's checkpoint: its
    members' weights, optimiser and data streams, with its own running best, mid-run (a
    single trial's rule, `trial_state.TrialState.counters`), not retraced from step 0."""
    import pytest

    pytest.importorskip("ray")
    from test_finishers import _fake_tune, _trial_setup

    from arithsweep.search.trials import trainable
    from arithsweep.search.trials.packs import key

    over = {"steps": 600, "eval_every": 100, "checkpoint_every": 100, "finish_rounds": 0,
            "target": 1.0}
    setups = [_trial_setup(lr=lr, **over) for lr in (1e-2, 3e-3)]
    (tmp_path / "pack").mkdir()
    pack = _fake_tune(monkeypatch, tmp_path / "pack")
    trainable.TrialRunner(setups, {"extra_rounds": 0, "patience": 1000}, {}).run()
    ck, row = next((ck, r) for ck, r in pack.checkpoints if r.get(key(1, "step")) == 300)

    (tmp_path / "replay").mkdir()
    replay = _fake_tune(monkeypatch, tmp_path / "replay")
    trainable.TrialRunner([setups[1]], {"extra_rounds": 0, "patience": 1000},
                          {RESUME_FROM: str(ck), SEEDS_OF: 1}).run()
    steps = [r["step"] for r in replay.rows if "em" in r]
    assert steps[0] == 400, steps  # the evaluation after the cut state's, not step 100
    assert replay.rows[0]["best_em"] >= row[key(1, "best_em")]  # its running best came along
    last = replay.rows[-1]
    assert last["step"] == pack.rows[-1][key(1, "step")] == 600
    # and it trains on as proposal 1 did in the pack, not as proposal 0 (its own members'
    # part); within a few problems: another layout may split a pack's steps by its size
    in_pack = {r[key(1, "step")]: r[key(1, "em")] for r in pack.rows if key(1, "em") in r}
    ems = [r["em"] for r in replay.rows if "em" in r]
    assert ems == pytest.approx([in_pack[s] for s in steps], abs=0.05)
    assert last["seeds_trained"] == pack.rows[-1][key(1, "seeds_trained")]
