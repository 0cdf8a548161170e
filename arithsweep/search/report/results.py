"""What a finished search's trials did, read back on the driver as plain dicts.

`trial_rows` turns Tune's ResultGrid into one dict per proposal (size, best exact match, why
it stopped, seeds that reached the target out of seeds trained, its best checkpoint): a Tune
trial is one proposal, or a pack of several (see `arithsweep.search.trials.packs`), and the summary
counts proposals, since each is its own Optuna trial and MLflow run;
`architecture_rates` groups them by architecture into success rates; `close_unreported`
fails the Optuna trials and MLflow runs that the search deadline cut off unreported;
`summarise` makes the search's summary of it all. Not run directly;
`arithsweep.search.driver` calls them when the fit is over.
"""

from __future__ import annotations

import os
from typing import Any

from arithsweep.search.options import SearchSummary
from arithsweep.search.report import tracking
from arithsweep.search.run_settings import DEADLINE, INTERRUPTED
from arithsweep.search.trials import packs
from arithsweep.search.trials.configs import CONST_KEY


def trial_rows(results: Any, target: float, stop_reasons: dict[str, str] | None = None,
               ended: str = DEADLINE) -> list[dict[str, Any]]:
    """Driver side: what each trial reported, read back from Tune's ResultGrid as plain dicts
    (the last result carries the trial's running best_em; the kept checkpoint is its best).
    `ended`: the stop reason of a trial that neither stopped itself nor was stopped by the
    driver (run_settings.ended_because)."""
    rows = []
    for r in results:
        errored, config = r.error is not None, r.config or {}
        # a trial that died before its first report has no trial_id: use its directory
        tune_id = (r.metrics or {}).get("trial_id") or os.path.basename(r.path).removeprefix(
            "trial_")
        pack = packs.is_pack(config)
        items = packs.proposals_of(config)
        arch = _architecture(config)  # one shape per pack
        for j, (pid, item) in enumerate(zip(packs.proposal_ids(tune_id, config), items)):
            m = packs.proposal_result(r.metrics, j, pack)
            best_em = float(m.get("best_em", 0.0) or 0.0)
            ckpt = None
            if r.checkpoint is not None:
                ckpt = os.path.join(r.checkpoint.path, f"p{j}" if pack else "", "best")
                ckpt = ckpt if not pack or os.path.isdir(ckpt) else None
            rows.append({
                "trial_id": pid, "tune_trial_id": tune_id, "pack_size": len(items),
                "params": int(m.get("params", 0) or 0), "best_em": best_em,
                "step": m.get("step"), "errored": errored,
                "invalid_config": bool(m.get("invalid_config")),
                "error": str(r.error).strip().splitlines()[-1][:300] if errored else None,
                "feasible": not errored and packs.at_target(m, target) and ckpt is not None,
                "checkpoint": ckpt, "path": r.path,
                "config": {k: v for k, v in item.items() if k not in (CONST_KEY, packs.PROPOSALS)},
                "architecture": arch,
                "stop_reason": _stop_reason(m, errored, (stop_reasons or {}).get(tune_id), ended),
                "rounds": int(m.get("rounds", 1) or 1),
                # a trial cut before its first round ended reports no counts: unknown, not 0
                # of 0 (a cut mix6 trial's entry was published as "0/0" seeds reached)
                **{k: None if m.get(k) is None else int(m[k])
                   for k in ("seeds_trained", "seeds_reached")}})
    return rows


def _stop_reason(m: dict[str, Any], errored: bool, driver_reason: str | None,
                 ended: str) -> str:
    """Why a trial ended: its own last report, else the driver's stopper, else the search's
    end (its deadline, or the user)."""
    if errored:
        return "error"
    return m.get("stop_reason") or driver_reason or ended


def _architecture(config: dict[str, Any]) -> str:
    from arithsweep.search.trials.configs import build_trial

    try:
        return build_trial(config).model_cfg.summary()
    except Exception:
        return "invalid config"


def architecture_rates(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per architecture (and format): trials, seeds that reached the target out of seeds
    trained, and the smallest size; the success rate is what reproducing it costs."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r["errored"] or r["invalid_config"] or not r.get("seeds_trained"):
            continue
        fmt = {k: v for k, v in r["config"].items() if k.startswith("format.")}
        key = (r["architecture"], r["params"], tuple(sorted(fmt.items())))
        a = out.setdefault(key, {"architecture": r["architecture"], "params": r["params"],
                                 "trials": 0, "seeds_trained": 0, "seeds_reached": 0})
        a["trials"] += 1
        a["seeds_trained"] += r["seeds_trained"]
        a["seeds_reached"] += r["seeds_reached"]
    return sorted(out.values(), key=lambda a: (a["params"], a["architecture"]))


def close_unreported(rows: list[dict], optuna_url: str, name: str, mlflow_uri: str,
                     experiment_id: str) -> None:
    """Driver side: trials the search deadline cut off are not always told to the searcher by
    Tune (never before their first report, and under load not even after one), and a pack
    search may hold proposals asked but never assigned to a trial: once the fit is over no
    Optuna trial can still be running, so fail every one still RUNNING, and close the MLflow
    runs of those that were training."""
    import optuna

    study = optuna.load_study(study_name=name, storage=optuna_url)
    by_number = {r["config"].get(packs.TRIAL_NUMBER): r["trial_id"] for r in rows
                 if not r["errored"]}
    # an interrupted trial stays unfinished in Tune and restarts on resume: it must find its
    # Optuna trial still running
    restarts = {r["config"].get(packs.TRIAL_NUMBER) for r in rows
                if r["stop_reason"] == INTERRUPTED}
    silent = set()
    for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
        if t.number in restarts:
            continue
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        if t.number in by_number:
            silent.add(by_number[t.number])
    if not silent:
        return
    client = tracking.mlflow_client(mlflow_uri)
    runs = tracking.mlflow_trial_runs(mlflow_uri, experiment_id, name)
    for trial_id in silent & set(runs):
        if client.get_run(runs[trial_id]).info.status == "RUNNING":
            client.set_terminated(runs[trial_id], "KILLED")


def retire_waiting(study_name: str, storage_url: str) -> int:
    """At the end of a search: proposals still queued (shrink moves, start points never run)
    become FAIL with a note, so the finished study shows none WAITING forever. Returns how
    many."""
    import optuna

    study = optuna.load_study(study_name=study_name, storage=storage_url)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    for t in waiting:
        study._storage.set_trial_system_attr(t._trial_id, "arithsweep.note",
                                             "queued, not run: the search ended first")
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    return len(waiting)


def summarise(s: Any, results: Any, experiment_id: str, state: Any,
               near_miss: float) -> SearchSummary:
    """Search `s`'s summary (driver._Search) once its fit is over: every proposal's row, the
    last verifications, Optuna told of every proposal, the best, the frontier plot, the near
    misses this run's deadline cut. `state`: its run_settings.DriverState."""
    from arithsweep.search.propose import incumbent, verdicts
    from arithsweep.search.report.plots import frontier, plot_params_vs_em
    from arithsweep.search.run_settings import ended_because
    from arithsweep.search.trials.replay import cut_near_misses

    opts, name, sdir, target, mlflow_uri = s.opts, s.name, s.sdir, s.target, s.mlflow_uri
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
    close_unreported(rows, s.optuna_url, name, mlflow_uri, experiment_id)
    verified = []
    for trial_id, item in state.verified.items():
        item = {**item, "mlflow_run_id": runs.get(trial_id)}
        tracking.mlflow_verified(mlflow_uri, item)
        verified.append(item)
    verified.sort(key=lambda v: (not v.get("qualifies"), v.get("params") or 0))
    plot = plot_params_vs_em(rows, target, sdir / "params_vs_em.png",
                             title=f"{name}: {s.task_name}, target {target:g}")
    return SearchSummary(
        name=name, dir=str(sdir), task=s.task_name, target=target, n_trials=len(rows),
        n_feasible=len(feasible), n_errored=sum(r["errored"] for r in rows),
        best=_best(verified, feasible), frontier=frontier(rows), verified=verified, plot=plot,
        mlflow_uri=mlflow_uri, mlflow_experiment_id=experiment_id,
        study_storage=s.optuna_url, study_name=name, skipped=state.skipped,
        incumbent=state.incumbent, trained_above_incumbent=sorted(state.trained_above),
        architectures=architecture_rates(rows), trials=rows,
        # this run's cuts only: an earlier run's were replayed (or named) by then
        cut_near_misses=cut_near_misses([r for r in rows if r["tune_trial_id"]
                                         not in state.ended_trials], target, near_miss,
                                        state.incumbent),
        cpu_hours=round(sum(cpu_seconds(r, opts.cpus_per_trial) for r in results) / 3600, 4),
        n_tune_trials=len({r["tune_trial_id"] for r in rows}),
        largest_pack=max((r["pack_size"] for r in rows), default=1))


def cpu_seconds(result: Any, per_trial: float) -> float:
    """CPU-seconds of one Tune trial: each stretch between its rows times the CPUs the row was
    trained on (a trial running alone may have been lent more: search.trials.cores)."""
    total = float((result.metrics or {}).get("time_total_s") or 0.0)
    df = getattr(result, "metrics_dataframe", None)
    if df is None or "cpus" not in df or "time_total_s" not in df:
        return per_trial * total
    spent, last, cpus = 0.0, 0.0, float(per_trial)
    for t, c in zip(df["time_total_s"], df["cpus"], strict=True):
        cpus = float(c) if c == c and c else cpus  # a row without it (NaN): as before
        if t == t:
            spent, last = spent + max(0.0, float(t) - last) * cpus, max(last, float(t))
    return spent + max(0.0, total - last) * cpus


def _best(verified: list[dict], feasible: list[dict]) -> dict | None:
    """The smallest trial that passed verification, else the smallest feasible one."""
    ok = [v for v in verified if v.get("qualifies")]
    b = ok[0] if ok else ({**feasible[0], "train_em": feasible[0]["best_em"]}
                          if feasible else None)
    return None if b is None else {
        "params": b["params"], "exact_match": b["train_em"], "trial_id": b["trial_id"],
        "entry_id": b.get("entry_id"), "verified_em": b.get("exact_match") if ok else None,
        "checkpoint": b["checkpoint"]}
