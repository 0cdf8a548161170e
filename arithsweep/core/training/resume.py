"""A training run's whole state on disk, so that a killed run continues bit for bit.

A state is two files in one folder, written every `TrainConfig.checkpoint_every` steps (or about
every `checkpoint_seconds` of wall time) and when a run stops:

    state-0000012000.safetensors   every tensor: the pack's weights, AdamW moments and step
                                   count, Grokfast EMA, alive/running masks, the loss sums,
                                   each proposal's best member state, mined polish errors,
                                   each generator's state (data streams, abacus offsets, torch)
    state-0000012000.json          everything else: format, arithsweep and arithmetic version
                                   (core.arithmetic; a state without it: 1), the configs,
                                   the step, each proposal's history, best step and seed, stop
                                   reason, the data streams' positions, the caller's own state
                                   (the search trial's plateau counters...), and the sha256 of
                                   the tensors file

Safetensors + JSON like every checkpoint here: nothing is unpickled. Each file is written to a
temporary name and renamed into place, the tensors first, so a kill at any moment leaves the
newest complete pair readable; older pairs are deleted only after a newer one is in place.
`latest_state` reads the newest pair whose tensors match their recorded sha256.

    from arithsweep.core.training.resume import latest_state
    state = latest_state("runs/add3/resume")   # None if the folder holds no state
    print(state.step, state.doc["finished"])
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from arithsweep import __version__
from arithsweep.core.arithmetic import ARITHMETIC, kind_of, same_floats, state_refused, version_of
from arithsweep.core.arithmetic import FIELD as ARITH_FIELD
from arithsweep.core.errors import CheckpointError
from arithsweep.core.hashing import sha256_file

STATE_FORMAT = "arithsweep-train-state"
STATE_VERSION = 1  # bump when what a state holds changes; other versions are refused
STATE_DIR = "resume"  # a `train --out DIR` run keeps its states in DIR/resume
_NAME = re.compile(r"^state-(\d{10})\.json$")


@dataclass
class RunState:
    """One state read back from disk."""

    path: Path  # its JSON file
    step: int
    doc: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    @property
    def finished(self) -> bool:
        return bool(self.doc.get("finished"))


@dataclass
class Checkpointing:
    """What `train_population` needs to write states, and the state to continue from.

    `extra` returns the caller's own JSON-safe state (saved in every state's "extra"); `on_save`
    runs after each state is written (a search trial hands it to Tune there); `want(step)` lets
the caller ask for a state at an evaluation besides the regular ones."""

    dir: Path
    every_steps: int = 0  # 0: by wall time
    every_seconds: float = 300.0
    align: int = 1  # write only on steps divisible by this (a search trial: its evaluations)
    extra: Callable[[], dict[str, Any]] | None = None
    on_save: Callable[[Path, int], None] | None = None
    want: Callable[[int], bool] | None = None  # the caller asks for a state at this step too
    resume: RunState | None = None
    last_write: float = field(default_factory=time.perf_counter)

    def due(self, step: int) -> bool:
        if step % self.align:
            return False
        if self.want is not None and self.want(step):
            return True
        if self.every_steps:
            return step % self.every_steps == 0
        return time.perf_counter() - self.last_write >= self.every_seconds


def _fsync_write(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_state(d: str | Path, step: int, tensors: dict[str, torch.Tensor],
                doc: dict[str, Any]) -> Path:
    """Write one state atomically into folder `d`; older states there are removed after."""
    d = Path(d).absolute()
    d.mkdir(parents=True, exist_ok=True)
    stem = f"state-{step:010d}"
    weights = d / f"{stem}.safetensors"
    flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    _fsync_write(weights, lambda p: save_file(flat, str(p)))
    full = {"format": STATE_FORMAT, "state_version": STATE_VERSION,
            "arithsweep_version": __version__, "step": int(step), **doc,
            ARITH_FIELD: ARITHMETIC,  # what a resume checks: the floats it would go on with
            "tensors_file": weights.name, "tensors_sha256": sha256_file(weights)}
    text = json.dumps(full, indent=1, sort_keys=True)  # NaN stays NaN: Python reads it back
    path = d / f"{stem}.json"
    _fsync_write(path, lambda p: p.write_text(text))
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)  # the renames themselves survive a power cut
    finally:
        os.close(fd)
    for old in d.glob("state-*"):
        if old.name not in (weights.name, path.name):
            old.unlink(missing_ok=True)
    return path


def latest_state(d: str | Path, continuing: bool = True) -> RunState | None:
    """The newest complete state in `d`, or None if there is none. A state of another format,
    state version or arithsweep version is refused with a CheckpointError naming why, and so
    is one of another arithmetic version when the run is `continuing` it (a resume), which
    would go on with other floats; a new run that only starts from its weights or moments
    (init_from) is not continuing it."""
    d = Path(d).absolute()
    if not d.is_dir():
        return None
    names = sorted((p for p in d.iterdir() if _NAME.match(p.name)), reverse=True)
    for path in names:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a torn write cannot happen (rename), but a hand-edited file can
        _check_doc(path, doc, continuing)
        weights = d / str(doc.get("tensors_file", ""))
        if not weights.is_file() or sha256_file(weights) != doc.get("tensors_sha256"):
            continue
        try:
            tensors = load_file(str(weights))
        except (SafetensorError, OSError):
            continue
        return RunState(path=path, step=int(doc["step"]), doc=doc, tensors=tensors)
    return None


def _check_doc(path: Path, doc: dict[str, Any], continuing: bool) -> None:
    if doc.get("format") != STATE_FORMAT:
        raise CheckpointError(f"{path}: not an arithsweep training state")
    if doc.get("state_version") != STATE_VERSION:
        raise CheckpointError(f"{path}: training state version {doc.get('state_version')} "
                              f"cannot be resumed by this arithsweep (it reads {STATE_VERSION})")
    if doc.get("arithsweep_version") != __version__:
        raise CheckpointError(f"{path}: written by arithsweep {doc.get('arithsweep_version')}, "
                              f"this is {__version__}; a run resumes bit for bit only with "
                              f"the version that started it")
    # a state of an older version goes on where no version since moved its kind's floats
    if continuing and not same_floats(version_of(doc), kind_of(doc)):
        raise CheckpointError(state_refused(str(path), version_of(doc)))


# TrainConfig fields added after states were first written, at their defaults: a state
# written before them lacks the key, and is the same run
# fields added after states were written, at the value that trains as before they were
_LATER_FIELDS = {"path": None, "init_moments": False, "near_zero_share": 0.0, "cull": None,
                 "stop_at": None}


def comparable(train_dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Train configs less the fields that only say when states are written, and where the
    run's start was: a state holds the weights it reached, and a search trial's continued
    round finds its start in another temporary folder after a restore."""
    return [{k: v for k, v in d.items() if not k.startswith("checkpoint_") and k != "init_from"
             and not (k in _LATER_FIELDS and v == _LATER_FIELDS[k])} for d in train_dicts]


def same_run(state: RunState, model_cfg: Any, cfgs: list[Any]) -> bool:
    """Was `state` written by a run of this model config and these train configs?"""
    return (state.doc.get("model") == model_cfg.to_dict()
            and comparable(state.doc.get("train") or []) == comparable(
                [c.to_dict() for c in cfgs]))


def generator_state(gen: torch.Generator) -> torch.Tensor:
    return gen.get_state().clone()  # (n,) uint8


def set_generator(gen: torch.Generator, state: torch.Tensor) -> torch.Generator:
    return gen.set_state(state.clone())


def sub(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under `prefix` with the prefix removed."""
    n = len(prefix)
    return {k[n:]: v for k, v in tensors.items() if k.startswith(prefix)}


def prefixed(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {prefix + k: v for k, v in tensors.items()}


# the tensors of a pack's state stacked on its K members (population._PackRun.state)
_PER_MEMBER = ("model.", "opt.m", "opt.v", "grokfast.")
_MEMBER_ROWS = ("opt.wd", "alive", "running", "loss_sum")


def proposal_state(state: RunState, j: int) -> RunState:
    """Proposal j's part of a pack's state, as the state of a run that trained it alone: the
    replay of one proposal a search deadline cut inside a pack continues from it. The pack's
    tensors are stacked on its members (proposal j's are `o:o+n`, its seeds), each proposal's
    data streams and result are its own (`data.<j>.`, `result<j>.`)."""
    counts = [int(t["seeds"]) for t in state.doc["train"]]
    o, n = sum(counts[:j]), counts[j]
    t = {k: v[o:o + n] for k, v in state.tensors.items()
         if k.startswith(_PER_MEMBER) or k in _MEMBER_ROWS}
    t.update({k: state.tensors[k] for k in ("opt.t", "torch_rng") if k in state.tensors})
    t.update({f"abacus_gen.{i - o}": state.tensors[f"abacus_gen.{i}"] for i in range(o, o + n)
              if f"abacus_gen.{i}" in state.tensors})
    t.update(prefixed(sub(state.tensors, f"data.{j}."), "data.0."))
    t.update(prefixed(sub(state.tensors, f"result{j}."), "result0."))
    doc, data = dict(state.doc), state.doc["data"]
    doc.update(train=[doc["train"][j]], results=[doc["results"][j]],
               data={**data, "streams": [data["streams"][j]], "running": [data["running"][j]]})
    return RunState(path=state.path, step=state.step, doc=doc, tensors=t)


def is_state_dir(path: str | Path) -> bool:
    """Is `path` a run's state folder (`<out>/resume`, what `init_from` continues member by
    member) rather than a checkpoint folder?"""
    p = Path(path)
    return p.is_dir() and not (p / "config.json").is_file() and any(
        _NAME.match(q.name) for q in p.iterdir())


def start_members_from_state(model: Any, path: str | Path) -> int:
    """Every member of `model` takes its own weights from the newest state in the run state
    folder `path` (TrainConfig.init_from = `<out>/resume`): a finished pack continued on
    another schedule (tbukic's cosine phase, then its Grokfast phase), member i from member i.
    Only the weights: moments, Grokfast average, decay drops and data start afresh. The
    state's architecture and member count must be the model's. Returns the state's step."""
    state = latest_state(path, continuing=False)
    if state is None:
        raise CheckpointError(f"init_from {path}: no training state in it")
    if state.doc.get("model") != model.cfg.to_dict():
        raise CheckpointError(f"init_from {path}: its architecture is not this run's "
                              f"({model.cfg.summary()})")
    weights = sub(state.tensors, "model.")
    params = dict(model.named_parameters())
    shapes = {n: tuple(t.shape) for n, t in weights.items()}
    if shapes != {n: tuple(p.shape) for n, p in params.items()}:
        k = next(iter(weights.values())).shape[0] if weights else 0
        raise CheckpointError(f"init_from {path}: a state of {k} members; this run trains "
                              f"{model.k} (seeds must match to continue member by member)")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(weights[n].to(p.device))
    return state.step


def culled_in_state(path: str | Path) -> torch.Tensor | None:
    """(K,) bool: the members a cull stopped in the newest state in `path` (TrainConfig.cull),
    which stay stopped in a path's next phase; None for a state from before culls."""
    state = latest_state(path, continuing=False)
    return None if state is None else state.tensors.get("culled")


@torch.no_grad()
def carry_moments(opt: Any, grokfast: Any, path: str | Path) -> None:
    """AdamW's moments and step count, and the Grokfast average where this run filters, from
    the newest state in `path` (TrainConfig.init_moments: a path phase with `moments: keep`),
    member i from member i; the decay stays this run's own (its drops are earned again)."""
    if not is_state_dir(path):
        raise CheckpointError(f"init_from {path}: init_moments needs a run's state folder "
                              f"(<out>/resume), not a checkpoint")
    state = latest_state(path, continuing=False)
    if state is None:
        raise CheckpointError(f"init_from {path}: no training state in it")
    t = sub(state.tensors, "opt.")
    opt.t.copy_(t["t"])
    for i, (m, v) in enumerate(zip(opt.m, opt.v)):
        m.copy_(t[f"m{i}"].to(m.device))
        v.copy_(t[f"v{i}"].to(v.device))
    n = sum(1 for k in state.tensors if k.startswith("grokfast."))
    if grokfast is not None and n:
        grokfast.ema = [state.tensors[f"grokfast.{i}"].clone().to(opt.t.device)
                        for i in range(n)]


def state_origin(init_from: str | None) -> dict[str, Any]:
    """{"init_from_state": ...} for a run that began from every member's state in another run's
    state folder (`init_from` = `<out>/resume`): that run's step, arithmetic, task, format,
    model and train config, from the state's own job, so that a checkpoint says how its start
    retrains (the state itself is not a checkpoint: publish cannot copy it). {} for anything
    else, or when the state is gone or holds no job (a search trial's)."""
    if not init_from or not is_state_dir(init_from):
        return {}
    try:
        state = latest_state(init_from, continuing=False)
    except CheckpointError:
        return {}
    job = ((state.doc.get("extra") or {}).get("job") or {}) if state is not None else {}
    if not isinstance(job.get("train"), dict):
        return {}
    return {"init_from_state": {"step": state.step, ARITH_FIELD: version_of(state.doc),
                                **{k: job[k] for k in (
        "task", "format", "model", "train") if k in job}}}
