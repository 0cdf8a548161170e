"""Packed search end to end: several Optuna proposals of one shape per Ray Tune trial, trained
as one population, each still its own Optuna trial, MLflow run and verification candidate.
Real Ray (local, 2 CPUs), real Optuna, MLflow and leaderboard SQLite files under tmp_path.

    .venv/bin/python -m pytest tests/test_population_search.py -q
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from arithsweep.search.options import GPU_PROPOSALS, SearchOptions, resources_per_trial

# The shape varies (d_ff) and so do per-member settings (lr, warmup): a pack pins the shape
# and lets Optuna choose the rest per proposal. Target 0.5 on add2 is reached by d_ff 32 in a
# few hundred steps at a good lr, so verification and the incumbent bound get exercised too.
SPACE = """
name: test-packs
model:
  n_layers: 1
  d_model: 16
  n_heads: 2
  d_ff: {choice: [16, 32]}
train:
  steps: 500
  lr: {float: [3.0e-3, 2.0e-2], log: true}
  warmup: {choice: [20, 50]}
  batch_size: 64
  seeds: 1
  eval_every: 100
  eval_size: 512
"""


@pytest.mark.slow
def test_packed_search_keeps_one_record_per_proposal(ray_local, tmp_path):
    import optuna
    from mlflow.tracking import MlflowClient

    from arithsweep.leaderboard.verify import make_verifier
    from arithsweep.search.driver import run_search

    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    events: list[dict] = []
    opts = SearchOptions(task="add2", target=0.5, space=str(space), trials=2, name="p",
                         cpus_per_trial=1, concurrency=1, root=str(tmp_path / "searches"), seed=0,
                         proposals_per_trial=3, patience=3, n_verify=1,
                         # one round each: a pack's near miss earns more rounds as a lone
                         # trial's does (tests/test_finishers.py), which this test is not about
                         extra_rounds=0)
    s = run_search(opts, on_update=events.append,
                   verifier=make_verifier(f"sqlite:///{tmp_path / 'lb.db'}"))

    # Tune saw 2 trials; the summary counts proposals, at most 3 per trial
    assert s.n_tune_trials == 2 and s.largest_pack == 3
    assert s.n_trials == len(s.trials) > 2
    by_pack: dict[str, list[dict]] = defaultdict(list)
    for row in s.trials:
        by_pack[row["tune_trial_id"]].append(row)
    assert len(by_pack) == 2 and all(len(v) <= 3 for v in by_pack.values())
    for rows in by_pack.values():  # one shape per pack: every model.* value equal
        shapes = {tuple(sorted((k, v) for k, v in r["config"].items()
                               if k.startswith("model."))) for r in rows}
        assert len(shapes) == 1 and len({r["params"] for r in rows}) == 1
        assert all(r["pack_size"] == len(rows) for r in rows)
        if len(rows) > 1:  # the per-member settings were Optuna's to choose, per proposal
            assert len({r["config"]["train.lr"] for r in rows}) == len(rows)
            assert all(r["checkpoint"] is None or r["checkpoint"].endswith(
                f"p{r['trial_id'].rsplit('.p', 1)[1]}/best") for r in rows)

    # Optuna: every asked trial finished, trained ones = rows, skipped ones never trained
    study = optuna.load_study(study_name=s.study_name, storage=s.study_storage)
    assert study.trials and not [t for t in study.trials if not t.state.is_finished()]
    skipped = [t for t in study.trials if t.user_attrs.get("skipped")]
    assert len(skipped) == len(s.skipped)
    trained = {t.number: t for t in study.trials if not t.user_attrs.get("skipped")}
    assert sorted(trained) == sorted(r["config"]["trial_number"] for r in s.trials)
    for r in s.trials:
        t = trained[r["config"]["trial_number"]]
        assert t.state.name == "COMPLETE" and t.value == r["params"]
        assert t.user_attrs["tune_trial_id"] == r["tune_trial_id"]
        assert t.params["train.lr"] == r["config"]["train.lr"]
        # constraint: feasible exactly when the proposal's own best reached the target
        assert (t.constraints["exact_match"] <= 0) == (r["best_em"] >= s.target)

    # MLflow: one run per trained proposal, each naming exactly one Optuna trial
    client = MlflowClient(s.mlflow_uri)
    runs = client.search_runs([s.mlflow_experiment_id], filter_string=(
        f"tags.`arithsweep.search` = '{s.name}' and tags.`arithsweep.kind` = 'trial'"))
    assert len(runs) == len(study.trials) - len(skipped) == s.n_trials
    numbers = [int(r.data.tags["arithsweep.optuna_trial"]) for r in runs]
    assert sorted(numbers) == sorted(trained)
    row_of = {r["trial_id"]: r for r in s.trials}
    for run in runs:
        row = row_of[run.data.tags["arithsweep.trial_id"]]
        assert run.info.status == "FINISHED"
        assert run.data.tags["arithsweep.tune_trial_id"] == row["tune_trial_id"]
        assert float(run.data.params["train.lr"]) == pytest.approx(row["config"]["train.lr"])
        assert run.data.tags["arithsweep.stop_reason"] == row["stop_reason"]
        assert run.data.tags["arithsweep.layout"] in ("tiny", "reference")
        # a pack the incumbent stopped sends no final report: no seed counts then
        assert run.data.metrics.get("seeds_reached", 0) == row["seeds_reached"]
        hist = client.get_metric_history(run.info.run_id, "best_em")
        assert hist and [m.step for m in hist] == sorted(m.step for m in hist)
        assert hist[-1].value == pytest.approx(row["best_em"])

    # verification per proposal: what reached the target was verified from its own weights
    reached = [r for r in s.trials if r["feasible"]]
    verified = {v["trial_id"]: v for v in s.verified}
    assert reached, "no proposal reached 0.5 on add2: the test space is too weak"
    assert all(r["trial_id"] in verified for r in reached)
    for r in reached:  # each pack member was told to Optuna with its own verdict
        verdict = trained[r["config"]["trial_number"]].user_attrs["verification"]
        assert verdict == ("verified" if verified[r["trial_id"]]["qualifies"]
                           else "rejected by verification")
    assert s.incumbent is not None and s.best["verified_em"] >= s.target
    assert all(k["params"] >= k["bound"] for k in s.skipped)
    # the bound holds per proposal: once the first pack's winner is verified, every later
    # proposal of its size is told to Optuna untrained and the next pack is smaller
    first, second = sorted(by_pack.values(), key=lambda rows: rows[0]["config"]["trial_number"])
    assert any(r["feasible"] for r in first) and s.incumbent == first[0]["params"]
    # (the next proposals are the incumbent's shrink moves, arithsweep.search.propose.shrink, so
    # nothing needs skipping here; test_search covers skipping)
    assert all(r["params"] < s.incumbent for r in second)
    assert s.trained_above_incumbent == []

    # live view: an event stream per proposal, not per Tune trial
    ids = {e["trial_id"] for e in events if e["event"] in ("start", "complete")}
    assert ids == set(row_of)


def test_gpu_default_fills_the_gpu_and_cpu_keeps_one_proposal():
    assert resources_per_trial(SearchOptions(task="add2"), 0) == (0.0, 1)
    assert resources_per_trial(SearchOptions(task="add2"), 2) == (1.0, GPU_PROPOSALS)
    # an explicit GPU share or proposal count is the user's choice
    assert resources_per_trial(SearchOptions(task="add2", gpus_per_trial=0.25), 1) == (0.25, 1)
    assert resources_per_trial(SearchOptions(task="add2", proposals_per_trial=4), 0) == (0.0, 4)
    from arithsweep.core.errors import ConfigError

    with pytest.raises(ConfigError, match="proposals_per_trial"):
        SearchOptions(task="add2", proposals_per_trial=0)


def test_pack_results_split_per_proposal():
    from arithsweep.search.trials import packs

    config = {"arithsweep": {"task": "add2"}, "model.d_ff": 8, "trial_number": 4,
              "proposals": [{"model.d_ff": 8, "trial_number": 4},
                            {"model.d_ff": 8, "trial_number": 5}]}
    assert packs.proposal_ids("abc", config) == ["abc.p0", "abc.p1"]
    assert packs.proposal_ids("abc", {"model.d_ff": 8}) == ["abc"]
    assert [p["trial_number"] for p in packs.proposals_of(config)] == [4, 5]
    assert all(p["arithsweep"] == {"task": "add2"} for p in packs.proposals_of(config))
    row = {"params": 100, "best_em": 0.7, "p0/best_em": 0.2, "p1/best_em": 0.7, "p1/step": 300}
    assert packs.proposal_result(row, 0) == {"params": 100, "best_em": 0.2}
    assert packs.proposal_result(row, 1) == {"params": 100, "best_em": 0.7, "step": 300}
    assert packs.reported(row, 1) and not packs.reported(row, 0)


@pytest.mark.slow
def test_a_crashing_pack_fails_each_of_its_proposals_once(ray_local, tmp_path):
    import optuna
    from mlflow.tracking import MlflowClient

    from arithsweep.search.driver import run_search

    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    s = run_search(SearchOptions(task="add2", target=0.5, space=str(space), trials=1,
                                 name="crash", root=str(tmp_path / "searches"),
                                 proposals_per_trial=3, n_verify=0,
                                 fail_when={"trial_number": 0}))
    assert s.n_tune_trials == 1 and s.n_trials == 3 and s.n_errored == 3
    assert all("injected failure" in r["error"] for r in s.trials)
    study = optuna.load_study(study_name=s.study_name, storage=s.study_storage)
    assert [t.state.name for t in study.trials] == ["FAIL"] * 3
    assert all(t.constraints["exact_match"] > 0 for t in study.trials)
    client = MlflowClient(s.mlflow_uri)
    runs = client.search_runs([s.mlflow_experiment_id], filter_string=(
        "tags.`arithsweep.search` = 'crash' and tags.`arithsweep.kind` = 'trial'"))
    assert sorted(r.data.tags["arithsweep.pack"] for r in runs) == ["0/3", "1/3", "2/3"]
    assert all(r.info.status == "FAILED" and "injected failure" in
               r.data.tags["arithsweep.error"] for r in runs)
