"""A recipe is a path (core/training/path.py): one command runs its phases as the chained
commands would, selection re-forms the pack from its best members, a killed path resumes
mid-phase, and the path's config is checked phase by phase."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from arithsweep.core.api import resume_job, train_job
from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.path import phase_configs, selected, train_path
from arithsweep.core.training.resume import latest_state, sub

MODEL = {"d_model": 8, "d_ff": 16, "n_heads": 2}
BASE = {"seeds": 4, "steps": 200, "eval_every": 50, "eval_size": 512, "early_stop": False,
        "grokfast_alpha": 0.9, "grokfast_lambda": 1.0, "checkpoint_every": 50}
# the record's shape of path, short: a cosine, then a low-lr Grokfast phase with another
# lambda, no curriculum and fresh moments, from every member's own last state
GROK = {"name": "grokfast", "steps": 100, "lr": 1e-3, "min_lr_ratio": 0.1,
        "grokfast_lambda": 3.0, "curriculum": None, "cosine_from": 0}


def _configs(**train):
    return build_configs("add2", None, None, {**MODEL, **BASE, "curriculum": [[100, 1]],
                                               **train})


def _weights(d):
    return sub(latest_state(d).tensors, "model.")


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("layout", ["tiny", "reference"])
def test_one_command_is_the_chained_commands(tmp_path, layout):
    """`train --config` with a path gives, phase by phase, the weights of the commands it
    replaces: `train` for the cosine, then `train --init-from <out>/resume --set ...` for
    the Grokfast phase."""
    task, m, t = _configs(layout=layout, path=[{"name": "cosine"}, GROK])
    train_job(task, m, t, tmp_path / "path", progress=False)
    _, _, first = _configs(layout=layout)
    train_job(task, m, first, tmp_path / "a", progress=False)
    fields = {k: v for k, v in GROK.items() if k != "name"}
    second = replace(first, init_from=str(tmp_path / "a" / "resume"), **fields)
    train_job(task, m, second, tmp_path / "b", progress=False)
    _same(_weights(tmp_path / "path/phases/0-cosine/resume"), _weights(tmp_path / "a/resume"))
    _same(_weights(tmp_path / "path/phases/1-grokfast/resume"), _weights(tmp_path / "b/resume"))


def test_moments_keep_differs_from_restart(tmp_path):
    """`moments: keep` carries AdamW's moments into the phase: its first step moves the
    weights otherwise than a fresh start's (bias-corrected from step one)."""
    outs = {}
    for moments in ("restart", "keep"):
        task, m, t = _configs(path=[{}, {**GROK, "moments": moments}])
        train_job(task, m, t, tmp_path / moments, progress=False)
        outs[moments] = _weights(tmp_path / moments / "phases/1-grokfast/resume")
    assert any(not torch.equal(outs["keep"][k], outs["restart"][k]) for k in outs["keep"])


def test_selection_continues_the_best_members_as_copies(tmp_path):
    """A `select: k` phase starts member m from the (m mod k)-th best member's best weights
    (held-out exact match of the phase before), with seeds no earlier phase used; perturb_lr
    splits the copies into lr groups."""
    sel = {"name": "sel", "steps": 50, "lr": 2e-3, "select": 2, "perturb_lr": [0.5, 2.0]}
    task, m, t = _configs(path=[{"name": "first"}, sel])
    out = tmp_path / "sel"
    result = train_path(task, m, t, out)
    first = latest_state(out / "phases/0-first/resume")
    bests = first.doc["results"][0]["member_best"]
    top = sorted(range(4), key=lambda i: (-bests[i], i))[:2]
    start = latest_state(out / "phases/1-sel/start")
    assert start.doc["selected"] == top and start.doc["parents"] == [top[0], top[1]] * 2
    mbest = sub(first.tensors, "result0.mbest.")
    for name, w in sub(start.tensors, "model.").items():
        for member, parent in enumerate(start.doc["parents"]):
            assert torch.equal(w[member], mbest[name][parent])
    cfgs = phase_configs(t, 1, out / "phases/1-sel/start")
    assert [c.lr for c in cfgs] == [pytest.approx(1e-3), pytest.approx(4e-3)]
    assert [c.seed for c in cfgs] == [4, 6] and [c.seeds for c in cfgs] == [2, 2]
    assert result.steps == 250 and len(result.member_best) == 4
    assert selected([result], 1) == [max(range(4), key=lambda i: (result.member_best[i], -i))]


class _Killed(Exception):
    pass


def test_a_killed_path_resumes_mid_phase(tmp_path):
    """Killed inside its second phase, `train --resume` ends on the weights of the run that
    was never stopped."""
    task, m, t = _configs(path=[{}, GROK])
    train_job(task, m, t, tmp_path / "whole", progress=False)

    def kill(phase, _j, point, _r):
        if phase == 1 and point.step >= 300:  # after the state at its step 50
            raise _Killed

    with pytest.raises(_Killed):
        train_path(task, m, t, tmp_path / "killed", on_eval=kill,
                   extra=lambda: {"job": {"task": task.name, "format": task.fmt.name,
                                          "model": m.to_dict(), "train": t.to_dict()}})
    assert latest_state(tmp_path / "killed/phases/1-grokfast/resume").step == 50
    out = resume_job(tmp_path / "killed", progress=False)
    assert out["steps"] == 300
    _same(_weights(tmp_path / "killed/phases/1-grokfast/resume"),
          _weights(tmp_path / "whole/phases/1-grokfast/resume"))


@pytest.mark.parametrize("path, why", [
    ([{}, {"seeds": 2}], "seeds is the same for the whole path"),
    ([{"select": 1}], "the first phase has nothing to select from"),
    ([{}, {"lr": -1}], "path phase 1: lr=-1"),
    ([{}, {"select": 2, "moments": "keep"}], "use moments: restart"),
    ([{}, {"perturb_lr": [1, 2]}], "perturb_lr needs select"),
    ([{}, {"select": 1, "perturb_lr": [1, 2, 3]}], "must divide seeds"),
    ([{"name": "a"}, {"name": "a"}], "distinct word"),
    ([], "non-empty list"),
])
def test_bad_paths_are_named(path, why):
    with pytest.raises(ConfigError, match=why):
        TrainConfig(seeds=4, path=path)


def test_old_configs_still_load():
    """A config saved before paths (no `path`, no `init_moments`, the old `phases` form)
    loads as one phase."""
    old = TrainConfig().to_dict()
    for k in ("path", "init_moments"):
        old.pop(k)
    old["phases"] = [{"steps": 10, "lr": 1e-3, "grokfast": True}]
    cfg = TrainConfig.from_dict(old)
    assert cfg.path is None and cfg.phases[0]["grokfast"] is True


def test_a_search_trial_runs_its_path_and_a_restored_one_goes_on_mid_phase(monkeypatch,
                                                                            tmp_path):
    """A trial whose config has a path trains all of it, selection included, every Tune
    checkpoint carrying the phases' states; restored from a checkpoint inside the second
    phase, it ends on the same weights as the trial that was never stopped."""
    pytest.importorskip("ray")
    from test_continue_round import _Restored
    from test_finishers import _fake_tune, _trial_setup

    from arithsweep.search.trials import trainable

    path = [{"name": "a"}, {"name": "b", "steps": 200, "lr": 2e-3, "select": 2}]
    # target 1.0, no rounds after the path: where the trial ends does not depend on floats
    over = {"steps": 200, "eval_every": 100, "seeds": 4, "finish_rounds": 0, "target": 1.0,
            "checkpoint_every": 100, "path": path}
    fake = _fake_tune(monkeypatch, tmp_path / "whole")
    (tmp_path / "whole").mkdir()
    trainable.TrialRunner([_trial_setup(**over)], {"extra_rounds": 0}, {}).run()
    steps = [r["step"] for r in fake.rows if "em" in r]
    # (a phase's last evaluation is reported again with the state its end writes)
    assert sorted(set(steps)) == [100, 200, 300, 400] and fake.rows[-1]["done"] == 1
    mid = next(ck for ck, row in fake.checkpoints if row["step"] == 300)
    assert (mid / "state/path/phases/1-b/start").is_dir()
    final = _weights(fake.checkpoints[-1][0] / "state/path/phases/1-b/resume")

    again = _fake_tune(monkeypatch, tmp_path / "again")
    (tmp_path / "again").mkdir()
    monkeypatch.setattr(again, "get_checkpoint", lambda: _Restored(mid))
    trainable.TrialRunner([_trial_setup(**over)], {"extra_rounds": 0}, {}).run()
    assert [r["step"] for r in again.rows if "em" in r][:1] == [400]
    _same(_weights(again.checkpoints[-1][0] / "state/path/phases/1-b/resume"), final)


def test_a_search_trial_gives_up_a_path_below_its_floor(monkeypatch, tmp_path):
    """An earlier phase has no plateau rule, but past FLOOR_AT of it a proposal whose best
    member is below FLOOR is given up: the trial stops there and never trains the next phase.
    (The floor is raised for the test, so a model that learns nothing is under it whatever
    its floats.)"""
    pytest.importorskip("ray")
    from test_finishers import _fake_tune, _trial_setup

    from arithsweep.search.trials import rounds, trainable

    monkeypatch.setattr(rounds, "FLOOR", 0.5)
    path = [{"name": "a"}, {"name": "b", "steps": 200, "lr": 2e-3}]
    over = {"steps": 400, "eval_every": 50, "seeds": 2, "lr": 1e-9, "warmup": 0,
            "finish_rounds": 0, "target": 0.99, "checkpoint_every": 50, "path": path}
    fake = _fake_tune(monkeypatch, tmp_path / "t")
    (tmp_path / "t").mkdir()
    trainable.TrialRunner([_trial_setup(**over)], {"extra_rounds": 0}, {}).run()
    steps = [r["step"] for r in fake.rows if "em" in r]
    assert max(steps) == 100  # a quarter of the first phase's 400 steps
    assert fake.rows[-1]["stop_reason"] == rounds.BELOW_FLOOR
    assert not any((ck / "state/path/phases/1-b").exists() for ck, _ in fake.checkpoints)


def test_the_floor_is_one_percent_past_a_quarter_of_the_phase():
    from arithsweep.search.trials.rounds import below_floor

    assert below_floor(0.009, 50_000, 200_000)
    assert not below_floor(0.011, 50_000, 200_000)  # the 35's slowest pack was at 5.4% here
    assert not below_floor(0.0, 49_999, 200_000)


def test_a_near_miss_ticket_trains_the_whole_path_again_with_new_seeds(monkeypatch, tmp_path):
    """near_miss_round "ticket": a path trial's near miss gets its next round as the same path
    (selection included) with the next block of seeds, in a states folder of its own; its seeds
    count as new ones. (Target 1.0 and a near-miss distance of 1, finishers off: every round
    is a near miss that does not reach, whatever its floats; no floor.)"""
    pytest.importorskip("ray")
    from test_finishers import _fake_tune, _trial_setup

    from arithsweep.search.trials import rounds, trainable
    from arithsweep.search.trials.rounds import next_round

    monkeypatch.setattr(rounds, "FLOOR", 0.0)  # no round given up below the path's floor

    path = [{"name": "a"}, {"name": "b", "steps": 100, "lr": 2e-3, "select": 2}]
    over = {"steps": 100, "eval_every": 100, "seeds": 4, "finish_rounds": 0, "target": 1.0,
            "checkpoint_every": 100, "path": path, "near_miss_round": "ticket", "seed": 40}
    setup = _trial_setup(**over)
    nxt = next_round(setup.train_cfg, 1, tmp_path / "unused", 0.9)
    assert (nxt.seed, nxt.seeds, nxt.path, nxt.init_from) == (44, 4, setup.train_cfg.path, None)
    fake = _fake_tune(monkeypatch, tmp_path / "t")
    (tmp_path / "t").mkdir()
    trainable.TrialRunner([setup], {"extra_rounds": 1, "near_miss": 1.0}, {}).run()
    steps = list(dict.fromkeys(r["step"] for r in fake.rows if "em" in r))
    assert steps == [100, 200, 300, 400], steps  # each round the path's 200 steps
    last = fake.rows[-1]
    assert last["rounds"] == 2 and last["seeds_trained"] == 8 and last["done"] == 1
    ck = fake.checkpoints[-1][0] / "state"
    assert (ck / "path/phases/1-b").is_dir() and (ck / "path-r1/phases/1-b").is_dir()


def test_stop_at_counts_the_paths_steps(tmp_path):
    """TrainConfig.stop_at on a path is a step of the whole path: inside the second phase it
    stops there, the first phase whole; at the first phase's end no later phase runs. So a
    search trial's path that its rules stopped early retrains to the same step."""
    task, m, t = _configs(path=[{"name": "cosine"}, GROK])  # 200 + 100 steps
    assert [c.stop_at for c in (phase_configs(replace(t, stop_at=250), i, tmp_path)[0]
                                for i in (0, 1))] == [None, 50]
    assert train_path(task, m, replace(t, stop_at=250), tmp_path / "in").steps == 250
    assert train_path(task, m, replace(t, stop_at=200), tmp_path / "at").steps == 200
    assert not (tmp_path / "at/phases/1-grokfast").exists()
