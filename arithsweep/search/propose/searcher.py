"""The searcher: Optuna proposes, and only proposals that could still win are trained.

`ConstrainedOptunaSearch` is Ray's OptunaSearch minimising unique parameters subject to best
exact match >= target, assembled from its parts by job, each a module of its own:

    proposing   what a new trial trains: one proposal, or a pack of P of one shape
    bounding    proposals at or above the incumbent's bound told at once, never trained;
                those that reached the target held until the driver has verified them
    shrink      a new incumbent's one-step-smaller neighbours, queued next (`Descending`)
    telling     Optuna's bookkeeping: each proposal told once, with its constraint

`BudgetedSearchGenerator` lets a resumed search ask for more trials than the first launch did.

Both are pickled by Tune into the experiment state, with their attributes (all set here, in
`__init__`): keep them in this importable module under these names, or a resume cannot
unpickle them (a module that moves keeps its old name in `arithsweep.search.MOVED`, as this one
did: arithsweep.search.searcher); run-time settings come from `arithsweep.search.run_settings`.
Not run directly; `arithsweep.search.driver.run_search` wires them together.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import optuna
from ray.tune.search import ConcurrencyLimiter, SearchGenerator
from ray.tune.search.optuna import OptunaSearch

from arithsweep.search import run_settings
from arithsweep.search.propose.bounding import Bounding
from arithsweep.search.propose.proposing import MAX_SKIPS, Proposing
from arithsweep.search.propose.shrink import Descending
from arithsweep.search.propose.telling import Telling

__all__ = ["MAX_SKIPS", "BudgetedSearchGenerator", "ConstrainedOptunaSearch"]


class ConstrainedOptunaSearch(Proposing, Bounding, Descending, Telling, OptunaSearch):
    """OptunaSearch minimising `params` subject to best exact match >= target.

    The constraint is written onto each Optuna trial just before it is told (`telling`);
    `study.best_trial` is then the smallest *feasible* trial and TPE ranks infeasible trials
    below every feasible one. `sizer(config)` gives a proposal's unique parameter count (0 if
    the config is invalid); `keyer(config)` its pack key (`packs.PackKeyer`).
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


@contextmanager
def storage_at(now: str) -> Iterator[None]:
    """While a resumed Tune experiment is restored and run, its pickled Optuna storage opens
    the study at `now`, in the search's folder where it is now, whatever URL Tune pickled
    (a repository's study resumed from a clone at another path; tuner.pkl keeps the first
    sitting's path, each searcher state its own sitting's). Optuna's RDBStorage connects to
    the URL it was pickled with as it is unpickled, and the searcher's state, the study and
    every asked trial each hold one, so the URL is set at that one door. A search's only
    storage is its folder's optuna.db (driver._settle), so no other URL is meant."""
    restore = optuna.storages.RDBStorage.__setstate__

    def setstate(self, state: dict) -> None:
        restore(self, {**state, "url": now})

    optuna.storages.RDBStorage.__setstate__ = setstate
    try:
        yield
    finally:
        optuna.storages.RDBStorage.__setstate__ = restore


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
            self._follow(s.folder)

    def _follow(self, folder: str) -> None:
        """New trials in the search's folder where it is now: Tune restores the trials it had
        where the experiment moved, but makes new ones from this generator's pickled spec, whose
        storage still names the old path (a study resumed from a clone at another path)."""
        spec = self._experiment.spec if self._experiment is not None else {}
        old = spec.get("storage")
        if folder and old is not None and old.storage_fs_path != folder:
            new = copy.copy(old)
            new.storage_fs_path = folder
            spec["storage"] = self._experiment.storage = new

    def is_finished(self) -> bool:
        return super().is_finished() or run_settings.past_deadline(self._name)

