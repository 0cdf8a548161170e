"""Optuna bookkeeping: every asked proposal is told its result exactly once, with its
constraint, and a restored searcher leaves no Optuna trial RUNNING that no Tune trial owns.

Part of `searcher.ConstrainedOptunaSearch` (a mixin: its state lives on the searcher, which
Tune pickles). OptunaSearch has no constraint argument (and Optuna 5 deprecates
`constraints_func`), so the constraint (target - best exact match, > 0 when infeasible) is
written onto the Optuna trial with `Trial.set_constraint` just before it is told; errored
trials are infeasible too. A single proposal goes through OptunaSearch's own telling; a pack's
members are told one by one from the pack's result (FAIL when the Tune trial errors), and one
that reached the target only once the driver has verified it (`bounding`). Whatever is left
RUNNING when the fit ends is failed by `results.close_unreported`.

Not run directly; `arithsweep.search.driver.run_search` builds the searcher.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings

import optuna

from arithsweep.search.propose.verdicts import constrain
from arithsweep.search.trials import packs

log = logging.getLogger(__name__)


class Telling:
    """The searcher's Tune callbacks: results in, Optuna told."""

    _constrain = staticmethod(constrain)

    def _violation(self, seen: dict, error: bool) -> float:
        """Optuna constraint value: target - best exact match, > 0 when infeasible."""
        best_em = float(seen.get("best_em", 0.0) or 0.0)
        if math.isnan(best_em):
            best_em = 0.0
        violation = self._target - best_em
        if packs.at_target(seen, self._target):  # its stop rule's whole check said so
            violation = min(violation, 0.0)
        if error:  # infeasible whatever it reached before it died
            violation = max(violation, 1e-9)
        if seen.get("invalid_config"):
            # Worse than any trained trial: TPE ranks infeasible trials by violation.
            violation = self._target + 1.0
        return violation

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # Remember the latest numbers: an errored trial's completion carries no result.
        if trial_id in self._packs:  # no intermediate values: nothing prunes packs
            self._last[trial_id] = {k: v for k, v in result.items() if k == "params"
                                    or k.endswith(("/best_em", "invalid_config"))}
            return
        self._last[trial_id] = {k: result[k] for k in ("params", "best_em", "invalid_config")
                                if k in result}
        # A trial Tune restarted on resume reports steps its Optuna trial already holds
        # (Optuna warns at each) or to one an older run closed: its intermediate values only
        # feed pruning, which the search does not use.
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError), \
                warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is already reported")
            super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        if trial_id in self._packs:
            if trial_id not in self._completed_trials:
                self._tell_pack(trial_id, result, error)
            return
        ot_trial = self._ot_trials.get(trial_id)
        if (ot_trial is not None and trial_id not in self._completed_trials
                and self._constrain_one(trial_id, ot_trial, result, error)):
            return
        try:
            super().on_trial_complete(trial_id, result=result, error=error)
        except optuna.exceptions.UpdateFinishedTrialError:
            log.debug("search %s: trial %s finished, but its Optuna trial was closed before",
                      self._name, trial_id)
        self._last.pop(trial_id, None)

    def _constrain_one(self, trial_id: str, ot_trial: optuna.Trial, result: dict | None,
                       error: bool) -> bool:
        """A single proposal's constraint, before OptunaSearch tells it; True when it is held
        for verification instead (told later, `bounding`)."""
        seen = {**self._last.get(trial_id, {}), **(result or {})}
        best_em = float(seen.get("best_em", 0.0) or 0.0)
        violation = self._violation(seen, error)
        try:
            ot_trial.set_user_attr("best_em", 0.0 if math.isnan(best_em) else best_em)
            ot_trial.set_user_attr("errored", bool(error))
            if self._await_verification(trial_id, ot_trial, seen.get("params"), violation,
                                        error):
                self._completed_trials.add(trial_id)
                self._last.pop(trial_id, None)
                return True
            self._constrain(ot_trial, violation)
        except optuna.exceptions.UpdateFinishedTrialError:
            # a trial of a resumed search whose Optuna trial the last run closed: its
            # record stands (no warning: every resume of a cut search meets some)
            log.debug("search %s: trial %s was closed by an earlier run", self._name, trial_id)
        except Exception as exc:  # a storage hiccup must not end the search
            log.warning("could not set the constraint of %s: %s", trial_id, exc)
        return False

    def _tell_pack(self, trial_id: str, result: dict | None, error: bool) -> None:
        """Tell each proposal of a pack its own result, exactly once."""
        seen = {**self._last.pop(trial_id, {}), **(result or {})}
        for j, ot_trial in enumerate(self._packs.pop(trial_id)):
            mine = packs.proposal_result(seen, j)
            val = mine.get("params")
            violation = self._violation(mine, error)
            try:
                ot_trial.set_user_attr("best_em", float(mine.get("best_em", 0.0) or 0.0))
                ot_trial.set_user_attr("errored", bool(error))
                if self._await_verification(f"{trial_id}.p{j}", ot_trial, val, violation,
                                            error):
                    continue
                self._constrain(ot_trial, violation)
                if error or val is None:
                    state = (optuna.trial.TrialState.FAIL if error
                             else optuna.trial.TrialState.PRUNED)
                    self._ot_study.tell(ot_trial, state=state)
                else:
                    self._ot_study.tell(ot_trial, float(val))
            except Exception as exc:  # a storage hiccup must not end the search
                log.warning("could not tell proposal %s of %s: %s", ot_trial.number,
                            trial_id, exc)
        self._completed_trials.add(trial_id)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        # A search killed between Optuna's ask() and Tune's next state save leaves RUNNING
        # Optuna trials that no Tune trial owns; fail them so the study stays truthful.
        # Proposals that were pending at the last save may have been used since: fail them
        # all rather than tell one twice (a new ask replaces them).
        self._pending = []
        owned = self._rehold()
        owned |= {t.number for t in self._ot_trials.values()}
        owned |= {t.number for members in self._packs.values() for t in members}
        for frozen in self._ot_study.get_trials(deepcopy=False,
                                                states=(optuna.trial.TrialState.RUNNING,)):
            if frozen.number not in owned:
                try:
                    self._ot_study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
                except Exception as exc:
                    log.warning("could not fail orphaned Optuna trial %s: %s",
                                frozen.number, exc)
