"""What a search space may set, and one parsed dimension of it (`Param`, `Condition`).

A space file names `model.*` (ModelConfig), `train.*` (TrainConfig) and `format.*` (Format)
fields; this module reads those dataclasses once (lazily: `arithsweep.core.model.model` imports
torch, `config` and `tasks` stay light) and answers "is this value of the right type for that
field, and what is its default?" for the parser in `arithsweep.search.space.file`. It also
holds the one rule a space may give instead of a value: `train.seeds: {by_params: ...}`, the
seeds a proposal trains by its size (`parse_seed_rule`, `seeds_for`).

    python -c "from arithsweep.search.space.fields import field_specs; \\
        print(field_specs()['train']['lr'])"
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arithsweep.core.config import MAX_SEEDS
from arithsweep.core.errors import ConfigError

SECTIONS = ("model", "train", "format")
_OP_TEXT = {"eq": "=", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<=", "in": "in"}




@dataclass(frozen=True)
class FieldSpec:
    types: frozenset[type]  # subset of {bool, int, float, str, NoneType, list}
    default: Any

    def type_text(self) -> str:
        order = (bool, int, float, str, list, type(None))
        return " | ".join("null" if t is type(None) else t.__name__
                          for t in order if t in self.types)


_TYPE_NAMES = {"bool": bool, "int": int, "float": float, "str": str, "None": type(None),
               "NoneType": type(None), "list": list}


def _types_of(annotation: Any) -> frozenset[type]:
    """`int | None` (a string under postponed annotations, or a real type) -> {int, NoneType}."""
    if isinstance(annotation, str):
        text = re.sub(r"Optional\[(.*)\]", r"\1 | None", annotation)
        parts = [p.strip() for p in text.split("|")]
        return frozenset(_TYPE_NAMES[p] for p in parts if p in _TYPE_NAMES)
    if isinstance(annotation, type):
        return frozenset({annotation})
    return frozenset(t for t in getattr(annotation, "__args__", ()) if t in _TYPE_NAMES.values())


def _specs_of(cls: type) -> dict[str, FieldSpec]:
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out[f.name] = FieldSpec(_types_of(f.type), default)
    return out


def section_class(section: str) -> type:
    if section == "model":
        from arithsweep.core.config import ModelConfig
        return ModelConfig
    if section == "train":
        from arithsweep.core.config import TrainConfig
        return TrainConfig
    from arithsweep.core.data.formats import Format
    return Format


@functools.lru_cache(maxsize=1)
def field_specs() -> dict[str, dict[str, FieldSpec]]:
    return {s: _specs_of(section_class(s)) for s in SECTIONS}



def type_ok(v: Any, spec: FieldSpec) -> bool:
    if isinstance(v, bool):
        return bool in spec.types
    if isinstance(v, int):
        return int in spec.types or float in spec.types
    if isinstance(v, float):
        return float in spec.types and math.isfinite(v)
    if isinstance(v, str):
        return str in spec.types
    if v is None:
        return type(None) in spec.types
    if isinstance(v, list):
        return list in spec.types
    return False


def coerce(v: Any, spec: FieldSpec) -> Any:
    """Whole numbers given for a float-only field become floats (0 -> 0.0)."""
    if (isinstance(v, int) and not isinstance(v, bool) and int not in spec.types
            and float in spec.types):
        return float(v)
    return v


# --------------------------------------------------------------------------------------------
# Parsed dimensions


def fmt_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


@dataclass(frozen=True)
class Condition:
    """`key op value`; key is qualified ("model.d_ff"); in/eq/ne compare, gt.. order."""

    key: str
    op: str
    value: Any

    def holds(self, actual: Any) -> bool:
        try:
            if self.op == "eq":
                return actual == self.value and isinstance(actual, bool) == isinstance(
                    self.value, bool)
            if self.op == "ne":
                return not Condition(self.key, "eq", self.value).holds(actual)
            if self.op == "in":
                return any(Condition(self.key, "eq", v).holds(actual) for v in self.value)
            if actual is None or isinstance(actual, bool):
                return False
            return {"gt": actual > self.value, "ge": actual >= self.value,
                    "lt": actual < self.value, "le": actual <= self.value}[self.op]
        except TypeError:
            return False

    def __str__(self) -> str:
        if self.op == "in":
            return f"{self.key} in {{{', '.join(fmt_value(v) for v in self.value)}}}"
        return f"{self.key} {_OP_TEXT[self.op]} {fmt_value(self.value)}"


@dataclass(frozen=True)
class Param:
    """One key of a space: a fixed value or a sampled dimension, maybe conditional."""

    section: str
    field: str
    kind: str  # "fixed" | "choice" | "int" | "float"
    value: Any = None  # fixed
    choices: tuple = ()  # choice
    low: float | int | None = None  # int / float
    high: float | int | None = None
    step: int = 1  # int
    log: bool = False  # int / float
    when: tuple[Condition, ...] = ()
    as_float: bool = False  # an int range on a float field: the sampled int becomes a float

    @property
    def name(self) -> str:
        """Qualified name, also the Optuna parameter name: "model.d_model"."""
        return f"{self.section}.{self.field}"

    @property
    def sampled(self) -> bool:
        return self.kind != "fixed"

    def describe(self) -> str:
        if self.kind == "fixed":
            text = f"{self.name} = {fmt_value(self.value)}"
        elif self.kind == "choice":
            text = f"{self.name} ∈ {{{', '.join(fmt_value(c) for c in self.choices)}}}"
        elif self.kind == "int":
            if self.step > 1:
                rng = f"{{{self.low}, {self.low + self.step}, …, {self.high}}}"
            else:
                rng = f"{{{self.low}..{self.high}}}"
            text = f"{self.name} ∈ {rng}" + (" log" if self.log else "")
        else:
            text = f"{self.name} ∈ [{fmt_value(self.low)}, {fmt_value(self.high)}]" + (
                " log" if self.log else "")
        if self.when:
            text += "  if " + " and ".join(str(c) for c in self.when)
        return text


# --------------------------------------------------------------------------------------------
# Size rules: train.seeds and train.steps by the proposal's size


RULE_KEY = "by_params"  # train.seeds: {by_params: [[min_params, seeds], ...]}
SeedRule = tuple[tuple[int, int], ...]  # ((min_params, value), ...), min_params falling to 0
# the train fields a space may give as a size rule, and the values each allows: smaller
# proposals buy more tickets of the seed lottery (seeds) and need longer to grok (steps: on
# add3 a 40-p MicroAdder-family model had no seed past 66% in 25K steps, one at 99% in 40K)
RULE_FIELDS = {"seeds": (1, MAX_SEEDS), "steps": (1, 10**9)}
# train.steps: {by_params: ..., digits: 3}: the rows are for 3-digit operands, and a task of n
# digits trains n/3 times as long (MicroAdder's family: 25K steps for its 57 p on add3, 120K
# for its 74 p on add10, where the carry chains and the places to tell apart are longer)
DIGITS_KEY = "digits"


def seeds_for(rule: SeedRule, params: int) -> int:
    """The value (seeds, or steps) a proposal of `params` unique parameters gets under `rule`:
    the first row whose min_params it reaches (the last row starts at 0, so one matches)."""
    return next(value for low, value in rule if params >= low)


def describe_seed_rule(rule: SeedRule, what: str = "seeds") -> str:
    """One human line: "train.seeds by params: 8 from 60 p, 32 from 50 p, 64 below"."""
    rows = [f"{value} from {low} p" for low, value in rule[:-1]]
    last = rule[-1][1]
    return f"train.{what} by params: " + ", ".join([*rows, f"{last} below" if rows else
                                                     f"{last} at every size"])


def steps_for_digits(steps: int, n_digits: int, rule_digits: int | None) -> int:
    """A steps rule's value for a task of `n_digits` when its rows are for `rule_digits`."""
    return steps if not rule_digits else max(1, round(steps * n_digits / rule_digits))


def parse_rule_digits(value: dict, fail: Callable[[str], ConfigError]) -> int | None:
    """The `digits:` of a steps rule (the operand length its rows are for), or None."""
    if DIGITS_KEY not in value:
        return None
    d = value[DIGITS_KEY]
    if not isinstance(d, int) or isinstance(d, bool) or not 1 <= d <= 18:
        raise fail(f"{DIGITS_KEY} must be a whole number of digits in 1..18, got {d!r}")
    return d


def parse_seed_rule(value: dict, fail: Callable[[str], ConfigError],
                    what: str = "seeds") -> SeedRule:
    """`{by_params: [[min_params, value], ...]}` for train.`what` (a RULE_FIELDS key): whole
    numbers, min_params falling strictly and ending at 0 (so every size gets a value), values
    in RULE_FIELDS' range; `fail(why)` makes the error that names the file and key."""
    lo, hi = RULE_FIELDS[what]
    allowed = (RULE_KEY, DIGITS_KEY) if what == "steps" else (RULE_KEY,)
    extra = [str(k) for k in value if k not in allowed]
    if extra:
        raise fail(f"a {what} rule takes only {' and '.join(allowed)} (got {', '.join(extra)})")
    rows = value[RULE_KEY]
    form = (f"{RULE_KEY} needs a list of [min_params, {what}] rows, e.g. "
            + ("[[60, 8], [0, 32]]" if what == "seeds" else "[[50, 25000], [0, 40000]]"))
    if not isinstance(rows, list) or not rows:
        raise fail(f"{form}, got {rows!r}")
    out: list[tuple[int, int]] = []
    for i, row in enumerate(rows, 1):
        whole = isinstance(row, list) and len(row) == 2 and all(
            isinstance(x, int) and not isinstance(x, bool) for x in row)
        if not whole:
            raise fail(f"{RULE_KEY} row {i} {row!r}: {form}")
        low, n = row
        if low < 0 or not lo <= n <= hi:
            raise fail(f"{RULE_KEY} row {i} {row!r}: min_params must be >= 0 and {what} in "
                       f"{lo}..{hi}")
        if out and low >= out[-1][0]:
            raise fail(f"{RULE_KEY} row {i} {row!r}: min_params must fall from row to row "
                       f"(the first matching row wins)")
        out.append((low, n))
    if out[-1][0] != 0:
        raise fail(f"{RULE_KEY}: the last row must start at 0 (got {out[-1][0]}), so that "
                   f"every size gets a value")
    return tuple(out)
