"""Publishing: the string formats, and `arithsweep publish` (LEADERBOARD.md plus checked copies of
the checkpoints) on a real SQLite leaderboard holding the session's trained add2 checkpoint.

    .venv/bin/python -m pytest tests/test_publish.py -q
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import run  # tests/ is on sys.path (rootdir import mode)
from test_report import make_report

from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard import publish as pub
from arithsweep.leaderboard import tables
from arithsweep.leaderboard.board import open_db


def sha_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (hidden staging folders included) and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def ckpt_row(tmp_path):
    """A leaderboard (path) with one entry for a small untrained add2 checkpoint, recorded from a
    report that names its real sha256 (publishing checks files, not skill: no training here)."""
    from arithsweep.core.model.checkpoint import save_checkpoint
    from arithsweep.core.model.model import ArithTransformer, count_params
    from arithsweep.core.overrides import build_configs

    task, m, t = build_configs("add2", None, None, {"d_model": 8, "n_heads": 1, "d_ff": 16})
    model, path = ArithTransformer(m), tmp_path / "ck" / "add2"
    sha = save_checkpoint(path, model, task, 0, t)
    db = tmp_path / "lb.db"
    row, _ = open_db(str(db)).record(make_report(
        task="add2", params=count_params(model), exact_match=1.0, sha256=sha,
        checkpoint_path=str(path),
        reproduce=f"arithsweep train --task add2 --format x --config {path}/config.json "
                  "--seeds 1 --seed 7"))
    return db, row


def test_string_formats():
    rows = [{**make_report(sha256="1" * 64, exact_match=0.9999999).to_dict(), "rank": 1, "id": 1},
            {**make_report(sha256="2" * 64, task="add10", params=1234,
                           architecture="a|b").to_dict(), "rank": 1, "id": 2}]
    md = tables.to_markdown(rows, title="Smallest verified models")
    assert md.startswith("## Smallest verified models")
    assert "| rank | task | params | exact match | nines |" in md
    assert "| 1 | add3 | 777 | 99.9999% |" in md  # rounded down, never 100%
    assert "a\\|b" in md and "1,000" in md
    assert "_No verified entries" in tables.to_markdown([])
    parsed = list(csv.DictReader(io.StringIO(tables.to_csv(rows))))
    assert [r["params"] for r in parsed] == ["777", "1234"]
    assert json.loads(parsed[0]["model_config"]) == {"d_model": 7, "n_layers": 1}
    assert json.loads(tables.to_json(rows)) == json.loads(json.dumps(rows))
    assert pub.percent(0.99) == "99.0000%" and pub.percent(None) == ""


def test_select_rows_best_per_task_and_smallest_per_target():
    rows = [  # as query(all=True) returns them: fewest params first
        {"task": "add3", "target": 0.99, "params": 500}, {"task": "add3", "target": 0.99,
                                                         "params": 600},
        {"task": "add3", "target": 0.9999, "params": 700}, {"task": "add10", "target": 0.99,
                                                            "params": 1500},
        {"task": "add3", "target": 0.9999, "params": 900},
    ]  # fmt: skip
    assert [(r["task"], r["params"]) for r in pub.select_rows(rows)] == [
        ("add3", 500), ("add3", 700), ("add10", 1500)]  # fmt: skip
    # the entry with the most nines of a task stays too (the first of equals: the smaller)
    rows = [{"task": "sub3", "target": 0.99, "params": 912, "nines": 2},
            {"task": "sub3", "target": 0.99, "params": 3360, "nines": 2},
            {"task": "sub3", "target": 0.99, "params": 4624, "nines": 6},
            {"task": "sub3", "target": 0.99, "params": 5000, "nines": 6}]
    assert [r["params"] for r in pub.select_rows(rows)] == [912, 4624]
    # what a search verified stays beside a recipe's better run of the same size (mul2)
    rows = [{"task": "mul2", "target": 0.99, "params": 17376, "nines": 3},
            {"task": "mul2", "target": 0.99, "params": 17376, "nines": 2, "search_name": "s1"},
            {"task": "mul2", "target": 0.99, "params": 17376, "nines": 2, "search_name": "s2"}]
    assert [r.get("search_name") for r in pub.select_rows(rows)] == [None, "s1"]


def test_published_reproduce_points_at_the_published_config():
    row = {"task": "add3", "format": "pad", "seed": 4, "train_config": {},
           "reproduce": "arithsweep train --task add3 --format pad --config '/a b/config.json' "
                        "--seeds 1 --seed 7"}  # fmt: skip
    new = "leaderboard/checkpoints/add3-244-1a2b3c4d/config.json"
    assert pub.published_reproduce(row, new) == (
        f"arithsweep train --task add3 --format pad --config {new} --seeds 1 --seed 7")
    assert pub.published_reproduce({**row, "reproduce": ""}, new) == (
        f"arithsweep train --task add3 --format pad --config {new} --seeds 1 --seed 4")
    assert pub.verify_command({"target": 0.999}, "d") == "arithsweep verify d --target 0.999"
    assert pub.seeds_reached({}, {"meta": {"seeds_reached": 2, "seeds_trained": 8}}) == "2/8"
    assert pub.seeds_reached({"train_config": {}}, {}) == "not recorded"


def test_publish_real_checkpoint_and_reverify_it(capsys, tmp_path, monkeypatch, add2_trained):
    _, ckpt = add2_trained
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "verify", ckpt, "--record", "--db", "lb.db", "--json")
    assert code == 0, err
    rep = json.loads(out)
    code, out, err = run(capsys, "publish", "--db", "lb.db", "--json")
    assert code == 0, err
    res = json.loads(out)
    name = f"add2-{rep['params']}-{rep['sha256'][:8]}"
    folder = Path("leaderboard") / "checkpoints" / name
    assert [e["checkpoint"] for e in res["entries"]] == [str(folder)]
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "entry.json", "model.safetensors"]
    assert sha_of(folder / "model.safetensors") == rep["sha256"]
    assert (folder / "config.json").read_bytes() == (ckpt / "config.json").read_bytes()

    md_path = Path("leaderboard") / "LEADERBOARD.md"
    md = md_path.read_text()
    assert md.startswith(pub.GENERATED) and "suite v2 (10,000 problems per entry" in md
    links = re.findall(r"\]\(([^)]+)\)", md)
    assert links == [f"checkpoints/{name}/"]
    assert all((md_path.parent / link).is_dir() for link in links)
    (line,) = [ln for ln in md.splitlines() if ln.startswith("| add2 |")]
    cells = [c.strip() for c in line.strip("|").split(" | ")]
    assert cells[:2] == ["add2", str(rep["params"])] and cells[4] == "10,000"
    commands = re.findall(r"```sh\n(.*?)\n```", md)
    # the fixture stopped by its caller's rule before its schedule's end: the retrain stops
    # where it did (TrainConfig.stop_at), with no time budget to stop it sooner
    stop = ["--set", f"stop_at={json.loads((ckpt / 'config.json').read_text())['meta']['steps']}",
            "--set", "time_budget=0"]
    assert commands[0] == shlex.join(
        ["arithsweep", "train", "--task", "add2", "--format", rep["format"],
         "--config", f"{folder}/config.json", "--seeds", "1", "--seed", str(rep["seed"]),
         *stop])
    # the fixture trained 2 seeds together: the pack's command follows the single seed's
    assert commands[1] == shlex.join(
        ["arithsweep", "train", "--task", "add2", "--format", rep["format"],
         "--config", f"{folder}/config.json", "--seeds", "2", "--seed", "0", *stop])
    assert commands[2] == f"arithsweep verify {folder}"

    # the command printed in LEADERBOARD.md re-verifies the copy to the table's exact match
    code, out, err = run(capsys, *shlex.split(commands[2])[1:], "--json")
    assert code == 0, err
    again = json.loads(out)
    assert pub.percent(again["exact_match"]) == cells[2] == pub.percent(rep["exact_match"])
    assert again["sha256"] == rep["sha256"] and again["params"] == rep["params"]
    assert not list(tmp_path.glob(".leaderboard.publish-*"))  # the staging folder is gone

    # publishing again replaces the previous publication; the database beside it is untouched
    # (compared by its rows: SQLite may rewrite the file's bytes on close, a WAL checkpoint)
    def rows() -> str:
        return run(capsys, "leaderboard", "--all", "--json", "--db", "lb.db")[1]

    before = rows()
    assert run(capsys, "publish", "--db", "lb.db")[0] == 0
    assert md_path.read_text() == md and rows() == before


def test_tampered_checkpoint_is_refused_and_nothing_written(capsys, tmp_path, ckpt_row):
    db, row = ckpt_row
    dest = tmp_path / "site" / "leaderboard"
    assert run(capsys, "publish", "--db", db, "--dir", dest)[0] == 0
    published = snapshot(tmp_path / "site")
    weights = Path(row["checkpoint_path"]) / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 1  # one bit in the last tensor value
    weights.write_bytes(bytes(blob))
    for target in (dest, tmp_path / "new" / "deeper" / "leaderboard"):
        code, out, err = run(capsys, "publish", "--db", db, "--dir", target)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
        assert "sha256" in lines[0] and "Traceback" not in err
    assert snapshot(tmp_path / "site") == published  # the previous publication is intact
    assert not (tmp_path / "new").exists()  # not even the parent folders


def test_the_copy_itself_is_checked(tmp_path, monkeypatch, ckpt_row):
    db, row = ckpt_row
    real_copy = shutil.copyfile

    def flaky_copy(src, dst, **kw):
        real_copy(src, dst, **kw)
        if str(dst).endswith(".safetensors"):
            with open(dst, "ab") as f:
                f.write(b"\0")

    monkeypatch.setattr(shutil, "copyfile", flaky_copy)
    with pytest.raises(ArithsweepError, match="not the verified"):
        pub.publish([row], tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.publish-*"))


def test_extra_sections_and_foreign_files(tmp_path, ckpt_row):
    db, row = ckpt_row
    dest = tmp_path / "pub"
    pub.publish([row, row], dest, extra_sections=["## Notes\n\nhand-written words\n"])
    md = (dest / "LEADERBOARD.md").read_text()
    assert md.endswith("\n## Notes\n\nhand-written words\n") and md.count("| add2 |") == 1
    (dest / "checkpoints" / "mine.txt").write_text("not arithsweep's")
    with pytest.raises(ArithsweepError, match="did not write"):
        pub.publish([row], dest)
    (dest / "checkpoints" / "mine.txt").unlink()
    (dest / "LEADERBOARD.md").write_text("# my own notes\n")
    with pytest.raises(ArithsweepError, match="not written by arithsweep publish"):
        pub.publish([row], dest)
    assert (dest / "LEADERBOARD.md").read_text() == "# my own notes\n"
    with pytest.raises(ArithsweepError, match="nothing to publish"):
        pub.publish([], tmp_path / "empty")
    with pytest.raises(ArithsweepError, match="cannot publish it as folder"):
        pub.publish([{**row, "task": "../up"}], tmp_path / "evil")
    assert not (tmp_path / "empty").exists() and not (tmp_path / "evil").exists()


def test_publish_cli_help_and_empty_board(capsys, tmp_path):
    code, out, _ = run(capsys, "publish", "--help")
    assert code == 0 and "--dir" in out and "--all" in out
    code, _, err = run(capsys, "publish", "--db", tmp_path / "none.db", "--dir", tmp_path / "o")
    assert code == 2 and err.startswith("error: no entries in") and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists() and not (tmp_path / "none.db").exists()


def test_a_lost_database_is_rebuilt_from_the_published_folder(capsys, tmp_path, ckpt):
    """The database and search folders are local; the published folder is what a clone has.
    Re-recording a published checkpoint re-measures it and takes back only its provenance
    (search, trial, entry id) from entry.json, so republishing keeps where it came from; a
    publication that would drop an entry the database lacks is refused unless --drop."""
    db1, db2, dest = tmp_path / "one.db", tmp_path / "two.db", tmp_path / "pub"
    code, _, err = run(capsys, "verify", ckpt, "--record", "--db", db1, "--json")
    assert code == 0, err
    board = open_db(str(db1))
    row = board.query()[0]
    board.close()
    sha = row["sha256"]
    searches = tmp_path / "searches" / "s1"  # the search's own folder, then lost
    searches.mkdir(parents=True)
    (searches / "search.json").write_text(json.dumps({"name": "s1", "task": "add2",
                                                      "command": "arithsweep search -n 3"}))
    # the command that trained it, which today's rule for the checkpoint would not write
    ran = f"arithsweep train --task add2 --config {ckpt}/config.json --seeds 1 --seed 5 " \
          "--set stop_at=300"
    row = {**row, "id": 41, "search_name": "s1", "trial_id": "t9", "reproduce": ran}
    pub.publish([row], dest, searches_root=tmp_path / "searches")
    name = pub.checkpoint_dir_name(row)
    kept = json.loads((dest / "checkpoints" / name / "entry.json").read_text())
    assert kept["entry_id"] == 41 and kept["search_name"] == "s1" and kept["sha256"] == sha
    assert kept["reproduce"] == pub.published_reproduce(
        row, f"pub/checkpoints/{name}/config.json") and kept["reproduce"].endswith(
        "--seed 5 --set stop_at=300")
    assert "exact_match" not in kept and "arithsweep search -n 3" in "".join(
        kept["search_lines"])
    shutil.rmtree(tmp_path / "searches")
    # a fresh database: publishing from it alone would lose the entry, so it is refused
    other = make_report(task="add2", params=7, exact_match=1.0, sha256="3" * 64,
                        checkpoint_path=str(ckpt))
    open_db(str(db2)).record(other)
    before = snapshot(dest)
    code, _, err = run(capsys, "publish", "--db", db2, "--dir", dest)
    assert code == 2 and "does not" in err and name in err and len(err.splitlines()) == 1
    assert snapshot(dest) == before
    code, out, err = run(capsys, "verify", dest / "checkpoints" / name, "--record",
                         "--db", db2, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["entry_id"] == 41 and got["search_name"] == "s1" and got["trial_id"] == "t9"
    assert got["reproduce"] == kept["reproduce"]  # the run command, not one made up today
    assert got["exact_match"] == 1.0 and got["n_problems"] == 10_000  # measured again
    board = open_db(str(db2))
    rebuilt = next(r for r in board.query(all=True) if r["sha256"] == sha)
    board.close()
    pub.publish([rebuilt], dest, searches_root=tmp_path / "searches",
                known=[sha, "3" * 64])
    md = (dest / "LEADERBOARD.md").read_text()
    assert "Entry 41:" in md and "search `s1`, trial `t9`" in md
    assert "arithsweep search -n 3" in md  # from entry.json: the search folder is gone
    with pytest.raises(ArithsweepError, match="does not"):
        pub.publish([{**other.to_dict(), "id": 2}], dest)
    assert (dest / "checkpoints" / name).is_dir()


def test_recording_an_entry_again_keeps_the_command_that_trained_it(tmp_path):
    """A re-verification measures the entry again, but its retrain command is provenance: one
    written by today's rule was never run (a `--set stop_at` for a model stopped early)."""
    ran = "arithsweep train --task add2 --config c.json --seeds 1 --seed 9"
    board = open_db(str(tmp_path / "lb.db"))
    board.record(make_report(sha256="5" * 64, exact_match=0.995, reproduce=ran))
    row, created = board.record(make_report(sha256="5" * 64, exact_match=0.999,
                                            reproduce=ran + " --set stop_at=4000"))
    assert not created and row["exact_match"] == 0.999 and row["reproduce"] == ran
    board.close()


def test_an_entry_trained_in_a_pack_also_gets_the_pack_command():
    from arithsweep.leaderboard.provenance import pack_reproduce

    row = {"task": "mul3", "format": "pad", "seed": 1048577,
           "train_config": {"seeds": 2, "seed": 1048576},
           "reproduce": "arithsweep train --task mul3 --format pad --config c.json "
                        "--seeds 1 --seed 1048577"}  # fmt: skip
    assert pack_reproduce(row, "p/config.json") == (
        "arithsweep train --task mul3 --format pad --config p/config.json "
        "--seeds 2 --seed 1048576")
    # trained alone, or no recorded pack: no second command
    assert pack_reproduce({**row, "train_config": {"seeds": 1, "seed": 3}}, "p") is None
    assert pack_reproduce({**row, "train_config": {}}, "p") is None
    # its own command is the pack already (a member finished inside it): said once
    whole = {**row, "reproduce": "arithsweep train --task mul3 --format pad --config c.json"}
    assert pack_reproduce(whole, "p") is None
