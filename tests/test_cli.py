"""The command line as a user meets it: help everywhere, one clear line for every mistake, the
fast paths free of torch/ray/mlflow, and the train -> ask -> verify -> leaderboard -> show ->
export round trip on real files."""

from __future__ import annotations

import json
import os

import pytest
from helpers import ROOT, no_heavy_imports, run  # tests/ is on sys.path (rootdir import mode)

COMMANDS = ["train", "ask", "params", "bench", "verify", "leaderboard", "show", "export",
            "search", "spaces", "ui"]


def test_help_and_leaderboard_do_not_import_torch_ray_or_mlflow(tmp_path):
    env = {**os.environ, "ARITHSWEEP_DB": str(tmp_path / "lb.db")}
    no_heavy_imports(["--help"], env)
    no_heavy_imports(["leaderboard"], env)
    no_heavy_imports(["leaderboard", "--json"], env)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_has_help(capsys, cmd):
    code, out, _ = run(capsys, cmd, "--help")
    assert code == 0 and "Usage" in out and "--" in out


@pytest.mark.parametrize("args,needle", [
    (["train", "--task", "add0"], "unknown task"),
    (["train", "--task", "div3"], "unknown task"),
    (["train", "--task", "add3", "--format", "sideways"], "sideways"),
    (["train", "--task", "add3", "--set", "activation=tanh"], "activation"),
    (["train", "--task", "add3", "--set", "colour=blue"], "unknown setting"),
    (["train", "--task", "add3", "--target", "1.5"], "target"),
    (["train"], "no task"),
    (["params", "--task", "add3", "--heads", "3"], "n_heads"),
    (["params", "--task", "add3", "--config", "/nonexistent.yaml"], "no such file"),
    (["ask", "/nonexistent/ckpt", "1+2"], "no such file"),
    (["verify", "/nonexistent/ckpt"], "no such file"),
    (["verify", "/nonexistent/ckpt", "--target", "0"], "target"),
    (["leaderboard", "--target", "2"], "target"),
    (["leaderboard", "--json", "--csv"], "one of"),
    (["show", "12345"], "no leaderboard entry"),
    (["show", "zz"], "neither an entry id"),
    (["export"], "choose one of"),
    (["search"], "--task is required"),
    (["search", "--task", "add3", "--space", "nope"], "nope"),
    (["search", "--task", "add3", "--time-budget", "soon"], "duration"),
    (["train", "--task", "add3", "--steps", "abc"], "--steps"),
    (["frobnicate"], "No such command"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, args, needle):
    monkeypatch.setenv("ARITHSWEEP_DB", str(tmp_path / "lb.db"))
    code, out, err = run(capsys, *args)
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "lb.db").exists() or needle != "target"


def test_params_reports_breakdown(capsys):
    code, out, _ = run(capsys, "params", "--task", "add10", "--d-model", "7", "--heads", "1",
                       "--d-ff", "14", "--set", "final_norm=false", "--json")
    res = json.loads(out)
    assert code == 0 and res["params"] == sum(r["params"] for r in res["breakdown"])
    v, n = res["vocab_size"], res["n_ctx"]  # our add10 vocabulary and context, not AdderBoard's
    assert res["params"] == v * 7 + n * 7 + 4 * 49 + 2 * 7 * 14 + 2 * 14


def test_train_ask_verify_leaderboard_show_export(capsys, tmp_path, monkeypatch, add2_trained):
    monkeypatch.setenv("ARITHSWEEP_DB", str(tmp_path / "lb.db"))
    # a real (short) CLI training run
    code, out, err = run(capsys, "train", "--task", "add1", "--steps", "60", "--seeds", "2",
                         "--d-model", "8", "--heads", "1", "--d-ff", "16",
                         "--out", tmp_path / "add1", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["steps"] <= 60 and len(res["seed_exact_match"]) == 2
    assert (tmp_path / "add1" / "model.safetensors").is_file()
    assert res["final_problems"] == "all 100 problems"

    _, ckpt = add2_trained
    code, out, _ = run(capsys, "ask", ckpt, "12+34", "99+99", "--json")
    res = json.loads(out)
    assert code == 0 and [r["expected"] for r in res["results"]] == [46, 198]
    assert res["correct"] == 2
    code, _, err = run(capsys, "ask", ckpt, "123+4")
    assert code == 2 and "error:" in err

    code, out, err = run(capsys, "verify", ckpt, "--record", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["qualifies"] and rep["n_problems"] == 10**4 and rep["entry_id"] == 1

    code, out, _ = run(capsys, "leaderboard", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 1 and rows[0]["n_problems"] == 10**4
    assert rows[0]["task"] == "add2" and rows[0]["params"] == rep["params"]
    code, out, _ = run(capsys, "leaderboard", "--markdown")
    assert "| add2 |" in out.replace("  ", " ")

    code, out, _ = run(capsys, "show", "1", "--json")
    row = json.loads(out)
    assert code == 0 and row["sha256"] == rep["sha256"] and "arithsweep train" in row["reproduce"]
    code, out, _ = run(capsys, "show", rep["sha256"][:10])
    assert code == 0 and "By longest carry chain" in out

    # AdderBoard checks 10-digit addition: an add2 entry is refused in one line, nothing written
    sub = tmp_path / "sub" / "add2_submission.py"
    code, out, err = run(capsys, "export", "1", "--adderboard", sub)
    assert code == 2 and "add10" in err and not sub.exists()
    md = tmp_path / "LEADERBOARD.md"
    code, _, _ = run(capsys, "export", "--markdown", md)
    assert code == 0 and "add2" in md.read_text()


def test_the_pos_option_lists_every_kind_of_position():
    import inspect

    from arithsweep.cli import run_cmds
    from arithsweep.core.config import POSITIONS

    line = next(ln for ln in inspect.getsource(run_cmds).splitlines() if '"--pos"' in ln)
    assert all(p in line for p in POSITIONS), line


def test_params_takes_the_config_file_as_the_anchors_comments_write_it(capsys):
    """Every anchor's comment says `arithsweep params recipes/anchors/FILE`: that works, and
    two different files are one clear line."""
    code, o, _ = run(capsys, "params", ROOT / "recipes/anchors/tbukic-36.yaml", "--json")
    assert code == 0 and json.loads(o)["params"] == 36
    code, o, e = run(capsys, "params", ROOT / "recipes/anchors/tbukic-36.yaml",
                     "-c", ROOT / "recipes/anchors/tbukic-41.yaml")
    assert code != 0 and "give one" in e and len(e.strip().splitlines()) == 1
