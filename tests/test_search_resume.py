"""A real search (Ray Tune, Optuna, MLflow) SIGKILLed mid-trial continues that trial from its
checkpoint on `search --resume`: the resumed trial's reports start past the step its training
state had reached, and the search completes.

    .venv/bin/python -m pytest tests/test_search_resume.py -q
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# a model too small to reach the target, so its one trial trains every step of its schedule
SPACE = """
name: test-long
model:
  n_layers: 1
  d_model: 4
  n_heads: 1
  d_ff: {choice: [4]}
train:
  steps: 2400
  lr: 0.01
  batch_size: 64
  seeds: 2
  eval_every: 100
  eval_size: 256
  checkpoint_every: 200
"""
TOTAL = 2400


def _search(root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "arithsweep", "search", "--root", str(root),
            "--db", f"sqlite:///{root / 'lb.db'}", "--cpus-per-trial", "1", "-j", "1",
            "--patience", "1000", "--rounds", "1", "--json", *args]


def _states(root: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1])
                  for p in root.glob("k/tune/*/checkpoint_*/state/state-*.json"))


def _reports(root: Path) -> list[dict]:
    files = list(root.glob("k/tune/*/result.json"))
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_killed_search_continues_its_trial_mid_run(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    root = tmp_path / "searches"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    first = subprocess.Popen(
        _search(root, "--task", "add2", "--target", "0.99", "--space", str(space),
                "--trials", "1", "--name", "k"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        start_new_session=True)  # its own process group: Ray's processes die with it
    deadline = time.monotonic() + 420  # a guard against a hang, not a timing assumption
    while first.poll() is None and time.monotonic() < deadline:
        states = _states(root) if root.exists() else []
        if states and states[-1] >= 600:
            os.killpg(first.pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    first.wait()
    os.killpg(first.pid, signal.SIGKILL) if _alive(first.pid) else None
    assert first.returncode == -signal.SIGKILL, "the search ended before it could be killed"
    reached = _restored_step(root)  # the state of the checkpoint Tune last registered
    before = len(_reports(root))
    assert 0 < reached < TOTAL

    again = subprocess.run(_search(root, "--resume", "k", "--trials", "1"), env=env,
                           capture_output=True, text=True, timeout=600,
                           start_new_session=True)
    assert again.returncode == 0, again.stderr[-3000:]
    after = _reports(root)[before:]
    steps = [r["step"] for r in after if "step" in r]
    assert steps and steps[0] == reached + 100  # its next evaluation: not from step 0
    assert all(s > reached for s in steps)
    assert after[-1].get("done") == 1 and after[-1]["step"] == TOTAL  # and trained to the end
    summary = json.loads(again.stdout)
    assert summary["n_trials"] == 1


def _restored_step(root: Path) -> int:
    """The step of the training state in the checkpoint Tune will restore the trial from."""
    from ray import tune

    from arithsweep.search.trial_state import restored_state

    (trial,) = tune.ExperimentAnalysis(str(root / "k" / "tune")).trials
    assert trial.checkpoint is not None
    state = restored_state(Path(trial.checkpoint.path))
    assert state is not None
    return state.step


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
        return True
    except OSError:
        return False


def test_a_snapshot_naming_a_replaced_checkpoint_is_repaired(tmp_path: Path) -> None:
    """Tune deletes the replaced checkpoint before it writes the snapshot naming the new one;
    killed between the two, the snapshot names a folder that is gone, and Tune refuses it.
    The trial's newest checkpoint is put under that name (its later state); nothing else
    changes, and an intact snapshot is left alone."""
    from arithsweep.search.trial_state import repair_snapshot

    exp = tmp_path / "tune"
    trial = exp / "trial_1"
    (trial / "checkpoint_000005" / "state").mkdir(parents=True)
    (trial / "checkpoint_000005" / "state" / "s.json").write_text("600")
    entry = [json.dumps({"relative_logdir": "trial_1"}),
             json.dumps({"last_result": {"checkpoint_dir_name": "checkpoint_000004"}})]
    (exp / "experiment_state-1.json").write_text(json.dumps({"trial_data": [entry]}))
    assert repair_snapshot(exp) == ["trial_1/checkpoint_000004"]
    assert (trial / "checkpoint_000004" / "state" / "s.json").read_text() == "600"
    assert (trial / "checkpoint_000005").is_dir()
    assert repair_snapshot(exp) == []  # now intact
    (exp / "experiment_state-1.json").write_text("not json")
    assert repair_snapshot(exp) == []
