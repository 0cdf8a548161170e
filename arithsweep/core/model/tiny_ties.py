"""The tiny layout's ties in C: owned numbers -> effective weights, and their gradients back.

A tiny-layout step forms its effective weights (`tiny_layout.effective_weights`: K = rot(Q),
V = Q, O = Q^T, the digit arc, gate = a up, down = rot(up^T), a shared norm gain, ...) from a
few dozen numbers a member. Formed by torch and carried back by autograd, that was ~200 tiny
torch ops a step, each costing more in dispatch than in arithmetic: ~0.6 ms of a 6-ms 36-p
64-seed step (docs/benchmarks.md). `tiny_ties.c` does both directions for the whole pack in
one call each: `Ties.forward` before the kernel, `Ties.backward` in the kernel's autograd
Function (tiny_layout._TinyLoss), which hands the owned tensors' gradients to autograd.
Its numbers are arithmetic 5's (core/arithmetic.py): each rounded in float32 as the C file
writes it, cos and sin libm's double ones rounded, per member in a fixed order.

Covered (`Ties.of` returns None otherwise, and the step forms the weights in torch with
autograd, as before): every rule of the `tbukic` search space and the 36/44 anchors: embed
arc or arc2 tied to the unembedding, K = Q / rotated (even head width) / scaled, V = Q,
O = Q^T, QK-norm head / shared / scalar / none, one shared RMS norm (a vector or scalar gain),
the MLP's gate own / tied (a number, a number per hidden unit, or none) or absent (relu),
down own / up^T / rot(up^T), full rank, no biases, positions by RoPE or none. Other rules
(token tables, untied unembeddings, low rank, learned positions, own norms, K/V heads,
up_t_scaled, ...) keep the torch path. `tests/test_tiny_ties.py` checks every covered rule's
weights and gradients against torch's autograd.

    from arithsweep.core.model.tiny_ties import Ties
    ties = Ties.of(model)          # None: this model's rules keep torch's path
    w = ties.forward()             # effective_weights(model), detached
    eff = ties.c_eff               # the addresses of forward's weights, for its backward
    grads = ties.backward(g, offs, present, eff)  # g (K, G): the kernel's gradients
"""

from __future__ import annotations

import ctypes
import weakref
from pathlib import Path

import torch
from torch import Tensor

from arithsweep.core import native
from arithsweep.core.model import tiny_step
from arithsweep.core.model.weights import arc_radius

_SOURCE = Path(__file__).with_name("tiny_ties.c")
# the C file's dims, rule codes, owned tensors (R_*) and effective weights (W_*)
(D_K, D_V, D_D, D_TOK, D_N, D_QK, D_FF, D_EMBED, D_TIEK, D_PAIRS, D_QKN, D_NORMW, D_GATE,
 D_DOWN) = range(14)
TIE_K = {"q": 0, "rotated": 1, "scaled": 2}
QK_NORM = {"none": 0, "head": 1, "shared": 2, "scalar": 3}
DOWN = {"own": 1, "up_t": 2, "up_t_rot": 3}
N_RAW, N_EFF = 10, 10
W_E, W_G, W_Q, W_K, W_O, W_QN, W_KN, W_GATE, W_UP, W_DOWN = range(N_EFF)
# model -> its Ties: a step asks twice (loss, evaluation), and building one costs ~20 us of
# Python; weak, so a dropped model's entry goes with it
_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def load_error() -> str | None:
    """None once the ties' C is built and loaded (the kernel's flags), else why not."""
    return _native.error()


def _declare(lib: ctypes.CDLL) -> None:
    p = ctypes.c_void_p
    lib.ties_forward.argtypes = [p, ctypes.c_float, p, p, p]
    lib.ties_backward.argtypes = [p, ctypes.c_float, p, p, p, p, ctypes.c_int64, p, p]
    lib.ties_forward.restype = lib.ties_backward.restype = None


_native = native.Library(_SOURCE, tiny_step.build_flags, "the tiny layout's ties", _declare)


def _unsupported(model) -> bool:
    cfg = model.cfg
    a, m = model.layers[0].attn, model.layers[0].mlp
    mlp = m is not None and bool(cfg.d_ff)
    return (cfg.embed not in ("arc", "arc2") or not cfg.tie_embeddings or cfg.unembed_head
            or cfg.tok_dims < 2 or cfg.tie_kv or not (cfg.tie_v and cfg.tie_o)
            or cfg.v_from_head or cfg.kv_heads != cfg.n_heads or cfg.qk_head != cfg.v_head
            or cfg.rank_of("q") or cfg.rank_of("mlp") or any(a.q.pad)
            or cfg.pos not in ("rope", "none") or cfg.norm != "rms"
            or model.shared_norm is None or cfg.tie_k not in TIE_K
            or (cfg.tie_k == "rotated" and cfg.qk_head % 2)
            or (mlp and cfg.mlp_down not in DOWN)
            or (mlp and cfg.mlp_down == "up_t_rot" and cfg.d_ff % 2))


class Ties:
    """One model's covered rules and owned tensors (`params`, in the C file's R_* order,
    None where the model has none), their addresses read afresh each call; what depends
    only on the config (dims, shapes, the C arrays' slots) is formed once."""

    def __init__(self, model) -> None:
        cfg = self.cfg = model.cfg
        a, m, emb = model.layers[0].attn, model.layers[0].mlp, model.embed
        self.K, self.mlp = model.k, m is not None and bool(cfg.d_ff)
        qkn = {"head": ("q_norm", "k_norm"), "shared": ("qk_norm", ""),
               "scalar": ("qk_norm_scale", "")}.get(cfg.qk_norm, ("", ""))
        norm = model.shared_norm
        gate = up = down = None
        gate_code = 0
        if self.mlp:
            up = m.up.weight
            down = {"own": "down.weight", "up_t": "", "up_t_rot": "down_angle"}[cfg.mlp_down]
            down = m.down.weight if down == "down.weight" else getattr(m, down, None)
            if cfg.activation == "swiglu" and not cfg.tie_gate:
                gate, gate_code = m.gate.weight, 1
            elif cfg.activation == "swiglu":
                gate = getattr(m, "gate_scale", None)
                gate_code = {"none": 2, "scalar": 3, "vector": 4}[cfg.gate_scale]
        self.params: list[Tensor | None] = [
            emb.arc, getattr(emb, "extra", None), a.q.weight,
            {"q": None, "rotated": getattr(a, "k_angle", None),
             "scaled": getattr(a, "k_scale", None)}[cfg.tie_k],
            getattr(a, qkn[0], None) if qkn[0] else None,
            getattr(a, qkn[1], None) if qkn[1] else None,
            norm.gain if cfg.norm_weight == "scalar" else norm.weight, gate, up, down]
        n, d, qk, ff = cfg.n_heads * cfg.qk_head, cfg.d_model, cfg.qk_head, cfg.d_ff
        ff = ff if self.mlp else 0
        self.dims = torch.tensor(
            [self.K, cfg.vocab_size, d, cfg.tok_dims, n, qk, ff, cfg.embed == "arc2",
             TIE_K[cfg.tie_k], cfg.rope_pairs != "interleaved", QK_NORM[cfg.qk_norm],
             cfg.norm_weight == "scalar", gate_code, DOWN[cfg.mlp_down] if ff else 0],
            dtype=torch.int64)
        self.radius = arc_radius(cfg)
        self.pattern = (a.qk_pattern.float().contiguous() if cfg.qk_norm == "scalar"
                        else torch.zeros(1))
        V = cfg.vocab_size
        self.shapes = [(V, d), (d,), (n, d), (n, d), (d, n), (qk,), (qk,), (ff, d), (ff, d),
                       (d, ff)]
        self.eff: list[Tensor] = []
        for t in self.params:  # the C file reads them as float32 blocks
            assert t is None or (t.dtype == torch.float32 and t.is_contiguous())
        # formed once: the per-call ctypes and Size work was most of forward's Python
        self.sizes = [self.K * int(torch.Size(s).numel()) for s in self.shapes]
        self.total = sum(self.sizes)
        self.c_dims = ctypes.c_void_p(self.dims.data_ptr())
        self.c_pattern = ctypes.c_void_p(self.pattern.data_ptr())
        self.raw_sizes = [0 if t is None else t.numel() for t in self.params]

    def _valid(self, model) -> bool:
        """Whether this (cached) Ties still reads `model`'s tensors: the same config, and the
        same parameter objects (an optimiser's assumption too; `.data` may change)."""
        return self.cfg is model.cfg and self.params[2] is model.layers[0].attn.q.weight \
            and self.params[0] is model.embed.arc

    @classmethod
    def of(cls, model) -> Ties | None:
        """This model's Ties, or None where a rule is not covered (torch's path then)."""
        if load_error() is not None:
            return None
        ties = _cache.get(model)
        if ties is not None and ties._valid(model):
            return ties
        if model.layers[0].attn is None or _unsupported(model):
            return None
        ties = _cache[model] = cls(model)
        return ties

    def _raw(self) -> ctypes.Array:
        return (ctypes.c_void_p * N_RAW)(*[0 if t is None else t.data_ptr()
                                           for t in self.params])

    @torch.no_grad()
    def forward(self) -> list[Tensor | None]:
        """effective_weights(model)'s list (detached), from one C call."""
        K, cfg = self.K, self.cfg
        # a fresh block each call: the kernel's autograd context keeps the last one's views
        buf = torch.empty(self.total)
        self.eff = [t.view(K, *s) for t, s in zip(buf.split(self.sizes), self.shapes)]
        lib = _native.lib
        assert lib is not None
        self.c_eff = (ctypes.c_void_p * N_EFF)(*[t.data_ptr() for t in self.eff])
        lib.ties_forward(self.c_dims, self.radius, self.c_pattern, self._raw(), self.c_eff)
        e = self.eff
        qn, kn = (e[W_QN], e[W_KN]) if cfg.qk_norm != "none" else (None, None)
        gate = e[W_GATE] if self.mlp and cfg.activation == "swiglu" else None
        up, down, g2 = (e[W_UP], e[W_DOWN], e[W_G]) if self.mlp else (None, None, None)
        gf = e[W_G] if cfg.final_norm else None
        return [e[W_E], None, e[W_G], e[W_Q], e[W_K], e[W_Q], qn, kn, e[W_O], g2, gate, up,
                down, gf, e[W_E], None, None, None]

    def backward(self, g: Tensor, offs: list[int], present: list[bool],
                 eff: ctypes.Array | None = None) -> list[Tensor | None]:
        """The gradient of each of `params` (None where it is None) from the kernel's
        gradients g (K, G): effective weight i's at offs[i] where present[i]. eff: the
        `c_eff` of the forward this is the backward of (a cached Ties may have run another
        since, an evaluation's), its weights kept alive by the caller; None: the last one."""
        K = self.K
        buf = torch.empty(sum(self.raw_sizes))  # each tensor's block whole: (K, ...) contiguous
        grads = [None if t is None else b.view_as(t)
                 for t, b in zip(self.params, buf.split(self.raw_sizes))]
        gptr = (ctypes.c_void_p * N_RAW)(*[0 if t is None else t.data_ptr() for t in grads])
        # a C int64 array, not a torch tensor: the same bytes without a torch call
        off = (ctypes.c_int64 * len(offs))(*[o if p else -1 for o, p in zip(offs, present)])
        lib = _native.lib
        assert lib is not None and g.is_contiguous() and g.shape[0] == K
        lib.ties_backward(self.c_dims, self.radius, self.c_pattern, self._raw(),
                          self.c_eff if eff is None else eff,
                          ctypes.c_void_p(g.data_ptr()), g.shape[1], off, gptr)
        return grads
