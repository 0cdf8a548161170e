"""The Tune experiment of a search: its trainable's resources, the constants every trial gets,
the searcher, the driver's callbacks and stoppers, and the fit (new, or a resumed one restored).

Driver side; `driver.run_search` calls `fit` once Ray is up and the search is registered
(`run_settings`). Not run directly; with Ray up:

    import ray; ray.init(num_cpus=2)
    from arithsweep.search.options import SearchOptions
    from arithsweep.search.tuner import resources
    resources(SearchOptions(task="add2"))   # (GPU share, proposals per trial, concurrency)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arithsweep.search.options import train_target


def fit(s: Any, exp_dir: Path, experiment_id: str, parent_run: str) -> Any:
    """Tune's fit of search `s` (driver._Search) in `exp_dir`: a resumed experiment restored,
    or a new Tuner; its ResultGrid."""
    from ray import tune

    from arithsweep.search import run_settings
    from arithsweep.search.trials.trainable import run_trial

    opts = s.opts
    gpus, per_trial, concurrency = resources(opts)
    trainable = tune.with_resources(run_trial, {"cpu": opts.cpus_per_trial, "gpu": gpus})
    if opts.resume and tune.Tuner.can_restore(str(exp_dir)):
        run_settings.state_of(s.name).concurrency = concurrency
        # Finished trials stay; unfinished ones continue; errored ones stay errored (Optuna
        # has already been told FAIL, re-running them would be a second, untold attempt).
        from arithsweep.search.propose.searcher import storage_at

        with storage_at(s.optuna_url):  # the study where the folder is now
            return tune.Tuner.restore(str(exp_dir), trainable=trainable,
                                      resume_unfinished=True, resume_errored=False,
                                      restart_errored=False).fit()
    const = constants(s, gpus)
    return new_tuner(s, exp_dir, trainable, const, per_trial, concurrency, experiment_id,
                     parent_run).fit()


def resources(opts: Any) -> tuple[float, int, int]:
    """(GPU share per trial, proposals per trial, trials at once) on this Ray cluster."""
    import ray

    from arithsweep.search.options import resources_per_trial

    avail = ray.cluster_resources()
    gpus, per_trial = resources_per_trial(opts, avail.get("GPU", 0))
    fits = int(avail.get("CPU", 1) // opts.cpus_per_trial) or 1
    if gpus:
        fits = min(fits, int(avail.get("GPU", 0) // gpus) or 1)
    return gpus, per_trial, opts.concurrency or max(1, fits)


def node_cpus() -> int:
    """The CPUs of the cluster's smallest live node (a trial's bundle must fit on one)."""
    import ray

    cpus = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    return int(min((c for c in cpus if c), default=0))


def constants(s: Any, gpus: float) -> dict[str, Any]:
    """The search's constants every trial gets (configs.CONST_KEY): what build_trial decides
    by, the stop rules' settings, the space's seed and steps rules."""
    from arithsweep.search.trials.configs import SEED_RULE, SEED_SCHEME, STEPS_DIGITS, STEPS_RULE

    opts, space, target = s.opts, s.space, s.target
    const = {"task": s.task_name, "target": target, "cpus_per_trial": opts.cpus_per_trial,
             "train_target": train_target(opts, s.task_name, target),
             "device": "cuda" if gpus else "cpu", "steps": opts.trial_steps,
             "time_budget": opts.trial_time_budget, "seed": opts.seed,
             "space": space.name, "search": s.name, "fail_when": opts.fail_when,
             "patience": opts.patience, "extra_rounds": opts.extra_rounds,
             "near_miss": opts.near_miss, "seed_scheme": SEED_SCHEME}
    if space.seed_rule:  # how many seeds a proposal trains, by its size (configs.build_trial)
        const[SEED_RULE] = [list(row) for row in space.seed_rule]
    if space.steps_rule:  # ... and how many steps (unless --trial-steps fixes them)
        const[STEPS_RULE] = [list(row) for row in space.steps_rule]
        if space.steps_digits:  # ... the rows being for operands this long
            const[STEPS_DIGITS] = space.steps_digits
    return const


def new_tuner(s: Any, exp_dir: Path, trainable: Any, const: dict[str, Any], per_trial: int,
           concurrency: int, experiment_id: str, parent_run: str) -> Any:
    """A new search's Tuner: the searcher, the driver's callbacks and stoppers."""
    from ray import tune
    from ray.tune.stopper import CombinedStopper

    from arithsweep.search import run_settings, snapshots
    from arithsweep.search.propose import incumbent, searcher
    from arithsweep.search.report import live, tracking
    from arithsweep.search.trials import cores
    from arithsweep.search.trials.configs import CONST_KEY, ProposalSizer, describe_trial
    from arithsweep.search.trials.packs import PackKeyer

    opts, name = s.opts, s.name
    search = searcher.ConstrainedOptunaSearch(
        s.space.ray_define_by_run(), target=s.target, study_name=name,
        storage_url=s.optuna_url, sizer=ProposalSizer(const), seed=opts.seed,
        start=s.space.start, proposals=per_trial, keyer=PackKeyer(const))
    # No multi-fidelity scheduler: a trial stops on its own curve (see trainable); from
    # outside only the incumbent (a verified model no larger) or the deadline stops it. The
    # one scheduler re-sizes a trial running alone (search.trials.cores), without stopping it.
    gpus = float(const.get("device") == "cuda")
    sched = cores.scheduler(opts.cpus_per_trial, gpus, node_cpus()) if opts.spare_cores else None
    callbacks = [tracking.MlflowTrialCallback(name, s.mlflow_uri, experiment_id, parent_run,
                                              describe_trial, s.target),
                 live.LiveCallback(name), incumbent.VerifyCallback(name, str(s.sdir), s.target),
                 snapshots.SnapshotKeeper()]
    stoppers = CombinedStopper(run_settings.DeadlineStopper(name),
                               run_settings.IncumbentStopper(name))
    return tune.Tuner(
        trainable,
        param_space={CONST_KEY: const},
        tune_config=tune.TuneConfig(
            search_alg=searcher.BudgetedSearchGenerator(search, name, concurrency),
            num_samples=-1 if s.trials is None else s.trials,  # -1: until the deadline
            reuse_actors=False, scheduler=sched,
            trial_name_creator=live.trial_dirname, trial_dirname_creator=live.trial_dirname),
        run_config=tune.RunConfig(
            storage_path=str(exp_dir.parent), name=exp_dir.name, stop=stoppers,
            failure_config=tune.FailureConfig(max_failures=opts.max_failures),
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=1, checkpoint_score_attribute="best_em",
                checkpoint_score_order="max"),
            callbacks=callbacks, verbose=0, log_to_file=False))
