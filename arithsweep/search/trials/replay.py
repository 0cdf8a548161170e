"""Near misses the search deadline cut off: named when a search ends, trained again first by
`arithsweep search --resume NAME`, from the same seeds.

When `--time-budget` runs out, Tune stops every trial still training and marks it TERMINATED,
so resuming the experiment would never run it again. Yet a tiny model at 98% when the clock ran
out is often the search's best lead: the 51-p add3 adder was one (cut at 98.1%, then 100% of
all 10^6 problems once trained to the end of its own schedule). A proposal is a *cut near miss*
when the deadline stopped it, it is below the target by at most the search's `near_miss`, and
it is smaller than the verified incumbent (else the bound would skip it anyway).

A replay is a new Optuna trial with the cut proposal's params and the user attributes `seeds_of`
= the cut trial's number, which the trial turns into the cut trial's seed block
(`configs.SEEDS_OF`), and `resume_from` = the cut trial's last checkpoint folder, whose training
state it continues from mid-run (`state.RESUME_FROM`): its own state, or where it was cut
inside a pack, its members' part of the pack's state with its own counters
(`TrialState.counters`). The replay trains alone and gets the near-miss rounds and the polish
like any proposal. Driver side only:

    from arithsweep.search.trials.replay import cut_near_misses
    cut_near_misses(summary["trials"], target=0.99, near_miss=0.25, incumbent=57)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arithsweep.search.run_settings import DEADLINE
from arithsweep.search.trials.configs import RESUME_FROM, SEEDS_OF, seeds_trial

# (a trial the user's Ctrl-C stopped is "search interrupted": Tune keeps it unfinished and
# the resumed experiment restarts it with its own config, seeds included)
REPLAY_OF = "replay_of"  # Optuna user attribute: the trial number a replay trains again


def cut_near_misses(rows: list[dict[str, Any]], target: float, near_miss: float,
                    incumbent: int | None) -> list[dict[str, Any]]:
    """The proposals among `rows` (results.trial_rows, or a summary.json's "trials") that the
    deadline cut within `near_miss` of the target and below the incumbent, best first; each
    as {trial_id, params, best_em, trial_number, seeds_of}."""
    out = []
    for r in rows:
        config = r.get("config") or {}
        number = config.get("trial_number")
        params = int(r.get("params") or 0)
        best = float(r.get("best_em") or 0.0)
        if (r.get("stop_reason") != DEADLINE or r.get("errored") or r.get("feasible")
                or number is None or params <= 0 or best < target - near_miss
                or (incumbent is not None and params >= incumbent)):
            continue
        ckpt = r.get("checkpoint")  # <checkpoint>/best, or <checkpoint>/p<j>/best in a pack
        folder = (Path(ckpt).parents[0 if int(r.get("pack_size") or 1) == 1 else 1]
                  if ckpt else None)
        out.append({"trial_id": r["trial_id"], "params": params, "best_em": best,
                    "trial_number": int(number), SEEDS_OF: seeds_trial(config),
                    RESUME_FROM: str(folder) if folder else None})
    return sorted(out, key=lambda c: (-c["best_em"], c["params"]))


def requeue(study_name: str, storage_url: str, cut: list[dict[str, Any]]) -> list[str]:
    """Enqueue each cut near miss's Optuna params as a new trial that trains its seeds, unless
    an earlier resume already did; returns the trial ids enqueued now. Enqueued trials come
    before the sampler's own proposals, in the order given."""
    import optuna

    study = optuna.load_study(study_name=study_name, storage=storage_url)
    trials = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    replayed = {t.user_attrs.get(REPLAY_OF) for t in trials}
    done = []
    for c in cut:
        original = by_number.get(c["trial_number"])
        if original is None or not original.params or c["trial_number"] in replayed:
            continue
        attrs = {REPLAY_OF: c["trial_number"], SEEDS_OF: c[SEEDS_OF]}
        if c.get(RESUME_FROM):
            attrs[RESUME_FROM] = c[RESUME_FROM]
        study.enqueue_trial(dict(original.params), user_attrs=attrs)
        done.append(str(c["trial_id"]))
    return done


def prepare_resume(opts: Any, exp_dir: Path, optuna_url: str, target: float, near: float,
                   before: dict, state: Any) -> list[str]:
    """Before a resumed fit: note the Tune trials the last run ended for good (the limiter must
    not count them live) and keep the stop reasons its summary gave them (their last results
    carry none: the deadline was the driver's, not theirs); then enqueue the near misses it cut
    first. Returns their trial ids. `before`: the last summary.json."""
    from ray import tune

    if not opts.resume or not tune.Tuner.can_restore(str(exp_dir)):
        return []
    state.ended_trials = {t.trial_id for t in tune.ExperimentAnalysis(str(exp_dir)).trials
                          if t.status in ("TERMINATED", "ERROR")}
    rows = before.get("trials") or []
    for r in rows:
        if r.get("tune_trial_id") in state.ended_trials and r.get("stop_reason"):
            state.stop_reasons.setdefault(r["tune_trial_id"], r["stop_reason"])
    # only trials Tune ended: one it restarts itself (a killed or interrupted run, labelled
    # "search deadline" by arithsweep before 'search interrupted' existed) must not run twice
    ended = [r for r in rows if r.get("tune_trial_id") in state.ended_trials]
    return requeue(opts.resume, optuna_url, cut_near_misses(ended, target, near, state.incumbent))
