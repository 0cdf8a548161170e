"""`DictConfig`: what every configuration dataclass shares, reading and writing plain dicts.

`ModelConfig` (core/model_config.py) and `TrainConfig` (core/train_config.py) derive from it:
`to_dict` for checkpoints and search results, `from_dict` for JSON, YAML and `--set`, which
refuses unknown fields and reads numbers one way for every source (core/numbers.py). Errors
name the field (`ConfigError`). Torch-free, like the configs.

    python -c "from arithsweep.core.config_base import DictConfig; print(DictConfig._label)"
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar, TypeVar

from arithsweep.core.errors import ConfigError
from arithsweep.core.numbers import coerce_field

C = TypeVar("C", bound="DictConfig")


class DictConfig:
    _label: ClassVar[str] = "config"  # how errors name this kind of config

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], d: dict[str, Any]) -> C:
        if not isinstance(d, dict):
            raise ConfigError(f"{cls._label}: expected a mapping of fields, got {type(d).__name__}")
        types = {f.name: str(f.type) for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - set(types))
        if unknown:
            raise ConfigError(f"{cls._label}: unknown field(s) {', '.join(unknown)}")
        # YAML's `1e-3` is a string, JSON's `2e3` a float: one reading of numbers for every source
        return cls(**{k: coerce_field(cls._label, k, v, types[k]) for k, v in d.items()})
