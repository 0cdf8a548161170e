"""The check of `TrainConfig.path`: a frontier recipe's phases, validated and filled in.

A path is an ordered list of phases; each phase is a mapping of the `TrainConfig` fields that
differ in that phase from the config's top level, plus four words of its own:

    name        what the phase is called in logs, folders and tables (default phase<i>)
    moments     restart (fresh AdamW moments and Grokfast average: what a new `train
                --init-from <out>/resume` does) | keep (carried over from the phase before)
    select      0 = every member continues from its own last state; k >= 1 = the pack is
                re-formed from the k members with the best held-out exact match, each
                continued as copies of its best weights with new data streams
    perturb_lr  with select: lr factors, one per group of copies (PBT's explore); every
                factor gets seeds / len(perturb_lr) members

Every other field of the top level is every phase's, except `cull`: its steps are the first
phase's, and a later phase culls only with a `cull` of its own.

Kept apart from train_config.py so that the dataclass reads as its fields; torch-free like it.

    python -c "from arithsweep.core.config import TrainConfig; \\
        print(TrainConfig(path=[{}, {'steps': 100, 'lr': 1e-3}]).path)"
"""

from __future__ import annotations

from typing import Any

from arithsweep.core.errors import ConfigError
from arithsweep.core.numbers import read_number

PHASE_WORDS = ("name", "moments", "select", "perturb_lr")
MOMENTS = ("restart", "keep")
# what one pack shares for the whole path: its size and device, the stopping target, the
# finishers (after the path), where states go, and where it starts
FIXED_FIELDS = ("seeds", "init_from", "init_moments", "path", "device", "layout", "compile",
                "cuda_graph", "micro_batch", "target", "near_miss_round", "time_budget",
                "checkpoint_every", "checkpoint_seconds")


def _is_fixed(key: str) -> bool:
    return key in FIXED_FIELDS or key.startswith("finish_")


def check_path(value: Any, cfg: Any) -> list[dict[str, Any]]:
    """The phases of `value`, each with its words filled in; ConfigError naming the phase
    and the reason. `cfg` is the TrainConfig that holds the path (its top level is every
    phase's base)."""
    def bad(i: int | None, why: str) -> ConfigError:
        where = "path" if i is None else f"path phase {i}"
        return ConfigError(f"train config: {where}: {why}")

    if not isinstance(value, (list, tuple)) or not value:
        raise bad(None, "must be a non-empty list of phases, e.g. [{name: cosine}, "
                        "{name: grokfast, steps: 100000, lr: 1.0e-3}]")
    base = {k: v for k, v in cfg.to_dict().items() if k != "path"}
    out, names = [], set()
    for i, ph in enumerate(value):
        if not isinstance(ph, dict):
            raise bad(i, f"must be a mapping of train fields (got {ph!r})")
        fixed = sorted(k for k in ph if _is_fixed(k))
        if fixed:
            raise bad(i, f"{fixed[0]} is the same for the whole path: set it at the top level")
        p = {"name": f"phase{i}", "moments": "restart", "select": 0, "perturb_lr": None, **ph}
        name = p["name"]
        if not isinstance(name, str) or not name.strip() or "/" in name or name in names:
            raise bad(i, f"name={name!r} must be a distinct word without '/'")
        names.add(name)
        if p["moments"] not in MOMENTS:
            raise bad(i, f"moments={p['moments']!r} must be restart or keep")
        k = p["select"]
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= cfg.seeds:
            raise bad(i, f"select={k!r} must be a whole number in 0..seeds ({cfg.seeds})")
        if k and i == 0:
            raise bad(i, "the first phase has nothing to select from")
        if k and p["moments"] == "keep":
            raise bad(i, "select continues copies of the best weights, whose moments are "
                         "not kept: use moments: restart")
        p["perturb_lr"] = _factors(p["perturb_lr"], k, cfg.seeds, lambda why, i=i: bad(i, why))
        overrides = {key: v for key, v in p.items() if key not in PHASE_WORDS}
        own = {**base, "cull": None} if i else base  # as path.phase_configs builds it
        try:  # the phase's own config must be valid on its own
            type(cfg).from_dict({**own, **overrides, "path": None})
        except ConfigError as e:
            raise bad(i, str(e).removeprefix("train config: ")) from None
        out.append(p)
    return out


def _factors(value: Any, select: int, seeds: int, bad) -> list[float] | None:
    if value is None:
        return None
    if not select:
        raise bad("perturb_lr needs select (it explores around the selected members)")
    why = f"perturb_lr={value!r} must be a list of lr factors > 0"
    if not isinstance(value, (list, tuple)) or not value:
        raise bad(why)
    try:  # YAML's 1e-3 is a string: numbers read one way for every source
        factors = [float(read_number(f, float, "perturb_lr")) for f in value]
    except ConfigError:
        raise bad(why) from None
    if not all(f > 0 for f in factors):
        raise bad(why)
    if seeds % len(factors):
        raise bad(f"perturb_lr has {len(factors)} factors: they must divide seeds ({seeds})")
    return factors


def phase_fields(phase: dict[str, Any]) -> dict[str, Any]:
    """The train fields a phase sets (its words removed)."""
    return {k: v for k, v in phase.items() if k not in PHASE_WORDS}
