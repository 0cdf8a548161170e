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
from helpers import LONG_SPACE as SPACE
from helpers import LONG_STEPS as TOTAL


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


def _kept_names_a_checkpoint(root: Path) -> bool:
    """The keeper holds a whole snapshot in which the trial has a checkpoint."""
    from arithsweep.search.snapshots import kept_copies

    copies = kept_copies(root / "k" / "tune")
    states = list(copies[-1].glob("experiment_state-*.json")) if copies else []
    try:
        ((_, run),) = json.loads(states[0].read_text())["trial_data"]
        return bool((json.loads(run).get("last_result") or {}).get("checkpoint_dir_name"))
    except (IndexError, OSError, ValueError, KeyError, TypeError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("cut", [False, True], ids=["snapshot-whole", "snapshot-cut-off"])
def test_a_killed_search_continues_its_trial_mid_run(tmp_path: Path, cut: bool) -> None:
    """cut: the kill also cuts off Tune's snapshot mid-write (as a fresh-clone CI run once
    did), so `--resume` restores the keeper's copy of an earlier one."""
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
        if states and states[-1] >= 600 and (not cut or _kept_names_a_checkpoint(root)):
            os.killpg(first.pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    first.wait()
    os.killpg(first.pid, signal.SIGKILL) if _alive(first.pid) else None
    assert first.returncode == -signal.SIGKILL, "the search ended before it could be killed"
    if cut:
        snap = max((root / "k" / "tune").glob("experiment_state-*.json"))
        snap.write_bytes(snap.read_bytes()[: snap.stat().st_size // 2])
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
    """The step of the training state in the checkpoint Tune will restore the trial from,
    read after the repair `--resume` makes first (the kill may cut off Tune's snapshot)."""
    from ray import tune

    from arithsweep.search.snapshots import repair
    from arithsweep.search.trials.state import restored_state

    repair(root / "k" / "tune")
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
