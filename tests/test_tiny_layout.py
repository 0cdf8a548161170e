"""The tiny layout (core/model/tiny_layout.py + tiny_kernel.c) against the reference layout:
the same loss and gradients on the same batch for every option it accepts, members it skips,
a member's numbers independent of its pack and of the thread count, the layout `train`
picks by itself, and a short training run that follows the reference one."""

from __future__ import annotations

import pytest
import torch
from test_frontier import BASE, CASES

from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.model import tiny_layout as TL
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.population import train
from arithsweep.core.training.train import TINY_MAX_PARAMS, _loss_fn, choose_layout

pytestmark = pytest.mark.skipif(TL.load_error() is not None,
                                reason=f"tiny kernel unavailable: {TL.load_error()}")

# every frontier case (test_frontier.CASES) plus what those do not reach
EXTRA = {
    "87p-issue-model": dict(tie_kv=True, share_norms=True),
    "relu-learned-untied-two-heads": dict(d_model=8, n_heads=2, d_head=None, d_vhead=None,
                                          d_ff=16, activation="relu", pos="learned",
                                          tie_embeddings=False, final_norm=False),
    "no-norm-sinusoidal-attention-only": dict(norm="none", pos="sinusoidal", d_ff=0),
    "low-rank-no-positions": dict(d_model=6, d_head=4, d_vhead=4, rank=2, pos="none",
                                  activation="gelu", d_ff=5),
    "grouped-kv-interleaved-rope": dict(n_heads=4, n_kv_heads=2, d_model=4, d_head=2,
                                        d_vhead=3, rope_pairs="interleaved", qk_norm="shared"),
    "layernorm-own-norms-bias": dict(norm="layer", d_model=6, n_heads=2, d_head=3, d_vhead=3,
                                     pos="learned", activation="relu", d_ff=8),
    "layernorm-shared-no-bias": dict(norm="layer", norm_bias=False, share_norms=True),
    # the kernel reads the model's epsilon (tbukic's is 1e-6); 0.01 moves every norm's output
    "norm-eps-0.01": dict(norm_eps=1e-2, qk_norm="head"),
}
ALL = {**CASES, **EXTRA}


def _model(cfg: ModelConfig, k: int = 3) -> ArithTransformer:
    model = ArithTransformer(cfg, k=k, seeds=list(range(10, 10 + k)))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # tie numbers, norms and biases off their neutral start, low-rank
        for n, p in model.named_parameters():  # B off zero: each then shapes the loss
            if "norm" in n:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
            if n.endswith(("angle", "scale", "spiral")):
                p.add_(torch.linspace(-0.6, 0.7, k).view(k, *[1] * (p.dim() - 1)))
            if n.endswith("o.B"):
                p.normal_(0, 0.5, generator=g)
    return model


def _batch(cfg: ModelConfig, k: int, b: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (k, b, cfg.n_ctx + 1), generator=g)
    mask = (torch.rand(k, b, cfg.n_ctx, generator=g) > 0.2).float()
    return tokens, mask


def _loss_and_grads(fn, model, tokens, mask, start, weights, **kw):
    model.zero_grad(set_to_none=True)
    loss = fn(model, tokens, mask, start, **kw)
    (loss * weights).sum().backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                           if p.grad is not None}


@pytest.mark.parametrize("name", list(ALL))
def test_loss_and_every_gradient_match_the_reference_layout(name):
    cfg = ModelConfig(**{**BASE, **ALL[name]})
    assert TL.unsupported(cfg, "cpu") is None
    model = _model(cfg)
    # 37 sequences: two full tiles of 16 and a padded one; answer positions from 21 on
    tokens, mask = _batch(cfg, 3, 37)
    w = torch.tensor([1.0, -2.0, 0.5])  # each member's loss reaches it with its own weight
    ref, gref = _loss_and_grads(_loss_fn, model, tokens, mask, 21, w)
    got, grad = _loss_and_grads(TL.tiny_loss, model, tokens, mask, 21, w)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert grad.keys() == gref.keys()
    for n in gref:
        torch.testing.assert_close(grad[n], gref[n], rtol=1e-5, atol=1e-5, msg=n)


@pytest.mark.parametrize("name", list(ALL))
def test_the_evaluation_forward_gives_the_model_s_logits(name):
    cfg = ModelConfig(**{**BASE, **ALL[name]})
    model = _model(cfg)
    inputs = _batch(cfg, 1, 37)[0][0, :, :-1].to(torch.uint8)  # (37, T): shared by members
    with torch.no_grad():
        want = model(inputs, from_pos=19)  # (3, 37, T - 19, V)
    # 1e-4 on raw logits: a LayerNorm of a nearly constant vector magnifies float32 rounding
    # (2.5e-5 seen); the loss and gradients above hold to 1e-5
    torch.testing.assert_close(TL.tiny_logits(model, inputs, 19), want, rtol=1e-4, atol=1e-4)


def test_the_kernel_reads_the_batch_as_drawn_in_any_dtype_or_sharing():
    """uint8 tokens and a bool mask (the samplers' own, read without a copy), int64 tokens and
    a float mask, and one set of rows that every member reads: the same bits."""
    cfg = ModelConfig(**{**BASE, **CASES["record-36"]})
    model = _model(cfg, k=3)
    tokens, mask = _batch(cfg, 1, 21)  # 21 sequences: a tile and a padded one
    ones = torch.ones(3)
    want, gwant = _loss_and_grads(TL.tiny_loss, model, tokens.expand(3, -1, -1).clone(),
                                  mask.expand(3, -1, -1).clone(), 20, ones)
    for t, m in [(tokens.to(torch.uint8).expand(3, -1, -1).contiguous(),
                  mask.bool().expand(3, -1, -1).contiguous()),
                 (tokens[0].to(torch.uint8), mask[0].bool()),  # (B, T): shared
                 (tokens.expand(3, -1, -1), mask.expand(3, -1, -1))]:  # stride 0: shared
        got, grad = _loss_and_grads(TL.tiny_loss, model, t, m, 20, ones)
        assert torch.equal(got, want)
        for n, g in grad.items():
            assert torch.equal(g, gwant[n]), n


def test_a_vocabulary_past_a_byte_is_the_reference_layout_s():
    cfg = ModelConfig(**{**BASE, **CASES["record-36"], "vocab_size": 300})
    assert "256" in TL.unsupported(cfg, "cpu")


def test_skipped_members_cost_nothing_and_change_nothing_for_the_rest():
    cfg = ModelConfig(**{**BASE, **EXTRA["87p-issue-model"]})
    model = _model(cfg, k=4)
    tokens, mask = _batch(cfg, 4, 40)
    ones = torch.ones(4)
    full, gfull = _loss_and_grads(TL.tiny_loss, model, tokens, mask, 20, ones)
    active = torch.tensor([True, False, True, False])
    part, gpart = _loss_and_grads(TL.tiny_loss, model, tokens, mask, 20, ones, active=active)
    assert torch.equal(part[active], full[active]) and not part[~active].any()
    for n, g in gpart.items():
        assert torch.equal(g[active], gfull[n][active]), n
        assert not g[~active].any(), n


def test_a_member_computes_the_same_bits_in_any_pack_and_on_any_thread_count():
    cfg = ModelConfig(**{**BASE, **CASES["record-36"]})
    pack = _model(cfg, k=3)
    alone = ArithTransformer.from_member_state(cfg, pack.member_state(1))
    tokens, mask = _batch(cfg, 3, 150)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        lp, gp = _loss_and_grads(TL.tiny_loss, pack, tokens, mask, 18, torch.ones(3))
        torch.set_num_threads(1)
        la, ga = _loss_and_grads(TL.tiny_loss, alone, tokens[1:2], mask[1:2], 18, torch.ones(1))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(la[0], lp[1])
    for n, g in ga.items():
        assert torch.equal(g[0], gp[n][1]), n


def test_train_picks_the_layout_by_itself_and_explains_it():
    small = ModelConfig(**{**BASE, **EXTRA["87p-issue-model"]})
    cpu = torch.device("cpu")
    assert choose_layout(small, TrainConfig(), cpu)[0] == "tiny"
    assert choose_layout(small, TrainConfig(layout="reference"), cpu) == ("reference",
                                                                          "asked for")
    assert choose_layout(small, TrainConfig(compile=True), cpu)[0] == "reference"
    big = ModelConfig(vocab_size=14, n_ctx=35, d_model=128, n_heads=4, d_ff=256, norm="rms")
    layout, why = choose_layout(big, TrainConfig(), cpu)
    assert layout == "reference" and str(TINY_MAX_PARAMS) in why
    two = ModelConfig(**{**BASE, "n_layers": 2})
    assert choose_layout(two, TrainConfig(), cpu) == ("reference", "2 layers (one block only)")
    with pytest.raises(ConfigError, match="layout='tiny': 2 layers"):
        choose_layout(two, TrainConfig(layout="tiny"), cpu)
    with pytest.raises(ConfigError, match="layout"):
        TrainConfig(layout="fast")


def test_without_a_compiler_training_falls_back_to_the_reference_layout(monkeypatch,
                                                                         tmp_path):
    monkeypatch.setattr(TL._native, "lib", None)
    monkeypatch.setattr(TL._native, "why", None)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("ARITHSWEEP_CACHE", str(tmp_path))
    why = TL.load_error()
    assert why is not None and "tiny kernel" in why
    cfg = ModelConfig(**{**BASE, **EXTRA["87p-issue-model"]})
    assert choose_layout(cfg, TrainConfig(), torch.device("cpu")) == ("reference", why)


def test_a_short_run_trains_like_the_reference_layout():
    task, m, t = build_configs("add2", None, None, {
        "d_model": 4, "n_heads": 1, "d_head": 4, "d_vhead": 4, "d_ff": 4, "norm": "rms",
        "activation": "swiglu", "pos": "rope", "rope_base": 3.0, "steps": 30,
        "batch_size": 40, "seeds": 2, "eval_every": 15, "eval_size": 256,
        "early_stop": False})
    from dataclasses import replace
    tiny = train(task, m, replace(t, layout="tiny"))
    ref = train(task, m, replace(t, layout="reference"))
    assert tiny.layout.startswith("tiny") and ref.layout.startswith("reference")
    for i in range(2):
        a, b = tiny.model.member_state(i), ref.model.member_state(i)
        for n in a:
            torch.testing.assert_close(a[n], b[n], rtol=1e-4, atol=1e-4, msg=n)
    for p, q in zip(tiny.history, ref.history):
        torch.testing.assert_close(p.loss, q.loss, rtol=1e-4, atol=1e-4)
