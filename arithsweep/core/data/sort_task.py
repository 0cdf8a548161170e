"""Sorting as a task: `sort<N>` lists N labelled two-digit numbers' labels in ascending order.

`get_task("sort3")` gives a `SortTask`, a drop-in for the arithmetic `Task` (the same attributes
and methods, duck-typed), so training, fast exact match, checkpoints, `arithsweep ask`,
verification and the search run unchanged. Try:
    python -c "from arithsweep.core.data.tasks import get_task; print(get_task('sort3').example())"
    arithsweep train --task sort3 --layers 2 --d-model 16 --heads 2 --d-ff 32 --lr 0.02

Problem: exactly N items (N = 2..9) labelled a, b, c, ..., each with a value 0..99; the answer is
the labels in ascending order of value, `a:12,b:7,c:30 -> bac`. Ties sort stably: equal values
keep label order (`a:5,b:5,c:1 -> cab`), as Python's `sorted` does.

In the (a, b, op) triple that every task passes around: `a` packs the values as base-100 digits,
label a lowest (a:12,b:7,c:30 -> 12 + 7*100 + 30*100**2 = 300712; below 100**9 = 10**18, so it
fits int64); `b` = N, the item count; `op` = 0. As an integer (what `answer` and
`decode_answer` give and verification compares) an answer is the 1-based label positions in
sorted order as decimal digits: bac -> 213.

Vocabulary: ids 0..9 the digits, then the labels 'a'.. (one per item), then '=' with delim.
Format words: delim (default) writes each item as its label and its two value digits, then '=':
    sort3  a12b07c30=  ->  bac          sort3,nodelim  120730  ->  bac
revops writes each value least-significant digit first. pad is required (fixed width keeps the
answer's position known, so exact match stays one teacher-forced pass); nopad is refused.
revans/fwdans do not apply (an answer is labels, not a number) and are normalised to fwdans.

Breakdowns: `carry_class` is the number of inversions, pairs out of order (S0 = already
sorted, S{N(N-1)/2} = strictly reversed); `operand_lengths` gives the digit counts of the
smallest and the largest value; `ties` counts equal pairs. Sampling: max_len caps the digits
of every value (a curriculum starts on 0..9, where ties are common); mode "uniform" draws each
value's digit count uniformly, "values" each value uniformly, and "carry" (what the trainer's
carry share asks for) enriches structure: a third each with ties, already sorted, reversed.
The verification suite (`sort_suite`) is every problem for sort2/sort3 and, from sort4 on,
held-out uniform problems plus tied, sorted and reversed ones and the edge cases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from arithsweep.core.data.formats import Format, parse_format
from arithsweep.core.data.sampling import _distinct, _holdout, _num_digits
from arithsweep.core.errors import ConfigError

VALUE_DIGITS = 2  # values 0..99
MAX_ITEMS = 9  # 100**9 = 10**18 keeps the packed values inside int64
SORT_HELP = "sort<N> (N = 2..9 labelled values 0..99, e.g. sort3)"
ENUMERATE_MAX = 10**6  # sort2 and sort3 list every problem
_LIST_MAX = 4 * 10**6  # value grids that holdout sampling may list
_B = 10**VALUE_DIGITS  # base of the packed values
_DERIVED = {"init": False, "repr": False, "compare": False}
_EXAMPLE = (12, 7, 30, 7, 55, 3, 99, 41, 20)
SUITE_SEED = 0x50F7_5EED  # the sort suite's random part; no training stream uses this seed
SUITE_RANDOM, SUITE_LENGTHS, SUITE_PER_KIND = 10**6, 10**5, 10**4


def _packed(values: Tensor) -> Tensor:
    """Values (M, N) -> packed (M,), item 0 lowest."""
    pw = _B ** torch.arange(values.shape[1], device=values.device)
    return (values * pw).sum(1)


@dataclass(frozen=True)
class SortTask:
    """Sort N labelled values; build it with `get_task("sort<N>")` (see the module docstring)."""

    name: str
    n_items: int
    fmt: Format = Format(reverse_answer=False)
    # derived in __post_init__, named as Task names them so the pipeline reads either:
    op: str = field(default="sort", **_DERIVED)
    op_codes: tuple[int, ...] = field(default=(0,), **_DERIVED)
    n_digits: int = field(default=VALUE_DIGITS, **_DERIVED)  # digits per value: max_len's unit
    signed: bool = field(default=False, **_DERIVED)
    vocab: tuple[str, ...] = field(**_DERIVED)
    token_id: dict[str, int] = field(**_DERIVED)
    vocab_size: int = field(**_DERIVED)
    n_answer_digits: int = field(**_DERIVED)  # answer tokens (labels)
    pad_id: int = field(**_DERIVED)  # padded rows never pad; 0 as in Task
    prompt_len: int = field(**_DERIVED)
    answer_len: int = field(**_DERIVED)
    seq_len: int = field(**_DERIVED)
    n_ctx: int = field(**_DERIVED)
    n_problems: int = field(**_DERIVED)
    n_carry_classes: int = field(**_DERIVED)  # inversion counts 0..N(N-1)/2

    def __post_init__(self) -> None:
        n = self.n_items
        if not 2 <= n <= MAX_ITEMS or self.name != f"sort{n}":
            raise ConfigError(f"unknown task {self.name!r}: expected {SORT_HELP}")
        fmt = parse_format(self.fmt)
        if not fmt.pad:
            raise ConfigError(f"{self.name}: format nopad does not apply to sorting (values are "
                              f"always two digits wide); use pad")
        if fmt.zero_delimiters:
            raise ConfigError(f"{self.name}: format zeros does not apply to sorting (a value's "
                              f"label is its delimiter); use symbols")
        fmt = replace(fmt, reverse_answer=False)  # labels have no digit order to reverse
        labels = tuple(chr(ord("a") + i) for i in range(n))
        vocab = tuple("0123456789") + labels + (("=",) if fmt.delimiters else ())
        prompt = n * (VALUE_DIGITS + fmt.delimiters) + fmt.delimiters
        for key, value in dict(
            fmt=fmt, vocab=vocab, token_id={s: i for i, s in enumerate(vocab)},
            vocab_size=len(vocab), n_answer_digits=n, pad_id=0, prompt_len=prompt,
            answer_len=n, seq_len=prompt + n, n_ctx=prompt + n - 1, n_problems=_B**n,
            n_carry_classes=n * (n - 1) // 2 + 1,
        ).items():
            object.__setattr__(self, key, value)

    # ---------------------------------------------------------------- problems and answers

    def _check(self, a, b, op) -> tuple[Tensor, Tensor, Tensor]:
        a = torch.as_tensor(a, dtype=torch.int64)
        b, op = (torch.as_tensor(x, dtype=torch.int64, device=a.device).expand_as(a)
                 for x in (b, op))
        if a.numel() and bool(((a < 0) | (a >= self.n_problems) | (b != self.n_items)
                               | (op != 0)).any()):
            raise ConfigError(f"{self.name} problems are (packed values in 0..{_B}**"
                              f"{self.n_items}-1, {self.n_items}, 0): see core/data/sort_task.py")
        return a, b, op

    def values(self, a) -> Tensor:
        """Packed (M,) -> the items' values (M, N), label a first."""
        pw = _B ** torch.arange(self.n_items, device=torch.as_tensor(a).device)
        return torch.as_tensor(a, dtype=torch.int64)[:, None] // pw % _B

    def pack(self, values) -> Tensor:
        """Values (M, N) (nested lists work) -> packed (M,); ConfigError outside 0..99."""
        v = torch.as_tensor(values, dtype=torch.int64).reshape(-1, self.n_items)
        if v.numel() and bool(((v < 0) | (v >= _B)).any()):
            raise ConfigError(f"{self.name} values must be integers in 0..{_B - 1}")
        return _packed(v)

    def order(self, a) -> Tensor:
        """(M, N) item indices in ascending order of value; ties keep label order (stable)."""
        return torch.sort(self.values(a), dim=1, stable=True).indices

    def answer(self, a, b, op) -> Tensor:
        """(M,) the sorted labels' 1-based positions as decimal digits: bac -> 213."""
        a, _, _ = self._check(a, b, op)
        pw = 10 ** torch.arange(self.n_items - 1, -1, -1, device=a.device)
        return ((self.order(a) + 1) * pw).sum(1)

    def _pairs(self, a: Tensor, relation) -> Tensor:
        v = self.values(a)
        upper = torch.ones(self.n_items, self.n_items, dtype=torch.bool, device=a.device).triu(1)
        return (relation(v[:, :, None], v[:, None, :]) & upper).sum((1, 2))  # (M, N, N) -> (M,)

    def carry_class(self, a, b, op) -> Tensor:
        """(M,) inversions: pairs i < j with value_i > value_j (0 sorted, N(N-1)/2 reversed)."""
        return self._pairs(self._check(a, b, op)[0], torch.gt)

    def ties(self, a) -> Tensor:
        """(M,) pairs of items with equal values."""
        return self._pairs(torch.as_tensor(a, dtype=torch.int64), torch.eq)

    def operand_lengths(self, a, b) -> tuple[Tensor, Tensor]:
        """Digit counts (M,) of the smallest and of the largest value (breakdown by lengths)."""
        v = self.values(a)
        return _num_digits(v.min(1).values), _num_digits(v.max(1).values)

    # ---------------------------------------------------------------- the holdout split

    def edge_cases(self) -> list[tuple[int, int, int]]:
        """Fixed problems that verification always checks (so they sit on the holdout side):
        all equal (0, 50, 99), sorted, reversed, digit-count traps (9 < 10), ties at the ends."""
        n = self.n_items
        rows = [[0] * n, [99] * n, [50] * n, list(range(n)), [99 - i for i in range(n)],
                [10, 9, 11, 1, 90, 19, 91, 8, 80][:n], [0, 99] * n, [99, 0] * n,
                [7] + [50] * (n - 2) + [7], [1] * (n - 1) + [0], [9 * i for i in range(n)][::-1]]
        packed = self.pack([r[:n] for r in rows]).tolist()
        return [(p, n, 0) for p in dict.fromkeys(packed)]  # distinct, in order

    def _held(self, a: Tensor, b: Tensor, op: Tensor) -> Tensor:
        edges = torch.tensor([e[0] for e in self.edge_cases()], device=a.device)  # (E,)
        return _holdout(a, b, op) | (a[:, None] == edges).any(1)  # (M, E) -> (M,)

    def is_holdout(self, a, b, op) -> Tensor:
        """(M,) bool, True for ~1/16 of problems (the arithmetic tasks' hash) and every edge
        case; the same problem always lands the same way. Training draws only the other side."""
        return self._held(*self._check(a, b, op))

    # ---------------------------------------------------------------- sampling

    def _draw(self, m: int, gen: torch.Generator, mode: str, cap: int) -> Tensor:
        """m packed problems of one mode with values below 10**cap, both splits alike."""
        dev, n, hi = gen.device, self.n_items, 10**cap
        if mode == "values":
            return _packed(torch.randint(0, hi, (m, n), generator=gen, device=dev))
        length = torch.randint(1, cap + 1, (m, n), generator=gen, device=dev)
        low = torch.where(length == 1, 0, 10 ** (length - 1))
        u = torch.rand((m, n), generator=gen, dtype=torch.float64, device=dev)
        v = torch.minimum(low + (u * (10**length - low)).long(), 10**length - 1)  # (m, n)
        if mode == "carry":  # a third each: with ties, already sorted, reversed
            kind = torch.randint(0, 3, (m, 1), generator=gen, device=dev)
            # k < n candidates per row, so some value repeats (pigeonhole); k >= n/2 keeps
            # all-equal rows (easy: the answer is abc..) a minority
            k = torch.randint((n + 1) // 2, n, (m, 1), generator=gen, device=dev)
            pick = (torch.rand((m, n), generator=gen, device=dev) * k).long()  # (m, n) in 0..k-1
            tied = v.gather(1, pick)
            up = v.sort(1).values
            v = torch.where(kind == 0, tied, torch.where(kind == 1, up, up.flip(1)))
        return _packed(v)

    def _sample_side(self, n: int, gen: torch.Generator, mode: str, cap: int,
                     holdout: bool) -> Tensor:
        """n packed problems from one side of the split, with replacement (rejection)."""
        parts, have, idle = [torch.zeros(0, dtype=torch.int64, device=gen.device)], 0, 0
        while have < n:
            m = min(int((n - have) * (20 if holdout else 1.2)) + 64, 1 << 20)
            a = self._draw(m, gen, mode, cap)
            a = a[self._held(a, *self._const(a)) == holdout][: n - have]
            idle = idle + 1 if a.numel() == 0 else 0
            if idle > 32:
                raise ConfigError(f"no {'holdout' if holdout else 'train'} problems exist for "
                                  f"{self.name}, max_len={cap}")
            parts.append(a)
            have += a.numel()
        return torch.cat(parts)

    def _const(self, a: Tensor) -> tuple[Tensor, Tensor]:
        return torch.full_like(a, self.n_items), torch.zeros_like(a)

    def _listed(self, cap: int, gen: torch.Generator, seen: Tensor) -> Tensor:
        """Every holdout problem with values below 10**cap that is not in `seen`, shuffled."""
        side = 10**cap
        x = torch.arange(side**self.n_items, device=gen.device)
        a = _packed(x[:, None] // side ** torch.arange(self.n_items, device=gen.device) % side)
        a = a[self._held(a, *self._const(a))]
        a = a[~torch.isin(a, seen)]
        return a[torch.randperm(a.numel(), generator=gen, device=gen.device)]

    def _sample_distinct(self, n: int, gen: torch.Generator, mode: str, cap: int,
                         exclude: Tensor | None) -> Tensor:
        """Up to n distinct holdout problems not in `exclude`: draw, drop repeats, top up."""
        seen = torch.zeros(0, dtype=torch.int64, device=gen.device)
        if exclude is not None:
            seen = exclude.to(gen.device).unique()
        space = 10 ** (cap * self.n_items)
        if space <= min(32 * (n + seen.numel()), _LIST_MAX):
            rest = self._listed(cap, gen, seen)
            if rest.numel() <= n:  # the side holds n or fewer: all of them
                return rest
        got, idle = torch.zeros(0, dtype=torch.int64, device=gen.device), 0
        while got.numel() < n:
            new = self._sample_side(int((n - got.numel()) * 1.25) + 64, gen, mode, cap, True)
            new = new[~torch.isin(new, seen)]
            both = torch.cat([got, new])
            before, got = got.numel(), both[_distinct(both, *self._const(both))][:n]
            idle = 0 if got.numel() > before else idle + 1
            if idle > 8:  # this mode has run dry: top up from the whole side when listable
                if space > _LIST_MAX:
                    raise ConfigError(f"could draw only {got.numel()} distinct {mode} holdout "
                                      f"problems of {n} for {self.name}, max_len={cap}")
                extra = self._listed(cap, gen, torch.cat([seen, got]))
                return torch.cat([got, extra[: n - got.numel()]])
        return got

    def sample(self, n: int, generator: torch.Generator, mode: str = "uniform",
               max_len: int | None = None, split: str = "train",
               exclude: tuple[Tensor, Tensor, Tensor] | None = None,
               ) -> tuple[Tensor, Tensor, Tensor]:
        """n problems (a, b, op), each (n,) int64, from the `split` side of is_holdout; values
        have at most max_len digits (default 2). train draws with replacement; holdout draws
        distinct problems, none in `exclude` (all of that side when it has n or fewer)."""
        cap = VALUE_DIGITS if max_len is None else max_len
        if mode not in ("uniform", "values", "carry") or split not in ("train", "holdout"):
            raise ConfigError(f"bad sampling mode {mode!r} or split {split!r}: expected mode "
                              f"uniform|values|carry and split train|holdout")
        if not 1 <= cap <= VALUE_DIGITS:
            raise ConfigError(f"max_len {max_len} out of range for {self.name}: "
                              f"expected 1..{VALUE_DIGITS} (digits per value)")
        if split == "holdout":
            a = self._sample_distinct(n, generator, mode, cap,
                                      None if exclude is None else exclude[0])
        elif exclude is not None:
            raise ConfigError("sample: exclude= applies to split='holdout' only")
        else:
            a = self._sample_side(n, generator, mode, cap, holdout=False)
        return a, *self._const(a)

    def enumerate_all(self) -> tuple[Tensor, Tensor, Tensor]:
        """Every problem (a, b, op), each (100**N,), in packed order (sort2 and sort3 only)."""
        if self.n_problems > ENUMERATE_MAX:
            raise ConfigError(f"{self.name} has {self.n_problems:.3g} problems; enumerating is "
                              f"limited to 10**6 (sort2, sort3)")
        a = torch.arange(self.n_problems)
        return a, *self._const(a)

    # ---------------------------------------------------------------- tokens

    def encode(self, a, b, op, dtype: torch.dtype = torch.int64) -> tuple[Tensor, Tensor]:
        """-> tokens (M, seq_len) in `dtype`, answer_mask (M, seq_len - 1): True where input t
        predicts an answer token (the last N targets, the same for every row)."""
        a, _, _ = self._check(a, b, op)
        m, n, dev = a.shape[0], self.n_items, a.device
        shift = 10 ** torch.arange(VALUE_DIGITS - 1, -1, -1, device=dev)  # msd first
        if self.fmt.reverse_operands:
            shift = shift.flip(0)
        digits = self.values(a)[:, :, None] // shift % 10  # (M, N, D)
        if self.fmt.delimiters:
            labels = (10 + torch.arange(n, device=dev)).expand(m, n)[:, :, None]
            prompt = torch.cat([labels, digits], 2).reshape(m, -1)  # (M, N*(D+1))
            prompt = torch.cat([prompt, torch.full((m, 1), self.token_id["="], device=dev)], 1)
        else:
            prompt = digits.reshape(m, -1)  # (M, N*D)
        tokens = torch.cat([prompt, 10 + self.order(a)], 1)  # (M, seq_len)
        t = torch.arange(1, self.seq_len, device=dev)  # target positions
        return tokens.to(dtype), (t >= self.prompt_len).unsqueeze(0).repeat(m, 1)  # (M, T-1)

    def encode_prompt(self, a, b, op) -> list[list[int]]:
        """Prompts for greedy decoding, up to and including '=' (or the last value digit)."""
        return self.encode(a, b, op)[0][:, :self.prompt_len].tolist()

    def decode_answer(self, answer_tokens: list[int]) -> int | None:
        """Generated tokens -> the answer integer (bac -> 213); None unless the first N tokens
        are N distinct labels."""
        toks = [int(t) - 10 for t in answer_tokens[:self.answer_len]]
        if len(toks) < self.n_items or sorted(toks) != list(range(self.n_items)):
            return None
        return int("".join(str(t + 1) for t in toks))

    def render(self, tokens: list[int]) -> str:
        return "".join(self.vocab[t] for t in tokens)

    def labels_of(self, answer: int) -> str:
        """Answer integer -> labels: 213 -> 'bac'."""
        return "".join(chr(ord("a") + int(c) - 1) for c in str(int(answer)))

    def show_answer(self, answer: int | None) -> str | None:
        """As people read it (ask, verify's failures): the labels; None stays None."""
        return None if answer is None else self.labels_of(answer)

    def example(self) -> str:
        """One literal encoded example, e.g. sort3: 'a12b07c30=  ->  bac'."""
        tokens = self.encode(self.pack([_EXAMPLE[:self.n_items]]), self.n_items, 0)[0][0].tolist()
        p = self.prompt_len
        return f"{self.render(tokens[:p])}  ->  {self.render(tokens[p:])}"

    def format_problem(self, a: int, b: int, op: int) -> str:
        """Packed -> 'a:12,b:7,c:30'."""
        vals = self.values(torch.tensor([int(a)]))[0].tolist()
        return ",".join(f"{chr(ord('a') + i)}:{v}" for i, v in enumerate(vals))

    def parse_problem(self, s: str) -> tuple[int, int, int]:
        """'a:12,b:7,c:30' (or '12,7,30') -> (packed, N, 0); ConfigError with one line if not."""
        n = self.n_items
        rule = (f"{n} comma-separated items {','.join(f'{chr(97 + i)}:V' for i in range(n))} "
                f"(labels optional) with V in 0..{_B - 1}")
        items = [re.fullmatch(r"\s*(?:([a-z])\s*:\s*)?(\d{1,3})\s*", p) for p in str(s).split(",")]
        if len(items) != n or any(i is None for i in items):
            raise ConfigError(f"cannot parse problem {s!r} for {self.name}: expected {rule}")
        labels = [i[1] for i in items]
        if any(labels) and labels != [chr(97 + k) for k in range(n)]:
            raise ConfigError(f"labels in {s!r} must be {', '.join(chr(97 + k) for k in range(n))}"
                              f" in order for {self.name}")
        vals = [int(i[2]) for i in items]
        if max(vals) >= _B:
            raise ConfigError(f"value out of range in {s!r} for {self.name}: expected {rule}")
        return int(self.pack([vals])[0]), n, 0


def sort_task(name: str, fmt: Format | str | None) -> SortTask:
    """'sort3' (+ format) -> SortTask; ConfigError naming the valid forms otherwise."""
    m = re.fullmatch(r"sort(\d{1,3})", str(name).strip().lower())
    if m is None or not 2 <= int(m[1]) <= MAX_ITEMS:
        raise ConfigError(f"unknown task {name!r}: expected {SORT_HELP}")
    return SortTask(f"sort{int(m[1])}", int(m[1]), parse_format(fmt))


def sort_suite(task: SortTask, random: int | None = None, lengths: int | None = None,
               per_kind: int | None = None) -> tuple[Tensor, Tensor, Tensor, int]:
    """The verification suite for a sort task: (a, b, op, seed). Every problem for sort2/sort3;
    otherwise, all held out: `random` problems with uniform values, `lengths` with uniform
    digit counts, `per_kind` each with ties, already sorted and reversed, and the edge cases.
    (None: SUITE_RANDOM, SUITE_LENGTHS, SUITE_PER_KIND, read at call time, so a test can size
    verification's own call down.)"""
    if task.n_problems <= ENUMERATE_MAX:
        return (*task.enumerate_all(), 0)
    random, lengths = random or SUITE_RANDOM, lengths or SUITE_LENGTHS
    per_kind = per_kind or SUITE_PER_KIND
    gen = torch.Generator().manual_seed(SUITE_SEED)
    parts = [task.sample(random, gen, "values", split="holdout")[0],
             task.sample(lengths, gen, "uniform", split="holdout")[0]]
    for kind in range(3):  # ties, sorted, reversed: carry mode's kinds drawn apart
        pool = task.sample(4 * per_kind, gen, "carry", split="holdout")[0]
        keep = [task.ties(pool) > 0, task.carry_class(pool, task.n_items, 0) == 0,
                task.carry_class(pool, task.n_items, 0) == task.n_carry_classes - 1][kind]
        parts.append(pool[keep][:per_kind])
    parts.append(torch.tensor([e[0] for e in task.edge_cases()]))
    a = torch.cat(parts)
    return a, *task._const(a), SUITE_SEED
