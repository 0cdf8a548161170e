"""The Ray Tune function trainable: one search trial = one packed training run of K seeds.

Runs inside a Ray worker. It turns the flat trial config that OptunaSearch sampled
({"model.d_model": 8, "train.lr": 0.004, ...}) plus the search's constants (under the
"arithsweep" key of the Tuner's param_space) into a Task, ModelConfig and TrainConfig, trains
with `arithsweep.core.train.train`, and reports every evaluation to Tune with `tune.report`; a
checkpoint (the best seed, safetensors + config.json) is attached only when the best exact
match improved, so the trial's one kept checkpoint is always its best model.

Workers never open the leaderboard or MLflow: all bookkeeping happens on the driver
(`arithsweep.search.callbacks`). Three driver-side helpers live here because they read what
this trainable writes: `describe_trial` (a trial's MLflow params), `trial_rows` (the
ResultGrid as plain dicts) and `close_unreported` (trials the deadline cut off).
Not run by hand; `arithsweep.search.driver.run_search` passes `run_trial` to the Tuner. To build one
trial's configs outside Ray:

    python -c "from arithsweep.search.trainable import build_trial; print(build_trial({...}))"
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from ray import tune

from arithsweep.core.errors import ConfigError

CONST_KEY = "arithsweep"  # param_space key holding the search's constants (task, target, …)


@dataclass
class TrialSetup:
    task: Any  # arithsweep.core.tasks.Task
    model_cfg: Any  # arithsweep.core.model.ModelConfig
    train_cfg: Any  # arithsweep.core.config.TrainConfig
    params: int


def trial_sections(config: dict[str, Any]) -> tuple[dict, dict, dict, dict]:
    """Split a trial config into (model, train, format, constants) plain dicts."""
    from arithsweep.search.spaces import config_from_tune

    nested = config_from_tune({k: v for k, v in config.items() if k != CONST_KEY})
    return (dict(nested["model"]), dict(nested["train"]), dict(nested["format"]),
            dict(config.get(CONST_KEY, {})))


def build_trial(config: dict[str, Any]) -> TrialSetup:
    """Build and validate the trial's task and configs; ConfigError if the sample is invalid.

    The search's constants override the sampled train config where the search must decide:
    the early-stop target (the search's target, or train_target above it), the device (from
    the trial's GPU share), the per-trial step / time budgets when the user gave them, and the
    seeds (distinct per Optuna trial unless the space fixes train.seed).
    """
    from arithsweep.core.config import TrainConfig
    from arithsweep.core.model import ModelConfig, count_params
    from arithsweep.core.tasks import Format, get_task

    model, train, fmt, const = trial_sections(config)
    task = get_task(const["task"], Format(**fmt))
    model_cfg = ModelConfig.from_dict({**model, "vocab_size": task.vocab_size,
                                       "n_ctx": task.n_ctx})
    train = {**train, "target": float(const.get("train_target") or const["target"])}
    if const.get("device") and "device" not in train:
        train["device"] = const["device"]
    for key in ("steps", "time_budget"):
        if const.get(key):
            train[key] = const[key]
    if "seed" not in train:  # seeds seed+1000n .. seed+1000n+K-1 for Optuna trial n
        train["seed"] = int(const.get("seed", 0)) + 1000 * int(config.get("trial_number", 0))
    train_cfg = TrainConfig.from_dict(train)
    return TrialSetup(task, model_cfg, train_cfg, count_params(model_cfg))


def _metrics(point: Any, result: Any, best_em: float) -> dict[str, Any]:
    """One Tune result row; lists become em_seed0.. / loss_seed0.. (Tune wants scalars)."""
    live = [x for x in point.loss if not math.isnan(x)]
    row: dict[str, Any] = {
        "best_em": float(best_em),  # running best of the trial: ASHA and Optuna use this
        "em": float(point.best_em),  # best seed at this evaluation
        "loss": float(min(live)) if live else float("nan"),
        "params": int(result.params),
        "step": int(point.step),
        "examples": int(point.examples),
        "elapsed": float(point.elapsed),
        "lr": float(point.lr),
        "failed_seeds": int(sum(bool(f) for f in result.failed)),
    }
    for i, em in enumerate(point.exact_match):
        row[f"em_seed{i}"] = float(em)
    for i, loss in enumerate(point.loss):
        row[f"loss_seed{i}"] = float(loss)
    return row


def run_trial(config: dict[str, Any]) -> None:
    """The Tune trainable. Reports after every evaluation; returns when training ends."""
    const = config.get(CONST_KEY, {})
    cpus = float(const.get("cpus_per_trial", 1) or 1)
    import torch

    # One trial must not spread over the cores its neighbours were promised.
    torch.set_num_threads(max(1, int(cpus)))
    _maybe_fail(config, const)

    try:
        setup = build_trial(config)
    except (ConfigError, TypeError, ValueError) as exc:
        # An invalid sampled combination (e.g. n_heads not dividing d_model): an infeasible
        # trial, reported once, not a crash, so Optuna learns to avoid it.
        params = _params_if_possible(config)
        tune.report({"best_em": 0.0, "em": 0.0, "params": params, "step": 0, "examples": 0,
                     "elapsed": 0.0, "invalid_config": 1, "error": str(exc)[:500]})
        return

    from arithsweep.core.train import train

    previous = tune.get_checkpoint()
    # train() cannot resume an optimiser mid-run (save_best keeps only the best member's
    # weights), so a restored trial retrains from scratch; it keeps its earlier best so that
    # it only checkpoints again when it beats it.
    state = {"best": _checkpoint_em(previous) if previous is not None else -1.0}

    def on_eval(point: Any, result: Any) -> bool | None:
        best = max(float(result.best_em), 0.0)
        row = _metrics(point, result, max(best, state["best"]))
        if best > state["best"]:
            state["best"] = best
            with tempfile.TemporaryDirectory(prefix="arithsweep-ckpt-") as tmp:
                result.save_best(os.path.join(tmp, "best"))
                # tune.report copies the directory into the trial's storage before returning
                tune.report(row, checkpoint=tune.Checkpoint.from_directory(tmp))
        else:
            tune.report(row)
        return None

    result = train(setup.task, setup.model_cfg, setup.train_cfg, on_eval=on_eval)
    if not result.history:  # no evaluation happened (cannot with eval at the last step)
        tune.report({"best_em": 0.0, "em": 0.0, "params": int(result.params), "step": 0,
                     "examples": 0, "elapsed": float(result.wall_time)})


def _checkpoint_em(ckpt: tune.Checkpoint) -> float:
    """The exact match stored in a restored trial checkpoint's config.json (-1 if unreadable)."""
    import json

    with ckpt.as_directory() as d:
        try:
            with open(os.path.join(d, "best", "config.json")) as f:
                return float(json.load(f)["metrics"]["eval_exact_match"])
        except (OSError, ValueError, KeyError, TypeError):
            return -1.0


def _params_if_possible(config: dict[str, Any]) -> int:
    """Unique params of the sampled model if the model part alone is valid, else 0."""
    try:
        from arithsweep.core.model import ModelConfig, count_params
        from arithsweep.core.tasks import Format, get_task

        model, _, fmt, const = trial_sections(config)
        task = get_task(const["task"], Format(**fmt))
        return int(count_params(ModelConfig.from_dict(
            {**model, "vocab_size": task.vocab_size, "n_ctx": task.n_ctx})))
    except Exception:
        return 0


def _maybe_fail(config: dict[str, Any], const: dict[str, Any]) -> None:
    """Fault injection for tests: `fail_when` = {"model.d_model": 12} raises in matching trials.

    Lets the test suite prove that a crashing trial is recorded as failed without ending the
    search; set only through SearchOptions.fail_when, never by a search space.
    """
    cond = const.get("fail_when")
    if cond and all(config.get(k) == v for k, v in cond.items()):
        raise RuntimeError(f"injected failure for {cond}")


def describe_trial(config: dict[str, Any]) -> dict[str, str]:
    """MLflow params of a trial (driver side): the full resolved model.*, train.* and format.*
    configs (defaults included) plus task, target, space and unique params; if the sample is
    invalid, its raw sampled keys instead."""
    const = dict(config.get(CONST_KEY, {}))
    out = {k: str(const.get(k)) for k in ("task", "target", "space", "search")}
    try:
        setup = build_trial(config)
    except Exception:
        return {**out, **{k: str(v) for k, v in config.items() if k != CONST_KEY}}
    out["format"] = setup.task.fmt.name
    out["params"] = str(setup.params)
    for prefix, d in (("model", setup.model_cfg.to_dict()), ("train", setup.train_cfg.to_dict()),
                      ("format", vars(setup.task.fmt))):
        out.update({f"{prefix}.{k}": str(v)[:6000] for k, v in d.items()})
    return out


def trial_rows(results: Any, target: float) -> list[dict[str, Any]]:
    """Driver side: what each trial reported, read back from Tune's ResultGrid as plain dicts
    (the last result carries the trial's running best_em; the kept checkpoint is its best)."""
    rows = []
    for r in results:
        m, errored = r.metrics or {}, r.error is not None
        best_em = float(m.get("best_em", 0.0) or 0.0)
        ckpt = os.path.join(r.checkpoint.path, "best") if r.checkpoint is not None else None
        rows.append({
            # a trial that died before its first report has no trial_id: use its directory
            "trial_id": m.get("trial_id") or os.path.basename(r.path).removeprefix("trial_"),
            "params": int(m.get("params", 0) or 0), "best_em": best_em, "step": m.get("step"),
            "errored": errored, "invalid_config": bool(m.get("invalid_config")),
            "error": str(r.error).strip().splitlines()[-1][:300] if errored else None,
            "feasible": not errored and best_em >= target and ckpt is not None,
            "checkpoint": ckpt, "path": r.path,
            "config": {k: v for k, v in (r.config or {}).items() if k != CONST_KEY}})
    return rows


def close_unreported(rows: list[dict], optuna_url: str, name: str, mlflow_uri: str,
                     experiment_id: str) -> None:
    """Driver side: trials the search deadline cut off are not always told to the searcher by
    Tune (never before their first report, and under load not even after one): fail every
    Optuna trial of this run still RUNNING once the fit is over, and close its MLflow run."""
    import optuna

    from arithsweep.search import callbacks as cb

    ours = {r["trial_id"] for r in rows if not r["errored"]}
    if not ours:
        return
    study = optuna.load_study(study_name=name, storage=optuna_url)
    silent = set()
    for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
        if t.user_attrs.get("tune_trial_id") in ours:
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            silent.add(t.user_attrs["tune_trial_id"])
    if not silent:
        return
    client = cb.mlflow_client(mlflow_uri)
    runs = cb.mlflow_trial_runs(mlflow_uri, experiment_id, name)
    for trial_id in silent & set(runs):
        if client.get_run(runs[trial_id]).info.status == "RUNNING":
            client.set_terminated(runs[trial_id], "KILLED")
