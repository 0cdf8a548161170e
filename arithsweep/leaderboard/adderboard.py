"""Export a leaderboard entry as a self-contained AdderBoard submission file.

AdderBoard's `verify.py` imports a submission, calls `build_model()` -> `(model, metadata)`,
counts the model's unique parameters itself and calls `add(model, a, b) -> int`. The file we
write embeds the exact source of arithsweep's model config, tasks and model modules (so it runs
without arithsweep installed and cannot drift from the verified model), copies the checkpoint
next to itself, checks the weights' sha256 and loads them with safetensors: no pickle.

    arithsweep export 3 --adderboard submissions/add10_91.py
    python AdderBoard/verify.py submissions/add10_91.py
"""

from __future__ import annotations

import inspect
import re
import shutil
from pathlib import Path
from typing import Any

from arithsweep import __version__
from arithsweep.core.config import ABACUS_POSITIONS
from arithsweep.core.errors import ArithsweepError

# our own imports, one line or a parenthesised list over several ([^)] crosses newlines)
_IMPORT_OURS = re.compile(r"^from arithsweep(\.\w+)* import (\([^)]*\)|.*)$|^import arithsweep.*$",
                          re.M)
_FUTURE = re.compile(r"^from __future__ import annotations\s*$", re.M)

_SUBMISSION = '''
# ---------------------------------------------------------------- the submission
import hashlib as _hashlib
import json as _json
import pathlib as _pathlib

_WEIGHTS_DIR = _pathlib.Path(__file__).resolve().parent / {weights_dir!r}


def build_model():
    """AdderBoard entry point: (model, metadata). Weights via safetensors, never pickle."""
    from safetensors.torch import load_file

    doc = _json.loads((_WEIGHTS_DIR / "config.json").read_text())
    blob = (_WEIGHTS_DIR / "model.safetensors").read_bytes()
    if _hashlib.sha256(blob).hexdigest() != {sha256!r}:
        raise RuntimeError("model.safetensors does not match the exported sha256")
    cfg = ModelConfig.from_dict(doc["model"])
    state = load_file(str(_WEIGHTS_DIR / "model.safetensors"))
    model = ArithTransformer.from_member_state(cfg, state)
    model.eval()
    model.arith_task = get_task(doc["task"], doc.get("format_name"))
    return model, dict({metadata!r})


@torch.inference_mode()
def add(model, a, b):
    """a + b by generic greedy decoding (one token at a time, argmax, no answer-length tricks
    beyond the task's own maximum); -1 when the operands are outside the task's range."""
    task = model.arith_task
    limit = 10 ** task.n_digits
    if not (0 <= a < limit and 0 <= b < limit):
        return -1
    prompt = task.encode_prompt(torch.tensor([a]), torch.tensor([b]), torch.tensor([0]))[0]
    seq, out = list(prompt), []
    eos = task.vocab.index("<eos>") if "<eos>" in task.vocab else None
    for _ in range(task.answer_len):
        nxt = int(model(torch.tensor([seq]))[0, 0, -1].argmax())
        out.append(nxt)
        if nxt == eos or len(seq) >= task.n_ctx:
            break
        seq.append(nxt)
    got = task.decode_answer(out)
    return -1 if got is None else int(got)


if _STAND_IN:
    del _sys.modules[__name__]
'''


# encoding and tasks hand their training batches' rows to arithsweep's C helpers
# (core/data/native_rows.py) where those are built; a submission is one file, so it says "not
# here" and the torch ops (the same integers) run
_NO_NATIVE_ROWS = '''class native_rows:  # noqa: N801 (stands in for a module)
    MODES = ()

    @staticmethod
    def usable(*tensors):
        return False
'''


def _module_source(mod: Any) -> str:
    src = inspect.getsource(mod)
    src = _FUTURE.sub("", src)
    return _IMPORT_OURS.sub("", src)


def submission_source(row: dict[str, Any], weights_dir: str, author: str = "arithsweep") -> str:
    """The text of the submission file for a leaderboard row (an addition task)."""
    from arithsweep.core import (
        config_base,
        config_checks,
        errors,
        model_config,
        numbers,
        path_checks,
        train_config,
    )
    from arithsweep.core.data import encoding, formats, sampling, tasks
    from arithsweep.core.model import layers, model, weights

    metadata = {
        "name": f"arithsweep {row['task']} " + ("" if row.get("source") == "folder" else "#")
                + str(row["id"]),
        "author": author,
        "params": int(row["params"]),
        "architecture": row.get("architecture", ""),
        "tricks": _tricks(row.get("model_config") or {}),
        "verified_exact_match": row.get("exact_match"),
        "problems_checked": row.get("n_problems"),
        "suite": row.get("suite"),
    }
    source = {"folder": f"checkpoint folder {row['id']} (not on the leaderboard)",
              "published": f"published leaderboard entry {row['id']}"}.get(
        row.get("source"), f"leaderboard entry {row['id']}")
    measured = (f"verified exact match {row.get('exact_match')} on {row.get('n_problems')} "
                f"problems (suite {row.get('suite')})" if row.get("exact_match") is not None
                else "not verified by arithsweep")
    header = (
        f'"""AdderBoard submission exported by arithsweep {__version__} from {source}:\n'
        f"{row['task']}, {row['params']} unique parameters, {measured}.\nSelf-contained: the "
        f"model and task code below are arithsweep's "
        f'own, embedded verbatim; weights load from {weights_dir}/ via safetensors."""\n\n'
        "from __future__ import annotations\n\n"
        "import sys as _sys\n"
        "import types as _types\n\n"
        "# AdderBoard imports submissions with spec_from_file_location without registering them;\n"
        "# dataclasses need the defining module in sys.modules, so stand one in while loading.\n"
        "_STAND_IN = __name__ not in _sys.modules\n"
        "if _STAND_IN:\n"
        "    _sys.modules[__name__] = _types.ModuleType(__name__)\n"
    )
    parts = [header, "# ---------------------------------------------------------------- errors",
             _module_source(errors),
             "# ---------------------------------------------------------------- configs",
             _module_source(numbers),
             _module_source(config_checks),
             _module_source(path_checks),
             _module_source(config_base),
             _module_source(model_config),
             _module_source(train_config),
             "# ---------------------------------------------------------------- sampling",
             _module_source(sampling),
             "# ---------------------------------------------------------------- formats",
             _module_source(formats),
             "# ---------------------------------------------------------------- encoding",
             _NO_NATIVE_ROWS,
             _module_source(encoding),
             "# ---------------------------------------------------------------- tasks",
             _module_source(tasks),
             "# ---------------------------------------------------------------- layers",
             _module_source(layers),
             "# ---------------------------------------------------------------- weights",
             _module_source(weights),
             "# ---------------------------------------------------------------- model",
             _module_source(model),
             _SUBMISSION.format(weights_dir=weights_dir, sha256=row["sha256"], metadata=metadata)]
    return "\n".join(parts)


def _tricks(cfg: dict[str, Any]) -> list[str]:
    t = []
    if cfg.get("tie_embeddings"):
        t.append("tied embeddings")
    if cfg.get("rank"):
        t.append(f"low-rank projections (r={cfg['rank']})")
    if cfg.get("tie_kv"):
        t.append("tied K=V")
    if cfg.get("share_norms"):
        t.append("shared norms")
    if cfg.get("pos") in ("rope", "sinusoidal", *ABACUS_POSITIONS, "none"):
        t.append(f"{cfg['pos']} positions")
    if (cfg.get("n_loops") or 1) > 1:
        t.append(f"looped x{cfg['n_loops']}")
    if cfg.get("activation") == "swiglu":
        t.append("swiglu")
    named = {"qk_norm": "QK-norm", "tie_k": "K from Q", "tie_v": "V = Q", "tie_o": "O = Q^T",
             "n_kv_heads": "grouped K/V heads", "embed": "parametric embedding",
             "split_positions": "split token/position subspaces", "mlp_down": "tied MLP down",
             "tie_gate": "gate = a * up", "unembed_head": "unembedding head",
             "v_from_head": "V = head^T", "qk_from_positions": "Q/K from positions"}
    def on(k: str) -> bool:  # equal K/V and query head counts are not grouped
        v = cfg.get(k)
        return v not in (None, False, "none", "table", "own") and not (
            k == "n_kv_heads" and v == cfg.get("n_heads"))

    t += [f"{label} ({cfg[k]})" if isinstance(cfg[k], str) else label
          for k, label in named.items() if on(k)]
    return t


def export_adderboard(row: dict[str, Any], dest: str | Path) -> list[Path]:
    """Write `dest` (.py) and copy the checkpoint to `<stem>_weights/` beside it. `row` is a
    leaderboard row (local or published) or, for a checkpoint folder the board does not hold,
    `entry_lookup.export_row`'s bare one, filled in here from the weights."""
    if row.get("id") is None:
        row = _folder_row(row)
    if row.get("task") != "add10":  # its protocol draws 10-digit operands (adderboard_check)
        raise ArithsweepError(
            f"{_what(row)} is a {row.get('task')} model: AdderBoard checks 10-digit "
            f"addition (add10) only")
    src = Path(row["checkpoint_path"])
    for name in ("model.safetensors", "config.json"):
        if not (src / name).is_file():
            raise ArithsweepError(f"{_what(row)}: checkpoint file {src / name} is missing")
    from arithsweep.core.hashing import sha256_file

    if sha256_file(src / "model.safetensors") != row["sha256"]:
        raise ArithsweepError(
            f"{_what(row)}: {src / 'model.safetensors'} changed since it was verified")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    weights = dest.parent / f"{dest.stem}_weights"
    weights.mkdir(exist_ok=True)
    for name in ("model.safetensors", "config.json"):
        shutil.copyfile(src / name, weights / name)
    dest.write_text(submission_source(row, weights.name))
    return [weights]


def _what(row: dict[str, Any]) -> str:
    """How messages name the exported model: its entry, or its folder."""
    if row.get("source") == "folder":
        return f"checkpoint {row['checkpoint_path']}"
    return ("published " if row.get("source") == "published" else "") + f"entry {row.get('id')}"


def _folder_row(row: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint folder the board does not hold, as the row a submission is written from:
    task, parameter count (recounted from the tensors) and configs from the weights; no
    verified figures (the submission says so, and `--check` measures AdderBoard's own)."""
    from arithsweep.core.model.checkpoint import load_checkpoint

    ck = load_checkpoint(row["checkpoint_path"])
    return {**row, "id": Path(row["checkpoint_path"]).absolute().name, "task": ck.task.name,
            "params": ck.params, "architecture": ck.model_cfg.summary(),
            "model_config": ck.model_cfg.to_dict(), "exact_match": None, "n_problems": None,
            "suite": None, "sha256": ck.sha256}
