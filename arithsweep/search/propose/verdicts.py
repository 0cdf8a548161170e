"""Optuna's side of a verdict: the exact-match constraint written on a told trial, and the
proposals held back until the driver has verified them (`tell_verified`).

A proposal whose trial reached the target is not told to Optuna when its trial ends: it waits
in the search's `run_settings` state until verification (from its weights alone, on problems
training never saw) says whether it qualifies, so Optuna's feasible set is the verified one.
The searcher (`arithsweep.search.propose.searcher`) calls `tell_verified` on each suggestion and the
driver once more at the end. Not run directly.
"""

from __future__ import annotations

import logging

import optuna

from arithsweep.search import run_settings

log = logging.getLogger(__name__)

CONSTRAINT = "exact_match"  # Optuna constraint name: target - best_em, feasible when <= 0
# Optuna's older list form of constraints; optuna-dashboard (0.21) reads only this one, so
# without it the dashboard's best-value line counts infeasible trials as the best
LIST_CONSTRAINTS = "constraints"


def constrain(ot_trial: optuna.Trial, violation: float) -> None:
    """Write the constraint in both forms: named for Optuna, a one-item list for
    optuna-dashboard's feasible/infeasible history and best line. Optuna reads both as
    constraints of equal value, so feasibility and TPE's ranking are unchanged."""
    ot_trial.set_constraint(CONSTRAINT, violation)
    ot_trial.storage.set_trial_system_attr(ot_trial._trial_id, LIST_CONSTRAINTS,
                                           [float(violation)])


def tell_verified(name: str, target: float, final: bool = False) -> int:
    """Tell Optuna each held-back proposal (the searcher's `_await_verification`) whose
    verdict exists: feasible when it qualified, else infeasible by as much as verification
    found it short of the target. `final` (the search is over): one that was never verified
    is told infeasible too, marked so. Returns how many were told."""
    state = run_settings.state_of(name)
    if state is None:
        return 0
    told = 0
    for pid, (study, ot_trial, val, violation) in list(state.awaiting.items()):
        item = state.verified.get(pid)
        if item is None and not final:
            continue
        del state.awaiting[pid]
        try:
            if item is None:
                verdict, violation = "not verified", max(violation, 1e-9)
            elif item.get("qualifies"):
                verdict = "verified"
            else:
                verdict = "rejected by verification"
                violation = max(target - float(item.get("exact_match") or 0.0), 1e-9)
            if item is not None and item.get("exact_match") is not None:
                ot_trial.set_user_attr("verified_em", float(item["exact_match"]))
            ot_trial.set_user_attr("verification", verdict)
            constrain(ot_trial, violation)
            study.tell(ot_trial, val)
            told += 1
        except Exception as exc:  # a storage hiccup must not end the search
            log.warning("could not tell verified proposal %s: %s", pid, exc)
    return told
