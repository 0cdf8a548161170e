"""Tune's experiment snapshot, kept whole across a killed driver, so `search --resume` can read it.

Tune writes its snapshot (`experiment_state-<session>.json`, with `search_gen_state-`,
`searcher-state-` and `callback-states-` files of the same session) into a staging folder and
copies it into the search's `tune/` folder from a background thread, in place. A driver killed
during that copy (SIGKILL, a machine lost) leaves a truncated file that `Tuner.restore` cannot
read, and with it the whole search; a fresh-clone CI run killed the resume test's driver in
that window once. Two parts close the hole:

- `SnapshotKeeper`, a driver callback, copies each complete snapshot it sees into
  `tune/.kept/<n>/` (a folder written in full, then renamed into place), keeping the newest;
- `repair`, before `Tuner.restore`, puts the kept copy back where the newest snapshot has a
  truncated file, and where a snapshot names a trial checkpoint that Tune has since replaced,
  puts the trial's newest checkpoint under that name (Tune deletes the replaced checkpoint
  just before it writes the snapshot naming the new one).

Driver side only (`tuner.new_tuner` adds the callback; `driver.run_search` repairs on --resume):

    callbacks=[..., snapshots.SnapshotKeeper()]
    snapshots.repair(sdir / "tune")           # before Tuner.restore / ExperimentAnalysis
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path

from ray import tune

from arithsweep.core.errors import ArithsweepError

KEPT = ".kept"  # under the Tune folder: the newest complete snapshot, one folder per copy
STATE_PREFIX = "experiment_state-"
CHECK_EVERY_S = 1.0  # the keeper looks at most this often (a listing and a few stats)
# Tune's thread copies a snapshot's files one after another within a millisecond or so, and
# never starts the next copy before the last one ended (snapshots come seconds apart): files
# written further apart than this are two snapshots, caught mid-copy
ONE_WRITE_NS = 200_000_000


def snapshot_files(exp_dir: Path) -> list[Path]:
    """The newest session's snapshot files: every `*-<session>.json|pkl` beside the newest
    `experiment_state-<session>.json` (Tune restores the newest of each kind by name)."""
    states = sorted(exp_dir.glob(f"{STATE_PREFIX}*.json"))
    if not states:
        return []
    session = states[-1].name[len(STATE_PREFIX):-len(".json")]
    return sorted(p for ext in ("json", "pkl") for p in exp_dir.glob(f"*-{session}.{ext}"))


def complete(path: Path) -> bool:
    """A snapshot file written to its end, told by its content (Tune's `search_gen_state-*.json`
    is a pickle): a pickle (protocol 2 and up opens with PROTO) ending in its STOP opcode, which
    a cut-off copy almost never does, and nothing is unpickled here; otherwise JSON that
    parses."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:1] == b"\x80":
        return data.endswith(b".")
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _signature(files: list[Path]) -> tuple:
    out = []
    for p in files:
        try:
            st = p.stat()
        except OSError:
            return ()
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def kept_copies(exp_dir: Path) -> list[Path]:
    """The kept copies, oldest first (a copy's folder is renamed into place only when whole)."""
    root = exp_dir / KEPT
    return sorted((d for d in root.glob("*") if d.is_dir() and d.name.isdigit()),
                  key=lambda d: int(d.name)) if root.is_dir() else []


def keep(exp_dir: Path, last: tuple = ()) -> tuple:
    """Copy the newest snapshot into `.kept/` if it is complete, written at one time and
    differs from `last` (the signature (name, size, mtime) kept before); returns the signature
    now kept. The copy is checked again after it is made: Tune may have started its next write
    meanwhile."""
    files = snapshot_files(exp_dir)
    sig = _signature(files)
    if not sig or sig == last:
        return last
    times = [t for _, _, t in sig]
    if max(times) - min(times) > ONE_WRITE_NS:  # half a new snapshot beside half the last one
        return last
    if not all(complete(p) for p in files):  # read last: it parses the whole snapshot
        return last
    root = exp_dir / KEPT
    tmp = root / f"{time.time_ns()}.tmp"
    tmp.mkdir(parents=True)
    try:
        for p in files:
            shutil.copy2(p, tmp / p.name)
        if not all(complete(tmp / p.name) for p in files) or _signature(files) != sig:
            return last
        os.replace(tmp, root / tmp.stem)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in kept_copies(exp_dir)[:-1]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob("*.tmp"):  # a copy a killed driver left half made
        shutil.rmtree(stale, ignore_errors=True)
    return sig


class SnapshotKeeper(tune.Callback):
    """Keeps the newest complete snapshot while the search runs (see the module docstring).
    It finds the Tune folder from its trials, so it holds no path: Tune pickles it with the
    tuner, and a moved search folder still resumes."""

    def __init__(self) -> None:
        self._kept: tuple = ()
        self._checked = 0.0

    def on_step_end(self, iteration, trials, **info) -> None:
        now = time.monotonic()
        if not trials or now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        # a full disk or an odd storage: the search goes on unkept, as with Tune alone
        with contextlib.suppress(OSError, AttributeError):
            self._kept = keep(Path(trials[0].storage.experiment_fs_path), self._kept)

    def __getstate__(self) -> dict:
        return {}  # nothing of a run's own belongs in the tuner's pickle

    def __setstate__(self, state: dict) -> None:
        self.__init__()


def repair(exp_dir: Path) -> list[str]:
    """Before `Tuner.restore`: make the newest snapshot readable and its checkpoints present.
    Returns what it changed ("kept snapshot <n>", "trial/checkpoint" names it filled);
    ArithsweepError when a file is truncated and nothing complete was kept."""
    changed = _restore_kept(exp_dir)
    return changed + _fill_checkpoints(exp_dir)


def _restore_kept(exp_dir: Path) -> list[str]:
    files = snapshot_files(exp_dir)
    if not files or all(complete(p) for p in files):
        return []
    copies = kept_copies(exp_dir)
    if copies:
        for p in sorted(copies[-1].iterdir()):
            shutil.copy2(p, exp_dir / p.name)
    # what is still truncated belongs to a session newer than the kept copy: set it aside, so
    # that Tune restores the newest whole snapshot (the kept one, or the last run's own)
    aside = exp_dir / KEPT / "truncated"
    for p in snapshot_files(exp_dir):
        if not complete(p):
            aside.mkdir(parents=True, exist_ok=True)
            os.replace(p, aside / p.name)
    if not all(complete(p) for p in snapshot_files(exp_dir)) or not snapshot_files(exp_dir):
        raise ArithsweepError(
            f"{exp_dir}: Tune's snapshot of this search was cut off while it was written (the "
            f"search was killed then) and no whole copy was kept; start the search again")
    return [f"kept snapshot {copies[-1].name}"] if copies else ["an earlier run's snapshot"]


def _fill_checkpoints(exp_dir: Path) -> list[str]:
    """Where the newest snapshot names a trial checkpoint that is gone, put the trial's newest
    checkpoint under that name: Tune deletes a trial's replaced checkpoint when it registers
    the next one and writes the snapshot naming the new one just after, so a driver killed
    between the two leaves a snapshot whose checkpoint Tune refuses to restore ("does not
    exist on storage anymore"), erroring the trial. The newest one holds the trial's own later
    state, which `trials.state.restored_state` would continue anyway."""
    snaps = sorted(exp_dir.glob(f"{STATE_PREFIX}*.json"))
    if not snaps:
        return []
    try:
        trials = json.loads(snaps[-1].read_text())["trial_data"]
        named = [(json.loads(a)["relative_logdir"],
                  (json.loads(b).get("last_result") or {}).get("checkpoint_dir_name"))
                 for a, b in trials]
    except (OSError, ValueError, KeyError, TypeError):
        return []  # not a snapshot this code knows: Tune decides
    filled = []
    for logdir, name in named:
        trial = exp_dir / str(logdir)
        if not name or (trial / name).exists():
            continue
        kept = sorted(trial.glob("checkpoint_*"))
        if kept:
            shutil.copytree(kept[-1], trial / name)
            filled.append(f"{logdir}/{name}")
    return filled
