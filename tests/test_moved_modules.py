"""A search made before the search wing had rooms (issue 57) still resumes after the move.

Tune pickles classes and functions by module and name: the searcher (tuner.pkl,
searcher-state-*.pkl), the callbacks, the trial-name function, the sizer and pack keyer, and the
trainable it registers (`arithsweep.search.trainable.run_trial`). arithsweep/search/__init__.py's
MOVED table keeps each old module name importable as the module it moved to, with no file left
at the wing's top.

tests/data/search-before-rooms.tar.gz is a whole search folder made by the code before the
move (commit 7b74b9e: one add2 trial of a two-point space, MLflow's and Optuna's databases
included, the MLflow artifacts, TensorBoard events and plot left out), made with

    git worktree add --detach /tmp/old 7b74b9e && cd /tmp/old && PYTHONPATH=/tmp/old \\
      python -m arithsweep search --task add2 --target 0.99 --space SPACE --trials 1 --fresh \\
      --name before-rooms --root /tmp/arithsweep-before-rooms/searches \\
      --db sqlite:////tmp/arithsweep-before-rooms/lb.db --cpus-per-trial 1 -j 1 --rounds 1

Its pickles hold absolute paths (the Optuna and MLflow databases), so the tests unpack it where
it was made.
"""

from __future__ import annotations

import fcntl
import glob
import importlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import arithsweep.search as wing
from arithsweep.core.arithmetic import ARITHMETIC

FOLDER = Path(__file__).resolve().parent / "data" / "search-before-rooms.tar.gz"
MADE_AT = Path("/tmp/arithsweep-before-rooms")  # where the old code made it (pickled paths)
# The wing's modules before the rooms (7b74b9e): every one is at the top or in MOVED.
BEFORE = {"bounding", "cluster", "cores", "driver", "incumbent", "live", "options", "packs",
          "plan", "plateau", "plots", "proposing", "replay", "results", "rounds",
          "run_settings", "searcher", "shrink", "snapshots", "space_fields", "space_file",
          "spaces", "telling", "tracking", "trainable", "trial", "trial_state", "tuner",
          "verdicts"}
# What a search's pickles name (tuner.pkl, searcher-state-*.pkl, Tune's registered trainable)
PICKLED = [("trainable", "run_trial"), ("searcher", "ConstrainedOptunaSearch"),
           ("searcher", "BudgetedSearchGenerator"), ("trial", "ProposalSizer"),
           ("packs", "PackKeyer"), ("spaces", "RayDefineByRun"), ("live", "LiveCallback"),
           ("live", "trial_dirname"), ("tracking", "MlflowTrialCallback"),
           ("incumbent", "VerifyCallback"), ("cores", "SpareCores")]


@pytest.fixture
def old_search():
    """The old search folder unpacked where it was made (its pickled Optuna storage opens its
    database there when unpickled), one test at a time on a shared machine; its root."""
    MADE_AT.parent.mkdir(exist_ok=True)
    with open(f"{MADE_AT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(MADE_AT, ignore_errors=True)
        try:
            with tarfile.open(FOLDER) as tar:  # the "data" filter where Python has it
                tar.extractall(MADE_AT, **({"filter": "data"} if hasattr(tarfile, "data_filter")
                                           else {}))
            yield MADE_AT / "searches"
        finally:
            shutil.rmtree(MADE_AT, ignore_errors=True)


def _new(old: str):
    return importlib.import_module(f"arithsweep.search.{wing.MOVED[old]}")


def test_every_module_of_the_wing_before_the_rooms_still_imports():
    """Each old name is the very module it moved to (one module object, so a test's
    monkeypatch or a pickled class reaches the same code), and no file shadows it."""
    top = {p.stem for p in Path(wing.__file__).parent.glob("*.py")} - {"__init__"}
    assert set(wing.MOVED) | top == BEFORE, "a module of the wing before the rooms is lost"
    assert not set(wing.MOVED) & top, "an old name is still a file at the wing's top"
    for old in wing.MOVED:
        assert importlib.import_module(f"arithsweep.search.{old}") is _new(old), old
        assert sys.modules[f"arithsweep.search.{old}"] is _new(old)


def test_the_table_imports_nothing_until_an_old_name_is_asked_for():
    code = ("import sys, arithsweep.search\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('arithsweep.search.')\n"
            "                or m.split('.')[0] in ('ray', 'optuna', 'torch', 'mlflow'))\n"
            "assert not loaded, loaded\n"
            "from arithsweep.search import space_file\n"
            "assert space_file is sys.modules['arithsweep.search.space.file']\n"
            "assert 'ray' not in sys.modules and 'torch' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize(("old", "name"), PICKLED, ids=lambda x: x)
def test_a_pickle_naming_an_old_module_loads_the_moved_object(old, name):
    pytest.importorskip("ray")
    payload = f"carithsweep.search.{old}\n{name}\n.".encode()  # GLOBAL: module, name; STOP
    assert pickle.loads(payload) is getattr(_new(old), name)


def test_the_pickles_of_a_search_made_before_the_rooms_load_the_moved_classes(old_search):
    """The folder's own pickles, as the old code wrote them, load into the moved classes."""
    pytest.importorskip("ray")
    from arithsweep.search import snapshots
    from arithsweep.search.propose import incumbent, searcher
    from arithsweep.search.report import live, tracking
    from arithsweep.search.space.spaces import RayDefineByRun
    from arithsweep.search.trials.configs import ProposalSizer
    from arithsweep.search.trials.packs import PackKeyer

    tune_dir = old_search / "before-rooms" / "tune"
    raw = (tune_dir / "tuner.pkl").read_bytes()
    assert b"arithsweep.search.searcher" in raw and b"arithsweep.search.propose" not in raw
    tuner = pickle.loads(raw)
    config, run = tuner["_tune_config"], tuner["_run_config"]
    assert type(config.search_alg) is searcher.BudgetedSearchGenerator
    assert config.trial_dirname_creator is live.trial_dirname
    assert [type(c) for c in run.callbacks] == [
        tracking.MlflowTrialCallback, live.LiveCallback, incumbent.VerifyCallback,
        snapshots.SnapshotKeeper]
    (state,) = glob.glob(str(tune_dir / "searcher-state-*.pkl"))
    raw = Path(state).read_bytes()
    assert b"arithsweep.search.trial" in raw and b"arithsweep.search.trials" not in raw
    kept = pickle.loads(raw)
    assert type(kept["_sizer"]) is ProposalSizer and type(kept["_keyer"]) is PackKeyer
    assert type(kept["_space"]) is RayDefineByRun


@pytest.mark.slow
def test_a_search_made_before_the_rooms_resumes_and_trains_on(old_search):
    """`search --resume` of the old folder restores Tune's experiment (its searcher, callbacks
    and stoppers unpickled from the old names), trains one more proposal and summarises both."""
    before = json.loads((old_search / "before-rooms" / "summary.json").read_text())
    # its floats are not this test's subject: a later arithmetic would refuse the resume
    meta = old_search / "before-rooms" / "search.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "arithmetic": ARITHMETIC}))
    r = subprocess.run(
        [sys.executable, "-m", "arithsweep", "search", "--resume", "before-rooms", "--trials",
         "2", "--root", str(old_search), "--db", f"sqlite:///{MADE_AT}/lb.db",
         "--cpus-per-trial", "1", "-j", "1", "--json"],
        capture_output=True, text=True, timeout=540, start_new_session=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"})
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["n_trials"] == 2
    ids = [t["trial_id"] for t in summary["trials"]]
    assert ids[0] == before["trials"][0]["trial_id"] and len(set(ids)) == 2
