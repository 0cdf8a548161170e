"""How an arithmetic problem is written as tokens: the `Format` words and their parser.

Five choices, each a pair of words in a comma list (`pad,revans,fwdops,delim,symbols` is the
default): pad|nopad (fixed-width zero padding), revans|fwdans (answer least-significant digit
first or not), revops|fwdops (operands likewise), delim|nodelim (operator and '='),
symbols|zeros (delimiters as their own tokens, or as the digit 0 in AdderBoard's layout
`0 a 0 0 b 0`, a vocabulary of the ten digits only).
`arithsweep.core.data.tasks` shows literal examples of each; `Task` and `SortTask` hold one.

    python -c "from arithsweep.core.data.formats import parse_format; \\
        print(parse_format('nopad').name)"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from arithsweep.core.errors import ConfigError

_FORMAT_WORDS = (("pad", "nopad", "pad"), ("revans", "fwdans", "reverse_answer"),
                 ("revops", "fwdops", "reverse_operands"), ("delim", "nodelim", "delimiters"),
                 ("zeros", "symbols", "zero_delimiters"))
_WORDS = {w: (key, w == on) for on, off, key in _FORMAT_WORDS for w in (on, off)}
_FORMAT_HELP = ", ".join(f"{on}|{off}" for on, off, _ in _FORMAT_WORDS)


@dataclass(frozen=True)
class Format:
    """How a problem becomes tokens (literal examples in arithsweep.core.data.tasks' docstring)."""

    pad: bool = True  # fixed-width zero padding of operands and answer
    reverse_answer: bool = True  # answer least-significant digit first
    reverse_operands: bool = False
    delimiters: bool = True  # operator between operands and '=' before the answer
    # zeros: the delimiter slots are the digit 0, as AdderBoard's records write a problem
    # (`0 a 0 0 b 0`, vocabulary of the ten digits only); needs pad and delim
    zero_delimiters: bool = False

    def __post_init__(self) -> None:
        if not self.pad and not self.delimiters:
            raise ConfigError("format 'nopad,nodelim' is ambiguous: without padding only the "
                              "operator and '=' show where an operand ends; use pad or delim")
        if self.zero_delimiters and not (self.pad and self.delimiters):
            raise ConfigError("format 'zeros' writes the delimiter slots as the digit 0, so it "
                              "needs pad (fixed widths) and delim")

    @property
    def name(self) -> str:
        # "symbols" (the default) is left out, so names written before the word existed hold
        words = [on if getattr(self, key) else off for on, off, key in _FORMAT_WORDS]
        return ",".join(words[:-1] if words[-1] == "symbols" else words)


def parse_format(s: str | Format | None) -> Format:
    """'pad,fwdans' -> Format; words left out keep their defaults; None or '' -> Format()."""
    if isinstance(s, Format):
        return s
    chosen: dict[str, bool] = {}
    for word in filter(None, (w.strip().lower() for w in (s or "").split(","))):
        if word not in _WORDS:
            raise ConfigError(f"unknown format word {word!r} in {s!r}: expected a comma list of "
                              f"{_FORMAT_HELP} (default {Format().name})")
        key, value = _WORDS[word]
        if chosen.setdefault(key, value) != value:
            raise ConfigError(f"format {s!r} sets {key} both ways: pick one of {_FORMAT_HELP}")
    return Format(**chosen)


_PLACE_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"


def layout_places(fmt: Format, n_digits: int, answer_digits: int, signed: bool,
                  op_token: bool, n_ctx: int) -> str:
    """Each input position's digit place, for `pos: digit_index`: 0-9 a-z the place of a digit
    inside its number (0 = least significant), '.' a slot (delimiter, operator, sign). Only
    fixed layouts (pad) have one; the first n_ctx positions (the model's inputs)."""
    if not fmt.pad:
        raise ConfigError(f"pos digit_index needs a fixed layout: format {fmt.name} has "
                          f"nopad; use pad")

    def number(width: int, lsd_first: bool) -> str:
        s = _PLACE_CHARS[:width]
        return s if lsd_first else s[::-1]

    a = number(n_digits, fmt.reverse_operands)
    zeros = fmt.zero_delimiters
    mid = ".." if zeros else "." if fmt.delimiters or op_token else ""
    prompt = ("." if zeros else "") + a + mid + a + ("." if fmt.delimiters else "")
    answer = "." * int(signed) + number(answer_digits, fmt.reverse_answer)
    return (prompt + answer)[:n_ctx]


# `places: microadder` in a config or space: the task's own places with MicroAdder's two learned
# rows, so one space fits add2..add10 (its 57/67-p models need them; without, add3 stayed at 3%)
MICROADDER_PLACES = "microadder"


def microadder_places(want: str, prompt_len: int) -> str:
    """The task's places `want` with learned row A on the last prompt slot (the '=' before the
    answer) and row B on the first slot after the first operand's digits, as MicroAdder's
    '=' and carry rows: ".012..012.012" -> ".012B.012A012"."""
    chars = list(want)
    eq = prompt_len - 1
    first = next(i for i, c in enumerate(chars) if c != ".")
    after = next(i for i in range(first, len(chars)) if chars[i] == ".")
    if chars[eq] != "." or after >= eq:
        raise ConfigError(f"model config: places=microadder needs a slot before the answer "
                          f"and one after the first operand; this layout is {want!r}")
    chars[after], chars[eq] = "B", "A"
    return "".join(chars)


def fill_places(task, model: dict) -> dict:
    """`model` (a ModelConfig dict) with the task's `places` filled in where pos digit_index
    asks for them and none are given: what the task fixes, beside vocab_size and n_ctx."""
    if model.get("pos") != "digit_index":
        return model
    want = task.places()
    given = model.get("places")
    if given is None:
        return {**model, "places": want}
    if given == MICROADDER_PLACES:
        return {**model, "places": microadder_places(want, task.prompt_len)}
    kind = [c.isdigit() or c.islower() for c in want]  # a digit's place, or a slot
    if not isinstance(given, str) or [c.isdigit() or c.islower() for c in given[:len(want)]] \
            != kind:
        raise ConfigError(f"model config: places={given!r} does not fit {task.name}'s layout "
                          f"{want!r} (digits where it has digits, slots where it has slots)")
    return model


# the task names, torch-free so that `arithsweep leaderboard --task` can check one cheaply;
# `tasks.get_task` builds the task itself (results must fit in int64: add/sub/mix 18 digits,
# mul 9, sort 9 labelled values)
TASK_MAX = {"add": 18, "sub": 18, "mix": 18, "mul": 9, "sort": 9}
TASK_MIN = {"sort": 2}
TASK_HELP = ("add<N>, sub<N>, mix<N> (N = 1..18) or mul<N> (N = 1..9), e.g. add10; "
             "or sort<N> (N = 2..9)")


def task_name(name: str) -> str:
    """' ADD03 ' -> 'add3'; ConfigError naming the valid forms for anything else."""
    m = re.fullmatch(r"(add|sub|mix|mul|sort)(\d{1,3})", str(name).strip().lower())
    if m is None or not TASK_MIN.get(m[1], 1) <= int(m[2]) <= TASK_MAX[m[1]]:
        raise ConfigError(f"unknown task {name!r}: expected {TASK_HELP}")
    return f"{m[1]}{int(m[2])}"
