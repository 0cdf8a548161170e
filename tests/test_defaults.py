"""Every default of the search and of training is written once, in its dataclass
(`SearchOptions` in search/options.py, `TrainConfig` and `ModelConfig` in core/), and read
everywhere else: what `arithsweep search --help` and `arithsweep train --help` show is the
dataclass's, `arithsweep search` with no options builds the dataclass's defaults, and no module
of the search or core wings writes one of those numbers again (as a `.get(field, number)`
fallback, a CLI option's literal default, or a module constant named after a field).

    python -m pytest -q tests/test_defaults.py
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import typer

from arithsweep.cli.app import app
from arithsweep.cli.search_cmds import parse_duration
from arithsweep.core.config import ModelConfig, TrainConfig
from arithsweep.core.errors import ArithsweepError
from arithsweep.search.options import GPU_PROPOSALS, SearchOptions

PKG = Path(__file__).resolve().parents[1] / "arithsweep"
# `arithsweep train`'s options -> the dataclass field each one sets
TRAIN_FIELDS = {"d_model": (ModelConfig, "d_model"), "layers": (ModelConfig, "n_layers"),
                "heads": (ModelConfig, "n_heads"), "d_ff": (ModelConfig, "d_ff"),
                "pos": (ModelConfig, "pos"), "seeds": (TrainConfig, "seeds"),
                "steps": (TrainConfig, "steps"), "lr": (TrainConfig, "lr"),
                "seed": (TrainConfig, "seed"), "target": (TrainConfig, "target"),
                "device": (TrainConfig, "device"), "layout": (TrainConfig, "layout")}
DURATIONS = {"time_budget": "time_budget", "trial_time": "trial_time_budget"}


def _fields(*classes) -> set[str]:
    return {f.name for c in classes for f in dataclasses.fields(c)}


def _params(command: str) -> dict:
    return {p.name: p for p in typer.main.get_command(app).commands[command].params}


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_search_command_shows_the_search_options_defaults():
    params, fields = _params("search"), _fields(SearchOptions)
    checked = []
    for name, p in params.items():
        if name in DURATIONS:  # a duration string; not given: the dataclass's seconds
            assert parse_duration(p.default, name) == getattr(SearchOptions, DURATIONS[name])
        elif name == "rounds":
            assert p.default == 1 + SearchOptions.extra_rounds
        elif name in fields:
            assert p.default == getattr(SearchOptions, name), name
        else:
            continue
        checked.append(name)
    assert {"trials", "cpus_per_trial", "n_verify", "patience", "seed", "space",
            "frontier", "trial_steps", "rounds", "time_budget"} <= set(checked)
    # what the driver or the dataclasses decide, said in the help from where it is defined
    assert f"default {_shown(TrainConfig.target)}" in params["target"].help
    assert f"{GPU_PROPOSALS} when each trial gets a whole GPU" in \
        params["proposals_per_trial"].help
    assert f"within {_shown(SearchOptions.near_miss)} of the target" in params["rounds"].help


def test_the_train_command_shows_the_config_defaults():
    """An option not given leaves the config file's value, else the dataclass's: its default
    is None, and its help shows the dataclass's."""
    params = _params("train")
    for name, (cls, field) in TRAIN_FIELDS.items():
        assert params[name].default is None, name
        assert f"default {_shown(getattr(cls, field))}" in params[name].help, name


def test_a_search_with_no_options_gets_the_dataclass_defaults(capsys, tmp_path, monkeypatch):
    """The CLI builds exactly `SearchOptions(task=...)` when nothing else is given."""
    from helpers import run  # tests/ is on sys.path (rootdir import mode)

    import arithsweep.search.driver as driver

    got = []

    def fake_run_search(opts, **_):
        got.append(opts)
        raise ArithsweepError("stopped before the search")

    monkeypatch.setattr(driver, "run_search", fake_run_search)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "search", "--task", "add3")
    assert code != 0 and "stopped before the search" in err
    assert dataclasses.replace(got[0], command=None) == SearchOptions(task="add3")


def _modules(*wings: str):
    for wing in wings:
        for path in sorted((PKG / wing).rglob("*.py")):
            yield path, ast.parse(path.read_text())


def test_no_search_or_core_module_writes_a_fallback_number_for_a_field():
    """`const.get("patience", 8)` would be a second home for --patience: a fallback reads the
    dataclass (`SearchOptions.patience`). The leaderboard wing cannot import the search wing,
    so it is not checked here."""
    fields = _fields(SearchOptions, TrainConfig, ModelConfig)
    bad = []
    for path, tree in _modules("search", "core", "cli"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "pop", "setdefault") and len(node.args) == 2):
                key, value = node.args
                if (isinstance(key, ast.Constant) and key.value in fields
                        and isinstance(value, ast.Constant) and value.value is not None):
                    bad.append(f"{path.relative_to(PKG)}:{node.lineno} {key.value}")
    assert not bad, bad


def test_no_module_constant_is_named_after_a_field():
    """A module constant PATIENCE beside SearchOptions.patience is two homes (or two meanings
    of one name)."""
    fields = _fields(SearchOptions, TrainConfig)
    bad = []
    for path, tree in _modules("search", "core", "cli"):
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            for t in targets:
                for name in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(name, ast.Name) and name.id.lower() in fields:
                        bad.append(f"{path.relative_to(PKG)}:{node.lineno} {name.id}")
    assert not bad, bad


@pytest.mark.parametrize("module,function", [("search_cmds.py", "search"),
                                             ("run_cmds.py", "train")])
def test_the_cli_writes_no_default_of_a_field(module, function):
    """Each option of these commands with a dataclass counterpart takes its default from the
    dataclass (or None: the config decides), never a literal; and none writes a number."""
    tree = ast.parse((PKG / "cli" / module).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    fields = _fields(SearchOptions) | set(TRAIN_FIELDS) | {"rounds", "trial_time"}
    args = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
    bad = []
    for arg, default in zip(args, fn.args.defaults):
        if not (isinstance(default, ast.Call) and default.args):
            continue
        first = default.args[0]
        if not isinstance(first, ast.Constant) or first.value is None or first.value is ...:
            continue
        number = isinstance(first.value, (int, float)) and not isinstance(first.value, bool)
        if number or arg.arg in fields:
            bad.append(f"--{arg.arg}: {first.value!r}")
    assert not bad, bad
