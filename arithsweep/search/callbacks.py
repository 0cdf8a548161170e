"""Driver-side pieces of a search that Ray Tune pickles: the constrained Optuna searcher, the
budget-aware search generator, the deadline stopper, the MLflow logger and the live-view feed.

They live in an importable module (not in search.py's functions) because Tune pickles them into
`tuner.pkl` and the experiment state, and `Tuner.restore` must be able to unpickle them in a
later process. Everything here runs in the driver process only: workers never touch MLflow,
Optuna or the leaderboard. Not meant to be run directly; `arithsweep.search.driver.run_search` wires
it together:

    python -c "from arithsweep.search.driver import SearchOptions, run_search; ..."

Run-time settings that may change between a search and its resume (how many trials, the
deadline, the live-view function) are not pickled: they sit in `_DRIVER`, a per-process
registry keyed by search name, which `run_search` fills before each `fit()`. A restored Tuner
carries the *old* pickled objects, so this registry is how a resume asks for more trials.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from ray import tune
from ray.tune.search import ConcurrencyLimiter, SearchGenerator
from ray.tune.search.optuna import OptunaSearch

log = logging.getLogger(__name__)

CONSTRAINT = "exact_match"  # Optuna constraint name: target - best_em, feasible when <= 0
TAG_SEARCH = "arithsweep.search"
TAG_TRIAL = "arithsweep.trial_id"
TAG_KIND = "arithsweep.kind"  # "trial" or "search" (the parent/summary run)
TRIAL_NUMBER = "trial_number"  # key added to each trial config: the Optuna trial number

# name -> {"trials": int, "deadline": float (time.time()) | None, "on_update": callable | None}
_DRIVER: dict[str, dict[str, Any]] = {}


def register_driver(name: str, trials: int, deadline: float | None,
                    on_update: Callable[[dict], None] | None) -> None:
    _DRIVER[name] = {"trials": trials, "deadline": deadline, "on_update": on_update}


def unregister_driver(name: str) -> None:
    _DRIVER.pop(name, None)


def _settings(name: str) -> dict[str, Any]:
    return _DRIVER.get(name, {})


def _past_deadline(name: str) -> bool:
    return time.time() >= (_settings(name).get("deadline") or math.inf)


class ConstrainedOptunaSearch(OptunaSearch):
    """OptunaSearch minimising `params` subject to best exact match >= target.

    OptunaSearch has no constraint argument (and Optuna 5 deprecates `constraints_func`), so
    the constraint is written onto the Optuna trial with `Trial.set_constraint` just before
    the trial is told; `study.best_trial` is then the smallest *feasible* trial and TPE ranks
    infeasible trials below every feasible one. ASHA-stopped trials reach us as ordinary
    completions (COMPLETE); errored ones as FAIL, marked infeasible too.
    """

    def __init__(self, space: Callable, target: float, study_name: str, storage_url: str,
                 seed: int | None = None) -> None:
        self._target = float(target)
        self._last: dict[str, dict[str, float]] = {}  # tune trial id -> latest params/best_em
        storage = optuna.storages.RDBStorage(
            storage_url, engine_kwargs={"connect_args": {"timeout": 60}})
        super().__init__(space=space, metric="params", mode="min", study_name=study_name,
                         storage=storage, seed=seed)

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None or not isinstance(config, dict):
            return config
        if "tune_trial_id" not in ot_trial.user_attrs:
            ot_trial.set_user_attr("tune_trial_id", trial_id)
        # The study-wide trial number lets the trainable give every trial its own seeds, so
        # a configuration TPE proposes twice is a new sample, not a rerun.
        return {**config, TRIAL_NUMBER: ot_trial.number}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # Remember the latest numbers: an errored trial's completion carries no result.
        self._last[trial_id] = {k: result[k] for k in ("params", "best_em", "invalid_config")
                                if k in result}
        super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None and trial_id not in self._completed_trials:
            seen = {**self._last.get(trial_id, {}), **(result or {})}
            best_em = float(seen.get("best_em", 0.0) or 0.0)
            if math.isnan(best_em):
                best_em = 0.0
            violation = self._target - best_em
            if error:  # infeasible whatever it reached before it died
                violation = max(violation, 1e-9)
            if seen.get("invalid_config"):
                # Worse than any trained trial: TPE ranks infeasible trials by violation.
                violation = self._target + 1.0
            try:
                ot_trial.set_constraint(CONSTRAINT, violation)
                ot_trial.set_user_attr("best_em", best_em)
                ot_trial.set_user_attr("errored", bool(error))
            except Exception as exc:  # a storage hiccup must not end the search
                log.warning("could not set the constraint of %s: %s", trial_id, exc)
        super().on_trial_complete(trial_id, result=result, error=error)
        self._last.pop(trial_id, None)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        # A search killed between Optuna's ask() and Tune's next state save leaves RUNNING
        # Optuna trials that no Tune trial owns; fail them so the study stays truthful.
        owned = {t.number for t in self._ot_trials.values()}
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
    `TuneConfig.max_concurrent_trials`, which Tune ignores for a ready-made SearchGenerator.
    """

    def __init__(self, searcher: ConstrainedOptunaSearch, name: str, max_concurrent: int):
        super().__init__(ConcurrencyLimiter(searcher, max_concurrent=max_concurrent))
        self._name = name

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        wanted = _settings(self._name).get("trials")
        if wanted is not None:
            self._total_samples = int(wanted)
            self._finished = False

    def is_finished(self) -> bool:
        return super().is_finished() or _past_deadline(self._name)


class DeadlineStopper(tune.Stopper):
    """Ends the whole experiment at the deadline registered for this search (see `_DRIVER`);
    unlike `TuneConfig.time_budget_s`, a resumed search can be given a new budget."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, trial_id: str, result: dict) -> bool:  # no per-trial criterion
        return False

    def stop_all(self) -> bool:
        return _past_deadline(self._name)


def _trial_event(event: str, status: str, trial, result: dict | None = None) -> dict:
    last = result if result is not None else (trial.last_result or {})
    return {"event": event, "trial_id": trial.trial_id, "status": status,
            "params": last.get("params"), "best_em": last.get("best_em"),
            "step": last.get("step")}


def trial_dirname(trial) -> str:
    """Short trial directory names (Tune's default embeds every config value in the path)."""
    return f"trial_{trial.trial_id}"


class LiveCallback(tune.Callback):
    """Feeds trial start/result/completion/error events to the registered `on_update`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._arch: dict[str, str] = {}  # trial id -> architecture label, computed once

    def _emit(self, event: dict[str, Any], trial) -> None:
        fn = _settings(self._name).get("on_update")
        if fn is None:
            return
        if trial.trial_id not in self._arch:
            try:
                from arithsweep.search.trainable import build_trial
                self._arch[trial.trial_id] = build_trial(trial.config).model_cfg.summary()
            except Exception:
                self._arch[trial.trial_id] = "invalid config"
        event["architecture"] = self._arch[trial.trial_id]
        try:
            fn(event)
        except Exception as exc:  # a broken display must not end a search
            log.warning("on_update failed: %s", exc)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._emit(_trial_event("start", "running", trial, {}), trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._emit(_trial_event("result", "running", trial, result), trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._emit(_trial_event("complete", "done", trial), trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._emit({**_trial_event("error", "error", trial), "error": _error_line(trial)},
                   trial)


class MlflowTrialCallback(tune.Callback):
    """One MLflow run per trial: params, metric curves (step = training step), the best
    checkpoint as an artifact when the trial ends, and status FINISHED / FAILED.

    Chosen over Ray's MLflowLoggerCallback because that one steps metrics by Tune iteration,
    uploads the whole trial directory, and cannot nest runs under the search's summary run.
    `describe(config)` (a picklable callable) turns a trial config into the params to log.
    """

    METRICS = ("best_em", "em", "loss", "params", "examples", "elapsed", "lr", "failed_seeds")

    def __init__(self, name: str, tracking_uri: str, experiment_id: str, parent_run_id: str,
                 describe: Callable[[dict], dict[str, str]], target: float) -> None:
        self._name = name
        self._uri = tracking_uri
        self._experiment_id = experiment_id
        self._parent = parent_run_id
        self._describe = describe
        self._target = float(target)
        self._runs: dict[str, str] = {}  # tune trial id -> mlflow run id
        self._client = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client"] = None  # holds a DB engine; rebuilt lazily
        return state

    @property
    def client(self):
        if self._client is None:
            self._client = mlflow_client(self._uri)
        return self._client

    def get_state(self) -> dict:
        return {"runs": dict(self._runs)}

    def set_state(self, state: dict) -> None:
        self._runs.update(state.get("runs", {}))

    def _run_for(self, trial) -> str:
        run_id = self._runs.get(trial.trial_id)
        if run_id is not None:
            return run_id
        # A search killed before Tune saved this callback's state: find the trial's run by
        # its tags instead of opening a second one (the resumed trial retrains into it).
        found = self.client.search_runs([self._experiment_id], max_results=1, filter_string=(
            f"tags.`{TAG_SEARCH}` = '{self._name}' and tags.`{TAG_TRIAL}` = '{trial.trial_id}'"))
        if found:
            self._runs[trial.trial_id] = found[0].info.run_id
            return found[0].info.run_id
        run = self.client.create_run(
            self._experiment_id, run_name=f"{self._name}/{trial.trial_id}",
            tags={TAG_SEARCH: self._name, TAG_TRIAL: trial.trial_id, TAG_KIND: "trial",
                  "mlflow.parentRunId": self._parent})
        run_id = run.info.run_id
        self._runs[trial.trial_id] = run_id
        from mlflow.entities import Param
        params = self._describe(trial.config)
        self.client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
        return run_id

    def _safe(self, what: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # MLflow trouble is logged, never fatal to the search
            log.warning("mlflow %s failed: %s", what, exc)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._safe("create_run", self._run_for, trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._safe("log_metrics", self._log_result, trial, result)

    def _log_result(self, trial, result: dict) -> None:
        from mlflow.entities import Metric
        run_id = self._run_for(trial)
        step = int(result.get("step", result.get("training_iteration", 0)) or 0)
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, step) for k, v in result.items()
                   if (k in self.METRICS or k.startswith(("em_seed", "loss_seed")))
                   and isinstance(v, (int, float)) and math.isfinite(float(v))]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._safe("finish", self._finish, trial, "FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._safe("finish", self._finish, trial, "FAILED")

    def _finish(self, trial, status: str) -> None:
        run_id = self._run_for(trial)
        last = trial.last_result or {}
        best_em = float(last.get("best_em", 0.0) or 0.0)
        self.client.set_tag(run_id, "arithsweep.feasible",
                            str(status == "FINISHED" and best_em >= self._target).lower())
        if trial.error_file or status == "FAILED":
            self.client.set_tag(run_id, "arithsweep.error", _error_line(trial))
        if last.get("invalid_config"):  # the sampled combination failed validation
            self.client.set_tag(run_id, "arithsweep.invalid_config", str(last.get("error")))
        ckpt = trial.checkpoint
        if ckpt is not None and status == "FINISHED":
            self.client.log_artifacts(run_id, ckpt.path, artifact_path="checkpoint")
        self.client.set_terminated(run_id, status=status)


def _error_line(trial) -> str:
    """The exception line of a trial's error (its traceback is in the trial's error.txt)."""
    try:  # the driver-local copy (trial.get_error() reads storage, which syncs later)
        text = Path(trial.error_file).read_text() if trial.error_file else ""
    except OSError:
        text = ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "error")[:5000]


# ---- MLflow bookkeeping of the search itself (driver only) -------------------------------


def mlflow_client(uri: str):
    from mlflow.tracking import MlflowClient
    return MlflowClient(tracking_uri=uri)


def mlflow_setup(uri: str, root: Path, task: str, name: str, space: str, target: float,
                 resume: bool) -> tuple[str, str]:
    """Create the tracking DB, the experiment and the search's parent run before any trial
    starts (trials racing to create a fresh SQLite schema is a known failure)."""
    from mlflow.entities import Param

    client = mlflow_client(uri)
    exp_name = f"arithsweep-{task}"
    exp = client.get_experiment_by_name(exp_name)
    if exp is None:
        local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
        loc = (root / "mlartifacts").absolute().as_uri() if local else None
        exp_id = client.create_experiment(exp_name, artifact_location=loc)
    else:
        exp_id = exp.experiment_id
    found = resume and client.search_runs([exp_id], filter_string=(
        f"tags.`{TAG_SEARCH}` = '{name}' and tags.`{TAG_KIND}` = 'search'"))
    if found:  # a resumed search keeps its parent run
        return exp_id, found[0].info.run_id
    run = client.create_run(exp_id, run_name=name, tags={TAG_SEARCH: name, TAG_KIND: "search"})
    client.log_batch(run.info.run_id, params=[
        Param("task", task), Param("target", str(target)), Param("space", space)])
    return exp_id, run.info.run_id


def mlflow_trial_runs(uri: str, exp_id: str, name: str) -> dict[str, str]:
    runs = mlflow_client(uri).search_runs([exp_id], max_results=10000, filter_string=(
        f"tags.`{TAG_SEARCH}` = '{name}' and tags.`{TAG_KIND}` = 'trial'"))
    return {r.data.tags.get(TAG_TRIAL): r.info.run_id for r in runs}


def mlflow_verified(uri: str, item: dict) -> None:
    run_id = item.get("mlflow_run_id")
    if not run_id:
        return
    client = mlflow_client(uri)
    if item.get("exact_match") is not None:
        client.log_metric(run_id, "verified_em", float(item["exact_match"]))
    client.set_tag(run_id, "arithsweep.verified", str(bool(item.get("qualifies"))).lower())
    if item.get("entry_id") is not None:
        client.set_tag(run_id, "arithsweep.entry_id", str(item["entry_id"]))


def mlflow_close(uri: str, run_id: str, summary, sdir: Path) -> None:
    client = mlflow_client(uri)
    client.log_metric(run_id, "n_trials", summary.n_trials)
    client.log_metric(run_id, "n_feasible", summary.n_feasible)
    if summary.best:
        client.log_metric(run_id, "best_params", summary.best["params"])
    for f in ("summary.json", "params_vs_em.png"):
        if (sdir / f).is_file():
            client.log_artifact(run_id, str(sdir / f))
    client.set_terminated(run_id, "FINISHED")
