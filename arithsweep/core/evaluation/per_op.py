"""Problems of each operation apart, enough of them to tell six nines from five.

Quirke's 6-digit models add and subtract at 99.9999% *on each operation*, counted on a million
enriched problems ("at most 1 failure per 10^6 = six nines"). A check of a mixed task that is
to show that needs at least PER_OP = 10^6 problems of each operation: suite v2 holds ~570K of
each for mix6, where a five-nines model (1 failure in 10^5) makes none in 100K problems 37% of
the time and at most one in 10^6 only 0.05% of the time.

- `per_op_size(target)`: how many problems of each operation a check at `target` needs (PER_OP
  at SIX_NINES and above, else none beyond what the check already holds);
- `op_task(task, code)`: the one-operation task that samples only op `code` (add6 for mix6's
  additions): the held-out hash keys the op code and edge cases match by op, so its held-out
  side is exactly the mixed task's held-out side restricted to that operation;
- `op_sample(task, code, n, gen, exclude)`: n distinct held-out problems of one operation, none
  in `exclude`, composed as verification's suite is (mostly uniform over values, uniform operand
  lengths) with a larger Quirke-enriched share (carry and borrow cascades, sums of nines,
  negative answers; see core/data/quirke.py) and, for subtraction, answers near zero;
- `every_problem(task)`: every problem of a task whose operations each have at most PER_OP
  (mix3: 2 x 10^6, past `Task.enumerate_all`'s 10^6), where a sample of the held-out side
  could not reach PER_OP (mix3 holds ~62,500 held-out problems of each operation).

    python -c "import torch; from arithsweep.core.data.tasks import get_task; \\
        from arithsweep.core.evaluation.per_op import op_sample; \\
        print(op_sample(get_task('mix4'), 1, 8, torch.Generator().manual_seed(0)))"
"""

from __future__ import annotations

import torch
from torch import Tensor

from arithsweep.core.data.quirke import enriched_sample, supported
from arithsweep.core.data.sampling import _distinct, _randbelow
from arithsweep.core.data.tasks import OP_NAMES, Task, get_task
from arithsweep.core.errors import ConfigError

SIX_NINES = 0.999999  # Quirke's bar: at most 1 failure in 10^6 problems
PER_OP = 10**6  # problems of each operation a check at SIX_NINES holds at least
# shares of op_sample: Quirke's classes get a quarter (suite v2 gives them ~3%: mix6's S5 has
# 3,038 of 566K additions, too few to see a one-in-10^6 class failure), subtraction a sixteenth
# near zero; of the rest a tenth has uniform operand lengths and the others uniform values
ENRICHED_SHARE, SUITE_NEAR_ZERO, LENGTHS_SHARE = 1 / 4, 1 / 16, 1 / 10
_ROUNDS = 64  # near-zero draw rounds before the held-out side counts as exhausted

Problems = tuple[Tensor, Tensor, Tensor]


def per_op_size(target: float) -> int:
    """Problems of each operation a check at `target` must hold: PER_OP from six nines on
    (a target of 1.0 included), 0 below (no minimum past the check's own size)."""
    return PER_OP if target >= SIX_NINES else 0


def op_task(task: Task, code: int) -> Task:
    """The task with only operation `code` (0 add, 1 sub), same width and format."""
    if code not in task.op_codes:
        raise ConfigError(f"{task.name} has no op code {code} (it takes {task.op_codes})")
    if len(task.op_codes) == 1:
        return task
    return get_task(f"{OP_NAMES[code]}{task.n_digits}", task.fmt)


def every_problem(task: Task) -> Problems:
    """Every problem (a, b, op), add before sub for mix: for tasks whose operations each
    have at most PER_OP problems (mix3 has 2 x 10^6 in all)."""
    side = 10**task.n_digits
    if side * side > PER_OP:
        raise ConfigError(f"{task.name} has {side * side:.3g} problems of each operation; "
                          f"listing them all is limited to {PER_OP:,} each")
    x, k = torch.arange(side), len(task.op_codes)
    op = torch.tensor(task.op_codes).repeat_interleave(side * side)
    return x.repeat_interleave(side).repeat(k), x.repeat(side * k), op


def _cat(*parts: Problems) -> Problems:
    return tuple(torch.cat(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]


def _near_zero(task: Task, n: int, gen: torch.Generator, seen: Problems) -> Problems:
    """Up to n distinct held-out subtractions a - b with |a - b| < 10^j (j uniform in
    0..n_digits - 1, both signs, 0 included) and none in `seen`: the answers near zero
    where a subtraction model's sign and leading digits are decided by a long borrow."""
    nd, dev = task.n_digits, gen.device
    got = tuple(x[_distinct(*seen)] for x in seen)  # the suite's cascades may repeat a problem
    skip, idle = got[0].numel(), 0
    for _ in range(_ROUNDS):
        need = skip + n - got[0].numel()
        if need <= 0 or idle >= 4:
            break
        m = 20 * need + 64  # the held-out side keeps ~1/16 of draws
        a = torch.randint(0, 10**nd, (m,), generator=gen, device=dev)
        width = torch.randint(0, nd, (m,), generator=gen, device=dev)
        d = _randbelow(torch.tensor(10, device=dev) ** width, gen)
        d = torch.where(torch.rand(m, generator=gen, device=dev) < 0.5, -d, d)
        b = a - d
        op = torch.ones_like(a)
        ok = (b >= 0) & (b < 10**nd)
        a, b, op = a[ok], b[ok], op[ok]
        held = task.is_holdout(a, b, op)
        both = _cat(got, (a[held], b[held], op[held]))
        idx = _distinct(*both)[: skip + n]
        idle = idle + 1 if idx.numel() == got[0].numel() else 0
        got = tuple(x[idx] for x in both)
    return tuple(x[skip:] for x in got)


def op_sample(task: Task, code: int, n: int, gen: torch.Generator,
              exclude: Problems | None = None) -> Problems:
    """n distinct held-out problems of operation `code`, none in `exclude` (fewer only where
    the held-out side runs out): ENRICHED_SHARE Quirke-enriched (add and sub tasks), for
    subtraction SUITE_NEAR_ZERO answers near zero, of the rest LENGTHS_SHARE with uniform
    operand lengths and the others uniform over values. Deterministic for a given `gen`."""
    one = op_task(task, code)
    empty = torch.zeros(0, dtype=torch.int64)
    seen: Problems = tuple(exclude) if exclude is not None else (empty, empty, empty)
    start = seen[0].numel()
    n_enr = int(n * ENRICHED_SHARE) if supported(one) else 0
    n_near = int(n * SUITE_NEAR_ZERO) if one.op == "sub" else 0
    if n_enr:
        seen = _cat(seen, enriched_sample(one, n_enr, gen, split="holdout", exclude=seen))
    if n_near:
        seen = _cat(seen, _near_zero(one, n_near, gen, seen))
    rest = n - (seen[0].numel() - start)
    n_len = int(rest * LENGTHS_SHARE)
    for mode, k in (("uniform", n_len), ("values", rest - n_len)):
        if k > 0:
            seen = _cat(seen, one.sample(k, gen, mode, split="holdout", exclude=seen))
    return tuple(x[start:] for x in seen)
