"""`TrainConfig.stop_at`: a run stopped early by its own rules (a search trial's plateau or cut)
is retrained to the same weights: the schedule unchanged, training stops at that step, and
the entry's recorded command says so."""

from __future__ import annotations

import json
from dataclasses import replace

import torch

from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.population import train_population
from arithsweep.leaderboard.verify import reproduce_command


def test_stop_at_ends_where_the_whole_schedule_was_at_that_step():
    task, m, t = build_configs("add2", None, None, {
        "d_model": 8, "d_ff": 16, "n_heads": 2, "seeds": 2, "steps": 200, "eval_every": 50,
        "eval_size": 256, "early_stop": False})
    at_100 = {}

    def keep(_j, point, result):
        if point.step == 100:
            at_100.update({k: v.detach().clone() for k, v in result.model.named_parameters()})

    train_population(task, m, [t], on_eval=keep)
    stopped = train_population(task, m, [replace(t, stop_at=100)])[0]
    assert stopped.steps == 100 and stopped.history[-1].step == 100
    for k, v in stopped.model.named_parameters():
        assert torch.equal(v, at_100[k]), k


def test_an_early_stopped_models_command_stops_its_retrain_there(ckpt):
    doc = json.loads((ckpt / "config.json").read_text())
    whole = doc["train"]["steps"] + doc["train"].get("polish_steps", 0)
    doc["meta"]["steps"] = whole  # its whole schedule: the command needs no stop
    (ckpt / "config.json").write_text(json.dumps(doc))
    assert "stop_at" not in reproduce_command(load_checkpoint(ckpt))
    doc["meta"]["steps"] = whole - 7
    (ckpt / "config.json").write_text(json.dumps(doc))
    cmd = reproduce_command(load_checkpoint(ckpt))
    assert cmd.endswith(f"--set stop_at={whole - 7} --set time_budget=0")
    # `train` stopped at the target by early_stop: its retrain stops there by itself
    doc["meta"]["final_exact_match"], doc["train"]["early_stop"] = 1.0, True
    (ckpt / "config.json").write_text(json.dumps(doc))
    assert "stop_at" not in reproduce_command(load_checkpoint(ckpt))



def test_a_torch_layout_pack_before_arithmetic_6_is_retrained_as_the_pack(ckpt):
    """Before arithmetic 6 torch's batched kernels rounded a pack of K otherwise than one seed
    alone (a mix6 pack of 2 and its seed 0 alone parted within 1,000 steps): such an entry's
    command is its whole pack, stopped where it stopped. From 6 on one seed repeats it on a
    CPU, as in the tiny layout; a GPU run still names its pack."""
    doc = json.loads((ckpt / "config.json").read_text())
    doc["train"].update(layout="reference", seeds=2)
    doc["meta"].update(steps=doc["train"]["steps"] - 5, arithmetic=5)
    (ckpt / "config.json").write_text(json.dumps(doc))
    cmd = reproduce_command(load_checkpoint(ckpt))
    assert "--seeds" not in cmd and "--seed " not in cmd
    assert cmd.endswith(f"--set stop_at={doc['train']['steps'] - 5} --set time_budget=0")
    for arithmetic, device, alone in ((6, "cpu", True), (6, "cuda", False)):
        doc["meta"].update(arithmetic=arithmetic, device=device)
        (ckpt / "config.json").write_text(json.dumps(doc))
        assert ("--seeds 1 --seed" in reproduce_command(load_checkpoint(ckpt))) == alone
    doc["train"]["layout"] = "tiny"
    doc["meta"].update(arithmetic=5, device="cpu")
    (ckpt / "config.json").write_text(json.dumps(doc))
    assert "--seeds 1 --seed" in reproduce_command(load_checkpoint(ckpt))


def test_the_whole_pack_line_says_whether_one_seed_repeats_it():
    from arithsweep.leaderboard.provenance import pack_lines

    row = {"train_config": {"seeds": 4, "seed": 8},
           "reproduce": "arithsweep train --task add2 --config c.json --seeds 1 --seed 9"}
    for meta, alone in (({"arithmetic": 6, "device": "cpu"}, True),
                        ({"arithmetic": 5, "device": "cpu"}, False),
                        ({"arithmetic": 6, "device": "cuda"}, False)):
        text = " ".join(pack_lines(row, "p/config.json", {"meta": meta}))
        assert "--seeds 4 --seed 8" in text
        assert ("one seed alone trains to the same weights" in text) == alone, meta


def test_a_path_stopped_inside_its_last_phase_is_retrained_to_that_path_step(ckpt):
    doc = json.loads((ckpt / "config.json").read_text())
    doc["train"]["path"] = [{"name": "a"}, {"name": "b", "steps": 100, "lr": 1e-3}]
    whole = doc["train"]["steps"] + doc["train"].get("polish_steps", 0) + 100
    doc["meta"]["steps"] = whole
    (ckpt / "config.json").write_text(json.dumps(doc))
    assert "stop_at" not in reproduce_command(load_checkpoint(ckpt))
    doc["meta"]["steps"] = whole - 16  # a plateau in the last phase
    (ckpt / "config.json").write_text(json.dumps(doc))
    assert reproduce_command(load_checkpoint(ckpt)).endswith(
        f"--set stop_at={whole - 16} --set time_budget=0")
