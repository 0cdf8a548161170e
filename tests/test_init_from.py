"""`TrainConfig.init_from` / `arithsweep train --init-from`: every seed starts from a checkpoint.

The add2 fixture's checkpoint answers every add2 problem. A run started from it at a tiny lr
answers them all at its first evaluation (a fresh start is at chance there), so the weights
really came from the checkpoint; another architecture or format is refused in one line before
training, and the saved model carries the weights it started from (`start/`, named relatively),
so it retrains from any copy of it: a published entry, a search trial's round whose temporary
start is gone.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import ADD2_MODEL
from helpers import run  # tests/ is on sys.path (rootdir import mode)

from arithsweep.core.errors import CheckpointError
from arithsweep.core.hashing import sha256_file
from arithsweep.core.model.checkpoint import keep_start, load_checkpoint
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.population import train

# a continuation that barely moves: its first evaluation shows where it started
CALM = {"steps": 20, "eval_every": 10, "lr": 1e-7, "warmup": 0, "weight_decay": 0.0,
        "seeds": 2, "early_stop": False, "eval_size": 1024}


def _configs(fmt=None, **extra):
    return build_configs("add2", fmt, None, {**ADD2_MODEL, **CALM, **extra})


def test_every_seed_starts_from_the_checkpoint(add2_trained):
    _, path = add2_trained
    task, m, t = _configs(init_from=str(path))
    first = train(task, m, t).history[0].exact_match  # after 10 steps at lr 1e-7
    assert all(e == 1.0 for e in first)
    task, m, t = _configs()  # the same run from a fresh initialisation
    assert max(train(task, m, t).history[0].exact_match) < 0.5


def test_another_architecture_is_refused(add2_trained):
    _, path = add2_trained
    task, m, t = _configs(init_from=str(path), d_ff=8)
    with pytest.raises(CheckpointError, match="architecture"):
        train(task, m, t)


def test_another_format_is_refused(add2_trained):
    _, path = add2_trained
    ck = load_checkpoint(path)
    other = "nopad" if ck.task.fmt.pad else "pad"
    task, m, t = _configs(other, init_from=str(path))
    with pytest.raises(CheckpointError, match="format"):
        train(task, m, t)


def test_cli_records_the_start_and_refuses_a_missing_one(add2_trained, tmp_path, capsys):
    _, path = add2_trained
    cfg = tmp_path / "c.json"
    ck = load_checkpoint(path)
    cfg.write_text(json.dumps({"task": "add2", "model": ADD2_MODEL, "train": CALM}))
    out = tmp_path / "cont"
    code, o, e = run(capsys, "train", "--config", cfg, "--init-from", path, "-o", out, "--json")
    assert code == 0, e
    assert load_checkpoint(out).meta["init_from_sha256"] == ck.sha256
    assert json.loads(o)["eval_exact_match"] == 1.0
    code, _, e = run(capsys, "train", "--config", cfg, "--init-from", tmp_path / "nowhere",
                     "-o", tmp_path / "x")
    assert code != 0 and len(e.strip().splitlines()) == 1 and "nowhere" in e


def _continue(capsys, tmp_path, start, out):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "add2", "model": ADD2_MODEL, "train": CALM}))
    code, o, e = run(capsys, "train", "--config", cfg, "--init-from", start, "-o", out, "--json")
    assert code == 0, e
    return json.loads(o)


def test_a_continued_checkpoint_carries_its_start_and_retrains_from_a_copy(
        add2_trained, tmp_path, capsys):
    _, path = add2_trained
    cont = tmp_path / "cont"
    _continue(capsys, tmp_path, path, cont)
    doc = json.loads((cont / "config.json").read_text())
    assert doc["train"]["init_from"] == "start"  # relative: read against the config's folder
    assert sha256_file(cont / "start" / "model.safetensors") == load_checkpoint(path).sha256
    # a copy elsewhere (the original start is not beside it) retrains from its own start/
    moved = tmp_path / "elsewhere" / "cont"
    shutil.copytree(cont, moved)
    code, o, e = run(capsys, "train", "--config", moved / "config.json", "-o", tmp_path / "again",
                     "--json")
    assert code == 0, e
    assert json.loads(o)["eval_exact_match"] == 1.0 and load_checkpoint(
        tmp_path / "again").meta["init_from_sha256"] == load_checkpoint(path).sha256
    # continuing a continued model keeps the chain: its start's own start comes along
    third = tmp_path / "third"
    _continue(capsys, tmp_path, moved, third)
    assert sha256_file(third / "start" / "model.safetensors") == load_checkpoint(moved).sha256
    assert sha256_file(third / "start" / "start" / "model.safetensors") == \
        load_checkpoint(path).sha256


def test_a_start_gone_before_the_save_leaves_the_config_as_it_was(add2_trained, tmp_path):
    result, _ = add2_trained
    from dataclasses import replace

    cfg = replace(result.train_cfg, init_from=str(tmp_path / "gone"))
    assert keep_start(cfg, tmp_path / "out") == (cfg, {})
    assert keep_start(replace(cfg, init_from=None), tmp_path / "out") == (
        replace(cfg, init_from=None), {})


def test_a_published_continued_entry_ships_its_start_and_its_command_runs(
        add2_trained, tmp_path, capsys, monkeypatch):
    _, path = add2_trained
    cont = tmp_path / "cont"
    _continue(capsys, tmp_path, path, cont)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "verify", cont, "--record", "--db", "lb.db", "--json")
    assert code == 0, err
    assert run(capsys, "publish", "--db", "lb.db")[0] == 0
    (folder,) = Path("leaderboard/checkpoints").iterdir()
    start_sha = load_checkpoint(path).sha256
    assert sha256_file(folder / "start" / "model.safetensors") == start_sha
    md = Path("leaderboard/LEADERBOARD.md").read_text()
    assert f"published in `leaderboard/checkpoints/{folder.name}/start/`" in md
    assert f"`{start_sha}`" in md
    commands = re.findall(r"```sh\n(.*?)\n```", md)
    assert f"arithsweep train --config leaderboard/checkpoints/{folder.name}/start/config.json" \
        in commands
    code, o, e = run(capsys, *shlex.split(commands[0])[1:], "-o", "retrained", "--json")
    assert code == 0, e
    assert load_checkpoint("retrained").meta["init_from_sha256"] == start_sha
    # a continued checkpoint whose start was lost is refused, and nothing is written
    shutil.rmtree(cont / "start")
    before = sorted(str(p) for p in Path("leaderboard").rglob("*"))
    code, _, e = run(capsys, "publish", "--db", "lb.db", "--dir", "other")
    assert code != 0 and len(e.strip().splitlines()) == 1 and "missing" in e
    assert not Path("other").exists()
    assert sorted(str(p) for p in Path("leaderboard").rglob("*")) == before


def test_the_leaderboard_names_the_start_folder_as_the_checkpoint_writes_it():
    from arithsweep.core.model import checkpoint
    from arithsweep.leaderboard import provenance

    assert provenance.START == checkpoint.START  # the leaderboard cannot import torch's module


def test_a_runs_state_folder_starts_each_member_from_its_own(tmp_path, capsys):
    """`--init-from <out>/resume`: a pack continued on its next phase (tbukic's cosine phase,
    then its Grokfast phase), member i from member i's weights in the run's last state."""
    import torch

    from arithsweep.core.model.model import ArithTransformer
    from arithsweep.core.training.resume import (
        is_state_dir,
        latest_state,
        start_members_from_state,
        sub,
    )

    code, _, err = run(capsys, "train", "--task", "add2", "--d-model", 8, "--heads", 2,
                       "--d-ff", 8, "--seeds", 3, "--steps", 40, "--out", tmp_path / "a",
                       "--set", "checkpoint_every=20", "--set", "eval_every=20")
    assert code == 0, err
    state_dir = tmp_path / "a" / "resume"
    assert is_state_dir(state_dir) and not is_state_dir(tmp_path / "a")
    task, m, _ = build_configs("add2", None, None, {"d_model": 8, "n_heads": 2, "d_ff": 8})
    model = ArithTransformer(m, k=3, seeds=[7, 8, 9])
    assert start_members_from_state(model, state_dir) == 40
    saved = sub(latest_state(state_dir).tensors, "model.")
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), saved[n]), n
    assert not torch.equal(saved["embed.weight"][0], saved["embed.weight"][1])
    with pytest.raises(CheckpointError, match="3 members; this run trains 2"):
        start_members_from_state(ArithTransformer(m, k=2), state_dir)
    # the command line: a continued pack trains, and a wrong member count is one line
    code, _, err = run(capsys, "train", "--task", "add2", "--d-model", 8, "--heads", 2,
                       "--d-ff", 8, "--seeds", 3, "--steps", 20, "--init-from", state_dir,
                       "--out", tmp_path / "b")
    assert code == 0, err
    code, _, err = run(capsys, "train", "--task", "add2", "--d-model", 8, "--heads", 2,
                       "--d-ff", 8, "--seeds", 2, "--steps", 20, "--init-from", state_dir,
                       "--out", tmp_path / "c")
    assert code == 2 and err.count("\n") == 1 and "members" in err, err


def test_a_pack_continued_from_a_state_says_how_both_phases_retrain(tmp_path, capsys):
    """A state is not a checkpoint (publish cannot copy it), so a model trained from one
    records that run's job (meta init_from_state) and its entry prints both commands: the
    first rebuilds the earlier run's configs exactly, the second this run's."""
    from arithsweep.leaderboard.provenance import start_lines, state_chain

    net = ["--task", "add2", "--d-model", 8, "--heads", 2, "--d-ff", 8, "--seeds", 2]
    code, _, err = run(capsys, "train", *net, "--steps", 40, "--lr", 0.02, "--out",
                       tmp_path / "a", "--set", "eval_every=20")
    assert code == 0, err
    code, _, err = run(capsys, "train", *net, "--steps", 20, "--lr", 0.001, "--init-from",
                       tmp_path / "a" / "resume", "--set", "warmup=0", "--out", tmp_path / "b")
    assert code == 0, err
    a = json.loads((tmp_path / "a" / "config.json").read_text())
    b = json.loads((tmp_path / "b" / "config.json").read_text())
    origin = b["meta"]["init_from_state"]
    assert origin["step"] == 40 and origin["train"] == a["train"] and origin["model"] == a["model"]
    lines = state_chain(b, str(tmp_path / "b"), "It")
    assert lines == start_lines(b, str(tmp_path / "b"))  # an entry trained so says it itself
    first, then = (shlex.split(x) for x in lines[-3:-1])
    sets = [first[i + 1] for i, x in enumerate(first) if x == "--set"]
    from arithsweep.core.overrides import parse_sets

    _, m, t = build_configs(None, None, first[3], parse_sets(sets))
    assert (m.to_dict(), t.to_dict()) == (a["model"], a["train"])
    assert then[then.index("--init-from") + 1] == f"{first[-1]}/resume"
    _, m, t = build_configs(None, None, then[3], {"init_from": b["train"]["init_from"]})
    assert (m.to_dict(), t.to_dict()) == (b["model"], b["train"])
    # a model from a checkpoint, not a state, has no such lines
    assert state_chain(a, "x", "It") == []
