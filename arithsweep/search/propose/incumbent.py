"""The incumbent: verify a trial on the driver as soon as it reaches the target.

`VerifyCallback` (a Tune callback, pickled with the experiment: keep it in this importable
module) hands every trial that finished at or above the target to the search's verifier (the
leaderboard's, passed in by the CLI) while the search is still running. A verified model
becomes the incumbent: from then on the searcher does not train proposals of its size or
larger, and `IncumbentStopper` ends running trials that are no smaller. So the incumbent is
always a model verified from its weights alone, never a held-out estimate. Verified items are
also written to `verified.json` in the search directory, so a resumed search starts with its
incumbent.

A search may also start from the board (`arithsweep search --from-entry ID_OR_PATH`):
`entry_incumbent` turns a leaderboard entry (verified when it was recorded) or a checkpoint
folder (verified here first, through the same verifier) into the search's first verified
item, so the bound skips everything not smaller from the first proposal on, and the
searcher descends from the entry's point (`shrink.map_entry`). A new search without
`--from-entry` or `--fresh` starts so from the board's smallest entry of its task at its
target (`board_incumbent`), or from the space's start point when the board holds none or that
entry cannot be used. Not run directly.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ray import tune

from arithsweep.core.errors import ArithsweepError, ConfigError
from arithsweep.core.evaluation.stats import percent
from arithsweep.core.model.checkpoint import add_meta
from arithsweep.search import run_settings

log = logging.getLogger(__name__)

VERIFIED_FILE = "verified.json"
ENTRY_ID = "entry:{}"  # a starting entry's id among the verified items (never a Tune trial's)


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
        from arithsweep.search.trials import packs

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


def entry_incumbent(ref: str, task: str | None, target: float, find_entry, verifier,
                    what: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(verified item, the entry's `section.field` values) of a search started with
    `--from-entry REF`; ConfigError (one line, starting with `what`, by default
    "--from-entry REF") when REF cannot be its incumbent.

    `find_entry(REF)` (the leaderboard's, given by the CLI; see driver.EntryFinder) gives a
    board entry, trusted as verified when it was recorded, or for a checkpoint folder only
    {"checkpoint", "chain"}: that one is verified here first through `verifier` (which
    records it on the board when it qualifies), so an unverified model never bounds a search.
    `task` None takes the entry's; another task than the entry's is an error."""
    what = what or f"--from-entry {ref}"
    if find_entry is None:
        raise ConfigError(f"{what}: this search was given no leaderboard to find entries in")
    found = dict(find_entry(ref))
    if found.get("entry_id") is None:  # a checkpoint folder: never trusted unverified
        found = _verify_folder(what, found, task, target, verifier)
    name = f"entry {found['entry_id']}"
    if task is not None and found.get("task") != task:
        raise ConfigError(f"{what}: {name}'s task is {found.get('task')}, and this "
                          f"search's is {task}")
    em = found.get("exact_match")
    if not isinstance(em, (int, float)):
        raise ConfigError(f"{what}: {name} holds no verified exact match")
    if em < target:
        raise ConfigError(f"{what}: {name}'s verified exact match {percent(em)} is below this "
                          f"search's target {target:g}")
    item = {"trial_id": ENTRY_ID.format(found["entry_id"]), "params": int(found["params"]),
            "exact_match": float(em), "train_em": float(em), "qualifies": True,
            "entry_id": found["entry_id"], "checkpoint": found.get("checkpoint"),
            "from_entry": ref, "task": found["task"], "found_by": found.get("search_name"),
            **{k: found.get(k) for k in ("format", "seeds_reached", "seeds_trained", "chain")}}
    return item, _entry_values(found, what)


def board_incumbent(task: str, target: float, find_smallest
                    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """(verified item, the entry's values, None) of a new search that starts where the board
    stands: from `find_smallest(task, target)` (the leaderboard's, given by the CLI; see
    driver.BoardFinder), the board's smallest entry of the task at the target, as
    `--from-entry` would start from it; and (None, None, the line that says why) when the board
    holds none, cannot be read or its entry cannot be the incumbent, so the search starts from
    the space's start point (and says so) instead of failing."""
    try:
        found = find_smallest(task, target)
    except ArithsweepError as exc:
        return None, None, f"from the space's start point: the board was not read ({exc})"
    if found is None:
        return None, None, (f"from the space's start point: the board (its database and the "
                            f"entries.json beside it) holds no {task} entry at {target:g} or "
                            "above")
    what = f"the board's smallest {task} entry {found.get('entry_id')}"
    try:
        item, values = entry_incumbent(str(found.get("entry_id")), task, target,
                                       lambda _ref: found, None, what)
    except ConfigError as exc:
        why = str(exc).removeprefix(f"{what}: ")
        return None, None, f"from the space's start point, not {what} ({why})"
    return {**item, "board": True}, values, None


def _verify_folder(what: str, found: dict, task: str | None, target: float, verifier) -> dict:
    """A checkpoint folder as a board entry: loaded (its task checked before anything is
    measured), then verified and recorded through the search's verifier."""
    from arithsweep.core.model.checkpoint import load_checkpoint

    ck = load_checkpoint(found["checkpoint"])  # a broken folder: one CheckpointError line
    if task is not None and ck.task.name != task:
        raise ConfigError(f"{what}: the checkpoint's task is {ck.task.name}, and this "
                          f"search's is {task}")
    if verifier is None:
        raise ConfigError(f"{what}: a checkpoint folder is verified first, and this search "
                          f"has no verifier")
    item = verifier({"trial_id": None, "params": ck.params, "train_em": None,
                     "checkpoint": str(ck.path), "mlflow_run_id": None, "search_name": None,
                     "target": target})
    if not item.get("qualifies"):
        em = item.get("exact_match")
        why = item.get("error") or (f"verified exact match {percent(em)}" if em is not None
                                    else "not verified")
        raise ConfigError(f"{what}: not a verified incumbent at target {target:g} ({why})")
    return {**found, "entry_id": item.get("entry_id") or ck.sha256[:8], "task": ck.task.name,
            "format": ck.task.fmt.name, "params": ck.params, "exact_match": item["exact_match"],
            "model_config": ck.model_cfg.to_dict(),
            "train_config": ck.train_cfg.to_dict() if ck.train_cfg else {},
            **{k: ck.meta.get(k) for k in ("seeds_reached", "seeds_trained")}}


def _entry_values(found: dict[str, Any], what: str = "--from-entry") -> dict[str, Any]:
    """The entry's model, train and format fields as flat `section.field` keys, defaults
    filled in (an entry published before a field existed had that field's default)."""
    from arithsweep.core.config import LEGACY_TRAIN_DEFAULTS, ModelConfig, TrainConfig
    from arithsweep.core.data.tasks import get_task

    try:
        model = ModelConfig.from_dict(dict(found.get("model_config") or {})).to_dict()
        train = found.get("train_config") or {}
        train = TrainConfig.from_dict({**LEGACY_TRAIN_DEFAULTS, **train}).to_dict() if train \
            else {}
        train.pop("init_from", None)  # where its last round started: not a recipe choice
        fmt = vars(get_task(found["task"], found.get("format")).fmt)
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"{what}: entry {found.get('entry_id')}'s configs do not load in "
                          f"this arithsweep: {exc}") from None
    return {**{f"model.{k}": v for k, v in model.items()},
            **{f"train.{k}": v for k, v in train.items()},
            **{f"format.{k}": v for k, v in fmt.items()}}


def start_item(item: dict[str, Any], mapping: dict[str, Any], space: str) -> dict[str, Any]:
    """The starting entry's verified item with its point in the space (what the searcher's
    first shrink moves start from, see shrink.Descending) and the one line that says how it
    mapped ("note"; for a search that started from the board's smallest entry by itself,
    also how not to)."""
    found = f", found by search {item['found_by']}" if item.get("found_by") else ""
    board = item.get("board")
    where = (f"its point in space {space} is the same {mapping['params']}-p model"
             if mapping["params"] == item["params"] and not mapping["differs"] else
             f"its nearest point in space {space} has {mapping['params'] or 'no valid'} p")
    line = ((f"from the board's smallest {item['task']} entry {item['entry_id']} (" if board
             else f"from entry {item['entry_id']} ({item['task']}, ")
            + f"{item['params']} p, verified {percent(item['exact_match'])}{found}): the "
            f"incumbent from the start; {where}; "
            + (f"not mapped: {_few(mapping['unmapped'])}" if mapping["unmapped"] else
               "every searched key mapped")
            + (f"; the space differs: {_few(mapping['differs'])}" if mapping["differs"] else "")
            + ("; --fresh starts from the space's start point" if board else ""))
    return {**item, "point": mapping["point"], "unmapped": mapping["unmapped"],
            "differs": mapping["differs"], "note": line}


def _few(items: list[str], n: int = 6) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")
