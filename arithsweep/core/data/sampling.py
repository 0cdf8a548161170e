"""The torch helpers behind `Task`: digits, carry cascades, the holdout hash, random problems.

Vectorised int64 torch only (float64 where it is exact, see `_digit_table`; no task, no
config), so `tasks.py` stays about what a task is, and the AdderBoard export can embed this
file verbatim ahead of it. Everything here works on (N,) tensors of operands and loops over
digit positions at most, never over problems:

- `_digits`, `_digit_table`, `_num_digits`, `_cascade`: digits, digit counts and longest carry
  run;
- `_holdout`: the keyed murmur3-style hash that puts ~1/16 of problems on the holdout side;
- `_draw`: m random problems in one sampling mode (uniform lengths, values, carry-enriched),
  `_splice_carry` the carry cascade both samplers write into a pair;
- `_distinct`: which rows of a batch of problems are first occurrences.

    python -c "import torch; from arithsweep.core.data.sampling import _draw; \
        print(_draw(4, torch.Generator().manual_seed(0), 'carry', 3, (0,)))"
"""

from __future__ import annotations

import torch
from torch import Tensor

_POW10 = torch.tensor([10**i for i in range(19)])  # (19,) int64; 10**18 is the largest needed
_POW10F = _POW10.double()  # exact up to 10**22
_EXACT_WIDTH = 15  # digits that float64 division extracts exactly (_digit_table)
_M32 = 0xFFFFFFFF
# odd constants < 2**28: five 32-bit words times these sum to < 2**63, so int64 never overflows
_HASH_KEYS = (0x9E3779B, 0x7F4A7C1, 0x5BD1E99, 0x27D4EB3, 0x165667B)


def _digit_table(x: Tensor, width: int, lsd_first: bool = True) -> Tensor:
    """Digits of x in [0, 10**width): (N,) -> (N, width), least significant first or most.
    float64 up to 15 digits, int64 above. x < 10**15 < 2**52, so float64 holds x and, as IEEE
    division rounds correctly, each floor(x / 10**i) exactly; a digit is the difference of two
    of them. That is vectorised where int64 division is not (~3x faster on a CPU)."""
    if width > _EXACT_WIDTH:
        d = x.unsqueeze(1) // _POW10.to(x.device)[:width] % 10
        return d if lsd_first else d.flip(1)
    p = _POW10F.to(x.device)[:width + 1]  # a tensor, not a scalar: never a reciprocal product
    q = (x.double().unsqueeze(1) / (p if lsd_first else p.flip(0))).floor_()  # (N, width + 1)
    lo, hi = (q[:, :width], q[:, 1:]) if lsd_first else (q[:, 1:], q[:, :width])
    return torch.sub(lo, hi, alpha=10)


def _digits(x: Tensor, width: int) -> Tensor:
    """Digits of non-negative x, least significant first: (N,) -> (N, width) int64."""
    if width > _EXACT_WIDTH:
        return _digit_table(x, width)
    return _digit_table(x % 10**width, width).long()  # the low digits of any x


def within(x: Tensor, lo: int, hi: int) -> bool:
    """Every entry of x (non-empty) in lo..hi, in one pass over it (a
    training chunk's operands are 2-MB tensors)."""
    mn, mx = torch.aminmax(x)
    return lo <= int(mn) and int(mx) <= hi


def _num_digits(x: Tensor) -> Tensor:
    """Digit count of non-negative x, 0 counting as one digit: (N,) -> (N,)."""
    return (x.unsqueeze(1) >= _POW10.to(x.device)[1:]).sum(1) + 1


def _cascade(cols: Tensor) -> Tensor:
    """Longest run of consecutive column sums passing a carry upwards: (N, W) -> (N,)."""
    carry = run = best = torch.zeros(cols.shape[0], dtype=torch.int64, device=cols.device)
    for j in range(cols.shape[1]):  # loops over digit positions only, never over problems
        carry = (cols[:, j] + carry) // 10
        run = torch.where(carry > 0, run + 1, 0)
        best = torch.maximum(best, run)
    return best


def _fmix32(h: Tensor) -> Tensor:
    """murmur3's 32-bit finaliser on values in [0, 2**32): (N,) -> (N,)."""
    for shift, c in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = h ^ (h >> shift)
        # (h * c) mod 2**32 from 16-bit halves: no intermediate reaches 2**49, so int64 is safe
        h = ((h & 0xFFFF) * c + ((((h >> 16) * c) & 0xFFFF) << 16)) & _M32
    return h ^ (h >> 16)


def _holdout(a: Tensor, b: Tensor, op: Tensor) -> Tensor:
    """Keyed sum of the 32-bit words of (a, b, op), folded to 32 bits and murmur-mixed: (N,)."""
    words = (a & _M32, a >> 32, b & _M32, b >> 32, op)
    s = sum(w * k for w, k in zip(words, _HASH_KEYS, strict=True))
    return (_fmix32((s & _M32) ^ (s >> 32)) & 15) == 0


def _randbelow(hi: Tensor, gen: torch.Generator) -> Tensor:
    """Uniform integers in [0, hi) for 1 <= hi <= 1e9 (float64 bias < 1e-7): (N,) -> (N,)."""
    u = torch.rand(hi.shape, generator=gen, dtype=torch.float64, device=hi.device)
    return torch.minimum((u * hi).long(), hi - 1)


def _uniform(m: int, gen: torch.Generator, cap: int) -> tuple[Tensor, Tensor]:
    """Length uniform in 1..cap, then value uniform among numbers of that length: (m,), (m,)."""
    p10 = _POW10.to(gen.device)
    length = torch.randint(1, cap + 1, (m,), generator=gen, device=gen.device)
    # two parts of at most 9 digits each, so the float64 draws stay uniform to ~1e-7
    lead_len = torch.where(length > 9, length - 9, length)
    low = torch.where(length == 1, 0, p10[lead_len - 1])
    lead = low + _randbelow(p10[lead_len] - low, gen)
    tail = _randbelow(torch.full_like(length, 10**9), gen)
    return length, torch.where(length > 9, lead * 10**9 + tail, lead)


def _pow10(x: Tensor) -> Tensor:
    """10**x for int64 x in 0..18. torch.take: CPU advanced indexing of a small table by a long
    index tensor is ~60x slower."""
    return torch.take(_POW10.to(x.device), x)


def _splice_carry(a: Tensor, b: Tensor, la: Tensor, lb: Tensor, g: Tensor, top: Tensor,
                  ga: Tensor, gb: Tensor, free: Tensor) -> tuple[Tensor, Tensor]:
    """Operands a, b (lengths la, lb) with digit g set to ga, gb and every position i in
    g < i <= top to s_i, 9 - s_i, where s_i is free's digit i below both lengths, 9 where only
    a reaches and 0 where a has ended (so b holds the 9): all (N,) -> (N,), (N,).
    Whole-number arithmetic on (N,), not (N, digits) tables: each operand keeps its digits
    below g and above top, and the span's digits sum to 9 * 10**i."""
    p_g, p_g1, p_top = _pow10(g), _pow10(g + 1), _pow10(top + 1)
    end = torch.minimum(top + 1, torch.minimum(la, lb))
    s_a = torch.where(end > g + 1, free % _pow10(end) - free % p_g1, 0)
    nines, end9 = torch.maximum(g + 1, lb), torch.minimum(top + 1, la)
    s_a = s_a + torch.where(end9 > nines, _pow10(end9) - _pow10(nines), 0)
    s_b = p_top - p_g1 - s_a
    a = a - a % p_top + a % p_g + ga * p_g + s_a
    return a, b - b % p_top + b % p_g + gb * p_g + s_b


def _carry_pair(m: int, gen: torch.Generator, cap: int,
                patterns: bool = False) -> tuple[Tensor, Tensor]:
    """Uniform pair whose sum has a carry cascade of k+1 >= 1 positions: a pair summing to >= 10
    at a position g inside both operands, then k (uniform) pairs summing to 9 above it.
    patterns (MicroAdder's mix): each row is, a third each, a single carry at a random place
    (k = 0), such a chain of random length, or a chain running to the longer operand's top
    digit (a carry out of the number)."""
    (la, a), (lb, b) = _uniform(m, gen, cap), _uniform(m, gen, cap)
    g = _randbelow(torch.minimum(la, lb), gen)
    top = g + _randbelow(torch.maximum(la, lb) - g, gen)
    if patterns:
        kind = _randbelow(torch.full_like(g, 3), gen)
        top = torch.where(kind == 0, g, torch.where(kind == 2, torch.maximum(la, lb) - 1, top))
    ga = 1 + _randbelow(torch.full_like(g, 9), gen)
    gb = 10 - ga + _randbelow(ga, gen)
    free = torch.randint(0, 10, (m, cap), generator=gen, device=gen.device)
    free = (free * _POW10.to(gen.device)[:cap]).sum(1)  # (m,): digit i is position i's
    return _splice_carry(a, b, la, lb, g, top, ga, gb, free)


def _draw(m: int, gen: torch.Generator, mode: str, cap: int,
          op_codes: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """m problems (a, b, op), each (m,), with operands of at most `cap` digits, drawn in `mode`
    (see `Task.sample`), both splits alike: the caller keeps the side it wants."""
    codes = torch.tensor(op_codes, device=gen.device)
    op = codes[torch.randint(0, len(codes), (m,), generator=gen, device=gen.device)]
    if mode == "values":
        hi = 10**cap
        a = torch.randint(0, hi, (m,), generator=gen, device=gen.device)
        b = torch.randint(0, hi, (m,), generator=gen, device=gen.device)
        return a, b, op
    if mode == "near_zero":  # a mixed task's share is all subtractions
        return _near_zero(m, gen, cap, torch.ones_like(op) if 1 in op_codes else op)
    a, b = _uniform(m, gen, cap)[1], _uniform(m, gen, cap)[1]
    pat = mode == "carry_patterns"
    mode = "carry" if pat else mode
    if mode == "carry" and 0 in op_codes:
        ca, cb = _carry_pair(m, gen, cap, pat)
        a, b = torch.where(op == 0, ca, a), torch.where(op == 0, cb, b)
    if mode == "carry" and 1 in op_codes and cap >= 2:  # 1-digit sub never borrows
        # x - y borrows exactly where y + (x - y) carries: build that sum, read it backwards
        y, d = _carry_pair(m, gen, cap, pat)
        y1, d1 = _carry_pair(m, gen, cap - 1, pat)  # fallback whose sum cannot overflow
        over = y + d >= 10**cap
        y, d = torch.where(over, y1, y), torch.where(over, d1, d)
        flip = torch.randint(0, 2, (m,), generator=gen, device=gen.device).bool()
        a = torch.where(op == 1, torch.where(flip, y, y + d), a)
        b = torch.where(op == 1, torch.where(flip, y + d, y), b)
    return a, b, op


def _near_zero(m: int, gen: torch.Generator, cap: int, op: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`near_zero` mode: each subtraction a - b with |a - b| < 10^j (j uniform in 0..cap-1,
    either sign, 0 included), the answers whose sign and leading digits a long borrow decides
    (the published mix6 of 15,744 p failed 138 of 10^6 subtractions, 134 of them answers below
    1,000); a task without subtraction gets additions uniform over values. a - b is kept in
    range by moving b to the other side of a where it falls out."""
    dev, hi = gen.device, 10**cap
    a = torch.randint(0, hi, (m,), generator=gen, device=dev)
    width = torch.randint(0, cap, (m,), generator=gen, device=dev)
    d = _randbelow(torch.tensor(10, device=dev) ** width, gen)  # (m,), 0 <= d < 10^width
    d = torch.where(torch.rand(m, generator=gen, device=dev) < 0.5, -d, d)
    b = torch.where((a - d < 0) | (a - d >= hi), a + d, a - d)
    b = torch.where(op == 1, b, torch.randint(0, hi, (m,), generator=gen, device=dev))
    return a, b, op


def _distinct(a: Tensor, b: Tensor, op: Tensor) -> Tensor:
    """Positions of the first occurrence of every distinct (a, b, op), ascending: (N,) -> (U,).

    Two stable sorts (minor key first; b * 4 + op < 2**63 for b < 10**18, op < 4) order the rows
    lexicographically and keep equal rows in their original order; `torch.unique(dim=0)` would
    do the same ~20x slower on CPU."""
    order = torch.arange(a.numel(), device=a.device)
    for col in (b * 4 + op, a):
        order = order[torch.sort(col[order], stable=True).indices]
    rows = torch.stack([a, b, op], 1)[order]  # (N, 3), equal rows adjacent
    first = torch.ones(a.numel(), dtype=torch.bool, device=a.device)
    first[1:] = (rows[1:] != rows[:-1]).any(1)
    return order[first].sort().values
