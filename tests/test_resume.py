"""A killed `arithsweep train` continues with `--resume` and ends as if never stopped.

Each case runs the same training twice in subprocesses: once through, once SIGKILLed as soon as
a training state past the start exists (wherever the loop then is: the result may not depend on
when the kill lands) and resumed. The best checkpoint's sha256, the --json result apart from
timings and every evaluation's per-seed exact match and loss must be equal.
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
import torch

from arithsweep.core.model import tiny_layout as TL
from arithsweep.core.training.resume import latest_state

TIMINGS = {"train_seconds", "check_seconds", "wall_seconds", "examples_per_s", "checkpoint"}
# a pack of 3 add2 seeds with Grokfast and adaptive decay drops on, a state every 50 steps
# (add2: its final check over all 10^4 problems is quick; add3's 10^6 were half the test)
COMMON = ["--task", "add2", "--seeds", "3", "--steps", "400", "--target", "1.0",
          "--set", "eval_every=50", "--set", "checkpoint_every=50",
          "--set", "grokfast_alpha=0.98", "--set", "grokfast_lambda=2.0",
          "--set", "wd_drops=[[0.02, 0.1], [0.2, 0.01]]"]
CASES = {
    "tiny": ["--layout", "tiny"],
    # the reference layout, the stream sampler and a polish phase (its mined pool is state)
    "reference": ["--layout", "reference", "--set", "sampler=stream",
                  "--set", "polish_steps=200", "--set", "polish_pool=4000"],
}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "arithsweep", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _train(out: Path, extra: list[str]) -> dict:
    done = subprocess.run(_cli("train", *COMMON, *extra, "--out", str(out), "--json"),
                          capture_output=True, text=True, env=_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _history(out: Path) -> list[tuple]:
    state = latest_state(out / "resume")
    assert state is not None and state.finished
    return [(p["step"], p["exact_match"], p["loss"]) for p in state.doc["results"][0]["history"]]


# the tiny case needs the kernel built (a C compiler); the reference one runs anywhere
_NO_KERNEL = pytest.mark.skipif(TL.load_error() is not None,
                                reason=f"tiny kernel unavailable: {TL.load_error()}")


@pytest.mark.slow
@pytest.mark.parametrize("layout", [pytest.param(name, marks=_NO_KERNEL) if name == "tiny"
                                    else name for name in sorted(CASES)])
def test_killed_train_resumes_bit_for_bit(tmp_path: Path, layout: str) -> None:
    whole = _train(tmp_path / "whole", [*CASES[layout], "--log", str(tmp_path / "whole.log")])
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cli("train", *COMMON, *CASES[layout], "--out", str(out), "--json",
                                 "--log", str(tmp_path / "killed.log")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    killed_at = None
    deadline = time.monotonic() + 600  # a guard against a hang, not a timing assumption
    while proc.poll() is None and time.monotonic() < deadline:
        states = sorted((out / "resume").glob("state-*.json")) if out.exists() else []
        if states and int(states[-1].stem.split("-")[1]) >= 100:
            proc.send_signal(signal.SIGKILL)
            killed_at = int(states[-1].stem.split("-")[1])
            break
        time.sleep(0.05)
    proc.wait()
    assert killed_at is not None, "the run ended before it could be killed"
    assert proc.returncode == -signal.SIGKILL
    state = latest_state(out / "resume")
    assert state is not None and not state.finished and state.step >= killed_at

    done = subprocess.run(_cli("train", "--resume", str(out), "--json"), capture_output=True,
                          text=True, env=_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = json.loads(done.stdout)
    assert resumed["sha256"] == whole["sha256"]
    assert {k: v for k, v in resumed.items() if k not in TIMINGS} == \
        {k: v for k, v in whole.items() if k not in TIMINGS}
    assert _history(out) == _history(tmp_path / "whole")
    # the resumed run went on with its own --log: one curve, each step once, as the whole run's
    assert _curve(tmp_path / "killed.log") == _curve(tmp_path / "whole.log")
    # the loop's own time and rate, never 0 for a run that trained
    assert resumed["train_seconds"] > 0 and resumed["examples_per_s"] > 0

    again = subprocess.run(_cli("train", "--resume", str(out)), capture_output=True, text=True,
                           env=_env(), timeout=300)
    assert again.returncode == 0
    assert "already finished" in again.stderr and len(again.stderr.strip().splitlines()) == 1


def _curve(log: Path) -> list[list[str]]:
    """A --log's lines without their elapsed seconds."""
    return [ln.split()[:2] + ln.split()[3:] for ln in log.read_text().splitlines()]


def _state_json(out: Path) -> Path:
    return sorted((out / "resume").glob("state-*.json"))[-1]


def _one_line_refusal(out: Path, *words: str) -> None:
    done = subprocess.run(_cli("train", "--resume", str(out)), capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    for w in words:
        assert w in done.stderr


@pytest.mark.slow
def test_resume_refuses_other_versions_and_invalid_configs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _train(out, ["--steps", "100", "--set", "eval_every=50"])
    path = _state_json(out)
    doc = json.loads(path.read_text())
    doc["finished"] = False  # as if killed after its last state
    path.write_text(json.dumps(doc))

    other = {**doc, "arithsweep_version": "0.0.1"}
    path.write_text(json.dumps(other))
    _one_line_refusal(out, "0.0.1")

    bad = json.loads(json.dumps(doc))
    bad["extra"]["job"]["train"]["lr"] = -1.0
    path.write_text(json.dumps(bad))
    _one_line_refusal(out, "no longer validates", "lr")

    _one_line_refusal(tmp_path / "nothing-here", "no such run folder")
    done = subprocess.run(_cli("train", "--resume", str(out), "--task", "add3"),
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode != 0 and "--task" in done.stderr


class _Killed(Exception):
    pass


def test_an_interrupted_abacus_run_resumes_in_process(tmp_path: Path) -> None:
    """The abacus offsets' own generators are state too: a run stopped between two states
    (as a kill would) and resumed ends with the same weights as one that never stopped."""
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train
    from arithsweep.core.training.resume import Checkpointing

    task, m, t = build_configs("add3", None, None, {
        "n_layers": 1, "d_model": 8, "n_heads": 2, "d_ff": 8, "pos": "abacus",
        "abacus_offset": 3, "steps": 120, "seeds": 2, "eval_every": 20, "eval_size": 256,
        "early_stop": False, "layout": "reference", "grokfast_alpha": 0.9,
        "grokfast_lambda": 1.0})
    whole = train(task, m, t, checkpoint=Checkpointing(tmp_path / "a", every_steps=50))

    def stop_at(step: int, total: int) -> None:
        if step == 90:
            raise _Killed

    with pytest.raises(_Killed):
        train(task, m, t, on_step=stop_at, checkpoint=Checkpointing(tmp_path / "b", 50))
    state = latest_state(tmp_path / "b")
    assert state is not None and state.step == 50 and not state.finished
    again = train(task, m, t, checkpoint=Checkpointing(tmp_path / "b", 50, resume=state))
    for (name, p), q in zip(whole.model.named_parameters(), again.model.parameters()):
        assert torch.equal(p, q), name
    assert [h.exact_match for h in again.history] == [h.exact_match for h in whole.history]
