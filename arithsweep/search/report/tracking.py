"""MLflow for a search, driver side only: one run per proposal under the search's parent run.

`MlflowTrialCallback` (a Tune callback, pickled with the experiment: keep it in this importable
module) logs each proposal's params, its metric curves (step = training step), its stop reason
and seeds reached, the best checkpoint as an artifact and FINISHED / FAILED. A Tune trial is
one proposal or a pack of several (`arithsweep.search.trials.packs`): each proposal is its own
Optuna trial and so its own run, tagged with its Tune trial and its place in the pack. The
`mlflow_*` functions create the database, experiment and parent run before any trial starts
(trials racing to create a fresh SQLite schema is a known failure), tag verified runs and
close the search. Workers never touch MLflow.
Not run directly; `arithsweep.search.driver.run_search` wires it in. To look at the runs:
`arithsweep ui`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from ray import tune

from arithsweep.search import run_settings
from arithsweep.search.trials import packs

log = logging.getLogger(__name__)

TAG_SEARCH = "arithsweep.search"
TAG_TRIAL = "arithsweep.trial_id"  # the proposal id (the Tune trial id unless in a pack)
TAG_TUNE_TRIAL = "arithsweep.tune_trial_id"  # the Tune trial (pack) that trained it
TAG_NUMBER = "arithsweep.optuna_trial"  # its Optuna trial number
TAG_PACK = "arithsweep.pack"  # "<index>/<pack size>"
TAG_KIND = "arithsweep.kind"  # "trial" or "search" (the parent/summary run)


class MlflowTrialCallback(tune.Callback):
    """One MLflow run per trial: params, metric curves (step = training step), the best
    checkpoint as an artifact when the trial ends, and status FINISHED / FAILED.

    Chosen over Ray's MLflowLoggerCallback because that one steps metrics by Tune iteration,
    uploads the whole trial directory, and cannot nest runs under the search's summary run.
    `describe(config)` (a picklable callable) turns a trial config into the params to log.
    """

    METRICS = ("best_em", "em", "loss", "params", "examples", "elapsed", "lr", "failed_seeds",
               "cpus")  # cpus: a lone trial lent the idle cores (search.trials.cores)

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

    def _run_for(self, trial, j: int = 0) -> str:
        """The MLflow run of proposal j of a Tune trial (created with its params if new)."""
        config = trial.config or {}
        pid = packs.proposal_ids(trial.trial_id, config)[j]
        run_id = self._runs.get(pid)
        if run_id is not None:
            return run_id
        # A search killed before Tune saved this callback's state: find the proposal's run by
        # its tags instead of opening a second one (the resumed trial retrains into it).
        found = self.client.search_runs([self._experiment_id], max_results=1, filter_string=(
            f"tags.`{TAG_SEARCH}` = '{self._name}' and tags.`{TAG_TRIAL}` = '{pid}'"))
        if found:
            self._runs[pid] = found[0].info.run_id
            if (state := run_settings.state_of(self._name)) is not None:
                state.mlflow_runs[pid] = found[0].info.run_id
            return found[0].info.run_id
        item = packs.proposals_of(config)[j]
        n = len(packs.proposals_of(config))
        run = self.client.create_run(
            self._experiment_id, run_name=f"{self._name}/{pid}",
            tags={TAG_SEARCH: self._name, TAG_TRIAL: pid, TAG_KIND: "trial",
                  TAG_TUNE_TRIAL: trial.trial_id, TAG_PACK: f"{j}/{n}",
                  TAG_NUMBER: str(item.get(packs.TRIAL_NUMBER, "")),
                  "mlflow.parentRunId": self._parent})
        run_id = run.info.run_id
        self._runs[pid] = run_id
        if (state := run_settings.state_of(self._name)) is not None:
            state.mlflow_runs[pid] = run_id
        from mlflow.entities import Param
        params = self._describe(item)
        self.client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
        return run_id

    def _proposals(self, trial) -> range:
        return range(len(packs.proposals_of(trial.config or {})))

    def _sync(self) -> None:
        """Log where the running search's driver says: a search folder resumed from another
        path (a clone) or without its MLflow database has another URI, experiment and parent
        run than this callback was pickled with, and the old runs' ids mean nothing there."""
        state = run_settings.state_of(self._name)
        where = state.mlflow if state is not None else None
        if where and where != (self._uri, self._experiment_id, self._parent):
            if where[:2] != (self._uri, self._experiment_id):
                self._runs = {}
            self._uri, self._experiment_id, self._parent = where
            self._client = None

    def _safe(self, what: str, fn, *args) -> None:
        try:
            self._sync()
            fn(*args)
        except Exception as exc:  # MLflow trouble is logged, never fatal to the search
            log.warning("mlflow %s failed: %s", what, exc)

    def on_trial_start(self, iteration, trials, trial, **info):
        for j in self._proposals(trial):
            self._safe("create_run", self._run_for, trial, j)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._safe("log_metrics", self._log_result, trial, result)

    def _log_result(self, trial, result: dict) -> None:
        from mlflow.entities import Metric, RunTag
        pack = packs.is_pack(trial.config)
        now = int(time.time() * 1000)
        for j in self._proposals(trial):
            if pack and not packs.reported(result, j):
                continue  # this proposal had stopped: no new point on its curve
            mine = packs.proposal_result(result, j, pack)
            step = int(mine.get("step", mine.get("training_iteration", 0)) or 0)
            metrics = [Metric(k, float(v), now, step) for k, v in mine.items()
                       if (k in self.METRICS or k.startswith(("em_seed", "loss_seed")))
                       and isinstance(v, (int, float)) and math.isfinite(float(v))]
            # the training layout its steps ran in (README), once: a pack member that stops
            # early sends no final report to read it from
            tags = []
            # (trial id, proposal) pairs tagged; made here, so older pickles of this callback
            # (searches from before the tag) resume too
            tagged: set = self.__dict__.setdefault("_layout_tagged", set())
            if mine.get("layout") and (trial.trial_id, j) not in tagged:
                tagged.add((trial.trial_id, j))
                tags = [RunTag("arithsweep.layout", str(mine["layout"]))]
            if metrics or tags:
                self.client.log_batch(self._run_for(trial, j), metrics=metrics, tags=tags)

    def on_trial_recover(self, iteration, trials, trial, **info):
        # the run goes on (Tune restarts the trial from its last state); it says how often
        self._safe("restart", self._restarted, trial)

    def _restarted(self, trial) -> None:
        n = str(int(getattr(trial, "num_failures", 0) or 0))
        for j in self._proposals(trial):
            run_id = self._run_for(trial, j)
            self.client.set_tag(run_id, "arithsweep.restarts", n)
            self.client.set_tag(run_id, "arithsweep.restart_error", error_line(trial))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._safe("finish", self._finish, trial, "FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._safe("finish", self._finish, trial, "FAILED")

    def _finish(self, trial, status: str) -> None:
        import os

        pack = packs.is_pack(trial.config)
        state = run_settings.state_of(self._name)
        driver_reason = state.stop_reasons.get(trial.trial_id) if state is not None else None
        for j in self._proposals(trial):
            run_id = self._run_for(trial, j)
            last = packs.proposal_result(trial.last_result, j, pack)
            best_em = float(last.get("best_em", 0.0) or 0.0)
            self.client.set_tag(run_id, "arithsweep.feasible",
                                str(status == "FINISHED" and best_em >= self._target).lower())
            reason = ("error" if status == "FAILED"
                      else last.get("stop_reason") or driver_reason
                      or run_settings.ended_because(self._name))
            self.client.set_tag(run_id, "arithsweep.stop_reason", str(reason))
            for k in ("seeds_reached", "seeds_trained"):
                if isinstance(last.get(k), (int, float)):
                    self.client.log_metric(run_id, k, float(last[k]))
            if trial.error_file or status == "FAILED":
                self.client.set_tag(run_id, "arithsweep.error", error_line(trial))
            if last.get("invalid_config"):  # the sampled combination failed validation
                self.client.set_tag(run_id, "arithsweep.invalid_config",
                                    str(last.get("error")))
            ckpt = trial.checkpoint
            if ckpt is not None and status == "FINISHED":
                path = os.path.join(ckpt.path, f"p{j}") if pack else ckpt.path
                if os.path.isdir(path):
                    self.client.log_artifacts(run_id, path, artifact_path="checkpoint")
            self.client.set_terminated(run_id, status=status)


def error_text(trial) -> str:
    """A trial's whole error (its error.txt), "" when it has none or it cannot be read."""
    try:  # the driver-local copy (trial.get_error() reads storage, which syncs later)
        return Path(trial.error_file).read_text() if trial.error_file else ""
    except OSError:
        return ""


def error_line(trial, text: str | None = None) -> str:
    """The exception line of a trial's error (its traceback is in the trial's error.txt);
    `text`: that error, when the caller has read it already."""
    text = error_text(trial) if text is None else text
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
    # The UI opens an experiment of unknown kind on its GenAI overview ("Traces 0"): say it is
    # model development, so a user lands on the trial runs; and say what the runs are.
    client.set_experiment_tag(exp_id, "mlflow.experimentKind", "custom_model_development")
    client.set_experiment_tag(exp_id, "mlflow.note.content", (
        f"arithsweep searches for {task}: one run per search (tag arithsweep.kind = search) "
        f"with one child run per trained proposal (params = the model and train config, "
        f"metrics = exact match and loss per evaluation, tags = stop reason, feasibility and "
        f"the leaderboard entry when verified). The Default experiment beside this one is "
        f"MLflow's own and stays empty."))
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
