"""A search trial's Tune checkpoints: its best model(s) and its whole training state.

Every checkpoint a trial reports holds `best/` (a pack: `p<j>/best` per proposal), what the
driver verifies and publishes, and `state/`, the training state of that very step
(`core.training.resume`: weights, AdamW moments, Grokfast EMA, data positions, RNGs, and the
trial's own counters: round, plateau, running best). States are written every
`checkpoint_every` steps or about every `checkpoint_seconds` (at an evaluation, so each one goes
to Tune with that evaluation's row) and whenever the trial's best improves, so Tune's latest
checkpoint always carries the newest state. A trial Tune restores (`search --resume`, a worker
restarted under `FailureConfig`) continues from it mid-run; so does the replay of a proposal the
search deadline cut, from the cut trial's checkpoint (`RESUME_FROM`).

Runs inside a Ray worker; used by `trainable.run_trial`:

    ts = TrialState(config)                  # reads tune.get_checkpoint() or RESUME_FROM
    ckpt = ts.checkpointing(cfg, extra=lambda: {...})
    train(task, model_cfg, cfg, on_eval=..., on_step=ts.on_step, checkpoint=ckpt)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray import tune

from arithsweep.core.errors import ArithsweepError
from arithsweep.core.training.path import PATH_STATES, PHASES_DIR, path_state
from arithsweep.core.training.resume import (
    Checkpointing,
    RunState,
    latest_state,
    proposal_state,
    same_run,
)
from arithsweep.search.trials.configs import RESUME_FROM
from arithsweep.search.trials.cores import GROWN_STATE_SECONDS, STATE_SAVED

STATE = "state"  # a trial checkpoint's training-state folder, beside best/
# the best model of the trial's finished rounds, saved as the next round begins: what its
# checkpoints keep when that round does worse, and a continued round's start
# (TrainConfig.init_from). In the state folder, so every Tune checkpoint carries it and a
# restored trial still has it
ROUNDS_BEST = "rounds-best"


def restored_state(ckpt: Path) -> RunState | None:
    """The state a trial restored from checkpoint folder `ckpt` continues: its own, or where
    that folder is gone, the newest state among its trial's checkpoints. Tune keeps one
    checkpoint (num_to_keep=1) and its experiment snapshot may name one it has since replaced
    when the driver is killed between the two; the newer one is the trial's own later state."""
    state = _state_in(ckpt / STATE) if ckpt.is_dir() else None
    if state is not None:
        return state
    found = [s for s in (_state_in(d / STATE) for d in ckpt.parent.glob("checkpoint_*"))
             if s is not None]
    return max(found, key=lambda s: s.step, default=None)


def _state_in(folder: Path) -> RunState | None:
    """A trial checkpoint's state: its own, or a path trial's newest phase state (its
    phases live in the state folder's PATH_STATES, core/training/path.py)."""
    state = latest_state(folder)
    if state is None and (folder / PATH_STATES / PHASES_DIR).is_dir():
        state = path_state(folder / PATH_STATES)
    return state


def _state_root(state: RunState) -> Path:
    """The state folder (STATE) a restored state was found in, however deep (a path's)."""
    return next((p for p in state.path.parents if p.name == STATE), state.path.parent)


class TrialState:
    """Holds a trial's evaluation rows until the step's state is written, then reports them
    to Tune with one checkpoint (best models + state), or without one when none is due."""

    def __init__(self, config: dict[str, Any], cpus: int = 1, grown: bool = False) -> None:
        self.cpus = int(cpus)  # every row says how many CPUs (threads) the trial runs on
        self.grown = grown  # lent spare cores (trials.cores): save states often, to give back
        self.dir = Path(tempfile.mkdtemp(prefix="arithsweep-trial-"))
        # a state of another version was dropped (_restore): nothing of its run is kept
        self.dropped = False
        self.restored = self._restore(config)  # (after self.dir: it may copy into it)
        self.improved = False  # the best went up since the last checkpoint: write one now
        self.row_fn: Callable[[], dict[str, Any] | None] = lambda: None
        self.best_fn: Callable[[Path], None] = lambda d: None  # writes best/ (p<j>/best)
        self.last_row: dict[str, Any] | None = None

    @property
    def rounds_best(self) -> Path:
        """Where the finished rounds' best model is saved (and found after a restore)."""
        return self.dir / STATE / ROUNDS_BEST

    def _restore(self, config: dict[str, Any]) -> RunState | None:
        ckpt = tune.get_checkpoint()
        try:
            if ckpt is not None:
                if os.path.isdir(os.path.dirname(ckpt.path)):  # local storage
                    return self._take_rounds_best(restored_state(Path(ckpt.path)))
                with ckpt.as_directory() as d:
                    return self._take_rounds_best(_state_in(Path(d) / STATE))
            src = config.get(RESUME_FROM)
            return self._take_rounds_best(restored_state(Path(src))) if src else None
        except ArithsweepError:
            # another version's state (another arithmetic: a search resumed with
            # --restart-unfinished), refused by latest_state: its floats are never continued
            # with this version's, so the trial trains again from step 0, its rounds, path and
            # best from their start
            self.dropped = True
            return None
        except OSError:
            return None

    def _take_rounds_best(self, state: RunState | None) -> RunState | None:
        """Copy the restored state's rounds-best model (if any) into this trial's own folder:
        Tune may delete the checkpoint it came from once this trial writes a newer one."""
        root = _state_root(state) if state is not None else None
        src = root / ROUNDS_BEST if root is not None else None
        if src is not None and src.is_dir():
            shutil.copytree(src, self.rounds_best, dirs_exist_ok=True)
        if root is not None and (root / PATH_STATES).is_dir():  # a path's phases go on here
            shutil.copytree(root / PATH_STATES, self.dir / STATE / PATH_STATES,
                            dirs_exist_ok=True)
        return state

    def rounds_best_em(self, path: Path | None = None) -> float:
        """The held-out exact match of the finished rounds' best model (-1 if none); `path`:
        a pack proposal's (rounds_best/p<j>)."""
        return _saved_em(path or self.rounds_best)

    def legacy_best(self, sub: str = "") -> float:
        """A restored checkpoint without a training state (a search made before states existed)
        retrains from step 0 but keeps its earlier best: the exact match in its
        `sub`/best/config.json (-1 if there is none, or if its state was of another version:
        that trial starts again whole)."""
        ckpt = tune.get_checkpoint()
        if ckpt is None or self.dropped:  # its best is another version's run's
            return -1.0
        with ckpt.as_directory() as d:
            return _saved_em(Path(d) / sub / "best")

    def extra(self) -> dict[str, Any]:
        """The caller's counters saved with the restored state ({} if it starts afresh)."""
        return dict(self.restored.doc.get("extra", {})) if self.restored else {}

    def counters(self, ids: list[int]) -> tuple[list[dict[str, Any]], list[int]]:
        """Each proposal's counters saved with the restored state ({} each on a fresh start),
        and the proposals the state's training call was training. `ids`: each proposal's
        seed trial (`configs.seeds_trial`). A replay of one proposal of a pack the deadline cut
        takes that proposal's counters, its members' state (`proposal_state`) and its rounds'
        best model; a state that fits no proposal here is dropped (train from step 0)."""
        saved, busy = _counters(self.extra())
        if saved is None:
            return [{} for _ in ids], []
        if [s.get("seeds_of", i) for s, i in zip(saved, ids)] == ids and len(saved) == len(ids):
            return saved, busy
        k = next((k for k, s in enumerate(saved) if len(ids) == 1
                  and s.get("seeds_of") == ids[0]), None)
        if k is None or self.restored is None:
            self.restored = None
            return [{} for _ in ids], []
        if k not in busy:  # it was waiting for its next round: its state is another's
            self.restored = None
        elif len(busy) > 1:
            self.restored = proposal_state(self.restored, busy.index(k))
        own = self.rounds_best / f"p{k}"
        if own.is_dir():  # its rounds' best model becomes the trial's own
            own = own.rename(self.dir / ROUNDS_BEST)
        shutil.rmtree(self.rounds_best, ignore_errors=True)
        if own.is_dir():
            own.rename(self.rounds_best)
        return [saved[k]], [0] if k in busy else []

    def checkpointing(self, cfg: Any, extra: Callable[[], dict[str, Any]],
                      resume: bool = True, model_cfg: Any = None,
                      cfgs: list[Any] | None = None) -> Checkpointing:
        """For one train() call; the restored state goes to the first call that takes it. A
        state written for other configs (a replay's cut trial trained in a pack, a space
        edited since) is dropped: that call trains from step 0."""
        state = self.restored if resume else None
        self.restored = None if resume else self.restored
        if state is not None and model_cfg is not None and not same_run(state, model_cfg, cfgs):
            state = None
        seconds = cfg.checkpoint_seconds
        if self.grown:  # a waiting trial gets its core back at a row with a state (cores)
            seconds = min(seconds, GROWN_STATE_SECONDS)
        return Checkpointing(self.dir / STATE, cfg.checkpoint_every, seconds,
                             align=cfg.eval_every, extra=extra, on_save=self._on_save,
                             want=lambda _step: self.improved, resume=state)

    def on_step(self, step: int, total: int) -> None:
        self.flush()  # the evaluation before this step wrote no state: report it alone

    def _on_save(self, path: Path, step: int) -> None:
        self.flush(with_state=True)

    def flush(self, with_state: bool = False) -> None:
        row = self.row_fn()
        if row is None and not with_state:
            return
        row = row if row is not None else self.last_row
        if row is None:  # a state before any evaluation: nothing to tell Tune yet
            return
        self.last_row = row
        row = {**row, "cpus": self.cpus}
        if not with_state:
            tune.report(row)
            return
        self.improved = False
        with tempfile.TemporaryDirectory(prefix="arithsweep-ckpt-") as tmp:
            self.best_fn(Path(tmp))
            shutil.copytree(self.dir / STATE, os.path.join(tmp, STATE))
            # tune.report copies the directory into the trial's storage before returning
            tune.report({**row, STATE_SAVED: 1},
                        checkpoint=tune.Checkpoint.from_directory(tmp))

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _saved_em(best: Path) -> float:
    """The held-out exact match in a saved model's config.json (-1 if none)."""
    try:
        doc = json.loads((best / "config.json").read_text())
        return float((doc.get("metrics") or {}).get("eval_exact_match", -1.0))
    except (OSError, ValueError, TypeError, AttributeError):
        return -1.0


def _counters(extra: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, list[int]]:
    """(each proposal's counters, the proposals in training) of a state's "extra"; a state
    written before a single proposal was a pack of one kept "trial" (one) or "pack" (lists)."""
    if "proposals" in extra:
        return list(extra["proposals"]), list(extra.get("busy") or [])
    if "trial" in extra:
        return [dict(extra["trial"])], [0]
    if "pack" in extra:
        old = extra["pack"]
        saved = [{"best": b, "reason": r} for b, r in zip(old["best"], old["reasons"])]
        for s, p in zip(saved, old.get("plateaus", [])):
            s["plateau"] = p
        return saved, list(range(len(saved)))
    return None, []
