"""The tiny layout's optimiser tail in one C call (model/tiny_step.py, arithmetic 3).

It must compute the torch tail's formulas (Grokfast, the NaN guard, clipping, AdamW with a
per-member lr and decay) to float32 rounding, keep a member that must not move exactly put,
give a member the same bits alone and in any pack, and give the same bits whether built for
AVX2 or AVX-512 (contraction off, as the kernel: tests/test_kernel_target.py).

    .venv/bin/python -m pytest tests/test_native_step.py -q -n 0
"""

from __future__ import annotations

import math
import shutil
from dataclasses import replace

import pytest
import torch
from helpers import cpu_has

import arithsweep.core.model.tiny_layout as TL
import arithsweep.core.model.tiny_step as TS
from arithsweep.core.training.optim import PackAdamW
from arithsweep.core.training.recipe import GrokfastEMA

pytestmark = pytest.mark.skipif(TL.load_error() is not None,
                                reason=f"tiny layout unavailable: {TL.load_error()}")

K = 5
SHAPES = [(3,), (1,), (4,), (3, 4), (3, 2), (14, 3)]  # one member's tensors
# member 1's gradient turns NaN at step 2 (it dies), member 3 has lr 0, member 4 is stopped;
# the clips: on, on, off, tiny (always acts), large (never acts)
CLIP = [0.5, 1.0, 0.0, 1e-3, 50.0]
LR = [1e-2, 3e-2, 2e-2, 0.0, 1e-2]
WD = [0.1, 0.0, 0.3, 0.5, 0.2]
ALPHA, LAM, B1, B2, EPS = 0.9, 2.0, 0.9, 0.98, 1e-8


def _f(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)  # a constant rounded once, as the C takes it


def reference_tail(st: dict, grads: list[torch.Tensor], mode: str | None, decay: list[bool],
                   clip: torch.Tensor, lr: torch.Tensor, running: torch.Tensor) -> None:
    """The tail's formulas written plainly in torch, on `st` (params, m, v, ema, t, wd,
    alive, grads), one op per rounding."""
    g = [x.clone() for x in grads]
    if mode is not None:
        first = st["ema"] is None
        if first:
            st["ema"] = [torch.zeros_like(x) for x in g]
        for i, x in enumerate(g):
            e = x.clone() if first and mode == "grad" else \
                _f(ALPHA) * st["ema"][i] + _f(1 - ALPHA) * x
            st["ema"][i] = e
            g[i] = x + _f(LAM) * e
    sq = sum(x.double().square().reshape(K, -1).sum(1) for x in g)  # (K,)
    st["alive"] &= torch.isfinite(sq)
    s = torch.where(clip > 0, (clip.double() / (sq.sqrt() + 1e-6)).clamp(max=1.0), 1.0)
    scale = torch.where(st["alive"], s.float(), _f(0.0))
    g = [torch.where(st["alive"].view(-1, *[1] * (x.dim() - 1)),
                     x * scale.view(-1, *[1] * (x.dim() - 1)), _f(0.0)) for x in g]
    st["t"] += 1
    bc1 = _f(1 - B1 ** st["t"])
    bc2s = _f(math.sqrt(1 - B2 ** st["t"]))
    lk = torch.where(st["alive"] & running, lr, _f(0.0))  # (K,)
    for i, x in enumerate(g):
        shape = (-1, *[1] * (x.dim() - 1))
        m = _f(B1) * st["m"][i] + _f(1 - B1) * x
        v = _f(B2) * st["v"][i] + _f(1 - B2) * (x * x)
        d = v.sqrt() / bc2s + _f(EPS)
        keep = (1 - lk * st["wd"]) if decay[i] else torch.ones(K)
        moved = st["p"][i] * keep.view(shape) + (-lk / bc1).view(shape) * (m / d)
        st["p"][i] = torch.where((lk != 0).view(shape), moved, st["p"][i])
        st["m"][i], st["v"][i] = m, v
    st["grads"] = g


def _grads(gen: torch.Generator, step: int) -> list[torch.Tensor]:
    gs = [torch.randn(K, *s, generator=gen) * 10.0 ** (i % 3 - 1) for i, s in enumerate(SHAPES)]
    if step == 2:
        gs[3][1, 0, 0] = float("nan")
    return gs


def _run_native(mode: str | None, scope: str, clip, steps: int = 4, regather: bool = True):
    """(native results, reference results): `steps` tail steps on the same random data."""
    gen = torch.Generator().manual_seed(11)
    params = [torch.randn(K, *s, generator=gen) for s in SHAPES]
    ref = {"p": [p.clone() for p in params], "m": [torch.zeros_like(p) for p in params],
           "v": [torch.zeros_like(p) for p in params], "ema": None, "t": 0,
           "wd": torch.tensor(WD), "alive": torch.ones(K, dtype=torch.bool)}
    opt = PackAdamW(params, torch.tensor(WD), (B1, B2), EPS, scope=scope)
    decay = [any(p is q for q in opt.decay) for p in params]
    grok = GrokfastEMA(params, ALPHA, LAM, mode) if mode else None
    tail = TS.NativeTail(opt)
    alive = torch.ones(K, dtype=torch.bool)
    running = torch.tensor([True, True, True, True, False])
    lr = torch.tensor(LR)
    clip_t = clip if isinstance(clip, torch.Tensor) else torch.full((K,), float(clip))
    for step in range(steps):
        gs = _grads(gen, step)
        for p, g in zip(params, gs):
            if p.grad is None or (regather and step == 2):  # new tensors: gathered again
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
        tail(grok, clip, alive, running, lr)
        reference_tail(ref, gs, mode, decay, clip_t, lr, running)
    got = {"p": params, "m": opt.m, "v": opt.v, "grads": [p.grad for p in params],
           "ema": grok.ema if grok else None, "t": float(opt.t), "alive": alive}
    return got, ref


@pytest.mark.parametrize("mode", [None, "grad", "zero"])
@pytest.mark.parametrize("scope", ["matrices", "all"])
@pytest.mark.parametrize("clip", ["per member", 0.0, 0.3])
def test_the_native_tail_computes_the_torch_tails_formulas(mode, scope, clip):
    clip = torch.tensor(CLIP) if clip == "per member" else clip
    got, ref = _run_native(mode, scope, clip)
    assert got["t"] == ref["t"] == 4
    assert torch.equal(got["alive"], ref["alive"])
    assert got["alive"].tolist() == [True, False, True, True, True]
    for key in ("p", "m", "v", "grads") + (("ema",) if mode else ()):
        for i, (a, b) in enumerate(zip(got[key], ref[key])):
            ok = torch.isfinite(b)  # a dead member's Grokfast average is NaN in both
            assert torch.equal(torch.isfinite(a), ok), (key, i)
            torch.testing.assert_close(a[ok], b[ok], rtol=2e-6, atol=1e-7, msg=f"{key} {i}")
    # the dead member's gradients are exactly 0; members that must not move did not move
    gen = torch.Generator().manual_seed(11)
    start = [torch.randn(K, *s, generator=gen) for s in SHAPES]
    for p, p0, g in zip(got["p"], start, got["grads"]):
        assert torch.equal(g[1], torch.zeros_like(g[1]))
        for k in (3, 4):  # lr 0; stopped
            assert torch.equal(p[k], p0[k]), k
        assert not torch.equal(p[0], p0[0])


def test_a_member_gets_the_same_bits_alone_as_in_the_pack():
    """Member 0 of the pack above, stepped as a pack of one with its own numbers."""
    pack, _ = _run_native("zero", "matrices", torch.tensor(CLIP))
    gen = torch.Generator().manual_seed(11)
    params = [torch.randn(K, *s, generator=gen)[:1].clone() for s in SHAPES]
    opt = PackAdamW(params, torch.tensor(WD[:1]), (B1, B2), EPS)
    grok, tail = GrokfastEMA(params, ALPHA, LAM, "zero"), TS.NativeTail(opt)
    alive, running = torch.ones(1, dtype=torch.bool), torch.ones(1, dtype=torch.bool)
    for step in range(4):
        gs = _grads(gen, step)
        for p, g in zip(params, gs):
            p.grad = g[:1].clone()
        tail(grok, torch.tensor(CLIP[:1]), alive, running, torch.tensor(LR[:1]))
    for a, b in zip(params, pack["p"]):
        assert torch.equal(a[0], b[0])
    for a, b in zip(grok.ema, pack["ema"]):
        assert torch.equal(a[0], b[0])


def _tail_bytes(monkeypatch, tmp_path, target: str, cc: str | None = None) -> bytes:
    """Every number of a 4-step Grokfast run of the tail built for `target`, as bytes."""
    monkeypatch.setenv("ARITHSWEEP_CACHE", str(tmp_path))
    monkeypatch.setenv(TL.TARGET_ENV, target)
    monkeypatch.delenv(TS.CFLAGS_ENV, raising=False)  # the default build
    if cc:
        monkeypatch.setenv("CC", cc)
    monkeypatch.setattr(TS._native, "lib", None)
    monkeypatch.setattr(TS._native, "why", None)
    assert TS.load_error() is None, TS.load_error()
    assert f"-march={target}" in TS.build_flags() and "-ffp-contract=off" in TS.build_flags()
    got, _ = _run_native("grad", "all", torch.tensor(CLIP))
    return b"".join(x.numpy().tobytes() for key in ("p", "m", "v", "grads", "ema")
                    for x in got[key])


@pytest.mark.skipif(not cpu_has("avx2", "fma", "bmi2"), reason="an x86-64-v3 build needs AVX2")
def test_an_avx2_build_gives_the_native_builds_bits(monkeypatch, tmp_path):
    """Native (AVX-512 where the CPU has it), x86-64-v3 (AVX2), x86-64-v4 (AVX-512, where the
    CPU has it) and Clang's v3 build, where a Clang is installed: the same bits."""
    native = _tail_bytes(monkeypatch, tmp_path, "native")
    assert _tail_bytes(monkeypatch, tmp_path, "x86-64-v3") == native
    if cpu_has("avx512f", "avx512bw", "avx512vl", "avx512dq"):
        assert _tail_bytes(monkeypatch, tmp_path, "x86-64-v4") == native
    for clang in ("clang", "clang-14", "clang-15", "clang-16", "clang-17", "clang-18"):
        if path := shutil.which(clang):
            assert _tail_bytes(monkeypatch, tmp_path, "x86-64-v3", path) == native
            break


def test_without_the_tail_the_tiny_layout_is_unavailable(monkeypatch, tmp_path):
    """A tiny-layout run always takes the C tail (its floats are arithmetic 3's): where it
    cannot be built, `auto` trains in the reference layout and says why."""
    from arithsweep.core.config import ModelConfig, TrainConfig
    from arithsweep.core.training.train import choose_layout

    TL.load_error()  # the kernel itself loads
    monkeypatch.setattr(TS._native, "lib", None)
    monkeypatch.setattr(TS._native, "why", None)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("ARITHSWEEP_CACHE", str(tmp_path))
    why = TL.load_error()
    assert why is not None and "optimiser tail" in why
    cfg = ModelConfig(vocab_size=14, n_ctx=12, d_model=4, n_heads=1, d_ff=8)
    assert choose_layout(cfg, TrainConfig(), torch.device("cpu")) == ("reference", why)


@pytest.mark.parametrize("start", ["grad", "zero"])
def test_a_member_trains_to_the_same_bits_alone_and_in_a_mixed_pack(monkeypatch, start):
    """Through train_population, with Grokfast on, decay on every tensor, and clips that act:
    a 2-seed proposal alone and between two others (31 members beside it)."""
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train, train_population

    calls = []
    real = TS.NativeTail.__call__
    monkeypatch.setattr(TS.NativeTail, "__call__",
                        lambda self, *a: calls.append(1) or real(self, *a))
    task, m, base = build_configs("add2", None, None, {
        "d_model": 4, "n_heads": 1, "d_ff": 8, "steps": 24, "eval_every": 12, "seeds": 2,
        "batch_size": 64, "eval_size": 256, "early_stop": False, "layout": "tiny",
        "grokfast_alpha": 0.95, "grokfast_lambda": 2.0, "grokfast_start": start,
        "weight_decay_scope": "all"})
    me = replace(base, lr=1e-2, grad_clip=0.05, weight_decay=0.01, seed=0)
    before = replace(base, lr=3e-3, grad_clip=0.3, weight_decay=0.3, seed=100, seeds=3)
    after = replace(base, lr=2e-2, grad_clip=0.0, weight_decay=0.0, seed=7, seeds=27)
    alone = train(task, m, me)
    packed = train_population(task, m, [before, me, after])[1]
    assert alone.layout == packed.layout == "tiny" and len(calls) == 2 * 24
    for i in range(me.seeds):
        a, p = alone.model.member_state(i), packed.model.member_state(i)
        for name in a:
            assert torch.equal(a[name], p[name]), (i, name)
    assert [q.loss for q in alone.history] == [q.loss for q in packed.history]
