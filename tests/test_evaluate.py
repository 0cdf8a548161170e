"""Fast exact match (one teacher-forced pass) must agree with greedy decoding problem by
problem, on trained and untrained models, in every format; plus the breakdowns."""

from __future__ import annotations

import pytest
import torch

from arithsweep.core.data.tasks import get_task
from arithsweep.core.evaluation.evaluate import (
    breakdown,
    exact_match,
    greedy_decode,
    position_accuracy,
)
from arithsweep.core.model.model import ArithTransformer, ModelConfig


def _agree(model, task, a, b, op, member=0):
    fast = exact_match(model, task, a, b, op)[member]
    got = greedy_decode(model, task, a, b, op, member=member)
    truth = task.answer(a, b, op).tolist()
    slow = torch.tensor([g == t for g, t in zip(got, truth)])
    mismatch = (fast != slow).nonzero().flatten().tolist()
    assert not mismatch, f"{len(mismatch)} disagreements, e.g. problem {mismatch[:3]}"
    return fast


def test_fast_exact_match_equals_greedy_on_the_trained_add2_model(add2_trained):
    result, _ = add2_trained
    task = result.task
    a, b, op = task.enumerate_all()
    model = result.best_model()
    fast = _agree(model, task, a, b, op)
    assert fast.float().mean() > 0.99


def test_fast_exact_match_equals_greedy_on_a_partly_trained_model(add2_trained):
    # a model between chance and perfect has both right and wrong answers to compare
    result, _ = add2_trained
    model = ArithTransformer.from_member_state(result.model_cfg, result.best_state)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.15)
    task = result.task
    a, b, op = task.enumerate_all()
    fast = _agree(model, task, a, b, op)
    assert 0.0 < fast.float().mean() < 1.0


@pytest.mark.parametrize("name,fmt", [
    ("add3", None), ("add3", "nopad"), ("add3", "fwdans,revops"), ("sub3", None),
    ("mix2", None), ("mul2", None), ("add3", "nodelim"), ("sub2", "nopad"),
])
def test_fast_exact_match_equals_greedy_on_untrained_models(name, fmt):
    task = get_task(name, fmt)
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, d_model=8, n_heads=2, d_ff=8)
    model = ArithTransformer(cfg, k=2, seeds=[0, 1])
    with torch.no_grad():  # sharpen an untrained model so that it sometimes gets things right
        model.embed.weight.mul_(4)
    a, b, op = task.sample(3000, torch.Generator().manual_seed(0), "uniform", split="holdout")
    for member in range(2):
        _agree(model, task, a, b, op, member)


def test_exact_match_shape_and_position_accuracy(add2_trained):
    result, _ = add2_trained
    task = result.task
    a, b, op = task.sample(500, torch.Generator().manual_seed(2), "uniform", split="holdout")
    ok = exact_match(result.model, task, a, b, op)
    assert ok.shape == (result.train_cfg.seeds, 500) and ok.dtype == torch.bool
    acc = position_accuracy(result.model, task, a, b, op)
    assert acc.shape == (result.train_cfg.seeds, task.answer_len)
    # exact match can never beat the worst position
    assert bool((ok.float().mean(1) <= acc.min(1).values + 1e-6).all())


def test_breakdown_counts_add_up():
    task = get_task("add2")
    a, b, op = task.enumerate_all()
    correct = (a + b) % 3 != 0  # any pattern: the buckets must partition it
    parts = breakdown(correct, task, a, b, op)
    for key in ("by_carry", "by_lengths", "by_answer_len"):
        n = sum(v[0] for v in parts[key].values())
        c = sum(v[1] for v in parts[key].values())
        assert n == 10**4 and c == int(correct.sum()), key
    assert set(parts["by_lengths"]) == {"1x1", "1x2", "2x1", "2x2"}
    assert parts["by_lengths"]["1x1"][0] == 100
    assert parts["by_answer_len"]["3"][0] == sum(1 for x in range(100) for y in range(100)
                                                 if x + y >= 100)
    assert parts["by_carry"]["S0"][0] == sum(1 for x in range(100) for y in range(100)
                                             if x % 10 + y % 10 < 10 and x // 10 + y // 10 < 10)
