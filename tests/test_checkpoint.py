"""Checkpoints: safetensors + JSON round trip; corrupt, mismatched, tampered and pickled files
are refused with one CheckpointError line."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from arithsweep.core.errors import CheckpointError
from arithsweep.core.evaluation.evaluate import exact_match
from arithsweep.core.model.checkpoint import load_checkpoint, sha256_file


def test_round_trip_gives_the_same_model(add2_trained, ckpt):
    result, _ = add2_trained
    ck = load_checkpoint(ckpt)
    assert ck.task.name == "add2" and ck.params == result.params
    assert ck.sha256 == sha256_file(ckpt / "model.safetensors")
    assert ck.meta["seed"] == result.train_cfg.seed + result.best_seed
    for k, v in result.best_model().member_state(0).items():
        assert torch.equal(v, ck.model.member_state(0)[k]), k
    a, b, op = ck.task.enumerate_all()
    assert torch.equal(exact_match(ck.model, ck.task, a, b, op),
                       exact_match(result.best_model(), ck.task, a, b, op))
    # the file path or the config path name the same checkpoint
    assert load_checkpoint(ckpt / "config.json").sha256 == ck.sha256


def _edit_config(path, fn):
    doc = json.loads((path / "config.json").read_text())
    fn(doc)
    (path / "config.json").write_text(json.dumps(doc))


def test_missing_and_incomplete(tmp_path, ckpt):
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "nope")
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match="missing config.json"):
        load_checkpoint(ckpt)


def test_corrupt_weights_are_refused(ckpt):
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-5] ^= 0xFF  # a flipped bit in a tensor
    (ckpt / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        load_checkpoint(ckpt)


def test_truncated_weights_without_a_hash_are_refused(ckpt):
    _edit_config(ckpt, lambda d: d.pop("weights_sha256"))
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="safetensors|corrupt"):
        load_checkpoint(ckpt)


def test_pickle_is_never_loaded(ckpt, tmp_path):
    marker = tmp_path / "pwned"

    class Boom:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (ckpt / "model.safetensors").write_bytes(pickle.dumps({"x": Boom()}))
    _edit_config(ckpt, lambda d: d.pop("weights_sha256"))
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        load_checkpoint(ckpt)
    assert not marker.exists()
    torch.save({"embed.weight": torch.zeros(3)}, ckpt / "model.safetensors")
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        load_checkpoint(ckpt)


def test_config_that_disagrees_with_the_tensors_is_refused(ckpt):
    _edit_config(ckpt, lambda d: d["model"].update(d_ff=d["model"]["d_ff"] * 2))
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(ckpt)


def test_extra_or_missing_tensor_is_refused(ckpt):
    state = load_file(str(ckpt / "model.safetensors"))
    state["sneaky.weight"] = torch.zeros(4)
    save_file(state, str(ckpt / "model.safetensors"))
    _edit_config(ckpt, lambda d: d.update(weights_sha256=sha256_file(ckpt / "model.safetensors")))
    with pytest.raises(CheckpointError, match="unexpected tensor"):
        load_checkpoint(ckpt)


def test_false_parameter_claim_is_refused(ckpt):
    _edit_config(ckpt, lambda d: d["meta"].update(params=d["meta"]["params"] - 100))
    with pytest.raises(CheckpointError, match="metadata claims"):
        load_checkpoint(ckpt)


def test_wrong_task_for_the_model_is_refused(ckpt):
    _edit_config(ckpt, lambda d: d.update(task="mix2"))
    with pytest.raises(CheckpointError, match="vocab_size"):
        load_checkpoint(ckpt)


def test_bad_json_is_refused(ckpt):
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(ckpt)
