"""The search driver: Ray Tune + Optuna find the smallest model that reaches the target.

Optuna (define-by-run from a YAML space) minimises unique parameters subject to best exact
match >= target (a constraint set on each Optuna trial when it completes). It is a minimiser,
not a generic tuner: a trial that reaches the target is verified from its weights on the
driver at once (through the caller's `verifier`), and from then on no proposal of that size
or larger is trained (told to Optuna untrained, shown as skipped) and running trials that are
no smaller are stopped. Trials stop on their own curve (plateau, budget, reached), never
because a bigger model is ahead; near misses earn a second round of seeds. Every trial is an
MLflow run; the summary lists stop reasons, skipped proposals and per-architecture success.
With `proposals_per_trial` P > 1 (the default on a GPU machine, see
`options.resources_per_trial`) each Tune trial is a pack of up to P proposals of one shape
trained as one population (`arithsweep.search.packs`); every proposal stays its own Optuna
trial, MLflow run, verification candidate and summary row.

    from arithsweep.search.driver import SearchOptions, run_search
    print(run_search(SearchOptions(task="add2", target=0.9, space="tiny", trials=8)).best)

or `arithsweep search --task add2 --target 0.9 --trials 8`. A search lives in
`<root>/<name>/`: `tune/` (the Tune experiment, trial checkpoints), `optuna.db` (the study,
named after the search), `search.json`, `summary.json`, `params_vs_em.png`. MLflow defaults to
`<root>/mlflow.db` with artifacts under `<root>/mlartifacts`. A killed search continues with
`SearchOptions(resume=name, trials=N)`: same Tune experiment, same Optuna study, same
incumbent (`verified.json`). `SearchOptions(from_entry="44")` (`--from-entry`) starts from a
leaderboard entry or checkpoint folder as the verified incumbent, descending from its point
in the space (`incumbent.entry_incumbent`, `shrink.map_entry`); search.json keeps it under
"from_entry", with the commands of the searches that found it ("chain"), for `publish`.
Given `find_smallest` (the CLI gives it), a new search without from_entry starts so from the
board's smallest entry of its task at its target, unless `SearchOptions(fresh=True)`
(`--fresh`): then, as without an entry on the board, from the space's start point.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from arithsweep import __version__
from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ArithsweepError, ConfigError
from arithsweep.search import cluster
from arithsweep.search.options import SearchOptions, SearchProgress, SearchSummary

TUNE_DIR = "tune"  # the Tune experiment's name inside the search directory


# Bumped when what a search directory holds stops loading in a newer arithsweep (Tune pickles
# the trainable's and searcher's classes by module path; spaces gain fields): 2 = the frontier
# model family and list-valued train fields.
SEARCH_FORMAT = 2

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
"entry_id". The CLI builds one from the leaderboard wing (`leaderboard.verify.make_verifier`),
so the search never imports the leaderboard; None verifies nothing."""

EntryFinder = Callable[[str], dict]
"""Finds what `--from-entry REF` names: for a board entry (id or sha256 prefix) its row
(entry_id, task, format, params, exact_match, model_config, train_config, checkpoint,
search_name, seeds_reached, chain: the commands of the searches that found it); for a
checkpoint folder only {"checkpoint", "chain"} (the driver verifies it). Raises
ArithsweepError (one line) for anything else. The CLI builds it from the leaderboard wing
(`leaderboard.entry_lookup.entry_finder`)."""

BoardFinder = Callable[[str, float], "dict | None"]
"""Finds where a new search starts: `find_smallest(task, target)` gives the board's smallest
entry of the task at the target or above (the local database and the published entries.json
ranked as one; fewest params, then the best exact match) as `EntryFinder` gives an entry, or
None when the board holds none. Raises ArithsweepError when the board cannot be read. The CLI
builds it from the leaderboard wing (`leaderboard.entry_lookup.smallest_finder`)."""


def run_search(opts: SearchOptions, on_update: Callable[[dict], None] | None = None,
               verifier: Verifier | None = None, find_entry: EntryFinder | None = None,
               note: Callable[[str], None] | None = None,
               find_smallest: BoardFinder | None = None) -> SearchSummary:
    """Run (or resume) a search; `on_update(event)` gets trial start/result/complete events,
    each with the search's `SearchProgress` (as a dict) under "search", and one event
    "search" (trial_id None) before any trial;
    `verifier` checks trials that reach the target from their weights (see `Verifier`): the
    smallest verified one bounds every later proposal; `find_entry` looks `--from-entry` up
    (see `EntryFinder`); `find_smallest` the board's smallest entry of the task, where a new
    search without `from_entry` or `fresh` starts (see `BoardFinder`); `note(line)` gets the
    one line that says where the search starts ("from entry ..." and how it mapped onto the
    space, or "from the space's start point, not ..." when the board's entry cannot be
    used), before the search starts."""
    t0 = time.time()
    root = Path(opts.root or Path.cwd() / "searches").expanduser().absolute()
    given = opts.resume or opts.name
    stored = _stored_options(root / given, opts) if given else {}
    # a new search without --target aims where one training run stops (TrainConfig.target)
    target = float(stored.get("target", opts.target if opts.target is not None
                              else TrainConfig.target))

    from arithsweep.core.data.tasks import get_task
    from arithsweep.search.spaces import default_space, load_space

    if opts.task is not None:
        get_task(opts.task)  # unknown task: one clear error before anything starts
    start = values = unused = None
    if opts.from_entry:  # a new search only (SearchOptions says so): before Ray, before files
        from arithsweep.search import incumbent

        start, values = incumbent.entry_incumbent(opts.from_entry, opts.task, target,
                                                  find_entry, verifier)
    elif find_smallest is not None and not opts.resume and not opts.fresh:
        from arithsweep.search import incumbent

        start, values, unused = incumbent.board_incumbent(opts.task, target, find_smallest)
    task = stored.get("task", opts.task or (start or {}).get("task"))
    name = given or f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    sdir = root / name
    if not given:
        _stored_options(sdir, opts)  # the name must be free
    mlflow_uri = (stored.get("mlflow_uri") or _abs_tracking_uri(opts.mlflow_uri)
                  or _abs_sqlite(root / "mlflow.db"))
    get_task(task)
    space = load_space(stored.get("space_path") or opts.space or default_space(task))
    if start is not None:
        from arithsweep.search.shrink import map_entry

        start = incumbent.start_item(start, map_entry(space, values, task), space.name)
    if note is not None and (start is not None or unused):
        note(start["note"] if start is not None else unused)
    optuna_url = _abs_sqlite(sdir / "optuna.db")
    fresh = not opts.resume and not sdir.exists()
    sdir.mkdir(parents=True, exist_ok=True)
    if not opts.resume:
        if space.path.is_file():
            shutil.copyfile(space.path, sdir / "space.yaml")
        _write_json(sdir / "search.json", {
            "name": name, "task": task, "target": target, "space": space.name, "seed": opts.seed,
            "space_path": str((sdir / "space.yaml") if space.path.is_file() else space.path),
            "mlflow_uri": mlflow_uri, "optuna_storage": optuna_url, "options": asdict(opts),
            "command": opts.command, "from_entry": _from_entry_record(start),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "arithsweep_version": __version__,
            "search_format": SEARCH_FORMAT})
        if start is not None:  # the starting incumbent, kept like any verified one
            from arithsweep.search.incumbent import save_verified

            save_verified(sdir, {start["trial_id"]: _lean(start)})
    else:  # every resume is recorded, so a published entry can say how the search really ran
        stored.setdefault("resumes", []).append(
            {"command": opts.command, "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "time_budget": opts.time_budget, "trials": opts.trials})
        _write_json(sdir / "search.json", stored)

    with cluster.quiet_logs():
        import ray

        from arithsweep.search import incumbent, replay, run_settings, snapshots, tracking
        from arithsweep.search.results import retire_waiting

        try:
            try:
                experiment_id, parent_run = tracking.mlflow_setup(
                    mlflow_uri, root, task, name, space.name, target, bool(opts.resume))
            except Exception as exc:  # unreachable server, bad URI, locked file
                raise ArithsweepError(
                    f"MLflow at {mlflow_uri}: {cluster.first_line(exc)}") from None
            started = cluster.ray_up(opts)
        except BaseException:
            if fresh:  # nothing ran: the name stays free for the corrected command
                shutil.rmtree(sdir, ignore_errors=True)
            raise
        deadline = t0 + opts.time_budget if opts.time_budget else None  # startup counts
        verified = incumbent.load_verified(sdir)  # a resumed search keeps its incumbent
        state = run_settings.register(name, run_settings.DriverState(
            trials=opts.trials, deadline=deadline, on_update=on_update, verifier=verifier,
            max_params=opts.max_params, frontier=opts.frontier, verified=verified,
            incumbent=incumbent.incumbent_of(verified)))
        if on_update is not None:  # every live event says where the search stands
            state.on_update = lambda event: on_update(
                {**event, "search": _progress(name, t0, opts, state)})
            run_settings.emit(name, {"event": "search", "trial_id": None})  # before any trial
        before = _read_json(sdir / "summary.json") if opts.resume else {}
        # the trials' rule (a resumed Tuner keeps the constants it was started with)
        near = float((stored.get("options") or {}).get("near_miss", opts.near_miss))
        try:
            if opts.resume and (sdir / TUNE_DIR).is_dir():  # a snapshot cut off by the kill
                snapshots.repair(sdir / TUNE_DIR)
            replayed = replay.prepare_resume(opts, sdir / TUNE_DIR, optuna_url, target, near,
                                             before, state)
            results = _fit(opts, name, sdir, task, target, space, optuna_url, mlflow_uri,
                           experiment_id, parent_run)
            summary = _finish(opts, name, sdir, task, target, results, mlflow_uri,
                              experiment_id, optuna_url, state, near)
            summary.replayed = replayed
            retire_waiting(name, optuna_url)
        except BaseException:
            # Killed or broken: the parent run says so; `resume` continues where Tune saved.
            tracking.mlflow_client(mlflow_uri).set_terminated(parent_run, "KILLED")
            raise
        finally:
            run_settings.unregister(name)
            if started:
                ray.shutdown()
    summary.from_entry = stored.get("from_entry") if opts.resume else _from_entry_record(start)
    summary.wall_time = round(time.time() - t0, 2)
    summary.total_wall_time = round(summary.wall_time + float(
        before.get("total_wall_time") or before.get("wall_time") or 0.0), 2)
    _write_json(sdir / "summary.json", summary.to_dict())
    tracking.mlflow_close(mlflow_uri, parent_run, summary, sdir)
    return summary


def _from_entry_record(start: dict | None) -> dict | None:
    """search.json's "from_entry": the entry a search started from, how it mapped onto the
    space, and the commands of the searches that found it ("chain"), which `publish` prints
    before this search's own command."""
    if start is None:
        return None
    keys = ("from_entry", "entry_id", "task", "format", "params", "exact_match", "checkpoint",
            "found_by", "seeds_reached", "seeds_trained", "point", "unmapped", "differs",
            "note", "chain", "board")
    return {"ref" if k == "from_entry" else k: start.get(k) for k in keys}


def _lean(start: dict) -> dict:
    """The starting entry as a verified item (verified.json): no mapping report, no chain."""
    return {k: v for k, v in start.items() if k not in ("unmapped", "differs", "chain")}


def _progress(name: str, t0: float, opts: SearchOptions, state) -> dict[str, Any]:
    """The live view's `SearchProgress`, from the driver's state as it is now."""
    ok = [v for v in state.verified.values() if v.get("qualifies")]
    best = min(ok, key=lambda v: (int(v["params"]), -float(v.get("exact_match") or 0.0)),
               default=None)
    return asdict(SearchProgress(
        name=name, started=t0, time_budget=opts.time_budget, cpus_per_trial=opts.cpus_per_trial,
        skipped=len(state.skipped), incumbent=None if best is None else {
            k: best.get(k) for k in ("params", "exact_match", "entry_id", "trial_id")}))


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
    made = stored.get("search_format", 1)  # searches before the field: format 1
    if made != SEARCH_FORMAT:
        raise ConfigError(
            f"cannot resume {sdir.name!r}: it was made by arithsweep "
            f"{stored.get('arithsweep_version', 'before 0.1.0 search format 2')} (search format "
            f"{made}) and this is {__version__} (format {SEARCH_FORMAT}), whose pickled Tune "
            f"state and spaces differ; start a new search (its verified entries stay on the "
            f"leaderboard)")
    for key, given in (("task", opts.task), ("target", opts.target)):
        if given is not None and given != stored.get(key):
            raise ConfigError(f"cannot resume {sdir.name!r} with {key}={given!r}: it was "
                              f"started with {key}={stored.get(key)!r}")
    return stored


def _fit(opts, name, sdir, task, target, space, optuna_url, mlflow_uri, experiment_id,
         parent_run):
    import ray
    from ray import tune
    from ray.tune.stopper import CombinedStopper

    from arithsweep.search import incumbent, live, run_settings, searcher, snapshots, tracking
    from arithsweep.search.options import resources_per_trial
    from arithsweep.search.packs import PackKeyer
    from arithsweep.search.trainable import run_trial
    from arithsweep.search.trial import (
        CONST_KEY,
        SEED_RULE,
        SEED_SCHEME,
        STEPS_DIGITS,
        STEPS_RULE,
        ProposalSizer,
        describe_trial,
    )

    avail = ray.cluster_resources()
    gpus, per_trial = resources_per_trial(opts, avail.get("GPU", 0))
    fits = int(avail.get("CPU", 1) // opts.cpus_per_trial) or 1
    if gpus:
        fits = min(fits, int(avail.get("GPU", 0) // gpus) or 1)
    concurrency = opts.concurrency or max(1, fits)
    trainable = tune.with_resources(run_trial, {"cpu": opts.cpus_per_trial, "gpu": gpus})
    exp_dir = sdir / TUNE_DIR

    if opts.resume and tune.Tuner.can_restore(str(exp_dir)):
        run_settings.state_of(name).concurrency = concurrency
        # Finished trials stay; unfinished ones continue; errored ones stay errored (Optuna
        # has already been told FAIL, re-running them would be a second, untold attempt).
        return tune.Tuner.restore(str(exp_dir), trainable=trainable, resume_unfinished=True,
                                  resume_errored=False, restart_errored=False).fit()
    const = {"task": task, "target": target, "cpus_per_trial": opts.cpus_per_trial,
             "train_target": max(target, opts.train_target or target),
             "device": "cuda" if gpus else "cpu", "steps": opts.trial_steps,
             "time_budget": opts.trial_time_budget, "seed": opts.seed,
             "space": space.name, "search": name, "fail_when": opts.fail_when,
             "patience": opts.patience, "extra_rounds": opts.extra_rounds,
             "near_miss": opts.near_miss, "seed_scheme": SEED_SCHEME}
    if space.seed_rule:  # how many seeds a proposal trains, by its size (trial.build_trial)
        const[SEED_RULE] = [list(row) for row in space.seed_rule]
    if space.steps_rule:  # ... and how many steps (unless --trial-steps fixes them)
        const[STEPS_RULE] = [list(row) for row in space.steps_rule]
        if space.steps_digits:  # ... the rows being for operands this long
            const[STEPS_DIGITS] = space.steps_digits
    search = searcher.ConstrainedOptunaSearch(
        space.ray_define_by_run(), target=target, study_name=name, storage_url=optuna_url,
        sizer=ProposalSizer(const), seed=opts.seed, start=space.start,
        proposals=per_trial, keyer=PackKeyer(const))
    # No multi-fidelity scheduler: a trial stops on its own curve (see trainable); from
    # outside only the incumbent (a verified model no larger) or the deadline stops it.
    callbacks = [tracking.MlflowTrialCallback(name, mlflow_uri, experiment_id, parent_run,
                                              describe_trial, target),
                 live.LiveCallback(name), incumbent.VerifyCallback(name, str(sdir), target),
                 snapshots.SnapshotKeeper()]
    stoppers = CombinedStopper(run_settings.DeadlineStopper(name),
                               run_settings.IncumbentStopper(name))
    tuner = tune.Tuner(
        trainable,
        param_space={CONST_KEY: const},
        tune_config=tune.TuneConfig(
            search_alg=searcher.BudgetedSearchGenerator(search, name, concurrency),
            num_samples=opts.trials, reuse_actors=False,
            trial_name_creator=live.trial_dirname, trial_dirname_creator=live.trial_dirname),
        run_config=tune.RunConfig(
            storage_path=str(sdir), name=TUNE_DIR, stop=stoppers,
            failure_config=tune.FailureConfig(max_failures=opts.max_failures),
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=1, checkpoint_score_attribute="best_em",
                checkpoint_score_order="max"),
            callbacks=callbacks, verbose=0, log_to_file=False))
    return tuner.fit()


def _finish(opts, name, sdir, task, target, results, mlflow_uri, experiment_id, optuna_url,
            state, near_miss: float) -> SearchSummary:
    from arithsweep.search import incumbent, tracking, verdicts
    from arithsweep.search.plots import frontier, plot_params_vs_em
    from arithsweep.search.replay import cut_near_misses
    from arithsweep.search.results import architecture_rates, close_unreported, trial_rows
    from arithsweep.search.run_settings import ended_because

    rows = trial_rows(results, target, state.stop_reasons, ended_because(name))
    runs = tracking.mlflow_trial_runs(mlflow_uri, experiment_id, name)
    for r in rows:
        r["mlflow_run_id"] = runs.get(r["trial_id"])
    feasible = sorted((r for r in rows if r["feasible"]),
                      key=lambda r: (r["params"], -r["best_em"]))
    # Trials verified while the search ran are not verified twice; the best feasible ones
    # the deadline stopped before they completed are verified now.
    for r in feasible[:opts.n_verify]:
        incumbent.verify_candidate(name, sdir, target, {
            "trial_id": r["trial_id"], "params": r["params"], "train_em": r["best_em"],
            "checkpoint": r["checkpoint"], "seeds_reached": r.get("seeds_reached"),
            "seeds_trained": r.get("seeds_trained")})
    # Proposals held back for their verdict are told now, before every Optuna trial still
    # running is failed.
    verdicts.tell_verified(name, target, final=True)
    close_unreported(rows, optuna_url, name, mlflow_uri, experiment_id)
    verified = []
    for trial_id, item in state.verified.items():
        item = {**item, "mlflow_run_id": runs.get(trial_id)}
        tracking.mlflow_verified(mlflow_uri, item)
        verified.append(item)
    verified.sort(key=lambda v: (not v.get("qualifies"), v.get("params") or 0))
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
        skipped=state.skipped, incumbent=state.incumbent,
        trained_above_incumbent=sorted(state.trained_above),
        architectures=architecture_rates(rows), trials=rows,
        # this run's cuts only: an earlier run's were replayed (or named) by then
        cut_near_misses=cut_near_misses([r for r in rows if r["tune_trial_id"]
                                         not in state.ended_trials], target, near_miss,
                                        state.incumbent),
        cpu_hours=round(opts.cpus_per_trial * sum(
            float((r.metrics or {}).get("time_total_s") or 0.0) for r in results) / 3600, 4),
        n_tune_trials=len({r["tune_trial_id"] for r in rows}),
        largest_pack=max((r["pack_size"] for r in rows), default=1))


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict:
    """A JSON file the search wrote earlier; {} when absent or unreadable (a killed run)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
