"""The layer primitives of the population model (`arithsweep.core.model.model`), CPU-tuned.

Every parameter is (K, ...): member i is p[i]. Projections are stored as W (K, d_in, d_out),
but the residual stream runs feature-major, x (K, d, N) with N = B*T (b-major), so each
projection is one torch.bmm(W^T, x) with a wide (d_out x N) output: for d ~ 7-16 CPU GEMMs are
2-10x faster that way round than x @ W with its narrow (N x d_out) one. Here: the (optionally
low-rank) projection, the causal attention with its hand-written backward, the one-hot lookup,
norms folded into the projection they feed, and the fixed positions (sinusoidal, abacus
indices) that read nothing learned. `tests/test_model.py` checks them through
the model (gradients against autograd included).

    python -c "import torch; from arithsweep.core.model.layers import _lookup; \
        print(_lookup(torch.eye(3)[None], torch.tensor([[2, 0]])))"
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_EPS = 1e-5


def _table(k: int, *shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(k, *shape))


class _Proj(nn.Module):
    """A (K, d_in, d_out) projection, optionally low rank (W = A @ B) and with a bias.

    `pad` (before, after): the projection reads only part of the stream, and `matrix_t` adds
    that many zero input columns on each side, so every reader (the fused q/k/v bmm, the tiny
    layout) multiplies the whole stream and never learns which part was read."""

    def __init__(self, k: int, d_in: int, d_out: int, rank: int, bias: bool,
                 pad: tuple[int, int] = (0, 0)) -> None:
        super().__init__()
        self.low_rank, self.pad = rank > 0, pad
        if self.low_rank:
            self.A, self.B = _table(k, d_in, rank), _table(k, rank, d_out)
        else:
            self.weight = _table(k, d_in, d_out)
        self.bias = _table(k, d_out) if bias else None

    def matrix_t(self) -> Tensor:  # W^T (K, d_out, pad[0] + d_in + pad[1])
        # Forming W from its factors costs d_in*r*d_out per member, far below one batch's x @ A,
        # and keeps one big bmm per projection (and lets q/k/v fuse) whatever the rank.
        w = torch.bmm(self.A, self.B) if self.low_rank else self.weight
        return F.pad(w.transpose(1, 2), self.pad) if any(self.pad) else w.transpose(1, 2)


class _CausalAttention(torch.autograd.Function):
    """softmax(q^T k * scale + mask) v^T for N = K*B*H tiny problems, all in (d x T) form.

    Written out because CPU GEMMs of these shapes are ~3x slower when the output is a narrow
    (T x d) matrix than when it is (d x T) or (T x T), and autograd's own bmm backward would
    produce dq in the narrow form and hand softmax a transposed gradient that it must copy.
    Here every product, forward and backward, has a (d x T) or (T x T) output (~1.5x faster)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
        # q (N, qk, Tq), k (N, qk, T), v (N, vh, T), mask (Tq, T) additive -> o (N, vh, Tq):
        # the queries may be the last Tq positions only (see ArithTransformer._block)
        p = torch.baddbmm(mask, q.transpose(1, 2), k, alpha=scale).softmax(-1)  # (N, Tq, T)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return torch.bmm(v, p.transpose(1, 2))

    @staticmethod
    def backward(ctx, g: Tensor):  # g = d o (N, vh, T)
        q, k, v, p = ctx.saved_tensors
        dp = torch.bmm(g.transpose(1, 2), v)  # (N, T, T)
        dv = torch.bmm(g, p)  # (N, vh, T)
        ds = torch._softmax_backward_data(dp, p, -1, p.dtype).mul_(ctx.scale)  # (N, T, T)
        dq = torch.bmm(k, ds.transpose(1, 2))  # (N, qk, T)
        dk = torch.bmm(q, ds)  # (N, qk, T)
        return dq, dk, dv, None, None


def _fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """The same attention through PyTorch's fused kernel (for CUDA, see ATTENTION): q (N, qk,
    Tq), k (N, qk, T), v (N, vh, T), mask (Tq, T) additive -> o (N, vh, Tq). The T x T scores
    are never stored for backward; the transposes are views the kernel reads strided."""
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale)
    return o.transpose(1, 2)  # (N, Tq, vh) -> (N, vh, Tq)


# Attention kernel per device type: "manual" (_CausalAttention, ~1.5x faster than autograd's
# on a 2-core CPU) or "fused" (scaled_dot_product_attention). The CUDA choice follows PyTorch's
# own kernels and has not been timed on a GPU by this project yet (`arithsweep bench --device
# cuda` times both); `ArithTransformer.attention` overrides it per model.
ATTENTION = {"cpu": "manual", "cuda": "fused"}


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float, kind: str) -> Tensor:
    """Causal attention with the kernel `kind` ("auto" = ATTENTION for q's device)."""
    if kind == "auto":
        kind = ATTENTION.get(q.device.type, "manual")
    if kind == "fused":
        return _fused_attention(q, k, v, mask, scale)
    return _CausalAttention.apply(q, k, v, mask, scale)


def _lookup(table: Tensor, idx: Tensor) -> Tensor:
    """Rows of per-member tables, feature-major: table (K, R, d), idx (K, N) -> (K, d, N).

    A one-hot GEMM rather than F.embedding: its output is already feature-major and its backward
    is a GEMM too, ~2x faster on CPU than embedding's scatter-add (and scatter_ bounds-checks)."""
    K, R, _ = table.shape
    hot = torch.zeros(K, R, idx.shape[1], dtype=table.dtype, device=table.device)
    return torch.bmm(table.transpose(1, 2), hot.scatter_(1, idx.unsqueeze(1), 1.0))


def _project(x: Tensor, wt: Tensor, b: Tensor | None) -> Tensor:
    """W^T x (+ b): x (K, d_in, N), wt (K, d_out, d_in) -> (K, d_out, N); the bias rides in."""
    return torch.bmm(wt, x) if b is None else torch.baddbmm(b.unsqueeze(2), wt, x)


def ordered_sum(x: Tensor) -> Tensor:
    """x (..., n) -> (...): ((0 + x_0) + x_1) + ... + x_{n-1}, one elementwise add per term.
    An elementwise add rounds each sum by itself, so a member's sums have the same bits
    whatever else is batched beside it; and this is the order torch's own loop takes for a
    K > 1 matrix-vector bmm, so a pack keeps the floats it had before (`_MemberMatVec`)."""
    acc = x[..., 0] + 0.0  # 0 + x_0, as that loop starts: -0.0 becomes +0.0
    for i in range(1, x.shape[-1]):
        acc = acc + x[..., i]
    return acc


class _MemberMatVec(torch.autograd.Function):
    """W^T beta per member, wt (K, d_out, d), beta (K, d) -> (K, d_out), forward and backward
    summed in index order by elementwise adds (`ordered_sum`) instead of by torch.bmm.

    torch.bmm of such a (K, d_out, d) x (K, d, 1) product sums in index order for K > 1, but
    for K = 1 hands a row-major matrix to BLAS's gemv, whose order differs once the product has
    400 or more terms (torch 2.13 on x86-64, forward and backward, measured): the folded
    LayerNorm bias made a member alone part from the same member in a pack (issue 55). Here
    every K takes the K > 1 order. ~d + d_out small adds per norm, beside the (d x N) work."""

    @staticmethod
    def forward(ctx, wt: Tensor, beta: Tensor) -> Tensor:
        ctx.save_for_backward(wt, beta)
        return ordered_sum(wt * beta.unsqueeze(1))  # (K, d_out, d) -> (K, d_out)

    @staticmethod
    def backward(ctx, g: Tensor):  # g (K, d_out)
        wt, beta = ctx.saved_tensors
        # bmm's own: a product of one term each, 0 + g * beta (sign of zero included)
        d_wt = g.unsqueeze(2) * beta.unsqueeze(1) + 0.0  # (K, d_out, d)
        d_beta = ordered_sum((wt * g.unsqueeze(2)).transpose(1, 2))  # over d_out -> (K, d)
        return d_wt, d_beta


def member_matvec(wt: Tensor, beta: Tensor) -> Tensor:
    """wt (K, d_out, d), beta (K, d) -> (K, d_out), each member's bits independent of K."""
    return _MemberMatVec.apply(wt, beta)


class _Norm(nn.Module):
    eps = _EPS  # ModelConfig.norm_eps, set per model by weights.make_norm

    def __init__(self, k: int, d: int, kind: str, bias: bool) -> None:
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.empty(k, d))
        self.bias = nn.Parameter(torch.empty(k, d)) if kind == "layer" and bias else None

    def project(self, x: Tensor, wt: Tensor, b: Tensor | None) -> Tensor:
        """W^T norm(x) (+ b): x (K, d, N), wt (K, d_out, d) -> (K, d_out, N).

        Every norm feeds a projection, so its per-member affine is folded into that projection's
        weights, W^T (g * y + beta) = (W^T g) y + W^T beta: d x d_out work instead of two passes
        over the d x N activations. Normalising over dim 1 (d rows of N) vectorises along N."""
        if self.kind == "layer":
            x = x - x.mean(1, keepdim=True)
        y = x * torch.rsqrt(x.square().mean(1, keepdim=True) + self.eps)  # (K, d, N)
        if self.bias is not None:
            shift = member_matvec(wt, self.bias)  # (K, d_out), the same bits for any K
            b = shift if b is None else b + shift
        return _project(y, wt * self.weight.unsqueeze(1), b)


class _ScalarNorm(_Norm):
    """A norm whose gain is one learned number times ones (norm_weight: scalar): owns `gain`
    (K, 1) and derives `weight` (K, d) from it, so every reader of `weight` (the folded
    projection above, the tiny layout) sees the usual vector and autograd sums its gradient
    back into the one number."""

    def __init__(self, k: int, d: int, kind: str, bias: bool) -> None:
        nn.Module.__init__(self)  # not _Norm's: `weight` is derived here, never owned
        self.kind, self.d = kind, d
        self.gain = nn.Parameter(torch.empty(k, 1))
        self.bias = nn.Parameter(torch.empty(k, d)) if kind == "layer" and bias else None

    @property
    def weight(self) -> Tensor:  # (K, d)
        return self.gain.expand(-1, self.d)


def _normed(norm: _Norm | None, x: Tensor, wt: Tensor, b: Tensor | None) -> Tensor:
    return _project(x, wt, b) if norm is None else norm.project(x, wt, b)


def blend(h: Tensor, y: Tensor, m: Tensor, B: int) -> Tensor:
    """loop_mix: h + m (y - h), the stream `h` entering a loop (K, d, B*T) moved by the learned
    m (K, 1) towards the loop's output y (K, d, B*Tq); on y's positions, which are the last Tq
    of each sequence when the last block computed only the answer rows."""
    K, d, N = h.shape
    if (Nq := y.shape[2]) != N:
        T, Tq = N // B, Nq // B
        h = h.view(K, d, B, T)[..., T - Tq:].reshape(K, d, Nq)
    return h + m.view(K, 1, 1) * (y - h)


def qk_normed(x: Tensor, w: Tensor, k: int, eps: float = _EPS) -> Tensor:
    """QK-norm (Qwen3): RMSNorm of each query/key head over its width, before RoPE.
    x (K*B*H, w, T), weight w (K, w) -> the same shape."""
    qk, T = x.shape[1], x.shape[2]
    y = x * torch.rsqrt(x.square().mean(1, keepdim=True) + eps)
    return (y.view(k, -1, qk, T) * w.view(k, 1, qk, 1)).view_as(x)


def rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """Rotary positions on x (N, w, T) with tables (w/2, >= T): coordinate pairs (i, i + w/2)
    (rotate-half) or, interleaved, (2i, 2i+1)."""
    T, half = x.shape[-1], x.shape[1] // 2
    # (half, T) by place, or (N, half, T) per sequence (abacus_rope's angles read the tokens)
    c, s = (cos[:, :T], sin[:, :T]) if cos.dim() == 2 else (cos, sin)
    if interleaved:
        x1, x2 = x.view(-1, half, 2, T).unbind(2)
        return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=2).view_as(x)
    x1, x2 = x[:, :half], x[:, half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=1)


def index_turns(idx: Tensor, inv: Tensor, H: int) -> tuple[Tensor, Tensor]:
    """abacus_rope's cos and sin: idx (K, B, T) abacus indices, inv (half,) angular rates ->
    two (K*B*H, half, T), laid out as the attention's heads (K, B, H)."""
    K, B, T = idx.shape
    ang = idx.to(inv.dtype).unsqueeze(2) * inv.view(1, 1, -1, 1)  # (K, B, half, T)
    return tuple(f(ang).unsqueeze(2).expand(K, B, H, -1, T).reshape(K * B * H, -1, T)
                 for f in (torch.cos, torch.sin))


def place_gaps(idx: Tensor) -> tuple[Tensor, Tensor]:
    """abacus_bias's per-forward part, shared by every block: idx (K, B, T) abacus indices (0 =
    not a digit) -> gap (K, B, 1, T, T), key's index - query's index, and which keys are digits
    (K, B, 1, 1, T)."""
    K, B, T = idx.shape
    x = idx.float()
    return (x.unsqueeze(2) - x.unsqueeze(3)).unsqueeze(2), (idx > 0).view(K, B, 1, 1, T)


def place_bias(gap: Tensor, digit: Tensor, q_from: int, slope: Tensor,
               reach: Tensor) -> Tensor:
    """abacus_bias's additive scores from place_gaps, for the queries from `q_from` on: slope
    and reach (K, H) -> (K*B*H, Tq, T), -softplus(slope) * |gap - reach| where the key is a
    digit, 0 where it is not (such keys stay reachable from any place)."""
    K, B, _, T, _ = gap.shape
    H = slope.shape[1]
    far = (gap[..., q_from:, :] - reach.view(K, 1, H, 1, 1)).abs() * digit  # (K, B, H, Tq, T)
    return (-F.softplus(slope).view(K, 1, H, 1, 1) * far).reshape(K * B * H, T - q_from, T)


def biased_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float) -> Tensor:
    """Plain autograd attention with a per-sequence additive bias (gradients reach it):
    q (N, qk, Tq), k (N, qk, T), v (N, vh, T), bias (N, Tq, T) with the causal mask in it ->
    (N, vh, Tq)."""
    p = torch.baddbmm(bias, q.transpose(1, 2), k, alpha=scale).softmax(-1)  # (N, Tq, T)
    return torch.bmm(v, p.transpose(1, 2))


def abacus_index(tokens: Tensor, n_digits: int = 10) -> Tensor:  # (K, B, T) -> (K, B, T)
    """1-based position of each digit (token id < n_digits) within its run of consecutive
    digits; 0 elsewhere (abacus positions, McLeish et al. 2024)."""
    digit = (tokens < n_digits).long()
    seen = digit.cumsum(-1)  # digits so far, inclusive
    # digits counted up to the latest non-digit (seen is non-decreasing, so cummax finds it)
    before = torch.where(digit.bool(), 0, seen).cummax(-1).values
    return seen - before  # non-digit: seen == before -> 0


def sinusoid_table(T: int, d: int, d_pos: int) -> Tensor:  # -> (d, T) float32
    """The fixed sinusoidal positions (pos: sinusoidal) in the last d_pos dims of d."""
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_pos, 2, dtype=torch.float64) / d_pos)
    pe = torch.zeros(T, d_pos, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d_pos // 2])
    # scaled to the token embeddings' init scale (per-coordinate variance 1/d), so that for
    # tiny d the fixed positions do not drown the learned token identity
    pe = (pe * math.sqrt(2.0 / d)).float()
    return torch.nn.functional.pad(pe, (d - d_pos, 0)).T.contiguous()


def abacus_indices(model: nn.Module, tokens: Tensor,
                   offset: Tensor | None = None) -> Tensor:  # (K, B, T) -> (K, B, T)
    """Each digit's abacus index (its place within its number, from 1; 0 for other tokens)
    plus `offset` (K, B), or in train mode one drawn per sequence when cfg.abacus_offset > 0."""
    idx = abacus_index(tokens)
    K, B, _ = tokens.shape
    if offset is None and model.cfg.abacus_offset and model.training:
        offset = abacus_offsets(model, B, tokens.device)
    if offset is not None:
        # digits only, as McLeish et al.'s code does. Moving non-digits too ('=' then carries
        # k) was tried on add8 trained on <= 4 digits: the first answer digit came right on
        # longer sums but the model learnt to stop after 4 answer digits (index minus '=''s
        # index); with '=' at 0 it stops right and misses that digit
        idx = idx + offset.view(K, B, 1) * (idx > 0)
    return idx


def abacus_offsets(model: nn.Module, B: int, device: torch.device) -> Tensor:  # (K, B) int64
    """Training-time abacus offsets k ~ U{0..cfg.abacus_offset}, one per sequence, from one
    private CPU generator per member seeded by that member's seed: a member draws the same
    offsets in any pack, as alone (and never from the global RNG, which data sampling and
    init must not share)."""
    if model._offset_gens is None:
        model._offset_gens = [torch.Generator().manual_seed(0xABAC + s)
                              for s in model._offset_seeds]
    hi = model.cfg.abacus_offset + 1
    k = torch.stack([torch.randint(0, hi, (B,), generator=g) for g in model._offset_gens])
    return k.to(device)
