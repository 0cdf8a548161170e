"""Seeds follow the lottery: a space's `train.seeds: {by_params: ...}` rule sets how many seeds a
proposal trains from its size, known before it trains. Fast: no Ray, no training.

    .venv/bin/python -m pytest tests/test_seed_rule.py -q
"""

from __future__ import annotations

import pytest

from arithsweep.core.errors import ConfigError
from arithsweep.search.propose.shrink import _full_config
from arithsweep.search.space.fields import seeds_for
from arithsweep.search.space.spaces import load_space, parse_space
from arithsweep.search.trials.configs import (
    CONST_KEY,
    SEED_RULE,
    STEPS_DIGITS,
    STEPS_RULE,
    build_trial,
    describe_trial,
)

SPACE = """
name: rule
model:
  n_layers: 1
  d_model: 8
  n_heads: 1
  d_ff: {choice: [0, 8, 16]}
train:
  lr: 0.01
  seeds: {by_params: [[700, 2], [600, 4], [0, 8]]}
"""
RULE = ((60, 8), (50, 32), (0, 64))


def test_first_matching_row_wins_at_the_boundaries():
    assert [seeds_for(RULE, n) for n in (500, 60, 59, 50, 49, 0)] == [8, 8, 32, 32, 64, 64]


def test_shipped_add_spaces_use_the_starting_rule():
    space = load_space("adderboard")
    assert space.seed_rule == RULE
    assert space.seed_rule_line == "train.seeds by params: 8 from 60 p, 32 from 50 p, 64 below"
    assert "train.seeds" not in {p.name for p in space.params}  # never sampled
    # microadder's sub-50 proposals train 40K steps: 32 seeds there, not 64
    micro = load_space("microadder")
    assert micro.seed_rule == ((60, 8), (0, 32))
    assert micro.steps_rule == ((50, 25000), (0, 40000)) and micro.steps_digits == 3
    assert not {"train.seeds", "train.steps"} & {p.name for p in micro.params}


def _trial(space, point, rule=True, task="add3"):
    const = {"task": task, "target": 0.99}
    if rule:
        const[SEED_RULE] = [list(r) for r in space.seed_rule]
    return {**_full_config(space, point), CONST_KEY: const}


def test_build_trial_sets_seeds_from_the_proposals_size():
    space = parse_space(SPACE, "rule.yaml")
    sizes = {}
    for d_ff in (0, 8, 16):
        setup = build_trial(_trial(space, {"model.d_ff": d_ff}))
        sizes[d_ff] = setup.params
        assert setup.train_cfg.seeds == seeds_for(space.seed_rule, setup.params)
    assert sizes[0] < 600 <= sizes[8] < 700 <= sizes[16]  # one size per row (472, 616, 744)
    # ...and MLflow's params say what was trained
    config = _trial(space, {"model.d_ff": 0})
    assert describe_trial(config)["train.seeds"] == "8"
    # the microadder start point: 57 p, so 32 seeds; its 67-p sibling 8
    micro = load_space("microadder")
    at = {"model.d_head": 4, "train.lr": 0.02}
    start = build_trial(_trial(micro, {**at, "model.mlp_down": "head"}))
    own = build_trial(_trial(micro, {**at, "model.mlp_down": "own"}))
    assert (start.params, start.train_cfg.seeds) == (57, 32)
    assert (own.params, own.train_cfg.seeds) == (67, 8)


def test_without_the_rule_in_the_constants_the_default_stands():
    space = parse_space(SPACE, "rule.yaml")
    setup = build_trial(_trial(space, {"model.d_ff": 0}, rule=False))
    assert setup.train_cfg.seeds == 4  # TrainConfig's default: the rule lives in the constants


@pytest.mark.parametrize("value, why", [
    ("{by_params: [[60, 8], [50, 32]]}", "the last row must start at 0"),
    ("{by_params: [[50, 8], [60, 32], [0, 4]]}", "row 2 [60, 32]: min_params must fall"),
    ("{by_params: [[60, 8], [60, 16], [0, 4]]}", "row 2 [60, 16]: min_params must fall"),
    ("{by_params: []}", "by_params needs a list of [min_params, seeds] rows"),
    ("{by_params: [60, 8]}", "row 1 60: by_params needs a list"),
    ("{by_params: [[60, 8.5], [0, 4]]}", "row 1 [60, 8.5]"),
    ("{by_params: [[60, 0], [0, 4]]}", "seeds in 1..1024"),
    ("{by_params: [[-1, 4]]}", "min_params must be >= 0"),
    ("{by_params: [[0, 4]], when: {lr: 0.01}}", "a seeds rule takes only by_params (got when)"),
])
def test_a_malformed_rule_is_one_error_naming_file_and_key(value, why):
    with pytest.raises(ConfigError) as err:
        parse_space(f"name: bad\ntrain:\n  lr: 0.01\n  seeds: {value}\n", "bad.yaml")
    msg = str(err.value)
    assert msg.startswith("search space bad.yaml: train.seeds: ") and why in msg
    assert "\n" not in msg


def test_the_rule_is_for_train_seeds_and_steps_only():
    with pytest.raises(ConfigError, match=r"bad.yaml: train.lr: by_params is a rule for "
                                          r"train.seeds and train.steps only"):
        parse_space("name: bad\ntrain:\n  lr: {by_params: [[0, 4]]}\n", "bad.yaml")


def test_a_steps_rule_sets_steps_from_the_size_and_trial_steps_overrides_it():
    space = parse_space(SPACE.replace("  lr: 0.01\n", "  lr: 0.01\n  steps: {by_params: "
                                      "[[600, 100], [0, 300]]}\n"), "rule.yaml")
    assert space.steps_rule == ((600, 100), (0, 300))
    assert space.size_rule_lines[1] == "train.steps by params: 100 from 600 p, 300 below"
    assert "train.steps" not in {p.name for p in space.params}

    def trial(d_ff, steps=None):
        config = _trial(space, {"model.d_ff": d_ff})
        config[CONST_KEY].update({STEPS_RULE: [list(r) for r in space.steps_rule],
                                  "steps": steps})
        return build_trial(config)

    assert trial(0).train_cfg.steps == 300 and trial(16).train_cfg.steps == 100
    assert trial(0, steps=7).train_cfg.steps == 7  # --trial-steps is the user's: it wins
    with pytest.raises(ConfigError, match=r"train.steps: by_params row 1 \[0, 0\]: "
                                          r"min_params must be >= 0 and steps in 1\.\."):
        parse_space("name: bad\ntrain:\n  steps: {by_params: [[0, 0]]}\n", "bad.yaml")


def test_a_steps_rule_for_3_digits_trains_n_digits_n_over_3_times_as_long():
    space = parse_space(SPACE.replace("  lr: 0.01\n", "  lr: 0.01\n  steps: {by_params: "
                                      "[[600, 100], [0, 300]], digits: 3}\n"), "rule.yaml")
    assert space.steps_digits == 3
    assert space.size_rule_lines[1].endswith("at 3 digits (n/3 times as many at n digits)")

    def steps(task, d_ff=0):
        config = _trial(space, {"model.d_ff": d_ff}, task=task)
        config[CONST_KEY].update({STEPS_RULE: [list(r) for r in space.steps_rule],
                                  STEPS_DIGITS: space.steps_digits})
        setup = build_trial(config)
        return setup.params, setup.train_cfg.steps

    assert [steps("add3")[1], steps("add3", 16)[1], steps("add2")[1]] == [300, 100, 200]
    for d_ff in (0, 16):  # add10's learned positions count more: its row by its own size
        params, n = steps("add10", d_ff)
        assert n == round(seeds_for(space.steps_rule, params) * 10 / 3)
    for bad, why in (("{by_params: [[0, 4]], digits: 3}", "a seeds rule takes only by_params"),
                     ("{by_params: [[0, 4]], digits: 0}", "digits must be a whole number")):
        key = "seeds" if "seeds" in why else "steps"
        with pytest.raises(ConfigError, match=why):
            parse_space(f"name: bad\ntrain:\n  {key}: {bad}\n", "bad.yaml")
