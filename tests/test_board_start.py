"""A new search starts where the board stands: `arithsweep search --task T` on a clone whose
leaderboard holds an entry of T starts from the smallest one at its target (the local database
and the published entries.json ranked as one) as its verified incumbent, as `--from-entry` does,
and says so in its first line on stderr; `--fresh` starts from the space's start point; an
entry that cannot be the incumbent is named in one line and the search starts fresh.

    .venv/bin/python -m pytest tests/test_board_start.py -q

The lookups and the line are fast (a copy of the published board under tmp_path, the search
stopped where it would join Ray); the last test runs two real local Ray searches on add2
(marked slow).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run  # tests/ is on sys.path (rootdir import mode)
from test_from_entry import BY_HAND, FOUND, SPACE, _db, published_board
from test_report import make_report

from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.entry_lookup import smallest_entry, smallest_finder
from arithsweep.search.propose import incumbent
from arithsweep.search.propose.shrink import map_entry
from arithsweep.search.space.spaces import load_space

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def board(tmp_path) -> Path:
    """test_from_entry's published board of two entries (44: add10, 56 p; 34: add3, 51 p)."""
    return published_board(tmp_path)


def test_the_smallest_entry_at_the_target_is_found(board):
    e = smallest_entry("add10", 0.99, _db(board))
    assert (e["entry_id"], e["params"], e["source"]) == (FOUND[0], 56, "published")
    assert e["checkpoint"] == str(board / "checkpoints" / FOUND[1]) and e["chain"]
    assert smallest_entry("add3", 0.99, _db(board))["entry_id"] == BY_HAND[0]
    # none at the target or above, none of the task: start from the space
    assert smallest_entry("add10", 0.9999, _db(board)) is None
    assert smallest_entry("add2", 0.5, _db(board)) is None
    # a smaller local entry ranks first; one below the target never does
    from arithsweep.leaderboard.board import open_db

    with open_db(_db(board)) as db:
        db.record(make_report(sha256="cd" * 32, params=40, exact_match=0.995))
        db.record(make_report(sha256="ef" * 32, params=20, exact_match=0.98, target=0.97))
    e = smallest_entry("add3", 0.99, _db(board))
    assert (e["params"], e["source"], e["exact_match"]) == (40, "local", 0.995)
    assert smallest_entry("add3", 0.97, _db(board))["params"] == 20


def test_the_board_entry_is_the_incumbent_and_its_line_says_so(board):
    find = smallest_finder(_db(board))
    item, values, why = incumbent.board_incumbent("add3", 0.99, find)
    assert why is None and item["board"] and item["qualifies"]
    assert (item["trial_id"], item["entry_id"], item["params"]) == ("entry:34", 34, 51)
    start = incumbent.start_item(item, map_entry(load_space("microadder"), values, "add3"),
                                 "microadder")
    line = start["note"]
    assert line.startswith("from the board's smallest add3 entry 34 (51 p, verified 100.0000%")
    assert line.endswith("; --fresh starts from the space's start point") and "\n" not in line
    # no entry of the task: the space's start point, and the line says so
    item, values, why = incumbent.board_incumbent("add2", 0.99, find)
    assert item is None and values is None
    assert why == ("from the space's start point: the board (its database and the entries.json "
                   "beside it) holds no add2 entry at 0.99 or above")


def test_an_entry_that_cannot_be_the_incumbent_is_one_line_and_a_fresh_start(board):
    found = smallest_entry("add3", 0.99, _db(board))
    broken = {**found, "model_config": {**found["model_config"], "no_such_field": 1}}
    item, values, why = incumbent.board_incumbent("add3", 0.99, lambda task, target: broken)
    assert item is None and values is None
    assert why.startswith("from the space's start point, not the board's smallest add3 entry 34 "
                          "(entry 34's configs do not load in this arithsweep: ")
    assert "\n" not in why

    def unreadable(task, target):
        raise ArithsweepError("leaderboard/leaderboard.db: database disk image is malformed")

    _, _, why = incumbent.board_incumbent("add3", 0.99, unreadable)
    assert why == ("from the space's start point: the board was not read "
                   "(leaderboard/leaderboard.db: database disk image is malformed)")


def _stopped_at_ray(board_dir: Path, root: Path, *args: str) -> list[str]:
    """stderr lines of an add10 search on this board, stopped where it would join Ray (no
    Ray listens at 127.0.0.1:1), so the line it starts with costs seconds, not a trial."""
    out = subprocess.run(
        [sys.executable, "-m", "arithsweep", "search", "--task", "add10", "--db",
         str(board_dir / "leaderboard.db"), "--root", str(root), "--address", "127.0.0.1:1",
         "-n", "1", "--json", *args], capture_output=True, text=True, timeout=180,
        env={**{k: v for k, v in os.environ.items() if k != "ARITHSWEEP_DB"},
             "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    return out.stderr.strip().splitlines()


def test_add10_on_the_published_board_starts_from_its_smallest_entry(tmp_path):
    """The clone's published board (its local database left out), as a new clone has it."""
    lb = tmp_path / "leaderboard"
    shutil.copytree(REPO / "leaderboard", lb, ignore=shutil.ignore_patterns("leaderboard.db*"))
    entries = [e for e in json.loads((lb / "entries.json").read_text())["entries"]
               if e["task"] == "add10" and e["exact_match"] >= 0.99]
    best = min(entries, key=lambda e: (e["params"], -e["exact_match"]))
    first, plan, *rest = _stopped_at_ray(lb, tmp_path / "searches")
    assert first.startswith(f"starting from the board's smallest add10 entry {best['id']} "
                            f"({best['params']} p, verified "), first
    assert first.endswith("--fresh starts from the space's start point")
    # the second line: what it searches below, the space's floor, its trial cap
    assert plan == (f"searching space tbukic below {best['params']} p (its smallest point "
                    "14 p); at most 1 trial in all (--trials), no time budget"), plan
    assert rest and rest[-1].startswith("error: cannot join Ray")
    # --fresh: the space's start points (tbukic's 36 p, then its 44 p), no bound until a
    # model is verified
    first, plan, aim, error = _stopped_at_ray(lb, tmp_path / "searches", "--fresh")
    assert first == "starting from space tbukic's start points (36 p, then 44 p), as --fresh asks"
    assert aim.startswith("its trials stop at 0.992 held-out, not 0.99"), aim
    assert plan.startswith("searching space tbukic from its start point down (its smallest "
                           "point 14 p)"), plan
    assert error.startswith("error: cannot join Ray")


def test_a_board_without_an_entry_of_the_task_says_where_the_search_starts(tmp_path):
    """A database of its own (--db) with no entries.json beside it holds no add10 entry: the
    first line says the search starts from the space's start point, and why."""
    (tmp_path / "elsewhere").mkdir()
    first, plan, *rest = _stopped_at_ray(tmp_path / "elsewhere", tmp_path / "searches")
    assert first == ("starting from the space's start point: the board (its database and the "
                     "entries.json beside it) holds no add10 entry at 0.99 or above"), first
    assert plan.startswith("searching space tbukic from its start point down"), plan
    assert rest and rest[-1].startswith("error: cannot join Ray")


@pytest.mark.slow
def test_a_search_starts_from_the_local_boards_entry_and_fresh_does_not(ray_local, ckpt,
                                                                         tmp_path, capsys):
    # the space starts at d_ff 48, larger than the entry (d_ff 32): only --fresh trains it
    space = tmp_path / "space.yaml"
    space.write_text(SPACE + "start:\n  - {model.d_ff: 48, train.lr: 0.01}\n")
    db, root = str(tmp_path / "leaderboard.db"), tmp_path / "searches"
    code, _, err = run(capsys, "verify", ckpt, "--record", "--db", db, "--target", "0.9")
    assert code == 0, err
    common = ("--task", "add2", "--target", "0.9", "--space", space, "-n", "1", "-j", "1",
              "--db", db, "--root", root, "--json")

    code, out, err = run(capsys, "search", *common, "--name", "board")
    assert code == 0, err
    s = json.loads(out)
    start = s["from_entry"]
    entry_id, params = start["entry_id"], start["params"]
    assert err.splitlines()[0].startswith(
        f"starting from the board's smallest add2 entry {entry_id} ({params} p, verified ")
    assert start["board"] and start["ref"] == str(entry_id)
    verified = json.loads((root / "board" / "verified.json").read_text())
    assert verified[f"entry:{entry_id}"]["qualifies"]
    # the entry is the incumbent: its shrink move first, nothing as large trained
    (t,) = s["trials"]
    assert t["config"]["model.d_ff"] == 16 and t["params"] < params
    assert s["trained_above_incumbent"] == [] and s["incumbent"] <= params

    code, out, err = run(capsys, "search", *common, "--name", "fresh", "--fresh")
    assert code == 0, err
    s = json.loads(out)
    assert s["from_entry"] is None
    assert err.splitlines()[0].startswith("starting from space from-entry's start point (")
    assert not any(k.startswith("entry:") for k in incumbent.load_verified(root / "fresh"))
    (t,) = s["trials"]
    assert t["config"]["model.d_ff"] == 48 and t["params"] > params  # the space's start
