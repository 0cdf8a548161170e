"""The last block computes queries from `from_pos` on only: same logits and gradients."""

from __future__ import annotations

import pytest
import torch

from arithsweep.core.model.model import ArithTransformer, ModelConfig

CASES = [
    {},
    {"n_layers": 2, "n_heads": 2, "pos": "rope", "d_model": 8},
    {"n_loops": 2, "tie_kv": True, "activation": "swiglu", "norm": "rms", "final_norm": False},
    {"pos": "abacus", "attn_bias": True, "mlp_bias": True, "d_ff": 0},
]


@pytest.mark.parametrize("extra", CASES)
def test_from_pos_equals_slicing_the_full_forward(extra):
    cfg = ModelConfig.from_dict({"vocab_size": 12, "n_ctx": 12, "d_model": 8, "n_heads": 1,
                                 "d_ff": 16, **extra})
    model = ArithTransformer(cfg, k=3, seeds=[0, 1, 2])
    tokens = torch.randint(0, 12, (3, 5, 12), generator=torch.Generator().manual_seed(0))
    full = model(tokens)
    part = model(tokens, from_pos=7)
    assert part.shape == (3, 5, 5, 12)
    torch.testing.assert_close(part, full[:, :, 7:], rtol=1e-5, atol=1e-6)
    grads = []
    for out in (full[:, :, 7:], part):
        model.zero_grad()
        out.square().sum().backward(retain_graph=True)
        grads.append([p.grad.clone() for p in model.parameters()])
    for g_full, g_part in zip(*grads, strict=True):
        torch.testing.assert_close(g_part, g_full, rtol=1e-3, atol=1e-5)
