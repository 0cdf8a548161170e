"""Proposing: what the searcher hands Tune for a new trial, one Optuna proposal or a pack.

Part of `searcher.ConstrainedOptunaSearch` (a mixin: its state lives on the searcher, which
Tune pickles). Each new trial first tells Optuna what the driver has verified since the last
one (`bounding`), queues the shrink moves of a new incumbent (`shrink.Descending`), then asks:

- one proposal: Optuna's next sample, unless it is at or above the search's bound (told at
  once, `Bounding._beyond_bound`, and the next one asked);
- a pack (`proposals_per_trial` P > 1, see `arithsweep.search.trials.packs`): ask Optuna once for a
  full proposal (it fixes the shape), then P-1 more with every non-per-member parameter pinned
  to the first one's values (`study.enqueue_trial(fixed)` right before `study.ask()`, Optuna's
  own "fixed_params" mechanism), so only the per-member hyperparameters (lr, warmup, weight
  decay, clip, seeds) vary and TPE still chooses them. Asking P free proposals and grouping
  equal shapes was rejected: TPE samples architectures freely, so most packs would hold one
  proposal. A proposal that does not share the pack key (a conditional space, an invalid
  combination) waits in `_pending` and starts a later trial; start points and replays of cut
  near misses train alone (a waiting start point would be popped by the next ask instead of
  the pinned proposal; a replay continues its own training state).

Not run directly; `arithsweep.search.driver.run_search` builds the searcher.
"""

from __future__ import annotations

import logging

import optuna
from ray.tune.search import Searcher

from arithsweep.search import run_settings
from arithsweep.search.trials import packs
from arithsweep.search.trials.configs import RESUME_FROM, SEEDS_OF
from arithsweep.search.trials.packs import PROPOSALS, TRIAL_NUMBER

log = logging.getLogger(__name__)

MAX_SKIPS = 200  # proposals in a row above the bound before the space counts as exhausted


def numbers(ot_trial: optuna.Trial) -> dict[str, int]:
    """The config keys naming a proposal's Optuna trial and, for a replay of a proposal the
    deadline cut (arithsweep.search.trials.replay), the trial whose seeds it trains and the
    checkpoint whose training state it continues."""
    attrs = ot_trial.user_attrs
    return {TRIAL_NUMBER: ot_trial.number,
            **{k: attrs[k] for k in (SEEDS_OF, RESUME_FROM) if attrs.get(k) is not None}}


class Proposing:
    """The searcher's `suggest`: one proposal, or a pack of them, that can still win."""

    def suggest(self, trial_id: str) -> dict | None:
        self._take_verdicts()
        state = run_settings.state_of(self._name)
        self._descend(state)
        if self._per_trial > 1 and self._keyer is not None:
            return self._suggest_pack(trial_id, state)
        for _ in range(MAX_SKIPS):
            config = super().suggest(trial_id)
            ot_trial = self._ot_trials.get(trial_id)
            if ot_trial is None or not isinstance(config, dict):
                return config
            params = int(self._sizer(config))
            if self._beyond_bound(trial_id, ot_trial, config, params, state):
                continue
            if "tune_trial_id" not in ot_trial.user_attrs:
                ot_trial.set_user_attr("tune_trial_id", trial_id)
            ot_trial.set_user_attr("params", params)
            # The study-wide trial number lets the trainable give every trial its own seeds,
            # so a configuration TPE proposes twice is a new sample, not a rerun.
            return {**config, **numbers(ot_trial)}
        return self._exhausted()

    def _exhausted(self) -> str:
        log.warning("search %s: %d proposals in a row were at or above the bound; stopping",
                    self._name, MAX_SKIPS)
        return Searcher.FINISHED

    def _ask(self) -> tuple:
        """One new Optuna trial and its flat config (OptunaSearch's define-by-run path)."""
        ot_trial = self._ot_study.ask()
        return ot_trial, dict(self._suggest_from_define_by_run_func(self._space, ot_trial))

    def _suggest_pack(self, trial_id: str, state: run_settings.DriverState | None) -> dict | None:
        for _ in range(MAX_SKIPS):
            ot_trial, config = self._pending.pop(0) if self._pending else self._ask()
            params = int(self._sizer(config))
            if self._beyond_bound(trial_id, ot_trial, config, params, state):
                continue
            members = [(ot_trial, config)]
            if params and RESUME_FROM not in ot_trial.user_attrs and not self._waiting():
                members += self._pinned(ot_trial, config)
            for j, (t, _) in enumerate(members):
                t.set_user_attr("tune_trial_id", trial_id)
                t.set_user_attr("params", params)
                if len(members) > 1:
                    t.set_user_attr("pack_index", j)
            if len(members) == 1:
                self._ot_trials[trial_id] = ot_trial  # the single-proposal path from here on
                return {**config, **numbers(ot_trial)}
            self._packs[trial_id] = [t for t, _ in members]
            items = [{**c, **numbers(t)} for t, c in members]
            # the top level repeats the first proposal, so shape-only readers need no change
            return {**items[0], PROPOSALS: items}
        return self._exhausted()

    def _waiting(self) -> bool:
        """Are proposals queued in the study (start points, shrink moves, replays)?"""
        return bool(self._ot_study.get_trials(deepcopy=False,
                                              states=(optuna.trial.TrialState.WAITING,)))

    def _pinned(self, ot_trial: optuna.Trial, config: dict) -> list[tuple]:
        """Up to P-1 more proposals of `config`'s shape, its shared parameters pinned; one that
        still lands on another pack key waits in `_pending`."""
        shape = self._keyer(config)
        if shape is None:
            return []
        fixed = {k: v for k, v in ot_trial.params.items() if not packs.per_member_param(k)}
        out = []
        for _ in range(self._per_trial - 1):
            self._ot_study.enqueue_trial(fixed)
            other = self._ask()
            # same key: same shape and shared settings, so the same size too
            (out if self._keyer(other[1]) == shape else self._pending).append(other)
        return out
