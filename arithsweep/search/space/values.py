"""One key of a space file: its value (fixed, a choice or a range) and its `when`, checked.

`parse_param` turns `d_ff: {choice: [0, 16, 32], when: {n_layers: 1}}` into a `fields.Param`,
and every way such a value can be wrong into one ConfigError naming file and key: a kind that
is not exactly one of choice / int / float, an option that kind does not take, bounds that are
not [lo, hi] or do not fit the field's type, a string the field does not accept (`pos: rpe`,
caught by building the dataclass with that field alone), a condition on a key not defined
earlier in the file, an operator or value its key cannot have. The format itself is
documented in `file`, which calls this for each key in file order.

    python -c "from arithsweep.search.space.values import parse_param; \\
        from arithsweep.search.space.fields import field_specs; \\
        print(parse_param('model', 'd_ff', {'choice': [0, 16]}, field_specs()['model']['d_ff'], \\
              {}, lambda k, why: ValueError(why)))"
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from arithsweep.core.config import MODEL_WORDS
from arithsweep.core.data.formats import MICROADDER_PLACES
from arithsweep.core.errors import ConfigError
from arithsweep.search.space.fields import (
    SECTIONS,
    Condition,
    FieldSpec,
    Param,
    coerce,
    fmt_value,
    section_class,
    type_ok,
)

KINDS = ("choice", "int", "float")
KIND_OPTIONS = {"choice": {"when"}, "int": {"step", "log", "when"}, "float": {"log", "when"}}
OPS = ("eq", "ne", "gt", "ge", "lt", "le", "in")
_ORDER_OPS = {"gt", "ge", "lt", "le"}
_SCALAR = (bool, int, float, str, type(None))


def parse_param(section: str, fname: str, value: Any, spec: FieldSpec,
                 defined: dict[str, Param], fail: Callable[[str | None, str], ConfigError]
                 ) -> Param:
    """The Param of `section.fname` from its YAML `value` (a fixed value, a choice or a
    range, with its `when`), checked against the field's `spec`; `defined`: the keys before
    it (a condition may only use those); `fail` makes the one ConfigError naming file and key."""
    key = f"{section}.{fname}"
    expected = spec.type_text()

    def check_value(v: Any, what: str) -> Any:
        if not isinstance(v, _SCALAR):
            raise fail(key, f"{what} {v!r} must be a scalar")
        if not type_ok(v, spec):
            got = "null" if v is None else f"{fmt_value(v)!r} ({type(v).__name__})"
            raise fail(key, f"{what} {got} does not fit the field type {expected}")
        return coerce(v, spec)

    if not isinstance(value, dict):
        if isinstance(value, list) and list not in spec.types:  # phases, curriculum may be
            raise fail(key, "a list is not a value; write {choice: [...]} to search over it")
        fixed = value if isinstance(value, list) else check_value(value, "value")
        _check_accepted(section, fname, [fixed], key, fail)
        return Param(section, fname, "fixed", value=fixed)

    kinds = [k for k in value if k in KINDS]
    if len(kinds) != 1:
        others = [str(k) for k in value if k not in ("when", "step", "log")]
        got = f"got {', '.join(others)}" if others else "got none"
        raise fail(key, f"needs exactly one of {{choice: [...]}}, {{int: [lo, hi]}}, "
                        f"{{float: [lo, hi]}} ({got})")
    kind = kinds[0]
    bad = [str(k) for k in value if k != kind and k not in KIND_OPTIONS[kind]]
    if bad:
        allowed = ", ".join(sorted(KIND_OPTIONS[kind]))
        raise fail(key, f"option {', '.join(bad)} is not allowed with {kind} (allowed: {allowed})")
    when = _parse_when(section, key, value.get("when"), defined, fail)
    log = value.get("log", False)
    if not isinstance(log, bool):
        raise fail(key, f"log must be true or false, got {log!r}")

    if kind == "choice":
        choices = value["choice"]
        if not isinstance(choices, list):
            raise fail(key, f"choice needs a list, got {choices!r}")
        if not choices:
            raise fail(key, "choice list is empty")
        choices = [check_value(c, "choice") for c in choices]
        if len({(type(c), c) for c in choices}) != len(choices):
            raise fail(key, f"choice list has duplicates: {choices}")
        _check_accepted(section, fname, choices, key, fail)
        return Param(section, fname, "choice", choices=tuple(choices), when=when)

    bounds = value[kind]
    if not (isinstance(bounds, list) and len(bounds) == 2):
        raise fail(key, f"{kind} needs [lo, hi], got {bounds!r}")
    lo, hi = bounds
    if kind == "int":
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            raise fail(key, f"int bounds must be whole numbers, got [{lo}, {hi}]")
        if not ({int, float} & spec.types) or bool in spec.types:
            raise fail(key, f"an int range does not fit the field type {expected}")
        step = value.get("step", 1)
        if not (isinstance(step, int) and not isinstance(step, bool) and step >= 1):
            raise fail(key, f"step must be a whole number >= 1, got {step!r}")
        if log and step != 1:
            raise fail(key, "log and step cannot be combined (Optuna samples log ints with step 1)")
        if (hi - lo) % step:
            raise fail(key, f"hi - lo = {hi - lo} is not a multiple of step {step}")
    else:
        if not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds):
            raise fail(key, f"float bounds must be numbers, got [{lo}, {hi}]")
        if float not in spec.types:
            raise fail(key, f"a float range does not fit the field type {expected}"
                            + (" (use {int: [lo, hi]})" if int in spec.types else ""))
        lo, hi, step = float(lo), float(hi), 1
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise fail(key, "float bounds must be finite")
    if lo > hi:
        raise fail(key, f"lo > hi in [{lo}, {hi}]")
    if log and lo <= 0:
        raise fail(key, f"log scale needs lo > 0, got {lo}")
    return Param(section, fname, kind, low=lo, high=hi, step=step, log=log, when=when,
                 as_float=kind == "int" and int not in spec.types)


def _check_accepted(section: str, fname: str, values: list[Any], key: str,
                    fail: Callable[[str | None, str], ConfigError]) -> None:
    """Catch typos in string values (pos: rpe) by building the dataclass with just that field."""
    cls = section_class(section)
    base = {"vocab_size": 12, "n_ctx": 11} if section == "model" else {}
    if (section, fname) == ("train", "cull"):  # its form alone: its steps and keeps are read
        base = {"steps": 10**9, "eval_every": 1}  # against the whole config's
    words = MODEL_WORDS.get(fname) if section == "model" else None
    for v in values:
        if not isinstance(v, (str, list)):
            continue
        if words is not None:  # the word alone: whether it fits the rest is the config's say
            if v not in words:
                raise fail(key, f"{v!r} is not accepted: must be one of {', '.join(words)}")
            continue
        if (section, fname, v) == ("model", "places", MICROADDER_PLACES):
            continue  # a keyword the task resolves (formats.fill_places)
        try:
            cls(**base, **{fname: v})
        except ConfigError as e:
            raise fail(key, f"{v!r} is not accepted: {e}") from None


def _parse_when(section: str, key: str, when: Any, defined: dict[str, Param],
                fail: Callable[[str | None, str], ConfigError]) -> tuple[Condition, ...]:
    if when is None:
        return ()
    if not isinstance(when, dict) or not when:
        raise fail(key, f"when needs a mapping {{key: condition}}, got {when!r}")
    out = []
    for ref, cond in when.items():
        ref = str(ref)
        qual = ref if ref.partition(".")[0] in SECTIONS and "." in ref else f"{section}.{ref}"
        target = defined.get(qual)
        if target is None:
            raise fail(key, f"when refers to {ref!r}, which is not a key defined earlier in the "
                            f"file (conditions may only use keys sampled before this one)")
        if isinstance(cond, dict):
            if not cond:
                raise fail(key, f"when {ref}: empty condition")
            items = list(cond.items())
        elif isinstance(cond, list):
            items = [("in", cond)]
        else:
            items = [("eq", cond)]
        for op, v in items:
            if op not in OPS:
                raise fail(key, f"when {ref}: unknown operator {op!r} "
                                f"(use one of {', '.join(OPS)})")
            vals = v if op == "in" else [v]
            if op == "in" and (not isinstance(v, list) or not v):
                raise fail(key, f"when {ref}: 'in' needs a non-empty list, got {v!r}")
            for x in vals:
                if not isinstance(x, _SCALAR):
                    raise fail(key, f"when {ref}: {x!r} must be a scalar")
                if op in _ORDER_OPS and (isinstance(x, bool) or not isinstance(x, (int, float))):
                    raise fail(key, f"when {ref}: {op} needs a number, got {x!r}")
                if (op not in _ORDER_OPS and target.kind == "choice"
                        and not any(Condition(qual, "eq", c).holds(x) for c in target.choices)):
                    raise fail(key, f"when {ref}: {fmt_value(x)!r} is not one of its choices "
                                    f"{{{', '.join(fmt_value(c) for c in target.choices)}}}")
            if op in _ORDER_OPS and target.kind == "choice" and not all(
                    isinstance(c, (int, float)) and not isinstance(c, bool)
                    for c in target.choices):
                raise fail(key, f"when {ref}: {op} needs a numeric key")
            out.append(Condition(qual, op, tuple(v) if op == "in" else v))
    return tuple(out)
