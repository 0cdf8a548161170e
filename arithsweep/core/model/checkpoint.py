"""Checkpoints: one model as safetensors weights + a JSON config, never pickle.

A checkpoint is a directory:

    model.safetensors   one member's tensors, keys = ArithTransformer parameter names, no seed dim
    config.json         {"format": "arithsweep-checkpoint", "format_version": 1, "task": "add3",
                         "format_name": "pad,revans,fwdops,delim", "model": {ModelConfig},
                         "train": {TrainConfig} | null, "metrics": {...},
                         "meta": {..., "arithmetic": 2},
                         "weights_sha256": "<hex of model.safetensors>"}

meta.arithmetic is the version of training's arithmetic that made the weights
(core.arithmetic, which names the commit that retrains them); a checkpoint without it: 1.

Third-party checkpoints in this format load the same way (`train`, `metrics`, `meta` and
`weights_sha256` are optional). Loading checks the file is safetensors, the hash, and every
tensor's name and shape against the config; it never unpickles anything.

    from arithsweep.core.model.checkpoint import load_checkpoint
    ck = load_checkpoint("runs/add3/best")   # ck.model, ck.task, ck.sha256 …
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from arithsweep import __version__
from arithsweep.core.arithmetic import ARITHMETIC, version_of
from arithsweep.core.arithmetic import FIELD as ARITH_FIELD
from arithsweep.core.config import LEGACY_TRAIN_DEFAULTS, TrainConfig
from arithsweep.core.data.tasks import Task, get_task
from arithsweep.core.errors import ArithsweepError, CheckpointError
from arithsweep.core.hashing import sha256_file
from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT = "arithsweep-checkpoint"
FORMAT_VERSION = 1
MAX_HEADER = 100 * 1024 * 1024  # safetensors caps its JSON header at 100 MB
# a continued run's start (TrainConfig.init_from), copied inside the checkpoint it led to and
# named relatively: a config file's relative init_from is read against the file's folder
START = "start"


@dataclass
class Checkpoint:
    path: Path  # the checkpoint directory, absolute
    model: ArithTransformer  # k = 1
    model_cfg: ModelConfig
    task: Task
    train_cfg: TrainConfig | None
    sha256: str  # of model.safetensors
    params: int  # unique parameters recomputed from the loaded tensors
    metrics: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def arithmetic(self) -> int:
        """The version of training's arithmetic that made it (core.arithmetic); 1 for a
        checkpoint saved before the field."""
        return version_of(self.meta)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save_checkpoint(
    path: str | Path,
    model: ArithTransformer,
    task: Task,
    member: int = 0,
    train_cfg: TrainConfig | None = None,
    metrics: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> str:
    """Write member `member` of `model` to directory `path`; returns the weights' sha256."""
    path = Path(path).absolute()
    path.mkdir(parents=True, exist_ok=True)
    state = model.member_state(member)
    tmp = path / (WEIGHTS + ".tmp")
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp))
    os.replace(tmp, path / WEIGHTS)
    digest = sha256_file(path / WEIGHTS)
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "arithsweep_version": __version__,
        "task": task.name,
        "format_name": task.fmt.name,
        "model": model.cfg.to_dict(),
        "train": train_cfg.to_dict() if train_cfg else None,
        "metrics": metrics or {},
        # only training saves checkpoints: the weights are this arithmetic's (over a copied
        # meta's, e.g. a finished model's start's), which names the commit that retrains them
        "meta": {**(meta or {}), "params": count_params(model), ARITH_FIELD: ARITHMETIC},
        "weights_sha256": digest,
    }
    _write_config(path, doc)
    return digest


def add_meta(path: str | Path, **meta: Any) -> None:
    """Merge facts learnt after saving (e.g. a search trial's seeds_reached) into config.json's
    `meta`; the weights and their sha256 are untouched. Verification never reads meta for
    accuracy, so this can describe an entry but not change its verified figures."""
    d = _resolve_dir(path)
    doc = _read_config(d)
    doc["meta"] = {**(doc.get("meta") or {}), **meta}
    _write_config(d, doc)


def _write_config(d: Path, doc: dict[str, Any]) -> None:
    _atomic_write(d / CONFIG, json.dumps(doc, indent=2, sort_keys=True).encode())


def _resolve_dir(path: str | Path) -> Path:
    p = Path(path).expanduser().absolute()
    if p.is_file() and p.name in (WEIGHTS, CONFIG):
        p = p.parent
    if not p.exists():
        raise CheckpointError(f"checkpoint {p}: no such file or directory")
    if not p.is_dir():
        raise CheckpointError(
            f"checkpoint {p}: expected a directory holding {WEIGHTS} and {CONFIG}"
        )
    for name in (WEIGHTS, CONFIG):
        if not (p / name).is_file():
            raise CheckpointError(f"checkpoint {p}: missing {name}")
    return p


def _check_safetensors_header(path: Path) -> None:
    """Reject anything that is not a safetensors file before handing it to the parser."""
    with open(path, "rb") as f:
        head = f.read(9)
    size = path.stat().st_size
    if len(head) < 9:
        raise CheckpointError(f"checkpoint {path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > MAX_HEADER or 8 + n > size or head[8:9] != b"{":
        raise CheckpointError(
            f"checkpoint {path}: not a safetensors file (pickled .pt/.bin files are never loaded)"
        )


def _read_config(d: Path) -> dict[str, Any]:
    try:
        doc = json.loads((d / CONFIG).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint {d}: {CONFIG} is not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict) or "task" not in doc:
        raise CheckpointError(f"checkpoint {d}: {CONFIG} needs at least 'task' and 'model'")
    if doc.get("format", FORMAT) != FORMAT or doc.get("format_version", 1) > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {d}: unsupported format {doc.get('format')!r} "
            f"version {doc.get('format_version')!r}"
        )
    return doc


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Load and check a checkpoint directory; any problem is one CheckpointError line."""
    d = _resolve_dir(path)
    doc = _read_config(d)
    try:
        task = get_task(str(doc["task"]), doc.get("format_name"))
        cfg = ModelConfig.from_dict(doc["model"])
        train_cfg = (TrainConfig.from_dict({**LEGACY_TRAIN_DEFAULTS, **doc["train"]})
                     if doc.get("train") else None)  # saved without `sampler`: "stream"
    except (ArithsweepError, TypeError) as e:
        raise CheckpointError(f"checkpoint {d}: {e}") from None
    if cfg.vocab_size < task.vocab_size:  # a larger table (unused rows) is allowed
        raise CheckpointError(
            f"checkpoint {d}: model vocab_size {cfg.vocab_size} is smaller than task "
            f"{task.name} needs ({task.vocab_size} tokens)"
        )
    if cfg.n_ctx < task.n_ctx:
        raise CheckpointError(
            f"checkpoint {d}: model n_ctx {cfg.n_ctx} is shorter than task {task.name} needs "
            f"({task.n_ctx})"
        )
    weights = d / WEIGHTS
    _check_safetensors_header(weights)
    digest = sha256_file(weights)
    claimed = doc.get("weights_sha256")
    if claimed is not None and claimed != digest:
        raise CheckpointError(
            f"checkpoint {d}: {WEIGHTS} does not match the sha256 in {CONFIG} "
            "(the weights were changed or corrupted)"
        )
    try:
        state = load_file(str(weights), device=str(map_location))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {d}: corrupt {WEIGHTS} ({e})") from None
    model = ArithTransformer.from_member_state(cfg, state)
    # the count comes from the tensors actually loaded, never from metadata
    params = sum(t.numel() for t in state.values())
    if params != count_params(model):
        raise CheckpointError(
            f"checkpoint {d}: tensors hold {params} values but the config's model has "
            f"{count_params(model)} parameters"
        )
    meta = doc.get("meta") or {}
    claimed_params = meta.get("params")
    if claimed_params is not None and claimed_params != params:
        raise CheckpointError(
            f"checkpoint {d}: metadata claims {claimed_params} parameters but the weights "
            f"hold {params}"
        )
    return Checkpoint(
        path=d, model=model.to(map_location), model_cfg=cfg, task=task, train_cfg=train_cfg,
        sha256=digest, params=params, metrics=doc.get("metrics") or {}, meta=meta,
    )


def start_members_from(model: ArithTransformer, task: Task, path: str | Path) -> None:
    """Every member of `model` (a pack) takes the weights of the checkpoint at `path`
    (TrainConfig.init_from). Its task format and architecture must be the pack's: weights of
    another format read other tokens, and a mismatched shape would be caught too late."""
    ck = load_checkpoint(path)
    if (ck.task.name, ck.task.fmt.name) != (task.name, task.fmt.name):
        raise CheckpointError(f"init_from {ck.path}: a {ck.task.name} model in format "
                              f"{ck.task.fmt.name}; this run trains {task.name} in "
                              f"{task.fmt.name}")
    if ck.model_cfg != model.cfg:
        raise CheckpointError(f"init_from {ck.path}: its architecture ({ck.model_cfg.summary()}, "
                              f"{ck.params} p) is not this run's ({model.cfg.summary()})")
    state = ck.model.member_state(0)
    for i in range(model.k):
        model.load_member_state(i, state)


def keep_start(train_cfg: TrainConfig | None, path: str | Path,
               ) -> tuple[TrainConfig | None, dict[str, Any]]:
    """For a checkpoint about to be saved at `path` by a run that started from
    `train_cfg.init_from`: copy that start (and its own start, if it was continued too) to
    `path`/start and return the train config naming it relatively, with {"init_from_sha256"}.
    The checkpoint's `--config` then retrains from wherever it is copied (a published entry,
    a search trial's temporary round start gone with its worker). A start that is gone (a
    resumed run's) and was never copied leaves the config as it is and returns {}."""
    if train_cfg is None or not train_cfg.init_from:
        return train_cfg, {}
    dst = Path(path).absolute() / START
    try:
        src = _resolve_dir(train_cfg.init_from)
    except CheckpointError:
        src = None
    if src is not None and (src / WEIGHTS).is_file() and src.resolve() != dst.resolve():
        _replace_start(src, dst)
    if not (dst / WEIGHTS).is_file():
        return train_cfg, {}
    return replace(train_cfg, init_from=START), {"init_from_sha256": sha256_file(dst / WEIGHTS)}


def keep_finish_start(src: str | Path, out: str | Path) -> None:
    """A finished checkpoint (`arithsweep finish`) keeps the model its finishers began from in
    `out`/start (with that model's own start, if it had one), so its retrain command, `finish`
    from that start, runs wherever the checkpoint is copied."""
    _replace_start(_resolve_dir(src), Path(out).absolute() / START)


def _replace_start(src: Path, dst: Path) -> None:
    """`src` (and its chain of starts) copied to `dst` through a temporary folder, so a copy
    cut short never stands as the start."""
    tmp = dst.with_name(START + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _copy_start(src, tmp)
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)


def _copy_start(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for name in (WEIGHTS, CONFIG):
        shutil.copyfile(src / name, dst / name)
    if (src / START / WEIGHTS).is_file():  # a start that was itself continued: the chain
        _copy_start(src / START, dst / START)
