"""Turn CLI input (a config file plus `--set key=value` overrides) into validated configs.

A config file is YAML or JSON with optional sections `task`, `format`, `model` and `train`;
a checkpoint's `config.json` is one, so `arithsweep train --config runs/x/best/config.json`
retrains the same architecture with the same recipe. Overrides name a ModelConfig or
TrainConfig field (the two share no names), e.g. `--set final_norm=false --set lr=0.003`.
Torch-free, so `arithsweep params` validates input before importing the model code.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from arithsweep.core.config import LEGACY_TRAIN_DEFAULTS, TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.yaml_loader import describe_error, load_yaml

CONFIG_SECTIONS = ("task", "format", "model", "train")
_CHECKPOINT_KEYS = ("arithsweep_version", "format_name", "format_version", "meta", "metrics",
                    "weights_sha256")


def model_field_names() -> set[str]:
    from arithsweep.core.config import ModelConfig

    return {f.name for f in fields(ModelConfig)} - {"vocab_size", "n_ctx"}


def train_field_names() -> set[str]:
    return {f.name for f in fields(TrainConfig)}


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """`["d_model=8", "final_norm=false"]` -> {"d_model": 8, "final_norm": False}."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set d_model=8")
        try:
            out[key] = load_yaml(raw) if raw.strip() else None
        except yaml.YAMLError:
            out[key] = raw
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    p = Path(path).expanduser()
    if p.is_dir():
        ck = (p / "config.json").is_file()
        what = " (a checkpoint: its config.json is the file)" if ck else ""
        raise ConfigError(f"config {p}: a folder, not a YAML or JSON file{what}")
    if not p.is_file():
        raise ConfigError(f"config {p}: no such file")
    try:
        text = p.read_text()
        doc = json.loads(text) if p.suffix == ".json" else load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config {p}: cannot parse ({describe_error(e)})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"config {p}: cannot parse ({msg})") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"config {p}: expected a mapping with sections {CONFIG_SECTIONS}")
    # a checkpoint's config.json carries its bookkeeping beside the sections; anything else is
    # a typo (`modle:`) that would silently train the defaults
    extra = sorted(str(k) for k in doc if k not in CONFIG_SECTIONS and k not in _CHECKPOINT_KEYS)
    if extra:
        shown = ", ".join(repr(k) if len(k) <= 40 else repr(k[:37] + "...") for k in extra[:5])
        more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
        raise ConfigError(f"config {p}: unknown section(s) {shown}{more}: expected "
                          f"{', '.join(CONFIG_SECTIONS)}")
    train = doc.get("train")
    start = train.get("init_from") if isinstance(train, dict) else None
    if isinstance(start, str) and start.strip() and not Path(start).expanduser().is_absolute():
        # a checkpoint names the start it continued relatively (checkpoint.keep_start): the
        # path is the file's, not the shell's
        doc = {**doc, "train": {**train, "init_from": str((p.parent / start).absolute())}}
    if "format_name" in doc:  # a checkpoint's config.json names its format this way
        doc = {**doc, "format": doc["format_name"]}
        if isinstance(doc.get("train"), dict):
            # saved before a default changed, it meant the old default (`sampler` absent:
            # "stream"), so retraining from it reproduces it; user YAML gets today's defaults
            doc["train"] = {**LEGACY_TRAIN_DEFAULTS, **doc["train"]}
    return {k: doc[k] for k in CONFIG_SECTIONS if k in doc and doc[k] is not None}


def split_overrides(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    mfields, tfields = model_field_names(), train_field_names()
    model, train = {}, {}
    for k, v in overrides.items():
        if k in mfields:
            model[k] = v
        elif k in tfields:
            train[k] = v
        else:
            raise ConfigError(
                f"unknown setting {k!r}: expected a model field ({', '.join(sorted(mfields))}) "
                f"or a train field ({', '.join(sorted(tfields))})"
            )
    return model, train


def build_configs(
    task_name: str | None,
    fmt: str | None,
    config_file: str | Path | None,
    overrides: dict[str, Any],
):
    """-> (Task, ModelConfig, TrainConfig), validated; the file's values, then the overrides."""
    from arithsweep.core.config import ModelConfig
    from arithsweep.core.data.formats import fill_places
    from arithsweep.core.data.tasks import get_task

    doc = read_config_file(config_file) if config_file else {}
    name = task_name or doc.get("task")
    if not name:
        raise ConfigError("no task given: pass --task (e.g. --task add3)")
    task = get_task(str(name), fmt if fmt is not None else doc.get("format"))
    m_over, t_over = split_overrides(overrides)
    file_model = dict(doc.get("model") or {})
    # A file may size the token and position tables above what the task needs (a published
    # model's own vocabulary or context, as the gpt-acc-jax anchor's 14 x 35); never below.
    sizes = {k: _table_size(file_model.pop(k, None), k, need)
             for k, need in (("vocab_size", task.vocab_size), ("n_ctx", task.n_ctx))}
    # the dataclass defaults are the only defaults: the file's values, then the overrides
    model_d = fill_places(task, {**file_model, **m_over})
    train_d = {**(doc.get("train") or {}), **t_over}
    try:
        model_cfg = ModelConfig.from_dict({**model_d, **sizes})
        train_cfg = TrainConfig.from_dict(train_d)
    except TypeError as e:  # a wrong type the dataclass could not even compare
        raise ConfigError(f"config: {e}") from None
    return task, model_cfg, train_cfg


def _table_size(value: Any, field: str, need: int) -> int:
    """A config file's vocab_size or n_ctx: the task's own when absent, refused when smaller."""
    if value is None:
        return need
    if not isinstance(value, int) or isinstance(value, bool) or value < need:
        raise ConfigError(f"model config: {field}={value!r}: must be a whole number >= {need}, "
                          f"what the task needs")
    return value
