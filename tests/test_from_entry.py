"""A search continues from the board: `arithsweep search --from-entry ID_OR_PATH` starts from a
leaderboard entry (local database, then the published entries.json) or a checkpoint folder
(verified first) as its verified incumbent, descends from the entry's point in the space, and
the section of what it finds names the whole chain of search commands.

    .venv/bin/python -m pytest tests/test_from_entry.py -q

The lookups, the mapping and the mistakes are fast (a copy of two published entries under
tmp_path); the last test is a real local Ray search on add2 (marked slow).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import run  # tests/ is on sys.path (rootdir import mode)
from test_report import make_report

from arithsweep.core.errors import ArithsweepError, ConfigError
from arithsweep.leaderboard.entry_lookup import board_entry, entry_finder
from arithsweep.leaderboard.provenance import entry_chain, search_lines
from arithsweep.search.propose import incumbent
from arithsweep.search.propose.shrink import map_entry
from arithsweep.search.space.spaces import load_space, parse_space

REPO = Path(__file__).resolve().parents[1]
FOUND = (44, "add10-56-e8f443c8")  # found by search add10-tiny: its entry.json has the command
BY_HAND = (34, "add3-51-cdd87c29")  # trained by hand
TINY_CMD = "arithsweep search --task add10 --target 0.99 --time-budget 95m -n 300 --name add10-tiny"


@pytest.fixture
def board(tmp_path) -> Path:
    """A published board holding two of the repository's entries, and no local database yet
    (its path, leaderboard.db beside entries.json, is what --db names)."""
    return published_board(tmp_path)


def published_board(tmp_path: Path) -> Path:
    """`board`'s folder, made under tmp_path (test_board_start's board too)."""
    lb = tmp_path / "leaderboard"
    (lb / "checkpoints").mkdir(parents=True)
    doc = json.loads((REPO / "leaderboard" / "entries.json").read_text())
    doc["entries"] = [e for e in doc["entries"] if e["id"] in (FOUND[0], BY_HAND[0])]
    (lb / "entries.json").write_text(json.dumps(doc))
    for _, name in (FOUND, BY_HAND):
        shutil.copytree(REPO / "leaderboard" / "checkpoints" / name, lb / "checkpoints" / name)
    return lb


def _db(board: Path) -> str:
    return str(board / "leaderboard.db")


def test_an_entry_id_or_sha_prefix_finds_the_published_entry(board):
    e = board_entry("44", _db(board))
    assert (e["entry_id"], e["task"], e["params"], e["source"]) == (44, "add10", 56, "published")
    assert e["checkpoint"] == str(board / "checkpoints" / FOUND[1])
    assert e["exact_match"] >= 0.99 and e["model_config"]["d_model"] == 3
    assert (e["seeds_reached"], e["seeds_trained"]) == (1, 8)
    # the search that found it, from the lines its publication printed (no folder here)
    assert e["chain"] == [TINY_CMD]
    assert board_entry("e8f443c8", _db(board))["entry_id"] == 44
    assert board_entry("34", _db(board))["chain"] == []  # trained by hand: no search


def test_the_local_database_comes_first(board):
    from arithsweep.leaderboard.board import open_db

    with open_db(_db(board)) as db:
        db.record(make_report(sha256="cd" * 32, params=777), entry_id=34)
    e = board_entry("34", _db(board))
    assert (e["params"], e["source"]) == (777, "local")


def test_a_wrong_reference_is_one_line(board, tmp_path):
    cases = {"999": "no such entry in", "xyz": "neither a leaderboard entry id",
             str(tmp_path): "not a checkpoint folder"}
    for ref, why in cases.items():
        with pytest.raises(ArithsweepError) as err:
            board_entry(ref, _db(board))
        assert str(err.value).startswith(f"--from-entry {ref}: ") and why in str(err.value)
    weights = board / "checkpoints" / BY_HAND[1] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ArithsweepError, match="entry 34's weights fail their check"):
        board_entry("34", _db(board))


def test_the_chain_comes_from_a_local_search_folder(tmp_path):
    sdir = tmp_path / "searches" / "add10-more"
    sdir.mkdir(parents=True)
    (sdir / "search.json").write_text(json.dumps({
        "name": "add10-more", "task": "add10", "target": 0.99,
        "command": "arithsweep search --from-entry 44 --name add10-more",
        "resumes": [{"command": "arithsweep search --resume add10-more -n 40"}],
        "from_entry": {"ref": "44", "entry_id": 44, "params": 56, "chain": [TINY_CMD]}}))
    row = {"search_name": "add10-more", "trial_id": "abc"}
    assert entry_chain(row, tmp_path / "searches") == [
        TINY_CMD, "arithsweep search --from-entry 44 --name add10-more",
        "arithsweep search --resume add10-more -n 40"]
    text = "\n".join(search_lines(row, tmp_path / "searches"))
    assert "It started from entry 44 (56 p) as its verified incumbent" in text
    # the chain first, then this search's command
    assert text.index(TINY_CMD) < text.index("arithsweep search --from-entry 44 --name")


def test_the_entry_maps_onto_the_space_and_unmapped_keys_are_named(board):
    find = entry_finder(_db(board))
    item, values = incumbent.entry_incumbent("34", None, 0.99, find, None)
    assert item["trial_id"] == "entry:34" and item["qualifies"] and item["params"] == 51
    micro = load_space("microadder")
    m = map_entry(micro, values, "add3")
    assert (m["params"], m["unmapped"], m["differs"]) == (51, [], [])
    assert m["point"] == {"model.d_model": 5, "model.d_head": 2, "model.mlp_down": "head",
                          "model.norm_weight": "vector", "train.lr": values["train.lr"]}
    # a space without the entry's d_head: the key is named, the rest still maps
    text = micro.path.read_text().replace("d_head: {choice: [2, 4]}", "d_head: {choice: [4]}")
    narrow = parse_space(text, "narrow.yaml")
    start = incumbent.start_item(item, map_entry(narrow, values, "add3"), narrow.name)
    assert start["unmapped"] == ["model.d_head=2 (space: 4)"]
    assert start["point"]["model.mlp_down"] == "head"
    assert "not mapped: model.d_head=2 (space: 4)" in start["note"]
    assert "\n" not in start["note"]


def test_an_entry_that_cannot_be_the_incumbent_is_refused(board):
    find = entry_finder(_db(board))
    with pytest.raises(ConfigError, match="entry 44's task is add10, and this search's is add3"):
        incumbent.entry_incumbent("44", "add3", 0.99, find, None)
    with pytest.raises(ConfigError, match="below this search's target 0.9999"):
        incumbent.entry_incumbent("44", "add10", 0.9999, find, None)
    folder = str(board / "checkpoints" / BY_HAND[1])
    with pytest.raises(ConfigError, match="the checkpoint's task is add3, and this search's"):
        incumbent.entry_incumbent(folder, "add2", 0.99, find, None)
    # a folder is verified first: never the incumbent on its own say
    seen = []

    def verifier(c):
        seen.append(c)
        return {"qualifies": False, "exact_match": 0.5}

    with pytest.raises(ConfigError, match=r"not a verified incumbent at target 0.99 "
                                          r"\(verified exact match 50.0000%\)"):
        incumbent.entry_incumbent(folder, "add3", 0.99, find, verifier)
    assert seen[0]["checkpoint"] == folder and seen[0]["search_name"] is None
    item, _ = incumbent.entry_incumbent(folder, None, 0.99, find, lambda c: {
        "qualifies": True, "exact_match": 1.0, "entry_id": 7})
    assert (item["entry_id"], item["trial_id"], item["params"]) == (7, "entry:7", 51)


def test_the_cli_says_what_is_wrong_before_anything_starts(board, tmp_path, capsys):
    root = tmp_path / "searches"
    for args, why in ((["--task", "add3", "--from-entry", "999"], "no such entry"),
                      (["--task", "add3", "--from-entry", "44"], "entry 44's task is add10"),
                      (["--from-entry", "44", "--resume", "x"], "--from-entry starts a new")):
        code, _, err = run(capsys, "search", *args, "--db", _db(board), "--root", root,
                           "--json")
        assert code == 2 and err.startswith("error: ") and why in err, err
        assert len(err.strip().splitlines()) == 1
    assert not root.exists() or not any(root.iterdir())  # no search folder left behind


SPACE = """
name: from-entry
model:
  n_layers: 1
  d_model: 16
  n_heads: 2
  d_ff: {choice: [0, 16, 32, 48]}
train:
  steps: 200
  lr: {float: [1.0e-3, 2.0e-2], log: true}
  warmup: 50
  batch_size: 128
  eval_every: 100
  eval_size: 512
  seeds: {by_params: [[2000, 1], [0, 2]]}
"""


@pytest.mark.slow
def test_a_search_descends_from_a_checkpoint_folder(ray_local, ckpt, tmp_path):
    from arithsweep.leaderboard.board import open_db
    from arithsweep.leaderboard.verify import make_verifier
    from arithsweep.search.driver import SearchOptions, run_search
    from arithsweep.search.space.fields import seeds_for

    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    db, root = f"sqlite:///{tmp_path / 'lb.db'}", tmp_path / "searches"
    notes: list[str] = []
    cmd = f"arithsweep search --from-entry {ckpt} -n 1"
    s = run_search(SearchOptions(
        from_entry=str(ckpt), target=0.9, space=str(space), trials=1, concurrency=1,
        cpus_per_trial=1, root=str(root), name="fe", command=cmd),
        verifier=make_verifier(db), find_entry=entry_finder(db, root), note=notes.append)

    # the folder was verified (and recorded) before it became the incumbent
    entry = open_db(db).query(task="add2", all=True)
    start = s.from_entry
    assert s.task == "add2" and [r["id"] for r in entry] == [start["entry_id"]]
    assert start["ref"] == str(ckpt) and start["chain"] == []
    assert notes[0] == f"starting {start['note']}" and len(notes) == 2  # then what it searches
    assert f"the same {start['params']}-p model" in start["note"]
    meta = json.loads((Path(s.dir) / "search.json").read_text())
    assert meta["from_entry"]["entry_id"] == start["entry_id"]
    assert meta["options"]["from_entry"] == str(ckpt)
    assert f"entry:{start['entry_id']}" in json.loads((Path(s.dir) / "verified.json").read_text())
    # the first proposal is the entry one step smaller, with the entry's recipe; nothing as
    # large as the entry was trained
    assert s.n_trials == 1 and s.trained_above_incumbent == []
    (t,) = s.trials
    assert t["config"]["model.d_ff"] == 16 and t["params"] < start["params"]
    assert t["config"]["train.lr"] == pytest.approx(json.loads(
        (ckpt / "config.json").read_text())["train"]["lr"])
    assert s.incumbent is not None and s.incumbent <= start["params"]
    # seeds by the space's rule, and the summary keeps the seeds figure
    assert t["seeds_trained"] == seeds_for(((2000, 1), (0, 2)), t["params"])
    assert 0 <= t["seeds_reached"] <= t["seeds_trained"]
    # the published section names the entry it started from, then this search's command
    text = "\n".join(search_lines({"search_name": "fe", "trial_id": t["trial_id"]}, root))
    assert f"It started from entry {start['entry_id']}" in text and cmd in text
    assert "not found by a search" in text
