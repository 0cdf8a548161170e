"""The one reading of a number a user wrote, wherever it was written.

Numbers reach a config from `--set`, YAML and JSON config files, recipes, a checkpoint's
`config.json` and search spaces, and each source spells them its own way: JSON reads `2e3` as
the float 2000.0, `--set lr=` gives None, text such as "2_000" may arrive from anywhere (every
YAML source is read by `arithsweep.core.yaml_loader`, which takes `1e-3` as a float). Every
place that turns such a value into a config field calls `read_number` (a single value) or
`coerce_field` (a dataclass field, by its annotation), so a value means the same thing in every
source, and a bad one is refused with a `ConfigError` that names the field and the value
instead of failing later in a comparison naming neither.

Torch-free, like the configs that use it.

    python -c "from arithsweep.core.numbers import read_number as r; \
        print(r('1e-3', float, 'lr'), r('2e3', int, 'steps'), r(4.0, int, 'd_head'))"
"""

from __future__ import annotations

import math
from typing import Any

from arithsweep.core.errors import ConfigError

# what a dataclass annotation (a string, under `from __future__ import annotations`) may name
_NUMBER_KINDS = {"int": int, "float": float}


def read_number(value: Any, kind: type, where: str, *, none_ok: bool = False) -> Any:
    """`value` (a number, or text such as "1e-3", "2_000", " 5 ") as `kind` (int or float).

    Whole numbers are accepted for an int field whichever way they were written (2000, 2e3,
    "2e3", 2000.0); a float field keeps an int as it is (Python's ints are valid floats, and
    saved configs hash the same). Refused, naming `where` (e.g. "train config: lr"): words,
    empty values, lists, true/false, nan and infinities, and fractions for an int field.
    None passes only with `none_ok` (a field such as `d_head: int | None`).
    """
    shown = value
    if value is None:
        if none_ok:
            return None
        raise ConfigError(f"{where}: no value given: expected {_expected(kind, none_ok)}")
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:  # int() first: exact for big whole numbers that a float would round
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(f"{where}={shown!r}: not a number: expected "
                                  f"{_expected(kind, none_ok)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}={shown!r}: not a number: expected {_expected(kind, none_ok)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}={value!r}: must be a finite number")
    if kind is int and isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{where}={value!r}: must be a whole number")
        value = int(value)
    return value


def coerce_field(label: str, field: str, value: Any, annotation: str) -> Any:
    """A config field's value read by its annotation ("int", "float", "int | None"...).

    Numeric fields go through `read_number`; a field that may also hold text, a list or a
    bool is left to its dataclass's own validation, which names the field itself.
    """
    kinds = {t.strip() for t in str(annotation).split("|")}
    numeric = [_NUMBER_KINDS[k] for k in ("int", "float") if k in kinds]
    if not numeric or kinds - {"int", "float", "None"}:
        return value
    # a field typed `int | float` takes either: read it as a float, keep an int as it is
    kind = float if float in numeric else int
    return read_number(value, kind, f"{label}: {field}", none_ok="None" in kinds)


def _expected(kind: type, none_ok: bool) -> str:
    what = "a whole number" if kind is int else "a number"
    return f"{what} or null" if none_ok else what
