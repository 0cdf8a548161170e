"""Arithmetic problems as token sequences: what a model is searched, trained and verified on.

A task (add10, sub6, mix6, mul3) says what is computed, a `Format` how a problem becomes tokens
(sorting, sort<N>, is its own module, sort_task.py, dispatched from `get_task`).
`get_task("add10", "pad,revans")` gives a `Task` that samples problems (uniform lengths, carry-
enriched, curriculum cap, train/holdout split), encodes them for teacher forcing, decodes answers,
enumerates small tasks and classifies carry cascades, all as vectorised int64 torch (float64
only where it is exact: digits, see sampling._digit_table). Try:
    python -c "from arithsweep.core.data.tasks import get_task; print(get_task('sub4').example())"

Vocabulary: ids 0..9 are the digits '0'..'9', then, in this order and only if the task and format
need them: '+', '-', '*', '=', '<eos>', '<pad>'. So add3 has 12 tokens and sub3,nodelim 11.

Encoding, default format pad,revans,fwdops,delim (operands zero-padded to N digits, answer
least-significant digit first):
    add  answer N+1 digits             add10  0000000042+0000000007=  ->  94000000000
    sub  answer sign + N digits        sub4   0007-0042=  ->  -5300
    mix  op '+'/'-', sign + N+1 digits mix4   0007-0042=  ->  -53000
    mul  answer 2N digits              mul3   042*007=  ->  492000
The sign is the FIRST answer token in either answer order: '-' if negative, else the digit '0'
(so no '+' token is spent on it). Every digit of |a-b| depends on which operand is larger, so
the model commits to that comparison before it writes any digit.
revops writes operands least-significant digit first. nodelim drops the operator and '=' (mix
keeps its op token). nopad writes numbers without leading zeros and ends the answer with '<eos>';
rows are right-padded with '<pad>':  add3,nopad  42+7=  ->  94<eos>.  nopad+nodelim is refused.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import torch
from torch import Tensor

from arithsweep.core.data import native_rows
from arithsweep.core.data.encoding import _OP_SYMBOL, encode_fixed, encode_scattered
from arithsweep.core.data.formats import (
    _FORMAT_HELP,
    TASK_HELP,
    Format,
    layout_places,
    parse_format,
    task_name,
)
from arithsweep.core.data.sampling import (
    _cascade,
    _digits,
    _distinct,
    _draw,
    _holdout,
    _num_digits,
    within,
)
from arithsweep.core.errors import ConfigError

OPS = ("add", "sub", "mix", "mul")
MAX_DIGITS = {"add": 18, "sub": 18, "mix": 18, "mul": 9}  # results must fit in int64
OP_CODES = {"add": (0,), "sub": (1,), "mix": (0, 1), "mul": (2,)}  # op code 0=add 1=sub 2=mul
SAMPLE_MODES = ("uniform", "values", "carry", "carry_patterns", "near_zero")  # Task.sample
OP_NAMES = ("add", "sub", "mul")  # indexed by op code
_SYMBOLS = ("+", "-", "*", "=", "<eos>", "<pad>")
_LIST_MAX = 4 * 10**6  # problems under a length cap that holdout sampling may enumerate
_TASK_HELP = TASK_HELP
_DERIVED = {"init": False, "repr": False, "compare": False}


def task_names_help() -> str:  # for CLI help
    return (f"tasks: {_TASK_HELP}; formats: comma list of {_FORMAT_HELP} "
            f"(default {Format().name}; nopad needs delim)")


def get_task(name: str, fmt: Format | str | None = None) -> Task:
    """'add10' (+ optional format) -> Task; ConfigError naming the valid forms otherwise.
    'sort<N>' gives a SortTask (arithsweep.core.data.sort_task), which a Task's callers read
    alike. One Task per (name, format) in a process: tasks are frozen, so the search's setup,
    each proposal's sizing and MLflow params, and verification share the one built first."""
    return _built(str(name), parse_format(fmt))


@functools.lru_cache(maxsize=64)
def _built(name: str, fmt: Format) -> Task:
    if name.strip().lower().startswith("sort"):
        from arithsweep.core.data.sort_task import sort_task  # here: sort_task imports this module

        return sort_task(name, fmt)
    name = task_name(name)  # the one name parser, shared with the torch-free CLI paths
    op = name.rstrip("0123456789")
    return Task(name, op, int(name[len(op):]), fmt)


@dataclass(frozen=True)
class Task:
    """One arithmetic task in one format; build it with `get_task`. Op codes: 0=add 1=sub 2=mul."""

    name: str
    op: str
    n_digits: int
    fmt: Format = Format()
    # derived in __post_init__:
    vocab: tuple[str, ...] = field(**_DERIVED)  # digits '0'..'9' (ids 0..9), then needed symbols
    token_id: dict[str, int] = field(**_DERIVED)
    vocab_size: int = field(**_DERIVED)
    op_codes: tuple[int, ...] = field(**_DERIVED)
    signed: bool = field(**_DERIVED)  # the answer starts with a sign token (sub, mix)
    n_answer_digits: int = field(**_DERIVED)
    pad_id: int = field(**_DERIVED)  # '<pad>'; 0 for padded formats, which never pad
    prompt_len: int = field(**_DERIVED)  # exact for padded formats, the maximum for nopad
    answer_len: int = field(**_DERIVED)  # sign + digits + '<eos>', where present
    seq_len: int = field(**_DERIVED)
    n_ctx: int = field(**_DERIVED)  # longest model input: input = seq[:-1], target = seq[1:]
    n_problems: int = field(**_DERIVED)
    n_carry_classes: int = field(**_DERIVED)

    def __post_init__(self) -> None:
        op, n = self.op, self.n_digits
        if op not in OPS or not 1 <= n <= MAX_DIGITS[op] or self.name != f"{op}{n}":
            raise ConfigError(f"unknown task {self.name!r}: expected {_TASK_HELP}")
        fmt = parse_format(self.fmt)
        signed, delim, zeros = op in ("sub", "mix"), fmt.delimiters, fmt.zero_delimiters
        if zeros and op == "mix":
            raise ConfigError("format 'zeros' has no operator token, which mix needs: use symbols")
        sym = delim and not zeros  # delimiters written as their own tokens
        need = {"+": op == "mix" or (op == "add" and sym), "-": signed,
                "*": op == "mul" and sym, "=": sym, "<eos>": not fmt.pad, "<pad>": not fmt.pad}
        vocab = tuple("0123456789") + tuple(s for s in _SYMBOLS if need[s])
        digits = {"add": n + 1, "sub": n, "mix": n + 1, "mul": 2 * n}[op]
        # zeros: `0 a 0 0 b 0`, four zero slots (AdderBoard's layout)
        prompt = 2 * n + (4 if zeros else 2 if delim else int(op == "mix"))
        answer = digits + int(signed) + int(not fmt.pad)
        for key, value in dict(
            fmt=fmt, vocab=vocab, token_id={s: i for i, s in enumerate(vocab)},
            vocab_size=len(vocab), op_codes=OP_CODES[op], signed=signed, n_answer_digits=digits,
            pad_id=vocab.index("<pad>") if "<pad>" in vocab else 0, prompt_len=prompt,
            answer_len=answer, seq_len=prompt + answer, n_ctx=prompt + answer - 1,
            n_problems=len(OP_CODES[op]) * 10 ** (2 * n),
            n_carry_classes=digits,  # add n+1, sub n (top digit never borrows), mul 2n
        ).items():
            object.__setattr__(self, key, value)

    def _check(self, a, b, op) -> tuple[Tensor, Tensor, Tensor]:
        a = torch.as_tensor(a, dtype=torch.int64)
        b, op = (torch.as_tensor(x, dtype=torch.int64, device=a.device) for x in (b, op))
        op, hi = op.expand_as(a), 10**self.n_digits
        if a.numel() and not (within(a, 0, hi - 1) and within(b, 0, hi - 1)):
            raise ConfigError(f"operands of {self.name} must be integers in 0..{hi - 1}")
        if op.numel() and not within(op, self.op_codes[0], self.op_codes[-1]):
            raise ConfigError(f"{self.name} takes op codes {self.op_codes} (0=add 1=sub 2=mul)")
        return a, b, op

    def answer(self, a, b, op) -> Tensor:
        """True results (N,) int64; sub results can be negative."""
        return self._answer(*self._check(a, b, op))

    def _answer(self, a: Tensor, b: Tensor, op: Tensor) -> Tensor:
        """answer without the input check."""
        if self.op in ("add", "sub", "mul"):  # one op code (checked): no per-row choice
            return a + b if self.op == "add" else a - b if self.op == "sub" else a * b
        return torch.where(op == 0, a + b, a - b)

    def operand_lengths(self, a, b) -> tuple[Tensor, Tensor]:
        """Digit counts (N,) of each operand; 0 has length 1."""
        return _num_digits(torch.as_tensor(a)), _num_digits(torch.as_tensor(b))

    def is_holdout(self, a, b, op) -> Tensor:
        """(N,) bool, True for ~1/16 of problems and for every edge case; the same (a, b, op)
        always lands the same way. Training draws only the other side."""
        return self._held(*self._check(a, b, op))

    def edge_cases(self) -> list[tuple[int, int, int]]:
        """AdderBoard's edge cases, scaled to the operand width: fixed problems that
        verification always checks, so they sit on the holdout side whatever their hash."""
        n = self.n_digits
        top, ones = 10**n - 1, int("1" * n)
        half = 5 * 10 ** (n - 1)
        seq = int(("1234567890" * 2)[:n])
        rev = int(("9876543210" * 2)[:n])
        pairs = [(0, 0), (top, 1), (1, top), (top, top), (ones, top - ones + 1 if n > 1 else 8),
                 (seq, rev), (half, half), (0, top), (top, 0), (1, 1),
                 (10 ** (n - 1), 10 ** (n - 1))]
        return [(a, b, o) for o in self.op_codes for a, b in pairs
                if 0 <= a <= top and 0 <= b <= top]

    def _held(self, a: Tensor, b: Tensor, op: Tensor) -> Tensor:
        """is_holdout without the input check: op must be one of the task's codes."""
        if native_rows.usable(a, b, op):  # the same test, row by row in C
            return native_rows.held(a, b, op, self.edge_cases(), len(self.op_codes))
        held = _holdout(a, b, op)
        # one (N,) comparison per edge: ~2x cheaper on a CPU than an (N, E) broadcast
        for ea, eb, eo in self.edge_cases():
            hit = (a == ea) & (b == eb)
            held |= hit & (op == eo) if len(self.op_codes) > 1 else hit
        return held

    def carry_class(self, a, b, op) -> Tensor:
        """(N,) int64 in 0..n_carry_classes-1. add: longest run of consecutive digit positions
        producing a carry (123+456 -> 0, 15+5 -> 1, 999+1 -> 3); sub: longest borrow run of larger
        minus smaller (100-1 -> 2); mul: longest carry run when the schoolbook column sums
        sum_{i+j=k} a_i*b_j are added up (nearly always long for N >= 2: a coarse measure)."""
        a, b, op = self._check(a, b, op)
        n = self.n_digits
        if self.op == "mul":
            da, db = _digits(a, n), _digits(b, n)
            cols = torch.zeros(a.shape[0], 2 * n - 1, dtype=torch.int64, device=a.device)
            for i in range(n):  # (N, n) digit products landing in columns i..i+n-1
                cols[:, i:i + n] += da[:, i:i + 1] * db
            return _cascade(cols)
        # hi - lo borrows exactly where lo + (hi - lo) carries, so one carry pass serves both ops
        lo = torch.minimum(a, b)
        x, y = torch.where(op == 1, lo, a), torch.where(op == 1, torch.maximum(a, b) - lo, b)
        return _cascade(_digits(x, n) + _digits(y, n))

    def sample(self, n: int, generator: torch.Generator, mode: str = "uniform",
               max_len: int | None = None, split: str = "train",
               exclude: tuple[Tensor, Tensor, Tensor] | None = None,
               ) -> tuple[Tensor, Tensor, Tensor]:
        """n problems (a, b, op), each (n,) int64, all from the `split` side of is_holdout.

        uniform: each operand's length uniform in 1..max_len, its value uniform among numbers of
        that length. values: operands uniform over 0..10^max_len - 1 (AdderBoard's sampling:
        mostly full-length operands, as verification's random part sees them). carry
        (add/sub/mix; mul falls back to uniform): a carry (borrow) cascade of random length is
        forced into each problem (see sampling._carry_pair); carry_patterns mixes a single
        carry, a chain and a chain out of the top digit; near_zero: subtractions within 10^j of
        zero (sampling._near_zero; add: over values). Rejects are drawn again.

        train draws with replacement (it is a stream). holdout draws distinct problems, none of
        them in `exclude`, so that n is a sample size a confidence bound may trust; when the
        holdout side (under max_len) has n or fewer such problems, all of them come back."""
        cap = self.n_digits if max_len is None else max_len
        if mode not in SAMPLE_MODES or split not in ("train", "holdout"):
            raise ConfigError(f"bad sampling mode {mode!r} or split {split!r}: expected mode "
                              f"{'|'.join(SAMPLE_MODES)} and split train|holdout")
        if not 1 <= cap <= self.n_digits:
            raise ConfigError(f"max_len {max_len} out of range for {self.name}: "
                              f"expected 1..{self.n_digits}")
        if split == "holdout":
            return self._sample_distinct(n, generator, mode, cap, exclude)
        if exclude is not None:
            raise ConfigError("sample: exclude= applies to split='holdout' only")
        return self._sample_side(n, generator, mode, cap, holdout=False)

    def _sample_side(self, n: int, gen: torch.Generator, mode: str, cap: int,
                     holdout: bool) -> tuple[Tensor, Tensor, Tensor]:
        """n problems from one side of the split, drawn with replacement."""
        empty = torch.zeros(0, dtype=torch.int64, device=gen.device)
        parts, have, idle = [(empty, empty, empty)], 0, 0
        while have < n:
            need = n - have
            # oversample so one round usually suffices; holdout keeps ~1/16 of draws
            m = min(int(need * (20 if holdout else 1.2)) + 64, 1 << 20)
            a, b, op = _draw(m, gen, mode, cap, self.op_codes)
            keep = self._held(a, b, op) == holdout
            a, b, op = a[keep][:need], b[keep][:need], op[keep][:need]
            idle = idle + 1 if a.numel() == 0 else 0
            if idle > 32:  # that side of the partition is empty for this max_len
                split = "holdout" if holdout else "train"
                raise ConfigError(f"no {split} problems exist for {self.name}, max_len={cap}")
            parts.append((a, b, op))
            have += a.numel()
        return tuple(torch.cat(p) for p in zip(*parts, strict=True))

    def _sample_distinct(self, n: int, gen: torch.Generator, mode: str, cap: int,
                         exclude: tuple[Tensor, Tensor, Tensor] | None,
                         ) -> tuple[Tensor, Tensor, Tensor]:
        """Up to n distinct holdout problems not in `exclude`: draw, drop repeats, top up."""
        empty = torch.zeros(0, dtype=torch.int64, device=gen.device)
        got = tuple(exclude) if exclude is not None else (empty, empty, empty)
        got = tuple(x[_distinct(*got)] for x in got)
        skip, space = got[0].numel(), len(self.op_codes) * 100**cap
        # the side (~space/16) may hold too few: list it exactly while that is cheap
        if space <= min(32 * (n + skip), _LIST_MAX):
            rest = self._held_rest(cap, gen, got)
            if rest[0].numel() <= n:
                return rest
        idle, ratio = 0, 0.8  # ratio: draws per new problem, as the last round measured it
        while (left := skip + n - got[0].numel()) > 0:
            # 25% spare so one top-up usually suffices; 64 so a nearly dry round finds something
            m = int(left * ratio * 1.25) + 64
            new = self._sample_side(m, gen, mode, cap, holdout=True)
            both = tuple(torch.cat(p) for p in zip(got, new, strict=True))
            got = tuple(x[_distinct(*both)[:skip + n]] for x in both)
            gained = got[0].numel() + left - skip - n
            ratio, idle = min(64.0, m / max(1, gained)), 0 if gained else idle + 1
            if gained == left or not (idle > 8 or (ratio > 16 and space <= _LIST_MAX)):
                continue
            # this mode has (nearly) run out of unseen problems: top up from the whole side
            if space > _LIST_MAX:
                raise ConfigError(f"could draw only {got[0].numel() - skip} distinct {mode} "
                                  f"holdout problems of {n} for {self.name}, max_len={cap}")
            rest = self._held_rest(cap, gen, got)
            got = tuple(torch.cat((g, r[:left - gained])) for g, r in zip(got, rest))
            break
        return tuple(x[skip:] for x in got)

    def _held_rest(self, cap: int, gen: torch.Generator,
                   seen: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Every holdout problem with operands below 10**cap that is not in `seen`, shuffled."""
        side, dev = 10**cap, gen.device
        x, codes = torch.arange(side, device=dev), torch.tensor(self.op_codes, device=dev)
        a, b = x.repeat_interleave(side).repeat(len(codes)), x.repeat(side * len(codes))
        op = codes.repeat_interleave(side * side)
        keep = self._held(a, b, op)
        a, b, op, k = a[keep], b[keep], op[keep], seen[0].numel()
        idx = _distinct(*(torch.cat(p) for p in zip(seen, (a, b, op), strict=True)))
        idx = idx[idx >= k] - k  # first occurrences after `seen`: the problems it lacks
        idx = idx[torch.randperm(idx.numel(), generator=gen, device=dev)]
        return a[idx], b[idx], op[idx]

    def _encode(self, a, b, op, dtype: torch.dtype = torch.int64,
                ) -> tuple[Tensor, Tensor, Tensor]:
        """-> tokens (N, seq_len), prompt end (N,), answer end (N,) (exclusive positions)."""
        a, b, op = self._check(a, b, op)
        r = self._answer(a, b, op)
        if self.fmt.pad:
            tokens = encode_fixed(self, a, b, op, r, dtype)
            ends = (torch.full_like(a, e) for e in (self.prompt_len, self.seq_len))
            return tokens, *ends
        return encode_scattered(self, a, b, op, r, dtype)

    def encode(self, a, b, op, dtype: torch.dtype = torch.int64) -> tuple[Tensor, Tensor]:
        """-> tokens (N, seq_len) in `dtype`, answer_mask (N, seq_len - 1): True where input t
        predicts an answer token (incl. '<eos>'); a row is exactly right when all its masked
        argmaxes are. uint8 holds every vocabulary here and moves 8x fewer bytes than int64."""
        tokens, prompt_end, answer_end = self._encode(a, b, op, dtype)
        t = torch.arange(1, self.seq_len, device=tokens.device)[None]  # (1, T) target positions
        if self.fmt.pad:  # the same answer span in every row
            mask = (t >= self.prompt_len) & (t < self.seq_len)
            return tokens, mask.expand(tokens.shape[0], -1).contiguous()
        return tokens, (t >= prompt_end[:, None]) & (t < answer_end[:, None])

    def encode_prompt(self, a, b, op) -> list[list[int]]:
        """Prompts for greedy decoding, each up to and including '=' (or the last operand digit)."""
        tokens, prompt_end, _ = self._encode(a, b, op)
        return [row[:end] for row, end in zip(tokens.tolist(), prompt_end.tolist(), strict=True)]

    def places(self) -> str:
        """Each input position's digit place for `pos: digit_index` (formats.layout_places)."""
        return layout_places(self.fmt, self.n_digits, self.n_answer_digits, self.signed,
                             self.op == "mix", self.n_ctx)

    def show_answer(self, answer: int | None) -> int | str | None:
        """An answer as people read it (sorting overrides this with labels)."""
        return answer

    def decode_answer(self, answer_tokens: list[int]) -> int | None:
        """Generated answer tokens -> integer; None unless they are exactly the canonical form."""
        toks, eos = [int(t) for t in answer_tokens], self.token_id.get("<eos>")
        if (eos is None and len(toks) < self.answer_len) or (eos is not None and eos not in toks):
            return None
        toks = toks[:self.answer_len if eos is None else toks.index(eos)]
        minus = self.token_id.get("-")
        if self.signed and toks[:1] not in ([0], [minus]):
            return None
        sign, toks = (-1 if self.signed and toks[0] == minus else 1), toks[int(self.signed):]
        if not 1 <= len(toks) <= self.n_answer_digits or any(not 0 <= t <= 9 for t in toks):
            return None
        msd_first = toks[::-1] if self.fmt.reverse_answer else toks
        value = int("".join(map(str, msd_first)))
        if (not self.fmt.pad and len(toks) > 1 and msd_first[0] == 0) or (sign < 0 and not value):
            return None  # leading zero or "-0": not what encode would have written
        return sign * value

    def render(self, tokens: list[int]) -> str:
        return "".join(self.vocab[t] for t in tokens)

    def example(self) -> str:
        """One literal encoded example, e.g. add10: '0000000042+0000000007=  ->  94000000000'."""
        mod, code = 10**self.n_digits, self.op_codes[-1]
        a, b = (7 % mod, 42 % mod) if code == 1 else (42 % mod, 7 % mod)
        row, pe, ae = (t[0].tolist() for t in self._encode([a], [b], [code]))
        return f"{self.render(row[:pe])}  ->  {self.render(row[pe:ae])}"

    def format_problem(self, a: int, b: int, op: int) -> str:
        return f"{int(a)}{_OP_SYMBOL[int(op)]}{int(b)}"

    def parse_problem(self, s: str) -> tuple[int, int, int]:
        """'123+456' -> (123, 456, 0); ConfigError with one line if it does not fit the task."""
        forms = " or ".join(f"A{_OP_SYMBOL[c]}B" for c in self.op_codes)
        rule = f"{forms} with A, B in 0..{10**self.n_digits - 1}"
        m = re.fullmatch(r"\s*(-?\d{1,40})\s*([-+*])\s*(-?\d{1,40})\s*", str(s))
        if m is None:
            raise ConfigError(f"cannot parse problem {s!r} for {self.name}: expected {rule}")
        a, code, b = int(m[1]), _OP_SYMBOL.index(m[2]), int(m[3])
        if code not in self.op_codes:
            raise ConfigError(f"operator {m[2]!r} is not part of {self.name}: expected {rule}")
        if not (0 <= a < 10**self.n_digits and 0 <= b < 10**self.n_digits):
            raise ConfigError(f"operand out of range in {s!r} for {self.name}: expected {rule}")
        return a, b, code

    def enumerate_all(self) -> tuple[Tensor, Tensor, Tensor]:
        """Every problem (a, b, op), each (n_problems,), add before sub for mix."""
        if self.n_problems > 10**6:
            raise ConfigError(f"{self.name} has {self.n_problems:.3g} problems; enumerating is "
                              f"limited to 10**6 (tasks up to add3/sub3/mul3, mix2)")
        side = 10**self.n_digits
        x, k = torch.arange(side), len(self.op_codes)
        op = torch.tensor(self.op_codes).repeat_interleave(side * side)
        return x.repeat_interleave(side).repeat(k), x.repeat(side * k), op
