"""From a sampled trial config to validated configs, a size and a seed block; driver or worker.

Ray hands a trial the flat config OptunaSearch sampled ({"model.d_model": 8, "train.lr": 0.004,
...}) plus the search's constants under the "arithsweep" key of the Tuner's param_space. This
module turns that into a Task, ModelConfig and TrainConfig (`build_trial`), tells the searcher
how many unique parameters a proposal has before anything trains (`ProposalSizer`, picklable)
and lists a trial's MLflow params (`describe_trial`).

    python -c "from arithsweep.search.trials.configs import build_trial; \\
        print(build_trial({'model.d_model': 8, 'arithsweep': {'task': 'add2', 'target': 0.9}}))"
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from arithsweep.core.errors import ConfigError
from arithsweep.search.options import SearchOptions

CONST_KEY = "arithsweep"  # param_space key holding the search's constants (task, target, …)
# Every Optuna trial n trains seeds from its own block [seed + n*SEED_BLOCK, +SEED_BLOCK), so
# no two trials share a seed however many seeds and rounds each one trains.
SEED_BLOCK = 1 << 20
TRIALS_PER_SEED = 1 << 16  # Optuna trials with seeds of their own per --seed (then they wrap)
SEED_SCHEME = 2  # written into a new search's constants: see seed_block
# A replay of a proposal the search deadline cut (arithsweep.search.trials.replay) trains the seed
# block of the trial it replays, named by this config key, instead of its own
SEEDS_OF = "seeds_of"
# ... and continues the cut trial's training state from this checkpoint folder (state)
RESUME_FROM = "resume_from"
# Constants key: the space's seed rule ([[min_params, seeds], ...], space.fields.seeds_for)
SEED_RULE = "seed_rule"
STEPS_RULE = "steps_rule"  # ... and its steps rule, the same way
STEPS_DIGITS = "steps_digits"  # ... for operands this long (scaled to the task's: space.fields)


@dataclass
class TrialSetup:
    task: Any  # arithsweep.core.data.tasks.Task
    model_cfg: Any  # arithsweep.core.config.ModelConfig
    train_cfg: Any  # arithsweep.core.config.TrainConfig
    params: int


def trial_sections(config: dict[str, Any]) -> tuple[dict, dict, dict, dict]:
    """Split a trial config into (model, train, format, constants) plain dicts."""
    from arithsweep.search.space.spaces import config_from_tune

    nested = config_from_tune({k: v for k, v in config.items() if k != CONST_KEY})
    return (dict(nested["model"]), dict(nested["train"]), dict(nested["format"]),
            dict(config.get(CONST_KEY, {})))


def seeds_trial(config: dict[str, Any]) -> int:
    """The Optuna trial whose seed block a proposal trains: its own, or for a replay
    (SEEDS_OF) the trial it replays."""
    return int(config.get(SEEDS_OF, config.get("trial_number", 0)))


def seed_block(const: dict[str, Any], trial_number: int) -> int:
    """The first training seed of Optuna trial `trial_number` in a search with `const`.
    Each --seed owns TRIALS_PER_SEED blocks, so searches with different --seed share no
    training seed. Searches made before SEED_SCHEME 2 (no "seed_scheme" in their constants)
    keep their old blocks, seed + n*SEED_BLOCK, on resume: there --seed 0, 1 and 2 started
    from seeds 0-7, 1-8 and 2-9, so one lucky seed (5) decided all three add3 searches."""
    seed, n = int(const.get("seed", SearchOptions.seed)), int(trial_number)
    if int(const.get("seed_scheme", 1)) < SEED_SCHEME:
        return seed + SEED_BLOCK * n
    return (seed * TRIALS_PER_SEED + n % TRIALS_PER_SEED) * SEED_BLOCK


_BUILT: dict[str, tuple[Any, Any]] = {}  # _task_and_model's, by _sample_key
_BUILT_MAX = 256


def _sample_key(model: dict[str, Any], fmt: dict[str, Any]) -> str:
    """A sample's model and format sections as one hashable key (their values may be lists)."""
    return repr((sorted(model.items()), sorted(fmt.items())))


def _task_and_model(task_name: str, model: dict[str, Any], fmt: dict[str, Any]):
    """(Task, ModelConfig) of a sample's sections: what the task fixes (places, vocabulary,
    context) filled in. ConfigError (or TypeError) if they do not make a valid model.
    Built once per sample in a process (the driver sizes a proposal, describes it to MLflow
    and summarises it); each caller gets its own copy of the ModelConfig."""
    key = f"{task_name} {_sample_key(model, fmt)}"
    if key not in _BUILT:
        from arithsweep.core.data.formats import Format, fill_places
        from arithsweep.core.data.tasks import get_task
        from arithsweep.core.model.model import ModelConfig

        task = get_task(task_name, Format(**fmt))
        cfg = ModelConfig.from_dict({**fill_places(task, dict(model)),
                                     "vocab_size": task.vocab_size, "n_ctx": task.n_ctx})
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        _BUILT[key] = task, cfg
    task, cfg = _BUILT[key]
    return task, copy.deepcopy(cfg)


def build_trial(config: dict[str, Any]) -> TrialSetup:
    """Build and validate the trial's task and configs; ConfigError if the sample is invalid.

    The search's constants override the sampled train config where the search must decide:
    the early-stop target (the search's target, or train_target above it), the device (from
    the trial's GPU share), the per-trial step / time budgets when the user gave them, the
    seeds (a block of its own per Optuna trial unless the space fixes train.seed) and, when
    the space gives a seed rule, how many: by the proposal's unique parameters, known here
    before anything trains.
    """
    from arithsweep.core.config import TrainConfig
    from arithsweep.core.model.model import count_params
    from arithsweep.search.space.fields import seeds_for, steps_for_digits

    model, train, fmt, const = trial_sections(config)
    task, model_cfg = _task_and_model(const["task"], model, fmt)
    params = count_params(model_cfg)
    if const.get(SEED_RULE):  # tiny models are a seed lottery: smaller ones buy more tickets
        train["seeds"] = seeds_for(tuple(tuple(r) for r in const[SEED_RULE]), params)
    if const.get(STEPS_RULE):  # ... and smaller ones take longer to grok
        steps = seeds_for(tuple(tuple(r) for r in const[STEPS_RULE]), params)
        train["steps"] = steps_for_digits(steps, task.n_digits, const.get(STEPS_DIGITS))
    train = {**train, "target": float(const.get("train_target") or const["target"])}
    if const.get("device") and "device" not in train:
        train["device"] = const["device"]
    for key in ("steps", "time_budget"):
        if const.get(key):
            train[key] = const[key]
    if "seed" not in train:
        train["seed"] = seed_block(const, seeds_trial(config))
    train_cfg = TrainConfig.from_dict(train)
    rounds = 1 + int(const.get("extra_rounds", SearchOptions.extra_rounds) or 0)
    if train_cfg.seeds * rounds * 2 > SEED_BLOCK:
        raise ConfigError(f"train.seeds={train_cfg.seeds}: too many seeds for one trial")
    return TrialSetup(task, model_cfg, train_cfg, params)


class ProposalSizer:
    """Unique parameters of a proposal's model, from its config alone (0 if invalid).

    The searcher calls it on every proposal before anything trains, so that proposals that
    cannot beat the incumbent are never trained. Picklable: Tune saves it with the searcher.
    """

    def __init__(self, const: dict[str, Any]) -> None:
        self.const = dict(const)
        self._cache: dict[str, int] = {}

    def __call__(self, config: dict[str, Any]) -> int:
        from arithsweep.core.model.model import count_params

        model, _, fmt, _ = trial_sections({k: v for k, v in config.items() if k != CONST_KEY})
        key = _sample_key(model, fmt)
        if key not in self._cache:
            try:
                self._cache[key] = int(count_params(
                    _task_and_model(self.const["task"], model, fmt)[1]))
            except (ConfigError, TypeError, ValueError):
                self._cache[key] = 0
        return self._cache[key]

    def __getstate__(self) -> dict[str, Any]:
        return {"const": self.const, "_cache": {}}


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
    out["architecture"] = setup.model_cfg.summary()
    for prefix, d in (("model", setup.model_cfg.to_dict()), ("train", setup.train_cfg.to_dict()),
                      ("format", vars(setup.task.fmt))):
        out.update({f"{prefix}.{k}": str(v)[:6000] for k, v in d.items()})
    return out


def params_if_possible(config: dict[str, Any]) -> int:
    """Unique params of the sampled model if the model part alone is valid, else 0."""
    const = dict(config.get(CONST_KEY, {}))
    return ProposalSizer(const)(config) if const.get("task") else 0
