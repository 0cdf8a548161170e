"""Tune's experiment snapshot survives a driver killed while Tune writes it: the keeper holds the
newest whole copy, and `repair` (run by `search --resume`) puts it back where a file was cut off,
and fills a checkpoint the snapshot names that Tune has since replaced. Fast: files only.

    .venv/bin/python -m pytest tests/test_snapshots.py -q
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from arithsweep.core.errors import ArithsweepError
from arithsweep.search.snapshots import KEPT, complete, keep, kept_copies, repair, snapshot_files

S1, S2 = "2026-11-26_10-00-00", "2026-11-26_11-00-00"
# a later snapshot's steps are written wider, so its files differ in size as well as mtime
# (file times tick in jiffies: two writes a few ms apart may share one)


def _snapshot(exp: Path, session: str, step: int, checkpoint: str = "checkpoint_000001") -> None:
    entry = [json.dumps({"relative_logdir": "trial_1"}),
             json.dumps({"last_result": {"checkpoint_dir_name": checkpoint, "step": step}})]
    (exp / f"experiment_state-{session}.json").write_text(json.dumps({"trial_data": [entry]}))
    (exp / f"searcher-state-{session}.pkl").write_bytes(pickle.dumps({"step": step}))
    # Tune's search_gen_state "json" is a pickle
    (exp / f"search_gen_state-{session}.json").write_bytes(pickle.dumps({"step": step}))


def _step(exp: Path, session: str) -> int:
    (entry,) = json.loads((exp / f"experiment_state-{session}.json").read_text())["trial_data"]
    return json.loads(entry[1])["last_result"]["step"]


def test_the_keeper_keeps_only_whole_snapshots_and_only_the_newest(tmp_path: Path) -> None:
    exp = tmp_path / "tune"
    exp.mkdir()
    assert keep(exp) == ()  # nothing written yet
    _snapshot(exp, S1, 100)
    sig = keep(exp)
    assert sig and len(kept_copies(exp)) == 1
    assert keep(exp, sig) == sig and len(kept_copies(exp)) == 1  # unchanged: no new copy
    (exp / f"experiment_state-{S1}.json").write_text('{"trial_data": [')  # mid-write
    assert keep(exp, sig) == sig  # a cut-off file is never kept
    _snapshot(exp, S1, 20000)
    assert keep(exp, sig) != sig
    (newest,) = kept_copies(exp)  # the older copy is gone
    assert sorted(p.name for p in newest.iterdir()) == sorted(p.name for p in
                                                              snapshot_files(exp))
    assert pickle.loads((newest / f"search_gen_state-{S1}.json").read_bytes()) == {"step": 20000}


def test_a_cut_off_snapshot_is_restored_from_the_kept_copy(tmp_path: Path) -> None:
    exp = tmp_path / "tune"
    (exp / "trial_1" / "checkpoint_000001").mkdir(parents=True)
    _snapshot(exp, S1, 100)
    keep(exp)
    _snapshot(exp, S1, 20000)
    gen = exp / f"search_gen_state-{S1}.json"
    gen.write_bytes(gen.read_bytes()[:-5])  # killed while Tune copied it
    assert not all(complete(p) for p in snapshot_files(exp))
    changed = repair(exp)
    assert changed and changed[0].startswith("kept snapshot")
    assert all(complete(p) for p in snapshot_files(exp))
    # the whole kept set comes back, not a mix of two snapshots
    assert _step(exp, S1) == 100
    assert pickle.loads((exp / f"searcher-state-{S1}.pkl").read_bytes()) == {"step": 100}
    assert repair(exp) == []  # now whole: left alone


def test_a_new_runs_cut_off_first_snapshot_falls_back_to_the_last_runs(tmp_path: Path) -> None:
    """A resumed run killed in its own first write: its files go aside, the last run's stay."""
    exp = tmp_path / "tune"
    exp.mkdir()
    _snapshot(exp, S1, 100)
    (exp / f"experiment_state-{S2}.json").write_text("")
    assert [p.name for p in snapshot_files(exp)][0].endswith(f"{S2}.json")
    assert repair(exp) == ["an earlier run's snapshot"]
    assert all(S1 in p.name for p in snapshot_files(exp))
    assert (exp / KEPT / "truncated" / f"experiment_state-{S2}.json").exists()


def test_a_cut_off_snapshot_with_nothing_kept_is_one_clear_error(tmp_path: Path) -> None:
    exp = tmp_path / "tune"
    exp.mkdir()
    (exp / f"experiment_state-{S1}.json").write_text('{"trial_da')
    with pytest.raises(ArithsweepError, match="cut off while it was written"):
        repair(exp)


def test_a_snapshot_naming_a_replaced_checkpoint_is_repaired(tmp_path: Path) -> None:
    """Tune deletes the replaced checkpoint before it writes the snapshot naming the new one;
    killed between the two, the snapshot names a folder that is gone, and Tune refuses it.
    The trial's newest checkpoint is put under that name (its later state); nothing else
    changes, and an intact snapshot is left alone."""
    exp = tmp_path / "tune"
    trial = exp / "trial_1"
    (trial / "checkpoint_000005" / "state").mkdir(parents=True)
    (trial / "checkpoint_000005" / "state" / "s.json").write_text("600")
    _snapshot(exp, S1, 500, checkpoint="checkpoint_000004")
    assert repair(exp) == ["trial_1/checkpoint_000004"]
    assert (trial / "checkpoint_000004" / "state" / "s.json").read_text() == "600"
    assert (trial / "checkpoint_000005").is_dir()
    assert repair(exp) == []  # now intact


def test_the_keeper_callback_skips_a_snapshot_caught_mid_copy(tmp_path: Path) -> None:
    """Tune copies a snapshot's files one after another; files written seconds apart are a new
    one beside the rest of the last, and a restore from that mix fails (a searcher that does
    not know a trial): the keeper waits for a snapshot written at one time."""
    import os
    from types import SimpleNamespace

    from arithsweep.search import snapshots

    exp = tmp_path / "tune"
    exp.mkdir()
    _snapshot(exp, S1, 100)
    keeper = snapshots.SnapshotKeeper()
    trials = [SimpleNamespace(storage=SimpleNamespace(experiment_fs_path=str(exp)))]

    def look() -> None:
        keeper._checked = 0.0  # each call is a look (the throttle is time, not behaviour)
        keeper.on_step_end(1, trials)

    look()
    (old,) = kept_copies(exp)
    _snapshot(exp, S1, 20000)
    st = (exp / f"searcher-state-{S1}.pkl").stat()
    os.utime(exp / f"searcher-state-{S1}.pkl", ns=(st.st_atime_ns, st.st_mtime_ns - 3 * 10**9))
    look()
    assert kept_copies(exp) == [old]  # the mix is not kept
    _snapshot(exp, S1, 20000)  # the next whole one is
    look()
    (new,) = kept_copies(exp)
    assert pickle.loads((new / f"searcher-state-{S1}.pkl").read_bytes()) == {"step": 20000}
    assert pickle.loads(pickle.dumps(keeper)).__dict__["_kept"] == ()  # Tune pickles it bare
