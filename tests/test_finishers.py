"""The near-miss finishers (core/training/finish.py): what each may see and when its result is
kept. One small add2 model (d_model 8, 720 p) is trained once: its states at a near miss
(90-97% held-out), inside the 95-99% band and at 100% of all problems, each checked, are the
members the finishers work on and the start of the search-trial tests' near miss."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.training.finish import CMAES, FINETUNE, FINISH_FLOOR, finish, training_pool

D8 = {"d_model": 8, "n_heads": 2, "d_ff": 16}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # two threads on a busy 2-core machine made each tiny step ~20x slower
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# a near miss the trial tests start from: held-out and all-problem figures this far inside the
# 95-99% band (95.5-98.5%, at most 98.5% of all 10^4 problems: the full check's 99% is then
# the finishers' to reach). Measured: 96.3% / 96.6% at step 800 (tiny kernel, and the
# reference layout), 97.9% / 98.0% at step 900 (another build's bits)
BAND = (0.955, 0.985)


@pytest.fixture(scope="module")
def trained():
    """(task, model_cfg, train_cfg, {"near", "band", "perfect"}: member states). One run whose
    states are checked, not assumed, at its evaluations: "near" is the first at 90-97%
    held-out, "band" the first inside BAND (held-out and all 10^4 problems), "perfect" the
    first that answers every one of the 10^4 add2 problems. A machine that rounds
    differently (another instruction set, the reference layout) gets states with the same
    properties, at whatever steps."""
    from arithsweep.core.evaluation.evaluate import exact_match
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train

    task, m, t = build_configs("add2", None, None, {**D8, "steps": 6000, "seeds": 1,
                                                     "seed": 0, "target": 1.0,
                                                     "early_stop": False})
    every = task.enumerate_all()
    states: dict[str, dict[str, torch.Tensor]] = {}
    seen = []

    def keep(point, result):
        full = float(exact_match(result.model, task, *every).float().mean())
        seen.append((point.step, round(point.best_em, 4), round(full, 4)))
        if "near" not in states and 0.9 <= point.best_em < 0.97:
            states["near"] = result.model.member_state(0)
        if ("band" not in states and BAND[0] <= point.best_em <= BAND[1]
                and full <= BAND[1]):
            states["band"] = result.model.member_state(0)
        if "perfect" not in states and full == 1.0:
            states["perfect"] = result.model.member_state(0)
        return len(states) == 3

    train(task, m, t, on_eval=keep)
    assert len(states) == 3, seen  # (step, held-out, all problems) at each evaluation
    return task, m, t, states


@pytest.fixture(scope="module")
def members(trained):
    """(task, model_cfg, train_cfg, near-miss state, perfect state)."""
    task, m, t, states = trained
    return task, m, t, states["near"], states["perfect"]


@pytest.fixture(scope="module")
def near_miss_start(trained, tmp_path_factory) -> dict:
    """The overrides that make TRIAL a near miss by construction: it starts from the "band"
    state (a checkpoint) and trains at lr 1e-8, a few ulps in all, so it ends where that
    state is (measured: the held-out figure did not move at all)."""
    from arithsweep.core.model.checkpoint import save_checkpoint
    from arithsweep.core.model.model import ArithTransformer

    task, m, t, states = trained
    path = tmp_path_factory.mktemp("start") / "band"
    save_checkpoint(path, ArithTransformer.from_member_state(m, states["band"]), task, 0, t)
    return {"init_from": str(path), "lr": 1e-8}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _clone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in state.items()}


def test_finetuning_mines_only_training_problems_and_stops_at_the_round_limit(members):
    task, m, t, near, _ = members
    cfg = replace(t, finish_rounds=2, finish_steps=30, finish_pool=1000, finish_lr=1e-3)
    done = finish(task, m, cfg, near, passes=lambda _m: False)
    (rec,) = done.records
    assert rec["finisher"] == FINETUNE and rec["stop"] == "round limit"
    assert rec["rounds"] == 2 and len(rec["pairs"]) == 3 and rec["pairs"][-1] > 0
    assert [int(a.numel()) for a, _, _ in done.mined] == rec["pairs"][:2]
    for a, b, op in done.mined:  # every pair trained on is a training-split problem
        assert a.numel() and not task.is_holdout(a, b, op).any()
    a, b, op = training_pool(task, cfg, torch.Generator().manual_seed(1))
    assert a.numel() == cfg.finish_pool and not task.is_holdout(a, b, op).any()


def _damaged(state: dict[str, torch.Tensor], noise: float) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {k: v + noise * torch.randn(v.shape, generator=gen) for k, v in state.items()}


def test_finetuning_stops_when_the_pool_has_no_error_left(members):
    """The perfect member knocked off its weights (noise 0.01: ~89% held-out) is brought back:
    the pool's errors are gone after a round, and the rounds stop there."""
    task, m, t, _, perfect = members
    cfg = replace(t, finish_rounds=10, finish_steps=50, finish_pool=500, finish_lr=1e-3)
    done = finish(task, m, cfg, _damaged(perfect, 0.01), passes=lambda _m: False)
    (rec,) = done.records
    assert rec["stop"] == "no errors left in the pool", rec
    assert rec["pairs"][0] > 0 and rec["pairs"][-1] == 0 and rec["rounds"] < 10
    assert rec["kept"] and done.held_out > done.held_out_before


def test_finetuning_not_kept_leaves_the_weights_bit_for_bit(members):
    """A perfect member's pool has nothing to mine: no round, nothing kept, same tensors."""
    task, m, t, _, perfect = members
    before = _clone(perfect)
    done = finish(task, m, replace(t, finish_rounds=3, finish_pool=500), perfect)
    (rec,) = done.records
    assert rec["pairs"] == [0] and rec["rounds"] == 0 and not rec["kept"]
    assert done.state is perfect and _same(perfect, before) and done.finished_by is None


def test_cmaes_is_not_kept_when_held_out_cannot_improve(members):
    """At 100% held-out no candidate can answer more held-out problems, whatever it does to
    its training objective: the member comes back bit for bit."""
    task, m, t, _, perfect = members
    before = _clone(perfect)
    cfg = replace(t, finish_cmaes_evals=60, finish_pool=256, finish_cmaes_sigma=1e-3)
    done = finish(task, m, cfg, perfect, max_params=10_000)
    (rec,) = done.records
    assert rec["finisher"] == CMAES and rec["evals"] >= 60
    assert rec["held_out_before"] == 1.0 and not rec["kept"]
    assert done.state is perfect and _same(done.state, before) and done.held_out == 1.0


def test_cmaes_runs_with_a_search_trials_seed(members):
    """A search's seeds are far above 2**32 (2e11, search/trials/configs.py's seed blocks), which
    numpy's legacy seeding, the one `cma` uses, refuses: the first 90% near miss given to
    `arithsweep finish` crashed there."""
    from arithsweep.core.training.finish import cmaes_seed

    task, m, t, near, _ = members
    cfg = replace(t, seed=206_159_478_816, finish_cmaes_evals=20, finish_pool=256)
    (rec,) = finish(task, m, cfg, near, max_params=10_000).records
    assert rec["finisher"] == CMAES and rec["evals"] >= 20
    assert all(1 <= cmaes_seed(s) < 2**32 for s in (0, 2**32 - 1 - 0x0C3A, 2**40))


def test_cmaes_is_kept_when_held_out_improves(members):
    """A damaged member (noise on every weight) that CMA-ES partly repairs."""
    task, m, t, _, perfect = members
    damaged = _damaged(perfect, 0.05)
    before = _clone(damaged)
    cfg = replace(t, finish_cmaes_evals=200, finish_pool=256, finish_cmaes_sigma=1e-2)
    done = finish(task, m, cfg, damaged, max_params=10_000)
    (rec,) = done.records
    assert rec["kept"] and rec["held_out_after"] > rec["held_out_before"], rec
    assert rec["objective_after"] < rec["objective_before"]
    assert done.held_out == rec["held_out_after"] and not _same(done.state, before)
    assert _same(damaged, before)  # the caller's tensors are never written


def test_cmaes_runs_only_on_models_of_at_most_128_numbers(members):
    task, m, t, near, _ = members
    done = finish(task, m, replace(t, finish_cmaes_evals=100), near)
    (rec,) = done.records
    assert "720 parameters" in rec["skipped"] and not rec["kept"] and done.state is near


@pytest.mark.parametrize("field, value", [
    ("finish_rounds", -1), ("finish_rounds", 1.5), ("finish_steps", 0), ("finish_pool", 0),
    ("finish_lr", 0.0), ("finish_lr", float("nan")), ("finish_cmaes_evals", -5),
    ("finish_cmaes_sigma", -1e-3), ("finish_cmaes_sigma", "big"), ("finish_rounds", True),
])
def test_finisher_fields_validate(field, value):
    with pytest.raises(ConfigError, match=field):
        TrainConfig(**{field: value})


def test_finisher_fields_read_from_a_config_mapping():
    cfg = TrainConfig.from_dict({"finish_rounds": 2, "finish_lr": "1e-4",
                                 "finish_cmaes_evals": 3000, "finish_cmaes_sigma": 5e-4})
    assert (cfg.finish_rounds, cfg.finish_lr, cfg.finish_cmaes_evals) == (2, 1e-4, 3000)
    assert TrainConfig().finish_rounds == 0 and TrainConfig().finish_cmaes_evals == 0


def _train_json(capsys, *args) -> dict:
    from arithsweep.cli.app import main

    old = sys.argv
    sys.argv = ["arithsweep", "train", "--task", "add2", "--json", *map(str, args)]
    try:
        main()
    except SystemExit as e:
        assert not e.code, capsys.readouterr().err
    finally:
        sys.argv = old
    return json.loads(capsys.readouterr().out)


def test_train_json_reports_which_finisher_took_it_over_the_line(capsys, tmp_path,
                                                                 near_miss_start):
    """The near miss of these tests (at most 98.5% of all add2 problems, checked), trained on
    by `arithsweep train` (--init-from, at the lr that leaves it where it is), reaches 99% of
    them only through targeted fine-tuning."""
    res = _train_json(capsys, "--d-model", 8, "--heads", 2, "--d-ff", 16, "--seeds", 1,
                      "--seed", 0, "--steps", TRIAL["steps"], "--target", TRIAL["target"],
                      "--init-from", near_miss_start["init_from"],
                      "--lr", near_miss_start["lr"], "--out", tmp_path / "r",
                      *(x for k in ("eval_every", "finish_rounds", "finish_steps", "finish_lr",
                                    "finish_pool") for x in ("--set", f"{k}={TRIAL[k]}")))
    assert res["finished_by"] == FINETUNE and res["reached_target"], res
    (rec,) = res["finishers"]
    assert rec["kept"] and rec["passes"] and rec["held_out_after"] >= rec["held_out_before"]
    assert rec["held_out_before"] < TRIAL["target"] <= res["final_exact_match"]
    assert res["eval_exact_match"] == rec["held_out_after"]
    meta = json.loads((tmp_path / "r" / "config.json").read_text())["meta"]
    assert meta["finished_by"] == FINETUNE


def test_train_json_without_finishers_is_as_before(capsys, tmp_path):
    res = _train_json(capsys, "--steps", 20, "--seeds", 1, "--out", tmp_path / "r")
    assert "finished_by" not in res and "finishers" not in res


class _FakeTune:
    """What the trial needs of `ray.tune`, recording each report and a copy of its checkpoint
    (Tune copies it too: the trial deletes its temporary folder after reporting)."""

    def __init__(self, root) -> None:
        self.root, self.rows, self.checkpoints = root, [], []

    def report(self, row, checkpoint=None) -> None:
        import shutil

        self.rows.append(dict(row))
        if checkpoint is not None:
            dest = self.root / f"checkpoint_{len(self.checkpoints)}"
            shutil.copytree(checkpoint, dest)
            self.checkpoints.append((dest, dict(row)))

    @staticmethod
    def get_checkpoint():
        return None

    class Checkpoint:
        @staticmethod
        def from_directory(path):
            return path


# the search trial of these tests: add2, one seed, the finishers on. Started from the near miss
# (near_miss_start) it ends in the 95-99% band, and fine-tuning takes it over the full
# check's 99%: in 1-2 of its up to 10 rounds on every build measured (they stop once it passes)
TRIAL = {**D8, "steps": 200, "eval_every": 100, "seeds": 1, "seed": 0, "target": 0.99,
         "finish_rounds": 10, "finish_steps": 200, "finish_lr": 1e-3, "finish_pool": 4000}


def _trial_setup(**over):
    """TRIAL's TrialSetup (`over`: fields to change, e.g. its start and lr)."""
    from arithsweep.core.model.model import count_params
    from arithsweep.core.overrides import build_configs
    from arithsweep.search.trials.configs import TrialSetup

    task, m, t = build_configs("add2", None, None, {**TRIAL, **over})
    return TrialSetup(task, m, t, count_params(m))


def _fake_tune(monkeypatch, tmp_path) -> _FakeTune:
    """A _FakeTune in place of `ray.tune` for the trainable and its checkpoints."""
    from arithsweep.search.trials import state, trainable

    fake = _FakeTune(tmp_path)
    monkeypatch.setattr(trainable, "tune", fake)
    monkeypatch.setattr(state, "tune", fake)
    return fake


def test_a_search_trial_in_the_near_miss_band_is_finished_and_reports_the_finished_model(
        monkeypatch, tmp_path, near_miss_start):
    pytest.importorskip("ray")
    from arithsweep.core.evaluation.evaluate import exact_match
    from arithsweep.core.model.checkpoint import load_checkpoint
    from arithsweep.search.trials import trainable

    fake = _fake_tune(monkeypatch, tmp_path)
    setup = _trial_setup(**near_miss_start)
    task = setup.task
    trainable.TrialRunner([setup], {"extra_rounds": 0}, {}).run()
    last = fake.rows[-1]
    trained = max(r["em"] for r in fake.rows if "em" in r and "finished_by" not in r)
    assert 0.95 <= trained < 0.99, "the trial must end in the near-miss band"
    assert last["finished_by"] == FINETUNE and last["stop_reason"] == "reached target", last
    assert last["seeds_reached"] == 1 and last["best_em"] >= trained
    ck, row = fake.checkpoints[-1]
    assert row["finished_by"] == FINETUNE and row["full_em"] >= 0.99
    best = load_checkpoint(ck / "best")
    assert float(exact_match(best.model, task, *task.enumerate_all()).float().mean()) >= 0.99
    # its meta says so, so its published retrain is the pack the finishers drew from
    assert best.meta["finished_by"] == FINETUNE


def test_the_finishers_come_before_a_second_round(monkeypatch, tmp_path, near_miss_start):
    """A near miss the finishers take over the line needs no second round (a whole schedule,
    twice as long): with a round to spare, the trial still ends after one round, finished."""
    pytest.importorskip("ray")
    from arithsweep.search.trials import trainable

    fake = _fake_tune(monkeypatch, tmp_path)
    trainable.TrialRunner([_trial_setup(**near_miss_start)], {"extra_rounds": 1}, {}).run()
    last = fake.rows[-1]
    assert last["finished_by"] == FINETUNE and last["stop_reason"] == "reached target", last
    assert last["rounds"] == 1 and last["step"] == TRIAL["steps"]


def test_a_pack_finishes_its_near_misses_and_reports_them_as_proposals(monkeypatch, tmp_path,
                                                                       near_miss_start):
    """A pack (several proposals of one shape, a GPU trial's default) gives each proposal in the
    near-miss band the finishers, as a single trial does: its last row says which finisher
    took it over the line under its own p<j>/ keys, and the last checkpoint's p<j>/best is
    the finished model. A proposal far below the band gets none."""
    pytest.importorskip("ray")
    from arithsweep.core.evaluation.evaluate import exact_match
    from arithsweep.core.model.checkpoint import load_checkpoint
    from arithsweep.search.trials import trainable
    from arithsweep.search.trials.packs import key

    fake = _fake_tune(monkeypatch, tmp_path)
    # the single trial's near miss, and the same start (a pack has one) thrown far below the
    # band by an lr of 1: 0-1% held-out at both evaluations, measured
    setups = [_trial_setup(**{**near_miss_start, "lr": lr}) for lr in (1e-8, 1.0)]
    task = setups[0].task
    trainable.TrialRunner(setups, {"extra_rounds": 0}, {}).run()
    last = fake.rows[-1]
    trained = max(r[key(0, "em")] for r in fake.rows
                  if key(0, "em") in r and key(0, "finished_by") not in r)
    assert 0.95 <= trained < 0.99, "proposal 0 must end in the near-miss band"
    assert last[key(0, "finished_by")] == FINETUNE
    assert last[key(0, "stop_reason")] == "reached target" and last[key(0, "seeds_reached")] == 1
    assert last[key(1, "finished_by")] is None and last[key(1, "stop_reason")] != "reached target"
    assert last[key(1, "best_em")] < FINISH_FLOOR
    ck, row = fake.checkpoints[-1]
    assert row[key(0, "finished_by")] == FINETUNE and row[key(0, "full_em")] >= 0.99
    best = load_checkpoint(ck / "p0" / "best")
    assert float(exact_match(best.model, task, *task.enumerate_all()).float().mean()) >= 0.99


def test_a_trial_whose_held_out_passed_but_the_full_check_did_not_gets_the_finishers():
    """The finishers' gate reads whether the trial reached the target (the full check), not
    whether its held-out figure is below it; a trial that reached it, or is far off, is not."""
    pytest.importorskip("ray")
    from arithsweep.search.trials.trainable import gets_finishers

    assert gets_finishers(False, 0.9929, FINISH_FLOOR)  # held-out 99.29%, check below 99%
    assert gets_finishers(False, 0.97, FINISH_FLOOR)
    assert not gets_finishers(True, 0.9929, FINISH_FLOOR)
    assert not gets_finishers(False, 0.90, FINISH_FLOOR)
