"""Every command that takes an entry takes every entry the board lists: on a fresh clone (the
published leaderboard/entries.json and its checkpoint folders, no local database) `export
--adderboard` (with `--check`), `export --markdown`, `ask`, `verify` and `finish` take a
published id or folder name as `show`, `inspect`, `ood` and `export --transformer-lens` do
(tests/test_published_ids.py), and `export --adderboard` takes a checkpoint folder too. Each
runs through the CLI in this process, on a copy of leaderboard/ under tmp_path.

    .venv/bin/python -m pytest tests/test_entry_args.py -q -n 0
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import run  # tests/ is on sys.path (rootdir import mode)

REPO = Path(__file__).resolve().parents[1]
RECORD = 60  # the published 36-parameter add10 model, AdderBoard's task
FOLDER = "add10-36-424351b3"
SMALL = 9  # a published add2 entry: its suite is 10,000 problems, seconds to verify


@pytest.fixture
def clone(board_clone) -> Path:
    return board_clone


def test_export_adderboard_check_takes_a_published_id(capsys, clone, monkeypatch):
    """The AdderBoard submitter's command on a clone. The protocol's 10,000 random pairs take
    minutes one greedy decode at a time, so its first 50 here (the 36 gets each of them right,
    and the full 10,010 at 99.46%, measured); the file written is the whole submission."""
    from arithsweep.leaderboard import adderboard_check

    monkeypatch.setattr(adderboard_check, "N_RANDOM", 50)
    code, out, err = run(capsys, "export", RECORD, "--adderboard", "sub.py", "--check")
    assert code == 0, err
    assert "AdderBoard's protocol: 60/60 = 100.0000% (passes at 99%), 36 parameters" in out
    text = (clone / "sub.py").read_text()
    assert text.startswith('"""AdderBoard submission exported by arithsweep')
    assert f"from published leaderboard entry {RECORD}:" in text.splitlines()[0]
    assert (clone / "sub_weights" / "model.safetensors").is_file()


def test_export_adderboard_takes_a_folder_name_and_a_checkpoint_folder(capsys, clone):
    # the published folder's name, and the folder itself: the entry of the same weights
    for ref, dest in ((FOLDER, "a.py"), (f"leaderboard/checkpoints/{FOLDER}", "b.py")):
        code, _, err = run(capsys, "export", ref, "--adderboard", dest)
        assert code == 0, err
        assert f"published leaderboard entry {RECORD}:" in (clone / dest).read_text()
    # a folder the board does not hold (the 36's start, before its finishers): exported, and
    # the submission says it was not verified
    start = clone / "start"
    shutil.copytree(clone / "leaderboard" / "checkpoints" / FOLDER / "start", start)
    code, _, err = run(capsys, "export", start, "--adderboard", "c.py")
    assert code == 0, err
    head = (clone / "c.py").read_text().split('"""')[1]
    assert "checkpoint folder start (not on the leaderboard)" in head
    assert "36 unique parameters, not verified by arithsweep" in head


def test_export_markdown_takes_a_published_id(capsys, clone):
    code, out, err = run(capsys, "export", RECORD, "--markdown", "one.md")
    assert code == 0 and "wrote 1 rows to one.md" in out, err
    assert "| add10 | 36 |" in (clone / "one.md").read_text()


def test_ask_takes_a_published_id_and_folder_name(capsys, clone):
    for ref in (RECORD, FOLDER):
        code, out, err = run(capsys, "ask", ref, "9999999999+1", "--json")
        assert code == 0, err
        res = json.loads(out)
        assert (res["params"], res["correct"]) == (36, 1)


def test_verify_takes_a_published_id(capsys, clone):
    code, out, err = run(capsys, "verify", SMALL, "--json")
    assert code == 0, err
    res = json.loads(out)
    published = json.loads((clone / "leaderboard" / "entries.json").read_text())["entries"]
    mine = next(e for e in published if e["id"] == SMALL)
    assert (res["params"], res["sha256"]) == (mine["params"], mine["sha256"])
    assert res["exact_match"] == pytest.approx(mine["exact_match"]) and res["qualifies"]


@pytest.mark.parametrize("command", [("ask", "999", "1+2"), ("finish", "999", "--out", "x"),
                                     ("verify", "999"), ("export", "999", "--adderboard",
                                                         "s.py")])
def test_an_unknown_id_is_one_error_line_naming_both_places(capsys, clone, command):
    code, out, err = run(capsys, *command)
    (line,) = err.strip().splitlines()
    assert code == 2 and line.startswith("error:") and "Traceback" not in err
    assert "leaderboard.db nor in leaderboard/entries.json" in line


def test_a_missing_checkpoint_path_is_still_no_such_file(capsys, clone):
    code, _, err = run(capsys, "ask", "runs/add3", "1+2")
    assert code == 2 and "no such file" in err and "entry" not in err
