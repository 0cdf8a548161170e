"""A search trial whose worker process dies (the OOM killer, a preempted node) goes on in the
same run: Tune restarts it (`FailureConfig(max_failures)`, `--max-failures`, default 3) from
its last saved state, the search completes with no trial errored, and `--json` stdout still
holds the JSON object alone, whatever Ray prints about the dead worker.

    .venv/bin/python -m pytest tests/test_trial_worker_killed.py -q
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

EVERY = 100  # LONG_SPACE's eval_every


def _states(root: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1])
                  for p in root.glob("w/tune/*/checkpoint_*/state/state-*.json"))


def _trial_workers(session: int) -> list[int]:
    """Ray worker processes of the search started in `session` that run a trial (Ray names
    them ray::ImplicitFunc, ray::ImplicitFunc.train while training)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cmd.startswith("ray::ImplicitFunc") and os.getsid(int(d.name)) == session:
                pids.append(int(d.name))
        except OSError:  # gone meanwhile
            continue
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds Ray's worker through /proc")
def test_a_trial_whose_worker_is_killed_continues_in_the_same_run(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    root = tmp_path / "searches"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    search = subprocess.Popen(
        [sys.executable, "-m", "arithsweep", "search", "--root", str(root),
         "--db", f"sqlite:///{root / 'lb.db'}", "--cpus-per-trial", "1", "-j", "1",
         "--patience", "1000", "--rounds", "1", "--json", "--task", "add2", "--target",
         "0.99", "--space", str(space), "--trials", "1", "--name", "w", "--fresh"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)  # its own session: the workers to kill are found in it
    killed, saved = [], []
    try:
        deadline = time.monotonic() + 420  # a guard against a hang, not a timing assumption
        while search.poll() is None and time.monotonic() < deadline and not killed:
            states = _states(root) if root.exists() else []
            if states and states[-1] >= 6 * EVERY:
                saved = states
                for pid in _trial_workers(search.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.2)
        out, err = search.communicate(timeout=600)
    finally:
        if search.poll() is None:
            os.killpg(search.pid, signal.SIGKILL)
    assert killed, "the trial ended before its worker could be killed"
    assert search.returncode == 0, err[-3000:]
    summary = json.loads(out)  # stdout is the JSON alone
    assert summary["n_trials"] == 1 and summary["n_errored"] == 0, summary
    (trial,) = summary["trials"]
    assert not trial["errored"] and trial["step"] == TOTAL
    assert f"trial {trial['tune_trial_id']}: its worker process died" in err

    (results,) = root.glob("w/tune/*/result.json")
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    restarts = [i for i, r in enumerate(rows) if i and r.get("iterations_since_restore") == 1]
    assert restarts, "Tune did not restart the trial"
    # (running alone, the trial was also restarted once on the core it was lent: search.cores)
    first = rows[restarts[-1]]["step"]
    # it went on from a state saved before the kill, not from step 0 (whose first report
    # is step EVERY)
    assert first > EVERY and first - EVERY in saved, (first, saved)
    assert rows[-1].get("done") == 1 and rows[-1]["step"] == TOTAL

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.`arithsweep.trial_id` = '{trial['trial_id']}'")
    assert run.info.status == "FINISHED" and run.data.tags["arithsweep.restarts"] == "1"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "best_em")]
    assert max(steps) == TOTAL and first in steps
