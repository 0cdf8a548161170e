"""The driver's view of trials as they run: events for the live table, short trial names.

`LiveCallback` (a Tune callback, pickled with the experiment: keep it in this importable
module) turns trial start / result / completion / error into plain event dicts and hands them
to the `on_update` function registered for the search (`arithsweep.search.run_settings`); the
CLI draws its Rich live table from them. Events are per proposal: a pack (a Tune trial training
several proposals, `arithsweep.search.trials.packs`) gives one event per proposal, with the proposal
id as `trial_id` and the Tune trial as `tune_trial_id`. Not run directly.
"""

from __future__ import annotations

import sys
from typing import Any

from ray import tune

from arithsweep.search import run_settings
from arithsweep.search.report.tracking import error_line, error_text
from arithsweep.search.trials import packs


def trial_dirname(trial) -> str:
    """Short trial directory names (Tune's default embeds every config value in the path)."""
    return f"trial_{trial.trial_id}"


def trial_event(event: str, status: str, trial, result: dict | None = None) -> dict:
    last = result if result is not None else (trial.last_result or {})
    # time_total_s: Tune's own clock of the trial, which the live view's CPU-hours add up
    return {"event": event, "trial_id": trial.trial_id, "status": status,
            **{k: last.get(k) for k in ("params", "best_em", "step", "stop_reason",
                                        "seeds_reached", "seeds_trained", "time_total_s")}}


class LiveCallback(tune.Callback):
    """Feeds trial start/result/completion/error events to the registered `on_update`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._setups: dict[str, tuple] = {}  # proposal id -> (label, params, seeds), once

    def _emit(self, event: dict[str, Any], trial, j: int) -> None:
        # A callback pickled by an older arithsweep has `_arch` (per Tune trial) instead.
        setups = self.__dict__.setdefault("_setups", {})
        pid = event["trial_id"]
        if pid not in setups:
            try:  # a pack member's own config: the pack's is not one model
                from arithsweep.search.trials.configs import build_trial
                setup = build_trial(packs.proposals_of(trial.config or {})[j])
                setups[pid] = (setup.model_cfg.summary(), setup.params, setup.train_cfg.seeds)
            except Exception:
                setups[pid] = ("invalid config", 0, None)
        event["architecture"], params, event["seeds"] = setups[pid]
        event["params"] = event.get("params") or params
        run_settings.emit(self._name, event)

    def _each(self, event: str, status: str, trial, result: dict | None = None,
              only_reported: bool = False, **extra) -> list[tuple[str, dict]]:
        """Emit one event per proposal of the trial; returns (proposal id, event) pairs."""
        config = trial.config or {}
        pack = packs.is_pack(config)
        whole = result if result is not None else (trial.last_result or {})
        out = []
        for j, pid in enumerate(packs.proposal_ids(trial.trial_id, config)):
            if only_reported and pack and not packs.reported(whole, j):
                continue  # this proposal had stopped before this report
            e = trial_event(event, status, trial, packs.proposal_result(whole, j, pack))
            e.update(trial_id=pid, tune_trial_id=trial.trial_id, **extra)
            self._emit(e, trial, j)
            out.append((pid, e))
        return out

    def on_trial_start(self, iteration, trials, trial, **info):
        s = run_settings.state_of(self._name)
        for pid, event in self._each("start", "running", trial, {}):
            if s is not None and event.get("params"):
                s.note_start(pid, int(event["params"]))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._each("result", "running", trial, result, only_reported=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        s = run_settings.state_of(self._name)
        reason = s.stop_reasons.get(trial.trial_id) if s is not None else None
        self._each("complete", "done", trial, **({"stop_reason": reason} if reason else {}))

    def on_trial_recover(self, iteration, trials, trial, **info):
        # its process died (out of memory, a lost node) and Tune restarts it from its last
        # state: the table shows it restarting, then continuing from that state's step
        n, why = int(getattr(trial, "num_failures", 0) or 0), died_because(trial)
        self._each("restart", "restarting", trial, error=why, restarts=n)
        print(f"trial {trial.trial_id}: {why}; restarting it from its last state "
              f"(restart {n} of {_max_failures(trial)})", file=sys.stderr, flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._each("error", "error", trial, error=error_line(trial))
        n = int(getattr(trial, "num_failures", 0) or 0)
        if n > 1 or _max_failures(trial):  # a crash of our own code shows in its table row
            print(f"trial {trial.trial_id} ended errored after {n - 1} restart"
                  f"{'' if n == 2 else 's'}: {died_because(trial)}", file=sys.stderr,
                  flush=True)


def died_because(trial) -> str:
    """Why a trial's process ended, in words: the kill by Ray's memory monitor or of the
    worker process (the OOM killer, a lost node) named as such, else the error's line."""
    text = error_text(trial)  # the whole error: its last line is Ray's advice, not the cause
    if "OutOfMemoryError" in text or "memory monitor" in text:
        return "its worker was killed for memory (Ray's memory monitor)"
    if any(k in text for k in ("ActorDiedError", "WorkerCrashedError", "ActorUnavailable",
                               "NodeDiedError", "died unexpectedly")):
        return "its worker process died (killed, out of memory, or its node lost)"
    return error_line(trial, text)


def _max_failures(trial) -> int:
    """The restarts a trial is allowed (FailureConfig.max_failures)."""
    return int(getattr(getattr(trial, "run_metadata", None), "max_failures", None)
               or getattr(trial, "max_failures", 0) or 0)

