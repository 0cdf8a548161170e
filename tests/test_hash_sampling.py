"""The counter-based sampler (core/data/hash_sampling.py): pinned output, independence from K and
from a member's place in the pack, never a held-out problem, the right distributions, the
fixed-shape (GPU) path equal to the compact (CPU) one, and how configs pick the sampler."""

from __future__ import annotations

import warnings

import pytest
import torch

import arithsweep.core.data.hash_sampling as H
from arithsweep.core.config import TrainConfig
from arithsweep.core.data.hash_sampling import HashSampler
from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.streams import DATA_CHUNK_STEPS, _DataStream


def _problems(name, seeds, steps, **kw):
    task = get_task(name)
    return task, HashSampler(task, TrainConfig(seeds=len(seeds), **kw)).problems(seeds, steps)


@pytest.mark.parametrize("name,first,checksum", [
    ("add3", [(17, 8), (124, 63), (19, 194), (809, 354), (404, 95)], 379457),
    ("add10", [(1738, 545899511), (406391245, 2744613709), (958960, 85580821),
               (82720935, 627643), (449760419, 5580)], 2930627667233),
])
def test_seed_0_step_0_is_pinned(name, first, checksum):
    # an accidental change to the generator would silently change every future run's data
    _, (a, b, _) = _problems(name, [0], [0])
    a, b = a[0, 0], b[0, 0]  # (B,)
    assert list(zip(a[:5].tolist(), b[:5].tolist())) == first
    assert int((a * 3 + b * 7).sum()) == checksum


def test_a_batch_depends_on_seed_and_step_only():
    _, alone = _problems("add4", [7], [5, 6])  # (S=2, K=1, B)
    _, pack = _problems("add4", [3, 9, 7, 1], [6, 5, 100])  # member 2 is seed 7
    for x, y in zip(alone, pack):
        assert torch.equal(x[0, 0], y[1, 2]) and torch.equal(x[1, 0], y[0, 2])
    assert not torch.equal(pack[0][0, 0], pack[0][0, 1])  # seeds differ
    assert not torch.equal(pack[0][0, 0], pack[0][1, 0])  # steps differ


@pytest.mark.parametrize("fmt", ["pad,revans,revops,delim,zeros", "nopad"])
def test_batches_are_the_tasks_own_encoding(fmt):
    """Tokens and answer mask as Task.encode writes them; a pad format's mask, the same in
    every row, is made once per shape and handed out again."""
    task = get_task("add10" if fmt.startswith("pad") else "add4", fmt)
    h = HashSampler(task, TrainConfig(seeds=2))
    for steps in ([0, 1, 2], [3, 4, 5]):
        tok, mask = h.batches([4, 5], steps)  # (S, K, B, T), (S, K, B, T-1)
        a, b, op = h.problems([4, 5], steps)
        want_t, want_m = task.encode(a.reshape(-1), b.reshape(-1), op.reshape(-1),
                                     dtype=torch.uint8)
        assert torch.equal(tok.reshape(want_t.shape), want_t)
        assert torch.equal(mask.reshape(want_m.shape), want_m)
    assert (h.batches([4, 5], [7, 8, 9])[1] is mask) == fmt.startswith("pad")


def test_pack_member_equals_its_single_run_through_the_trainer_stream():
    task = get_task("add3")
    pack = _DataStream(task, TrainConfig(seeds=3, seed=4), torch.device("cpu"))
    single = _DataStream(task, TrainConfig(seeds=1, seed=5), torch.device("cpu"))
    for step in range(DATA_CHUNK_STEPS + 3):  # across a refill
        t_pack, m_pack = pack.next(step)
        t_one, m_one = single.next(step)
        # a step's batch is a view of the chunk's uint8 buffer, as the tiny kernel reads it
        assert t_pack.dtype == torch.uint8
        assert t_pack.untyped_storage().data_ptr() == pack.buf[0].untyped_storage().data_ptr()
        assert torch.equal(t_pack[1], t_one[0]) and torch.equal(m_pack[1], m_one[0])


@pytest.mark.parametrize("name", ["add1", "add2", "add10", "sub5", "mix3", "mul2"])
@pytest.mark.parametrize("sampling", ["uniform", "values", "carry", "mixed"])
def test_no_training_row_is_ever_held_out(name, sampling):
    task, (a, b, op) = _problems(name, [0, 1], list(range(16)), sampling=sampling,
                                 curriculum_steps=12)
    a, b, op = a.flatten(), b.flatten(), op.flatten()
    assert a.numel() == 2 * 16 * 128
    assert not bool(task.is_holdout(a, b, op).any())


def test_fallback_rows_are_on_the_train_side_too(monkeypatch):
    # with one candidate per row, every held-out draw (~1/16, far more on add1) takes the pool
    monkeypatch.setattr(H, "CANDIDATES", 1)
    task = get_task("add1")
    sampler = HashSampler(task, TrainConfig(seeds=1, sampling="uniform"))
    a, b, op = (x.flatten() for x in sampler.problems([0], list(range(32))))
    assert not bool(task.is_holdout(a, b, op).any())
    pool = set(zip(*(x.tolist() for x in sampler._pool(1, 0))))
    used = set(zip(a.tolist(), b.tolist(), op.tolist()))
    assert used & pool  # the fallback was exercised


@pytest.mark.parametrize("name", ["add3", "sub4", "mix3", "add1", "mul2"])
def test_fixed_shape_path_equals_compact_path(name):
    # the fixed-shape path is what runs on CUDA: same integer ops, so same problems
    task = get_task(name)
    sampler = HashSampler(task, TrainConfig(seeds=2, curriculum_steps=20))
    compact = sampler.problems([0, 1], list(range(24)))
    sampler.compact = False
    fixed = sampler.problems([0, 1], list(range(24)))
    assert all(torch.equal(x, y) for x, y in zip(compact, fixed))


def test_uniform_lengths_are_equally_frequent():
    task, (a, b, _) = _problems("add6", [0], list(range(64)), sampling="uniform")
    la, lb = task.operand_lengths(a.flatten(), b.flatten())
    for lens in (la, lb):
        share = torch.bincount(lens, minlength=7)[1:].double() / lens.numel()  # (6,)
        assert float((share - 1 / 6).abs().max()) < 0.015, share


def test_mixed_follows_the_fading_carry_share():
    cfg = dict(sampling="mixed", carry_frac=0.8, carry_fade_start=0.25, carry_fade_end=0.75,
               steps=100)
    task = get_task("add8")
    sampler = HashSampler(task, TrainConfig(seeds=1, **cfg))
    carry_like = []
    for steps in (range(0, 20), range(80, 100)):  # share 0.8, then 0
        a, b, op = (x.flatten() for x in sampler.problems([0], list(steps)))
        carry_like.append(float((task.carry_class(a, b, op) >= 2).double().mean()))
    # the stream sampler's rate of carry cascades >= 2 in each pure mode
    rate = {m: float((task.carry_class(*task.sample(
        20_000, torch.Generator().manual_seed(0), m, split="train")) >= 2).double().mean())
        for m in ("carry", "uniform", "values")}
    # step 0: 80% carry rows, 10% uniform, 10% values; from 75% of the steps on: no carry rows
    start = 0.8 * rate["carry"] + 0.1 * rate["uniform"] + 0.1 * rate["values"]
    end = 0.5 * rate["uniform"] + 0.5 * rate["values"]
    assert abs(carry_like[0] - start) < 0.03 and abs(carry_like[1] - end) < 0.03


def test_curriculum_caps_every_row_of_its_step():
    task = get_task("add6")
    sampler = HashSampler(task, TrainConfig(seeds=1, curriculum_steps=60))
    a, b, _ = sampler.problems([0], [0, 30])
    assert int(torch.maximum(a[0], b[0]).max()) < 10  # step 0: one digit
    assert int(torch.maximum(a[1], b[1]).max()) < 10**4


def test_sampler_field_defaults_and_legacy_configs(tmp_path):
    assert TrainConfig().sampler == "hash"
    with pytest.raises(ConfigError, match="sampler"):
        TrainConfig(sampler="dice")
    # a user's YAML gets today's default; the shipped recipe pins the stream it was made with
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("task: add3\ntrain:\n  steps: 10\n")
    assert build_configs(None, None, recipe, {})[2].sampler == "hash"
    assert build_configs("add3", None, None, {})[2].sampler == "hash"
    assert build_configs(None, None, "recipes/add10-742.yaml", {})[2].sampler == "stream"
    # a checkpoint saved before the field existed was trained with the stream, and its
    # config.json retrains it that way unless told otherwise
    ckpt = next(p for p in sorted(__import__("pathlib").Path("leaderboard/checkpoints").iterdir())
                if p.is_dir() and '"sampler"' not in (p / "config.json").read_text())
    assert load_checkpoint(ckpt).train_cfg.sampler == "stream"
    assert build_configs(None, None, ckpt / "config.json", {})[2].sampler == "stream"
    assert build_configs(None, None, ckpt / "config.json", {"sampler": "hash"})[2].sampler == "hash"


def test_stream_fallback_is_announced():
    task = get_task("add3")
    cfg = TrainConfig(seeds=1)
    object.__setattr__(cfg, "sampling", "zipf")  # a mode the hash sampler lacks
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = _DataStream(task, cfg, torch.device("cpu"))
    assert stream.hash is None and "zipf" in stream.why_stream
    assert any("falls back to 'stream'" in str(w.message) for w in caught)


def test_values_share_sets_how_many_plain_rows_are_uniform_over_values():
    """MicroAdder's batches: every row that is not a carry row is uniform over values (mostly
    full length); the default splits them half and half with uniform operand lengths."""
    task = get_task("add8")
    full = []
    for share in (1.0, 0.5, 0.0):
        cfg = TrainConfig(seeds=1, sampling="mixed", carry_frac=0.0, values_share=share)
        a, b, _ = (x.flatten() for x in HashSampler(task, cfg).problems([0], list(range(8))))
        full.append(float((a >= 10**7).double().mean()))
    # values: 90% of operands have 8 digits; uniform lengths: 1 in 8
    assert abs(full[0] - 0.9) < 0.03 and abs(full[2] - 0.125) < 0.03
    assert abs(full[1] - (0.9 + 0.125) / 2) < 0.03
    with pytest.raises(ConfigError, match="values_share"):
        TrainConfig(values_share=1.5)
