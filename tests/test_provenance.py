"""A published entry that a search found names the search, its command and what it tried."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from arithsweep.leaderboard.provenance import search_command, search_lines

ROW = {"search_name": "add10-x", "trial_id": "abc123", "task": "add10"}


def _search(root: Path, command: str | None, summary: bool = True) -> Path:
    sdir = root / "add10-x"
    sdir.mkdir(parents=True)
    meta = {"name": "add10-x", "task": "add10", "target": 0.99,
            "options": {"task": "add10", "target": 0.99, "trials": 20, "concurrency": 1,
                        "time_budget": 8400.0, "seed": 3, "address": None, "space": ""}}
    if command:
        meta["command"] = command
    (sdir / "search.json").write_text(json.dumps(meta))
    if summary:
        (sdir / "summary.json").write_text(json.dumps({
            "n_trials": 15, "wall_time": 8460.0, "cpu_hours": 2.1,
            "skipped": [{}, {}, {}],
            "architectures": [{"seeds_trained": 8}, {"seeds_trained": 24}]}))
    return sdir


def test_a_recorded_command_is_published_as_it_was_typed(tmp_path):
    cmd = "arithsweep search --task add10 --target 0.99 --time-budget 140m -j 1"
    _search(tmp_path, cmd)
    text = "\n".join(search_lines(ROW, tmp_path))
    assert "search `add10-x`, trial `abc123`" in text
    assert cmd in text and "rebuilt" not in text
    assert "15 proposals of 2 architectures (32 seeds in all)" in text
    assert "skipped 3" in text and "141 minutes" in text and "2.10 CPU-hours" in text


def test_an_older_search_gets_its_command_rebuilt_and_says_so(tmp_path):
    sdir = _search(tmp_path, None, summary=False)
    cmd, recorded = search_command(json.loads((sdir / "search.json").read_text()))
    assert not recorded
    args = shlex.split(cmd)
    assert args[:2] == ["arithsweep", "search"]
    assert args[args.index("--time-budget") + 1] == "140m"
    assert args[args.index("--seed") + 1] == "3" and args[args.index("-j") + 1] == "1"
    text = "\n".join(search_lines(ROW, tmp_path))
    assert "rebuilt" in text and "proposals" not in text  # no summary: nothing invented


def test_no_search_no_lines_and_a_missing_folder_still_names_it(tmp_path):
    assert search_lines({"search_name": None}, tmp_path) == []
    lines = search_lines(ROW, tmp_path / "elsewhere")
    assert len([ln for ln in lines if ln]) == 1 and "add10-x" in lines[-1]


def test_a_resumed_search_shows_every_command_and_its_last_run(tmp_path):
    cmd = "arithsweep search --task add10 --target 0.99 --time-budget 140m -j 1"
    sdir = _search(tmp_path, cmd)
    meta = json.loads((sdir / "search.json").read_text())
    again = "arithsweep search --resume add10-x -n 60 --time-budget 100m"
    meta["resumes"] = [{"command": again, "at": "2026-11-25T08:04:05"}, {"command": None}]
    (sdir / "search.json").write_text(json.dumps(meta))
    text = "\n".join(search_lines(ROW, tmp_path))
    assert cmd in text and again in text and "resumed 2 times" in text
    assert "arithsweep search --resume add10-x\n" in text  # a resume without a command line
    # the wall time of one run is not the search's: it is named as the last run's
    assert "its last run took 141 minutes" in text and ", in 141 minutes" not in text
    # a summary that sums its finished runs says both
    summary = json.loads((sdir / "summary.json").read_text())
    (sdir / "summary.json").write_text(json.dumps({**summary, "total_wall_time": 12000}))
    text = "\n".join(search_lines(ROW, tmp_path))
    assert "its finished runs took 200 minutes together (the last 141)" in text


def test_a_search_in_another_root_is_found_from_the_entry_checkpoint(tmp_path):
    """A search run with `--root /elsewhere` keeps its trials' checkpoints inside its folder;
    the entry records that path, so publish finds the search without a symlink or a second
    --root, and a folder of the same name that is no search is passed over."""
    cmd = "arithsweep search --task add10 --root /elsewhere"
    sdir = _search(tmp_path / "elsewhere", cmd)
    best = sdir / "tune" / "trial_abc123" / "checkpoint_000003" / "best"
    best.mkdir(parents=True)
    (best / "add10-x").mkdir()  # same name, no search.json: not the search
    row = {**ROW, "checkpoint_path": str(best / "add10-x")}
    text = "\n".join(search_lines(row, tmp_path / "searches"))
    # found, and shown without the root, which named a folder of the machine that ran it
    assert "arithsweep search --task add10\n" in text and "/elsewhere" not in text
    assert "15 proposals of 2 architectures" in text


def test_a_proposal_cut_off_unfinished_is_counted_apart_from_the_finished_ones(tmp_path):
    sdir = _search(tmp_path, "arithsweep search --task add10")
    (sdir / "summary.json").write_text(json.dumps({
        "n_trials": 3, "wall_time": 6000.0, "cpu_hours": 3.2, "skipped": [{}],
        "architectures": [{"trials": 1, "seeds_trained": 2}, {"trials": 1, "seeds_trained": 2}]}))
    text = "\n".join(search_lines(ROW, tmp_path))
    assert ("3 proposals, 2 of them to the end (2 architectures, 4 seeds in all; "
            "1 cut off unfinished), and skipped 1") in text
    # all finished: the plain line
    (sdir / "summary.json").write_text(json.dumps({
        "n_trials": 2, "wall_time": 6000.0, "cpu_hours": 3.2, "skipped": [],
        "architectures": [{"trials": 2, "seeds_trained": 4}]}))
    assert "2 proposals of 1 architectures (4 seeds in all) and skipped 0" in \
        "\n".join(search_lines(ROW, tmp_path))


def test_a_command_that_left_the_space_to_its_default_names_the_space(tmp_path):
    """The default space of a task can change between versions (add10's did), so a command
    that named none gets the space it ran in as an option, and runs the same search today;
    one that named it is as typed."""
    cmd = "arithsweep search --task add10 --target 0.99"
    sdir = _search(tmp_path, cmd)
    meta = {**json.loads((sdir / "search.json").read_text()), "space": "microadder"}
    shown, recorded = search_command(meta)
    assert recorded and shown == cmd + " --space microadder"
    assert shlex.split(shown) == [*shlex.split(cmd), "--space", "microadder"]
    named = cmd + " --space adderboard"
    assert search_command({**meta, "command": named}) == (named, True)


def test_a_published_command_leaves_out_where_its_results_were_kept():
    """--db, --root and --mlflow-uri name files of the machine that ran the search: they change
    where results are kept, not what is found, and a reader's copy would trip over them."""
    ran = ("arithsweep search --task add10 --target 0.99 --db /work/pub.db --seed 0 "
           "--root=/tmp/s --mlflow-uri sqlite:////tmp/m.db -j 2")
    shown, _ = search_command({"command": ran, "space": "tbukic"})
    assert shown == "arithsweep search --task add10 --target 0.99 --seed 0 -j 2 --space tbukic"
    plain = "arithsweep search --task add3 --target 0.99 --space tbukic"
    assert search_command({"command": plain}) == (plain, True)  # nothing to drop: as typed


def test_recording_a_searchs_checkpoint_again_keeps_its_search(tmp_path, capsys):
    """`verify CKPT --record --db OTHER` on a checkpoint inside a search folder takes the
    search, trial and MLflow run from the search's verified.json, so that an entry recorded
    into another database (to publish it beside the board) still names the search that found
    it; a copy of the same weights elsewhere names none."""
    import shutil

    from arithsweep.cli.app import main

    src = Path(__file__).resolve().parents[1] / "leaderboard" / "checkpoints" / "add2-216-52b633c5"
    best = tmp_path / "searches" / "add2-s" / "tune" / "trial_ab12" / "checkpoint_000003" / "best"
    loose = tmp_path / "loose"
    for folder in (best, loose):
        folder.mkdir(parents=True)
        for name in ("model.safetensors", "config.json"):  # not entry.json: no published id
            shutil.copy(src / name, folder / name)
    (best.parents[3] / "search.json").write_text(json.dumps({"name": "add2-s", "task": "add2"}))
    (best.parents[3] / "verified.json").write_text(json.dumps({"ab12": {
        "trial_id": "ab12", "checkpoint": str(best), "mlflow_run_id": "run7"}}))

    def record(folder: Path, db: str) -> dict:
        args = ["arithsweep", "verify", str(folder), "--record", "--json", "--db",
                str(tmp_path / db)]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("sys.argv", args)
            try:
                main()
            except SystemExit as e:
                assert e.code in (0, None)
        return json.loads(capsys.readouterr().out)

    got = record(best, "a.db")
    assert (got["search_name"], got["trial_id"], got["mlflow_run_id"]) == (
        "add2-s", "ab12", "run7")
    got = record(loose, "b.db")
    assert got["search_name"] is None and got["trial_id"] is None
