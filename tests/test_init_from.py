"""`TrainConfig.init_from` / `arithsweep train --init-from`: every seed starts from a checkpoint.

The add2 fixture's checkpoint answers every add2 problem. A run started from it at a tiny lr
answers them all at its first evaluation (a fresh start is at chance there), so the weights
really came from the checkpoint; another architecture or format is refused in one line before
training, and the saved model names the weights it started from.
"""

from __future__ import annotations

import json

import pytest
from conftest import ADD2_MODEL
from test_cli import run  # tests/ is on sys.path (pytest's rootdir import mode)

from arithsweep.core.errors import CheckpointError
from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.population import train

# a continuation that barely moves: its first evaluation shows where it started
CALM = {"steps": 20, "eval_every": 10, "lr": 1e-7, "warmup": 0, "weight_decay": 0.0,
        "seeds": 2, "early_stop": False, "eval_size": 1024}


def _configs(fmt=None, **extra):
    return build_configs("add2", fmt, None, {**ADD2_MODEL, **CALM, **extra})


def test_every_seed_starts_from_the_checkpoint(add2_trained):
    _, path = add2_trained
    task, m, t = _configs(init_from=str(path))
    first = train(task, m, t).history[0].exact_match  # after 10 steps at lr 1e-7
    assert all(e == 1.0 for e in first)
    task, m, t = _configs()  # the same run from a fresh initialisation
    assert max(train(task, m, t).history[0].exact_match) < 0.5


def test_another_architecture_is_refused(add2_trained):
    _, path = add2_trained
    task, m, t = _configs(init_from=str(path), d_ff=8)
    with pytest.raises(CheckpointError, match="architecture"):
        train(task, m, t)


def test_another_format_is_refused(add2_trained):
    _, path = add2_trained
    ck = load_checkpoint(path)
    other = "nopad" if ck.task.fmt.pad else "pad"
    task, m, t = _configs(other, init_from=str(path))
    with pytest.raises(CheckpointError, match="format"):
        train(task, m, t)


def test_cli_records_the_start_and_refuses_a_missing_one(add2_trained, tmp_path, capsys):
    _, path = add2_trained
    cfg = tmp_path / "c.json"
    ck = load_checkpoint(path)
    cfg.write_text(json.dumps({"task": "add2", "model": ADD2_MODEL, "train": CALM}))
    out = tmp_path / "cont"
    code, o, e = run(capsys, "train", "--config", cfg, "--init-from", path, "-o", out, "--json")
    assert code == 0, e
    assert load_checkpoint(out).meta["init_from_sha256"] == ck.sha256
    assert json.loads(o)["eval_exact_match"] == 1.0
    code, _, e = run(capsys, "train", "--config", cfg, "--init-from", tmp_path / "nowhere",
                     "-o", tmp_path / "x")
    assert code != 0 and len(e.strip().splitlines()) == 1 and "nowhere" in e
