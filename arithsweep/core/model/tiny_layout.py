"""The tiny-model layout: a one-block model's training loss and gradients from one C kernel.

At the AdderBoard frontier (d_model 2-8, a few dozen to a few hundred parameters) a training
step in the reference layout is memory traffic: every PyTorch op streams a (d x B*T) or
(T x T) intermediate through memory for a handful of flops per element. `tiny_kernel.c` runs a
whole sequence, forward and backward, with L = 16 sequences side by side in vector lanes, so a
tile never leaves the cache. PyTorch still owns everything around it: the ties, low-rank
products and derived tables are formed by the model's own functions (`core/model/weights.py`)
into *effective* weights, the kernel returns the gradient of each, and autograd carries those
back to the parameters; for the tbukic family's ties one C call does each direction
instead (`tiny_ties.py`).
Grokfast, clipping and AdamW then run in one C call too (`tiny_step.py`, training's
`PackStep`).

The kernel is C with GCC/Clang vector extensions and no Python or torch headers, compiled
once per machine and CPU kind with the system C compiler into ~/.cache/arithsweep (or
$ARITHSWEEP_CACHE) and loaded with ctypes; without a compiler the layout is unavailable and
training uses the reference layout. Work is split into fixed chunks over as many Python
threads as torch had intra-op threads (ctypes releases the GIL) while torch itself runs on one
(`kernel_threads`). Training's evaluations use the kernel's forward too (`tiny_logits`).

    from arithsweep.core.model.tiny_layout import tiny_loss, unsupported
    unsupported(model.cfg, "cpu")                 # None, or why this model cannot use it
    losses = tiny_loss(model, tokens, mask, start)  # (K,), as training's reference loss
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

from arithsweep.core import native
from arithsweep.core.config import ABACUS_POSITIONS
from arithsweep.core.model import tiny_step, tiny_ties
from arithsweep.core.model.tiny_ties import Ties
from arithsweep.core.model.weights import attn_weights, mlp_weights, token_table
from arithsweep.core.native import TARGET_ENV, target  # noqa: F401 (TARGET_ENV: the tests)

LANES = 16  # sequences per tile: one AVX-512 register of float32 (two AVX2 ones)
CHUNK = 4  # tiles per unit of work: 64 sequences, so even one seed's batch feeds two threads
_SOURCE = Path(__file__).with_name("tiny_kernel.c")
# no -ffast-math: the vector code is explicit, so IEEE arithmetic costs nothing and keeps the
# kernel's numbers the reference layout's to float32 rounding
_FLAGS = ["-O3", "-fno-math-errno", "-shared", "-fPIC", f"-DL={LANES}"]
# more compiler flags, after ours (a test of another machine's rounding: -ffp-contract=fast
# builds what the kernel was before contraction was pinned); part of the cache key
CFLAGS_ENV = "ARITHSWEEP_KERNEL_CFLAGS"
(F_POS, F_NORM, F_QKNORM, F_ROPE, F_ROPE_IL, F_FINAL, F_RELU, F_SWIGLU, F_GELU, F_LAYER,
 F_NBIAS) = (1 << i for i in range(11))
N_WEIGHTS = 18  # effective_weights' list
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def unsupported(cfg, device: str | torch.device) -> str | None:
    """Why the model `cfg` cannot train in this layout on `device`, or None if it can."""
    if torch.device(device).type != "cpu":
        return "the tiny kernel is for CPUs"
    why = [(cfg.n_layers != 1, f"{cfg.n_layers} layers (one block only)"),
           (cfg.n_loops != 1, "looped blocks"),
           (cfg.attn_bias or cfg.mlp_bias or cfg.unembed_bias, "biases"),
           (cfg.pos in ABACUS_POSITIONS, "abacus positions (they read the tokens)"),
           (cfg.vocab_size > 256,
            f"a vocabulary of {cfg.vocab_size} (tokens are bytes: 256 at most)")]
    for bad, reason in why:
        if bad:
            return reason
    return load_error()


def load_error() -> str | None:
    """None once the kernel, the step's optimiser tail (tiny_step.py) and the ties
    (tiny_ties.py) are built and loaded, else why not (no C compiler, ...): a tiny-layout
    run takes all three, so that its floats are always one arithmetic's."""
    return _native.error() or tiny_step.load_error() or tiny_ties.load_error()


def build_flags() -> list[str]:
    """The compiler flags of this process's kernel build. Contraction of a*b+c into one fused
    multiply-add is pinned off: whether the compiler fuses depends on the target's instruction
    set, and a fused and an unfused step round differently. With it off, a build for AVX2 and
    one for AVX-512 give the same bits (tests/test_kernel_target.py)."""
    return [*_FLAGS, f"-march={target()}", "-ffp-contract=off",
            *os.environ.get(CFLAGS_ENV, "").split()]


def library_path(cc: str, flags: list[str]) -> Path:
    """Where the build of the kernel by compiler `cc` with `flags` is cached (native.py)."""
    return native.library_path(_SOURCE, cc, flags)




def _declare(lib: ctypes.CDLL) -> None:
    p = ctypes.c_void_p
    lib.tiny_offsets.argtypes = [p, p]
    lib.tiny_fwd_bwd.argtypes = [p, ctypes.c_float, ctypes.c_float, p, ctypes.c_int,
                                 p, p, p, p, p, p, p]
    lib.tiny_fwd_bwd.restype = None
    lib.tiny_logits.argtypes = [p, ctypes.c_float, ctypes.c_float, p, ctypes.c_int, p, p,
                                p, p, p]
    lib.tiny_logits.restype = None


_native = native.Library(_SOURCE, build_flags, "the tiny kernel", _declare)


def _threads(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size < n:
        _pool, _pool_size = ThreadPoolExecutor(n, thread_name_prefix="tiny-kernel"), n
    return _pool


def _pointers(w: list[Tensor | None]) -> tuple[list[Tensor | None], ctypes.Array]:
    """The weights as the kernel reads them (detached, contiguous; kept alive by the caller)
    and the C array of their addresses (NULL where absent)."""
    ws = [t if t is None or (not t.requires_grad and t.is_contiguous())  # the ties' are so
          else t.detach().contiguous() for t in w]
    return ws, (ctypes.c_void_p * N_WEIGHTS)(*[0 if t is None else t.data_ptr() for t in ws])


def _run(plan: _Plan, call: Callable[[int, int], None]) -> None:
    """call(chunks address, chunk count) on each thread's share of plan.chunks: the first
    share here, the rest on the pool, back when all are done."""
    b = plan.bounds

    def part(j: int) -> None:
        call(plan.chunks.data_ptr() + 16 * b[j], b[j + 1] - b[j])

    futures = [_threads(len(b) - 2).submit(part, j) for j in range(1, len(b) - 1)]
    part(0)
    for fut in futures:
        fut.result()


def effective_weights(model) -> list[Tensor | None]:
    """The N_WEIGHTS (K, ...) tensors the kernel reads, in its order: E, P, g1, Wq, Wk, Wv,
    q-norm, k-norm, Wo, g2, W_gate, W_up, W_down, g_final, U, then the LayerNorm shifts b1,
    b2, b_final. Formed by the model's own functions, so every tie and derived table is the
    reference layout's; P (the added position rows) is filled in by `tiny_loss`, which
    knows T. None where the model has no such tensor."""
    cfg, blk = model.cfg, model.layers[0]
    a, m = blk.attn, blk.mlp
    head = model.head.weight if cfg.unembed_head else None
    emb = token_table(model.embed, cfg)  # (K, V, d)
    wq, wk, wv, wo = attn_weights(a, cfg, head)
    if cfg.tie_kv:
        wk = wv = a.kv.matrix_t()
    shared = model.shared_norm

    def weight(norm, part: str = "weight") -> Tensor | None:
        return None if cfg.norm == "none" else getattr(shared if norm is None else norm, part)

    qn = kn = None
    if cfg.qk_norm != "none":
        qn, kn = (a.q_norm, a.k_norm) if cfg.qk_norm == "head" else (a.qk_norm,) * 2
    wg = wu = wd = g2 = b2 = None
    if m is not None and cfg.d_ff:
        wg, wu, wd = mlp_weights(m, cfg, head)
        g2, b2 = weight(blk.norm2), weight(blk.norm2, "bias")
    gf = bf = None
    if cfg.final_norm:
        gf, bf = weight(model.final_norm), weight(model.final_norm, "bias")
    u = emb if cfg.tie_embeddings else model.unembed.weight.transpose(1, 2)
    if cfg.unembed_head:
        u = torch.bmm(emb[..., :cfg.tok_dims], head.transpose(1, 2))
    return [emb, None, weight(blk.norm1), wq, wk, wv, qn, kn, wo, g2, wg, wu, wd, gf, u,
            weight(blk.norm1, "bias"), b2, bf]


class _Plan:
    """What a call of one shape and one set of members needs beyond its data, made once:
    the kernel's dims, the gradient offsets, and the work split into chunks of CHUNK tiles
    (member, first tile, end tile, output slot), spread over the threads."""

    def __init__(self, dims: tuple[int, ...], members: tuple[int, ...], threads: int):
        lib = _native.lib
        assert lib is not None
        self.dims = torch.tensor(dims, dtype=torch.int32)
        self.K, n_tiles = dims[10], dims[11]
        offs = torch.zeros(N_WEIGHTS + 1, dtype=torch.int32)
        lib.tiny_offsets(self.dims.data_ptr(), offs.data_ptr())
        self.offs, self.G = offs.tolist()[:N_WEIGHTS], int(offs[N_WEIGHTS])
        self.members = torch.tensor(members, dtype=torch.long)
        self.all = members == tuple(range(self.K))
        self.per = -(-n_tiles // CHUNK)  # chunks per member
        rows = [(k, c * CHUNK, min(n_tiles, (c + 1) * CHUNK)) for k in members
                for c in range(self.per)]
        self.chunks = torch.tensor([(*r, i) for i, r in enumerate(rows)],
                                   dtype=torch.int32).view(-1, 4)
        self.n_chunks = len(rows)
        n = min(max(1, threads), max(1, self.n_chunks))
        self.bounds = [self.n_chunks * j // n for j in range(n + 1)]


_plans: dict[tuple, _Plan] = {}


def _plan(dims: tuple[int, ...], members: tuple[int, ...], threads: int) -> _Plan:
    key = (dims, members, threads)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) > 64:  # a long search meets few shapes; stay bounded anyway
            _plans.clear()
        plan = _plans[key] = _Plan(dims, members, key[2])
    return plan


class _TinyLoss(torch.autograd.Function):
    """(K,) per-member mean masked cross entropy; forward computes the gradients too (a
    training loss is always differentiated), backward scales them by the incoming (K,)."""

    @staticmethod
    def forward(ctx, plan: _Plan, ties: Ties | None, tok: Tensor, mask: Tensor, msum: Tensor,
                cos: Tensor, sin: Tensor, scale: float, eps: float, *w: Tensor | None) -> Tensor:
        # tok (K or 1, B, Tt) uint8, mask (K or 1, B, Tm) 0/1 bytes, msum (K,) float64: each
        # member's answer positions (at least 1); w: the N_WEIGHTS effective weights, then
        # with `ties` its owned tensors, whose gradients its backward forms by hand
        lib, K, G = _native.lib, plan.K, plan.G
        assert lib is not None
        ws, ptrs = _pointers(w[:N_WEIGHTS])
        # every slot is written; NaN until then, so a kernel that could not run fails loudly
        parts = torch.full((max(1, plan.n_chunks), G), float("nan"))
        part_loss = torch.full((max(1, plan.n_chunks),), float("nan"), dtype=torch.float64)
        _run(plan, lambda chunks, n: lib.tiny_fwd_bwd(
            plan.dims.data_ptr(), eps, scale, chunks, n, tok.data_ptr(), mask.data_ptr(),
            ptrs, cos.data_ptr(), sin.data_ptr(), parts.data_ptr(), part_loss.data_ptr()))
        # per member: its chunks in order, so the sum is the same in any pack
        gm = parts[:plan.n_chunks].view(-1, plan.per, G)
        lm = part_loss[:plan.n_chunks].view(-1, plan.per)
        acc, lacc = gm[:, 0].clone(), lm[:, 0].clone()
        for c in range(1, plan.per):
            acc += gm[:, c]
            lacc += lm[:, c]
        if plan.all:
            grads, loss = acc, lacc
        else:
            grads, loss = torch.zeros(K, G), torch.zeros(K, dtype=torch.float64)
            grads[plan.members], loss[plan.members] = acc, lacc
        grads /= msum.view(K, 1).float()
        ctx.grads, ctx.offs, ctx.ws, ctx.ties = grads, plan.offs, ws, ties  # (K, G)
        # this forward's weights (ws keeps them): a cached Ties may run another forward first
        ctx.eff = ties.c_eff if ties is not None else None
        return (loss / msum).float()

    @staticmethod
    def backward(ctx, gout: Tensor):
        g = ctx.grads * gout.view(-1, 1)  # (K, G): one product, then each weight's view
        if ctx.ties is not None:  # the owned tensors' gradients, in one C call
            return (None,) * (9 + N_WEIGHTS) + tuple(
                ctx.ties.backward(g, ctx.offs, [t is not None for t in ctx.ws], ctx.eff))
        return (None,) * 9 + tuple(None if t is None else g[:, o:o + t[0].numel()].view_as(t)
                                   for o, t in zip(ctx.offs, ctx.ws))


def tiny_loss(model, tokens: Tensor, mask: Tensor, start: int = 0,
              active: Tensor | None = None) -> Tensor:
    """Training's reference loss (`training.train._loss_fn`) in the tiny layout: tokens
    (K, B, T) int, mask (K, B, T-1) -> (K,) mean cross entropy over answer tokens from
    `start` on, differentiable to every parameter. `active` (K,) bool: members outside it
    (stopped or failed) are not computed at all (loss and gradient 0). Needs
    `unsupported(cfg, "cpu")` to be None."""
    if (why := load_error()) is not None:
        raise RuntimeError(why)
    with kernel_threads() as threads:
        return _apply(model, tokens, mask, start, active, threads)


_kernel_threads = 0  # inside kernel_threads(): the threads torch had when it was entered


@contextlib.contextmanager
def kernel_threads() -> Iterator[int]:
    """Inside, torch runs on one thread and the kernel on the threads torch had (yielded).

    An OpenMP worker of torch spins for a while after each parallel op, on the core the
    kernel's second thread needs: 2 kernel threads beside 2-thread torch ran at half the speed
    of one. `tiny_loss` enters it itself; a training loop that wraps each whole step in it
    (population.py) keeps the step's other torch ops from waking the workers too (~12% faster
    on the 87-p model). Nested entries keep the outer count."""
    global _kernel_threads
    outer, before = _kernel_threads, torch.get_num_threads()
    n = _kernel_threads = outer or before
    torch.set_num_threads(1)
    try:
        yield n
    finally:
        _kernel_threads = outer
        torch.set_num_threads(before)


def _apply(model, tokens: Tensor, mask: Tensor, start: int, active: Tensor | None,
           threads: int) -> Tensor:
    K = model.k
    shared = _shared(tokens) and _shared(mask)  # every member reads one set of rows
    if not shared:
        tokens, mask = (x.expand(K, *x.shape[-2:]) for x in (tokens, mask))
    tok = _batch_bytes(tokens, shared)  # the batch as drawn: no copy
    if mask.dtype != torch.bool:  # a 0/1 float mask, as the reference loss takes it
        mask = mask != 0
    mask = mask.reshape(-1, *mask.shape[-2:])[:1] if shared else mask
    bmask = mask.contiguous().view(torch.uint8)  # (K or 1, B, T - 1)
    # (K,) answer positions a member: an exact integer sum of the bytes, int32 (half int64's time)
    msum = bmask[..., start:].sum((-2, -1), dtype=torch.int32).clamp_(min=1).double().expand(K)
    ties = Ties.of(model)  # covered ties: their weights and gradients in C (tiny_ties.py)
    w, cos, sin, dims = _kernel_args(model, ties, tok.shape[2] - 1, start, tok.shape[1],
                                     tok.shape[2], mask.shape[-1], shared)
    members = tuple(range(K)) if active is None else tuple(active.nonzero().flatten().tolist())
    return _TinyLoss.apply(_plan(dims, members, threads), ties, tok, bmask, msum, cos, sin,
                           model.cfg.qk_head ** -0.5, model.cfg.norm_eps, *w,
                           *(ties.params if ties is not None else ()))


def _shared(x: Tensor) -> bool:
    """Whether (B, T) or (K, B, T) rows `x` are one set that every member reads."""
    return x.dim() == 2 or x.shape[0] == 1 or x.stride(0) == 0


def _batch_bytes(tokens: Tensor, shared: bool) -> Tensor:
    """Tokens (K, B, T) or shared rows as the kernel takes them: (K, or 1 when shared, B, T)
    contiguous, a byte each (uint8, the samplers' own dtype: no copy then; `unsupported`
    keeps vocabularies within 256)."""
    if shared:
        tokens = tokens.reshape(-1, *tokens.shape[-2:])[:1]
    if tokens.dtype != torch.uint8:
        tokens = tokens.to(torch.uint8)
    return tokens.contiguous()


def _kernel_args(model, ties: Ties | None, Ti: int, start: int, B: int, Tt: int, Tm: int,
                 shared: bool):
    """(effective weights, rope cos, rope sin, dims) of a call on Ti input positions, B
    sequences a member in rows of Tt tokens and Tm mask entries (`shared`: one set of rows);
    with `ties`, the weights are its C call's."""
    cfg, K = model.cfg, model.k
    w = effective_weights(model) if ties is None else ties.forward()
    if (rows := model.position_rows(Ti)) is not None:
        w[1] = rows.expand(K, -1, -1)
    flags = ((F_POS if w[1] is not None else 0) | (F_NORM if cfg.norm != "none" else 0)
             | (F_LAYER if cfg.norm == "layer" else 0) | (F_NBIAS if w[15] is not None else 0)
             | (F_QKNORM if cfg.qk_norm != "none" else 0) | (F_FINAL if cfg.final_norm else 0))
    if cfg.pos == "rope":
        flags |= F_ROPE | (F_ROPE_IL if cfg.rope_pairs == "interleaved" else 0)
        cos, sin = model.rope_cos, model.rope_sin  # (qk/2, n_ctx)
    else:
        cos = sin = torch.zeros(1, 1)
    ff = cfg.d_ff if w[11] is not None else 0
    if ff:
        flags |= {"swiglu": F_SWIGLU, "relu": F_RELU, "gelu": F_GELU}[cfg.activation]
    dims = (Ti, start, cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.qk_head, cfg.v_head, ff,
            cfg.vocab_size, flags, K, -(-B // LANES), cos.shape[1], B, Tt, Tm, int(shared))
    return w, cos.contiguous(), sin.contiguous(), dims


@torch.no_grad()
def tiny_logits(model, inputs: Tensor, from_pos: int) -> Tensor:
    """The model's forward in the tiny layout, for training's evaluations: inputs (B, T) or
    (K, B, T) -> logits (K, B, T - from_pos, V) of the positions from `from_pos` on, as
    `model(inputs, from_pos=from_pos)` (to float32 rounding)."""
    if (why := load_error()) is not None:
        raise RuntimeError(why)
    K, shared = model.k, _shared(inputs)
    tok = _batch_bytes(inputs if shared else inputs.expand(K, -1, -1), shared)
    _, B, Ti = tok.shape
    n_tiles = -(-B // LANES)
    with kernel_threads() as threads:
        # rows of Ti: the kernel's target row (Ti + 1) reads token 0, unused here
        w, cos, sin, dims = _kernel_args(model, Ties.of(model), Ti, from_pos, B, Ti, 0,
                                         shared)
        plan = _plan(dims, tuple(range(K)), threads)
        ws, ptrs = _pointers(w)
        Tq, V = Ti - from_pos, model.cfg.vocab_size
        out = torch.empty(K, n_tiles, Tq, V, LANES)
        lib = _native.lib
        assert lib is not None
        _run(plan, lambda chunks, n: lib.tiny_logits(
            plan.dims.data_ptr(), model.cfg.norm_eps, model.cfg.qk_head ** -0.5, chunks, n,
            tok.data_ptr(), ptrs, cos.data_ptr(), sin.data_ptr(), out.data_ptr()))
    # (K, tiles, Tq, V, L) -> (K, B, Tq, V)
    return out.permute(0, 1, 4, 2, 3).reshape(K, n_tiles * LANES, Tq, V)[:, :B]
