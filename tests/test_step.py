"""The pack's training step (core/training/step.py): when capture applies, and, where CUDA is
present, a captured run against an eager one on the same batches."""

from __future__ import annotations

import pytest
import torch

from arithsweep.core.config import ModelConfig, TrainConfig
from arithsweep.core.data.tasks import get_task
from arithsweep.core.model.model import ArithTransformer
from arithsweep.core.training import train as T
from arithsweep.core.training.population import PackAdamW
from arithsweep.core.training.step import EAGER_STEPS, PackStep, capture_blocker

TASK = get_task("add3")
CUDA = torch.device("cuda")  # a device object needs no GPU; only running on it does


def _cfgs(**model) -> tuple[ModelConfig, TrainConfig]:
    mc = ModelConfig(vocab_size=TASK.vocab_size, n_ctx=TASK.n_ctx, d_model=8, n_heads=2,
                     d_ff=16, **model)
    return mc, TrainConfig(steps=20, seeds=3, batch_size=32, eval_every=10, device="cpu")


def test_capture_applies_only_on_cuda_without_host_work() -> None:
    mc, tc = _cfgs()
    assert capture_blocker(torch.device("cpu"), mc, tc, 1) == "not CUDA"
    assert capture_blocker(CUDA, mc, tc, 1) is None
    assert "compile" in capture_blocker(CUDA, mc, TrainConfig(compile=True), 1)
    assert "micro" in capture_blocker(CUDA, mc, tc, 4)
    ab, _ = _cfgs(pos="abacus", abacus_offset=3)
    assert "abacus" in capture_blocker(CUDA, ab, tc, 1)
    assert capture_blocker(CUDA, _cfgs(pos="abacus")[0], tc, 1) is None  # no offset: fine


def _run(device: torch.device, capture: bool, steps: int = 12) -> tuple[dict, list, PackStep]:
    mc, tc = _cfgs()
    K = tc.seeds
    model = ArithTransformer(mc, k=K, seeds=list(range(K))).to(device)
    wd = torch.full((K,), 0.01, device=device)
    opt = PackAdamW(list(model.parameters()), wd, (0.9, 0.98))
    alive = torch.ones(K, dtype=torch.bool, device=device)
    running = torch.ones(K, dtype=torch.bool, device=device)
    loss_sum = torch.zeros(K, dtype=torch.float64, device=device)
    clip = torch.tensor([1.0, 0.5, 0.0], device=device)
    step = PackStep(model, opt, T._loss_fn, clip, alive, running, loss_sum,
                    start=0, batch_size=tc.batch_size, n_micro=1,
                    blocker=None if capture else "eager on purpose")
    gen = torch.Generator().manual_seed(5)
    losses = []
    for i in range(steps):
        a, b, op = TASK.sample(tc.batch_size * K, gen, "uniform")
        tokens, mask = TASK.encode(a, b, op)  # (K*B, T), (K*B, T-1)
        tokens = tokens.view(K, tc.batch_size, -1).to(device)
        mask = mask.view(K, tc.batch_size, -1).to(device)
        lr = torch.tensor([1e-2, 3e-3, 2e-2], device=device) * (i + 1) / 12
        if i == 6:
            running[1] = False  # a proposal stops mid-run, in place, as the trainer does
        losses.append(step(tokens, mask, lr).cpu())
    state = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return state, losses, step


def test_eager_step_freezes_a_stopped_member_exactly() -> None:
    state, _, step = _run(torch.device("cpu"), capture=False)
    assert step.mode == "eager" and step.reason == "eager on purpose"
    again, _, _ = _run(torch.device("cpu"), capture=False, steps=6)
    # member 1 stopped at step 6: after it, its weights never moved again
    for name, p in state.items():
        assert torch.equal(p[1], again[name][1]), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_captured_step_matches_eager_on_cuda() -> None:
    eager, eager_losses, _ = _run(CUDA, capture=False)
    captured, cap_losses, step = _run(CUDA, capture=True)
    assert step.mode == "captured", step.reason
    assert step.done > EAGER_STEPS
    for le, lc in zip(eager_losses, cap_losses, strict=True):
        torch.testing.assert_close(lc, le, rtol=1e-5, atol=1e-6)
    for name, p in eager.items():
        torch.testing.assert_close(captured[name], p, rtol=1e-4, atol=1e-5, msg=name)
