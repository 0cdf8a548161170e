"""Shared fixtures: one small add2 model trained once per session and reused by the evaluate,
checkpoint, verify, export and CLI tests (training is the slow part of the suite)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

ADD2_MODEL = {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32}
ADD2_TRAIN = {"steps": 4000, "batch_size": 128, "lr": 1e-2, "warmup": 50, "seeds": 2,
              "eval_every": 100, "eval_size": 1024, "early_stop": False}


@pytest.fixture(scope="session")
def add2_trained(tmp_path_factory):
    """(TrainResult, checkpoint dir) of a small add2 model trained until its best seed gets
    every one of the 10^4 add2 problems right (checked exhaustively at each evaluation)."""
    from arithsweep.core.evaluate import exact_match
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.train import train

    task, m, t = build_configs("add2", None, None, {**ADD2_MODEL, **ADD2_TRAIN})
    every = task.enumerate_all()

    def all_right(point, result):
        return bool(exact_match(result.best_model(), task, *every).all())

    result = train(task, m, t, on_eval=all_right)
    path = tmp_path_factory.mktemp("ckpt") / "add2"
    result.save_best(path)
    return result, path
