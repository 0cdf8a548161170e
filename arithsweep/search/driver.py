"""The search driver: Ray Tune + Optuna find the smallest model that reaches the target.

Optuna (define-by-run from a YAML space) minimises unique parameters subject to best exact
match >= target (a constraint set on each Optuna trial when it completes); ASHA stops trials
whose exact match lags; every trial is an MLflow run; at the end the best feasible trials
are re-verified from their weights and the qualifying ones written to the leaderboard.

    from arithsweep.search.driver import SearchOptions, run_search
    print(run_search(SearchOptions(task="add2", target=0.9, space="tiny", trials=8)).best)

or `arithsweep search --task add2 --target 0.9 --trials 8`. A search lives in
`<root>/<name>/`: `tune/` (the Tune experiment, trial checkpoints), `optuna.db` (the study,
named after the search), `search.json`, `summary.json`, `params_vs_em.png`. MLflow defaults to
`<root>/mlflow.db` with artifacts under `<root>/mlartifacts`. A killed search continues with
`SearchOptions(resume=name, trials=N)`: same Tune experiment, same Optuna study.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arithsweep.core.errors import ArithsweepError, ConfigError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the arithsweep package
TUNE_DIR = "tune"  # the Tune experiment's name inside the search directory


@dataclass
class SearchOptions:
    task: str | None = None  # required for a new search; taken from search.json on resume
    target: float | None = None  # exact match to reach, in (0, 1]; default 0.99
    space: str = "tiny"  # shipped space name or path to a YAML file
    trials: int = 20  # total trials (on resume: the new total, counting the earlier ones)
    concurrency: int | None = None  # max trials at once; default: as many as resources allow
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None  # fractions allowed; default 1 if the cluster has GPUs
    time_budget: float = 0.0  # seconds for the whole search (0 = none)
    trial_time_budget: float = 0.0  # seconds per trial, overrides the space (0 = the space's)
    trial_steps: int = 0  # steps per trial, overrides the space (0 = the space's)
    # A trial stops early once a seed reaches train_target (default: target) on its held-out
    # eval sample (train.eval_size); a bit above target leaves room for full verification.
    train_target: float | None = None
    address: str | None = None  # None: new local Ray; "auto" or "HOST:PORT": join a cluster
    num_cpus: int | None = None  # CPUs of a new local Ray instance (default: all)
    name: str | None = None  # default: <task>-<timestamp>
    resume: str | None = None  # name of a search to continue
    root: str | None = None  # default: <cwd>/searches
    mlflow_uri: str | None = None  # default: sqlite:///<root>/mlflow.db
    n_verify: int = 3  # best feasible trials to verify at the end
    seed: int = 0  # Optuna sampler seed and base training seed
    asha_grace: int = 3  # evaluations before ASHA may stop a trial
    asha_reduction: int = 3
    max_failures: int = 0  # retries of a crashed trial (0: record it failed and go on)
    fail_when: dict | None = None  # testing only: raise in trials whose config matches

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ConfigError(f"search: {what}")

        need(self.task is not None or self.resume is not None,
             "--task is required for a new search (or --resume NAME)")
        for f in ("target", "train_target"):
            v = getattr(self, f)
            need(v is None or (isinstance(v, (int, float)) and 0 < v <= 1),
                 f"{f}={v!r}: must be in (0, 1]")
        for f, lo in (("trials", 1), ("concurrency", 1), ("trial_steps", 0), ("num_cpus", 1),
                      ("n_verify", 0), ("asha_grace", 1), ("asha_reduction", 2),
                      ("max_failures", 0)):
            v = getattr(self, f)
            need(v is None and f in ("concurrency", "num_cpus") or (
                isinstance(v, int) and not isinstance(v, bool) and v >= lo),
                f"{f}={v!r}: must be a whole number >= {lo}")
        for f in ("cpus_per_trial", "gpus_per_trial", "time_budget", "trial_time_budget"):
            v = getattr(self, f)
            need(v is None and f == "gpus_per_trial" or (
                isinstance(v, (int, float)) and (v > 0 if f == "cpus_per_trial" else v >= 0)),
                f"{f}={v!r}: must be " + ("> 0" if f == "cpus_per_trial" else ">= 0"))
        for f in ("name", "resume"):
            v = getattr(self, f)
            need(v is None or (v and "/" not in v and v not in (".", "..")),
                 f"{f}={v!r}: must be a plain directory name")
        need(not (self.name and self.resume and self.name != self.resume),
             "give either --name (new search) or --resume (existing one), not both")


@dataclass
class SearchSummary:
    name: str
    dir: str
    task: str
    target: float
    n_trials: int
    n_feasible: int
    n_errored: int
    best: dict | None  # params, exact_match, trial_id, entry_id, verified_em, checkpoint
    frontier: list[tuple[int, float]]  # Pareto points (params, best exact match)
    verified: list[dict]
    plot: str | None
    mlflow_uri: str
    mlflow_experiment_id: str
    study_storage: str
    study_name: str
    trials: list[dict] = field(default_factory=list)
    wall_time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _abs_sqlite(path: Path) -> str:
    return f"sqlite:///{path.absolute()}"  # sqlite:////abs/path: workers' cwd never matters


def _abs_tracking_uri(uri: str | None) -> str | None:
    """Relative SQLite URIs and plain paths become absolute (else: one DB per working dir)."""
    if uri and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return _abs_sqlite(Path(uri[len("sqlite:///"):]).expanduser())
    return str(Path(uri).expanduser().absolute()) if uri and "://" not in uri else uri


Verifier = Callable[[dict], dict]
"""Re-verifies one candidate from its weights and records it if it qualifies.

Gets {"trial_id", "params", "train_em", "checkpoint", "mlflow_run_id", "search_name", "target"};
returns at least {"qualifies": bool, "exact_match": float | None} and, when recorded,
"entry_id". The CLI builds one from the leaderboard wing (`leaderboard.board.make_verifier`),
so the search never imports the leaderboard; None verifies nothing."""


def run_search(opts: SearchOptions, on_update: Callable[[dict], None] | None = None,
               verifier: Verifier | None = None) -> SearchSummary:
    """Run (or resume) a search; `on_update(event)` gets trial start/result/complete events;
    `verifier` checks the best feasible trials from their weights (see `Verifier`)."""
    t0 = time.time()
    root = Path(opts.root or Path.cwd() / "searches").expanduser().absolute()
    name = opts.resume or opts.name or f"{opts.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    sdir = root / name
    stored = _stored_options(sdir, opts)
    task = stored.get("task", opts.task)
    target = float(stored.get("target", opts.target if opts.target is not None else 0.99))
    mlflow_uri = (stored.get("mlflow_uri") or _abs_tracking_uri(opts.mlflow_uri)
                  or _abs_sqlite(root / "mlflow.db"))

    from arithsweep.core.tasks import get_task
    from arithsweep.search.spaces import load_space

    get_task(task)  # unknown task: one clear error before anything starts
    space = load_space(stored.get("space_path") or opts.space)
    optuna_url = _abs_sqlite(sdir / "optuna.db")
    sdir.mkdir(parents=True, exist_ok=True)
    if not opts.resume:
        if space.path.is_file():
            shutil.copyfile(space.path, sdir / "space.yaml")
        _write_json(sdir / "search.json", {
            "name": name, "task": task, "target": target, "space": space.name, "seed": opts.seed,
            "space_path": str((sdir / "space.yaml") if space.path.is_file() else space.path),
            "mlflow_uri": mlflow_uri, "optuna_storage": optuna_url, "options": asdict(opts),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")})

    with _quiet_logs():
        import ray

        from arithsweep.search import callbacks as cb

        try:
            experiment_id, parent_run = cb.mlflow_setup(mlflow_uri, root, task, name,
                                                        space.name, target, bool(opts.resume))
        except Exception as exc:  # unreachable server, bad URI, locked file
            raise ArithsweepError(f"MLflow at {mlflow_uri}: {_first_line(exc)}") from None
        started = _ray_up(opts)
        deadline = t0 + opts.time_budget if opts.time_budget else None  # startup counts
        cb.register_driver(name, opts.trials, deadline, on_update)
        try:
            results = _fit(opts, name, sdir, task, target, space, optuna_url, mlflow_uri,
                           experiment_id, parent_run)
        except BaseException:
            # Killed or broken: the parent run says so; `resume` continues where Tune saved.
            cb.mlflow_client(mlflow_uri).set_terminated(parent_run, "KILLED")
            raise
        finally:
            cb.unregister_driver(name)
            if started:
                ray.shutdown()
    summary = _finish(opts, name, sdir, task, target, results, mlflow_uri, experiment_id,
                      parent_run, optuna_url, verifier)
    summary.wall_time = round(time.time() - t0, 2)
    _write_json(sdir / "summary.json", summary.to_dict())
    cb.mlflow_close(mlflow_uri, parent_run, summary, sdir)
    return summary


@contextlib.contextmanager
def _quiet_logs():
    """Hold Ray, Tune, Optuna and MLflow console logs back during a search, then restore the
    levels. The CLI draws its own live table, and a crashed trial shows there, in summary.json
    and in MLflow (traceback in the trial's error.txt), so Tune's ERROR tracebacks are held too.
    """
    import mlflow  # noqa: F401 - both set their logger levels on import: import them first
    import optuna  # noqa: F401

    w, c = logging.WARNING, logging.CRITICAL
    levels = {"ray": w, "ray.tune": c, "ray.train": c, "optuna": w, "mlflow": w, "alembic": w}
    saved = {n: logging.getLogger(n).level for n in levels}
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)
    # Tune warns every few seconds about the (cheap, local) snapshots forced by num_to_keep.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no status tables
    try:
        yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


def _stored_options(sdir: Path, opts: SearchOptions) -> dict[str, Any]:
    """For a resume, the settings the search was started with (they may not change)."""
    if not opts.resume:
        if sdir.exists():
            raise ConfigError(f"search {sdir.name!r} already exists in {sdir.parent}: "
                              f"resume it (--resume {sdir.name}) or pick another --name")
        return {}
    meta = sdir / "search.json"
    if not meta.is_file():
        raise ConfigError(f"cannot resume {sdir.name!r}: no search.json in {sdir}")
    stored = json.loads(meta.read_text())
    for key, given in (("task", opts.task), ("target", opts.target)):
        if given is not None and given != stored.get(key):
            raise ConfigError(f"cannot resume {sdir.name!r} with {key}={given!r}: it was "
                              f"started with {key}={stored.get(key)!r}")
    return stored


def _ray_up(opts: SearchOptions) -> bool:
    """Start or join Ray unless the caller already did; True when we must shut it down."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Workers import arithsweep by name (the trainable and callbacks are pickled by reference).
    path = [str(_PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
    try:
        if opts.address is None:
            ray.init(address="local", num_cpus=opts.num_cpus or os.cpu_count(),
                     include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING, runtime_env={"env_vars": env})
        else:
            # A cluster's workers may not have this checkout: ship the package with the job.
            ray.init(address=opts.address, log_to_driver=False, logging_level=logging.WARNING,
                     runtime_env={"py_modules": [str(_PACKAGE_DIR)]})
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ArithsweepError(f"cannot start or join Ray at {opts.address or 'local'}: "
                              f"{_first_line(exc)}") from None
    return True


def _fit(opts, name, sdir, task, target, space, optuna_url, mlflow_uri, experiment_id,
         parent_run):
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from arithsweep.search import callbacks as cb
    from arithsweep.search.trainable import CONST_KEY, describe_trial, run_trial

    avail = ray.cluster_resources()
    gpus = opts.gpus_per_trial
    if gpus is None:
        gpus = 1.0 if avail.get("GPU", 0) >= 1 else 0.0
    fits = int(avail.get("CPU", 1) // opts.cpus_per_trial) or 1
    if gpus:
        fits = min(fits, int(avail.get("GPU", 0) // gpus) or 1)
    concurrency = opts.concurrency or max(1, fits)
    trainable = tune.with_resources(run_trial, {"cpu": opts.cpus_per_trial, "gpu": gpus})
    exp_dir = sdir / TUNE_DIR

    if opts.resume and tune.Tuner.can_restore(str(exp_dir)):
        # Finished trials stay; unfinished ones continue; errored ones stay errored (Optuna
        # has already been told FAIL, re-running them would be a second, untold attempt).
        tuner = tune.Tuner.restore(str(exp_dir), trainable=trainable, resume_unfinished=True,
                                   resume_errored=False, restart_errored=False)
    else:
        const = {"task": task, "target": target, "cpus_per_trial": opts.cpus_per_trial,
                 "train_target": max(target, opts.train_target or target),
                 "device": "cuda" if gpus else "cpu", "steps": opts.trial_steps,
                 "time_budget": opts.trial_time_budget, "seed": opts.seed,
                 "space": space.name, "search": name, "fail_when": opts.fail_when}
        searcher = cb.ConstrainedOptunaSearch(space.ray_define_by_run(), target=target,
                                              study_name=name, storage_url=optuna_url,
                                              seed=opts.seed)
        asha = ASHAScheduler(time_attr="training_iteration", metric="best_em", mode="max",
                             max_t=10**6, grace_period=opts.asha_grace,
                             reduction_factor=opts.asha_reduction)
        callbacks = [cb.MlflowTrialCallback(name, mlflow_uri, experiment_id, parent_run,
                                            describe_trial, target), cb.LiveCallback(name)]
        tuner = tune.Tuner(
            trainable,
            param_space={CONST_KEY: const},
            tune_config=tune.TuneConfig(
                search_alg=cb.BudgetedSearchGenerator(searcher, name, concurrency),
                scheduler=asha, num_samples=opts.trials, reuse_actors=False,
                trial_name_creator=cb.trial_dirname, trial_dirname_creator=cb.trial_dirname),
            run_config=tune.RunConfig(
                storage_path=str(sdir), name=TUNE_DIR, stop=cb.DeadlineStopper(name),
                failure_config=tune.FailureConfig(max_failures=opts.max_failures),
                checkpoint_config=tune.CheckpointConfig(
                    num_to_keep=1, checkpoint_score_attribute="best_em",
                    checkpoint_score_order="max"),
                callbacks=callbacks, verbose=0, log_to_file=False))
    return tuner.fit()


def _finish(opts, name, sdir, task, target, results, mlflow_uri, experiment_id, parent_run,
            optuna_url, verifier) -> SearchSummary:
    from arithsweep.search import callbacks as cb
    from arithsweep.search.plots import frontier, plot_params_vs_em
    from arithsweep.search.trainable import close_unreported, trial_rows

    rows = trial_rows(results, target)
    close_unreported(rows, optuna_url, name, mlflow_uri, experiment_id)
    runs = cb.mlflow_trial_runs(mlflow_uri, experiment_id, name)
    for r in rows:
        r["mlflow_run_id"] = runs.get(r["trial_id"])
    feasible = sorted((r for r in rows if r["feasible"]),
                      key=lambda r: (r["params"], -r["best_em"]))
    verified = _verify(feasible[:opts.n_verify], target, name, verifier, mlflow_uri)
    # Best = the smallest trial that passed verification, else the smallest feasible one.
    ok = [v for v in verified if v.get("qualifies")]
    b = ok[0] if ok else ({**feasible[0], "train_em": feasible[0]["best_em"]}
                          if feasible else None)
    best = None if b is None else {
        "params": b["params"], "exact_match": b["train_em"], "trial_id": b["trial_id"],
        "entry_id": b.get("entry_id"), "verified_em": b.get("exact_match") if ok else None,
        "checkpoint": b["checkpoint"]}
    plot = plot_params_vs_em(rows, target, sdir / "params_vs_em.png",
                             title=f"{name}: {task}, target {target:g}")
    return SearchSummary(
        name=name, dir=str(sdir), task=task, target=target, n_trials=len(rows),
        n_feasible=len(feasible), n_errored=sum(r["errored"] for r in rows), best=best,
        frontier=frontier(rows), verified=verified, plot=plot, mlflow_uri=mlflow_uri,
        mlflow_experiment_id=experiment_id, study_storage=optuna_url, study_name=name,
        trials=rows)


def _verify(candidates, target, name, verifier, mlflow_uri) -> list[dict]:
    """Hand the candidates to the caller's verifier (driver only); mark their MLflow runs."""
    from arithsweep.search import callbacks as cb

    out: list[dict] = []
    for c in candidates if verifier is not None else []:
        cand = {"trial_id": c["trial_id"], "params": c["params"], "train_em": c["best_em"],
                "checkpoint": c["checkpoint"], "mlflow_run_id": c.get("mlflow_run_id"),
                "search_name": name, "target": target}
        item = {**cand, **verifier(cand)}
        cb.mlflow_verified(mlflow_uri, item)
        out.append(item)
    return out


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, path)
