"""The one YAML reader for everything a user writes: config files, recipes, `--set` values
and search spaces.

PyYAML follows YAML 1.1, where `1e-3` is the *string* "1e-3" (only `1.0e-3` is a float) and a
repeated key silently keeps the last value. Users write `lr: 1e-3` and mean a number, and a
second `lr:` further down is a mistake, so this loader reads `1e-3` as a float and refuses a
duplicate key. Every YAML source goes through `load_yaml`, so a value means the same thing
wherever it was written; `arithsweep.core.numbers` then reads it into its field.

Torch-free.

    python -c "from arithsweep.core.yaml_loader import load_yaml; print(load_yaml('lr: 1e-3'))"
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads 1e-3 as a float and rejects duplicate keys."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str) -> Any:
    """`text` parsed as YAML; raises yaml.YAMLError (see `describe_error`)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def describe_error(e: yaml.YAMLError) -> str:
    """One line for a YAML error: what is wrong and where, e.g.
    "invalid YAML at line 3, column 1: duplicate key 'lr'"."""
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    kind = "invalid YAML" if "duplicate key" in problem else "YAML syntax error"
    return f"{kind}{where}: {problem}"
