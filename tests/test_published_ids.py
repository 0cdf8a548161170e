"""A published entry's id on a fresh clone: `show`, `inspect` and `ood` resolve it as
`export --transformer-lens` and `search --from-entry` do (`entry_lookup.entry_row`): the local
database's entry when it holds the id, else the published one in leaderboard/entries.json
beside it, its weights checked by sha256. `show` prints what the publication holds, marked
published; an unknown id is one error line, exit 2. Every test runs on a copy of leaderboard/
under tmp_path, from the copy's parent as a clone is (no local database).

    .venv/bin/python -m pytest tests/test_published_ids.py -q
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import no_heavy_imports, run  # tests/ is on sys.path (rootdir import mode)
from test_report import make_report

REPO = Path(__file__).resolve().parents[1]
ENTRY, NAME = 34, "add3-51-cdd87c29"  # the smallest published model (51 parameters, add3)


@pytest.fixture
def clone(board_clone) -> Path:
    return board_clone


def _published(entry_id: int) -> dict:
    doc = json.loads((REPO / "leaderboard" / "entries.json").read_text())
    return next(e for e in doc["entries"] if e["id"] == entry_id)


def one_error_line(result: tuple[int, str, str], needle: str) -> None:
    code, out, err = result
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, out, err)
    assert needle in lines[0] and "Traceback" not in err, lines[0]


def test_show_prints_a_published_entry_as_published(capsys, clone):
    code, out, err = run(capsys, "show", str(ENTRY), "--json")
    assert code == 0, err
    row, pub = json.loads(out), _published(ENTRY)
    assert (row["source"], row["sha256_ok"], row["status"]) == ("published", True, "sha256 ok")
    for key in ("task", "format", "target", "params", "exact_match", "n_problems", "n_failures",
                "nines", "suite", "suite_size", "sha256", "model_config", "train_config",
                "breakdown", "failures", "reproduce", "verified_at"):
        assert row[key] == pub[key], key  # what the publication holds, nothing made up
    for key in ("created_at", "breakdown"):  # as the publication holds them, or None
        assert row[key] == pub.get(key), key
    assert row["checkpoint_path"] == f"leaderboard/checkpoints/{NAME}"
    assert (row["seeds_reached"], row["index"]) == (pub["seeds_reached"],
                                                    "leaderboard/entries.json")
    assert isinstance(row["rank"], int) and row["rank"] >= 1
    # the same entry by sha256 prefix and by its published folder's name
    for ref in (pub["sha256"][:10], f"sha256:{pub['sha256'][:8]}", NAME):
        code, out, err = run(capsys, "show", ref, "--json")
        assert code == 0 and json.loads(out)["id"] == ENTRY, (ref, err)
    code, out, err = run(capsys, "show", str(ENTRY))
    assert code == 0, err
    assert "Leaderboard entry 34" in out and "Model config" in out
    assert "source: published (leaderboard/entries.json; weights sha256 ok)" in out
    missing = "not in the publication: breakdowns" in out
    assert missing == (not pub.get("breakdown")) and "None" not in out.split("Model")[0]
    assert not (clone / "leaderboard" / "leaderboard.db").exists()  # a reader creates none


def test_show_a_published_id_imports_no_torch(clone):
    env = {**os.environ, "ARITHSWEEP_DB": str(clone / "leaderboard" / "leaderboard.db")}
    no_heavy_imports(["show", str(ENTRY)], env)


def test_inspect_and_ood_take_a_published_id(capsys, clone):
    code, out, err = run(capsys, "inspect", str(ENTRY), "123+456", "--no-png", "-n", "50",
                         "--json")
    assert code == 0, err
    res = json.loads(out)
    assert (res["entry"], res["source"], res["params"]) == (ENTRY, "published", 51)
    assert Path(res["checkpoint"]).name == NAME and res["greedy_answer"] == 579
    code, out, err = run(capsys, "inspect", str(ENTRY), "12+34", "--no-png", "-n", "20")
    assert code == 0 and f"published entry {ENTRY}" in out, err

    code, out, err = run(capsys, "ood", str(ENTRY), "--max-digits", "2", "--per-cell", "3",
                         "--json")
    assert code == 0, err
    g = json.loads(out)
    assert Path(g["checkpoint"]).name == NAME and g["params"] == 51 and g["max_digits"] == 2
    assert g["task"] == "add3" and len(g["exact_match"]) == 2


def test_an_unknown_id_is_one_error_line(capsys, clone):
    index = "nor in leaderboard/entries.json"
    one_error_line(run(capsys, "show", "999"), index)
    one_error_line(run(capsys, "show", "999", "--json"), "no leaderboard entry '999'")
    one_error_line(run(capsys, "show", "zz"), "neither an entry id")
    one_error_line(run(capsys, "inspect", "999", "1+2", "--no-png"), index)
    one_error_line(run(capsys, "ood", "999"), index)
    one_error_line(run(capsys, "ood", "no-such-thing"), "neither a checkpoint directory")
    assert not (clone / "leaderboard" / "leaderboard.db").exists()


def test_the_local_database_comes_first(capsys, clone):
    from arithsweep.leaderboard.board import open_db

    with open_db(str(clone / "leaderboard" / "leaderboard.db")) as db:
        db.record(make_report(sha256="cd" * 32, params=777), entry_id=ENTRY)
    code, out, err = run(capsys, "show", str(ENTRY), "--json")
    assert code == 0, err
    row = json.loads(out)
    assert (row["id"], row["params"], row["source"]) == (ENTRY, 777, "local")
    # an id the database does not hold is still the published entry
    code, out, err = run(capsys, "show", "44", "--json")
    assert code == 0 and json.loads(out)["source"] == "published", err


def test_tampered_weights_are_shown_as_failing_and_never_loaded(capsys, clone):
    weights = clone / "leaderboard" / "checkpoints" / NAME / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    code, out, err = run(capsys, "show", str(ENTRY), "--json")
    row = json.loads(out)
    assert code == 0 and (row["sha256_ok"], row["status"], row["rank"]) == (
        False, "sha256 mismatch", None)
    code, out, err = run(capsys, "show", str(ENTRY))
    assert code == 0 and "source: published: sha256 mismatch" in out, err
    one_error_line(run(capsys, "inspect", str(ENTRY), "1+2", "--no-png"), "fail their check")
    one_error_line(run(capsys, "ood", str(ENTRY)), "fail their check")
