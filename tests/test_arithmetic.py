"""Versioned arithmetic (core/arithmetic.py): every checkpoint and training state records the
version of training's arithmetic that made it; a state of another version is refused in one
line instead of being continued with other floats (a new run may still start from its weights);
a checkpoint without the field is version 1; each published entry names its version and the
commit that retrains it bit for bit, in entries.json, LEADERBOARD.md and `arithsweep show`.

    .venv/bin/python -m pytest tests/test_arithmetic.py -q -n 0
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

from arithsweep.core.arithmetic import ARITHMETIC, VERSIONS, retrains, version_of
from arithsweep.core.errors import CheckpointError, ConfigError
from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.training.resume import latest_state

REPO = Path(__file__).resolve().parents[1]
BOARD = REPO / "leaderboard"
RECORD = "add10-36-424351b3"  # entry 60: its commands retrained bit for bit at 8d8bf16
V1 = "arithmetic 1, retrains bit for bit at commit 8d8bf16 (`git checkout 8d8bf16` or " \
     "`pip install git+<repo>@8d8bf16`)"
NET = ["--task", "add2", "--d-model", 8, "--heads", 2, "--d-ff", 8, "--seeds", 2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A short add2 run's folder (config.json, resume/ with its final state), trained once
    through the CLI in this process (a module fixture has no capsys for helpers.run)."""
    from arithsweep.cli.app import main

    out = tmp_path_factory.mktemp("arith") / "a"
    old = sys.argv
    sys.argv = ["arithsweep", "train", *map(str, NET), "--steps", "40", "--lr", "0.02",
                "--out", str(out), "--set", "eval_every=20"]
    try:
        main()
    except SystemExit as e:
        assert not e.code, e.code
    finally:
        sys.argv = old
    return out


def _state_json(out: Path) -> Path:
    return sorted((out / "resume").glob("state-*.json"))[-1]


def _as_version(out: Path, version: int | None) -> None:
    """Rewrite the run's state as one written with `version` (None: before the field). The
    tensors' sha256 is of the tensors file, so the state stays complete."""
    path = _state_json(out)
    doc = json.loads(path.read_text())
    doc.pop("arithmetic", None)
    if version is not None:
        doc["arithmetic"] = version
    path.write_text(json.dumps(doc))


def _copy(run_dir: Path, dst: Path) -> Path:
    shutil.copytree(run_dir, dst)
    return dst


def test_checkpoints_and_states_record_the_arithmetic(trained):
    meta = json.loads((trained / "config.json").read_text())["meta"]
    assert meta["arithmetic"] == ARITHMETIC
    assert load_checkpoint(trained).arithmetic == ARITHMETIC
    assert json.loads(_state_json(trained).read_text())["arithmetic"] == ARITHMETIC
    assert latest_state(trained / "resume").doc["arithmetic"] == ARITHMETIC
    # this version's published text names its first commit, any later one of it retrains it
    assert retrains({"meta": meta}) == (f"arithmetic {ARITHMETIC}, retrains bit for bit at any "
                                        f"commit of arithmetic {ARITHMETIC} that reads its "
                                        f"config (from {VERSIONS[ARITHMETIC].first} on)")


def test_every_version_has_its_row():
    """Bumping ARITHMETIC closes the old row (its last and retrain commits) and opens one."""
    assert sorted(VERSIONS) == list(range(1, ARITHMETIC + 1))
    for v, row in VERSIONS.items():
        assert (row.first is None) == (v == 1) and (row.last is None) == (v == ARITHMETIC)
        assert (row.retrain is None) == (v == ARITHMETIC)


def test_a_checkpoint_without_the_field_is_version_1(tmp_path):
    ck = load_checkpoint(_copy(BOARD / "checkpoints" / RECORD, tmp_path / "old"))
    assert "arithmetic" not in ck.meta and ck.arithmetic == 1
    assert version_of({}) == version_of(None) == version_of({"arithmetic": "2"}) == 1


@pytest.mark.parametrize("version", [None, 1, 2, 3, ARITHMETIC + 1])
def test_resuming_a_state_of_another_arithmetic_is_one_line(trained, tmp_path, version):
    out = _copy(trained, tmp_path / "run")
    _as_version(out, version)
    done = subprocess.run([sys.executable, "-m", "arithsweep", "train", "--resume", str(out)],
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "Traceback" not in done.stderr, \
        done.stderr
    old = version or 1
    assert f"written with arithmetic {old}" in lines[0]
    assert f"trains with arithmetic {ARITHMETIC}" in lines[0]
    # an older version's state names that version's last commit to go on with (1: 970b2be,
    # 2: 8701213, before the tiny layout's tail went native; 3: a0e9ca1, before the kernel's fused
    # multiply-adds); a newer one, its own arithsweep
    last = {1: "970b2be", 2: "8701213", 3: "a0e9ca1"}.get(old)
    assert last is None or f"git checkout {last}" in lines[0], lines[0]
    assert (last is None) == ("the arithsweep that wrote it" in lines[0]), lines[0]
    with pytest.raises(CheckpointError, match="whose floats differ"):
        latest_state(out / "resume")


def test_a_new_run_may_start_from_another_arithmetics_state(trained, tmp_path, capsys):
    """init_from takes only a state's weights (or moments): a new run with this arithmetic,
    whose checkpoint says the earlier run retrains at its own version's commit."""
    from arithsweep.leaderboard.provenance import state_chain

    a = _copy(trained, tmp_path / "a")
    _as_version(a, 1)
    assert latest_state(a / "resume", continuing=False).step == 40
    code, _, err = run(capsys, "train", *NET, "--steps", 20, "--lr", 0.001, "--init-from",
                       a / "resume", "--set", "warmup=0", "--out", tmp_path / "b")
    assert code == 0, err
    b = json.loads((tmp_path / "b" / "config.json").read_text())
    assert b["meta"]["arithmetic"] == ARITHMETIC and b["meta"]["init_from_state"]["arithmetic"] == 1
    said = " ".join(state_chain(b, "b", "It"))
    assert "the earlier one with arithmetic 1, which retrains bit for bit at commit 8d8bf16" \
        in said


def test_resuming_a_search_of_another_arithmetic_is_refused(tmp_path):
    from arithsweep.search.driver import SEARCH_FORMAT, _stored_options
    from arithsweep.search.options import SearchOptions

    sdir = tmp_path / "add3-s"
    sdir.mkdir()
    meta = {"name": "add3-s", "task": "add3", "target": 0.99, "search_format": SEARCH_FORMAT}
    (sdir / "search.json").write_text(json.dumps(meta))  # written before the field: 1
    with pytest.raises(ConfigError, match=r"'add3-s': written with arithmetic 1.*970b2be"):
        _stored_options(sdir, SearchOptions(resume="add3-s"))
    (sdir / "search.json").write_text(json.dumps({**meta, "arithmetic": ARITHMETIC}))
    assert _stored_options(sdir, SearchOptions(resume="add3-s"))["task"] == "add3"


def test_each_published_entry_names_its_arithmetic_and_commit():
    """entries.json holds what publish writes from each published config.json; entry 60
    retrains at 8d8bf16 (LEADERBOARD.md says so above its command); the entries trained
    before the rounding was pinned still say a retrain trains other floats."""
    from arithsweep.leaderboard.published import arithmetic_fields, read_index

    md = (BOARD / "LEADERBOARD.md").read_text()
    sections = {s.split("\n", 1)[0].rsplit(" ", 1)[-1]: s for s in md.split("\n## ")[1:]}
    for e in read_index(BOARD):
        config = json.loads((BOARD / e["checkpoint"] / "config.json").read_text())
        assert {k: e[k] for k in ("arithmetic", "retrain_commit", "retrains")} == \
            arithmetic_fields(config)
        section = sections[e["sha256"][:8]]
        # a commit, or any commit of a version whose floats for its kind this one keeps
        if e["retrain_commit"] or "at any commit of" in e["retrains"]:
            assert e["retrains"] in section
        else:
            assert "other floats" in section and e["retrains"].startswith("arithmetic 1, ")
    record = next(e for e in read_index(BOARD) if e["id"] == 60)
    assert (record["arithmetic"], record["retrain_commit"], record["retrains"]) == \
        (1, "8d8bf16", V1)


def test_show_says_how_to_get_the_commit(tmp_path):
    shutil.copytree(BOARD, tmp_path / "leaderboard",
                    ignore=shutil.ignore_patterns("pictures", "leaderboard.db*"))
    env = {**{k: v for k, v in os.environ.items() if k != "ARITHSWEEP_DB"}, "COLUMNS": "300"}
    done = subprocess.run([sys.executable, "-m", "arithsweep", "show", "60"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert V1 in done.stdout.replace("\n", " ")


def test_a_search_of_another_arithmetic_resumes_only_when_asked(tmp_path):
    """--restart-unfinished lets a search of another arithmetic go on here (the refusal says
    so); its resume is recorded, and the search is this version's from then on."""
    from arithsweep.search.driver import SEARCH_FORMAT, _stored_options
    from arithsweep.search.options import SearchOptions
    from arithsweep.search.plan import settle
    from arithsweep.search.space.spaces import load_space

    sdir = tmp_path / "add3-s"
    sdir.mkdir()
    meta = {"name": "add3-s", "task": "add3", "target": 0.99, "search_format": SEARCH_FORMAT,
            "arithmetic": 2}
    (sdir / "search.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="--restart-unfinished"):
        _stored_options(sdir, SearchOptions(resume="add3-s"))
    opts = SearchOptions(resume="add3-s", restart_unfinished=True, trials=8)
    stored = _stored_options(sdir, opts)
    _, lines = settle(opts, load_space("microadder"), "add3", None, None, stored, sdir)
    assert f"unfinished ones train again from step 0 under arithmetic {ARITHMETIC}" in lines[0]
    with pytest.raises(ConfigError, match="goes with --resume"):
        SearchOptions(task="add3", restart_unfinished=True)


def test_a_trial_state_of_another_arithmetic_trains_again_from_step_0(monkeypatch, tmp_path):
    """A search trial restored from a checkpoint whose training state another arithmetic
    wrote, with floats this one moved, starts again from step 0 (its floats are never
    continued); one of this version's, or of an older one whose kind of run no version since
    moved, goes on from its step."""
    pytest.importorskip("ray")
    from test_continue_round import _Restored
    from test_finishers import _fake_tune, _trial_setup

    from arithsweep.search.trials import trainable

    over = {"steps": 300, "eval_every": 100, "seeds": 2, "finish_rounds": 0, "target": 1.0,
            "checkpoint_every": 100}
    fake = _fake_tune(monkeypatch, tmp_path / "whole")
    (tmp_path / "whole").mkdir()
    trainable.TrialRunner([_trial_setup(**over)], {"extra_rounds": 0}, {}).run()
    mid = next(ck for ck, row in fake.checkpoints if row["step"] == 200)

    def first_row(name: str) -> dict:
        again = _fake_tune(monkeypatch, tmp_path / name)
        (tmp_path / name).mkdir()
        monkeypatch.setattr(again, "get_checkpoint", lambda: _Restored(mid))
        trainable.TrialRunner([_trial_setup(**over)], {"extra_rounds": 0}, {}).run()
        return [r for r in again.rows if "em" in r][0]

    assert first_row("same")["step"] == 300
    docs = list((mid / "state").glob("state-*.json"))
    for doc in docs:  # the tiny layout's floats: 6 moved only the reference layout's and GPUs'
        doc.write_text(json.dumps({**json.loads(doc.read_text()), "arithmetic": 5}))
    assert json.loads(docs[0].read_text())["layout"] == "tiny"
    assert first_row("kept")["step"] == 300
    for doc in docs:  # a state that recorded no kind counts as moved
        doc.write_text(json.dumps({k: v for k, v in json.loads(doc.read_text()).items()
                                   if k != "layout"}))
    (mid / "best" / "config.json").write_text(json.dumps(  # a best the restart must not keep
        {**json.loads((mid / "best" / "config.json").read_text()),
         "metrics": {"eval_exact_match": 0.97}}))
    row = first_row("other")
    assert row["step"] == 100 and row["best_em"] == row["em"] < 0.97


def test_a_version_that_moved_another_kind_keeps_a_runs_floats(monkeypatch):
    """A version names the kinds of run it moved: a tiny-layout checkpoint of 5 retrains at
    any commit of 5 and of a 6 that moved only the reference layout, a reference one at 5's
    last commit; a training state resumes so too. The kind comes from the meta's layout and
    device, else from where it repeats; a finish command's output claims no kind."""
    import arithsweep.core.arithmetic as A
    from arithsweep.core.training.resume import _check_doc

    six = {**A.VERSIONS, 5: A.Version(first="92b8369", last="aaaaaaa", retrain="aaaaaaa",
                                      moved=("tiny",)),
           6: A.Version(first="bbbbbbb", last=None, retrain=None, moved=("reference", "cuda"))}
    monkeypatch.setattr(A, "VERSIONS", six)
    monkeypatch.setattr(A, "ARITHMETIC", 6)
    tiny = {"arithmetic": 5, "device": "cpu", "layout": "tiny", "repeats": "any x86-64"}
    old_tiny = {"arithmetic": 5, "device": "cpu", "repeats": "any x86-64 with AVX2 or AVX-512"}
    ref = {"arithmetic": 5, "device": "cpu", "layout": "reference"}
    assert [A.kind_of(m) for m in (tiny, old_tiny, ref)] == ["tiny", "tiny", "reference"]
    assert A.kind_of({**tiny, "device": "cuda:0"}) == "cuda"
    assert A.kind_of({**tiny, "finished_from": "ab"}) is None and A.kind_of({}) is None
    assert A.same_floats(5, "tiny") and not A.same_floats(5, "reference")
    assert not A.same_floats(4, "reference") and not A.same_floats(5, None)
    assert A.same_floats(3, "tiny") is False  # 4 and 5 moved the tiny layout
    assert A.retrain_commit(5, "tiny") is None and A.retrain_commit(5, "reference") == "aaaaaaa"
    assert A.retrains({"meta": tiny}) == (
        "arithmetic 5, retrains bit for bit at any commit of arithmetic 5 to 6 (no version "
        "since moved a tiny run's floats) that reads its config (from 92b8369 on)")
    assert "at commit aaaaaaa" in A.retrains({"meta": {**ref, "repeats": "a machine"}})
    state = {"format": "arithsweep-train-state", "arithmetic": 5, "device": "cpu"}
    from arithsweep.core.training import resume as R
    state.update(format=R.STATE_FORMAT, state_version=R.STATE_VERSION,
                 arithsweep_version=R.__version__)
    _check_doc(Path("s"), {**state, "layout": "tiny"}, continuing=True)  # goes on
    with pytest.raises(CheckpointError, match="written with arithmetic 5"):
        _check_doc(Path("s"), {**state, "layout": "reference"}, continuing=True)
    with pytest.raises(CheckpointError, match="written with arithmetic 5"):
        _check_doc(Path("s"), state, continuing=True)  # no layout recorded: refused
