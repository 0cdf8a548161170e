"""A mixin giving a config dataclass strict `to_dict` / `from_dict` (unknown keys are errors).

Shared by ModelConfig and TrainConfig so that a typo in a YAML file, a checkpoint or `--set`
is reported by name in one place rather than passed to the constructor as a TypeError.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar, TypeVar

from arithsweep.errors import ConfigError

C = TypeVar("C", bound="DictConfig")


class DictConfig:
    _label: ClassVar[str] = "config"  # how errors name this kind of config

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], d: dict[str, Any]) -> C:
        if not isinstance(d, dict):
            raise ConfigError(f"{cls._label}: expected a mapping of fields, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{cls._label}: unknown field(s) {', '.join(unknown)}")
        return cls(**d)
