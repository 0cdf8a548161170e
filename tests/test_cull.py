"""Successive halving inside a pack (`TrainConfig.cull`): at a cull's evaluation only the best
members go on, each exactly as the whole pack would have trained it, and the culled stay out
for the rest of the path, across a kill and a resume."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from arithsweep.core.api import resume_job, train_job
from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.model import tiny_layout as TL
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.path import phase_configs, train_path
from arithsweep.core.training.population import train_population
from arithsweep.core.training.resume import latest_state, sub

MODEL = {"d_model": 8, "d_ff": 16, "n_heads": 2}
BASE = {"seeds": 4, "steps": 200, "eval_every": 50, "eval_size": 512, "early_stop": False,
        "checkpoint_every": 50, "curriculum": [[100, 1]]}
LAYOUTS = [pytest.param("tiny", marks=pytest.mark.skipif(
    TL.load_error() is not None, reason=f"tiny kernel unavailable: {TL.load_error()}")),
    "reference"]


def _configs(**train):
    return build_configs("add2", None, None, {**MODEL, **BASE, **train})


def _weights(d):
    return sub(latest_state(d).tensors, "model.")


def _member(w: dict, i: int) -> dict:
    return {k: v[i] for k, v in w.items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_survivors_end_where_the_whole_pack_takes_them_and_the_culled_stop(layout):
    task, m, t = _configs(layout=layout)
    at_50 = {}

    def keep(_j, point, result):  # the whole pack's weights at the cull's step
        if point.step == 50:
            at_50.update({k: v.detach().clone() for k, v in result.model.named_parameters()})

    whole = train_population(task, m, [t], on_eval=keep)[0]
    culled = train_population(task, m, [replace(t, cull=[[50, 2]])])[0]
    first = whole.history[0].exact_match  # the first evaluation: each member's best so far
    top = sorted(range(4), key=lambda i: (-first[i], i))[:2]
    end_whole = dict(whole.model.named_parameters())
    end_culled = dict(culled.model.named_parameters())
    for i in range(4):
        mine = {k: v[i] for k, v in end_culled.items()}
        want = end_whole if i in top else at_50  # on to the end, or put at step 50
        assert _same(mine, {k: v[i] for k, v in want.items()}), (i, top)
    # the culled members' evaluations stand still after the cull; the survivors' are the
    # whole pack's own
    for p, q in zip(whole.history[1:], culled.history[1:], strict=True):
        assert [q.exact_match[i] for i in top] == [p.exact_match[i] for i in top]
        assert all(q.exact_match[i] == first[i] for i in range(4) if i not in top)
    # a culled member's steps are not counted as trained: 4 members to 50, then 2
    assert culled.examples == (4 * 50 + 2 * 150) * t.batch_size
    assert culled.member_best == [max(e[i] for e in (h.exact_match for h in culled.history))
                                  for i in range(4)]


def test_a_culled_member_stays_out_of_the_next_phase_and_a_killed_path_resumes(tmp_path):
    """Culled at the end of the first phase, a member keeps that phase's last weights through
    the second; killed after the cull, `train --resume` ends on the uninterrupted run's bits."""
    grok = {"name": "grokfast", "steps": 100, "lr": 1e-3, "curriculum": None}
    task, m, t = _configs(cull=[[100, 3], [200, 1]], path=[{"name": "cosine"}, grok])
    train_job(task, m, t, tmp_path / "whole", progress=False)
    first = latest_state(tmp_path / "whole/phases/0-cosine/resume")
    culled = first.tensors["culled"].tolist()
    assert sum(culled) == 3  # one of four goes on
    end0 = _weights(tmp_path / "whole/phases/0-cosine/resume")
    end1 = _weights(tmp_path / "whole/phases/1-grokfast/resume")
    for i in range(4):
        assert _same(_member(end1, i), _member(end0, i)) == culled[i], i

    class Killed(Exception):
        pass

    def kill(phase, _j, point, _r):
        if phase == 0 and point.step >= 150:  # its last state: step 100, written after the cull
            raise Killed

    with pytest.raises(Killed):
        train_path(task, m, t, tmp_path / "killed", on_eval=kill,
                   extra=lambda: {"job": {"task": task.name, "format": task.fmt.name,
                                          "model": m.to_dict(), "train": t.to_dict()}})
    cut = latest_state(tmp_path / "killed/phases/0-cosine/resume")
    assert cut.step == 100 and sum(cut.tensors["culled"].tolist()) == 1
    resume_job(tmp_path / "killed", progress=False)
    assert _same(_weights(tmp_path / "killed/phases/1-grokfast/resume"), end1)


def test_a_keep_of_the_seeds_or_more_culls_none():
    task, m, t = _configs()
    a, b = (train_population(task, m, [replace(t, steps=100, cull=c)])[0] for c in (None,
                                                                                   [[50, 4]]))
    assert _same(dict(a.model.named_parameters()), dict(b.model.named_parameters()))


@pytest.mark.parametrize("cull, why", [
    ([[60, 2]], "multiples of eval_every"),
    ([[50, 2], [100, 3]], "not rising"),
    ([[250, 2]], "up to steps"),
    ([[50, 0]], "keep >= 1"),
    ([[100, 2], [50, 1]], "steps rising"),
])
def test_bad_culls_are_named(cull, why):
    with pytest.raises(ConfigError, match=why):
        TrainConfig(**{k: v for k, v in BASE.items() if k != "curriculum"}, cull=cull)


def test_a_top_level_cull_is_the_first_phases_and_a_later_phase_culls_with_its_own():
    cfg = TrainConfig(seeds=4, steps=200, eval_every=50, cull=[[200, 1]],
                      path=[{}, {"steps": 100}, {"steps": 100, "cull": [[50, 1]]}])
    assert [c.cull for i in range(3) for c in phase_configs(cfg, i, Path("s"))] == [
        [[200, 1]], None, [[50, 1]]]
    with pytest.raises(ConfigError, match="path phase 1: cull="):
        TrainConfig(seeds=4, steps=200, eval_every=50, path=[{}, {"steps": 100,
                                                                    "cull": [[150, 1]]}])
