"""A member trains to the same bits alone and in any pack (issue 55), in both layouts.

Two sums used to follow the pack's size K: the clipping norm's sum over the parameters
(`torch.stack(...).sum(0)` took another order for some K) and the reference layout's
micro-batch split (seeds x batch per 1024 rows on a CPU). Either moved a member's weights by
~1e-8 after one step, alone against beside a second proposal. The pack here is mixed (other
seeds, lr, clip and decay beside it, the member not first) of 32 members: a size whose old
clipping sum took another order than a 2-member run's, and 32 x 64 rows, which the old
pack-wide split cut in two.

A third was the reference layout's folded LayerNorm bias, W^T beta for the projection a norm
feeds: a matrix-vector torch.bmm, which sums in index order for K > 1 but hands K = 1 to BLAS's
gemv, another order once d * d_out >= 400, forward and backward. `layers.member_matvec` takes
the K > 1 order for every K; the d_model 16 tests below parted before it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from arithsweep.core.model import tiny_layout as TL
from arithsweep.core.model.layers import member_matvec
from arithsweep.core.model.model import ArithTransformer
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.population import train, train_population
from arithsweep.core.training.train import _loss_fn, member_sq_norms, micro_batches


def _setup(layout: str, **kw):
    return build_configs("add2", None, None, {
        "d_model": 4, "n_heads": 1, "d_ff": 8, "steps": 32, "eval_every": 8, "seeds": 2,
        "batch_size": 64, "eval_size": 256, "early_stop": False, "layout": layout, **kw})


def _alone_as_in_pack(task, m, me, before, after, layout: str):
    """`me` trained alone and as the second proposal between `before` and `after`: every
    member weight the same bits, and the same curve. Returns the run alone's member 0 state."""
    alone = train(task, m, me)
    packed = train_population(task, m, [before, me, after])[1]
    assert alone.layout == packed.layout == layout
    for i in range(me.seeds):
        a, p = alone.model.member_state(i), packed.model.member_state(i)
        for name in a:
            assert torch.equal(a[name], p[name]), (i, name)
    assert [q.exact_match for q in alone.history] == [q.exact_match for q in packed.history]
    assert [q.loss for q in alone.history] == [q.loss for q in packed.history]
    return alone.model.member_state(0)


@pytest.mark.parametrize("layout", [
    pytest.param("tiny", marks=pytest.mark.skipif(
        TL.load_error() is not None, reason=f"tiny kernel unavailable: {TL.load_error()}")),
    "reference",
])
def test_a_member_trains_to_the_same_bits_alone_and_in_a_mixed_pack(layout):
    task, m, base = _setup(layout)
    # a clip this small acts at every step, so the norm's last bit reaches the weights
    me = replace(base, lr=1e-2, grad_clip=0.05, weight_decay=0.01, seed=0)
    before = replace(base, lr=3e-3, grad_clip=0.3, weight_decay=0.3, seed=100, seeds=3)
    after = replace(base, lr=2e-2, grad_clip=0.0, weight_decay=0.0, seed=7, seeds=27)
    _alone_as_in_pack(task, m, me, before, after, layout)


# LayerNorm with bias, wide enough (16 x 48 for q/k/v, 16 x 32 for the MLP) that the old bmm
# took another order for K = 1 than for K > 1
_WIDE_LN = {"d_model": 16, "n_heads": 2, "d_ff": 32, "norm": "layer", "norm_bias": True,
            "steps": 12, "eval_every": 6, "batch_size": 32, "eval_size": 128}


def test_a_layernorm_member_trains_to_the_same_bits_alone_and_in_a_mixed_pack():
    task, m, base = _setup("reference", **_WIDE_LN)
    # one seed alone: the old bmm's order was one for K = 1 and another for every K > 1
    me = replace(base, lr=1e-2, grad_clip=0.05, weight_decay=0.01, seed=0, seeds=1)
    before = replace(base, lr=3e-3, grad_clip=0.3, weight_decay=0.3, seed=100, seeds=1)
    after = replace(base, lr=2e-2, grad_clip=0.0, weight_decay=0.0, seed=7, seeds=2)
    state = _alone_as_in_pack(task, m, me, before, after, "reference")
    assert any(n.endswith("norm2.bias") for n in state)


def test_a_layernorm_members_gradient_has_the_same_bits_for_any_k():
    task, m, _ = _setup("reference", **_WIDE_LN)
    g = torch.Generator().manual_seed(3)
    # trained-like weights: the biases start at 0, where W^T beta is exactly 0 for any K
    mine = {n: v + 0.1 * torch.randn(v.shape, generator=g)
            for n, v in ArithTransformer(m, k=1, seeds=[0]).member_state(0).items()}
    tokens = torch.randint(0, m.vocab_size, (1, 8, m.n_ctx), generator=g)
    mask = torch.ones(1, 8, m.n_ctx - 1)

    def member_0(k: int) -> dict[str, torch.Tensor]:
        model = ArithTransformer(m, k=k, seeds=list(range(k)))
        model.load_member_state(0, mine)
        others = torch.randint(0, m.vocab_size, (k - 1, 8, m.n_ctx), generator=g)
        loss = _loss_fn(model, torch.cat([tokens, others]), mask.expand(k, -1, -1))
        loss.backward(torch.ones(k))
        return {"loss": loss.detach()[0], **{n: p.grad[0] for n, p in model.named_parameters()}}

    alone = member_0(1)
    for k in (2, 5):
        packed = member_0(k)
        for name in alone:
            assert torch.equal(alone[name], packed[name]), (k, name)


@pytest.mark.parametrize("d_out, d", [(48, 16), (84, 28), (13, 28), (8, 4)])
def test_the_folded_bias_product_has_the_same_bits_for_any_k(d_out, d):
    g = torch.Generator().manual_seed(d_out)
    wt, beta, up = (torch.randn(*s, generator=g) for s in ((d_out, d), (d,), (d_out,)))

    def member_0(wts: torch.Tensor, betas: torch.Tensor, ups: torch.Tensor):
        wts, betas = wts.requires_grad_(), betas.requires_grad_()
        out = member_matvec(wts, betas)  # (K, d_out)
        out.backward(ups)
        return out.detach()[0], wts.grad[0], betas.grad[0]

    alone = member_0(wt[None].clone(), beta[None].clone(), up[None])
    torch.testing.assert_close(alone[0], wt @ beta, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone[2], wt.T @ up, rtol=1e-5, atol=1e-5)
    for k in (2, 3, 5, 7, 64):
        packed = member_0(*(torch.cat([x[None], torch.randn(k - 1, *x.shape, generator=g)])
                            for x in (wt, beta, up)))
        for want, got in zip(alone, packed):
            assert torch.equal(want, got), k
    # (it is also the order torch.bmm took for K > 1 on torch 2.13 here, so packs kept their
    # floats; not asserted: which kernel torch's bmm picks is the library's and the CPU's)


def test_a_members_gradient_norm_has_the_same_bits_in_any_pack():
    g = torch.Generator().manual_seed(5)
    shapes = [(44, 4), (4,), (4, 4), (4, 8), (8, 4), (12, 4)]
    mine = [torch.randn(s, generator=g) * 10.0 ** (i % 3 - 1) for i, s in enumerate(shapes)]
    alone = member_sq_norms([x[None] for x in mine], 1)
    want = sum(x.double().square().sum() for x in mine)
    torch.testing.assert_close(alone.double(), want.view(1), rtol=1e-6, atol=0)
    for k in (2, 4, 5, 7, 64):  # the old reduction's order changed at 4, 5, 7 and 64
        pack = [torch.cat([x[None], torch.randn(k - 1, *x.shape, generator=g)]) for x in mine]
        assert torch.equal(member_sq_norms(pack, k)[:1], alone), k


def test_the_micro_batch_split_is_each_members_own():
    _, _, base = _setup("reference", micro_batch=32)
    assert micro_batches(base) == 2  # 64 rows in pieces of 32
    assert {micro_batches(replace(base, seeds=k)) for k in (1, 2, 64)} == {2}
    assert micro_batches(replace(base, micro_batch=0, seeds=64)) == 1  # 0: the whole step
