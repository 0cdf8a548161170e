"""The tiny-model training recipe: carry fade, curriculum stages, Grokfast, polish mining."""

from __future__ import annotations

import pytest
import torch

from arithsweep.core.config import ModelConfig, TrainConfig
from arithsweep.core.data.mix import carry_share, curriculum_cap
from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model.model import ArithTransformer
from arithsweep.core.training.recipe import GrokfastEMA, decay_factors, mine_errors, wd_factors


def test_carry_share_fades_between_the_fractions():
    cfg = TrainConfig(steps=1000, carry_frac=0.8, carry_fade_start=0.25, carry_fade_end=0.75)
    assert carry_share(cfg, 0) == carry_share(cfg, 250) == 0.8
    assert abs(carry_share(cfg, 500) - 0.4) < 1e-12
    assert carry_share(cfg, 750) == carry_share(cfg, 5000) == 0.0
    assert carry_share(TrainConfig(carry_frac=0.3), 10**6) == 0.3  # no fade asked


def test_curriculum_in_stages_and_linear():
    staged = TrainConfig(curriculum_steps=900, curriculum_stages=2)
    # MicroAdder's 3 / 6 / 10 digits for add10 in three equal stages, then the full task
    assert [curriculum_cap(staged, 10, s) for s in (0, 299, 300, 599, 600, 899)] == [
        4, 4, 7, 7, 10, 10]
    assert curriculum_cap(staged, 10, 900) is None
    linear = TrainConfig(curriculum_steps=100)
    caps = [curriculum_cap(linear, 3, s) for s in range(100)]
    assert caps[0] == 1 and caps == sorted(caps) and max(caps) == 3
    assert curriculum_cap(TrainConfig(), 3, 0) is None


def test_grokfast_adds_the_ema_of_past_gradients_per_member():
    p = torch.nn.Parameter(torch.zeros(2, 3))  # K = 2 members
    f = GrokfastEMA([p], alpha=0.5, lam=2.0)
    p.grad = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    f.apply()  # first step: ema = g, g <- g + 2g
    assert torch.equal(p.grad[0], torch.full((3,), 3.0)) and not p.grad[1].any()
    p.grad = torch.tensor([[1.0, 1.0, 1.0], [4.0, 4.0, 4.0]])
    f.apply()  # ema = 0.5*1 + 0.5*1 = 1 / 0.5*0 + 0.5*4 = 2
    assert torch.equal(p.grad, torch.tensor([[3.0] * 3, [8.0] * 3]))


def test_polish_mines_errors_from_the_training_split_only():
    task = get_task("add2")
    model = ArithTransformer(ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx,
                                         d_model=8), k=2, seeds=[0, 1])  # untrained: wrong a lot
    cfg = TrainConfig(polish_pool=4000)
    errors = mine_errors(model, task, cfg, torch.Generator().manual_seed(0))
    assert len(errors) == 2 and all(e[0].numel() > 100 for e in errors)
    held = {(a, b, o) for a, b, o in zip(*(t.tolist() for t in task.enumerate_all()))
            if task.is_holdout(torch.tensor([a]), torch.tensor([b]), torch.tensor([o]))}
    for a, b, op in errors:
        assert not task.is_holdout(a, b, op).any()
        assert not {(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), op.tolist())} & held


def test_shipped_recipes_build_and_count_what_their_names_say():
    """recipes/<task>-<params>.yaml: each loads as a config and has that many parameters."""
    from pathlib import Path

    from arithsweep.core.model.model import count_params
    from arithsweep.core.overrides import build_configs

    recipes = sorted(Path(__file__).parent.parent.joinpath("recipes").glob("*.yaml"))
    assert len(recipes) >= 4
    for path in recipes:
        task_name, params = path.stem.rsplit("-", 1)
        task, model_cfg, train_cfg = build_configs(None, None, path, {})
        assert task.name == task_name, path.name
        assert count_params(model_cfg) == int(params), path.name
        assert train_cfg.target >= 0.99, path.name


def test_wd_drops_hold_keeps_a_drop_once_reached_and_reads_no_digits():
    """tbukic's adaptive decay: a drop reached at one evaluation stays for the rest of the run,
    even when the member's exact match dips, and no answer-digit gate applies."""
    drops = TrainConfig(wd_drops=[[0.01, 0.1], [0.05, 0.001]], wd_drops_hold=True).wd_drops
    digits = [[0.1] * 3] * 4  # far below MicroAdder's 70% gate
    first = wd_factors(drops, [0.0, 0.02, 0.3, 0.3], digits, held=[1.0] * 4)
    assert first == [1.0, 0.1, 0.001, 0.001]
    # the next evaluation: members 1 and 2 dip to chance, member 0 passes 1%, 3 stays
    again = wd_factors(drops, [0.02, 0.0, 0.0, float("nan")], digits, held=first)
    assert again == [0.1, 0.1, 0.001, 0.001]
    # without hold the same dips give the decay back, and the gate blocks the low-digit members
    assert wd_factors(drops, [0.02, 0.0, 0.3, 0.3], digits) == [1.0, 1.0, 1.0, 1.0]
    # the trainer reads the factors so far back from the optimiser's per-member decay
    base = torch.tensor([0.01, 0.01, 0.0])
    held = decay_factors(base * torch.tensor([0.1, 0.001, 1.0]), base)
    assert held == pytest.approx([0.1, 0.001, 1.0])


def test_wd_drops_scale_each_members_decay_by_its_own_progress():
    """MicroAdder's adaptive decay: the last step reached applies, only with 70% of the answer
    digits right, and a member that falls back decays fully again."""
    drops = TrainConfig(wd_drops=[[0.02, 0.1], [0.2, 0.01]]).wd_drops
    exact = [0.0, 0.05, 0.5, 0.5, float("nan")]
    digits = [[0.9] * 3, [0.8] * 3, [0.9] * 3, [0.6] * 3, [0.9] * 3]
    assert wd_factors(drops, exact, digits) == [1.0, 0.1, 0.01, 1.0, 1.0]
    assert TrainConfig(wd_drops=[["2e-2", 0.1]]).wd_drops == [[0.02, 0.1]]
    for bad in ([[0.2, 0.1], [0.02, 0.01]], [[0.0, 0.1]], [[0.1, 2.0]], [0.1], [], "0.1"):
        with pytest.raises(ConfigError, match="wd_drops"):
            TrainConfig(wd_drops=bad)
