"""Owned and derived weights of the frontier options (the ties of the smallest public adders).

Every weight the forward pass uses is either *owned* (a trainable (K, ...) tensor, counted by
`count_params`) or *derived* from owned ones by a fixed rule: K = Q, K = a Q, K = Q turned by
one angle, V = Q, O = Q^T, gate = up (times one number, a number per hidden unit, or as it
is), down = up^T (optionally turned by one angle or scaled per hidden unit), a token table
generated from three numbers on an arc (or two, its radius fixed), a token or position
part narrower than the stream, a norm's gain or the QK-norm weight from one number (times a
fixed pattern). `make_attn_params`, `make_mlp_params` and `make_norm` create only the owned
tensors a `ModelConfig` asks for; the `*_weights` functions return the matrices the forward
pass multiplies by, all as W^T (K, d_out, d_in) like `layers._Proj.matrix_t`, so ties cost
nothing in the hot loop but a few tiny d x d ops per step; a derived vector that readers take
by attribute (a norm's `weight`, `qk_norm`) is a property of its module. `init_member` draws
every member's start. `tests/test_frontier.py` and `tests/test_model_options.py` pin each rule
and each count.

    python -c "from arithsweep.core.model.model import ModelConfig, count_params; \\
        print(count_params(ModelConfig(vocab_size=10, n_ctx=34, d_model=3, d_head=4, \\
        d_vhead=4, n_heads=1, d_ff=2)))"
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from arithsweep.core.config import ModelConfig
from arithsweep.core.model.layers import _Norm, _Proj, _ScalarNorm, _table

N_DIGITS = 10  # token ids 0..9 are the digits
# digit_index's fixed spiral (MicroAdder's frozen one): clock radius and ramp per place
PLACE_RADIUS, PLACE_SLOPE = 3.5, 0.15


class _PatternQKNorm(nn.Module):
    """Attention tensors whose QK-norm weight is derived (qk_norm: scalar): one owned number
    `qk_norm_scale` (K, 1) times the fixed pattern (qk,), read as `qk_norm` (K, qk) by the
    forward pass and the tiny layout alike, as qk_norm: shared's owned vector is read."""

    def __init__(self, k: int, pattern: list[float] | None, qk: int) -> None:
        super().__init__()
        self.qk_norm_scale = _table(k, 1)
        self.register_buffer("qk_pattern", torch.tensor(pattern) if pattern is not None
                             else torch.ones(qk), persistent=False)

    @property
    def qk_norm(self) -> Tensor:  # (K, 1) * (qk,) -> (K, qk)
        return self.qk_norm_scale * self.qk_pattern


def make_norm(cfg: ModelConfig, k: int) -> _Norm:
    """One norm site's owned gain (d numbers, or one with norm_weight: scalar) and bias."""
    cls = _ScalarNorm if cfg.norm_weight == "scalar" else _Norm
    norm = cls(k, cfg.d_model, cfg.norm, cfg.norm_bias)
    norm.eps = cfg.norm_eps
    return norm


def make_attn_params(cfg: ModelConfig, k: int) -> nn.Module:
    """The owned attention tensors of one block (q, k, v, o, QK-norm weights, tie numbers)."""
    d, H, Hkv, tok = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.tok_dims
    qk, vh, ab = cfg.qk_head, cfg.v_head, cfg.attn_bias
    a = _PatternQKNorm(k, cfg.qk_norm_pattern, qk) if cfg.qk_norm == "scalar" else nn.Module()
    # what Q and K read: d_qk dims of the stream, after pad[0] and before pad[1] unread ones
    d_qk, pad = d, (0, 0)
    if cfg.qk_from_positions:
        d_qk, pad = d - tok, (tok, 0)
    elif cfg.qk_from_tokens:
        d_qk, pad = tok, (0, d - tok)
    a.q = _Proj(k, d_qk, H * qk, cfg.rank_of("q"), ab, pad)
    if cfg.tie_kv:
        a.kv = _Proj(k, d_qk, Hkv * qk, cfg.rank_of("k"), ab, pad)
    else:
        if cfg.tie_k == "none":
            a.k = _Proj(k, d_qk, Hkv * qk, cfg.rank_of("k"), ab, pad)
        elif cfg.tie_k == "scaled":
            a.k_scale = _table(k, 1)
        elif cfg.tie_k == "rotated":
            a.k_angle = _table(k, 1)
        if not (cfg.tie_v or cfg.v_from_head):
            d_in = cfg.tok_dims if cfg.v_from_tokens else d
            a.v = _Proj(k, d_in, Hkv * vh, cfg.rank_of("v"), ab)
    if not cfg.tie_o:
        a.o = _Proj(k, H * vh, d, cfg.rank_of("o"), ab)
    if cfg.pos == "abacus_bias":  # per head: how hard it keeps to `reach` places away
        a.slope, a.reach = _table(k, H), _table(k, H)
    if cfg.qk_norm == "head":
        a.q_norm, a.k_norm = _table(k, qk), _table(k, qk)
    elif cfg.qk_norm == "shared":
        a.qk_norm = _table(k, qk)
    return a


def make_mlp_params(cfg: ModelConfig, k: int) -> nn.Module | None:
    """The owned MLP tensors of one block (None without an MLP)."""
    d, ff, mb = cfg.d_model, cfg.d_ff, cfg.mlp_bias
    if not ff:
        return None
    m = nn.Module()
    r = cfg.rank_of("mlp")
    if cfg.activation == "swiglu" and cfg.tie_gate:
        if cfg.gate_scale != "none":  # gate_scale none: gate = up, nothing owned
            m.gate_scale = _table(k, ff if cfg.gate_scale == "vector" else 1)
    elif cfg.activation == "swiglu":
        m.gate = _Proj(k, d, ff, r, mb)
    m.up = _Proj(k, d, ff, r, mb)
    if cfg.mlp_down == "own":
        m.down = _Proj(k, ff, d, r, mb)
    elif cfg.mlp_down == "up_t_rot":
        m.down_angle = _table(k, 1)
    elif cfg.mlp_down == "up_t_scaled":
        m.down_scale = _table(k, ff)
    return m


def turn_pairs(w: Tensor, angle: Tensor, dim: int, width: int, interleaved: bool) -> Tensor:
    """Rotate every coordinate pair along `dim` (in blocks of `width`: heads) by angle (K, 1).

    Pairs are (i, i + width/2) (split) or (2i, 2i+1) (interleaved), RoPE's two conventions;
    an odd interleaved width leaves each block's last coordinate as it is (MicroAdder's 74 p
    turns q/k width 5 so)."""
    dim = dim % w.dim()
    shape = list(w.shape)
    if width % 2:  # turn the even part of every block, keep the odd one out
        x = w.reshape(shape[:dim] + [shape[dim] // width, width] + shape[dim + 1:])
        even, last = x.split([width - 1, 1], dim + 1)
        even = turn_pairs(even.flatten(dim, dim + 1), angle, dim, width - 1, interleaved)
        return torch.cat([even.unflatten(dim, (-1, width - 1)), last], dim + 1).reshape(shape)
    blocks, half = shape[dim] // width, width // 2
    inner = [half, 2] if interleaved else [2, half]
    x = w.reshape(shape[:dim] + [blocks] + inner + shape[dim + 1:])
    pair_dim = dim + (2 if interleaved else 1)
    a, b = x.unbind(pair_dim)
    view = [-1] + [1] * (a.dim() - 1)
    c, s = angle.cos().view(view), angle.sin().view(view)
    return torch.stack([a * c - b * s, a * s + b * c], pair_dim).reshape(shape)


def attn_weights(a: nn.Module, cfg: ModelConfig, head: Tensor | None = None,
                 ) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor]:
    """(Wq^T, Wk^T, Wv^T, Wo^T), each (K, d_out, d_in); Wk^T and Wv^T are None with tie_kv
    (the caller uses the one `kv` projection for both). `head`: the unembedding head P
    (K, d, d_embed), which v_from_head reuses."""
    wq = a.q.matrix_t()  # (K, H*qk, d)
    if cfg.tie_kv:
        wk = wv = None
    else:
        if cfg.tie_k == "none":
            wk = a.k.matrix_t()
        elif cfg.tie_k == "q":
            wk = wq
        elif cfg.tie_k == "scaled":
            wk = wq * a.k_scale.unsqueeze(2)
        else:
            wk = turn_pairs(wq, a.k_angle, 1, cfg.qk_head, cfg.rope_pairs == "interleaved")
        if cfg.tie_v:
            wv = wq
        else:  # V = x_tok P^T: W_v^T = P (K, d, d_embed)
            wv = head if cfg.v_from_head else a.v.matrix_t()  # (K, Hkv*vh, d_in)
            if wv.shape[2] < cfg.d_model:  # v_from_tokens: zero columns on the position part
                wv = nn.functional.pad(wv, (0, cfg.d_model - wv.shape[2]))
    wo = wq.transpose(1, 2) if cfg.tie_o else a.o.matrix_t()  # (K, d, H*vh)
    return wq, wk, wv, wo


def attn_biases(a: nn.Module, cfg: ModelConfig) -> Tensor | None:
    """q/k/v biases in the order `attn_weights` fuses them (ties share their source's bias)."""
    if not cfg.attn_bias:
        return None
    if cfg.tie_kv:
        return torch.cat([a.q.bias, a.kv.bias], dim=1)
    bk = a.q.bias if cfg.tie_k != "none" else a.k.bias
    if cfg.tie_k == "scaled":
        bk = bk * a.k_scale
    elif cfg.tie_k == "rotated":
        bk = turn_pairs(bk, a.k_angle, 1, cfg.qk_head, cfg.rope_pairs == "interleaved")
    return torch.cat([a.q.bias, bk, a.q.bias if cfg.tie_v else a.v.bias], dim=1)


def o_bias(a: nn.Module, cfg: ModelConfig) -> Tensor | None:
    return None if cfg.tie_o or not cfg.attn_bias else a.o.bias


def mlp_weights(m: nn.Module, cfg: ModelConfig, head: Tensor | None = None,
                ) -> tuple[Tensor | None, Tensor, Tensor]:
    """(W_gate^T or None, W_up^T, W_down^T): (K, ff, d), (K, ff, d), (K, d, ff)."""
    wu = m.up.matrix_t()
    wg = None
    if cfg.activation == "swiglu":
        wg = gate_from_up(m, cfg, wu) if cfg.tie_gate else m.gate.matrix_t()
    if cfg.mlp_down == "own":
        wd = m.down.matrix_t()
    elif cfg.mlp_down == "head":  # down = P^T: W_down^T = P (K, d, d_embed = ff)
        wd = head
    else:
        wd = wu.transpose(1, 2)  # down = up^T: W_down^T = W_up, (K, d, ff)
        if cfg.mlp_down == "up_t_rot":
            wd = turn_pairs(wd, m.down_angle, 2, cfg.d_ff, True)
        elif cfg.mlp_down == "up_t_scaled":  # hidden unit j's column of W_down^T times s_j
            wd = wd * m.down_scale.unsqueeze(1)  # (K, d, ff) * (K, 1, ff)
    return wg, wu, wd


def gate_from_up(m: nn.Module, cfg: ModelConfig, t: Tensor) -> Tensor:
    """The tied gate's weight (t = W_up^T (K, ff, d)) or bias (t = up's bias (K, ff)): up
    times gate_scale, one number (K, 1) or one per hidden unit (K, ff), or up itself."""
    if cfg.gate_scale == "none":
        return t
    return t * (m.gate_scale.unsqueeze(2) if t.dim() == 3 else m.gate_scale)


def arc_radius(cfg: ModelConfig) -> float:
    """embed arc2's fixed radius: arc_init's (tbukic's sweep fixes its A at the 2.5 every seed
    starts from), or 1."""
    return cfg.arc_init[0] if cfg.arc_init is not None else 1.0


def make_embed_params(emb: nn.Module, cfg: ModelConfig, k: int) -> None:
    V, tok = cfg.vocab_size, cfg.tok_dims
    if cfg.embed == "table":
        emb.weight = _table(k, V, tok)
    else:
        emb.arc = _table(k, 3 if cfg.embed == "arc" else 2)  # [radius,] start, stride
        emb.extra = _table(k, V - N_DIGITS, tok) if V > N_DIGITS else None


def token_table(emb: nn.Module, cfg: ModelConfig) -> Tensor:
    """The token embedding E (K, V, d_model) the input and a tied unembedding read: the owned
    table itself on the plain path (no copy), else generated and zero outside the token part."""
    if cfg.embed == "table":
        e = emb.weight
    else:
        if cfg.embed == "arc":
            r, start, stride = emb.arc.unbind(1)  # (K,) each
        else:  # arc2: the radius a fixed number of the config
            start, stride = emb.arc.unbind(1)
            r = torch.full_like(start, arc_radius(cfg))
        ang = start[:, None] + stride[:, None] * torch.arange(
            N_DIGITS, device=emb.arc.device, dtype=emb.arc.dtype)  # (K, 10)
        e = (r[:, None, None] * torch.stack([ang.cos(), ang.sin()], 2))  # (K, 10, 2)
        e = nn.functional.pad(e, (0, cfg.tok_dims - 2))
        if emb.extra is not None:
            e = torch.cat([e, emb.extra], dim=1)
    return e if e.shape[2] == cfg.d_model else nn.functional.pad(e, (0, cfg.d_model - e.shape[2]))


@torch.no_grad()
def init_member(model: nn.Module, i: int, gen: torch.Generator | None) -> None:
    """Member i of every parameter of `model` (an ArithTransformer): norm gains 1, biases 0,
    tables and projections normal, the rest by `init_special`. Drawn on the CPU in
    named_parameters order, so member i depends only on its generator (not K or device).

    Tables (embed, pos, abacus, unembed) get std 1/sqrt(d): unit-norm rows, so tied logits
    (a normed residual dotted with a row) start with std ~1 whatever d is. Projections get
    1/sqrt(fan_in), which keeps activations O(1) at tiny widths (GPT-2's flat 0.02 trained
    clearly worse in a 4-seed 3-digit-addition check at d=16); W = A @ B gets 1/sqrt(d_in)
    and 1/sqrt(r) so W has the full-rank variance; writes into the residual stream (o, down)
    are scaled by 1/sqrt(2 * depth), as in GPT-2, with depth counting loops."""
    cfg = model.cfg
    for name, p in model.named_parameters():
        shape, parts = tuple(p.shape[1:]), name.split(".")
        if name.endswith(".bias") or "norm" in name:
            p[i].fill_(0.0 if name.endswith(".bias") else 1.0)
            continue
        if init_special(name, p, i, gen, cfg):
            continue
        tables = ("embed", "pos", "abacus", "unembed", "slots")
        std = cfg.d_model ** -0.5 if parts[0] in tables else shape[0] ** -0.5
        if parts[-2] in ("o", "down") and parts[-1] != "A":
            std /= math.sqrt(2 * cfg.n_layers * cfg.n_loops)
        std = cfg.init_std if cfg.init_std is not None else std  # tbukic's recipe: N(0, 0.02)
        p[i].copy_(torch.empty(shape).normal_(0.0, std, generator=gen))


@torch.no_grad()
def init_special(name: str, p: Tensor, i: int, gen: torch.Generator | None,
                 cfg: ModelConfig) -> bool:
    """Initialise member i of a parameter with a rule of its own; False for an ordinary one.

    Angles start at 0 (or k/down_angle_init) and scales at 1 (each tie starts as its plain
    form: K = Q, gate = up),
    the loop mix at 0 (a looped model starts as its single pass);
    the arc puts the ten digits evenly round a unit circle (a clock, the natural picture of
    digits mod 10) from a random start, with a little noise on the stride, unless
    `cfg.arc_init` names its start. As MicroAdder's: the learned digit_index slot rows start
    near 0 (std 0.02), beside fixed rows of radius 3.5; a low-rank O starts at zero (B = 0,
    A uniform in [-1, 1]), so the attention adds nothing until it has learnt what to add."""
    parts = name.split(".")
    last = parts[-1]
    if last in ("k_angle", "down_angle"):  # 0 unless the config names a start
        p[i].fill_(cfg.k_angle_init if last == "k_angle" else cfg.down_angle_init)
    elif last.endswith("angle") or parts[0] == "loop":
        p[i].zero_()
    elif last.endswith("scale"):
        p[i].fill_(1.0)
    elif last == "arc":  # arc2 owns (start, stride) only: the last two of the three
        if cfg.arc_init is not None:
            p[i].copy_(torch.tensor(cfg.arc_init[-p.shape[1]:]))
            return True
        u = torch.rand(2, generator=gen)
        p[i].copy_(torch.tensor([1.0, 2 * math.pi * float(u[0]),
                                 2 * math.pi / N_DIGITS * (0.9 + 0.2 * float(u[1]))]
                                [-p.shape[1]:]))
    elif last == "slope":  # abacus_bias: softplus(0.5413) = 1 per place
        p[i].fill_(0.5413)
    elif last == "reach":  # abacus_bias: each head starts looking somewhere in -2..3 places
        p[i].copy_(torch.rand(p.shape[1:], generator=gen) * 5 - 2)
    elif parts[0] == "place":  # the fixed pattern's numbers: training starts from it
        p[i].copy_(torch.tensor([PLACE_RADIUS, 0.0, PLACE_SLOPE, 0.0]))
    elif parts[0] == "slots":
        p[i].copy_(torch.empty(p.shape[1:]).normal_(0.0, 0.02, generator=gen))
    elif len(parts) > 1 and parts[-2] == "o" and last in ("A", "B"):
        if last == "B":
            p[i].zero_()
        else:
            p[i].copy_(torch.empty(p.shape[1:]).uniform_(-1.0, 1.0, generator=gen))
    else:
        return False
    return True


def place_pattern(places: str, width: int) -> tuple[Tensor, Tensor, int, Tensor]:
    """digit_index positions: (fixed (T, width), slot (T,) long, -1 = none, number of slots,
    place (T,) long, -1 = none).

    A digit at place i gets 3.5 (cos, sin)(2 pi i / (10 * 2^j)) for pair j (the first pair is
    a clock of the ten places) and, for an odd width, a ramp 0.15 i in the last dim: MicroAdder's
    frozen spiral (radius 3.5 beside its digits' 2.5; with it and the rest of MicroAdder's init
    the 67-p anchor's best seed went from 9.6% to 68-77%); '.' gets zeros; letters index
    learned slot rows. `place_learned` makes the four numbers trainable (`spiral_rows`)."""
    T = len(places)
    slot = torch.full((T,), -1, dtype=torch.long)
    place = torch.full((T,), -1, dtype=torch.long)
    letters = sorted({c for c in places if c.isupper()})
    for t, c in enumerate(places):
        if c.isupper():
            slot[t] = letters.index(c)
        elif c != ".":
            place[t] = int(c, 36)
    start = torch.tensor([[PLACE_RADIUS, 0.0, PLACE_SLOPE, 0.0]], dtype=torch.float64)
    fixed = spiral_rows(start, place, width)[0]
    return fixed.float(), slot, len(letters), place


def spiral_rows(spiral: Tensor, place: Tensor, width: int) -> Tensor:
    """The place pattern from its numbers: spiral (K, 4) = (radius, phase, ramp, offset) per
    member, place (T,) a digit's place or -1 -> (K, T, width), zero where place is -1."""
    i = place.clamp(min=0).to(spiral.dtype)  # (T,)
    r, phase, ramp, offset = (c.unsqueeze(1) for c in spiral.unbind(1))  # (K, 1) each
    cols = []
    for j in range(width // 2):
        ang = 2 * math.pi * i / (10 * 2 ** j) + phase  # (K, T)
        cols += [r * ang.cos(), r * ang.sin()]
    if width % 2:
        cols.append(ramp * i + offset)
    return torch.stack(cols, -1) * (place >= 0).view(1, -1, 1).to(spiral.dtype)


def pos_part(table: Tensor, d: int) -> Tensor:  # (K, R, d_pos) -> (K, R, d)
    """A position table placed on the position part of the stream (its last dims)."""
    return nn.functional.pad(table, (d - table.shape[2], 0))


def place_rows(model: nn.Module, T: int) -> Tensor:  # -> (K, T, d): digit_index positions
    """The fixed place pattern of the first T positions plus their learned slot rows."""
    if model.cfg.place_learned:
        pe = spiral_rows(model.place.spiral, model.place_index[:T], model.place_fixed.shape[1])
    else:
        pe = model.place_fixed[:T].expand(model.k, -1, -1)  # (K, T, d_pos)
    slot = model.place_slot[:T]
    if getattr(model, "slots", None) is not None and bool((slot >= 0).any()):
        rows = model.slots.weight[:, slot.clamp(min=0)]  # (K, T, d_pos)
        pe = pe + rows * (slot >= 0).view(1, -1, 1)
    return pos_part(pe, model.cfg.d_model)
