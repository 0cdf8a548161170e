"""The fused attention kernel chosen for CUDA (layers.ATTENTION) computes what the CPU's
hand-written one does: same logits and gradients, run here on the CPU."""

from __future__ import annotations

import pytest
import torch

from arithsweep.core.data.tasks import get_task
from arithsweep.core.model.layers import ATTENTION
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.training.train import _loss_fn


@pytest.mark.parametrize("extra", [{}, {"pos": "rope"}, {"tie_kv": True, "n_layers": 2},
                                   {"n_loops": 2, "pos": "abacus"}])
@pytest.mark.parametrize("from_pos", [0, 7])
def test_fused_attention_matches_manual(extra: dict, from_pos: int) -> None:
    task = get_task("add3")
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, d_model=8, n_heads=2,
                      d_ff=12, **extra)
    tokens, mask = task.encode(*task.sample(64, torch.Generator().manual_seed(1), "uniform"))
    grads, losses = [], []
    for kind in ("manual", "fused"):
        model = ArithTransformer(cfg, k=2, seeds=[3, 4])
        model.attention = kind
        loss = _loss_fn(model, tokens.expand(2, -1, -1), mask.expand(2, -1, -1), from_pos)
        loss.sum().backward()
        losses.append(loss.detach())
        grads.append({n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_cpu_keeps_the_manual_kernel() -> None:
    assert ATTENTION["cpu"] == "manual"  # what measured faster on the 2-core CPU
