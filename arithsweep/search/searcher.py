"""The searcher: Optuna proposes, and only proposals that could still win are trained.

`ConstrainedOptunaSearch` is Ray's OptunaSearch minimising unique parameters subject to best
exact match >= target. Because a proposal's parameter count is known from its config before
anything trains, a proposal at or above the search's bound (the smallest *verified* model so
far, or `--max-params`) is told to Optuna at once, as an infeasible trial of that size, so the
sampler learns the region is useless, and it costs no trial time. `BudgetedSearchGenerator`
lets a resumed search ask for more trials than the first launch did.

Packs (`proposals_per_trial` P > 1, see `arithsweep.search.packs`): one Tune trial trains up
to P proposals of one shape together. Design: ask Optuna once for a full proposal (it fixes
the shape), then ask P-1 more with every non-per-member parameter pinned to the first one's
values (`study.enqueue_trial(fixed)` right before `study.ask()`, Optuna's own "fixed_params"
mechanism), so only the per-member hyperparameters (lr, warmup, weight decay, clip, seeds)
vary and TPE still chooses them. Asking P free proposals and grouping equal shapes was
rejected: TPE samples architectures freely, so most packs would hold one proposal. Every
asked Optuna trial is told exactly once: a proposal at or above the bound is told at once
(skipped); a proposal that still does not share the pack key (a conditional space, an invalid
combination) waits in `_pending` and starts a later trial; pack members are told one by one
from the pack's result (FAIL when the Tune trial errors; one that reached the target once the
driver has verified it, see `tell_verified`); start points are trained alone (a
waiting start point would be popped by the next ask instead of the pinned proposal); and
whatever is left RUNNING when the fit ends is failed by `results.close_unreported`.

Both are pickled by Tune into the experiment state (keep them in this importable module, or a
resume cannot unpickle them); run-time settings come from `arithsweep.search.run_settings`.
Not run directly; `arithsweep.search.driver.run_search` wires them together.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Callable

import optuna
from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator
from ray.tune.search.optuna import OptunaSearch

from arithsweep.search import packs, run_settings
from arithsweep.search.packs import PROPOSALS, TRIAL_NUMBER
from arithsweep.search.trial import RESUME_FROM, SEEDS_OF
from arithsweep.search.verdicts import constrain, tell_verified

log = logging.getLogger(__name__)

MAX_SKIPS = 200  # proposals in a row above the bound before the space counts as exhausted


def _numbers(ot_trial: optuna.Trial) -> dict[str, int]:
    """The config keys naming a proposal's Optuna trial and, for a replay of a proposal the
    deadline cut (arithsweep.search.replay), the trial whose seeds it trains and the
    checkpoint whose training state it continues."""
    attrs = ot_trial.user_attrs
    return {TRIAL_NUMBER: ot_trial.number,
            **{k: attrs[k] for k in (SEEDS_OF, RESUME_FROM) if attrs.get(k) is not None}}


class ConstrainedOptunaSearch(OptunaSearch):
    """OptunaSearch minimising `params` subject to best exact match >= target.

    OptunaSearch has no constraint argument (and Optuna 5 deprecates `constraints_func`), so
    the constraint is written onto the Optuna trial with `Trial.set_constraint` just before
    the trial is told; `study.best_trial` is then the smallest *feasible* trial and TPE ranks
    infeasible trials below every feasible one. Errored trials are marked infeasible too.
    `sizer(config)` gives a proposal's unique parameter count (0 if the config is invalid).
    """

    def __init__(self, space: Callable, target: float, study_name: str, storage_url: str,
                 sizer: Callable[[dict], int], seed: int | None = None,
                 start: list[dict] | None = None, proposals: int = 1,
                 keyer: Callable[[dict], tuple | None] | None = None) -> None:
        self._target = float(target)
        self._name = study_name
        self._sizer = sizer
        self._last: dict[str, dict[str, float]] = {}  # tune trial id -> latest params/best_em
        self._per_trial = max(1, int(proposals))  # P: proposals per Tune trial
        self._keyer = keyer  # proposal config -> pack key (None: invalid config)
        self._packs: dict[str, list] = {}  # tune trial id -> its Optuna trials (packs of 2+)
        self._pending: list[tuple] = []  # (optuna trial, config): asked, not yet in a trial
        # proposal id -> (Optuna trial number, params, violation) of each proposal held back
        # for verification: pickled with the searcher, so a resumed search still tells them
        self._held: dict[str, tuple[int, float, float]] = {}
        storage = optuna.storages.RDBStorage(
            storage_url, engine_kwargs={"connect_args": {"timeout": 60}})
        super().__init__(space=space, metric="params", mode="min", study_name=study_name,
                         storage=storage, seed=seed)
        with warnings.catch_warnings():  # experimental in some Optuna releases
            warnings.simplefilter("ignore")
            # optuna-dashboard shows this name instead of "Objective 0"
            self._ot_study.set_metric_names(["parameters"])
        if start and not self._ot_study.trials:  # a new study tries the space's start points
            for point in start:
                self._ot_study.enqueue_trial(point, skip_if_exists=True)

    def suggest(self, trial_id: str) -> dict | None:
        if tell_verified(self._name, self._target):
            state = run_settings.state_of(self._name)
            awaiting = state.awaiting if state is not None else {}
            self._held = {p: v for p, v in self._held.items() if p in awaiting}
        self._descend(run_settings.state_of(self._name))
        if self._per_trial > 1 and self._keyer is not None:
            return self._suggest_pack(trial_id)
        state = run_settings.state_of(self._name)
        for _ in range(MAX_SKIPS):
            config = super().suggest(trial_id)
            ot_trial = self._ot_trials.get(trial_id)
            if ot_trial is None or not isinstance(config, dict):
                return config
            params = int(self._sizer(config))
            bound = state.bound() if state is not None else math.inf
            if params and params >= bound:
                self._skip(trial_id, ot_trial, config, params, state)
                continue
            if "tune_trial_id" not in ot_trial.user_attrs:
                ot_trial.set_user_attr("tune_trial_id", trial_id)
            ot_trial.set_user_attr("params", params)
            # The study-wide trial number lets the trainable give every trial its own seeds,
            # so a configuration TPE proposes twice is a new sample, not a rerun.
            return {**config, **_numbers(ot_trial)}
        log.warning("search %s: %d proposals in a row were at or above the bound; stopping",
                    self._name, MAX_SKIPS)
        return Searcher.FINISHED

    def _descend(self, state: run_settings.DriverState | None) -> None:
        """Enqueue the shrink moves of each new verified incumbent (arithsweep.search.shrink):
        the next proposals are the incumbent one step smaller, with its training recipe. A
        board entry the search started from (--from-entry) is no Optuna trial: its item
        carries its point in the space ("point", shrink.map_entry)."""
        from arithsweep.search.shrink import shrink_moves

        space = getattr(self._space, "space", None)
        if (state is None or state.incumbent is None or state.frontier or space is None
                or getattr(self, "_descended", None) == state.incumbent):
            return
        self._descended = state.incumbent
        best = [v for v in state.verified.values()
                if v.get("qualifies") and int(v.get("params", 0)) == state.incumbent]
        point = (best[0].get("point") or self._optuna_params(str(best[0]["trial_id"]))
                 if best else None)
        for move in shrink_moves(space, point, self._sizer) if point else []:
            self._ot_study.enqueue_trial(move, skip_if_exists=True)
        log.info("search %s: incumbent %s p; queued its shrink moves", self._name,
                 state.incumbent)

    def _optuna_params(self, proposal_id: str) -> dict | None:
        """The Optuna params of a proposal (a Tune trial id, or `<id>.p<j>` in a pack)."""
        tune_id, _, j = proposal_id.partition(".p")
        for t in self._ot_study.get_trials(deepcopy=False):
            if t.user_attrs.get("tune_trial_id") == tune_id and (
                    not j or t.user_attrs.get("pack_index") == int(j)):
                return dict(t.params)
        return None

    # ---- packs: up to P proposals of one shape per Tune trial -------------------------

    def _ask(self) -> tuple:
        """One new Optuna trial and its flat config (OptunaSearch's define-by-run path)."""
        ot_trial = self._ot_study.ask()
        return ot_trial, dict(self._suggest_from_define_by_run_func(self._space, ot_trial))

    def _suggest_pack(self, trial_id: str) -> dict | None:
        state = run_settings.state_of(self._name)
        for _ in range(MAX_SKIPS):
            ot_trial, config = self._pending.pop(0) if self._pending else self._ask()
            params = int(self._sizer(config))
            bound = state.bound() if state is not None else math.inf
            if params and params >= bound:
                self._skip(trial_id, ot_trial, config, params, state)
                continue
            members = [(ot_trial, config)]
            shape = self._keyer(config) if params else None
            # A waiting start point would be popped by the next ask instead of the pinned
            # proposal, so start points (and invalid samples) are trained alone.
            if shape is not None and not self._ot_study.get_trials(
                    deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
                fixed = {k: v for k, v in ot_trial.params.items()
                         if not packs.per_member_param(k)}
                for _ in range(self._per_trial - 1):
                    self._ot_study.enqueue_trial(fixed)
                    other = self._ask()
                    # same key: same shape and shared settings, so the same size too
                    (members if self._keyer(other[1]) == shape else self._pending).append(other)
            for j, (t, _) in enumerate(members):
                t.set_user_attr("tune_trial_id", trial_id)
                t.set_user_attr("params", params)
                if len(members) > 1:
                    t.set_user_attr("pack_index", j)
            if len(members) == 1:
                self._ot_trials[trial_id] = ot_trial  # the single-proposal path from here on
                return {**config, **_numbers(ot_trial)}
            self._packs[trial_id] = [t for t, _ in members]
            items = [{**c, **_numbers(t)} for t, c in members]
            # the top level repeats the first proposal, so shape-only readers need no change
            return {**items[0], PROPOSALS: items}
        log.warning("search %s: %d proposals in a row were at or above the bound; stopping",
                    self._name, MAX_SKIPS)
        return Searcher.FINISHED

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
        if ot_trial is not None and trial_id not in self._completed_trials:
            seen = {**self._last.get(trial_id, {}), **(result or {})}
            best_em = float(seen.get("best_em", 0.0) or 0.0)
            if math.isnan(best_em):
                best_em = 0.0
            violation = self._violation(seen, error)
            try:
                ot_trial.set_user_attr("best_em", best_em)
                ot_trial.set_user_attr("errored", bool(error))
                if self._await_verification(trial_id, ot_trial, seen.get("params"),
                                            violation, error):
                    self._completed_trials.add(trial_id)
                    self._last.pop(trial_id, None)
                    return
                self._constrain(ot_trial, violation)
            except optuna.exceptions.UpdateFinishedTrialError:
                # a trial of a resumed search whose Optuna trial the last run closed: its
                # record stands (no warning: every resume of a cut search meets some)
                log.debug("search %s: trial %s was closed by an earlier run", self._name,
                          trial_id)
            except Exception as exc:  # a storage hiccup must not end the search
                log.warning("could not set the constraint of %s: %s", trial_id, exc)
        try:
            super().on_trial_complete(trial_id, result=result, error=error)
        except optuna.exceptions.UpdateFinishedTrialError:
            log.debug("search %s: trial %s finished, but its Optuna trial was closed before",
                      self._name, trial_id)
        self._last.pop(trial_id, None)

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


class BudgetedSearchGenerator(SearchGenerator):
    """A SearchGenerator whose trial count and deadline come from the driver registry.

    Tune restores `total_samples` from the experiment state, so a plain restore can never run
    more trials than the first launch asked for; here `set_state` re-reads the count that the
    current `run_search` call registered, which is what makes `resume` with more trials work.
    The concurrency limit is applied here (ConcurrencyLimiter) instead of via
    `TuneConfig.max_concurrent_trials`, which Tune ignores for a ready-made SearchGenerator;
    on a resume it is the resuming run's, and the trials the last run ended for good leave it.
    """

    def __init__(self, searcher: ConstrainedOptunaSearch, name: str, max_concurrent: int):
        super().__init__(ConcurrencyLimiter(searcher, max_concurrent=max_concurrent))
        self._name = name

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        s = run_settings.state_of(self._name)
        if s is not None:
            self._total_samples = int(s.trials)
            self._finished = False
            # The limiter saved the trials live when the last run stopped. Those Tune ended for
            # good (the deadline stops every trial) never complete again: left in, they fill
            # the limit and the resumed search starts nothing. The limit is this run's.
            limiter = self.searcher
            limiter.live_trials = set(limiter.live_trials) - set(s.ended_trials)
            limiter.num_unfinished_live_trials = len(limiter.live_trials)
            if s.concurrency:
                limiter.max_concurrent = int(s.concurrency)

    def is_finished(self) -> bool:
        return super().is_finished() or run_settings.past_deadline(self._name)

