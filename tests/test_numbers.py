"""One reading of numbers (`arithsweep.core.numbers`) for every source of a config: `--set`,
YAML and JSON files, recipes' list fields (phases, curriculum) and a checkpoint's config.json.
A value means the same in each, and a bad one names its field and value."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from arithsweep.core.config import ModelConfig, TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.numbers import coerce_field, read_number
from arithsweep.core.overrides import build_configs, parse_sets

ENTRY = Path(__file__).parent.parent / "leaderboard" / "checkpoints" / "add2-216-52b633c5"


@pytest.mark.parametrize(("value", "kind", "want"), [
    ("1e-3", float, 1e-3), ("1.0e-3", float, 1e-3), (" 5e-3 ", float, 5e-3), (3, float, 3),
    ("2e3", int, 2000), (2e3, int, 2000), (4.0, int, 4), ("2_000", int, 2000), (7, int, 7),
    ("12345678901234567890", int, 12345678901234567890), ("-2", int, -2), (".5", float, 0.5),
])
def test_numbers_read_the_same_however_they_are_spelled(value, kind, want):
    got = read_number(value, kind, "train config: x")
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(("value", "kind", "why"), [
    ("fast", float, "x='fast': not a number"), ("", float, "not a number"),
    ("nan", float, "x=nan: must be a finite"), ("-inf", float, "x=-inf: must be a finite"),
    (float("inf"), float, "must be a finite"), ("1e400", float, "must be a finite"),
    ("1.5", int, "x=1.5: must be a whole number"), (1.5, int, "must be a whole number"),
    (True, int, "x=True: not a number"), ([1], float, r"x=\[1\]: not a number"),
    ({"a": 1}, float, "not a number"), (None, float, "x: no value given: expected a number"),
    ("none", int, "expected a whole number$"),
])
def test_bad_numbers_name_the_field_and_the_value(value, kind, why):
    with pytest.raises(ConfigError, match=why):
        read_number(value, kind, "x")


def test_fields_are_read_by_their_annotation():
    assert coerce_field("model config", "d_head", None, "int | None") is None
    assert coerce_field("model config", "d_head", "4", "int | None") == 4
    with pytest.raises(ConfigError, match="d_head='none': not a number: expected a whole "
                                          "number or null"):
        coerce_field("model config", "d_head", "none", "int | None")
    # text, bool and list fields are their dataclass's to check
    assert coerce_field("model config", "pos", "1e3", "str") == "1e3"
    assert coerce_field("model config", "final_norm", "yes", "bool") == "yes"
    assert coerce_field("train config", "phases", ["x"], "list | None") == ["x"]


def test_an_empty_or_listed_value_for_a_number_names_its_field():
    """`--set lr=` and `--set lr=[1]` used to fail in a comparison naming no field."""
    for raw in ("lr=", "lr=[1]", "lr={a: 1}", "steps=true"):
        field = raw.split("=")[0]
        with pytest.raises(ConfigError, match=f"train config: {field}"):
            build_configs("add3", None, None, parse_sets([raw]))


def test_yaml_json_and_set_read_the_same_numbers(tmp_path):
    """JSON reads 2e3 as 2000.0 and YAML as the text '2e3': both are 2000 steps, as --set is."""
    y, j = tmp_path / "c.yaml", tmp_path / "c.json"
    y.write_text("task: add3\nmodel: {d_head: 4.0}\ntrain: {lr: 1e-3, steps: 2e3}\n")
    j.write_text('{"task": "add3", "model": {"d_head": 4.0}, "train": {"lr": 1e-3, '
                 '"steps": 2e3}}')
    got = [build_configs(None, None, path, {}) for path in (y, j)]
    got.append(build_configs("add3", None, None,
                             parse_sets(["lr=1e-3", "steps=2e3", "d_head=4.0"])))
    for _, m, t in got:
        assert (t.lr, t.steps, m.d_head) == (1e-3, 2000, 4)
        assert isinstance(t.steps, int) and isinstance(m.d_head, int)


def test_numbers_inside_phases_and_curriculum_are_read_the_same(tmp_path):
    cfg = tmp_path / "recipe.yaml"
    cfg.write_text("task: add3\ntrain:\n  phases: [{steps: 1e3, lr: 3e-3, min_lr_ratio: 1e-1}]\n"
                   "  curriculum: [[2e3, 1], [4e3, 2]]\n")
    _, _, t = build_configs(None, None, cfg, {})
    assert t.phases[0]["steps"] == 1000 and t.phases[0]["lr"] == 3e-3
    assert t.phases[0]["min_lr_ratio"] == 0.1 and t.curriculum == [[2000, 1], [4000, 2]]
    with pytest.raises(ConfigError, match="phases=.*a phase's lr must be a number > 0"):
        TrainConfig.from_dict({"phases": [{"steps": 10, "lr": "nan"}]})
    with pytest.raises(ConfigError, match="curriculum=.*whole numbers"):
        TrainConfig.from_dict({"curriculum": [[2.5, 1]]})


def test_a_checkpoint_config_reads_numbers_the_same_way(tmp_path):
    """A hand-edited config.json (`"lr": "1e-3"`, `"d_model": 4.0`) loads; a word is one
    CheckpointError line naming the field."""
    from arithsweep.core.errors import CheckpointError
    from arithsweep.core.model.checkpoint import load_checkpoint

    ck = tmp_path / "ck"
    shutil.copytree(ENTRY, ck)
    doc = json.loads((ck / "config.json").read_text())
    doc["train"]["lr"], doc["model"]["d_model"] = "1e-3", 4.0
    (ck / "config.json").write_text(json.dumps(doc))
    loaded = load_checkpoint(ck)
    assert loaded.train_cfg.lr == 1e-3 and loaded.model_cfg.d_model == 4
    doc["model"]["d_model"] = "four"
    (ck / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="d_model='four': not a number"):
        load_checkpoint(ck)


def test_the_cli_names_the_field_of_an_empty_number():
    out = subprocess.run([sys.executable, "-m", "arithsweep", "params", "--task", "add3",
                          "--set", "lr="], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: train config: lr: no value given: expected a number"]
    assert ModelConfig.from_dict({"vocab_size": 12, "n_ctx": 11, "d_model": "8"}).d_model == 8


def test_config_files_and_space_files_share_one_yaml_reading(tmp_path):
    """A value written the same way in a config file and in a space file is the same number:
    both go through `core.yaml_loader` (config files used plain safe_load before, so `1e-3`
    arrived there as text and only the field coercion saved it; lists were left as text)."""
    from arithsweep.core.yaml_loader import load_yaml
    from arithsweep.search.space.file import parse_space_file

    assert load_yaml("lr: 1e-3\nxs: [5e-3, 2E+2]\n") == {"lr": 1e-3, "xs": [5e-3, 200.0]}
    space = parse_space_file("model: {}\ntrain:\n  lr: {float: [1e-3, 3e-2], log: true}\n"
                             "format: pad\n", tmp_path / "s.yaml")
    assert [p.low for p in space.params if (p.section, p.field) == ("train", "lr")] == [1e-3]
    assert parse_sets(["lr=1e-3"]) == {"lr": 1e-3}


def test_a_repeated_key_in_a_config_file_is_refused_with_its_line(tmp_path):
    """A second `lr:` used to win silently; now it is the same one-line error a space file
    gives, naming the key and where it is."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: add3\ntrain:\n  lr: 0.01\n  steps: 100\n  lr: 0.02\n")
    with pytest.raises(ConfigError, match=r"c.yaml: cannot parse \(invalid YAML at line 5, "
                                          r"column 3: duplicate key 'lr'\)"):
        build_configs(None, None, cfg, {})


def test_no_module_reads_yaml_but_the_shared_loader():
    import ast

    root = Path(__file__).parent.parent / "arithsweep"
    readers = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "yaml" and node.attr in ("load", "safe_load",
                                                                   "full_load", "unsafe_load")):
                readers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert len(readers) == 1 and readers[0].startswith("core/yaml_loader.py:"), readers
