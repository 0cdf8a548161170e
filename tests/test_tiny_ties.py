"""The tiny layout's ties in C (core/model/tiny_ties.py + tiny_ties.c, arithmetic 5) against
torch's: for every rule it covers, the effective weights equal `effective_weights`' and the
owned tensors' gradients autograd's through them, to float32 rounding, for members holding
different values; a member's numbers are the same bits alone and in a pack, and so are its
weights after a short 36-p run; rules it does not cover keep torch's path; and a whole
tiny-layout loss gives the same gradients either way.

    .venv/bin/python -m pytest tests/test_tiny_ties.py -q -n 0
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
import yaml
from test_member_alone import _alone_as_in_pack

from arithsweep.core.model import tiny_layout as TL
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.model.tiny_ties import Ties
from arithsweep.core.overrides import build_configs

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(TL.load_error() is not None,
                                reason=f"tiny kernel unavailable: {TL.load_error()}")

# tbukic's 36 p (recipes/anchors/tbukic-36.yaml): arc digits, K = rot(Q), V = Q, O = Q^T, one
# QK-norm weight, one shared RMS gain, SwiGLU with its own gate, down = rot(up^T)
T36 = dict(vocab_size=10, n_ctx=34, n_layers=1, d_model=3, n_heads=1, d_head=4, d_vhead=4,
           d_ff=2, activation="swiglu", norm="rms", share_norms=True, tie_embeddings=True,
           pos="rope", rope_base=3.0, rope_pairs="interleaved", qk_norm="shared", embed="arc",
           tie_k="rotated", tie_v=True, tie_o=True, mlp_down="up_t_rot",
           arc_init=[2.5, -1.2, 0.29], norm_eps=1e-6)
# every rule of the tbukic space (search_spaces/tbukic.yaml) at least once, and the 44 p
CASES = {
    "36p": {},
    "44p": dict(tie_k="q", qk_norm="head", mlp_down="own"),
    "k-scaled-down-up_t": dict(tie_k="scaled", mlp_down="up_t"),
    "qk-scalar-pattern": dict(qk_norm="scalar", qk_norm_pattern=[1.0, 0.25, 0.0, -1.0]),
    "arc2-scalar-norm": dict(embed="arc2", norm_weight="scalar"),
    "gate-a-up": dict(tie_gate=True, gate_scale="scalar"),
    "gate-a_j-up": dict(tie_gate=True, gate_scale="vector", mlp_down="up_t"),
    "gate-up": dict(tie_gate=True, gate_scale="none", tie_k="q"),
    "relu-ff1-d2": dict(activation="relu", d_ff=1, d_model=2, mlp_down="own"),
    "relu-ff1-up_t": dict(activation="relu", d_ff=1, mlp_down="up_t", embed="arc2"),
    # beyond the space: split pairs over two heads, extra tokens, no QK-norm or final norm
    "split-two-heads": dict(rope_pairs="split", n_heads=2, d_model=4, vocab_size=14),
    "no-qk-norm-no-final": dict(qk_norm="none", final_norm=False),
}


def _model(over: dict, k: int = 3, seed: int = 0) -> ArithTransformer:
    model = ArithTransformer(ModelConfig(**{**T36, **over}), k=k)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every member its own values, every number off its start
        for p in model.parameters():
            p.add_(0.4 * torch.randn(p.shape, generator=g))
    return model


def _kernel_grads(w: list, k: int, seed: int = 1):
    """A (K, G) gradient laid out as the kernel's, its offsets, and each weight's view."""
    sizes = [0 if t is None else t[0].numel() for t in w]
    offs = [sum(sizes[:i]) for i in range(len(w))]
    g = torch.randn(k, sum(sizes), generator=torch.Generator().manual_seed(seed))
    views = [None if t is None else g[:, o:o + n].reshape(t.shape)
             for t, o, n in zip(w, offs, sizes)]
    return g, offs, views


@pytest.mark.parametrize("name", list(CASES))
def test_weights_and_gradients_are_torch_s_to_rounding(name):
    model = _model(CASES[name])
    ties = Ties.of(model)
    assert ties is not None
    ref = TL.effective_weights(model)
    got = ties.forward()
    assert len(got) == len(ref) == TL.N_WEIGHTS
    for r, x in zip(ref, got):
        assert (r is None) == (x is None)
        if r is not None:
            torch.testing.assert_close(x, r.detach(), rtol=1e-6, atol=1e-6)
    g, offs, views = _kernel_grads(ref, model.k)
    total = sum((t * v).sum() for t, v in zip(ref, views) if t is not None)
    owned = [p for p in ties.params if p is not None]
    assert {id(p) for p in owned} == {id(p) for p in model.parameters()}  # each, once
    want = torch.autograd.grad(total, owned)
    mine = [x for x in ties.backward(g, offs, [t is not None for t in ref]) if x is not None]
    for p, w, x in zip(owned, want, mine):
        assert x.shape == p.shape and x.is_contiguous()
        torch.testing.assert_close(x, w, rtol=1e-5, atol=1e-5 * float(w.abs().max()))


@pytest.mark.parametrize("name", ["36p", "44p", "gate-a_j-up", "split-two-heads"])
def test_a_member_s_numbers_are_the_same_bits_alone_and_in_a_pack(name):
    pack = _model(CASES[name], k=3)
    alone = _model(CASES[name], k=1)
    with torch.no_grad():
        for a, p in zip(alone.parameters(), pack.parameters()):
            a.copy_(p[1:2])
    tp, ta = Ties.of(pack), Ties.of(alone)
    wp, wa = tp.forward(), ta.forward()
    for x, y in zip(wp, wa):
        assert (x is None) or torch.equal(x[1:2], y)
    g, offs, _ = _kernel_grads(wp, 3)
    present = [t is not None for t in wp]
    gp = tp.backward(g, offs, present)
    ga = ta.backward(g[1:2].contiguous(), offs, present)
    for x, y in zip(gp, ga):
        assert (x is None) == (y is None) and (x is None or torch.equal(x[1:2], y))


@pytest.mark.parametrize("over", [dict(embed="table"), dict(tie_k="none"),
                                  dict(mlp_down="up_t_scaled"), dict(share_norms=False),
                                  dict(tie_embeddings=False), dict(rank=2, d_model=3)])
def test_rules_it_does_not_cover_keep_torch_s_path(over):
    assert Ties.of(_model(over)) is None


@pytest.mark.parametrize("name", ["36p", "44p", "qk-scalar-pattern", "relu-ff1-d2"])
def test_the_loss_s_gradients_are_the_torch_path_s(name, monkeypatch):
    """tiny_loss with the ties in C against the same loss with the ties in torch (autograd)."""
    model = _model(CASES[name])
    gen = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, model.cfg.vocab_size, (3, 37, 35), generator=gen)
    mask = (torch.rand(3, 37, 34, generator=gen) > 0.3).float()

    def run():
        model.zero_grad(set_to_none=True)
        loss = TL.tiny_loss(model, tokens, mask, 5)
        (loss * torch.tensor([1.0, -2.0, 0.5])).sum().backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss, grads = run()
    monkeypatch.setattr(TL.Ties, "of", classmethod(lambda cls, m: None))
    ref_loss, ref_grads = run()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for x, r in zip(grads, ref_grads):
        torch.testing.assert_close(x, r, rtol=1e-4, atol=1e-5 * float(r.abs().max()))


def test_the_cases_cover_every_rule_of_the_tbukic_space():
    space = yaml.safe_load((ROOT / "search_spaces" / "tbukic.yaml").read_text())["model"]
    seen: dict[str, set] = {}
    for over in CASES.values():
        for key, value in asdict(ModelConfig(**{**T36, **over})).items():
            seen.setdefault(key, set()).add(str(value))
    for key, spec in space.items():
        if isinstance(spec, dict) and "choice" in spec:
            assert {str(c) for c in spec["choice"]} <= seen[key], key


def test_a_36p_member_trains_to_the_same_bits_alone_and_in_a_mixed_pack():
    """The 36-p anchor's recipe (Grokfast, decay drops, clipping) through the ties in C: a
    member's weights alone and beside members of other seeds, rates, clips and decays."""
    task, m, base = build_configs(None, None, str(ROOT / "recipes" / "anchors" / "tbukic-36.yaml"),
                                  {"steps": 24, "eval_every": 8, "eval_size": 256,
                                   "early_stop": False, "curriculum": None, "layout": "tiny"})
    assert Ties.of(ArithTransformer(m, k=1)) is not None
    me = replace(base, seed=0, seeds=2, grad_clip=0.05)
    before = replace(base, lr=3e-3, grad_clip=0.3, weight_decay=0.3, seed=100, seeds=3)
    after = replace(base, lr=2e-2, grad_clip=0.0, weight_decay=0.0, seed=7, seeds=3)
    _alone_as_in_pack(task, m, me, before, after, "tiny")
