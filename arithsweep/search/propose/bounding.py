"""Bounding by the incumbent: proposals that cannot win are told at once, never trained, and
proposals that reached the target wait for the driver's verification before Optuna hears.

Part of `searcher.ConstrainedOptunaSearch` (a mixin: its state lives on the searcher, which
Tune pickles). A proposal's parameter count is known from its config before anything trains,
so one at or above the search's bound (the smallest *verified* model so far, or
`--max-params`) is told to Optuna at once as an infeasible trial of that size (`_skip`): the
sampler learns the region is useless, and it costs no trial time. A proposal that reached the
target on held-out problems is held back (`_await_verification`) until the driver has verified
it, so the study's best is always a verified model; the held ones are pickled with the
searcher (`_held`), and a resumed search hands them back (`_rehold`).

Not run directly; `arithsweep.search.driver.run_search` builds the searcher.
"""

from __future__ import annotations

import logging
import math

import optuna

from arithsweep.search import run_settings
from arithsweep.search.propose.verdicts import tell_verified
from arithsweep.search.trials.packs import TRIAL_NUMBER

log = logging.getLogger(__name__)


class Bounding:
    """The searcher's bound and its verification hold."""

    def _take_verdicts(self) -> None:
        """Tell Optuna the held proposals the driver has verified (or rejected) since."""
        if tell_verified(self._name, self._target):
            state = run_settings.state_of(self._name)
            awaiting = state.awaiting if state is not None else {}
            self._held = {p: v for p, v in self._held.items() if p in awaiting}

    def _beyond_bound(self, trial_id: str, ot_trial: optuna.Trial, config: dict, params: int,
                      state: run_settings.DriverState | None) -> bool:
        """Is the proposal at or above the bound? Then it is told (skipped), not trained."""
        bound = state.bound() if state is not None else math.inf
        if not params or params < bound:
            return False
        self._skip(trial_id, ot_trial, config, params, state)
        return True

    def _skip(self, trial_id, ot_trial, config, params, state) -> None:
        """Tell Optuna a proposal that cannot win without training it."""
        if self._ot_trials.get(trial_id) is ot_trial:
            self._ot_trials.pop(trial_id, None)
        try:
            ot_trial.set_user_attr("skipped", True)
            ot_trial.set_user_attr("params", params)
            self._constrain(ot_trial, self._target)  # as if it scored 0
            self._ot_study.tell(ot_trial, params)
        except Exception as exc:  # a storage hiccup must not end the search
            log.warning("could not tell skipped proposal %s: %s", ot_trial.number, exc)
        if state is not None:
            item = {"number": ot_trial.number, "params": params, "bound": state.bound(),
                    "config": {k: v for k, v in config.items() if k != TRIAL_NUMBER}}
            state.skipped.append(item)
            run_settings.emit(self._name, {"event": "skipped", "trial_id": f"#{ot_trial.number}",
                                           "status": "skipped", "params": params})

    def _await_verification(self, pid: str, ot_trial: optuna.Trial, val, violation: float,
                            error: bool) -> bool:
        """Hold back a proposal that reached the target on held-out problems until the driver
        has verified it (VerifyCallback runs right after this, in the same trial stop): the
        study's best, and optuna-dashboard's best line, is then a verified model, never a
        held-out estimate that verification went on to reject. True when it waits."""
        state = run_settings.state_of(self._name)
        if error or val is None or violation > 0 or state is None or state.verifier is None:
            return False
        state.awaiting[pid] = (self._ot_study, ot_trial, float(val), float(violation))
        self._held[pid] = (ot_trial.number, float(val), float(violation))
        return True

    def _rehold(self) -> set[int]:
        """After a restore: hand the driver back the proposals that were held for verification
        when the searcher was saved and are still RUNNING in the study, so `tell_verified`
        tells them from `verified.json` (or, never verified, when the search ends). Returns
        their trial numbers."""
        held = getattr(self, "_held", {})  # a searcher saved before this field had none
        self._held = held
        state = run_settings.state_of(self._name)
        running = {t.number: t for t in self._ot_study.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        for pid, (number, val, violation) in list(held.items()):
            frozen = running.get(number)
            if frozen is None or state is None:  # told before the kill, or nobody to tell it
                held.pop(pid)
                continue
            ot_trial = optuna.Trial(self._ot_study, frozen._trial_id)
            state.awaiting[pid] = (self._ot_study, ot_trial, val, violation)
        return {number for number, _, _ in held.values()}
