"""The verification protocol (suite v2) on a trained add2 model, a broken one, tampered
checkpoints and a third-party checkpoint; recording only what qualifies."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ArithsweepError, CheckpointError
from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.model.model import ArithTransformer, count_params
from arithsweep.leaderboard.board import open_db
from arithsweep.leaderboard.verify import build_suite, verify


def test_trained_add2_qualifies_and_is_recorded_once(ckpt, tmp_path):
    rep = verify(ckpt, target=0.99)
    assert rep.n_problems == 10**4 and rep.suite == "v2" and rep.suite_size == 10**4
    assert rep.params == count_params(load_checkpoint(ckpt).model)
    assert rep.exact_match == 1.0 and rep.n_failures == 0 and rep.failures == []
    assert rep.nines == 4 and 0.999 < rep.wilson_lower < 1.0
    assert sum(b.n for b in rep.by_carry.values()) == 10**4
    assert sum(b.n for b in rep.by_lengths.values()) == 10**4
    assert rep.qualifies and "--seeds 1" in rep.reproduce
    board = open_db(f"sqlite:///{tmp_path / 'lb.db'}")
    row, created = board.record(rep)
    assert created and row["params"] == rep.params and row["n_problems"] == 10**4
    _, created_again = board.record(verify(ckpt, target=0.99))
    assert not created_again and board.count() == 1


def test_broken_model_does_not_qualify_and_is_not_recorded(ckpt, tmp_path):
    ck = load_checkpoint(ckpt)
    with torch.no_grad():
        ck.model.layers[0].mlp.down.weight.mul_(-1.0)  # break the adder
    rep = verify(ck, target=0.99)
    assert rep.exact_match < 0.99 and not rep.qualifies
    assert rep.n_failures > 0 and len(rep.failures) == 10
    f = rep.failures[0]
    a, b = (int(x) for x in f["problem"].split("+"))
    assert f["expected"] == a + b and f["got"] != a + b
    board = open_db(f"sqlite:///{tmp_path / 'lb.db'}")
    with pytest.raises(ArithsweepError, match="not recorded"):
        board.record(rep)
    assert board.count() == 0


@pytest.mark.parametrize("tamper,match", [
    ("tensor", "sha256"), ("config", "shape"), ("meta", "metadata claims"),
])
def test_tampered_checkpoint_is_refused(ckpt, tamper, match):
    doc = json.loads((ckpt / "config.json").read_text())
    if tamper == "tensor":
        data = bytearray((ckpt / "model.safetensors").read_bytes())
        data[-1] ^= 0x01
        (ckpt / "model.safetensors").write_bytes(bytes(data))
    elif tamper == "config":
        doc["model"]["d_model"] = 12
    else:
        doc["meta"]["params"] = 123
    (ckpt / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=match):
        verify(ckpt, target=0.99)


def test_third_party_checkpoint_in_the_documented_format(tmp_path, add2_trained):
    result, _ = add2_trained
    d = tmp_path / "theirs"
    d.mkdir()
    save_file(result.best_model().member_state(0), str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(
        {"task": "add2", "model": result.model_cfg.to_dict()}))  # no hash, no meta, no train
    rep = verify(d, target=0.99)
    assert rep.qualifies and rep.params == result.params


def test_bad_target_is_refused(ckpt):
    with pytest.raises(ArithsweepError, match="target"):
        verify(ckpt, target=1.5)


def test_large_task_suite_composition():
    task = get_task("add6")
    a, b, op, seed = build_suite(task)
    assert seed != 0 and a.numel() > 1_100_000
    assert bool((a < 10**6).all() and (b < 10**6).all())
    assert (a == 999999).logical_and(b == 1).any()  # AdderBoard-style edge cases are in
    cls = task.carry_class(a, b, op)
    for k in range(task.n_carry_classes):  # every cascade length is present
        assert int((cls == k).sum()) >= 100, f"cascade length {k}"
    # everything but the handful of edge cases comes from the held-out split
    assert int((~task.is_holdout(a, b, op)).sum()) <= 30


def test_untrained_model_checkpoint_verifies_near_zero(tmp_path):
    from arithsweep.core.model.checkpoint import save_checkpoint
    from arithsweep.core.model.model import ModelConfig

    task = get_task("add1")
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, d_model=4, n_heads=1, d_ff=4)
    save_checkpoint(tmp_path / "u", ArithTransformer(cfg, seeds=[0]), task)
    rep = verify(tmp_path / "u", target=0.5)
    assert rep.n_problems == 100 and rep.exact_match < 0.5 and not rep.qualifies
