"""Counter-based training problems: every member's batches for many steps in one vectorised call.

Each random word is a pure function of (seed, step, row, candidate, word index): an integer hash
in int64 torch ops, no `torch.Generator`. So the same (seed, step) gives bit-identical problems
on CPU and CUDA, whatever K, whatever the member's place in the pack and whatever chunking of
steps the caller uses (`TrainConfig(sampler="hash")`; "stream" is the older per-seed generator).

Modes are those of `Task.sample` ("uniform", "values", "carry") plus the trainer's "mixed"
(carry share `mix.carry_share` at each step, the rest half uniform, half values, in exact
counts at hashed positions), under the curriculum cap of each step (`mix.curriculum_cap`).

The train side of the split without a rejection loop (fixed shapes, no host sync): each row
draws R candidates i.i.d. and keeps the first that `Task._held` puts on the train side. Given
that one is found, that is exactly rejection sampling, i.e. the train-side distribution. When
all R are held out (probability h**R, h ~ 1/16, so ~1.5e-5 for R = 4; higher at tiny caps where
AdderBoard edge cases weigh more) the row takes a problem from a fallback pool: problems drawn by
`Task.sample(split="train")` (rejection sampling with a fixed generator, done once per cap and
mode) and checked again with `_held` when the pool is built. Every row is therefore either a
candidate that passed `_held` or a pool entry that passed it: none is ever on the holdout side.

    python -c "from arithsweep.core.data.hash_sampling import HashSampler as H; \\
        from arithsweep.core.data.tasks import get_task; \\
        from arithsweep.core.config import TrainConfig as C; \\
        print(H(get_task('add3'), C(seeds=1)).problems([0], [0]))"
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from arithsweep.core.config import TrainConfig
from arithsweep.core.data import native_rows
from arithsweep.core.data.mix import carry_mode, carry_share, curriculum_cap, values_rows
from arithsweep.core.data.sampling import _pow10, _splice_carry
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError

HASH_MODES = ("uniform", "values", "carry", "mixed")
CANDIDATES = 4  # R: draws per row; all R held out has probability ~(1/16)**4
POOL = 1024  # fallback problems per (cap, mode)
_POOL_SEED = 0xFA11_BAC4
_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B  # degski's hash32 multiplier: < 2**31, so (x < 2**32) * _MUL < 2**63 in int64
_GOLD = 0x9E3779B9


def _mix(x: Tensor) -> Tensor:
    """A 32-bit integer hash (degski's hash32) on int64 values in [0, 2**32): (N,) -> (N,).
    Exact integer ops with no overflow, so CPU and CUDA agree bit for bit."""
    x = (((x >> 16) ^ x) * _MUL) & _M32
    x = (((x >> 16) ^ x) * _MUL) & _M32
    return (x >> 16) ^ x


def step_keys(seeds: Tensor, steps: Tensor) -> Tensor:
    """Key of every (step, seed): seeds (K,), steps (S,) int64 -> (S, K) int64 in [0, 2**32).
    Seeds above 2**32 fold their high word in."""
    k = _mix((seeds & _M32) ^ 0x5EED)
    k = _mix(k ^ ((seeds >> 32) & _M32))  # (K,)
    return _mix(k[None, :] ^ (steps[:, None] & _M32))  # (S, K)


def row_keys(seeds: Tensor, steps: Tensor, rows: int, cands: int) -> Tensor:
    """Keys of every (step, seed, row, candidate): seeds (K,), steps (S,) int64 -> (S, K, rows,
    cands) int64 in [0, 2**32); candidate j of row r is keyed by counter r * cands + j."""
    k = step_keys(seeds, steps)
    counter = torch.arange(rows * cands, device=k.device).view(rows, cands)
    return _mix(k[:, :, None, None] ^ counter)  # (S, K, rows, cands)


class _Words:
    """A row's i-th random word is mix(key ^ i * golden); `at` jumps to a fixed index, so what
    one mode draws never depends on whether another mode was computed."""

    def __init__(self, key: Tensor):
        self.key, self.i = key, 0

    def at(self, i: int) -> _Words:
        self.i = i
        return self

    def __call__(self) -> Tensor:
        self.i += 1
        return _mix(self.key ^ ((self.i * _GOLD) & _M32))

    def below(self, hi: Tensor | int) -> Tensor:
        """Integers in [0, hi) for 1 <= hi <= 10**4 (multiply-shift; bias <= hi / 2**32)."""
        return (self() * hi) >> 32

    def number(self, width: int) -> Tensor:
        """Uniform in [0, 10**width) from groups of 4 digits (width <= 18)."""
        out = torch.zeros_like(self.key)
        for lo in range(0, width, 4):
            w = min(4, width - lo)
            out = out + self.below(10**w) * 10**lo
        return out


def _uniform(w: _Words, cap: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Length uniform in 1..cap, value uniform among numbers of that length: (N,), (N,)."""
    length = 1 + w.below(cap)
    lead = w.below(torch.where(length == 1, 10, 9)) + (length > 1).long()
    scale = _pow10(length - 1)
    return length, lead * scale + w.number(n - 1) % scale


def _carry_pair(w: _Words, cap: Tensor, n: int,
                patterns: bool = False) -> tuple[Tensor, Tensor]:
    """As sampling._carry_pair, with a per-row cap: a pair summing to >= 10 at a position g
    inside both operands, then uniform pairs summing to 9 up to a position `top` (patterns:
    top = g, random, or the longer operand's top digit, a third each)."""
    (la, a), (lb, b) = _uniform(w, cap, n), _uniform(w, cap, n)
    lo, hi = torch.minimum(la, lb), torch.maximum(la, lb)
    g = w.below(lo)
    top = g + w.below(hi - g)
    if patterns:
        kind = w.below(3)
        top = torch.where(kind == 0, g, torch.where(kind == 2, hi - 1, top))
    ga = 1 + w.below(9)
    gb = 10 - ga + w.below(ga)
    return _splice_carry(a, b, la, lb, g, top, ga, gb, w.number(n))


# first word index of each part of a draw: far enough apart for 18-digit operands
_OP_AT, _UNIFORM_AT, _VALUES_AT, _CARRY_AT, _BORROW_AT = 0, 10, 40, 60, 100


def _mode_pair(m: int, w: _Words, cap: Tensor, op: Tensor, task: Task) -> tuple[Tensor, Tensor]:
    """Operands (N,), (N,) of mode m (0 uniform, 1 values, 2 carry, 3 carry patterns, 4 values
    of one length shared by both operands) for every row of w: a pure function of each row's
    key, cap and op, so any subset of rows gives the same rows."""
    n, pat = task.n_digits, m == 3
    if m in native_rows.MODES and native_rows.usable(w.key, cap):  # the same rows, in C
        return native_rows.draw(w.key, torch.full_like(w.key, m), cap, n)
    if m in (1, 4):
        hi = _pow10(cap)
        w.at(_VALUES_AT)
        a, b = w.number(n) % hi, w.number(n) % hi
        if m == 4:  # tbukic's generate_batch: under a curriculum, one length for both operands
            length = torch.where(cap < n, 1 + w.below(cap), cap)
            a, b = a % _pow10(length), b % _pow10(length)
        return a, b
    if task.op == "add" and m != 0:  # every row takes the carry pair: no uniform pair needed
        return _carry_pair(w.at(_CARRY_AT), cap, n, pat)
    a, b = _uniform(w.at(_UNIFORM_AT), cap, n)[1], _uniform(w, cap, n)[1]
    if m == 0 or task.op == "mul":  # mul has no carry mode (Task.sample falls back to uniform)
        return a, b
    if 0 in task.op_codes:
        ca, cb = _carry_pair(w.at(_CARRY_AT), cap, n, pat)
        a, b = torch.where(op == 0, ca, a), torch.where(op == 0, cb, b)
    if 1 in task.op_codes and n >= 2:  # x - y borrows exactly where y + (x - y) carries
        y, d = _carry_pair(w.at(_BORROW_AT), cap, n, pat)
        y1, d1 = _carry_pair(w, (cap - 1).clamp(min=1), n, pat)  # a sum that cannot overflow
        over = y + d >= _pow10(cap)
        y, d = torch.where(over, y1, y), torch.where(over, d1, d)
        flip = w.below(2).bool()
        sub = (op == 1) & (cap >= 2)  # 1-digit sub never borrows
        a = torch.where(sub, torch.where(flip, y, y + d), a)
        b = torch.where(sub, torch.where(flip, y + d, y), b)
    return a, b


def draw(key: Tensor, mode: Tensor, cap: Tensor, task: Task, used: frozenset[int],
         compact: bool) -> tuple[Tensor, Tensor, Tensor]:
    """One candidate problem per key, both splits alike: key, mode (0 uniform, 1 values,
    2 carry), cap (N,) int64 -> a, b, op (N,) int64. `used`: the modes that occur (the caller
    knows from the config, no host sync). compact (CPU): each mode computed on its own rows
    only; else (CUDA: fixed shapes, no sync) every used mode on every row, the row's own kept.
    Both give the same rows, since each row is a pure function of its key, mode and cap."""
    if len(task.op_codes) == 1:  # below(1) is always 0: no word to hash
        op = torch.full_like(key, task.op_codes[0])
    else:
        codes = torch.tensor(task.op_codes, device=key.device)
        op = torch.take(codes, _Words(key).at(_OP_AT).below(len(codes)))
    if len(used) == 1 or not compact:
        a = b = None
        for m in sorted(used):
            ma, mb = _mode_pair(m, _Words(key), cap, op, task)
            a = ma if a is None else torch.where(mode == m, ma, a)
            b = mb if b is None else torch.where(mode == m, mb, b)
        return a, b, op
    a, b = torch.empty_like(key), torch.empty_like(key)
    for m in sorted(used):
        idx = (mode == m).nonzero().squeeze(1)
        a[idx], b[idx] = _mode_pair(m, _Words(key[idx]), cap[idx], op[idx], task)
    return a, b, op


_MODE = {"uniform": 0, "values": 1, "carry": 2, "carry_patterns": 3, "values_shared": 4}
_POOL_AT, _RANK_AT = 150, 160  # word indices of the fallback pick and the mode shuffle
PIECE_ROWS = 1 << 16  # candidates hashed per vectorised call: bounds memory, not the result
# the CPU's compact path keeps one candidate a row, so a piece can hold a 64-seed frontier
# refill (64 x 128 rows x 32 steps) whole: no concatenation after it (0.36 -> 0.33 ms a step)
COMPACT_PIECE_ROWS = 1 << 18


class HashSampler:
    """Training problems of a config's sampling mode, keyed by (seed, step, row)."""

    def __init__(self, task: Task, cfg: TrainConfig, device: torch.device | str = "cpu",
                 cap_at: Callable[[int], int | None] | None = None):
        """cap_at(step): the longest operand length at a step (None = the task's); the trainer
        passes its own rule (curriculum under train_digits), the default is the curriculum's."""
        if cfg.sampling not in HASH_MODES:
            raise ConfigError(f"sampler 'hash' does not implement sampling={cfg.sampling!r} "
                              f"(it does {', '.join(HASH_MODES)}); use sampler=stream")
        self.task, self.cfg, self.device = task, cfg, torch.device(device)
        self.cap_at = cap_at or (lambda step: curriculum_cap(cfg, task.n_digits, step))
        self._pools: dict[tuple[int, int], tuple[Tensor, Tensor, Tensor]] = {}
        # on a CPU a boolean index costs nothing extra, on a GPU it syncs: see `draw`
        self.compact = self.device.type == "cpu"
        self._mask: Tensor | None = None  # a pad format's batch mask, (S, K, B, T-1) bool

    def _pool(self, cap: int, mode: int) -> tuple[Tensor, Tensor, Tensor]:
        """POOL train-side problems of one (cap, mode), drawn once by rejection sampling."""
        if (cap, mode) not in self._pools:
            gen = torch.Generator().manual_seed(_POOL_SEED + 3 * cap + mode)
            # values_shared's rare fallback draws plain values (Task.sample has no such mode)
            name = [k for k, v in _MODE.items() if v == mode][0].replace("_shared", "")
            a, b, op = self.task.sample(POOL, gen, name, cap, split="train")
            # the proof that no row is held out rests on this, so check rather than trust
            if bool(self.task._held(a, b, op).any()):
                raise AssertionError("fallback pool holds a held-out problem")
            self._pools[cap, mode] = tuple(x.to(self.device) for x in (a, b, op))
        return self._pools[cap, mode]

    def _plan(self, step: int) -> tuple[int, int, int]:
        """(cap, carry rows, values rows) of one step's batch; the rest are uniform."""
        cfg, B = self.cfg, self.cfg.batch_size
        cap = self.cap_at(step) or self.task.n_digits
        if cfg.sampling != "mixed":
            return cap, B if cfg.sampling == "carry" else 0, B if cfg.sampling == "values" else 0
        n_carry = int(round(B * carry_share(cfg, step)))  # the same counts as the stream's
        return cap, n_carry, values_rows(cfg, B - n_carry)

    def problems(self, seeds: list[int], steps: list[int]) -> tuple[Tensor, Tensor, Tensor]:
        """a, b, op, each (S, K, B) int64 on the device: member k's batch at steps[s]."""
        B, dev = self.cfg.batch_size, self.device
        # compact hashes a row's later candidates only where the earlier ones were held out,
        # so a piece holds one candidate per row there, all R of them on the fixed-shape path
        per_step = len(seeds) * B * (1 if self.compact else CANDIDATES)
        per = max(1, (COMPACT_PIECE_ROWS if self.compact else PIECE_ROWS) // per_step)
        parts = [self._piece(seeds, steps[i:i + per]) for i in range(0, len(steps), per)]
        if not parts:
            empty = torch.zeros(0, len(seeds), B, dtype=torch.int64, device=dev)
            return empty, empty, empty
        if len(parts) == 1:
            return parts[0]
        return tuple(torch.cat(p) for p in zip(*parts, strict=True))

    def _modes(self, key0: Tensor, plans: list[tuple[int, int, int]],
               ) -> tuple[Tensor, frozenset[int]]:
        """Each row's mode (S, K, B) from its candidate-0 key, and the set of modes used."""
        B, dev = self.cfg.batch_size, self.device
        S, K = key0.shape[:2]
        cm = _MODE[carry_mode(self.cfg)]  # 2, or 3 with MicroAdder's carry patterns
        vm = 4 if self.cfg.values_lengths == "shared" else 1  # TrainConfig.values_lengths
        used = frozenset(m for p in plans
                         for m, c in ((cm, p[1]), (vm, p[2]), (0, B - p[1] - p[2])) if c)
        n_carry = torch.tensor([p[1] for p in plans], device=dev)[:, None, None]  # (S, 1, 1)
        n_values = torch.tensor([p[2] for p in plans], device=dev)[:, None, None]
        if all(c in (0, B) for p in plans for c in p[1:]):  # one mode per batch: no shuffle
            mode = torch.where(n_carry > 0, cm, torch.where(n_values > 0, vm, 0))
            return mode.expand(S, K, B), used
        # exact counts per batch at hashed positions: the rows of the n_carry smallest u are
        # carry rows, the next n_values values rows. u is distinct within a batch, so a row's
        # rank is below n exactly when its u is below the n-th smallest (one sort, no ranks)
        u = _Words(key0).at(_RANK_AT)() * B + torch.arange(B, device=dev)  # (S, K, B)
        top = torch.full((S, K, 1), torch.iinfo(torch.int64).max, device=dev)
        srt = torch.cat((u.sort(dim=-1).values, top), -1)  # (S, K, B + 1)

        def first(n: Tensor) -> Tensor:  # (S, K, B) bool: among the batch's n smallest u
            return u < srt.gather(-1, n.expand(S, K, 1))

        mode = torch.where(first(n_carry), cm, torch.where(first(n_carry + n_values), vm, 0))
        return mode, used

    def _piece(self, seeds: list[int], steps: list[int]) -> tuple[Tensor, Tensor, Tensor]:
        B, R, dev = self.cfg.batch_size, CANDIDATES, self.device
        S, K = len(steps), len(seeds)
        plans = [self._plan(s) for s in steps]
        seeds_t, steps_t = torch.tensor(seeds, device=dev), torch.tensor(steps, device=dev)
        k = step_keys(seeds_t, steps_t)  # (S, K)
        key0 = _mix(k[:, :, None] ^ torch.arange(B, device=dev) * R)  # row_keys(...)[..., 0]
        cap = torch.tensor([p[0] for p in plans], device=dev)[:, None, None].expand(S, K, B)
        mode, used = self._modes(key0, plans)
        if self.compact:
            out = self._compact(k.reshape(-1), key0.reshape(-1), mode.reshape(-1),
                                cap.reshape(-1), plans, used)
            return tuple(o.view(S, K, B) for o in out)
        out = list(self._fallback(key0, cap, mode, plans, used))  # (S, K, B) each
        shape = (S, K, B, R)
        keys = row_keys(seeds_t, steps_t, B, R)  # (S, K, B, R)
        a, b, op = draw(keys.reshape(-1), mode[..., None].expand(shape).reshape(-1),
                        cap[..., None].expand(shape).reshape(-1), self.task, used, False)
        held = self.task._held(a, b, op).view(shape)
        a, b, op = (x.view(shape) for x in (a, b, op))
        for j in reversed(range(R)):  # the first train-side candidate wins
            ok = ~held[..., j]
            out = [torch.where(ok, x[..., j], o) for x, o in zip((a, b, op), out)]
        return out[0], out[1], out[2]

    def _compact(self, k: Tensor, key0: Tensor, mode: Tensor, cap: Tensor,
                 plans: list[tuple[int, int, int]], used: frozenset[int],
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """The CPU path on flat rows (N,): candidate 0 of every row, then candidates 1..R-1
        (all in one call) of the ~1/16 rows whose candidate 0 is held out, then the pool for
        rows whose R candidates all are. k: the (S*K,) step keys the rows' keys derive from."""
        B, R, task = self.cfg.batch_size, CANDIDATES, self.task
        if (len(task.op_codes) == 1 and used <= set(native_rows.MODES)
                and native_rows.usable(key0, cap)):  # every candidate and test in one C pass
            a, b, pool = native_rows.pick(key0, k, B, R, mode, cap, task.n_digits,
                                          task.op_codes[0], task.edge_cases(),
                                          len(task.op_codes))
            out = (a, b, torch.full_like(key0, task.op_codes[0]))
            rows = pool.nonzero().squeeze(1)
        else:
            out, rows = self._candidates(k, key0, mode, cap, used)
        if rows.numel():  # all R held out: the pool, as _fallback does for every row
            pool_rows = self._fallback(key0[rows], cap[rows], mode[rows], plans, used)
            for o, x in zip(out, pool_rows):
                o[rows] = x
        return out

    def _candidates(self, k: Tensor, key0: Tensor, mode: Tensor, cap: Tensor,
                    used: frozenset[int]) -> tuple[tuple[Tensor, Tensor, Tensor], Tensor]:
        """_compact's rows by torch ops (and the C draw and holdout test where they apply):
        candidate 0 of every row, then candidates 1..R-1 of the rows whose candidate 0 is held
        out; also the rows whose R candidates all are."""
        B, R = self.cfg.batch_size, CANDIDATES
        out = draw(key0, mode, cap, self.task, used, True)
        rows = self.task._held(*out).nonzero().squeeze(1)
        if not rows.numel():
            return out, rows
        if R > 1:
            j = torch.arange(1, R, device=k.device)
            keys = _mix(k[rows // B, None] ^ ((rows % B)[:, None] * R + j))  # (F, R-1)

            def per_cand(x: Tensor) -> Tensor:
                return x[rows, None].expand(-1, R - 1).reshape(-1)

            more = draw(keys.reshape(-1), per_cand(mode), per_cand(cap), self.task, used, True)
            ok = ~self.task._held(*more).view(-1, R - 1)  # (F, R-1)
            # argmax of bool-as-int gives the first train-side candidate of each row
            pick = torch.arange(rows.numel(), device=k.device) * (R - 1) + ok.byte().argmax(1)
            found = ok.any(1)
            for o, x in zip(out, more):
                o[rows[found]] = x[pick[found]]
            rows = rows[~found]
        return out, rows

    def _fallback(self, key: Tensor, cap: Tensor, mode: Tensor, plans: list[tuple[int, int, int]],
                  used: frozenset[int]) -> tuple[Tensor, Tensor, Tensor]:
        """Each row's fallback: an entry of its (cap, mode) pool picked by its key (any shape)."""
        pick = _Words(key).at(_POOL_AT).below(POOL)
        out = [torch.zeros_like(key) for _ in range(3)]
        for cap_i in sorted({p[0] for p in plans}):
            for m in used:
                sel = (cap == cap_i) & (mode == m)
                out = [torch.where(sel, torch.take(p, pick), o)
                       for p, o in zip(self._pool(cap_i, m), out)]
        return out[0], out[1], out[2]

    def batches(self, seeds: list[int], steps: list[int]) -> tuple[Tensor, Tensor]:
        """Encoded in one call for all S*K*B rows: tokens (S, K, B, T) uint8, answer mask
        (S, K, B, T-1) bool. uint8 holds any vocabulary here (<= 16 ids) and moves 8x fewer
        bytes than int64; the model's forward widens it, the loss's targets need .long()."""
        a, b, op = self.problems(seeds, steps)
        shape = a.shape
        flat = (a.reshape(-1), b.reshape(-1), op.reshape(-1))
        if not self.task.fmt.pad:
            tokens, mask = self.task.encode(*flat, dtype=torch.uint8)
            return tokens.view(*shape, -1), mask.view(*shape, -1)
        # a pad format's answer span is the same in every row: its mask is made once per
        # shape (8.6 MB a frontier refill) and handed out again; no caller writes into a batch
        tokens = self.task._encode(*flat, torch.uint8)[0].view(*shape, -1)
        if self._mask is None or self._mask.shape[:-1] != shape:
            row = self.task.encode(*(x[:1] for x in flat), dtype=torch.uint8)[1]  # (1, T-1)
            self._mask = row.view(torch.uint8).expand(a.numel(), -1).contiguous() \
                .view(torch.bool).view(*shape, -1)
        return tokens, self._mask
