"""`ModelConfig`, one architecture in the searched family, validated, and its word-valued fields.

Its field defaults *are* what `arithsweep train` builds with no options (1 layer, d_model 16,
2 heads, d_ff 32, relu, LayerNorm, tied embeddings, learned positions). Search spaces,
checkpoints and `--set` override fields; nothing else holds a second copy of a default. The
word tuples (ACTIVATIONS, NORMS, POSITIONS, ...) and MODEL_WORDS list the words each
word-valued field takes. The frontier options' checks and labels live in core/config_checks.py.

Torch-free on purpose, so that search spaces, the CLI and `arithsweep params` validate a
configuration without importing torch. Errors name the field (`ConfigError`). Re-exported by
`arithsweep.core.config`.

    python -c "from arithsweep.core.model_config import ModelConfig; \
        print(ModelConfig(vocab_size=12, n_ctx=11).summary())"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arithsweep.core.config_base import DictConfig
from arithsweep.core.config_checks import check_frontier, frontier_labels
from arithsweep.core.errors import ConfigError

ACTIVATIONS = ("relu", "gelu", "swiglu")
NORMS = ("layer", "rms", "none")
# positions read from the tokens: each digit's place within its own number (abacus index)
ABACUS_POSITIONS = ("abacus", "abacus_rope", "abacus_bias")
POSITIONS = ("learned", "sinusoidal", "rope", *ABACUS_POSITIONS, "digit_index", "none")
EMBEDS = ("table", "arc", "arc2")
QK_NORMS = ("none", "head", "shared", "scalar")
NORM_WEIGHTS = ("vector", "scalar")
ROPE_PAIRS = ("split", "interleaved")
TIE_K = ("none", "q", "scaled", "rotated")
MLP_DOWN = ("own", "up_t", "up_t_rot", "up_t_scaled", "head")
GATE_SCALES = ("scalar", "vector", "none")
# ModelConfig's word-valued fields and their words (search spaces check a value against these
# alone: whether it fits the other fields is the whole config's business)
MODEL_WORDS = {"activation": ACTIVATIONS, "norm": NORMS, "pos": POSITIONS, "embed": EMBEDS,
               "qk_norm": QK_NORMS, "rope_pairs": ROPE_PAIRS, "tie_k": TIE_K,
               "mlp_down": MLP_DOWN, "norm_weight": NORM_WEIGHTS, "gate_scale": GATE_SCALES}


@dataclass
class ModelConfig(DictConfig):
    _label = "model config"  # unannotated: a class attribute, not a dataclass field

    vocab_size: int  # from the task; token ids 0..9 are always the digits
    n_ctx: int  # longest input the model sees (learned position table size)
    n_layers: int = 1
    d_model: int = 16
    n_heads: int = 2
    d_head: int | None = None  # q/k width per head; None = d_model // n_heads
    d_vhead: int | None = None  # value width per head ("split widths"); None = d_model // n_heads
    d_ff: int = 32  # MLP hidden width; 0 = attention-only blocks
    activation: str = "relu"  # relu | gelu | swiglu (swiglu has two input projections)
    norm: str = "layer"  # layer | rms | none, before attention and before the MLP
    norm_bias: bool = True  # LayerNorm's additive bias (rms has none)
    final_norm: bool = True  # a norm before the unembedding
    share_norms: bool = False  # one set of norm weights for every norm site (AdderBoard trick)
    attn_bias: bool = False  # biases on q/k/v/o projections
    mlp_bias: bool = False  # biases on the MLP projections
    unembed_bias: bool = False
    tie_embeddings: bool = True  # unembedding = embedding transposed
    # learned | sinusoidal | rope | abacus | abacus_rope | digit_index | none. abacus_rope turns q
    # and k by each token's abacus index (RoPE on a digit's place within its number, 0 for other
    # tokens) instead of adding a table: attention then sees differences of significance only,
    # so "digit i meets digit i" holds at any length (a learned abacus table reuses the rows of
    # indices that never share a training sequence: add8's row 1 had cosine 0.5 with rows 17-20).
    # abacus_bias: no positions in q or k; each head adds -slope * |(key's index - query's
    # index) - reach| to its scores on digit keys (2 numbers a head): a head picks digits
    # `reach` places away and its pull falls off linearly whatever the length, which a turned q
    # and k (whose content sets the phase) do not promise
    pos: str = "learned"
    rope_base: float = 10000.0  # only with pos rope or abacus_rope
    # abacus: table size (most digits one number may have, +1). abacus_rope: the index span
    # its fastest pair turns half a turn over (rates pi/abacus_max * rope_base^(-i/half)), so
    # two index differences below it never look alike; measured on add6 (2L d32, 2 heads of 16,
    # rope_base 4): 24 generalised to 14 digits, 20 to 9 (sharper, sooner ambiguous), and 36
    # did not learn add6 at all in 15k steps (too flat to tell neighbours apart)
    abacus_max: int = 32
    # Abacus random offset (McLeish et al. 2024), a training-time augmentation like dropout:
    # in train mode each sequence adds one k ~ U{0..abacus_offset} to every digit's abacus
    # index (other tokens keep 0), so the rows for indices beyond the training length get
    # trained too; eval mode (exact match, verification, ood) uses k = 0. Useful only if
    # abacus_max - 1 >= the longest trained number + abacus_offset (indices are clamped to
    # the table). 0 = off.
    abacus_offset: int = 0
    n_loops: int = 1  # times the layer stack is applied with shared weights (looped transformer)
    input_injection: bool = True  # re-add the input embedding before each loop after the first
    # each loop after the first moves the stream h only part of the way to what the loop makes
    # of it, by one learned number m (starts at 0: the model starts as its single pass):
    # h <- h + m * (loop(h) - h). lokimorty's 39 p: n_loops 2, no input injection ("repeat-mix")
    loop_mix: bool = False
    rank: int = 0  # low-rank factorisation W = A @ B of attention/MLP projections; 0 = full rank
    tie_kv: bool = False  # keys and values share one projection (needs d_head == d_vhead)
    # ---- frontier options (reference/frontier-architectures.md; README "Model family").
    # Every weight the forward pass uses is owned (trainable, counted) or derived from owned
    # ones (core/model/weights.py); each option below names what it derives and what it saves.
    n_kv_heads: int | None = None  # K/V heads shared by groups of query heads (GQA); None = n_heads
    # norm gains: vector (d numbers a norm) | scalar (one number times ones, 1 instead of d; a
    # LayerNorm's bias stays a vector). Every norm site, QK-norm aside (qk_norm: scalar)
    norm_weight: str = "vector"
    qk_norm: str = "none"  # none | head: RMSNorm of every q and k head before RoPE, own weights
    #   for q and k (2 * d_head) | shared: one d_head weight for both | scalar: one number times
    #   qk_norm_pattern for both (1 number)
    # which q/k coordinates RoPE (and tie_k: rotated) turns together: split (i, i + d_head/2)
    # | interleaved (2i, 2i+1)
    rope_pairs: str = "split"
    tie_k: str = "none"  # K from Q: none | q (K = Q) | scaled (K = a Q, 1 number) | rotated (K = Q
    #   turned by one learned angle on every RoPE pair, 1 number)
    tie_v: bool = False  # V = Q (needs d_vhead == d_head and n_kv_heads == n_heads)
    tie_o: bool = False  # O = Q^T (needs d_vhead == d_head)
    # rank per projection (W = A @ B), None = `rank`; 0 = full
    rank_q: int | None = None
    rank_k: int | None = None
    rank_v: int | None = None
    rank_o: int | None = None
    rank_mlp: int | None = None  # gate, up and down
    embed: str = "table"  # table: a V x d_embed table | arc: digit t = radius*(cos, sin)(start +
    #   t*stride) in the first two dims, 3 numbers (other tokens keep table rows) | arc2: the
    #   arc with its radius fixed at arc_init's (1 without arc_init), 2 numbers: tbukic's
    #   sweep's 34 p "drop A" (its A fixed at the 2.5 every seed starts from)
    # (radius, start, stride) every member's arc starts from (only with embed: arc, as rope_base
    # only with rope); None = a unit clock of the ten digits from a random start (MicroAdder
    # starts all seeds at [2.5, -1.2, 0.29])
    arc_init: list | None = None
    # std of every normally drawn weight (tables and projections) in place of the scaled
    # defaults (1/sqrt(fan_in), tables 1/sqrt(d)): tbukic's small-model recipe draws N(0, 0.02)
    init_std: float | None = None
    # where the tie angles start (tie_k: rotated's k_angle, mlp_down: up_t_rot's down_angle);
    # 0 = each tie starts as its plain form. tbukic's 36 p starts both at 0.1 in its own
    # convention: its down = up^T R(theta) turns the hidden pair the other way round, so its
    # 0.1 is down_angle_init -0.1 here (scripts/parity/diff_reference.py checks the mapping)
    k_angle_init: float = 0.0
    down_angle_init: float = 0.0
    # epsilon of every RMSNorm / LayerNorm and QK-norm: 1e-5 (torch's LayerNorm; what every
    # checkpoint so far was trained with) or e.g. tbukic's 1e-6 (Qwen3's); a value other than
    # the tiny layout's own (layers._EPS) trains on the reference layout
    norm_eps: float = 1e-5
    d_embed: int | None = None  # token part of the stream: its first d_embed dims; None = all
    split_positions: bool = False  # positions live only in the dims after d_embed (MicroAdder)
    v_from_tokens: bool = False  # V reads only the token part (the first d_embed dims)
    # own | up_t: down = up^T | up_t_rot: up^T with its d_ff pairs turned by one learned angle
    # | up_t_scaled: up^T with each hidden unit's row times its own number (d_ff numbers;
    # lokimorty's 39 p) | head (see unembed_head)
    mlp_down: str = "own"
    tie_gate: bool = False  # swiglu gate = a * up (1 number instead of d_model * d_ff)
    # what tie_gate scales up by: scalar (one number a) | vector (a number per hidden unit,
    # d_ff numbers: tbukic's sweep's "vecscalar" 31 p) | none (gate = up, 0 numbers: its
    # "gateEqUp" 29 p and 33 p); read only with tie_gate, as qk_norm_pattern only with scalar
    gate_scale: str = "scalar"
    # qk_norm scalar's weight is one learned number a times this fixed pattern of d_head numbers
    # (None = ones), for q and k; read only with qk_norm: scalar, as arc_init only with embed:
    # arc. lokimorty's 39 p: the "anti-quarter" [1, 0.25, 0, -1]
    qk_norm_pattern: list | None = None
    # Q and K (and K = V) read only the token part, the first d_embed dims (lokimorty's 39 p:
    # the arc's plane, 4 x 2 numbers each instead of 4 x 3); O = Q^T then writes only there
    qk_from_tokens: bool = False
    # digit_index positions (fixed, counted 0): a digit's place inside its number as a fixed
    # pattern (cos, sin of 2 pi place / 10, then a ramp), one char per position: 0-9 a-z a
    # digit's place, '.' a slot with no position, A-Z a slot with a learned row (shared by equal
    # letters). Filled from the task (`Task.places`) when absent.
    places: str | None = None
    # digit_index: the pattern's radius, phase, ramp and ramp offset learned (4 numbers, from the
    # fixed pattern; MicroAdder's 74 p) instead of fixed
    place_learned: bool = False
    qk_from_positions: bool = False  # Q and K read only the position part (dims after d_embed)
    # unembedding through a head: logits = (norm(x) @ P) . E_tok, P d_model x d_embed owned
    # (MicroAdder's head_proj); V and MLP down may reuse P^T (v_from_head, mlp_down: head)
    unembed_head: bool = False
    v_from_head: bool = False  # V = the token part times P^T (needs v_from_tokens, unembed_head)

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"model config: {field}={getattr(self, field)!r}: {why}")

        for name in ("vocab_size", "n_ctx", "n_layers", "d_model", "n_heads", "n_loops"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 1, name,
                 "must be a whole number >= 1")
        for name in ("n_kv_heads", "rank_q", "rank_k", "rank_v", "rank_o", "rank_mlp",
                     "d_embed"):
            v = getattr(self, name)
            need(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0
                               and (v >= 1 or name.startswith("rank"))), name,
                 "must be a whole number (>= 1; ranks >= 0) or null")
        for name in ("d_ff", "rank", "abacus_offset"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, name,
                 "must be a whole number >= 0")
        need(self.vocab_size >= 10, "vocab_size", "must hold at least the ten digits")
        # from_dict takes JSON/YAML: "false" or 1 must not slip through as a truthy flag
        for name in ("norm_bias", "final_norm", "share_norms", "attn_bias", "mlp_bias",
                     "unembed_bias", "tie_embeddings", "input_injection", "tie_kv", "tie_v",
                     "tie_o", "split_positions", "v_from_tokens", "tie_gate",
                     "qk_from_positions", "unembed_head", "v_from_head", "place_learned",
                     "loop_mix", "qk_from_tokens"):
            need(isinstance(getattr(self, name), bool), name, "must be true or false")
        need(isinstance(self.abacus_max, int) and not isinstance(self.abacus_max, bool),
             "abacus_max", "must be a whole number >= 2")
        need(isinstance(self.rope_base, (int, float)) and not isinstance(self.rope_base, bool)
             and math.isfinite(self.rope_base), "rope_base", "must be a finite number")
        for name, allowed in MODEL_WORDS.items():
            need(getattr(self, name) in allowed, name, f"must be one of {', '.join(allowed)}")
        if self.init_std is not None:
            need(isinstance(self.init_std, (int, float)) and not isinstance(self.init_std, bool)
                 and 0 < self.init_std < 10, "init_std", "must be a number in (0, 10) or null")
            self.init_std = float(self.init_std)
        for f in ("k_angle_init", "down_angle_init", "norm_eps"):
            v = getattr(self, f)
            need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                 and abs(v) < 10, f, "must be a finite number of magnitude below 10")
            setattr(self, f, float(v))
        need(0 < self.norm_eps <= 1e-2, "norm_eps", "must be in (0, 0.01]")
        if self.arc_init is not None:
            need(isinstance(self.arc_init, (list, tuple)) and len(self.arc_init) == 3
                 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                         and math.isfinite(v) for v in self.arc_init), "arc_init",
                 "must be three numbers [radius, start, stride] (or null)")
            self.arc_init = [float(v) for v in self.arc_init]
        if self.d_head is None:
            need(self.d_model % self.n_heads == 0, "n_heads",
                 f"must divide d_model={self.d_model} unless d_head is given")
        else:
            need(isinstance(self.d_head, int) and not isinstance(self.d_head, bool)
                 and self.d_head >= 1, "d_head",
                 "must be a whole number >= 1 (or null)")
        if self.d_vhead is None:
            need(self.d_model % self.n_heads == 0, "n_heads",
                 f"must divide d_model={self.d_model} unless d_vhead is given")
        else:
            need(isinstance(self.d_vhead, int) and not isinstance(self.d_vhead, bool)
                 and self.d_vhead >= 1, "d_vhead",
                 "must be a whole number >= 1 (or null)")
        if self.pos in ("rope", "abacus_rope"):
            need(self.qk_head % 2 == 0, "d_head",
                 f"rope needs an even q/k head width (got {self.qk_head})")
            # abacus_rope takes 1: every pair at the fastest rate, so a head's score is one
            # sinusoid in the place difference, which cannot bend back within abacus_max
            need(self.rope_base > 1 or (self.pos == "abacus_rope" and self.rope_base == 1),
                 "rope_base", "must be > 1 (abacus_rope: >= 1)")
        need(self.abacus_max >= 2, "abacus_max", "must be >= 2")
        if self.tie_kv:
            need(self.qk_head == self.v_head, "tie_kv",
                 f"needs equal q/k and value head widths (got {self.qk_head} and {self.v_head})")
        if self.rank:
            need(self.rank < self.d_model, "rank",
                 f"must be below d_model={self.d_model} (0 = full)")
        check_frontier(self, need)

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def tok_dims(self) -> int:  # the token part of the residual stream: dims [0, tok_dims)
        return self.d_embed if self.d_embed is not None else self.d_model

    def rank_of(self, proj: str) -> int:
        """Rank of projection q | k | v | o | mlp (0 = full)."""
        r = getattr(self, f"rank_{proj}")
        return self.rank if r is None else r

    @property
    def qk_head(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def v_head(self) -> int:
        return self.d_vhead if self.d_vhead is not None else self.d_model // self.n_heads

    def summary(self) -> str:
        """A short architecture label for tables, e.g. `1L d7 h1 ff14 relu ln tied learned`."""
        parts = [f"{self.n_layers}L", f"d{self.d_model}", f"h{self.n_heads}"]
        if self.d_head is not None:
            parts.append(f"dh{self.d_head}")
        if self.d_vhead is not None:
            parts.append(f"dv{self.d_vhead}")
        parts.append(f"ff{self.d_ff}" if self.d_ff else "noMLP")
        if self.d_ff:
            parts.append(self.activation)
        parts.append({"layer": "ln", "rms": "rms", "none": "nonorm"}[self.norm])
        if self.tie_embeddings:
            parts.append("tied")
        parts.append(self.pos)
        if self.n_loops > 1:
            parts.append(f"x{self.n_loops}")
        if self.rank:
            parts.append(f"r{self.rank}")
        if self.tie_kv:
            parts.append("k=v")
        parts += frontier_labels(self)
        return " ".join(parts)
