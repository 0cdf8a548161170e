"""Grokking-aware stopping: a tiny model at chance whose answer digits are being learnt one by
one is not a plateau (search/plateau.Plateau)."""

from __future__ import annotations

from types import SimpleNamespace

from arithsweep.search.trials.plateau import Plateau, digit_accuracy


def test_a_model_at_chance_but_learning_digits_is_not_stopped():
    grokking, stuck = Plateau(patience=3), Plateau(patience=3)
    # half the budget: exact match 0, loss flat, one more answer digit right every 2 evals
    for i in range(12):
        digits = 0.1 + 0.08 * (i // 2) / 1.0
        assert not grokking.update(0.0, 1.70, digits), f"stopped at evaluation {i}"
    # the same curve without the digits is a plateau after `patience` evaluations
    stops = [stuck.update(0.0, 1.70, 0.1) for _ in range(4)]
    assert stops == [False, False, False, True]
    # and once the digits stop moving too, the grokking model stops as well
    assert [grokking.update(0.0, 1.70, 0.6) for _ in range(4)] == [False] * 3 + [True]


def test_digit_accuracy_is_the_best_live_seeds_mean_over_answer_positions():
    point = SimpleNamespace(position_acc=[[0.1, 0.3], [0.9, 0.5], [float("nan"), 0.2]])
    assert digit_accuracy(point) == 0.7
    assert digit_accuracy(SimpleNamespace(position_acc=[])) is None

