"""Where the same seed gives the same weights (docs/training.md): the tiny kernel's numbers do
not depend on the instruction set it is built for nor on the compiler, because contraction
into fused multiply-adds is pinned off (the kernel's own fused multiply-adds, from arithmetic 4
on, are written out: one rounding on every machine), nor do the ties' (tiny_ties.c, from
arithmetic 5 on); so a tiny-layout run repeats bit for bit on any x86-64 machine with AVX2 or
AVX-512 (same arithsweep and torch). Each build is cached under its own key. The reference
layout repeats on one machine kind only: torch picks its kernels by CPU.

    .venv/bin/python -m pytest tests/test_kernel_target.py -q
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import cpu_has

import arithsweep.core.model.tiny_layout as TL
import arithsweep.core.model.tiny_ties as TT
from arithsweep.core.config import ModelConfig
from arithsweep.core.model.model import ArithTransformer

pytestmark = pytest.mark.skipif(TL.load_error() is not None,
                                reason=f"tiny kernel unavailable: {TL.load_error()}")


AVX2 = cpu_has("avx2", "fma", "bmi2")  # what an x86-64-v3 build needs
# the 44-p shape's options: arc digits, K from Q, V = Q, O = Q^T, QK-norm, RoPE, SwiGLU
CFG = dict(vocab_size=14, n_ctx=35, n_layers=1, d_model=3, n_heads=1, d_head=4, d_vhead=4,
           d_ff=2, activation="swiglu", norm="rms", share_norms=True, tie_embeddings=True,
           pos="rope", rope_base=3.0, rope_pairs="interleaved", qk_norm="head", embed="arc",
           tie_k="q", tie_v=True, tie_o=True, arc_init=[2.5, -1.2, 0.29])
# widths the kernel has no specialised tile for (its generic one), grouped K/V heads, GELU (the
# erf polynomial), LayerNorm with its shift, untied embeddings, half-split RoPE
CFG_ANY = dict(vocab_size=14, n_ctx=35, n_layers=1, d_model=6, n_heads=4, n_kv_heads=2,
               d_head=2, d_vhead=3, d_ff=5, activation="gelu", norm="layer", pos="rope",
               rope_base=10.0, tie_embeddings=False)


def _loss_and_grads(monkeypatch, tmp_path, target: str, cc: str | None = None,
                    cfg: dict = CFG):
    """(loss bytes, gradient bytes) of one batch through the kernel built for `target`."""
    monkeypatch.setenv("ARITHSWEEP_CACHE", str(tmp_path))
    monkeypatch.setenv(TL.TARGET_ENV, target)
    monkeypatch.delenv(TL.CFLAGS_ENV, raising=False)  # the default build, whatever the shell adds
    if cc:
        monkeypatch.setenv("CC", cc)
    for lib in (TL, TT):  # the kernel and the ties (tiny_ties.c: the 44 p's) for `target`
        monkeypatch.setattr(lib._native, "lib", None)
        monkeypatch.setattr(lib._native, "why", None)
    assert TL.load_error() is None, TL.load_error()
    torch.manual_seed(0)
    model = ArithTransformer(ModelConfig(**cfg), k=3)
    with torch.no_grad():  # weights off their init, so every path carries real numbers
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 14, (70, 35), generator=gen)  # (B, T): 5 tiles, one padded
    mask = (torch.rand(70, 34, generator=gen) < 0.4).float()
    loss = TL.tiny_loss(model, tokens, mask)  # (K,)
    loss.sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    return loss.detach().numpy().tobytes(), grads.numpy().tobytes()


def test_each_build_has_its_own_cache_key(monkeypatch):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc
    paths = set()
    for target, extra in (("native", ""), ("x86-64-v3", ""), ("x86-64-v4", ""),
                          ("native", "-ffp-contract=fast")):
        monkeypatch.setenv(TL.TARGET_ENV, target)
        monkeypatch.setenv(TL.CFLAGS_ENV, extra)
        assert f"-march={target}" in TL.build_flags() and "-ffp-contract=off" in TL.build_flags()
        paths.add(TL.library_path(cc, TL.build_flags()))
    assert len(paths) == 4


def test_a_bad_target_is_said_and_training_falls_back(monkeypatch, tmp_path):
    monkeypatch.setenv("ARITHSWEEP_CACHE", str(tmp_path))
    monkeypatch.setenv(TL.TARGET_ENV, "native; rm -rf ~")
    monkeypatch.setattr(TL._native, "lib", None)
    monkeypatch.setattr(TL._native, "why", None)
    assert "is not an instruction set name" in TL.load_error()


@pytest.mark.skipif(not AVX2, reason="an x86-64-v3 build needs AVX2 and FMA")
@pytest.mark.parametrize("cfg", [CFG, CFG_ANY], ids=["44p-fixed-tile", "generic-tile"])
def test_an_avx2_build_gives_the_native_builds_bits(monkeypatch, tmp_path, cfg):
    """On an AVX-512 machine native is AVX-512 (16 lanes in one register), v3 AVX2 (two
    registers): the same loss and gradients to the last bit, the kernel's explicit fused
    multiply-adds included (arithmetic 4). Likewise x86-64-v4's build and Clang's, where a
    Clang is installed."""
    native = _loss_and_grads(monkeypatch, tmp_path, "native", cfg=cfg)
    assert _loss_and_grads(monkeypatch, tmp_path, "x86-64-v3", cfg=cfg) == native
    if cpu_has("avx512f", "avx512bw", "avx512dq", "avx512vl"):
        assert _loss_and_grads(monkeypatch, tmp_path, "x86-64-v4", cfg=cfg) == native
    for clang in ("clang", "clang-14", "clang-15", "clang-16", "clang-17", "clang-18"):
        if path := shutil.which(clang):
            assert _loss_and_grads(monkeypatch, tmp_path, "x86-64-v3", path, cfg=cfg) == native
            assert _loss_and_grads(monkeypatch, tmp_path, "native", path, cfg=cfg) == native
            break


TRAIN = """
import hashlib, sys
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.population import train
task, m, t = build_configs(None, None, sys.argv[1], {"seeds": 2, "steps": 120,
    "eval_every": 60, "early_stop": False, "curriculum": None, "layout": "tiny"})
r = train(task, m, t)
h = hashlib.sha256()
for i in range(2):
    for n, v in sorted(r.model.member_state(i).items()):
        h.update(v.numpy().tobytes())
print(h.hexdigest())
"""


_PINNED = (TL.TARGET_ENV, TL.CFLAGS_ENV, "ATEN_CPU_CAPABILITY")


def _trained(tmp_path, **env) -> str:
    run = subprocess.run(
        [sys.executable, "-c", TRAIN, str(Path(__file__).parent.parent / "recipes" / "anchors"
                                         / "tbukic-44.yaml")],
        # the default build and torch's own kernels, whatever the shell sets (the flags could
        # turn contraction back on)
        env={**{k: v for k, v in os.environ.items() if k not in _PINNED},
             "ARITHSWEEP_CACHE": str(tmp_path), **env}, capture_output=True,
        text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.strip()


@pytest.mark.slow
@pytest.mark.skipif(not AVX2, reason="an x86-64-v3 build needs AVX2 and FMA")
def test_a_run_repeats_on_an_avx2_machine(tmp_path):
    """What an AVX2-only machine runs, run here: the kernel built for x86-64-v3 and torch's
    AVX2 kernels. The 44-p recipe's run (Grokfast, decay drops, clipping, AdamW) ends with
    the weights of the native build with torch's own choice, to the last bit."""
    here = _trained(tmp_path)
    assert here == _trained(tmp_path)  # the same machine, twice
    assert _trained(tmp_path, ARITHSWEEP_KERNEL_TARGET="x86-64-v3",
                    ATEN_CPU_CAPABILITY="avx2") == here


def test_each_checkpoint_says_where_it_repeats_and_its_section_says_so(add2_trained):
    """The promise travels with the weights: meta.repeats in config.json, by the run's layout,
    and the published section's retrain header reads it (an entry from before it: other
    floats)."""
    import json

    from arithsweep.core.training.train import ANY_X86, ONE_KIND, repeats
    from arithsweep.leaderboard.publish import retrain_header

    result, path = add2_trained
    meta = json.loads((path / "config.json").read_text())["meta"]
    assert meta["repeats"] == repeats(result.layout, result.device)
    assert repeats("tiny", "cpu") == ANY_X86 and repeats("reference", "cpu") == ONE_KIND
    assert repeats("reference", "cuda") == ONE_KIND
    assert ANY_X86 in retrain_header({"meta": {"repeats": ANY_X86}})
    assert "other floats" in retrain_header({"meta": {}})
