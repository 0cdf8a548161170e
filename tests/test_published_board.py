"""The published board on a fresh clone: `arithsweep leaderboard` with no database lists every
entry of leaderboard/LEADERBOARD.md from leaderboard/entries.json with the same figures, each
checked by sha256 (a tampered copy is listed as failing, never as verified), without torch;
beside a local database the two are told apart; `verify --published` re-verifies them into it.
Every test works on a copy of leaderboard/ under tmp_path (the repository's files stay as they
are), run from the copy's parent as a clone is (the default database, leaderboard/leaderboard.db,
absent).

    .venv/bin/python -m pytest tests/test_published_board.py -q
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from arithsweep.core.evaluation.stats import percent
from arithsweep.leaderboard import published as pub

REPO = Path(__file__).resolve().parents[1]
BOARD = REPO / "leaderboard"
PUBLISHED = len(json.loads((BOARD / "entries.json").read_text())["entries"])
TAMPERED = "mul2-17376-e50fdf1a"  # a 10,000-problem entry beside a second mul2 entry


def md_rows(md: str) -> list[list[str]]:
    """The cells of LEADERBOARD.md's first table (the published entries)."""
    head = md.split("\n## ", 1)[0]
    return [[c.strip() for c in ln.strip("|").split(" | ")]
            for ln in head.splitlines() if ln.startswith("| ") and "](checkpoints/" in ln]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A copy of the published board (no pictures: nothing here reads them), and no database."""
    shutil.copytree(BOARD, tmp_path / "leaderboard",
                    ignore=shutil.ignore_patterns("pictures", "leaderboard.db*"))
    return tmp_path


def cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "ARITHSWEEP_DB"}  # the default DB
    return subprocess.run([sys.executable, "-m", "arithsweep", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env={**base, **(env or {})})


def listing(cwd: Path, *args: str) -> list[dict]:
    out = cli(cwd, "leaderboard", "--json", *args)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


def test_a_fresh_clone_lists_every_published_row_with_its_figures(clone):
    rows = listing(clone, "--all")
    table = md_rows((clone / "leaderboard" / "LEADERBOARD.md").read_text())
    assert len(table) == len(rows) == PUBLISHED
    by_name = {Path(r["checkpoint_path"]).name: r for r in rows}
    for task, params, em, nines, n, arch, _seeds, link in table:
        r = by_name[re.match(r"\[([^\]]+)\]", link)[1]]
        assert [r["task"], str(r["params"]), percent(r["exact_match"]), str(r["nines"]),
                f"{r['n_problems']:,}", r["architecture"]] == [task, params, em, nines, n, arch]
        assert (r["source"], r["sha256_ok"], r["status"]) == ("published", True, "sha256 ok")
        assert r["rank"] >= 1 and (clone / r["checkpoint_path"] / "model.safetensors").is_file()
    local_keys = set(pub.ROW_FIELDS) | set(pub.SOURCE_FIELDS)  # the shape of a local row
    assert all(set(r) == local_keys for r in rows)
    # the index's "seeds reached" and ids are LEADERBOARD.md's too
    index = {e["checkpoint"].split("/")[1]: e for e in pub.read_index(clone / "leaderboard")}
    assert sorted(index) == sorted(by_name)
    for *_, seeds, link in table:
        assert index[re.match(r"\[([^\]]+)\]", link)[1]]["seeds_reached"] == seeds
    # with no local entry the default is the whole board too, as LEADERBOARD.md shows it;
    # one best row per task on request (--limit keeps its meaning); a reader creates no database
    assert listing(clone) == rows
    best = [r for r in rows if r["rank"] == 1]
    assert sorted(r["task"] for r in best) == sorted({r["task"] for r in rows})
    assert not (clone / "leaderboard" / "leaderboard.db").exists()


def test_the_table_marks_them_published_and_names_the_reverify_command(clone):
    out = cli(clone, "leaderboard")
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert "source" in out.stdout and out.stdout.count("published") >= 11
    said = " ".join(out.stdout.split())
    assert "arithsweep verify --published leaderboard" in said
    md = cli(clone, "leaderboard", "--markdown", "--task", "add10").stdout
    doc = json.loads((clone / "leaderboard" / "entries.json").read_text())
    add10 = [e for e in (doc["entries"] if isinstance(doc, dict) else doc) if e["task"] == "add10"]
    assert "| source |" in md and md.count("| published |") == len(add10) >= 2
    csv = cli(clone, "leaderboard", "--csv", "--all").stdout.splitlines()
    assert csv[0].endswith(",source,sha256_ok,status") and len(csv) == PUBLISHED + 1
    assert all(line.endswith(",published,true,sha256 ok") for line in csv[1:])


def test_a_tampered_published_checkpoint_is_listed_as_failing_its_sha256(clone):
    weights = clone / "leaderboard" / "checkpoints" / TAMPERED / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 1  # one bit of the last tensor value
    weights.write_bytes(bytes(blob))
    gone = clone / "leaderboard" / "checkpoints" / "add2-216-52b633c5" / "model.safetensors"
    gone.unlink()
    rows = {Path(r["checkpoint_path"]).name: r for r in listing(clone, "--all")}
    assert len(rows) == PUBLISHED
    bad, missing = rows[TAMPERED], rows["add2-216-52b633c5"]
    assert (bad["sha256_ok"], bad["status"], bad["rank"]) == (False, "sha256 mismatch", None)
    assert (missing["sha256_ok"], missing["status"]) == (False, "weights missing")
    assert [r["rank"] for r in rows.values() if r["task"] == "mul2" and r["sha256_ok"]] == [1]
    # failing rows are listed even when only the best of each task is: never hidden
    best = listing(clone, "--task", "mul2")
    assert sorted((r["status"], r["rank"] or 0) for r in best) == [
        ("sha256 mismatch", 0), ("sha256 ok", 1)]
    out = cli(clone, "leaderboard", "--task", "mul2")
    assert "published: sha256 mismatch" in out.stdout and out.returncode == 0


def test_the_published_listing_loads_no_heavy_library(clone):
    code = ("import sys\nfrom arithsweep.cli.app import main\n"
            "sys.argv = ['arithsweep', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = {'torch', 'ray', 'mlflow'} & set(sys.modules)\n"
            "print('HEAVY', sorted(heavy), file=sys.stderr)\n")
    for argv in (["leaderboard"], ["leaderboard", "--json", "--all"], ["leaderboard", "--csv"],
                 ["leaderboard", "--task", "add3", "--markdown"]):
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                           cwd=clone, timeout=120,
                           env={k: v for k, v in os.environ.items() if k != "ARITHSWEEP_DB"})
        assert "HEAVY []" in r.stderr and "published" in r.stdout, (argv, r.stderr[-2000:])


def test_filters_apply_to_published_rows(clone):
    assert {r["task"] for r in listing(clone, "--task", "ADD3", "--all")} == {"add3"}
    assert len(listing(clone, "--task", "add3", "--all")) == sum(
        e["task"] == "add3" for e in pub.read_index(clone / "leaderboard"))
    exact = listing(clone, "--target", "1", "--all")
    assert exact and all(r["exact_match"] == 1.0 for r in exact)
    smallest = sorted(e["params"] for e in pub.read_index(clone / "leaderboard"))[:3]
    assert [r["params"] for r in listing(clone, "--all", "--limit", "3")] == smallest
    out = cli(clone, "leaderboard", "--task", "sub2")
    said = " ".join(out.stderr.split())
    assert out.returncode == 0 and "leaderboard/entries.json match task sub2" in said
    assert f"({PUBLISHED} entries in all)" in said
    none = cli(clone, "leaderboard", "--published", "")  # the database alone: still empty
    assert none.returncode == 0 and "no leaderboard database" in " ".join(none.stderr.split())


def test_local_and_published_entries_are_told_apart(clone):
    from test_report import make_report

    from arithsweep.leaderboard.board import open_db

    add2 = next(e for e in pub.read_index(clone / "leaderboard") if e["task"] == "add2")
    board = open_db(str(clone / "leaderboard" / "leaderboard.db"))
    board.record(make_report(task="add2", params=216, exact_match=0.9992, sha256=add2["sha256"],
                             checkpoint_path=str(clone / "elsewhere")))
    board.record(make_report(task="add2", params=300, exact_match=1.0, sha256="5" * 64))
    board.close()
    rows = listing(clone, "--all", "--task", "add2")
    assert [(r["params"], r["source"], r["rank"]) for r in rows] == [
        (216, "local", 1), (300, "local", 2)]  # the published add2 is the local one: once
    rows = listing(clone, "--all")
    assert len(rows) == PUBLISHED + 1 and sum(r["source"] == "local" for r in rows) == 2
    assert {r["sha256_ok"] for r in rows if r["source"] == "local"} == {None}
    out = cli(clone, "leaderboard", "--all")
    assert "local" in out.stdout and "published" in out.stdout


def test_a_missing_or_corrupt_index_is_one_clear_line(clone):
    index = clone / "leaderboard" / "entries.json"
    good = index.read_text()
    every = (["leaderboard"], ["leaderboard", "--json"], ["verify", "--published"])
    for text, words, commands in (
            ("{not json", "not valid JSON", every), ("[]", "not an arithsweep", every[:1]),
            (good.replace('"version": 1', '"version": 9'), "version 9", every[:1]),
            (good.replace('"checkpoints/add2', '"../add2', 1), "entry", every[:1])):
        index.write_text(text)
        for args in commands:
            out = cli(clone, *args)
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr
            assert lines[0].startswith("error: ") and words in lines[0], (args, lines)
            assert "entries.json" in lines[0]
    index.unlink()
    out = cli(clone, "leaderboard")
    assert out.returncode == 2 and "entries.json is missing" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    # with local entries, those still list, after one warning line
    from test_report import make_report

    from arithsweep.leaderboard.board import open_db

    open_db(str(clone / "leaderboard" / "leaderboard.db")).record(make_report(sha256="6" * 64))
    out = cli(clone, "leaderboard", "--json")
    assert out.returncode == 0 and len(json.loads(out.stdout)) == 1
    assert out.stderr.startswith("warning: ") and len(out.stderr.strip().splitlines()) == 1


def test_verify_published_reverifies_and_records_each_entry(clone):
    """A board of two entries: the add2 one (10,000 problems, seconds) is re-verified and
    recorded under its published number; the tampered one is not verified at all."""
    folder = clone / "leaderboard"
    doc = json.loads((folder / "entries.json").read_text())
    doc["entries"] = [e for e in doc["entries"]
                      if e["checkpoint"].endswith(("add2-216-52b633c5", TAMPERED))]
    (folder / "entries.json").write_text(json.dumps(doc))
    weights = folder / "checkpoints" / TAMPERED / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    out = cli(clone, "verify", "--published", "--json")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: 1 of 2 published entries were not recorded ({TAMPERED}); see each one's status"]
    got = {Path(r["checkpoint"]).name: r for r in json.loads(out.stdout)}
    add2 = got["add2-216-52b633c5"]
    assert add2["recorded"] and add2["status"] == "recorded" and add2["entry_id"] == 9
    assert add2["exact_match"] == add2["published_exact_match"] and add2["n_problems"] == 10**4
    assert got[TAMPERED]["status"] == "sha256 mismatch: not re-verified"
    rows = listing(clone, "--all")
    assert [(r["task"], r["source"], r["status"]) for r in rows] == [
        ("add2", "local", "verified"), ("mul2", "published", "sha256 mismatch")]


def test_publish_writes_the_index_it_lists(tmp_path):
    """`publish` writes entries.json beside LEADERBOARD.md: what `leaderboard` lists there is
    what the database held (a small untrained checkpoint: publishing checks files, not skill)."""
    from test_report import make_report

    from arithsweep.core.model.checkpoint import save_checkpoint
    from arithsweep.core.model.model import ArithTransformer, count_params
    from arithsweep.core.overrides import build_configs
    from arithsweep.leaderboard import publish

    task, m, t = build_configs("add2", None, None, {"d_model": 8, "n_heads": 1, "d_ff": 16})
    model, path = ArithTransformer(m), tmp_path / "ck" / "add2"
    sha = save_checkpoint(path, model, task, 0, t)
    report = make_report(task="add2", params=count_params(model), exact_match=1.0,
                         sha256=sha, checkpoint_path=str(path), n_failures=0,
                         reproduce=f"arithsweep train --task add2 --config {path}/config.json")
    row = {**report.to_dict(), "breakdown": report.breakdown(), "id": 7, "rank": 1,
           "created_at": "2026-01-02T00:00:00"}
    dest = tmp_path / "site"
    publish.publish([row], dest)
    (entry,) = pub.read_index(dest)
    name = publish.checkpoint_dir_name(row)
    assert entry["checkpoint"] == f"checkpoints/{name}" and entry["seeds_reached"]
    (listed,) = pub.published_rows(dest)
    assert listed["status"] == "sha256 ok" and listed["id"] == 7
    assert {k: listed[k] for k in ("task", "params", "exact_match", "n_problems", "nines",
                                   "sha256", "breakdown", "failures")} == {
        k: row[k] for k in ("task", "params", "exact_match", "n_problems", "nines", "sha256",
                            "breakdown", "failures")}
    assert "config.json" in entry["reproduce"] and name in entry["reproduce"]
    publish.publish([row], dest)  # publishing again replaces its own index
    (dest / "entries.json").write_text('{"mine": true}')
    with pytest.raises(publish.ArithsweepError, match="entries.json was not written"):
        publish.publish([row], dest)
