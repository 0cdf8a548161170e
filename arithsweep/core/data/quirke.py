"""Philip Quirke's question classes for addition and subtraction, and his enriched data.

Quirke et al. verify small addition/subtraction transformers class by class ("Understanding
Addition in Transformers", arXiv 2310.13121; "Increasing Trust in Language Models through the
Reuse of Verified Circuits", arXiv 2402.02619). The definition implemented here is the one in
his code, `get_maths_question_complexity` in QuantaTools/maths_tools/maths_complexity.py of
github.com/PhilipQuirke/verified_transformers. With digit i of a and b (0 = units):

- addition: column i *makes a carry* when a_i + b_i >= 10 and is a *sum-9* column when
  a_i + b_i == 9. S0: no column makes a carry. S_k (k >= 1): the longest run "a carry-making
  column followed directly above by sum-9 columns" spans k columns (S1: carries, none
  cascades; S2: a carry passes one sum-9 column ...). Capped: S5 means 5 or more.
- subtraction a - b >= 0 (M): column i *borrows* when a_i < b_i and is *equal* when a_i == b_i.
  M0: no column borrows; M_k: the longest run "a borrowing column followed directly above by
  equal columns" spans k columns; M4 means 4 or more.
- subtraction a - b < 0 (N): the same runs on the same raw digits a_i vs b_i (Quirke does not
  swap the operands), except that equal columns above the highest non-zero digit of either
  operand (0 == 0 padding) do not count. A negative answer always has a borrowing column, so
  the classes are N1..N4, N4 meaning 4 or more.

This differs from `Task.carry_class` (the longest run of columns that *pass* a carry, whatever
makes it): 55+55 is S1 here (two carries, neither cascades) and carry class 2 there.

Classes that a task's width cannot reach are left out (S_k needs k digits, M_k needs k + 1
because a larger top digit must end the run, N_k needs k), so add3 has S0..S3 and sub3 has
M0..M2, N1..N3. Multiplication has no Quirke classes: both functions raise ConfigError for mul.

`enriched_sample` is Quirke's enriched data: each problem is built to land in a chosen class
(the cascade forced digit by digit), classified again, and kept for the class it truly is, so
every reachable class gets an equal share. Try:

    python -c "import torch; from arithsweep.core.data.tasks import get_task; \\
        from arithsweep.core.data.quirke import enriched_sample, quirke_class, class_names; \\
        t = get_task('sub4'); a, b, op = enriched_sample(t, 16, torch.Generator()); \\
        print([(int(x), int(y), class_names(t)[c]) for x, y, c in \\
               zip(a, b, quirke_class(t, a, b, op))])"
"""

from __future__ import annotations

import torch
from torch import Tensor

from arithsweep.core.data.sampling import _POW10, _digits, _distinct, _randbelow
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError

S_CAP, M_CAP, N_CAP = 5, 4, 4  # Quirke's top classes: S5, M4, N4 mean "that long or longer"
_LIST_MAX = 4 * 10**6  # holdout: list the whole side of a space this small (as Task does)
_MAX_ROUNDS = 64  # enriched_sample: draw rounds before a class is declared exhausted


def supported(task: Task) -> bool:
    """True for add, sub and mix tasks, the ones Quirke's classes are defined for."""
    return getattr(task, "op", None) in ("add", "sub", "mix")


def _require(task: Task) -> None:
    if not supported(task):
        raise ConfigError(f"Quirke's classes (and sampling 'enriched') are defined for add, "
                          f"sub and mix tasks, not {task.name}")


def _families(op: str, width: int) -> list[list[str]]:
    """Class names per family (S, M, N) that the task op uses, for operands of `width` digits."""
    s = [f"S{k}" for k in range(min(S_CAP, width) + 1)]
    m = [f"M{k}" for k in range(min(M_CAP, width - 1) + 1)]
    n = [f"N{k}" for k in range(1, min(N_CAP, width) + 1)]
    return {"add": [s], "sub": [m, n], "mix": [s, m, n]}[op]


def class_names(task: Task) -> list[str]:
    """The task's reachable classes in order: add S0..; sub M0.., N1..; mix S.., M.., N.."""
    _require(task)
    return [c for fam in _families(task.op, task.n_digits) for c in fam]


def _chain(start: Tensor, extend: Tensor) -> Tensor:
    """Longest run of one `start` column followed directly above by `extend` columns:
    (N, W) bool, (N, W) bool -> (N,) int64 (0 when no column starts a run)."""
    run = best = torch.zeros(start.shape[0], dtype=torch.int64, device=start.device)
    for j in range(start.shape[1]):  # loops over digit positions only, never over problems
        run = torch.where(start[:, j], 1, torch.where(extend[:, j] & (run > 0), run + 1, 0))
        best = torch.maximum(best, run)
    return best


def quirke_class(task: Task, a, b, op) -> Tensor:
    """(N,) int64 index into class_names(task) of each problem (a, b, op)."""
    _require(task)
    a, b, op = task._check(a, b, op)
    n, fams = task.n_digits, _families(task.op, task.n_digits)
    da, db = _digits(a, n), _digits(b, n)  # (N, n) each, units first
    total = da + db
    s_k = _chain(total >= 10, total == 9).clamp(max=len(fams[0]) - 1)
    if task.op == "add":
        return s_k
    # an equal column counts only at or below the highest non-zero digit of either operand
    live = ((da > 0) | (db > 0)).flip(1).cummax(1).values.flip(1)  # (N, n)
    run = _chain(da < db, (da == db) & live)
    m_fam, n_fam = fams[-2], fams[-1]
    sub = torch.where(a < b, len(m_fam) + run.clamp(1, len(n_fam)) - 1,
                      run.clamp(max=len(m_fam) - 1))
    if task.op == "sub":
        return sub
    return torch.where(op == 0, s_k, len(fams[0]) + sub)


def classes(task, a, b, op) -> tuple[Tensor, list[str]] | None:
    """(quirke_class, class_names) of problems (a, b, op), or None for a task without Quirke's
    classes: what a breakdown by class needs, in one call."""
    if not supported(task):
        return None
    names = class_names(task)
    return quirke_class(task, a, b, op), names


def _pairs(kind: str, shape: tuple[int, ...], gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random digit pairs of one column kind, each `shape` int64: carry (sum >= 10), nine
    (sum == 9), borrow (a < b), equal (a == b, non-zero so that it is never padding)."""
    dev = gen.device
    if kind == "carry":
        x = 1 + _randbelow(torch.full(shape, 9, device=dev), gen)
        return x, 10 - x + _randbelow(x, gen)
    if kind == "nine":
        x = torch.randint(0, 10, shape, generator=gen, device=dev)
        return x, 9 - x
    if kind == "borrow":
        x = torch.randint(0, 9, shape, generator=gen, device=dev)
        return x, x + 1 + _randbelow(9 - x, gen)
    x = torch.randint(1, 10, shape, generator=gen, device=dev)
    return x, x


def _propose(fam: str, k: int, top: bool, m: int, cap: int,
             gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """m problems built to be in class fam+k (S/M/N) with operands below 10**cap; `top`: k is
    the capped class (a longer run is fine). Random problems with the cascade written over
    them at a random height; other runs may make a few land elsewhere (the caller re-checks)."""
    dev = gen.device
    pos = torch.arange(cap, device=dev)
    # random digits under uniform operand lengths (as sampling mode "uniform", but drawn as
    # digits: holdout needs ~16 draws per problem, so this is the hot path)
    da, db = (torch.randint(0, 10, (m, cap), generator=gen, device=dev)
              * (pos < torch.randint(1, cap + 1, (m, 1), generator=gen, device=dev))
              for _ in range(2))  # (m, cap) each
    op = torch.full((m,), 0 if fam == "S" else 1, dtype=torch.int64, device=dev)
    if k == 0:  # S0: no carry anywhere; M0: no borrow anywhere (then a >= b too)
        lower = _randbelow(10 - da if fam == "S" else da + 1, gen)
        bad = da + db >= 10 if fam == "S" else da < db
        db = torch.where(bad, lower, db)
    else:
        room = cap - k - int(fam == "M")  # M needs a column above the run with a > b
        g = _randbelow(torch.full((m,), room + 1, device=dev), gen)[:, None]  # (m, 1) run start
        first, rest = ("carry", "nine") if fam == "S" else ("borrow", "equal")
        for mask, kind in ((pos == g, first), ((pos > g) & (pos < g + k), rest)):
            xa, xb = _pairs(kind, (m, cap), gen)
            da, db = torch.where(mask, xa, da), torch.where(mask, xb, db)
        stop = pos == g + k  # the column above the run must not extend it
        if fam == "S" and not top:
            # 0+9 -> 0+0, x+(9-x) -> x+(10-x): no longer a sum-9 column
            db = torch.where(stop & (da + db == 9), (db + 1) % 10, db)
        elif fam == "M":
            xb, xa = _pairs("borrow", (m, cap), gen)  # swapped: a > b ends the run
            da, db = torch.where(stop, xa, da), torch.where(stop, xb, db)
        elif fam == "N" and not top:
            db = torch.where(stop & (da == db), (db + 1) % 10, db)
        if fam != "S":  # the highest differing column sets the sign: flip it if it is wrong
            diff = da != db
            h = (cap - 1 - diff.flip(1).long().argmax(1))[:, None]  # (m, 1)
            wrong = diff.any(1, keepdim=True) & (pos == h) & ((da < db) != (fam == "N"))
            da, db = torch.where(wrong, db, da), torch.where(wrong, da, db)
    pw = _POW10.to(dev)[:cap]
    return (da * pw).sum(1), (db * pw).sum(1), op


def enriched_sample(task: Task, n: int, generator: torch.Generator, split: str = "train",
                    max_len: int | None = None,
                    exclude: tuple[Tensor, Tensor, Tensor] | None = None,
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """n problems (a, b, op), about n / C of each of the C classes reachable with operands of
    at most max_len digits, shuffled, all from the `split` side of Task.is_holdout.

    train draws with replacement (a stream); holdout draws distinct problems, none in
    `exclude`, as Task.sample(split="holdout") does. A class whose holdout side holds fewer
    distinct problems than its share (tiny tasks) gives all it has, so fewer than n can come
    back for holdout."""
    _require(task)
    cap = task.n_digits if max_len is None else max_len
    if split not in ("train", "holdout") or not 1 <= cap <= task.n_digits or n < 0:
        raise ConfigError(f"enriched_sample: bad split {split!r}, max_len {max_len} or n {n} "
                          f"for {task.name}: expected train|holdout, 1..{task.n_digits}, n >= 0")
    if exclude is not None and split != "holdout":
        raise ConfigError("enriched_sample: exclude= applies to split='holdout' only")
    names, holdout, dev = class_names(task), split == "holdout", generator.device
    # (family, k, capped?, index into names) of each class reachable below 10**cap
    targets = [(c[0], int(c[1:]), len(fam) == len(full), names.index(c))
               for fam, full in zip(_families(task.op, cap), _families(task.op, task.n_digits),
                                    strict=True) for c in fam]
    share = torch.full((len(targets),), n // len(targets), dtype=torch.int64)
    share[torch.randperm(len(targets), generator=generator)[: n % len(targets)]] += 1
    empty = torch.zeros(0, dtype=torch.int64, device=dev)
    seen = tuple(exclude) if exclude is not None else (empty, empty, empty)
    seen = tuple(x.to(dev) for x in seen)
    skip = seen[0].numel()
    if holdout and len(task.op_codes) * 100**cap <= _LIST_MAX:
        # small space: list the whole holdout side, then take each class's share of it
        a, b, op = task._held_rest(cap, generator, tuple(x[_distinct(*seen)] for x in seen))
        cls = quirke_class(task, a, b, op)
        idx = torch.cat([(cls == ci).nonzero().flatten()[: int(r)]
                         for (*_, ci), r in zip(targets, share, strict=True)])
        idx = idx[torch.randperm(idx.numel(), generator=generator, device=dev)]
        return a[idx], b[idx], op[idx]
    picks: list[list[tuple[Tensor, Tensor, Tensor]]] = [[] for _ in targets]
    have = torch.zeros(len(targets), dtype=torch.int64)
    idle = torch.zeros(len(targets), dtype=torch.int64)  # rounds in a row a class gained none
    for _ in range(_MAX_ROUNDS):
        need = torch.where(idle < 4, share - have, 0)  # a class idle 4 rounds is exhausted
        if int(need.max()) <= 0:
            break
        # oversample: the holdout side keeps ~1/16 of draws, a few land in another class
        props = [_propose(f, k, top, int(r * (20 if holdout else 1.25)) + 32, cap, generator)
                 for (f, k, top, _), r in zip(targets, need.tolist(), strict=True) if r > 0]
        a, b, op = (torch.cat(p) for p in zip(*props, strict=True))
        keep = task.is_holdout(a, b, op) == holdout
        a, b, op = a[keep], b[keep], op[keep]
        if holdout:  # distinct, and none of `seen` (exclude plus earlier picks)
            idx = _distinct(*(torch.cat(p) for p in zip(seen, (a, b, op), strict=True)))
            idx = idx[idx >= skip] - skip
            a, b, op = a[idx], b[idx], op[idx]
        cls = quirke_class(task, a, b, op)
        gained = []
        for t, (*_, ci) in enumerate(targets):
            sel = (cls == ci).nonzero().flatten()[: int(need[t])] if int(need[t]) > 0 else empty
            picks[t].append((a[sel], b[sel], op[sel]))
            have[t] += sel.numel()
            gained.append(sel)
        if holdout:
            got = torch.cat(gained)
            seen = tuple(torch.cat((s, x[got])) for s, x in zip(seen, (a, b, op), strict=True))
            skip = seen[0].numel()
        idle = torch.where(torch.tensor([g.numel() > 0 for g in gained]), 0, idle + 1)
    if not holdout and bool((have < share).any()):
        short = [names[ci] for (*_, ci), h, s in zip(targets, have, share) if h < s]
        raise ConfigError(f"enriched_sample: could not build train problems of class "
                          f"{', '.join(short)} for {task.name}, max_len={cap}")
    out = [torch.cat(p) for p in zip(*(x for ps in picks for x in ps), strict=True)]
    if not out or out[0].numel() == 0:
        return empty, empty, empty
    perm = torch.randperm(out[0].numel(), generator=generator, device=dev)
    return out[0][perm], out[1][perm], out[2][perm]
