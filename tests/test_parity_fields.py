"""The fields that bring tbukic's recipe to parity with its own code (docs/parity.md):
norm_eps, k/down_angle_init, grokfast_start, cosine_from, values_lengths. Each is validated,
defaults to what arithsweep did before, and does what it says."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from arithsweep.core.config import ModelConfig, TrainConfig
from arithsweep.core.data.hash_sampling import HashSampler
from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model.layers import _EPS, qk_normed
from arithsweep.core.model.model import ArithTransformer
from arithsweep.core.training.recipe import GrokfastEMA
from arithsweep.core.training.train import choose_layout, lr_at

TB = dict(vocab_size=10, n_ctx=34, n_layers=1, d_model=3, n_heads=1, d_head=4, d_vhead=4,
          d_ff=2, activation="swiglu", norm="rms", share_norms=True, pos="rope", rope_base=3.0,
          rope_pairs="interleaved", qk_norm="shared", embed="arc", tie_k="rotated",
          tie_v=True, tie_o=True, mlp_down="up_t_rot", init_std=0.02)


def test_defaults_are_the_old_behaviour():
    m, t = ModelConfig(vocab_size=10, n_ctx=34), TrainConfig()
    assert (m.norm_eps, m.k_angle_init, m.down_angle_init) == (_EPS, 0.0, 0.0)
    assert (t.grokfast_start, t.cosine_from, t.values_lengths) == ("grad", 0, "cap")


@pytest.mark.parametrize("field,value", [("norm_eps", 0.0), ("norm_eps", 0.5),
                                         ("k_angle_init", math.inf), ("down_angle_init", "x"),
                                         ("k_angle_init", True)])
def test_model_fields_are_validated(field, value):
    with pytest.raises(ConfigError, match=field):
        ModelConfig(**{**TB, field: value})


@pytest.mark.parametrize("over", [{"grokfast_start": "ones"}, {"cosine_from": 2},
                                  {"values_lengths": "each"},
                                  {"values_lengths": "shared", "sampler": "stream"}])
def test_train_fields_are_validated(over):
    with pytest.raises(ConfigError, match=next(iter(over))):
        TrainConfig(**over)


def test_angles_start_where_the_config_says():
    model = ArithTransformer(ModelConfig(**TB, k_angle_init=0.1, down_angle_init=-0.1), k=3,
                             seeds=[0, 1, 2])
    assert torch.equal(model.layers[0].attn.k_angle, torch.full((3, 1), 0.1))
    assert torch.equal(model.layers[0].mlp.down_angle, torch.full((3, 1), -0.1))
    plain = ArithTransformer(ModelConfig(**TB), k=1, seeds=[0])
    assert plain.layers[0].attn.k_angle.item() == 0.0


def test_norm_eps_reaches_the_norms_and_the_tiny_layout_keeps_it():
    cfg = ModelConfig(**TB, norm_eps=1e-6)
    model = ArithTransformer(cfg, k=1, seeds=[0])
    assert model.shared_norm.eps == 1e-6
    x = torch.full((1, 4, 2), 1e-3)  # tiny q: the epsilon dominates its RMS
    assert not torch.allclose(qk_normed(x, torch.ones(1, 4), 1, 1e-6),
                              qk_normed(x, torch.ones(1, 4), 1))
    tokens = torch.randint(0, 10, (2, 34))
    assert not torch.allclose(model(tokens), ArithTransformer.from_member_state(
        ModelConfig(**TB), model.member_state(0))(tokens))
    # the tiny kernel takes the model's epsilon (test_tiny_layout's norm-eps case checks its
    # numbers), so the recipe keeps its speed
    from arithsweep.core.model.tiny_layout import load_error

    if load_error() is None:
        assert choose_layout(cfg, TrainConfig(), torch.device("cpu"))[0] == "tiny"


def test_grokfast_zero_start_averages_from_zeros():
    p = torch.nn.Parameter(torch.zeros(1, 2))
    f = GrokfastEMA([p], alpha=0.9, lam=2.0, start="zero")
    p.grad = torch.tensor([[1.0, -2.0]])
    f.apply()  # ema = 0.1 g, g' = g + 2 * 0.1 g
    assert torch.allclose(p.grad, torch.tensor([[1.2, -2.4]]))
    g = GrokfastEMA([p], alpha=0.9, lam=2.0)  # the paper's: ema = g on the first step
    p.grad = torch.tensor([[1.0, -2.0]])
    g.apply()
    assert torch.allclose(p.grad, torch.tensor([[3.0, -6.0]]))


def test_cosine_from_one_is_one_step_ahead():
    c = TrainConfig(steps=100, warmup=0, min_lr_ratio=0.1)
    ahead = replace(c, cosine_from=1)
    assert math.isclose(lr_at(0, c), c.lr) and lr_at(0, ahead) < c.lr * (1 - 1e-6)
    assert all(math.isclose(lr_at(s, ahead), lr_at(s + 1, c)) for s in range(99))
    assert math.isclose(lr_at(99, ahead), c.lr * c.min_lr_ratio)


def test_values_lengths_shared_draws_one_length_for_both_operands():
    task = get_task("add10")
    base = TrainConfig(sampling="values", batch_size=256)
    lens = {}
    for how in ("cap", "shared"):
        hs = HashSampler(task, replace(base, values_lengths=how), cap_at=lambda s: 6)
        a, b, _ = hs.problems([0], list(range(8)))
        la = torch.tensor([len(str(int(x))) for x in a.flatten()])
        lb = torch.tensor([len(str(int(x))) for x in b.flatten()])
        assert int(a.max()) < 10**6 and int(b.max()) < 10**6
        lens[how] = (la, lb)
    # cap: ~90% of operands have 6 digits; shared: lengths near uniform over 1..6
    assert (lens["cap"][0] == 6).float().mean() > 0.8
    assert (lens["shared"][0] == 6).float().mean() < 0.3
    assert (lens["shared"][0] <= 2).float().mean() > 0.25
    # at the task's full length it is plain values
    full = HashSampler(task, replace(base, values_lengths="shared"), cap_at=lambda s: None)
    a, _, _ = full.problems([0], list(range(4)))
    assert (torch.tensor([len(str(int(x))) for x in a.flatten()]) == 10).float().mean() > 0.8
