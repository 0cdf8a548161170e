"""One reading of numbers and config files wherever a config comes from (issue: `lr: 1e-3` in
YAML is a string to PyYAML, and a misspelled section used to be ignored)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from arithsweep.core.config import ModelConfig, TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.overrides import build_configs, parse_sets


def test_numbers_in_text_are_read_as_numbers_everywhere(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: add3\nmodel:\n  rope_base: 1e4\ntrain:\n  lr: 1e-3\n  steps: 2e3\n")
    _, m, t = build_configs(None, None, cfg, {})
    assert (t.lr, t.steps, m.rope_base) == (1e-3, 2000, 1e4) and isinstance(t.steps, int)
    _, _, t = build_configs(None, None, cfg, parse_sets(["lr=3e-3", "warmup=1e2"]))
    assert (t.lr, t.warmup) == (3e-3, 100)


@pytest.mark.parametrize(("d", "why"), [
    ({"lr": "nan"}, "lr='nan'|lr=nan: must be a finite"), ({"lr": "inf"}, "lr=inf"),
    ({"lr": "fast"}, "lr='fast': not a number"), ({"steps": "1.5"}, "steps=1.5: must be a whole"),
    ({"lr": float("inf")}, "lr=inf: must be a finite"),
])
def test_bad_numbers_name_their_field(d, why):
    with pytest.raises(ConfigError, match=why):
        TrainConfig.from_dict(d)
    with pytest.raises(ConfigError, match="d_model"):
        ModelConfig.from_dict({"vocab_size": 12, "n_ctx": 11, "d_model": "wide"})


def test_cli_reads_set_and_yaml_numbers_and_refuses_a_misspelled_section(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: add3\nmodle:\n  d_model: 8\n")
    out = subprocess.run([sys.executable, "-m", "arithsweep", "params", "--config", str(bad)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: config " + str(bad) + ": unknown section(s) 'modle': expected task, format, "
        "model, train"]
    out = subprocess.run([sys.executable, "-m", "arithsweep", "params", "--task", "add3",
                          "--set", "lr=1e-3", "--set", "rope_base=1e3", "--set", "pos=rope",
                          "--set", "d_head=4", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([sys.executable, "-m", "arithsweep", "params", "--task", "add3",
                          "--set", "lr=nan"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "lr=nan" in out.stderr and "Traceback" not in out.stderr
