"""The search-space file format: reading and validating the YAML files, nothing Optuna.

A space file looks like

    name: tiny
    description: the classic family
    model:
      n_layers: {int: [1, 2]}
      d_model: {choice: [4, 8, 16]}
      d_ff: {choice: [0, 16, 32]}
      activation: {choice: [relu, gelu], when: {d_ff: {gt: 0}}}
      tie_embeddings: true                      # a fixed value
    train:
      lr: {float: [1.0e-3, 3.0e-2], log: true}
      warmup: {int: [0, 400], step: 100}
      seeds: 4
    format:
      reverse_answer: true                      # or a format string: format: "pad,revans"

Sections are `model` (ModelConfig fields except vocab_size/n_ctx, which come from the task),
`train` (TrainConfig fields) and `format` (Format fields, or a fixed format string parsed by
`arithsweep.core.data.tasks.parse_format`), plus `name` and `description`.
A value is a fixed scalar or exactly one of `{choice: [..]}`, `{int: [lo, hi]}` (optional
`step: k`, `log: true`) or `{float: [lo, hi]}` (optional `log: true`), optionally with
`when: {key: cond, ...}` (all must hold): cond is a scalar (equal), a list (one of) or
`{eq|ne|gt|ge|lt|le|in: v}`. `key` is a bare name in the same section or `section.field`,
and must be defined EARLIER in the file (keys are sampled in file order, define-by-run).
A condition is evaluated on the value the config will have: the sampled/fixed value, or
the dataclass default when the referenced key was itself left out. A key whose condition
fails is left out of the sample, so its dataclass default applies.

`train.seeds` may instead be a rule on the proposal's size, `{by_params: [[60, 8], [50, 32],
[0, 64]]}`: rows [min_params, seeds], min_params falling to 0, the first row the proposal's
unique parameters reach wins (8 seeds at 60 p and up, 32 at 50-59, 64 below 50); see
`fields.parse_seed_rule`, applied by `arithsweep.search.trials.configs.build_trial`.
`train.steps` may be such a rule too (`{by_params: [[50, 25000], [0, 40000]]}`): smaller
proposals take longer to grok; `--trial-steps` still overrides it. Its `digits: 3` says the
rows are for 3-digit operands: an n-digit task trains n/3 times as long.

This module holds `SpaceFile`, the YAML loader and `parse_space_file`, and the checks of the
file as a whole (its sections, its names, its `start:` points); `values` checks one key's value
and its `when` (`fields` holds `Condition` and `Param`). Each error is one ConfigError naming
file and key. Sampling them with Optuna, the Ray glue and finding shipped files live in
`arithsweep.search.space.spaces`, which re-exports the names here that callers use.

    python -c "from arithsweep.search.space.file import parse_space_file as p; \\
        f = 'search_spaces/tiny.yaml'; print(*p(open(f).read(), f).params, sep='\\n')"
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from arithsweep.core.errors import ConfigError
from arithsweep.core.yaml_loader import describe_error, load_yaml
from arithsweep.search.space.fields import (
    RULE_FIELDS,
    RULE_KEY,
    SECTIONS,
    Condition,
    Param,
    SeedRule,
    field_specs,
    fmt_value,
    parse_rule_digits,
    parse_seed_rule,
    section_class,
    seeds_for,
    type_ok,
)
from arithsweep.search.space.values import parse_param

__all__ = [
    "SECTIONS",
    "Condition",
    "Param",
    "SeedRule",
    "SpaceFile",
    "effective_value",
    "parse_space_file",
    "seeds_for",
]

TOP_LEVEL = ("name", "description", *SECTIONS, "start")
NOT_SEARCHABLE = {"model": {"vocab_size": "comes from the task", "n_ctx": "comes from the task"}}


@dataclass
class SpaceFile:
    """A parsed, validated space file; `space.spaces.Space` adds the Optuna side."""

    name: str
    description: str
    path: Path
    params: list[Param] = field(default_factory=list)
    start: list[dict[str, Any]] = field(default_factory=list)  # points Optuna tries first
    # train.seeds by the proposal's size (None: a fixed or searched train.seeds, or none);
    # a plain default, so a Space pickled before the field existed reads None
    seed_rule: SeedRule | None = None
    steps_rule: SeedRule | None = None  # train.steps by the proposal's size, the same way
    steps_digits: int | None = None  # the operand length steps_rule's rows are for (or any)

    @property
    def searched(self) -> list[Param]:
        return [p for p in self.params if p.sampled]

    def validate_sample(self, cfg: Mapping[str, Any], vocab_size: int | None = None,
                        n_ctx: int | None = None) -> None:
        """Cheap checks of a sampled nested config; raise ConfigError naming the space.

        Builds a TrainConfig and a Format; a ModelConfig too when vocab_size and n_ctx are
        given (that imports torch through arithsweep.core.model.model); checks keys and types.
        """
        specs = field_specs()
        extra = sorted(set(cfg) - set(SECTIONS))
        if extra:
            raise ConfigError(f"search space {self.name}: sample has unknown section(s) "
                              f"{', '.join(extra)}")
        for section in SECTIONS:
            for key, value in dict(cfg.get(section, {})).items():
                spec = specs[section].get(key)
                if spec is None:
                    raise ConfigError(f"search space {self.name}: {section}.{key}: not a field")
                if not type_ok(value, spec):
                    raise ConfigError(f"search space {self.name}: {section}.{key}={value!r}: "
                                      f"expected {spec.type_text()}")
        try:
            for section in ("train", "format"):
                section_class(section)(**dict(cfg.get(section, {})))
            if vocab_size is not None and n_ctx is not None:
                from arithsweep.core.config import ModelConfig
                model = {"places": "0" * n_ctx, **cfg.get("model", {})}  # the task's, in a trial
                ModelConfig(vocab_size=vocab_size, n_ctx=n_ctx, **model)
        except ConfigError as e:
            raise ConfigError(f"search space {self.name}: sample is invalid: {e}") from None


def effective_value(sample: Mapping[str, Mapping[str, Any]], key: str) -> Any:
    """The value `key` ("model.d_ff") will have: sampled/fixed, else the dataclass default."""
    section, _, name = key.partition(".")
    if name in sample.get(section, {}):
        return sample[section][name]
    spec = field_specs()[section].get(name)
    return None if spec is None else spec.default


# --------------------------------------------------------------------------------------------
# Parsing


def parse_space_file(text: str, path: str | Path = "<string>") -> SpaceFile:
    """Parse and validate the YAML text of a space; every problem is one ConfigError."""
    path = Path(path)

    def fail(key: str | None, why: str) -> ConfigError:
        return ConfigError(f"search space {path}: {key}: {why}" if key else
                           f"search space {path}: {why}")

    try:
        doc = load_yaml(text)
    except yaml.YAMLError as e:
        raise fail(None, describe_error(e)) from None
    if doc is None:
        raise fail(None, "the file is empty (expected sections model, train, format)")
    if not isinstance(doc, dict):
        raise fail(None, f"expected a mapping of sections, got {type(doc).__name__}")
    for key in doc:
        if key not in TOP_LEVEL:
            raise fail(str(key), f"unknown section (expected one of {', '.join(TOP_LEVEL)})")
    name = doc.get("name", path.stem)
    description = doc.get("description", "")
    if not isinstance(name, str) or not name:
        raise fail("name", "must be a non-empty string")
    if not isinstance(description, str):
        raise fail("description", "must be a string")
    description = " ".join(description.split())

    specs = field_specs()
    params: list[Param] = []
    defined: dict[str, Param] = {}
    rules: dict[str, SeedRule] = {}  # train field -> its size rule
    steps_digits = None
    for section in (k for k in doc if k in SECTIONS):
        body = doc[section]
        if body is None:
            continue
        if section == "format" and isinstance(body, str):  # format: "nopad,revops" (fixed)
            body = _format_words(body, fail)
        if not isinstance(body, dict):
            raise fail(section, "must be a mapping of field: value")
        for fname, value in body.items():
            key = f"{section}.{fname}"
            if not isinstance(fname, str):
                raise fail(key, "field names must be strings")
            if fname in NOT_SEARCHABLE.get(section, {}):
                raise fail(key, f"not searchable: {NOT_SEARCHABLE[section][fname]}")
            if isinstance(value, dict) and RULE_KEY in value:
                if section != "train" or fname not in RULE_FIELDS:
                    raise fail(key, f"{RULE_KEY} is a rule for "
                                    f"{' and '.join('train.' + f for f in RULE_FIELDS)} only")
                rules[fname] = parse_seed_rule(value, lambda why, k=key: fail(k, why), fname)
                if fname == "steps":
                    steps_digits = parse_rule_digits(value, lambda why, k=key: fail(k, why))
                continue
            spec = specs[section].get(fname)
            if spec is None:
                known = [k for k in specs[section] if k not in NOT_SEARCHABLE.get(section, {})]
                close = difflib.get_close_matches(fname, known, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise fail(key, f"unknown {section} field ({hint}known: {', '.join(known)})")
            param = parse_param(section, fname, value, spec, defined, fail)
            params.append(param)
            defined[param.name] = param
    start = _parse_start(doc.get("start"), defined, fail)
    return SpaceFile(name=name, description=description, path=path, params=params, start=start,
                     seed_rule=rules.get("seeds"), steps_rule=rules.get("steps"),
                     steps_digits=steps_digits)


def _parse_start(body: Any, defined: dict[str, Param],
                 fail: Callable[[str | None, str], ConfigError]) -> list[dict[str, Any]]:
    """`start:` - points Optuna tries first (a list of `{section.field: value}` mappings over
    searched keys; unnamed keys are sampled). A good known point gives the search an early
    incumbent, so that every later proposal must be smaller."""
    if body is None:
        return []
    if not isinstance(body, list) or not all(isinstance(x, dict) for x in body):
        raise fail("start", "must be a list of mappings {section.field: value}")
    out = []
    for i, point in enumerate(body):
        for key, value in point.items():
            p = defined.get(str(key))
            if p is None or not p.sampled:
                raise fail(f"start[{i}].{key}", "not a searched key of this space")
            ok = (value in p.choices if p.kind == "choice" else
                  isinstance(value, (int, float)) and not isinstance(value, bool)
                  and p.low <= value <= p.high)
            if not ok:
                raise fail(f"start[{i}].{key}", f"{fmt_value(value)!r} is outside {p.describe()}")
        out.append({str(k): v for k, v in point.items()})
    return out


def _format_words(text: str, fail: Callable[[str | None, str], ConfigError]) -> dict[str, Any]:
    from arithsweep.core.data.formats import parse_format

    try:
        return dataclasses.asdict(parse_format(text))
    except ConfigError as e:
        raise fail("format", str(e)) from None
