"""Search spaces meet Optuna here: sampling, the Ray define-by-run function, finding spaces.

This module is the ONE place the YAML format (parsed and validated by
`arithsweep.search.space.file`, where the format is documented) is translated to Optuna:
`Space.suggest` samples a space define-by-run, `Space.ray_define_by_run` wraps it for Ray's
OptunaSearch, `config_from_tune` turns the config Ray hands a trainable back into sections,
and `load_space` / `list_spaces` find the shipped files or read one by path.
`Space.dimensions` lists one human line per key.

Optuna parameter names are `section.field` ("model.d_model", "train.lr").
`RayDefineByRun`, `Space`, `Param` and `Condition` stay importable from here: Ray pickles the
define-by-run function by reference and saved searches name these paths.

    python -c "from arithsweep.search.space.spaces import *; \\
        print(*load_space('tiny').dimensions, sep='\\n')"
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arithsweep.core.errors import ConfigError
from arithsweep.search.space.fields import describe_seed_rule
from arithsweep.search.space.file import (
    SECTIONS,
    Condition,
    Param,
    SpaceFile,
    effective_value,
    parse_space_file,
)

if TYPE_CHECKING:  # pragma: no cover
    import optuna

__all__ = [
    "SECTIONS",
    "Condition",
    "Param",
    "RayDefineByRun",
    "Space",
    "config_from_tune",
    "list_spaces",
    "load_space",
    "parse_space",
    "shipped_space_names",
]

# --------------------------------------------------------------------------------------------
# The space


@dataclass
class Space(SpaceFile):
    """A parsed space file (name, description, path, params) that Optuna can sample."""

    @property
    def dimensions(self) -> list[str]:
        """One human line per key, in file order, e.g. "model.d_model ∈ {4, 6, 8}"."""
        return [p.describe() for p in self.params]

    @property
    def seed_rule_line(self) -> str | None:
        """The seed rule as one human line ("train.seeds by params: 8 from 60 p, ..."), or
        None when train.seeds is a value."""
        return describe_seed_rule(self.seed_rule) if self.seed_rule else None

    @property
    def size_rule_lines(self) -> list[str]:
        """Every size rule as one human line (seeds, then steps)."""
        lines = [describe_seed_rule(r, what) for what, r in
                 (("seeds", self.seed_rule), ("steps", self.steps_rule)) if r]
        if self.steps_rule and self.steps_digits:
            d = self.steps_digits
            lines[-1] += f" at {d} digits (n/{d} times as many at n digits)"
        return lines

    def suggest(self, trial: optuna.Trial | Any) -> dict[str, dict[str, Any]]:
        """Define-by-run: sample every key whose `when` holds, in file order.

        Returns {"model": {...}, "train": {...}, "format": {...}} with sampled and fixed values;
        keys whose condition failed are absent (the dataclass default applies).
        """
        out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        for p in self.params:
            if all(c.holds(effective_value(out, c.key)) for c in p.when):
                out[p.section][p.field] = _suggest(p, trial)
        return out

    def ray_define_by_run(self) -> Callable[[Any], dict[str, Any]]:
        """A `space=` for `ray.tune.search.optuna.OptunaSearch` (a picklable callable).

        How OptunaSearch (Ray 2.60, optuna_search.py) builds a trial's config from it:
        it calls the function with a wrapper of the optuna trial that records each
        `suggest_*` return value under its name, then takes `{**captured, **returned}` (a
        flat, top-level merge) and passes it through `unflatten_dict(..., "/")`, which
        splits keys on "/" only. Finally the SearchGenerator deep-merges that into the
        Tuner's `param_space`. Our names use ".", so nothing is unflattened: the function
        returns the whole sample (fixed values too, and ints coerced to float for float
        fields) flattened to the same dotted keys, overriding the captured values with
        identical ones. The trial config is therefore flat, e.g.
        {"model.d_model": 8, "train.lr": 0.004, "train.seeds": 4, ...}, with sampled and
        fixed keys alike; `config_from_tune` turns it into the nested dict `suggest`
        returns. (Searcher.save pickles `_space` with plain pickle, hence a module-level
        callable class rather than a closure.)
        """
        return RayDefineByRun(self)


def _suggest(p: Param, trial: Any) -> Any:
    """One key's value for this trial: its fixed value or Optuna's suggestion."""
    if p.kind == "fixed":
        return p.value
    if p.kind == "choice":
        return trial.suggest_categorical(p.name, list(p.choices))
    if p.kind == "int":
        v = trial.suggest_int(p.name, p.low, p.high, step=p.step, log=p.log)
        return float(v) if p.as_float else v
    return trial.suggest_float(p.name, p.low, p.high, log=p.log)


class RayDefineByRun:
    """Picklable define-by-run function for OptunaSearch: the flat dotted sample."""

    def __init__(self, space: Space) -> None:
        self.space = space

    def __call__(self, trial: Any) -> dict[str, Any]:
        return _flatten(self.space.suggest(trial))


def _flatten(nested: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {f"{s}.{k}": v for s in SECTIONS for k, v in nested.get(s, {}).items()}


def config_from_tune(config: Mapping[str, Any]) -> dict[str, Any]:
    """Normalise the config Ray hands a trainable into {"model": {}, "train": {}, "format": {}}.

    Accepts the flat dotted keys our define-by-run function produces ("model.d_model"),
    nested section dicts (e.g. from a "/"-unflattened space or a Tuner param_space), or a mix;
    any other top-level key (e.g. "task" from param_space) is passed through unchanged.
    """
    out: dict[str, Any] = {s: {} for s in SECTIONS}
    for key, value in config.items():
        section, dot, name = key.partition(".")
        if key in SECTIONS and isinstance(value, Mapping):
            out[key].update(value)
        elif dot and section in SECTIONS:
            out[section][name] = value
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------------------------
# Loading


def _spaces_dir() -> Path:
    return Path(str(resources.files("arithsweep.search_spaces")))


def shipped_space_names() -> list[str]:
    return sorted(p.stem for p in _spaces_dir().glob("*.yaml"))


def default_space(task: Any) -> str:
    """The shipped space a search uses when none is named: the one made for that kind of task
    (sorting; Quirke's sub/mix, 4 digits and up apart; multiplication, mul3 and up apart;
    add10, the family and recipe of its trained records (tbukic); 3-9 digit addition,
    MicroAdder's family; longer addition, the frontier family of add10's records
    (adderboard); everything else the small-task space). `task`: its name, or the Task the
    search already built."""
    from arithsweep.core.data.tasks import get_task  # the one task-name parser; torch, so lazily

    t = get_task(task) if isinstance(task, str) else task
    if t.op == "sort":
        return "sort"
    if t.op in ("sub", "mix"):  # 4-6 digits: wider models at Quirke's five nines
        return "quirke6" if t.n_digits >= 4 else "quirke"
    if t.op == "mul":  # mul3's trials are hours long: its own space (search_spaces/mul3.yaml)
        return "mul3" if t.n_digits >= 3 else "mul"
    # add10, AdderBoard's task: the records' own family with their recipe, where tbukic's 44 p
    # trained here (2 of 64 seeds at 99%) while MicroAdder's family stopped at 57 p
    if t.op == "add" and t.n_digits == 10:
        return "tbukic"
    # MicroAdder's family: its 37 p found on add3 in 20 minutes, its 74 p verified on add10,
    # and its d4 shapes (37-44 p) count the same at every length; tiny stops near 190 p
    if t.op == "add" and 3 <= t.n_digits <= 9:
        return "microadder"
    return "adderboard" if t.op == "add" and t.n_digits >= 6 else "tiny"


def list_spaces() -> list[Space]:
    """The spaces shipped inside the package, sorted by name."""
    return [load_space(n) for n in shipped_space_names()]


def load_space(name_or_path: str | Path) -> Space:
    """"tiny" -> the shipped file; anything else is a path to a .yaml file."""
    text = str(name_or_path)
    shipped = shipped_space_names()
    if text in shipped:
        path = _spaces_dir() / f"{text}.yaml"
    else:
        path = Path(text).expanduser()
        if not path.is_file():
            raise ConfigError(f"search space {text!r}: no such file or shipped space "
                              f"(shipped: {', '.join(shipped) or 'none'})")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"search space {path}: cannot read: {e}") from None
    return parse_space(raw, path)


def parse_space(text: str, path: str | Path = "<string>") -> Space:
    """Parse and validate the YAML text of a space; every problem is one ConfigError."""
    f = parse_space_file(text, path)
    # every field of the parsed file, so that a new one cannot be dropped here
    return Space(**{k.name: getattr(f, k.name) for k in fields(SpaceFile)})
