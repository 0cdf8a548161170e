"""Shared fixtures: one small add2 model trained once per session and reused by the evaluate,
checkpoint, verify, export and CLI tests (training is the slow part of the suite)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

REPO = Path(__file__).resolve().parent.parent
ADD2_MODEL = {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32}
ADD2_TRAIN = {"steps": 4000, "batch_size": 128, "lr": 1e-2, "warmup": 50, "seeds": 2,
              "eval_every": 100, "eval_size": 1024, "early_stop": False}


@pytest.fixture(scope="session")
def add2_trained(tmp_path_factory):
    """(TrainResult, checkpoint dir) of a small add2 model trained until its best seed gets
    every one of the 10^4 add2 problems right (checked exhaustively at each evaluation)."""
    from arithsweep.core.evaluation.evaluate import exact_match
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train

    task, m, t = build_configs("add2", None, None, {**ADD2_MODEL, **ADD2_TRAIN})
    every = task.enumerate_all()

    def all_right(point, result):
        return bool(exact_match(result.best_model(), task, *every).all())

    result = train(task, m, t, on_eval=all_right)
    path = tmp_path_factory.mktemp("ckpt") / "add2"
    result.save_best(path)
    return result, path


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray instance for the real-Ray search tests (one per module)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    if ray.is_initialized():  # another module's instance: share it, leave it running
        yield ray
        return
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    yield ray
    ray.shutdown()


@pytest.fixture
def ckpt(add2_trained, tmp_path):
    """A private copy of the add2 fixture's checkpoint, for tests that damage or record it."""
    dest = tmp_path / "ck"
    shutil.copytree(add2_trained[1], dest)
    return dest


def pytest_collection_modifyitems(config, items):
    """The files with the most `slow` tests (real searches, kills and resumes) run first, each
    file's tests still together and in order: the suite runs on two workers (pytest-xdist,
    pyproject's addopts), and the long tests started last would leave one worker idle at the
    end. Every worker collects the same order, as xdist requires."""
    def file_of(item) -> str:
        return item.nodeid.split("::")[0]

    slow: dict[str, int] = {}
    for item in items:
        slow[file_of(item)] = slow.get(file_of(item), 0) + bool(item.get_closest_marker("slow"))
    order = {path: i for i, path in enumerate(slow)}
    items.sort(key=lambda it: (-slow[file_of(it)], order[file_of(it)]))


@pytest.fixture
def board_clone(tmp_path, monkeypatch) -> Path:
    """A copy of the published board (no pictures) and no database, as the working folder:
    what a fresh clone's user sees."""
    shutil.copytree(REPO / "leaderboard", tmp_path / "leaderboard",
                    ignore=shutil.ignore_patterns("pictures", "leaderboard.db*"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARITHSWEEP_DB", raising=False)  # the default: leaderboard/leaderboard.db
    return tmp_path
