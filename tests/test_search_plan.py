"""A search says what it will do before it starts: its first lines name where it starts, the
space it searches below what bound (with the space's smallest point) and its trial cap; a
space with nothing below its start stops there, in one line; `--trials` not given means no cap
under a time budget, 20 without one, and on `--resume` the cap the search had (a resume whose
cap is spent is one line, not a run that trains nothing).

    .venv/bin/python -m pytest tests/test_search_plan.py -q -n 0

Through the CLI where it matters, each search stopped before Ray (nothing listens at
127.0.0.1:1) or, for a refusal, before it writes anything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from arithsweep.core.arithmetic import ARITHMETIC
from arithsweep.search.options import DEFAULT_TRIALS, trial_cap
from arithsweep.search.plan import smallest_point
from arithsweep.search.space.spaces import load_space, parse_space

REPO = Path(__file__).resolve().parents[1]
SMALL = """
name: small
model:
  n_layers: 1
  d_model: {choice: [8, 4]}
  n_heads: 1
  d_ff: {choice: [0, 16]}
  activation: {choice: [relu, swiglu], when: {d_ff: {gt: 0}}}
train:
  lr: {float: [1.0e-3, 2.0e-2], log: true}
"""


def _search(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`arithsweep search ARGS --json` in `cwd` (a clone: its leaderboard/ and no database),
    stopped where it would join Ray."""
    env = {**{k: v for k, v in os.environ.items() if k != "ARITHSWEEP_DB"},
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "arithsweep", "search", "--address",
                           "127.0.0.1:1", "--json", *args], capture_output=True, text=True,
                          timeout=180, cwd=cwd, env=env)


@pytest.fixture
def clone(tmp_path) -> Path:
    shutil.copytree(REPO / "leaderboard", tmp_path / "leaderboard",
                    ignore=shutil.ignore_patterns("pictures", "leaderboard.db*"))
    return tmp_path


def test_the_smallest_point_walks_every_shape_its_conditions_reach():
    from arithsweep.search.trials.configs import ProposalSizer

    space = parse_space(SMALL)
    size = ProposalSizer({"task": "add2"})
    # every shape by hand: the smallest is d_model 4 without an MLP
    shapes = [{"model.d_model": d, "model.d_ff": f, **({"model.activation": a} if f else {}),
               "model.n_layers": 1, "model.n_heads": 1}
              for d in (8, 4) for f in (0, 16) for a in (("relu", "swiglu") if f else (None,))]
    assert smallest_point(space, "add2") == min(size(s) for s in shapes)
    assert smallest_point(space, "add2", limit=3) is None  # six shapes: not all walked
    assert smallest_point(load_space("microadder"), "add3") == 37  # the board's add3 floor


def test_the_trial_cap_not_given_follows_the_time_budget_and_a_resume_keeps_its_own():
    assert trial_cap(None, 0.0) == (DEFAULT_TRIALS, "the default without a --time-budget")
    assert trial_cap(None, 3600.0) == (None, "none")
    assert trial_cap(7, 3600.0) == (7, "--trials")
    # a resume: the cap of its last run (a resume's own, else the one it started with)
    started = {"trials": 300, "options": {"trials": 300}}
    assert trial_cap(None, 0.0, started) == (300, "the cap it had")
    assert trial_cap(None, 0.0, {**started, "resumes": [{"trials": 400}]})[0] == 400
    # started with no cap (a time budget): none under a new budget, the default without one
    assert trial_cap(None, 600.0, {"trials": None}) == (None, "none")
    assert trial_cap(None, 0.0, {"trials": None})[0] == DEFAULT_TRIALS
    assert trial_cap(50, 0.0, started) == (50, "--trials")


def test_a_space_with_nothing_below_its_start_says_so_first_and_stops(clone):
    """add3 on the published board: the microadder space's smallest point is the board's 37."""
    out = _search(clone, "--task", "add3", "--time-budget", "10m")
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert line.startswith("error: nothing to search: space microadder's smallest add3 model "
                           "has 37 p, not below its start, the board's smallest add3 entry "), line
    assert line.endswith("--fresh starts from the space's start point")
    assert not (clone / "searches").exists() or not any((clone / "searches").iterdir())
    # --fresh (the README's demo) starts from the space's 57 p and has room below it
    out = _search(clone, "--task", "add3", "--fresh", "--time-budget", "10m")
    first, plan, error = out.stderr.strip().splitlines()
    assert first == "starting from space microadder's start point (57 p), as --fresh asks"
    assert plan == ("searching space microadder from its start point down (its smallest point "
                    "37 p), below each model it verifies; no trial cap: the time budget of 10m "
                    "ends it (--trials N caps it)")
    assert error.startswith("error: cannot join Ray")
    # a --max-params below the space's floor: the same refusal, naming it
    out = _search(clone, "--task", "add3", "--fresh", "--max-params", "30")
    assert "not below --max-params 30" in out.stderr and out.returncode == 2


def test_an_add10_search_says_its_trials_stop_above_the_target(clone):
    """From the board's 36 at the default 0.99, a line says where its trials stop and why; at a
    target under AdderBoard's bar, no such line."""
    out = _search(clone, "--task", "add10", "--time-budget", "10m")
    lines = out.stderr.strip().splitlines()
    assert lines[2] == ("its trials stop at 0.992 held-out, not 0.99: a find must also pass "
                        "AdderBoard's protocol (its own 10,010 problems, at 99%)"), lines
    assert lines[-1].startswith("error: cannot join Ray")
    out = _search(clone, "--task", "add10", "--target", "0.95", "--time-budget", "10m")
    assert "its trials stop" not in out.stderr and "cannot join Ray" in out.stderr


def _stored_search(root: Path, name: str, trials: int | None, ran: int | None,
                   max_params: int | None = None) -> None:
    """A search folder as a run that ended writes it (search.json, summary.json), enough for
    `--resume` to settle it: started with `trials` as its cap, `ran` Tune trials run."""
    sdir = root / name
    sdir.mkdir(parents=True)
    (sdir / "search.json").write_text(json.dumps({
        "name": name, "task": "add2", "target": 0.9, "space": "small",
        "space_path": str(_space_file(root)), "search_format": 2, "trials": trials,
        "arithmetic": ARITHMETIC,  # a search of other floats is refused before its cap
        "options": {"trials": trials, "max_params": max_params}}))
    if ran is not None:
        (sdir / "summary.json").write_text(json.dumps({"n_tune_trials": ran}))


def _space_file(root: Path) -> Path:
    path = root / "small.yaml"
    path.write_text(SMALL)
    return path


def test_a_resume_keeps_its_cap_and_one_whose_cap_is_spent_says_so(clone):
    root = clone / "searches"
    _stored_search(root, "long", 300, 50)  # started with -n 300, its deadline cut it at 50
    out = _search(clone, "--resume", "long", "--root", str(root))
    first, plan, error = out.stderr.strip().splitlines()
    assert first == "resuming search long: no model verified yet"
    assert plan.endswith("; at most 300 trials in all (the cap it had, 50 run before), no "
                         "time budget"), plan
    assert error.startswith("error: cannot join Ray")

    _stored_search(root, "done", 20, 20)  # the old default's 20, all run
    out = _search(clone, "--resume", "done", "--root", str(root))
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 2 and line == (
        "error: --resume done: 20 trials ran already and its cap is 20 in all (the cap it had), "
        f"so it would train nothing; give the new total, e.g. -n {20 + DEFAULT_TRIALS}")
    out = _search(clone, "--resume", "done", "--root", str(root), "-n", "25")
    assert "at most 25 trials in all (--trials, 20 run before)" in out.stderr, out.stderr


def test_a_resume_keeps_the_bound_it_was_started_with(clone):
    """A search started with --max-params N searches below N + 1 after --resume too (it read
    the incumbent's bound alone), unless --max-params is given again."""
    root = clone / "searches"
    _stored_search(root, "bounded", 300, 5, max_params=200)
    out = _search(clone, "--resume", "bounded", "--root", str(root))
    plan = out.stderr.strip().splitlines()[1]
    assert "below 201 p" in plan and "--max-params 200" in plan, plan
    out = _search(clone, "--resume", "bounded", "--root", str(root), "--max-params", "100")
    assert "--max-params 100" in out.stderr.strip().splitlines()[1], out.stderr
