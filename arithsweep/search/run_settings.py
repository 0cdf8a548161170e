"""What a running search knows in the driver process and Tune must not pickle.

Settings that may change between a search and its resume (how many trials, the deadline, the
live-view function, the verifier) and what the search learns while it runs (the incumbent: the
smallest *verified* parameter count so far, the proposals skipped because of it, why each
trial stopped) sit in `_DRIVER`, a per-process registry keyed by search name. `run_search`
fills it before each `fit()`; the pickled searcher, stoppers and callbacks look it up by name.
A restored Tuner carries the *old* pickled objects, so this registry is also how a resume asks
for more trials or a new deadline.

The two stoppers live here because all they do is read the registry:

- `DeadlineStopper` ends the whole experiment at the deadline;
- `IncumbentStopper` ends a running trial as soon as a verified model at most its size exists:
  it can no longer win, so every further step it takes is wasted.

The settings as asked for are `options.SearchOptions`; this module holds the running search's
copy of the few that a resume may change, and its state. Its name stays: Tune pickles the two
stoppers by module path, so moving them would break resuming the searches made before.

Not run directly; `arithsweep.search.driver.run_search` registers a search here.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray import tune

log = logging.getLogger(__name__)


@dataclass
class DriverState:
    """One search's run-time state in the driver (never pickled)."""

    trials: int  # trained trials wanted in all (skipped proposals do not count)
    deadline: float | None  # time.time() at which the search ends; None = no deadline
    on_update: Callable[[dict], None] | None = None  # live-view feed
    verifier: Callable[[dict], dict] | None = None  # see arithsweep.search.driver.Verifier
    max_params: int | None = None  # --max-params: nothing larger is ever trained
    frontier: bool = False  # explore every size: the incumbent does not bound proposals
    incumbent: int | None = None  # smallest verified parameter count so far
    skipped: list[dict] = field(default_factory=list)  # proposals told to Optuna untrained
    verified: dict[str, dict] = field(default_factory=dict)  # tune trial id -> verifier item
    stop_reasons: dict[str, str] = field(default_factory=dict)  # set by the driver's stoppers
    # trials that started although a verified model no larger existed (should stay empty:
    # the summary shows it so that a user can check the bound held)
    trained_above: set[str] = field(default_factory=set)
    # proposal id -> its MLflow run, so a verified entry is recorded with the run it came from
    mlflow_runs: dict[str, str] = field(default_factory=dict)
    # proposal id -> (study, Optuna trial, params, violation): reached the target held-out, told to
    # Optuna once verified (arithsweep.search.propose.verdicts.tell_verified)
    awaiting: dict[str, tuple] = field(default_factory=dict)
    # On a resume: the Tune trials the last run ended for good (TERMINATED or ERROR: the
    # deadline, the incumbent, an error), which Tune never restarts, and the concurrency now
    ended_trials: set[str] = field(default_factory=set)
    concurrency: int = 0
    # (tracking URI, experiment id, parent run) of this run: a resumed Tune experiment restores
    # its MLflow callback as pickled, with the URI of wherever the folder was then
    mlflow: tuple[str, str, str] | None = None
    folder: str = ""  # <root>/<name> as this run found it: Tune's storage for new trials

    def note_start(self, trial_id: str, params: int) -> None:
        if self.incumbent is not None and not self.frontier and params >= self.incumbent:
            self.trained_above.add(trial_id)

    def bound(self) -> float:
        """Proposals with at least this many parameters are not trained."""
        limit = math.inf if self.max_params is None else self.max_params + 1
        if self.incumbent is not None and not self.frontier:
            limit = min(limit, self.incumbent)
        return limit


_DRIVER: dict[str, DriverState] = {}


def register(name: str, state: DriverState) -> DriverState:
    _DRIVER[name] = state
    return state


def unregister(name: str) -> None:
    _DRIVER.pop(name, None)


def state_of(name: str) -> DriverState | None:
    return _DRIVER.get(name)


def past_deadline(name: str) -> bool:
    s = _DRIVER.get(name)
    return s is not None and s.deadline is not None and time.time() >= s.deadline


DEADLINE = "search deadline"
INTERRUPTED = "search interrupted"


def ended_because(name: str) -> str:
    """Why a trial that did not stop itself ended: the search's deadline (Tune then marks it
    TERMINATED: a resume replays it only as a near miss, see arithsweep.search.trials.replay), else
    the user (Ctrl-C: Tune keeps it unfinished and a resume restarts it)."""
    return DEADLINE if past_deadline(name) else INTERRUPTED


def emit(name: str, event: dict[str, Any]) -> None:
    """Feed one event to the live view; a broken display must not end a search."""
    s = _DRIVER.get(name)
    if s is None or s.on_update is None:
        return
    try:
        s.on_update(event)
    except Exception as exc:
        log.warning("on_update failed: %s", exc)


class DeadlineStopper(tune.Stopper):
    """Ends the whole experiment at the registered deadline; unlike
    `TuneConfig.time_budget_s`, a resumed search can be given a new budget."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, trial_id: str, result: dict) -> bool:  # no per-trial criterion
        return False

    def stop_all(self) -> bool:
        return past_deadline(self._name)


class IncumbentStopper(tune.Stopper):
    """Stops a trial whose model is at least as large as the smallest verified one: it cannot
    win any more. Trials are never stopped for being behind a model of another size."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, trial_id: str, result: dict) -> bool:
        s = _DRIVER.get(self._name)
        params = int(result.get("params", 0) or 0)
        if s is None or not params or params < s.bound():
            return False
        s.stop_reasons[trial_id] = (f"outsized: a verified {s.incumbent}-parameter model "
                                    f"exists" if s.incumbent is not None and params >= s.incumbent
                                    else f"above --max-params {s.max_params}")
        return True

    def stop_all(self) -> bool:
        return False
