"""`arithsweep bench`'s tiny-model rows: training layouts for sub-100-parameter adders, side by
side in one run, against a plain PyTorch loop of the same model.

At the AdderBoard frontier (36-150 parameters) a step is overhead and memory traffic, not
arithmetic, so the layout that pays for 700-parameter models need not pay here. Two models:

- the 87-parameter add10 model of the tiny-models issue (`pad,revans,revops,nodelim`; d3, one
  head of width 4, value width 4, SwiGLU d_ff 2, one RMS weight for every norm, K = V, tied
  embeddings, RoPE base 3);
- the 60-parameter model `arithsweep search --task add10` found (entry 20: K = Q turned by one
  angle, O = Q^T, digits on an arc, SwiGLU down = up^T turned, shared QK-norm).

Each layout trains for the same number of examples through `train()` (sampling, forward,
backward, AdamW; one closing evaluation on 256 problems), after a short warm-up run of the
same layout: the reference layout (the PyTorch model, `layout: reference`) packed several ways,
the tiny layout (`layout: tiny`, core/model/tiny_layout.py), and `train`'s own choice for 8
seeds (`layout: auto`, the default). The plain loop is `PlainAdder` below with
`torch.optim.AdamW`, the model a reader would write with `nn.Embedding`,
`scaled_dot_product_attention` and `nn.Linear`. Ratios are to the reference layout's 1 seed, to
its best packing (what training used before the tiny layout) and to the plain loop.

Then, without --quick, where the tiny layout stops paying: one-block add10 models of growing
width, 8 seeds, tiny vs reference (`crossover_rows`; training.train.TINY_MAX_PARAMS).

    arithsweep bench            # these rows come after the packing rows
    arithsweep bench --quick
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import get_task
from arithsweep.core.model.model import ModelConfig, count_params
from arithsweep.core.training.population import train

BATCH = 256  # per seed, as the issue measured
# (name, seeds, batch per seed, compile, layout); the first is the `vs 1 seed` base
LAYOUTS = (("reference, 1 seed", 1, BATCH, False, "reference"),
           ("reference, 4 seeds packed", 4, BATCH, False, "reference"),
           ("reference, 8 seeds packed", 8, BATCH, False, "reference"),
           ("reference, 64 seeds packed", 64, BATCH, False, "reference"),
           ("reference, 1 seed, batch 1024", 1, 1024, False, "reference"),
           ("reference, 1 seed, torch.compile", 1, BATCH, True, "reference"),
           ("tiny, 1 seed", 1, BATCH, False, "tiny"),
           ("tiny, 8 seeds packed", 8, BATCH, False, "tiny"),
           ("tiny, 64 seeds packed", 64, BATCH, False, "tiny"),
           ("default (train's choice), 8 seeds", 8, BATCH, False, "auto"))
QUICK = (0, 2, 7, 9)  # --quick: enough rows to see the ratio
# one-block add10 shapes of growing width for the crossover rows: (d_model, heads, d_ff)
WIDTHS = ((7, 1, 14), (16, 2, 32), (32, 4, 64), (64, 4, 128))


def layouts_for(device: str, quick: bool) -> list[tuple]:
    """The LAYOUTS rows measured on `device`: the tiny kernel is C for CPUs, so a GPU bench
    measures the reference layouts (and train's own choice) only."""
    rows = [LAYOUTS[i] for i in QUICK] if quick else list(LAYOUTS)
    return rows if device == "cpu" else [r for r in rows if r[4] != "tiny"]


def tiny_models() -> list[tuple[str, Any, ModelConfig]]:
    """(label, task, config) of the two bench models (see the module docstring)."""
    t87 = get_task("add10", "pad,revans,revops,nodelim")
    m87 = ModelConfig(vocab_size=t87.vocab_size, n_ctx=t87.n_ctx, n_layers=1, d_model=3,
                      n_heads=1, d_head=4, d_vhead=4, d_ff=2, activation="swiglu", norm="rms",
                      share_norms=True, tie_kv=True, tie_embeddings=True, pos="rope",
                      rope_base=3.0)
    t60 = get_task("add10", "pad,revans,revops,delim,zeros")
    m60 = ModelConfig(vocab_size=t60.vocab_size, n_ctx=t60.n_ctx, n_layers=1, d_model=3,
                      n_heads=1, d_head=4, d_vhead=4, d_ff=4, activation="swiglu", norm="rms",
                      share_norms=True, tie_embeddings=True, pos="rope", rope_base=3.0,
                      qk_norm="shared", tie_k="rotated", tie_o=True, embed="arc",
                      mlp_down="up_t_rot")
    return [("87p", t87, m87), ("60p", t60, m60)]


class PlainAdder(nn.Module):
    """The 87-parameter model written plainly: embedding 30 (tied unembedding), one RMS weight
    3 for all three norms, Q 12, K = V 12, O 12, SwiGLU gate/up/down 18."""

    def __init__(self, vocab: int, d: int = 3, dh: int = 4, ff: int = 2, base: float = 3.0):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.norm = nn.Parameter(torch.ones(d))
        self.q, self.kv = nn.Linear(d, dh, bias=False), nn.Linear(d, dh, bias=False)
        self.o = nn.Linear(dh, d, bias=False)
        self.gate, self.up = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)
        self.register_buffer("inv_freq", base ** (-torch.arange(0, dh, 2).float() / dh))

    def _rms(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * self.norm

    def _rope(self, x: Tensor) -> Tensor:  # (B, T, dh), rotate-half pairs
        ang = torch.arange(x.shape[1], device=x.device)[:, None] * self.inv_freq  # (T, dh/2)
        cos, sin = ang.cos(), ang.sin()
        a, b = x.chunk(2, -1)
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

    def forward(self, tokens: Tensor) -> Tensor:  # (B, T) -> logits (B, T, V)
        x = self.emb(tokens)  # (B, T, d)
        h = self._rms(x)
        k = self.kv(h)
        att = F.scaled_dot_product_attention(self._rope(self.q(h))[:, None],
                                             self._rope(k)[:, None], k[:, None], is_causal=True)
        x = x + self.o(att[:, 0])
        h = self._rms(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return self._rms(x) @ self.emb.weight.T


def plain_loop(task, examples: int, seed: int = 0) -> float:
    """Examples/s of PlainAdder trained by a plain loop (sample, encode, step) on one seed."""
    torch.manual_seed(seed)
    model = PlainAdder(task.vocab_size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    steps = max(1, examples // BATCH)
    t0 = time.perf_counter()
    for _ in range(steps):
        tokens, mask = task.encode(*task.sample(BATCH, gen, "uniform"))
        logits = model(tokens[:, :-1])  # (B, T-1, V)
        ce = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
        loss = (ce * mask.flatten()).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return steps * BATCH / (time.perf_counter() - t0)


def _layout(task, cfg: ModelConfig, k: int, batch: int, compile_: bool, layout: str,
            examples: int, device: str) -> tuple[float, str]:
    """(examples/s, the layout train used and why)."""
    def run(steps: int):
        tc = TrainConfig(steps=steps, seeds=k, batch_size=batch, eval_every=10**9,
                         eval_size=256, early_stop=False, warmup=10, compile=compile_,
                         device=device, layout=layout)
        t0 = time.perf_counter()
        r = train(task, cfg, tc)
        return r.examples / (time.perf_counter() - t0), f"{r.layout} ({r.layout_why})"

    run(5)  # warm caches, the allocator (and the compilers' on-disk caches) once
    return run(max(5, examples // (k * batch)))


def tiny_rows(quick: bool, device: str,
              log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Examples/s of every layout on both bench models and of the plain loop (87p only), with
    each figure as a ratio to `1 seed` and to the plain loop, measured in this one run."""
    examples = 2**15 if quick else 2**19
    layouts = layouts_for(device, quick)
    rows: list[dict[str, Any]] = []
    for label, task, cfg in tiny_models():
        mine: list[dict[str, Any]] = []
        # the plain loop is a CPU program: a ratio to it is only a ratio on a CPU bench
        plain = plain_loop(task, examples) if label == "87p" and device == "cpu" else None
        if plain is not None:
            n_plain = sum(p.numel() for p in PlainAdder(task.vocab_size).parameters())
            mine.append({"model": label, "params": n_plain, "layout": "plain PyTorch loop",
                         "examples_per_s": plain})
        figures = [(name, *_layout(task, cfg, k, b, c, lay, examples, device))
                   for name, k, b, c, lay in layouts]
        base = figures[0][1]
        best_ref = max(eps for name, eps, _ in figures if name.startswith("reference"))
        for name, eps, used in figures:
            mine.append({"model": label, "params": count_params(cfg), "layout": name,
                         "used": used, "examples_per_s": eps, "vs_1_seed": eps / base,
                         "vs_best_reference": eps / best_ref,
                         "vs_plain": eps / plain if plain else None})
        for r in mine if log else ():
            extra = "" if "vs_1_seed" not in r else (
                f", {r['vs_best_reference']:.2f}x best reference"
                + (f", {r['vs_plain']:.2f}x plain" if r["vs_plain"] else ""))
            log(f"tiny {label} ({r['params']} p) {r['layout']}: "
                f"{r['examples_per_s']:,.0f} ex/s{extra}")
        rows += mine
    return rows


def crossover_rows(device: str, log: Callable[[str], None] | None = None,
                   ) -> list[dict[str, Any]]:
    """Tiny vs reference layout, 8 seeds, for one-block add10 models of growing width (layer
    norm, learned positions, ReLU: the add10-742 recipe's family), 2^15 examples each."""
    task = get_task("add10", "pad,revans,revops,delim")
    rows = []
    for d, h, ff in WIDTHS:
        cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, d_model=d, n_heads=h,
                          d_ff=ff, norm="layer", activation="relu", pos="learned")
        eps = {lay: _layout(task, cfg, 8, BATCH, False, lay, 2**15, device)[0]
               for lay in ("reference", "tiny")}
        rows.append({"params": count_params(cfg), "d_model": d, "reference": eps["reference"],
                     "tiny": eps["tiny"], "tiny_vs_reference": eps["tiny"] / eps["reference"]})
        if log:
            log(f"crossover {rows[-1]['params']} p: tiny {rows[-1]['tiny_vs_reference']:.2f}x "
                "reference")
    return rows
