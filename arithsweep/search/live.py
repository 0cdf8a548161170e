"""The driver's view of trials as they run: events for the live table, short trial names.

`LiveCallback` (a Tune callback, pickled with the experiment: keep it in this importable
module) turns trial start / result / completion / error into plain event dicts and hands them
to the `on_update` function registered for the search (`arithsweep.search.run_settings`); the
CLI draws its Rich live table from them. Not run directly.
"""

from __future__ import annotations

from typing import Any

from ray import tune

from arithsweep.search import run_settings
from arithsweep.search.tracking import error_line


def trial_dirname(trial) -> str:
    """Short trial directory names (Tune's default embeds every config value in the path)."""
    return f"trial_{trial.trial_id}"


def trial_event(event: str, status: str, trial, result: dict | None = None) -> dict:
    last = result if result is not None else (trial.last_result or {})
    return {"event": event, "trial_id": trial.trial_id, "status": status,
            "params": last.get("params"), "best_em": last.get("best_em"),
            "step": last.get("step"), "stop_reason": last.get("stop_reason")}


class LiveCallback(tune.Callback):
    """Feeds trial start/result/completion/error events to the registered `on_update`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._arch: dict[str, str] = {}  # trial id -> architecture label, computed once

    def _emit(self, event: dict[str, Any], trial) -> None:
        if trial.trial_id not in self._arch:
            try:
                from arithsweep.search.trial import build_trial
                setup = build_trial(trial.config)
                self._arch[trial.trial_id] = (setup.model_cfg.summary(), setup.params)
            except Exception:
                self._arch[trial.trial_id] = ("invalid config", 0)
        event["architecture"], params = self._arch[trial.trial_id]
        event["params"] = event.get("params") or params
        run_settings.emit(self._name, event)

    def on_trial_start(self, iteration, trials, trial, **info):
        event = trial_event("start", "running", trial, {})
        self._emit(event, trial)
        s = run_settings.state_of(self._name)
        if s is not None and event.get("params"):
            s.note_start(trial.trial_id, int(event["params"]))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._emit(trial_event("result", "running", trial, result), trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        event = trial_event("complete", "done", trial)
        s = run_settings.state_of(self._name)
        if s is not None and trial.trial_id in s.stop_reasons:
            event["stop_reason"] = s.stop_reasons[trial.trial_id]
        self._emit(event, trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._emit({**trial_event("error", "error", trial), "error": error_line(trial)},
                   trial)
