"""What each training step draws: the carry share that fades over training, the carry mode and
the digit-length curriculum. Pure functions of a `TrainConfig` and the step (no torch).

Both samplers read them, so a run's data mix is one rule whichever draws the batches: the
per-seed "stream" (`training.streams._DataStream`) and the counter-based "hash"
(`data.hash_sampling.HashSampler`). Published tiny adders needed both knobs (MicroAdder: 80%
carry-heavy batches fading to 0 between 25% and 75% of the steps; a curriculum over operand
lengths, linear or in stages); the rest of the recipe is in `training.recipe`.

    python -c "from arithsweep.core.data.mix import carry_share; from arithsweep.core.config \\
        import TrainConfig as T; print(carry_share(T(carry_frac=.8, carry_fade_start=.25, \\
        carry_fade_end=.75, steps=100), 50))"
"""

from __future__ import annotations

import math

from arithsweep.core.config import TrainConfig


def carry_share(cfg: TrainConfig, step: int) -> float:
    """Share of a batch drawn carry-enriched at `step` (with sampling "mixed")."""
    start, end = cfg.carry_fade_start * cfg.steps, cfg.carry_fade_end * cfg.steps
    if end <= start or step <= start:
        return cfg.carry_frac
    return cfg.carry_frac * max(0.0, 1.0 - (step - start) / (end - start))


def values_rows(cfg: TrainConfig, rest: int) -> int:
    """How many of a "mixed" batch's `rest` non-carry rows are drawn uniform over values (the
    others have uniform operand lengths); the same count for both samplers."""
    return int(rest * cfg.values_share)


def carry_mode(cfg: TrainConfig) -> str:
    """The Task.sample mode of the carry share: one chain pattern, or MicroAdder's mix."""
    return "carry_patterns" if cfg.carry_patterns == "mixed" else "carry"


def curriculum_cap(cfg: TrainConfig, n_digits: int, step: int) -> int | None:
    """Longest operand length allowed at `step`; None = the task's full length."""
    if cfg.curriculum:  # unequal stages: the first whose end lies ahead
        return next((min(n_digits, cap) for until, cap in cfg.curriculum if step < until), None)
    c = cfg.curriculum_steps
    if not c or step >= c:
        return None
    if cfg.curriculum_stages:
        k = cfg.curriculum_stages
        stage = min(k, (step * (k + 1)) // c)  # 0..k over the curriculum
        return max(1, math.ceil(n_digits * (stage + 1) / (k + 1)))
    return max(1, min(n_digits, 1 + (n_digits * step) // c))
