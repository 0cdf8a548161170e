"""The tiny decoder-only transformer family that arithsweep searches over.

`ModelConfig` is the one validated description of an architecture; `ArithTransformer` holds a
*population* of K independent models of that architecture (every weight has a leading K dim)
so that K seeds train at the cost of about one; `count_params` counts the unique trainable
values of one member after tying (fixed encodings count zero). The frontier options' ties
(K, V, O from Q, an arc embedding, MLP ties, split token/position parts, one-number norms and
QK-norms) are owned or derived weights built in `core/model/weights.py`, which also draws
the init; layer primitives are in `core/model/layers.py`. A looped stack may blend each loop
after the first into the stream by one learned number (`loop_mix`, `layers.blend`).

    from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params
    model = ArithTransformer(ModelConfig(vocab_size=14, n_ctx=35), k=4, seeds=[0, 1, 2, 3])
    logits = model(tokens)  # (4, B, T) or (B, T) int64 -> (4, B, T, 14)
    count_params(model)     # one member's unique parameters
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

# --------------------------------------------------------------------------------------------
# The population model. Every parameter is (K, ...): member i is p[i]. The residual stream runs
# feature-major, x (K, d, N) with N = B*T (b-major); the layer primitives are in layers.py.
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arithsweep.core.config import ABACUS_POSITIONS, ACTIVATIONS, NORMS, POSITIONS, ModelConfig
from arithsweep.core.errors import CheckpointError
from arithsweep.core.model.layers import (
    _lookup,
    _normed,
    _table,
    abacus_indices,
    attend,
    biased_attention,
    blend,
    index_turns,
    place_bias,
    place_gaps,
    qk_normed,
    rope,
    sinusoid_table,
)
from arithsweep.core.model.weights import (
    attn_biases,
    attn_weights,
    gate_from_up,
    init_member,
    make_attn_params,
    make_embed_params,
    make_mlp_params,
    make_norm,
    mlp_weights,
    o_bias,
    place_pattern,
    place_rows,
    pos_part,
    token_table,
)

__all__ = ["ACTIVATIONS", "NORMS", "POSITIONS", "ArithTransformer", "ModelConfig",
           "count_params", "param_breakdown"]

N_DIGITS = 10  # token ids 0..9 are the digits (abacus positions count runs of them)


class _Block(nn.Module):
    def __init__(self, cfg: ModelConfig, k: int) -> None:
        super().__init__()
        own_norms = cfg.norm != "none" and not cfg.share_norms
        self.norm1 = make_norm(cfg, k) if own_norms else None
        self.attn = make_attn_params(cfg, k)  # owned parts only: ties derive the rest
        self.norm2 = make_norm(cfg, k) if own_norms and cfg.d_ff else None
        self.mlp = make_mlp_params(cfg, k)


class ArithTransformer(nn.Module):
    """K independent pre-norm decoder-only transformers of one architecture, packed.

    tokens (K, B, T) or (B, T) int64 -> logits (K, B, T, vocab) float32. Member i is the model
    whose tensors are `member_state(i)`; members never interact."""

    # set only inside `capturing()`; the default forward pays one None check per block
    _capture: dict[str, list[Tensor]] | None = None
    _offset_gens: list[torch.Generator] | None = None  # made on first use (abacus_offsets)
    attention = "auto"  # attention kernel: auto (per device, layers.ATTENTION) | manual | fused

    def __init__(self, cfg: ModelConfig, k: int = 1, generator: torch.Generator | None = None,
                 seeds: list[int] | None = None) -> None:
        super().__init__()
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a whole number >= 1, got {k!r}")
        if seeds is not None and len(seeds) != k:
            raise ValueError(f"seeds has {len(seeds)} entries for a population of k={k}")
        self.cfg, self.k = cfg, k
        self._offset_seeds = [int(s) for s in seeds] if seeds else list(range(k))
        d, V = cfg.d_model, cfg.vocab_size
        d_pos = d - cfg.tok_dims if cfg.split_positions else d  # width of the position part
        self.embed = nn.Module()
        make_embed_params(self.embed, cfg, k)
        if cfg.unembed_head:  # P (K, d, d_embed): MicroAdder's head_proj
            self.head = nn.Module()
            self.head.weight = _table(k, d, cfg.tok_dims)
        if cfg.pos == "digit_index":
            fixed, slot, n_slots, place = place_pattern(cfg.places, d_pos)
            self.register_buffer("place_fixed", fixed, persistent=False)  # (T, d_pos)
            self.register_buffer("place_slot", slot, persistent=False)  # (T,), -1 = none
            self.register_buffer("place_index", place, persistent=False)  # (T,), -1 = none
            if cfg.place_learned:  # (K, 4): radius, phase, ramp, offset
                self.place = nn.Module()
                self.place.spiral = _table(k, 4)
            if n_slots:
                self.slots = nn.Module()
                self.slots.weight = _table(k, n_slots, d_pos)
        if cfg.pos in ("learned", "abacus"):
            table = nn.Module()
            table.weight = _table(k, cfg.n_ctx if cfg.pos == "learned" else cfg.abacus_max, d_pos)
            setattr(self, "pos" if cfg.pos == "learned" else "abacus", table)
        self.layers = nn.ModuleList(_Block(cfg, k) for _ in range(cfg.n_layers))
        self.shared_norm = self.final_norm = None
        if cfg.norm != "none" and cfg.share_norms:
            self.shared_norm = make_norm(cfg, k)
        elif cfg.norm != "none" and cfg.final_norm:
            self.final_norm = make_norm(cfg, k)
        if cfg.loop_mix:  # m (K, 1): how far each loop after the first moves the stream
            self.loop = nn.Module()
            self.loop.mix = _table(k, 1)
        if not cfg.tie_embeddings or cfg.unembed_bias:
            self.unembed = nn.Module()
            self.unembed.weight = None if cfg.tie_embeddings else _table(k, d, V)
            self.unembed.bias = _table(k, V) if cfg.unembed_bias else None

        # Fixed tables live in non-persistent buffers: they follow .to(device) but are not state.
        T = cfg.n_ctx
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        self.register_buffer("mask", torch.zeros(T, T).masked_fill(~causal, float("-inf")),
                             persistent=False)  # (T, T) additive: 0 on and below the diagonal
        if cfg.pos == "sinusoidal":
            self.register_buffer("sinusoid", sinusoid_table(T, d, d_pos), persistent=False)
        half = cfg.qk_head // 2
        inv = cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) / half)  # (half,)
        if cfg.pos == "rope":
            ang = (torch.arange(T, dtype=torch.float64).unsqueeze(1) * inv).T.float()  # (half, T)
            self.register_buffer("rope_cos", ang.cos(), persistent=False)
            self.register_buffer("rope_sin", ang.sin(), persistent=False)
        elif cfg.pos == "abacus_rope":  # angles: the tokens' places; fastest pair pi/abacus_max
            self.register_buffer("rope_inv", (inv * (math.pi / cfg.abacus_max)).float(),
                                 persistent=False)

        if next(self.parameters()).is_meta:  # built only to be counted (count_params(cfg))
            return
        gens = ([torch.Generator().manual_seed(int(s)) for s in seeds] if seeds is not None
                else [generator] * k)
        for i, g in enumerate(gens):
            init_member(self, i, g)

    # ---------------------------------------------------------------------------- forward
    def forward(self, tokens: Tensor, from_pos: int = 0,
                abacus_offset: Tensor | None = None) -> Tensor:
        """tokens (K, B, T) or (B, T) -> logits (K, B, T - from_pos, V): positions before
        `from_pos` are not unembedded (training and exact match only need answer positions).
        `abacus_offset` (K, B) int is added to every digit's abacus index; None draws one per
        sequence in train mode when cfg.abacus_offset > 0 (layers.abacus_offsets), else none."""
        cfg, K = self.cfg, self.k
        if tokens.dim() == 2:
            tokens = tokens.unsqueeze(0).expand(K, -1, -1)
        if tokens.dim() != 3 or tokens.shape[0] != K or tokens.shape[2] > cfg.n_ctx:
            raise ValueError(f"tokens must be (K={K}, B, T<={cfg.n_ctx}) or (B, T), "
                             f"got {tuple(tokens.shape)}")
        _, B, T = tokens.shape
        d, V = cfg.d_model, cfg.vocab_size
        tokens = tokens.long()  # a no-op for int64; scatter_ wants int64 indices
        emb = token_table(self.embed, cfg)  # (K, V, d)
        x0 = _lookup(emb, tokens.reshape(K, B * T)).view(K, d, B, T)
        if (rows := self.position_rows(T)) is not None:
            x0 = x0 + rows.transpose(1, 2).unsqueeze(2)  # (K or 1, d, 1, T)
        place = None  # what every block reads of the places: see _block
        if cfg.pos in ABACUS_POSITIONS:
            idx = abacus_indices(self, tokens, abacus_offset)  # (K, B, T)
            if cfg.pos == "abacus":
                idx = idx.clamp_(max=cfg.abacus_max - 1).view(K, B * T)
                x0 = x0 + _lookup(pos_part(self.abacus.weight, d), idx).view(K, d, B, T)
            else:
                place = index_turns(idx, self.rope_inv, cfg.n_heads) \
                    if cfg.pos == "abacus_rope" else place_gaps(idx)
        x0 = x0.reshape(K, d, B * T)
        x = x0
        if (cap := self._capture) is not None:  # inspection only: norms (K, B, T)
            cap["resid"].append(x0.detach().view(K, d, B, T).norm(dim=1))
        # The last block only needs queries from `from_pos` on: nothing after it mixes
        # positions, so the rows before it would be computed and thrown away (~T/(T-from_pos)
        # of that block's attention and MLP work; add10: 32 positions, 11 needed).
        last_call = (cfg.n_loops - 1, len(self.layers) - 1) if cap is None else None
        for loop in range(cfg.n_loops):
            h = x  # (K, d, B*T): the stream this loop starts from, which loop_mix blends with
            if loop and cfg.input_injection:
                x = x + x0
            for j, blk in enumerate(self.layers):
                q_from = from_pos if (loop, j) == last_call else 0
                x = self._block(blk, x, B, T, q_from, place)
                if cap is not None:
                    cap["resid"].append(x.detach().view(K, d, B, T).norm(dim=1))
            if loop and cfg.loop_mix:
                x = blend(h, x, self.loop.mix, B)
                if cap is not None:  # the loop's last entry is the stream after the blend
                    cap["resid"][-1] = x.detach().view(K, d, B, T).norm(dim=1)
        # unembedding W^T is the embedding itself when tied: (K, V, d)
        wt = emb if cfg.tie_embeddings else self.unembed.weight.transpose(1, 2)
        if cfg.unembed_head:  # logits = E_tok P^T norm(x): one (K, V, d) matrix
            wt = torch.bmm(emb[..., :cfg.tok_dims], self.head.weight.transpose(1, 2))
        b = self.unembed.bias if cfg.unembed_bias else None
        last = self.final_norm if self.shared_norm is None else self.shared_norm
        if from_pos:
            T = T - from_pos
            if cap is not None:  # inspection ran every block on all positions
                x = x.view(K, d, B, -1)[..., from_pos:].reshape(K, d, B * T)
        logits = _normed(last if cfg.final_norm else None, x, wt, b)  # (K, V, B*T)
        return logits.transpose(1, 2).reshape(K, B, T, V)  # one copy into the caller's layout

    def position_rows(self, T: int) -> Tensor | None:
        """The rows added to the first T positions' embeddings, (K or 1, T, d), for the
        positions that depend on the place alone (learned, sinusoidal, digit_index); None for
        the others (rope turns q and k instead, abacus reads the tokens, none adds nothing)."""
        cfg = self.cfg
        if cfg.pos == "learned":
            return pos_part(self.pos.weight[:, :T], cfg.d_model)
        if cfg.pos == "sinusoidal":
            return self.sinusoid[:, :T].T.unsqueeze(0)
        if cfg.pos == "digit_index":
            return place_rows(self, T)
        return None

    @contextlib.contextmanager
    def capturing(self) -> Iterator[dict[str, list[Tensor]]]:
        """`with model.capturing() as cap: model(tokens)` records, for `arithsweep inspect`,
        cap["attn"]: attention p (K, B, H, T, T) per block call, loop-major; cap["resid"]: the
        residual stream's norm (K, B, T) after the embedding and after every block call."""
        cap: dict[str, list[Tensor]] = {"attn": [], "resid": []}
        self._capture = cap
        try:
            yield cap
        finally:
            self._capture = None

    def _block(self, blk: _Block, x: Tensor, B: int, T: int, q_from: int = 0,
               place: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """x (K, d, B*T) -> (K, d, B*(T - q_from)): keys and values from every position,
        queries (and so the outputs, attention rows and MLP) only from `q_from` on. `place`,
        made once per forward from the tokens: abacus_rope's (cos, sin) to turn q and k by,
        abacus_bias's (place gaps, digit keys) to bias the scores by (layers.place_gaps)."""
        cfg, K = self.cfg, self.k
        H, Hkv, qk, vh = cfg.n_heads, cfg.kv_heads, cfg.qk_head, cfg.v_head
        norm1 = self.shared_norm if blk.norm1 is None else blk.norm1
        a = blk.attn
        head = self.head.weight if cfg.unembed_head else None
        wq, wk, wv, wo = attn_weights(a, cfg, head)
        # q, k, v from one fused bmm: the weights are tiny, the activations are not
        wt = torch.cat([wq, a.kv.matrix_t()] if cfg.tie_kv else [wq, wk, wv], dim=1)
        qkv = _normed(norm1, x, wt, attn_biases(a, cfg))  # (K, H*qk + Hkv*(qk+vh), B*T)
        g = H // Hkv  # query heads per K/V head

        def heads(t: Tensor, w: int, h: int) -> Tensor:  # (K, h*w, B*T) -> (K*B*H, w, T)
            t = t.view(K, h, 1, w, B, T)
            if h != H:  # grouped K/V: each K/V head serves g query heads
                t = t.expand(K, h, g, w, B, T)
            return t.reshape(K, H, w, B, T).permute(0, 3, 1, 2, 4).reshape(K * B * H, w, T)

        # split, not slicing: its backward is one cat instead of a zero-filled copy per slice
        sizes = [H * qk, Hkv * qk] + ([] if cfg.tie_kv else [Hkv * vh])
        parts = qkv.split(sizes, dim=1)
        q, k = heads(parts[0], qk, H), heads(parts[1], qk, Hkv)
        v = k if cfg.tie_kv else heads(parts[2], vh, Hkv)
        if cfg.qk_norm != "none":
            wqn, wkn = (a.q_norm, a.k_norm) if cfg.qk_norm == "head" else (a.qk_norm,) * 2
            q, k = (qk_normed(t, w, K, cfg.norm_eps) for t, w in ((q, wqn), (k, wkn)))
        if cfg.pos in ("rope", "abacus_rope"):
            cos, sin = place or (self.rope_cos, self.rope_sin)  # per sequence, or by position
            q, k = (rope(t, cos, sin, cfg.rope_pairs == "interleaved") for t in (q, k))
        Tq = T - q_from
        if q_from:
            q = q[..., q_from:]  # (K*B*H, qk, Tq)
            x = x.view(K, -1, B, T)[..., q_from:].reshape(K, -1, B * Tq)
        mask = self.mask[q_from:T, :T]  # (Tq, T)
        if cfg.pos == "abacus_bias":  # per-sequence scores: plain autograd attention
            mask = place_bias(*place, q_from, a.slope, a.reach) + mask  # (K*B*H, Tq, T)
            o = biased_attention(q, k, v, mask, qk ** -0.5)
        else:
            o = attend(q, k, v, mask, qk ** -0.5, self.attention)  # (K*B*H, vh, Tq)
        if self._capture is not None:  # inspection only (q_from 0): p again, as apply makes it
            p = torch.baddbmm(mask.detach(), q.detach().transpose(1, 2), k.detach(),
                              alpha=qk ** -0.5).softmax(-1)  # (K*B*H, T, T)
            self._capture["attn"].append(p.view(K, B, H, T, T))
        # splitting N = K*B*H is a view for either kernel's strides; then one copy
        o = o.view(K, B, H, vh, Tq).permute(0, 2, 3, 1, 4).reshape(K, H * vh, B * Tq)
        x = torch.baddbmm(x, wo, o)  # residual add rides in the bmm
        if (bo := o_bias(a, cfg)) is not None:
            x = x + bo.unsqueeze(2)
        if blk.mlp is None:
            return x
        norm2 = self.shared_norm if blk.norm2 is None else blk.norm2
        m = blk.mlp
        wg, wu, wd = mlp_weights(m, cfg, head)
        if cfg.activation == "swiglu":
            b = None
            if cfg.mlp_bias:
                bg = gate_from_up(m, cfg, m.up.bias) if cfg.tie_gate else m.gate.bias
                b = torch.cat([bg, m.up.bias], dim=1)
            gate, u = _normed(norm2, x, torch.cat([wg, wu], dim=1), b).chunk(2, dim=1)
            h = F.silu(gate) * u  # (K, ff, B*T)
        else:
            h = _normed(norm2, x, wu, m.up.bias)  # (K, ff, B*T)
            h = F.relu(h) if cfg.activation == "relu" else F.gelu(h)
        x = torch.baddbmm(x, wd, h)
        down = getattr(m, "down", None)
        return x if down is None or down.bias is None else x + down.bias.unsqueeze(2)

    # ---------------------------------------------------------------------------- members
    def member_state(self, i: int) -> dict[str, Tensor]:
        """Member i's parameters without the K dim, as contiguous clones."""
        self._check_member(i)
        return {n: p.detach()[i].clone().contiguous() for n, p in self.named_parameters()}

    @torch.no_grad()
    def load_member_state(self, i: int, state: dict[str, Tensor]) -> None:
        """Inverse of member_state; checks every name and shape before writing anything."""
        self._check_member(i)
        params = dict(self.named_parameters())
        missing = [n for n in params if n not in state]
        extra = [n for n in state if n not in params]
        if missing or extra:
            kind, name = ("missing", missing[0]) if missing else ("unexpected", extra[0])
            raise CheckpointError(f"member state: {kind} tensor {name!r} "
                                  f"(config: {self.cfg.summary()})")
        for name, t in state.items():
            want = tuple(params[name].shape[1:])
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            if got != want:
                raise CheckpointError(f"member state: tensor {name!r} has shape {got}, "
                                      f"the config needs {want}")
        for name, t in state.items():
            params[name][i].copy_(t)

    @classmethod
    def from_member_state(cls, cfg: ModelConfig, state: dict[str, Tensor]) -> ArithTransformer:
        # a private generator: building a model to load into must not move the global RNG
        model = cls(cfg, k=1, generator=torch.Generator().manual_seed(0))
        model.load_member_state(0, state)
        return model

    def _check_member(self, i: int) -> None:
        if not 0 <= i < self.k:
            raise IndexError(f"member {i} out of range for a population of k={self.k}")


# -------------------------------------------------------------------------------- counting
def _shapes_of(model_or_cfg: ArithTransformer | ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    if isinstance(model_or_cfg, ModelConfig):
        with torch.device("meta"):  # shapes without memory or init, from the one source
            model_or_cfg = ArithTransformer(model_or_cfg)
    # from the tensors themselves (verification must not trust the config); a tied tensor is
    # one Parameter, which named_parameters() yields once
    return [(n, tuple(p.shape[1:])) for n, p in model_or_cfg.named_parameters()]


def param_breakdown(model_or_cfg: ArithTransformer | ModelConfig) -> list[tuple[str, int]]:
    """Unique trainable values of one member per component, e.g. ("layer0.attn.q", 49)."""
    out: dict[str, int] = {}
    for name, shape in _shapes_of(model_or_cfg):
        stem, last = name.rsplit(".", 1) if "." in name else ("", name)
        # drop weight / bias / A / B; a derived rule's own numbers (k_angle, arc) keep their name
        comp = stem if last in ("weight", "bias", "A", "B") else name
        if comp.startswith("layers."):
            _, idx, rest = comp.split(".", 2)
            comp = f"layer{idx}.{rest}"
        out[comp] = out.get(comp, 0) + math.prod(shape)
    return list(out.items())


def count_params(model_or_cfg: ArithTransformer | ModelConfig) -> int:
    """Unique trainable values of ONE member after tying; fixed encodings count zero."""
    return sum(n for _, n in param_breakdown(model_or_cfg))
