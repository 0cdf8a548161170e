"""The search driver end to end: real Ray (local, 2 CPUs), real Optuna, MLflow and leaderboard
SQLite files, all under tmp_path. One Ray instance serves the whole module (run_search joins
an initialised Ray and leaves it running).

    .venv/bin/python -m pytest tests/test_search.py -q

The search tests are marked slow (about 2.5 minutes together on 2 busy cores); the option
and plot checks at the bottom are fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arithsweep.core.errors import ConfigError
from arithsweep.search.driver import SearchOptions, run_search

# d_model 16, 2 heads, d_ff 32, lr 0.01, batch 128 passes 90% on add2 in ~900 steps for every
# seed tried; the space varies d_ff so the study has something to minimise. The first start
# point becomes the incumbent; the second is larger, so it must be skipped untrained.
SPACE_OK = """
name: test-add2
start:
  - {model.d_ff: 32}
  - {model.d_ff: 48}
model:
  n_layers: 1
  d_model: 16
  n_heads: 2
  d_ff: {choice: [0, 32, 48]}
train:
  steps: 1500
  lr: 0.01
  warmup: 50
  batch_size: 128
  seeds: 2
  eval_every: 100
  eval_size: 1024
"""

# Short runs that never reach the target; d_model 12 with 5 heads is an invalid sample.
SPACE_SHORT = """
name: test-short
model:
  n_layers: 1
  d_model: {choice: [10, 12]}
  n_heads: 5
  d_ff: 16
train:
  steps: 200
  lr: 0.01
  batch_size: 64
  seeds: 1
  eval_every: 100
  eval_size: 512
"""


def _space(tmp_path: Path, text: str) -> str:
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return str(p)


def _opts(tmp_path: Path, **kw) -> SearchOptions:
    base = dict(task="add2", target=0.9, cpus_per_trial=1, root=str(tmp_path / "searches"),
                seed=0)
    return SearchOptions(**{**base, **kw})


def _run(opts: SearchOptions, **kw):
    """run_search with the CLI's verifier, recording into <root>/../lb.db."""
    from arithsweep.leaderboard.verify import make_verifier

    db = f"sqlite:///{Path(opts.root).parent / 'lb.db'}"
    return run_search(opts, verifier=make_verifier(db), **kw)


def _study(summary):
    import optuna

    return optuna.load_study(study_name=summary.study_name, storage=summary.study_storage)


def _trial_runs(summary):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(summary.mlflow_uri)
    runs = client.search_runs([summary.mlflow_experiment_id], filter_string=(
        f"tags.`arithsweep.search` = '{summary.name}' and tags.`arithsweep.kind` = 'trial'"))
    return client, runs


@pytest.mark.slow
def test_search_verifies_at_once_and_never_trains_what_cannot_win(ray_local, tmp_path):
    from arithsweep.leaderboard.board import open_db

    events: list[dict] = []
    s = _run(_opts(tmp_path, space=_space(tmp_path, SPACE_OK), trials=3, name="a",
                   concurrency=1, train_target=0.97, patience=4,
                   command="arithsweep search --task add2 -j 1"), on_update=events.append)

    assert s.n_trials == 3 and s.n_errored == 0
    # the command is kept for `publish`, which prints it under the entry the search found
    assert json.loads((Path(s.dir) / "search.json").read_text())["command"] == (
        "arithsweep search --task add2 -j 1")
    first = min(s.trials, key=lambda t: t["config"]["trial_number"])
    assert first["config"]["model.d_ff"] == 32 and first["feasible"]
    # verified on the driver as soon as it finished: the incumbent, and an entry
    assert s.incumbent == first["params"]
    assert s.best is not None and s.best["entry_id"] is not None
    assert s.best["params"] == s.incumbent and s.best["verified_em"] >= 0.9
    # the larger start point and every later proposal at or above the incumbent: told, not run
    assert s.skipped and s.skipped[0]["config"]["model.d_ff"] == 48
    assert all(k["params"] >= s.incumbent and k["bound"] <= k["params"] for k in s.skipped)
    later = [t for t in s.trials if t is not first]
    assert all(t["params"] < s.incumbent for t in later)  # only d_ff 0 could still win
    assert s.trained_above_incumbent == []
    assert all(t["stop_reason"] in ("plateau", "step budget") for t in later)
    # success rate per architecture adds up to the trials'
    assert sum(a["seeds_trained"] for a in s.architectures) == sum(
        t["seeds_trained"] for t in s.trials)
    assert all(0 <= a["seeds_reached"] <= a["seeds_trained"] for a in s.architectures)
    assert first["seeds_reached"] >= 1
    assert json.loads((Path(s.dir) / "summary.json").read_text())["n_trials"] == 3
    # what the proposals cost: each trial's own time x its CPU, so no more than all of them
    # back to back, and at least the one that ran longest
    assert 0 < s.cpu_hours * 3600 <= s.wall_time * 2 + 1
    assert json.loads((Path(s.dir) / "verified.json").read_text())[first["trial_id"]][
        "qualifies"]
    assert Path(s.plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Optuna: trained and skipped trials all told, with the constraint; best = the incumbent
    study = _study(s)
    assert len(study.trials) == s.n_trials + len(s.skipped)
    assert all("exact_match" in t.constraints for t in study.trials)
    skipped = [t for t in study.trials if t.user_attrs.get("skipped")]
    assert len(skipped) == len(s.skipped)
    assert all(t.constraints["exact_match"] > 0 for t in skipped)  # never feasible untrained
    assert study.best_trial.value == s.incumbent
    # the incumbent was told to Optuna only once verified, and says so
    best = study.best_trial
    assert best.user_attrs["verification"] == "verified"
    assert best.user_attrs["verified_em"] == s.best["verified_em"]
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    # optuna-dashboard reads the list form: without it the infeasible trials drew its best line
    from optuna_dashboard._serializer import serialize_frozen_trial

    for t in study.trials:
        shown = serialize_frozen_trial(study._study_id, t, {})["constraints"]
        assert shown == [t.constraints["exact_match"]]

    # MLflow: one finished run per trained trial (none for skipped ones), verified tag
    client, runs = _trial_runs(s)
    assert {r.data.tags["arithsweep.trial_id"] for r in runs} == {t["trial_id"] for t in s.trials}
    assert all(r.info.status == "FINISHED" for r in runs)
    run = next(r for r in runs if r.info.run_id == s.verified[0]["mlflow_run_id"])
    assert run.data.params["model.d_model"] == "16" and run.data.params["task"] == "add2"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "best_em")]
    assert steps[0] == 100 and steps == sorted(steps)
    assert {f.path for f in client.list_artifacts(run.info.run_id)} == {"checkpoint"}
    assert run.data.tags["arithsweep.verified"] == "true"

    # leaderboard: the verified entry carries the search's metadata
    rows = open_db(f"sqlite:///{tmp_path / 'lb.db'}").query(task="add2", all=True)
    mine = [r for r in rows if r["search_name"] == "a"]
    assert mine and mine[0]["trial_id"] == first["trial_id"]
    # ...and the MLflow run it came from (verified while the search ran, so from the driver's
    # record of each proposal's run, not the end-of-search mapping)
    assert mine[0]["mlflow_run_id"] == next(
        r.info.run_id for r in runs if r.data.tags["arithsweep.trial_id"] == first["trial_id"])
    # ...and its checkpoint the trial's success rate, for LEADERBOARD.md's "seeds reached"
    meta = json.loads((Path(mine[0]["checkpoint_path"]) / "config.json").read_text())["meta"]
    assert meta["seeds_reached"] == first["seeds_reached"] >= 1
    assert meta["seeds_trained"] == first["seeds_trained"]

    # live view: every trial started and completed; skips and the verification shown
    kinds = {(e["event"], e["trial_id"]) for e in events}
    for t in s.trials:
        assert {("start", t["trial_id"]), ("complete", t["trial_id"])} <= kinds
    assert ("verified", first["trial_id"]) in kinds
    assert any(e["event"] == "skipped" for e in events)


def test_a_saturated_evaluation_never_counts_as_a_plateau_when_the_target_asks_for_more():
    """Every one of 4,096 problems right cannot show five or six nines: flat is all it reads,
    so the schedule's end (and its polish) decides; at 0.99 a saturated curve is a plateau."""
    from types import SimpleNamespace

    from arithsweep.search.trials.plateau import Plateau, saturated

    r = SimpleNamespace(eval_size=4096)
    assert saturated(1.0, r, 0.999999) and saturated(1.0, r, 0.99999)
    assert not saturated(1.0, r, 0.99) and not saturated(0.9998, r, 0.999999)
    assert not saturated(1.0, SimpleNamespace(eval_size=0), 0.999999)
    six = Plateau(patience=3)
    assert not any(six.update(1.0, 1e-8, 1.0, 0.1, saturated(1.0, r, 0.999999))
                   for _ in range(20))
    two = Plateau(patience=3)
    assert any(two.update(1.0, 1e-8, 1.0, 0.1, saturated(1.0, r, 0.99)) for _ in range(20))


def test_plateau_never_stops_a_model_whose_loss_still_falls():
    from arithsweep.search.trials.plateau import Plateau

    slow = Plateau(patience=3)  # a small model: exact match stuck at 0, loss falling 5%/eval
    assert not any(slow.update(0.0, 2.0 * 0.95 ** i) for i in range(50))
    stuck = Plateau(patience=3)  # nothing moves: stopped after `patience` evaluations
    assert [stuck.update(0.1, 1.0) for _ in range(4)] == [False, False, False, True]
    late = Plateau(patience=3)  # exact match climbing while the loss is flat also counts
    assert not any(late.update(0.01 * i, 1.0) for i in range(20))
    # a slow fall adds up: 0.5% an evaluation is 2% every four (add10-tbukic-s5's 38 p,
    # continued at 90%: 0.3% an evaluation, stopped after 15 evaluations by a running mark)
    creep = Plateau(patience=5)
    assert not any(creep.update(0.9, 0.05 * 0.995 ** i) for i in range(60))
    # noise around a flat level does not: it stops after `patience`
    noisy = Plateau(patience=5)
    assert any(noisy.update(0.9 + 0.001 * (i % 2), 0.05 * (1 + 0.005 * (i % 2)))
               for i in range(10))


def test_a_seed_that_learnt_part_of_the_task_gets_the_low_lr_end_of_its_schedule():
    """add10's 57 p: its best seed swung between 0.2% and 59% from one evaluation to the next
    at a high lr; flat evaluations count only once the lr is below half its peak, or for a
    model that has learnt less than a tenth (at chance: stopped as before)."""
    from arithsweep.search.trials.plateau import Plateau

    swing = [0.59, 0.002, 0.4, 0.01, 0.55, 0.3] * 5
    high = Plateau(patience=3)
    assert not any(high.update(em, 1.0, lr_share=0.8) for em in swing)
    assert [high.update(0.5, 1.0, lr_share=0.4) for _ in range(3)] == [False, False, True]
    chance = Plateau(patience=3)  # nothing learnt: the high lr does not hold it
    assert [chance.update(0.01, 1.0, lr_share=0.9) for _ in range(4)] == [
        False, False, False, True]
    unknown = Plateau(patience=3)  # no lr given: the rule as it was
    assert any(unknown.update(em, 1.0) for em in swing)


def test_patience_grows_with_the_schedule_and_never_falls_below_the_searchs():
    """A long schedule is long because its models grok late: a tenth of its evaluations
    without progress, where that is more than --patience (add10's 133K steps: 27, not 8)."""
    from types import SimpleNamespace

    from arithsweep.search.trials.plateau import patience_for

    def cfg(steps, every=500):
        return SimpleNamespace(steps=steps, eval_every=every)

    assert patience_for({"patience": 8}, cfg(40000)) == 8  # add3's schedules: unchanged
    assert patience_for({"patience": 8}, cfg(25000)) == 8
    assert patience_for({"patience": 8}, cfg(133333)) == 27
    assert patience_for({"patience": 30}, cfg(133333)) == 30  # the user's, when it is more
    assert patience_for({}, cfg(0)) == 8  # no step budget (a time budget): the default


@pytest.mark.slow
def test_crashing_and_invalid_trials_do_not_end_the_search(ray_local, tmp_path):

    s = _run(_opts(tmp_path, space=_space(tmp_path, SPACE_SHORT), trials=4, name="b",
                         n_verify=1, fail_when={"trial_number": 0}))
    assert s.n_trials == 4 and s.n_errored == 1 and s.n_feasible == 0 and s.best is None
    crashed = next(t for t in s.trials if t["errored"])
    assert "injected failure" in crashed["error"]
    for t in s.trials:  # 12 is not divisible by 5 heads: infeasible, reported, no crash
        if not t["errored"]:
            assert t["invalid_config"] == (t["config"]["model.d_model"] == 12)

    study = _study(s)
    states = {t.user_attrs["tune_trial_id"]: t for t in study.trials}
    assert states[crashed["trial_id"]].state.name == "FAIL"
    assert all(t.state.name == "COMPLETE" for k, t in states.items() if k != crashed["trial_id"])
    assert all(t.constraints["exact_match"] > 0 for t in study.trials)

    _, runs = _trial_runs(s)
    by_trial = {r.data.tags["arithsweep.trial_id"]: r for r in runs}
    assert len(by_trial) == 4
    assert by_trial[crashed["trial_id"]].info.status == "FAILED"
    assert "injected failure" in by_trial[crashed["trial_id"]].data.tags["arithsweep.error"]


SPACE_ONE = """
name: test-one
model:
  n_layers: 1
  d_model: 16
  n_heads: 2
  d_ff: 32
train:
  steps: 600
  lr: 0.01
  warmup: 50
  batch_size: 128
  seeds: 2
  eval_every: 100
  eval_size: 1024
  layout: tiny
"""


def _rows(summary) -> list[dict]:
    (f,) = Path(summary.dir).glob("tune/*/result.json")
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_trial_running_alone_is_lent_the_idle_core_and_trains_the_same(ray_local, tmp_path):
    """Ray Tune's ResourceChangingScheduler (search.cores) re-sizes a lone trial at its first
    row with a state: paused, restarted from that state on 2 CPUs. It loses no step and, the
    kernel's bits being the same on any thread count, trains the very model it would have
    trained on one core (same machine, same build)."""
    space = _space(tmp_path, SPACE_ONE)
    lent = _run(_opts(tmp_path / "lent", space=space, trials=1, name="lent", fresh=True,
                      train_target=1.0))
    alone = _run(_opts(tmp_path / "alone", space=space, trials=1, name="alone", fresh=True,
                       train_target=1.0, spare_cores=False))
    a, b = _rows(lent), _rows(alone)
    cpus = [r.get("cpus") for r in a if "cpus" in r]
    assert cpus[0] == 1 and set(cpus[1:]) == {2}  # lent at the first row with a state
    assert a[0]["state_saved"] == 1
    assert {r.get("cpus") for r in b if "cpus" in r} == {1}
    # no step trained twice or skipped, and every evaluation the same
    assert [(r["step"], r.get("em")) for r in a] == [(r["step"], r.get("em")) for r in b]
    assert lent.trials[0]["best_em"] == alone.trials[0]["best_em"]
    client, (run,) = _trial_runs(lent)  # MLflow keeps the trial's cpus as a curve
    assert [m.value for m in client.get_metric_history(run.info.run_id, "cpus")][:2] == [1, 2]
    # what it cost counts the lent core: more CPU-time than its own wall time on one core
    (t,) = [r for r in a if "cpus" in r][-1:]
    assert lent.cpu_hours * 3600 > t["time_total_s"] * 1.2


@pytest.mark.slow
def test_resume_continues_the_experiment_and_the_study(ray_local, tmp_path):

    space = _space(tmp_path, SPACE_SHORT.replace("{choice: [10, 12]}", "10"))
    first = _run(_opts(tmp_path, space=space, trials=2, name="c", n_verify=0))
    assert first.n_trials == 2 and len(_study(first).trials) == 2
    exp = Path(first.dir) / "tune"
    tuner_pkl = (exp / "tuner.pkl").read_bytes()

    with pytest.raises(ConfigError, match="already exists"):
        _run(_opts(tmp_path, space=space, trials=4, name="c"))
    with pytest.raises(ConfigError, match="target"):
        _run(_opts(tmp_path, trials=4, resume="c", target=0.5))

    # resumed from another path, as a repository's study is from a clone elsewhere: its
    # folder, MLflow database beside it, and nothing left where it was
    moved = tmp_path / "clone"
    moved.mkdir()
    (tmp_path / "searches").rename(moved / "searches")
    exp = moved / "searches" / "c" / "tune"
    again = _run(SearchOptions(resume="c", trials=4, root=str(moved / "searches"),
                               n_verify=0))
    assert not (tmp_path / "searches" / "c").exists()
    assert again.n_trials == 4 and again.task == "add2" and again.target == 0.9
    assert again.dir == str(moved / "searches" / "c")
    # the summary counts both runs' time, and this run's alone
    assert again.total_wall_time == pytest.approx(first.wall_time + again.wall_time, abs=0.02)
    study = _study(again)
    assert len(study.trials) == 4 and [t.number for t in study.trials] == [0, 1, 2, 3]
    first_ids = {t["trial_id"] for t in first.trials}
    assert first_ids < {t["trial_id"] for t in again.trials}  # the old trials are kept
    assert (exp / "tuner.pkl").read_bytes() == tuner_pkl  # same Tune experiment, restored
    assert len(list(exp.glob("experiment_state-*.json"))) == 2
    assert len(list(exp.glob("trial_*"))) == 4
    client, runs = _trial_runs(again)
    assert len(runs) == 4
    parents = client.search_runs([again.mlflow_experiment_id], filter_string=(
        "tags.`arithsweep.search` = 'c' and tags.`arithsweep.kind` = 'search'"))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    meta = json.loads((Path(again.dir) / "search.json").read_text())
    assert [r["trials"] for r in meta["resumes"]] == [4]  # the refused resume left no trace
    assert meta["space_path"].startswith(str(moved)) and str(moved) in meta["mlflow_uri"]


@pytest.mark.slow
def test_time_budget_ends_the_search_cleanly(ray_local, tmp_path):

    space = _space(tmp_path, SPACE_SHORT.replace("{choice: [10, 12]}", "10"))
    s = _run(_opts(tmp_path, space=space, trials=50, name="d", n_verify=0,
                         time_budget=12))
    # how many trials began before the deadline depends on the machine's load (none, on a
    # busy one); that it ended the search (50 trials do not fit in 12 s), and cleanly, does not
    assert s.n_trials < 50
    study = _study(s)
    assert len(study.trials) == s.n_trials
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    # no trial's MLflow run is left open (on a loaded machine the deadline can end a trial
    # before Tune starts it, and a trial never started has no run: none is required)
    _, runs = _trial_runs(s)
    assert all(r.info.status != "RUNNING" for r in runs)

    # Resumed after its deadline, the search trains again (the trials the deadline ended
    # once filled the concurrency limit, so a resume started nothing), and the trials of the
    # first run keep the reasons they stopped for.
    again = _run(SearchOptions(resume="d", trials=s.n_trials + 2, n_verify=0, time_budget=120,
                               root=str(tmp_path / "searches")))
    # (two more when the first run had begun a trial; where its deadline came before any, as
    # on a loaded machine, the resumed run was seen to train one: why is not established)
    assert s.n_trials + 1 <= again.n_trials <= s.n_trials + 2
    before = {r["trial_id"]: r["stop_reason"] for r in s.trials}
    assert {r["trial_id"]: r["stop_reason"] for r in again.trials
            if r["trial_id"] in before} == before


# ---- fast checks -----------------------------------------------------------------------


@pytest.mark.parametrize("kw, match", [
    ({"task": None}, "--task is required"),
    ({"target": 0.0}, "target"),
    ({"target": 1.5}, "target"),
    ({"trials": 0}, "trials"),
    ({"cpus_per_trial": 0}, "cpus_per_trial"),
    ({"gpus_per_trial": -1}, "gpus_per_trial"),
    ({"time_budget": -1}, "time_budget"),
    ({"name": "a/b"}, "plain directory name"),
    ({"name": "x", "resume": "y"}, "not both"),
    ({"max_params": 0}, "max_params"),
    ({"patience": 0}, "patience"),
    ({"near_miss": 2}, "near_miss"),
    ({"seed": -1}, "seed"),
    ({"seed": 1 << 26}, "seed"),
    ({"mlflow_uri": "bogus://x"}, "mlflow_uri"),
])
def test_bad_options_are_one_clear_error(kw, match):
    with pytest.raises(ConfigError, match=match):
        SearchOptions(**{"task": "add2", **kw})


def test_resume_of_an_unknown_search_is_a_clear_error(tmp_path):

    with pytest.raises(ConfigError, match="cannot resume 'nope'"):
        _run(SearchOptions(resume="nope", root=str(tmp_path)))


def test_plot_and_frontier(tmp_path):
    from arithsweep.search.report.plots import frontier, plot_params_vs_em

    rows = [{"params": 500, "best_em": 0.2, "feasible": False, "errored": False},
            {"params": 800, "best_em": 0.95, "feasible": True, "errored": False},
            {"params": 900, "best_em": 0.9, "feasible": True, "errored": False},
            {"params": 700, "best_em": 0.0, "feasible": False, "errored": True},
            {"params": 0, "best_em": 0.0, "feasible": False, "errored": False}]
    assert frontier(rows) == [(500, 0.2), (800, 0.95)]
    out = plot_params_vs_em(rows, 0.9, tmp_path / "p.png", title="t")
    assert out and Path(out).stat().st_size > 1000
    assert plot_params_vs_em([], 0.9, tmp_path / "q.png") is None
