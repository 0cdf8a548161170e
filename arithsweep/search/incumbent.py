"""The incumbent: verify a trial on the driver as soon as it reaches the target.

`VerifyCallback` (a Tune callback, pickled with the experiment: keep it in this importable
module) hands every trial that finished at or above the target to the search's verifier (the
leaderboard's, passed in by the CLI) while the search is still running. A verified model
becomes the incumbent: from then on the searcher does not train proposals of its size or
larger, and `IncumbentStopper` ends running trials that are no smaller. So the incumbent is
always a model verified from its weights alone, never a held-out estimate. Verified items are
also written to `verified.json` in the search directory, so a resumed search starts with its
incumbent. Not run directly.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ray import tune

from arithsweep.core.model.checkpoint import add_meta
from arithsweep.search import run_settings

log = logging.getLogger(__name__)

VERIFIED_FILE = "verified.json"


def load_verified(sdir: Path) -> dict[str, dict]:
    try:
        return json.loads((sdir / VERIFIED_FILE).read_text())
    except (OSError, ValueError):
        return {}


def save_verified(sdir: Path, verified: dict[str, dict]) -> None:
    tmp = sdir / (VERIFIED_FILE + ".tmp")
    tmp.write_text(json.dumps(verified, indent=2, default=str))
    os.replace(tmp, sdir / VERIFIED_FILE)


def incumbent_of(verified: dict[str, dict]) -> int | None:
    sizes = [int(v["params"]) for v in verified.values() if v.get("qualifies")]
    return min(sizes) if sizes else None


def verify_candidate(name: str, sdir: Path, target: float, candidate: dict) -> dict | None:
    """Verify one candidate with the registered verifier; update the incumbent. None when
    the search has no verifier or the candidate was verified before."""
    s = run_settings.state_of(name)
    if s is None or s.verifier is None or candidate["trial_id"] in s.verified:
        return None
    seeds = {k: int(candidate[k]) for k in ("seeds_reached", "seeds_trained")
             if candidate.get(k) is not None}
    if not candidate.get("mlflow_run_id") and s.mlflow_runs.get(candidate["trial_id"]):
        candidate = {**candidate, "mlflow_run_id": s.mlflow_runs[candidate["trial_id"]]}
    try:
        if seeds:  # the trial's success rate, for the published "seeds reached" column
            add_meta(candidate["checkpoint"], **seeds)
        item = {**candidate, **s.verifier({**candidate, "search_name": name, "target": target})}
    except Exception as exc:  # a verifier failure fails this candidate, not the search
        log.warning("verifying %s failed: %s", candidate["trial_id"], exc)
        item = {**candidate, "qualifies": False, "exact_match": None, "error": str(exc)}
    s.verified[candidate["trial_id"]] = item
    s.incumbent = incumbent_of(s.verified)
    save_verified(sdir, s.verified)
    run_settings.emit(name, {"event": "verified", "trial_id": candidate["trial_id"],
                             "status": "verified" if item.get("qualifies") else "rejected",
                             "params": item.get("params"), "best_em": item.get("exact_match")})
    return item


class VerifyCallback(tune.Callback):
    """Verifies each proposal that completes at or above the target, on the driver (every
    proposal of a pack that reached it, each from its own best checkpoint)."""

    def __init__(self, name: str, sdir: str, target: float) -> None:
        self._name, self._sdir, self._target = name, sdir, float(target)

    def on_trial_complete(self, iteration, trials, trial, **info):
        from arithsweep.search import packs

        if trial.checkpoint is None:
            return
        config = trial.config or {}
        pack = packs.is_pack(config)
        for j, pid in enumerate(packs.proposal_ids(trial.trial_id, config)):
            last = packs.proposal_result(trial.last_result, j, pack)
            path = os.path.join(trial.checkpoint.path, f"p{j}" if pack else "", "best")
            if not packs.at_target(last, self._target) or (pack and not os.path.isdir(path)):
                continue
            verify_candidate(self._name, Path(self._sdir), self._target, {
                "trial_id": pid, "params": int(last.get("params", 0) or 0),
                "train_em": float(last.get("best_em")), "checkpoint": path,
                "seeds_reached": last.get("seeds_reached"),
                "seeds_trained": last.get("seeds_trained")})
