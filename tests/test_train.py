"""The packed trainer: reaching 100% on add2, per-seed independence, NaN isolation, schedule,
determinism and config validation."""

from __future__ import annotations

import math

import pytest
import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluate import exact_match
from arithsweep.core.overrides import build_configs
from arithsweep.core.tasks import get_task
from arithsweep.core.train import eval_problems, lr_at, reached, train


def test_add2_reaches_100_percent_on_all_problems(add2_trained):
    result, _ = add2_trained
    task = result.task
    a, b, op = task.enumerate_all()
    assert a.numel() == 10**4
    ok = exact_match(result.best_model(), task, a, b, op)[0]
    assert bool(ok.all()), f"{int((~ok).sum())} of 10^4 add2 problems wrong"
    assert result.steps < result.train_cfg.steps  # got there well inside the step budget


def test_history_is_per_seed_and_complete(add2_trained):
    result, _ = add2_trained
    assert result.history, "no evaluation recorded"
    for p in result.history:
        assert len(p.exact_match) == result.train_cfg.seeds
        assert len(p.loss) == result.train_cfg.seeds
        assert len(p.position_acc) == result.train_cfg.seeds
        assert len(p.position_acc[0]) == result.task.answer_len
    steps = [p.step for p in result.history]
    assert steps == sorted(steps) and steps[-1] == result.steps


def _tiny(steps=40, **kw):
    return build_configs("add2", None, None, {"d_model": 8, "n_heads": 1, "d_ff": 16,
                                              "steps": steps, "eval_every": 20,
                                              "eval_size": 256, **kw})


def test_same_seed_same_result_and_pack_member_equals_single_run():
    task, m, t = _tiny(seeds=3, seed=5)
    r1 = train(task, m, t)
    r2 = train(task, m, t)
    for k, v in r1.model.state_dict().items():
        assert torch.equal(v, r2.model.state_dict()[k]), k
    # member 1 of the pack (seed 6) trains like a single run with seed 6: same init, same data
    task, m1, t1 = _tiny(seeds=1, seed=6)
    single = train(task, m1, t1)
    packed_member = r1.model.member_state(1)
    for k, v in single.model.member_state(0).items():
        torch.testing.assert_close(v, packed_member[k], atol=2e-4, rtol=1e-3)


def test_nan_in_one_seed_marks_it_failed_and_the_rest_go_on():
    task, m, t = _tiny(steps=60, seeds=3)
    poisoned = {"done": False}

    def on_eval(point, result):
        if not poisoned["done"]:
            with torch.no_grad():
                result.model.embed.weight[1].fill_(float("nan"))
            poisoned["done"] = True

    r = train(task, m, t, on_eval=on_eval)
    assert r.failed == [False, True, False]
    last = r.history[-1]
    assert math.isnan(last.exact_match[1])
    assert not math.isnan(last.exact_match[0]) and not math.isnan(last.exact_match[2])
    for name, p in r.model.named_parameters():
        assert torch.isfinite(p[0]).all() and torch.isfinite(p[2]).all(), name


def test_lr_schedule_warmup_cosine_floor_and_restart():
    cfg = TrainConfig(steps=1000, warmup=100, lr=1e-2, min_lr_ratio=0.1, restart_steps=500)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(99, cfg) == pytest.approx(1e-2)
    assert lr_at(999, cfg) == pytest.approx(1e-3, rel=1e-2)
    assert lr_at(550, cfg) < lr_at(200, cfg)
    assert lr_at(1000 + 50, cfg) == pytest.approx(1e-2)  # restart: warmed up again (500//10)
    assert lr_at(1499, cfg) == pytest.approx(1e-3, rel=2e-2)


def test_early_stop_uses_a_confidence_bound():
    assert not reached(0.99, 200, 0.99)  # a lucky small sample does not stop training
    assert reached(1.0, 4096, 0.99)
    assert reached(1.0, 4096, 1.0) and not reached(0.9999, 4096, 1.0)


def test_eval_stream_is_disjoint_from_training():
    task = get_task("add4")
    a, b, op = eval_problems(task, 2000)
    assert bool(task.is_holdout(a, b, op).all())
    ta, tb, top = task.sample(5000, torch.Generator().manual_seed(1), "uniform", split="train")
    assert not bool(task.is_holdout(ta, tb, top).any())


@pytest.mark.parametrize("field,value,word", [
    ("steps", 0, "steps"), ("lr", -1.0, "lr"), ("target", 1.5, "target"),
    ("sampling", "zipf", "sampling"), ("device", "tpu", "device"), ("seeds", 0, "seeds"),
])
def test_train_config_validation_names_the_field(field, value, word):
    with pytest.raises(ConfigError, match=word):
        TrainConfig(**{field: value})


def test_model_that_does_not_fit_the_task_is_refused():
    task, m, t = _tiny()
    m.vocab_size += 1
    with pytest.raises(ConfigError, match="does not fit task"):
        train(task, m, t)
