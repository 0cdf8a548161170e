"""What a row hides: natural classes that fail (result 0, all-nines operands, the longest
carry chains, lengths, Quirke classes) are named by verify and in LEADERBOARD.md."""

from __future__ import annotations

import torch

from arithsweep.core.data.tasks import get_task
from arithsweep.core.evaluation.evaluate import breakdown
from arithsweep.core.evaluation.stats import class_health
from arithsweep.leaderboard.publish import _worst_line


def test_a_model_that_never_answers_result_0_is_named():
    task = get_task("sub2")
    a, b, op = task.enumerate_all()
    correct = task.answer(a, b, op) != 0  # right everywhere except where the result is 0
    parts = breakdown(correct, task, a, b, op)
    assert parts["by_special"]["result 0"] == (100, 0)
    worst = class_health({k: {n: {"n": v[0], "correct": v[1]} for n, v in d.items()}
                          for k, d in parts.items()})
    assert worst[0][0] == "result 0" and worst[0][2] == 0.0
    assert correct.float().mean() >= 0.99  # what the headline said
    row = {"breakdown": {k: {n: {"n": v[0], "correct": v[1]} for n, v in d.items()}
                         for k, d in parts.items()}}
    assert _worst_line(row) == ["", "Worst class: result 0, 0.0000% of 100 (fails entirely)."]


def test_all_nines_and_small_buckets():
    task = get_task("add2")
    a, b, op = task.enumerate_all()
    correct = (a != 99) & (b != 99)
    parts = breakdown(correct, task, a, b, op)
    assert parts["by_special"]["an operand all nines"] == (199, 0)
    tiny = {"by_special": {"result 0": {"n": 3, "correct": 0}}}
    assert class_health(tiny) == [] and class_health(tiny, min_problems=1)[0][1] == 3
    assert torch.is_tensor(correct)
