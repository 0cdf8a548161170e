"""Population training: proposals with their own lr / decay / clip / warmup / seeds in one pack
train each member as it trains alone; pack keys; per-proposal stopping and freezing; the
vectorised per-member AdamW against torch.optim.AdamW."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import arithsweep.core.training.train as train_mod
from arithsweep.core.errors import ConfigError
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.packing import pack_key
from arithsweep.core.training.population import PackAdamW, train, train_population

# per-proposal hyperparameters: lr, weight decay, clip (0 = off), warmup, cosine floor, seed
PROPOSALS = [dict(lr=1e-2, weight_decay=0.01, grad_clip=1.0, warmup=10, seed=0),
             dict(lr=3e-3, weight_decay=0.3, grad_clip=0.0, warmup=0, seed=7, min_lr_ratio=0.5),
             dict(lr=2e-2, weight_decay=0.0, grad_clip=0.3, warmup=30, seed=3, polish_lr=3e-4)]


def _base(steps=60, **kw):
    return build_configs("add2", None, None, {"d_model": 8, "n_heads": 1, "d_ff": 16,
                                              "steps": steps, "eval_every": 20, "seeds": 2,
                                              "batch_size": 32, "eval_size": 256,
                                              "early_stop": False, **kw})


def _assert_same_member(pack_state, single_state):
    for name, v in single_state.items():
        torch.testing.assert_close(pack_state[name], v, atol=2e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("recipe", [
    {},
    # restart, polish on mined errors, Grokfast and forced micro-batching, all in one pack
    {"steps": 30, "restart_steps": 15, "polish_steps": 15, "eval_every": 15,
     "polish_pool": 1000, "grokfast_alpha": 0.9, "grokfast_lambda": 1.0, "micro_batch": 16},
    # abacus offsets: each member draws its own, the same in a pack as alone
    {"pos": "abacus", "abacus_max": 12, "abacus_offset": 4, "steps": 30},
], ids=["plain", "recipe", "abacus"])
def test_each_member_trains_as_it_does_alone(recipe):
    task, m, base = _base(**recipe)
    cfgs = [replace(base, **p) for p in PROPOSALS]
    results = train_population(task, m, cfgs)
    assert [r.train_cfg for r in results] == cfgs  # in order, one per proposal
    for cfg, r in zip(cfgs, results):
        single = train(task, m, cfg)
        assert r.model.k == cfg.seeds and r.steps == single.steps
        assert r.examples == single.examples == r.steps * cfg.seeds * cfg.batch_size
        assert r.stop_reason == single.stop_reason == "step budget"
        for i in range(cfg.seeds):
            _assert_same_member(r.model.member_state(i), single.model.member_state(i))
        assert [p.step for p in r.history] == [p.step for p in single.history]
        for p, q in zip(r.history, single.history):
            assert p.lr == q.lr and p.examples == q.examples
            torch.testing.assert_close(p.loss, q.loss, atol=1e-4, rtol=1e-4)
            # a borderline problem may flip with float-level weight differences, no more
            assert max(abs(a - b) for a, b in zip(p.exact_match, q.exact_match)) <= 2 / 256
        assert r.best_seed == single.best_seed or r.best_em == single.best_em
    # different hyperparameters really trained differently (the test would be vacuous if not)
    w = [r.model.member_state(0)["embed.weight"] for r in results]
    assert not torch.allclose(w[0], w[1]) and not torch.allclose(w[0], w[2])


def test_pack_keys_group_only_per_member_differences():
    task, m, base = _base()
    same = [replace(base, lr=1e-3, seed=5, seeds=3, warmup=0, weight_decay=0.5, target=0.5,
                    grad_clip=0.0, time_budget=9.0, early_stop=True), base]
    assert pack_key(m, same[0]) == pack_key(m, same[1])
    for field, value in [("steps", 61), ("batch_size", 32), ("eval_every", 10),
                         ("sampling", "uniform"), ("polish_steps", 5), ("device", "cpu")]:
        other = replace(base, **{field: value})
        if getattr(base, field) == value:
            continue
        assert pack_key(m, other) != pack_key(m, base), field
        with pytest.raises(ConfigError, match=field):
            train_population(task, m, [base, other])
    assert pack_key(replace(m, d_ff=17), base) != pack_key(m, base)
    with pytest.raises(ConfigError, match="no proposals"):
        train_population(task, m, [])


def test_a_stopped_proposal_stays_frozen_while_the_others_go_on():
    task, m, base = _base(steps=60)
    cfgs = [replace(base, **p) for p in PROPOSALS]
    cfgs[2] = replace(cfgs[2], seeds=3)
    at_stop, calls = {}, []

    def on_eval(j, point, result):
        calls.append((j, point.step))
        if j == 1 and point.step == 20:
            at_stop.update({i: result.model.member_state(i) for i in range(result.model.k)})
            return True
        return None

    results = train_population(task, m, cfgs, on_eval=on_eval)
    r0, r1, r2 = results
    assert r1.steps == 20 and r1.stopped_early and r1.stop_reason == "stopped by caller"
    assert [p.step for p in r1.history] == [20] and (1, 40) not in calls
    assert r0.steps == r2.steps == 60 and r0.stop_reason == r2.stop_reason == "step budget"
    assert [p.step for p in r2.history] == [20, 40, 60]
    # examples count only each proposal's own members, and only while it ran
    B = base.batch_size
    assert (r0.examples, r1.examples, r2.examples) == (60 * 2 * B, 20 * 2 * B, 60 * 3 * B)
    assert r2.history[-1].examples == r2.examples
    for i, state in at_stop.items():
        for name, v in r1.model.member_state(i).items():
            assert torch.equal(v, state[name]), f"stopped proposal's {name} moved"
    # the others trained on exactly as they do with nobody stopping beside them
    alone = train(task, m, cfgs[2])
    for i in range(3):
        _assert_same_member(r2.model.member_state(i), alone.model.member_state(i))
    assert r1.best_model().k == 1 and r2.best_seed < 3


def test_pack_adamw_matches_torch_adamw_per_member():
    torch.manual_seed(0)
    K, lrs, wds = 3, [1e-2, 3e-3, 0.0], [0.1, 0.0, 0.5]
    shapes = [(K, 4, 5), (K, 5), (K, 2, 3)]
    ours = [torch.randn(s, requires_grad=True) for s in shapes]
    start = [p.detach().clone() for p in ours]
    opt = PackAdamW(ours, torch.tensor(wds), (0.9, 0.98))
    grads = [[torch.randn(s) for s in shapes] for _ in range(5)]
    for step_grads in grads:
        for p, g in zip(ours, step_grads):
            p.grad = g.clone()
        opt.step(torch.tensor(lrs))
    for i in range(K):  # member i alone under torch's AdamW, decay on matrices only
        ref = [s[i:i + 1].clone().requires_grad_(True) for s in start]
        groups = [{"params": [p for p in ref if p.dim() >= 3], "weight_decay": wds[i]},
                  {"params": [p for p in ref if p.dim() < 3], "weight_decay": 0.0}]
        topt = torch.optim.AdamW(groups, lr=lrs[i], betas=(0.9, 0.98), eps=1e-8)
        for step_grads in grads:
            for p, g in zip(ref, step_grads):
                p.grad = g[i:i + 1].clone()
            topt.step()
        for p, r in zip(ours, ref):
            torch.testing.assert_close(p.detach()[i:i + 1], r.detach(), atol=1e-6, rtol=1e-5)
    for p, s in zip(ours, start):  # lr 0: exactly unmoved, decay and momentum included
        assert torch.equal(p.detach()[2], s[2])


def test_clip_is_per_member():
    _, m, _ = _base()
    from arithsweep.core.model.model import ArithTransformer

    model = ArithTransformer(m, k=3)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 10
    alive = torch.ones(3, dtype=torch.bool)
    before = sum(p.grad.flatten(1).pow(2).sum(1) for p in model.parameters()).sqrt()
    train_mod._clip_and_guard(model, torch.tensor([1.0, 0.0, 0.5]), alive)
    norm = sum(p.grad.flatten(1).pow(2).sum(1) for p in model.parameters()).sqrt()  # (K,)
    torch.testing.assert_close(norm, torch.stack([torch.tensor(1.0), before[1],
                                                  torch.tensor(0.5)]), rtol=1e-4, atol=1e-4)


def test_a_near_miss_second_round_retrains_its_best_seed_exactly_as_it_began():
    """The search's second round (rounds.next_round) is the best seed alone, twice as long:
    that seed alone trains as it did as member i of its pack (same init, same batches), so
    the round really continues the lottery ticket that nearly won."""
    from arithsweep.search.trials.rounds import next_round

    task, m, base = _base(steps=40, seed=3, seeds=3)
    pack = train(task, m, base)
    nxt = next_round(base, 2)
    assert (nxt.seed, nxt.seeds, nxt.steps) == (5, 1, 80)
    alone = train(task, m, replace(nxt, steps=base.steps))
    _assert_same_member(pack.model.member_state(2), alone.model.member_state(0))


def test_a_continue_round_starts_from_the_best_weights_with_new_data(tmp_path):
    """near_miss_round=continue: the next round starts every member from the saved best
    weights (init_from), with data streams the first round never drew, at a tenth of the lr
    its cosine ended at, no curriculum and no warmup, for the same number of steps; with held
    decay drops, at the decay its start's exact match had dropped it to."""
    from arithsweep.search.trials.rounds import CONTINUE_LR_SHARE, CONTINUE_SEEDS, next_round

    task, m, base = _base(steps=40, seed=3, seeds=12)
    base = replace(base, near_miss_round="continue", curriculum=[[10, 1]], warmup=5)
    nxt = next_round(base, 2, tmp_path / "start")
    assert nxt.init_from == str(tmp_path / "start")
    assert (nxt.seed, nxt.seeds, nxt.steps) == (15, CONTINUE_SEEDS, 40)
    assert nxt.lr == base.lr * base.min_lr_ratio * CONTINUE_LR_SHARE and CONTINUE_LR_SHARE == 0.1
    assert nxt.warmup == 0 and nxt.curriculum is None
    assert nxt.weight_decay == base.weight_decay  # no drops: the decay as it was
    held = replace(base, weight_decay=0.01, wd_drops=[[0.01, 0.1], [0.05, 0.001]],
                   wd_drops_hold=True)
    assert next_round(held, 2, tmp_path / "start", 0.91).weight_decay == pytest.approx(1e-5)
    assert next_round(held, 2, tmp_path / "start", 0.03).weight_decay == pytest.approx(1e-3)
    assert next_round(held, 2, tmp_path / "start", 0.001).weight_decay == 0.01
    with pytest.raises(ConfigError, match="continue"):
        next_round(base, 2)
    # as the trial runs it: the round's best member saved, then two steps of the next round
    first = train(task, m, replace(base, seeds=3))
    first.save_best(tmp_path / "start")
    best = first.model.member_state(first.best_seed)
    cont = train(task, m, replace(nxt, steps=2, eval_every=1))
    for i in range(cont.model.k):  # Adam moves a weight at most ~lr per step
        for name, v in cont.model.member_state(i).items():
            torch.testing.assert_close(v, best[name], atol=3 * nxt.lr, rtol=0, msg=name)
