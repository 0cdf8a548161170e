"""Search spaces: the shipped YAML files sample valid configs through real Optuna studies, every
malformed file is one ConfigError naming file and key, and the Ray define-by-run path yields the
same nested config as `Space.suggest`."""

from __future__ import annotations

import dataclasses
import pickle
import textwrap
from pathlib import Path

import optuna
import pytest

from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.search.space.spaces import (
    SECTIONS,
    RayDefineByRun,
    Space,
    config_from_tune,
    list_spaces,
    load_space,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
SHIPPED = ("abacus", "adderboard", "microadder", "mul", "mul3", "quirke", "quirke6", "sort",
           "tbukic", "tiny")


def _write(tmp_path: Path, text: str, name: str = "myspace.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _samples(space: Space, n: int = 30, seed: int = 0) -> list[tuple[optuna.Trial, dict]]:
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed,
                                                                   n_startup_trials=10))
    out = []
    for i in range(n):
        trial = study.ask()
        cfg = space.suggest(trial)
        study.tell(trial, float(i % 7))  # any value: lets TPE leave its random start
        out.append((trial, cfg))
    return out


def _defaults(section: str) -> dict:
    from arithsweep.core.model.model import ModelConfig

    cls = {"model": ModelConfig, "train": TrainConfig}.get(section)
    if cls is None:
        return {}
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _actual(cfg: dict, key: str) -> object:
    """The value a config will have: sampled/fixed, else the dataclass default."""
    section, _, name = key.partition(".")
    return cfg[section].get(name, _defaults(section).get(name))


# --------------------------------------------------------------------------------------------
# shipped spaces


def test_shipped_spaces_are_listed() -> None:
    spaces = list_spaces()
    assert [s.name for s in spaces] == list(SHIPPED)
    for s in spaces:
        assert s.description and s.path.is_file() and s.searched
        assert len(s.dimensions) == len(s.params)
        assert all(isinstance(line, str) and line.startswith(p.name)
                   for line, p in zip(s.dimensions, s.params, strict=True))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_space_samples_valid_configs(name: str) -> None:
    from arithsweep.core.model.model import ModelConfig

    space = load_space(name)
    samples = _samples(space)
    valid = 0
    for trial, cfg in samples:
        assert set(cfg) == set(SECTIONS)
        TrainConfig(**cfg["train"])  # every sample is a valid TrainConfig
        model, sizes = dict(cfg["model"]), {"vocab_size": 12, "n_ctx": 11}
        if model.get("pos") == "digit_index":  # its places come from a task's layout
            from arithsweep.core.data.formats import fill_places
            from arithsweep.core.data.tasks import get_task

            task = get_task("add3", "pad,revans,revops,delim,zeros")
            model = fill_places(task, model)
            sizes = {"vocab_size": task.vocab_size, "n_ctx": task.n_ctx}
        try:
            ModelConfig(**sizes, **model)
            valid += 1
        except ConfigError:
            pass
        for p in space.params:
            sec = cfg[p.section]
            if p.kind == "fixed":
                assert sec[p.field] == p.value, p.name
                continue
            # a conditional key appears exactly when its condition holds (on the sampled value,
            # or the dataclass default when the referenced key was itself left out)
            expect = all(c.holds(_actual(cfg, c.key)) for c in p.when)
            assert (p.field in sec) == expect, (p.name, cfg)
            assert (p.name in trial.params) == expect
            if not expect:
                continue
            v = sec[p.field]
            if p.kind == "choice":
                assert v in p.choices
            else:
                assert p.low <= v <= p.high
        space.validate_sample(cfg)
    assert valid >= 0.8 * len(samples), f"{name}: only {valid}/{len(samples)} valid ModelConfigs"


def test_conditions_in_shipped_spaces() -> None:
    seen = {"act": 0, "noact": 0, "one head": 0, "two heads": 0}
    for _, cfg in _samples(load_space("tiny"), 40, seed=1):
        m = cfg["model"]
        assert ("activation" in m) == (m["d_ff"] > 0)
        assert m["n_heads"] == 1  # fixed: odd widths need one head
        assert ("norm_bias" in m) == (m["norm"] == "layer")
        seen["act" if "activation" in m else "noact"] += 1
        assert cfg["train"]["seeds"] == 8 and cfg["format"]["pad"] is True
    for _, cfg in _samples(load_space("adderboard"), 40, seed=2):
        m, t = cfg["model"], cfg["train"]
        assert ("tie_k" in m) == ("tie_v" in m) == (m["n_heads"] == 1)  # K, V from Q: 1 head
        assert ("rank_o" in m) == (m["tie_o"] is False)
        assert ("mlp_down" in m) == (m["d_ff"] % 2 == 0)  # turned pairs need an even width
        assert cfg["format"]["zero_delimiters"] is True and t["sampling"] == "values"
        seen["one head" if m["n_heads"] == 1 else "two heads"] += 1
    assert all(seen.values()), seen  # both branches exercised


def test_log_scales_and_number_parsing(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        train:
          lr: {float: [1e-4, 1], log: true}      # 1e-4 is a float here (plain YAML: a string)
          batch_size: {int: [1, 1024], log: true}
          warmup: {int: [0, 300], step: 100}
          weight_decay: {choice: [0, 0.1]}       # whole numbers become floats for float fields
        model:
          rope_base: {int: [10, 1000], log: true} # an int range for a float field is fine
          pos: rope
    """)
    space = load_space(str(path))
    study = optuna.create_study()
    lrs = []
    for _ in range(30):
        trial = study.ask()
        cfg = space.suggest(trial)
        lrs.append(cfg["train"]["lr"])
        assert cfg["train"]["warmup"] in (0, 100, 200, 300)
        assert cfg["train"]["weight_decay"] in (0.0, 0.1)
        assert isinstance(cfg["train"]["weight_decay"], float)
        assert isinstance(cfg["model"]["rope_base"], float)
        assert cfg["model"]["pos"] == "rope"
        d = trial.distributions
        assert d["train.lr"].log and d["train.batch_size"].log and d["model.rope_base"].log
        assert not d["train.warmup"].log and d["train.warmup"].step == 100
        study.tell(trial, 0.0)
    assert min(lrs) < 1e-2  # log-uniform: most mass at small values, unlike uniform [1e-4, 1]
    assert "train.lr ∈ [0.0001, 1] log" in space.dimensions


# --------------------------------------------------------------------------------------------
# errors: one ConfigError naming the file, the key and the reason


BAD = [
    ("unknown section", "optim:\n  lr: 0.1\n", ["optim", "unknown section"]),
    ("unknown field", "model:\n  d_modle: {choice: [4, 8]}\n", ["model.d_modle", "unknown"]),
    ("unknown train field", "train:\n  d_model: 4\n", ["train.d_model", "unknown"]),
    ("unknown format field", "format:\n  rev: true\n", ["format.rev", "unknown"]),
    ("task-owned field", "model:\n  vocab_size: 14\n", ["model.vocab_size", "task"]),
    ("task-owned n_ctx", "model:\n  n_ctx: {int: [8, 16]}\n", ["model.n_ctx", "task"]),
    ("bad kind", "model:\n  d_model: {range: [4, 8]}\n", ["model.d_model", "range"]),
    ("two kinds", "model:\n  d_model: {int: [4, 8], choice: [4]}\n", ["model.d_model", "one of"]),
    ("bad option", "model:\n  d_model: {choice: [4], step: 2}\n", ["model.d_model", "step"]),
    ("lo > hi int", "model:\n  d_model: {int: [8, 4]}\n", ["model.d_model", "lo > hi"]),
    ("lo > hi float", "train:\n  lr: {float: [0.1, 0.01]}\n", ["train.lr", "lo > hi"]),
    ("log lo 0", "train:\n  lr: {float: [0, 0.1], log: true}\n", ["train.lr", "log"]),
    ("log int lo 0", "train:\n  warmup: {int: [0, 100], log: true}\n", ["train.warmup", "log"]),
    ("log and step", "train:\n  warmup: {int: [1, 101], step: 10, log: true}\n",
     ["train.warmup", "step"]),
    ("step mismatch", "train:\n  warmup: {int: [0, 250], step: 100}\n", ["train.warmup", "step"]),
    ("empty choice", "model:\n  d_ff: {choice: []}\n", ["model.d_ff", "empty"]),
    ("duplicate choice", "model:\n  d_ff: {choice: [0, 8, 0]}\n", ["model.d_ff", "duplicate"]),
    ("bad range", "model:\n  d_ff: {int: [1, 2, 3]}\n", ["model.d_ff", "[lo, hi]"]),
    ("list value", "model:\n  d_ff: [0, 8]\n", ["model.d_ff", "choice"]),
    ("str for int", "model:\n  d_model: eight\n", ["model.d_model", "int"]),
    ("str choice for int", "model:\n  d_ff: {choice: [0, big]}\n", ["model.d_ff", "int"]),
    ("float range for int", "model:\n  d_ff: {float: [0, 8]}\n", ["model.d_ff", "int"]),
    ("float bounds for int", "model:\n  d_ff: {int: [0.5, 8]}\n", ["model.d_ff", "whole"]),
    ("int for bool", "model:\n  tie_kv: 1\n", ["model.tie_kv", "bool"]),
    ("null for int", "model:\n  d_ff: null\n", ["model.d_ff", "null"]),
    ("typo value", "model:\n  pos: {choice: [rope, rpe]}\n", ["model.pos", "rpe"]),
    ("int range for str", "model:\n  pos: {int: [1, 2]}\n", ["model.pos", "str"]),
    ("when unknown key", "model:\n  d_ff: {choice: [0, 8], when: {d_fff: 2}}\n",
     ["model.d_ff", "d_fff"]),
    ("when later key",
     "model:\n  activation: {choice: [relu, gelu], when: {d_ff: {gt: 0}}}\n"
     "  d_ff: {choice: [0, 8]}\n", ["model.activation", "earlier"]),
    ("when later section",
     "train:\n  lr: {float: [0.001, 0.01], when: {model.d_ff: 0}}\n"
     "model:\n  d_ff: {choice: [0, 8]}\n", ["train.lr", "model.d_ff"]),
    ("when itself", "model:\n  d_ff: {choice: [0, 8], when: {d_ff: 0}}\n",
     ["model.d_ff", "earlier"]),
    ("when bad op",
     "model:\n  d_ff: {choice: [0, 8]}\n  activation: {choice: [relu], when: {d_ff: {gte: 0}}}\n",
     ["model.activation", "gte"]),
    ("when bad value",
     "model:\n  pos: {choice: [rope, learned]}\n"
     "  rope_base: {float: [10, 100], when: {pos: rpe}}\n",
     ["model.rope_base", "rpe"]),
    ("when gt on str",
     "model:\n  pos: {choice: [rope, learned]}\n  d_ff: {choice: [0], when: {pos: {gt: 1}}}\n",
     ["model.d_ff", "numeric"]),
    ("when not a mapping", "model:\n  d_ff: {choice: [0, 8], when: d_model}\n",
     ["model.d_ff", "when"]),
    ("yaml syntax", "model:\n  d_model: {choice: [4, 8}\n", ["line 2", "YAML"]),
    ("duplicate key", "model:\n  d_ff: 8\n  d_ff: 16\n", ["line 3", "duplicate key"]),
    ("not a mapping", "- model\n", ["mapping"]),
    ("empty file", "", ["empty"]),
    ("section not a mapping", "model: 4\n", ["model", "mapping"]),
    ("bad name", "name: [a]\n", ["name", "string"]),
]


@pytest.mark.parametrize(("why", "text", "needles"), BAD, ids=[b[0] for b in BAD])
def test_malformed_space_is_one_clear_error(tmp_path: Path, why: str, text: str,
                                            needles: list[str]) -> None:
    path = _write(tmp_path, text, "broken_space.yaml")
    with pytest.raises(ConfigError) as err:
        load_space(str(path))
    msg = str(err.value)
    assert "broken_space.yaml" in msg, msg
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_missing_space_lists_shipped_names(tmp_path: Path) -> None:
    for missing in ("nosuchspace", str(tmp_path / "gone.yaml")):
        with pytest.raises(ConfigError) as err:
            load_space(missing)
        msg = str(err.value)
        assert Path(missing).name in msg and all(n in msg for n in SHIPPED), msg


def test_a_fixed_only_space_and_format_section(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: fixed
        model: {d_model: 8, d_head: null}
        format: {reverse_operands: true}
    """)
    space = load_space(path)  # a Path works too
    cfg = space.suggest(optuna.trial.FixedTrial({}))
    assert cfg == {"model": {"d_model": 8, "d_head": None}, "train": {},
                   "format": {"reverse_operands": True}}
    assert space.name == "fixed" and not space.searched


def test_format_string_section(tmp_path: Path) -> None:
    space = load_space(_write(tmp_path, 'format: "nopad,revops"\n'))
    assert space.suggest(optuna.trial.FixedTrial({}))["format"] == {
        "pad": False, "reverse_answer": True, "reverse_operands": True, "delimiters": True,
        "zero_delimiters": False}
    with pytest.raises(ConfigError, match=r"myspace\.yaml: format: .*'padd'"):
        load_space(_write(tmp_path, "format: padd,revans\n"))


def test_validate_sample() -> None:
    space = load_space("tiny")
    space.validate_sample({"model": {"d_model": 8}, "train": {"lr": 0.01}, "format": {}},
                          vocab_size=12, n_ctx=11)
    for bad in ({"train": {"lr": -1.0}}, {"model": {"d_model": "x"}}, {"optim": {}},
                {"train": {"lrr": 1.0}}, {"format": {"pad": False, "delimiters": False}}):
        with pytest.raises(ConfigError, match="tiny"):
            space.validate_sample(bad)
    with pytest.raises(ConfigError, match="n_heads"):
        space.validate_sample({"model": {"d_model": 6, "n_heads": 4}}, vocab_size=12, n_ctx=11)


# --------------------------------------------------------------------------------------------
# Ray Tune's OptunaSearch, define-by-run


class _Captor:
    """What OptunaSearch (Ray 2.60) wraps the optuna trial in: records every suggest_* result."""

    def __init__(self, trial: optuna.Trial) -> None:
        self.trial, self.captured = trial, {}

    def __getattr__(self, name: str):
        attr = getattr(self.trial, name)
        if not name.startswith("suggest_"):
            return attr

        def wrapper(pname, *args, **kwargs):
            self.captured[pname] = value = attr(pname, *args, **kwargs)
            return value

        return wrapper


def _unflatten(flat: dict) -> dict:  # ray._private.dict.unflatten_dict: splits on "/" only
    out: dict = {}
    for key, value in flat.items():
        *parents, last = key.split("/")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def _rayless_suggest(space: Space, trial: optuna.Trial) -> dict:
    captor = _Captor(trial)
    ret = space.ray_define_by_run()(captor)
    return _unflatten({**captor.captured, **ret} if ret else captor.captured)


@pytest.mark.parametrize("name", SHIPPED)
def test_ray_define_by_run_matches_suggest(name: str) -> None:
    space = load_space(name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(15):
        trial = study.ask()
        ray_config = _rayless_suggest(space, trial)
        expected = space.suggest(optuna.trial.FixedTrial(trial.params))
        got = config_from_tune(ray_config)
        assert got == expected
        for sec in SECTIONS:  # same types too (10 vs 10.0 compare equal)
            assert {k: type(v) for k, v in got[sec].items()} == \
                {k: type(v) for k, v in expected[sec].items()}
        study.tell(trial, 1.0)


def test_ray_define_by_run_coerces_int_ranges_on_float_fields(tmp_path: Path) -> None:
    space = load_space(_write(tmp_path, "model:\n  rope_base: {int: [10, 1000], log: true}\n"))
    trial = optuna.create_study().ask()
    cfg = config_from_tune(_rayless_suggest(space, trial))
    assert isinstance(cfg["model"]["rope_base"], float)
    assert isinstance(trial.params["model.rope_base"], int)  # captured int was overridden


def test_ray_define_by_run_is_picklable() -> None:
    # OptunaSearch.save pickles its __dict__ (including the space function) with plain pickle
    fn = load_space("adderboard").ray_define_by_run()
    again = pickle.loads(pickle.dumps(fn))
    trial = optuna.trial.FixedTrial({})
    with pytest.raises(ValueError):  # FixedTrial without the params: proves it really runs
        again(trial)


def test_config_from_tune_normalises() -> None:
    flat = {"model.d_model": 8, "train.lr": 0.01, "format.pad": True, "task": "add3"}
    assert config_from_tune(flat) == {"model": {"d_model": 8}, "train": {"lr": 0.01},
                                      "format": {"pad": True}, "task": "add3"}
    nested = {"model": {"d_model": 8}, "train.lr": 0.01}
    assert config_from_tune(nested) == {"model": {"d_model": 8}, "train": {"lr": 0.01},
                                        "format": {}}
    assert config_from_tune({}) == {"model": {}, "train": {}, "format": {}}


def test_real_optuna_search_config_matches_suggest(tmp_path: Path) -> None:
    """Ray's own OptunaSearch.suggest (no Ray cluster needed) gives the same config."""
    osearch = pytest.importorskip("ray.tune.search.optuna")
    space = load_space("adderboard")
    searcher = osearch.OptunaSearch(space=space.ray_define_by_run(), metric="params",
                                    mode="min", seed=7)
    for i in range(5):
        config = searcher.suggest(f"t{i}")
        params = searcher._ot_trials[f"t{i}"].params
        assert config_from_tune(config) == space.suggest(optuna.trial.FixedTrial(params))
        assert all("." in k for k in config)  # flat dotted keys, nothing unflattened
    searcher.save(str(tmp_path / "searcher.pkl"))  # resumable: the space pickles


@pytest.mark.parametrize("name, task", [("tiny", "add3"), ("adderboard", "add10"),
                                        ("sort", "sort3"), ("microadder", "add3"),
                                        ("microadder", "add10")])
def test_shipped_start_points_are_valid_models(name, task):
    """A space's start points are trained first to give the search an early incumbent: an
    invalid one would waste the search's first trial (n_heads must divide d_model, …)."""
    from arithsweep.search.space.spaces import load_space
    from arithsweep.search.trials.configs import ProposalSizer

    space = load_space(name)
    assert space.start, f"{name} ships no start point"
    sizer = ProposalSizer({"task": task})
    for point in space.start:
        assert sizer(space.ray_define_by_run()(_Fixed(point))) > 0


class _Fixed:
    """A define-by-run trial that returns a start point's values (the lowest otherwise)."""

    def __init__(self, point: dict) -> None:
        self.point = point

    def suggest_categorical(self, key, choices):
        return self.point.get(key, choices[0])

    def suggest_int(self, key, low, high, step=1, log=False):
        return self.point.get(key, low)

    def suggest_float(self, key, low, high, log=False):
        return self.point.get(key, low)


def test_default_space_follows_the_task():
    from arithsweep.search.space.spaces import default_space

    assert [default_space(t) for t in ("add2", "add3", "mul2", "mul3", "sort3", "sub3", "mix2",
                                       "add6", "add10", "ADD10")] == [
        "tiny", "microadder", "mul", "mul3", "sort", "quirke", "quirke", "microadder",
        "tbukic", "tbukic"]
    assert default_space("add9") == "microadder"
    assert default_space("add11") == "adderboard"
    assert [default_space(t) for t in ("sub4", "mix6", "mix18")] == ["quirke6"] * 3
    assert all(default_space(t) in SHIPPED for t in ("add3", "sort2", "sub3", "add10", "mul3",
                                                     "mix6"))


def test_list_fields_take_one_fixed_value(tmp_path: Path) -> None:
    """phases and curriculum are lists: a space fixes them (it cannot search a list), and a
    bad one is refused when the space loads, naming the field."""
    space = load_space(_write(tmp_path, "train:\n  phases: [{steps: 100, lr: 1.0e-3}]\n"
                                        "  curriculum: [[200, 2]]\n"))
    train = space.suggest(optuna.trial.FixedTrial({}))["train"]
    assert train["phases"] == [{"steps": 100, "lr": 1e-3}] and train["curriculum"] == [[200, 2]]
    with pytest.raises(ConfigError, match="train.phases"):
        load_space(_write(tmp_path, "train:\n  phases: [{steps: 0, lr: 1.0e-3}]\n"))
    with pytest.raises(ConfigError, match="a list is not a value"):
        load_space(_write(tmp_path, "model:\n  d_model: [3, 4]\n"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_start_point_names_the_model_it_is(name: str) -> None:
    """A start point that leaves a searched model key out gets it from Optuna, so the first
    proposal is not the shape its file describes (microadder's "57 p" started at 44 p when it
    named neither d_model nor norm_weight). Recipe keys may stay sampled."""
    from arithsweep.search.propose.shrink import _PointTrial

    space = load_space(name)
    searched = {p.name for p in space.searched if p.name.startswith("model.")}
    for point in space.start:
        walked = RayDefineByRun(space)(_PointTrial(point))
        assert sorted(k for k in walked if k in searched and k not in point) == [], point
