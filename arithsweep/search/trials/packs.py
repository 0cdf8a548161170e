"""Packs: one Ray Tune trial that trains several Optuna proposals of one model shape at once.

With `--proposals-per-trial P > 1` the searcher asks Optuna for up to P proposals that share a
`core.training.packing.pack_key` (same model, same shared training settings; only per-member
fields such as lr, warmup, weight decay or seeds differ) and hands them to Tune as ONE trial
whose config carries the list under `PROPOSALS`. The trainable trains them together with
`train_population` and reports each proposal's numbers under `p<j>/<metric>` keys; the driver
(searcher, MLflow, live view, verification, results) splits them back into one record per
proposal. A trial config without `PROPOSALS` is a single proposal, exactly as before packs.

This module only names things and splits configs and results; it imports neither Ray nor
torch at import time. Not run directly:

    from arithsweep.search.trials.packs import proposals_of
    proposals_of({"proposals": [{"train.lr": 0.01}, {"train.lr": 0.02}], "arithsweep": {}})
"""

from __future__ import annotations

import re
from typing import Any

from arithsweep.search.trials.configs import CONST_KEY

PROPOSALS = "proposals"  # Tune config key: the pack's proposal configs (flat, with TRIAL_NUMBER)
TRIAL_NUMBER = "trial_number"  # a proposal's Optuna trial number (also the seed block index)
_PREFIX = re.compile(r"^p(\d+)/")


def is_pack(config: dict[str, Any] | None) -> bool:
    return bool((config or {}).get(PROPOSALS))


def proposals_of(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Each proposal of a Tune trial config as a config of its own (the constants included);
    a single-proposal config is returned as it is."""
    items = config.get(PROPOSALS)
    if not items:
        return [config]
    const = config.get(CONST_KEY)
    return [{**p, CONST_KEY: const} if const is not None else dict(p) for p in items]


def proposal_ids(trial_id: str, config: dict[str, Any] | None) -> list[str]:
    """The record id of each proposal: the Tune trial id for a single proposal (so ids stay
    what they were before packs), `<trial id>.p<j>` inside a pack."""
    if not is_pack(config):
        return [trial_id]
    return [f"{trial_id}.p{j}" for j in range(len(config[PROPOSALS]))]


def key(j: int, name: str) -> str:
    """The result key of proposal j's metric `name` in a pack's Tune report."""
    return f"p{j}/{name}"


def proposal_result(result: dict[str, Any] | None, j: int, pack: bool = True) -> dict[str, Any]:
    """Proposal j's view of one Tune result: the shared keys (params, invalid_config, ...)
    overlaid with its own `p<j>/` keys, which win; other proposals' keys are dropped."""
    result = result or {}
    if not pack:
        return dict(result)
    out = {k: v for k, v in result.items() if not _PREFIX.match(k)}
    prefix = f"p{j}/"
    out.update({k[len(prefix):]: v for k, v in result.items() if k.startswith(prefix)})
    return out


def at_target(m: dict[str, Any], target: float) -> bool:
    """Did a proposal's result `m` reach the target? Its held-out best exact match at the
    target, or its own stop rule said so: on a small task checked on every problem the whole
    check decides (core.evaluation.confirm.FullCheck), and the held-out sliver may sit below
    the target (mul2's start shape: 97.6% held-out, every problem checked >= 99%)."""
    return (float(m.get("best_em", 0.0) or 0.0) >= target
            or m.get("stop_reason") == "reached target")


def reported(result: dict[str, Any], j: int) -> bool:
    """Did this pack report carry an evaluation of proposal j (it was still training)?"""
    return key(j, "step") in result


class PackKeyer:
    """A proposal's pack key (`core.training.packing.pack_key` plus the task format), or
    None when its config is invalid; picklable (Tune saves it with the searcher)."""

    def __init__(self, const: dict[str, Any]) -> None:
        self.const = dict(const)

    def __call__(self, config: dict[str, Any]) -> tuple | None:
        from arithsweep.core.errors import ConfigError
        from arithsweep.core.training.packing import pack_key
        from arithsweep.search.trials.configs import build_trial

        try:
            setup = build_trial({**config, CONST_KEY: self.const})
        except (ConfigError, TypeError, ValueError, KeyError):
            return None
        return pack_key(setup.model_cfg, setup.train_cfg), tuple(sorted(vars(
            setup.task.fmt).items()))


def per_member_param(name: str) -> bool:
    """May this sampled key differ between the proposals of one pack?"""
    from arithsweep.core.training.packing import PER_MEMBER_FIELDS

    return name.startswith("train.") and name[len("train."):] in PER_MEMBER_FIELDS
