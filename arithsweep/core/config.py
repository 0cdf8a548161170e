"""Every configuration dataclass, validated, with the ONE set of defaults.

`ModelConfig` describes an architecture in the searched family, `TrainConfig` one training run
of K packed seeds. Their field defaults *are* what `arithsweep train` does with no options
(1 layer, d_model 16, 2 heads, d_ff 32, relu, LayerNorm, tied embeddings, learned positions;
3000 steps of batch 128 per seed at lr 1e-2, 4 seeds): reaches 99%+ exact match on add3 in
about half a minute on a 2-core CPU. Search spaces, checkpoints and `--set` override fields;
nothing else holds a second copy of a default.

Torch-free on purpose, so that search spaces, the CLI and `arithsweep params` validate a
configuration without importing torch. Errors name the field (`ConfigError`).

    python -c "from arithsweep.core.config import ModelConfig, TrainConfig; \
        print(ModelConfig(vocab_size=12, n_ctx=11).summary(), TrainConfig())"
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

from arithsweep.core.config_checks import (
    check_frontier,
    check_phases,
    check_stages,
    check_wd_drops,
    frontier_labels,
)
from arithsweep.core.errors import ConfigError
from arithsweep.core.numbers import coerce_field

C = TypeVar("C", bound="DictConfig")


class DictConfig:
    _label: ClassVar[str] = "config"  # how errors name this kind of config

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], d: dict[str, Any]) -> C:
        if not isinstance(d, dict):
            raise ConfigError(f"{cls._label}: expected a mapping of fields, got {type(d).__name__}")
        types = {f.name: str(f.type) for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - set(types))
        if unknown:
            raise ConfigError(f"{cls._label}: unknown field(s) {', '.join(unknown)}")
        # YAML's `1e-3` is a string, JSON's `2e3` a float: one reading of numbers for every source
        return cls(**{k: coerce_field(cls._label, k, v, types[k]) for k, v in d.items()})


ACTIVATIONS = ("relu", "gelu", "swiglu")
NORMS = ("layer", "rms", "none")
# positions read from the tokens: each digit's place within its own number (abacus index)
ABACUS_POSITIONS = ("abacus", "abacus_rope", "abacus_bias")
POSITIONS = ("learned", "sinusoidal", "rope", *ABACUS_POSITIONS, "digit_index", "none")
EMBEDS = ("table", "arc")
QK_NORMS = ("none", "head", "shared", "scalar")
NORM_WEIGHTS = ("vector", "scalar")
ROPE_PAIRS = ("split", "interleaved")
TIE_K = ("none", "q", "scaled", "rotated")
MLP_DOWN = ("own", "up_t", "up_t_rot", "up_t_scaled", "head")
# ModelConfig's word-valued fields and their words (search spaces check a value against these
# alone: whether it fits the other fields is the whole config's business)
MODEL_WORDS = {"activation": ACTIVATIONS, "norm": NORMS, "pos": POSITIONS, "embed": EMBEDS,
               "qk_norm": QK_NORMS, "rope_pairs": ROPE_PAIRS, "tie_k": TIE_K,
               "mlp_down": MLP_DOWN, "norm_weight": NORM_WEIGHTS}


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
    #   t*stride) in the first two dims, 3 numbers (other tokens keep table rows)
    # (radius, start, stride) every member's arc starts from (only with embed: arc, as rope_base
    # only with rope); None = a unit clock of the ten digits from a random start (MicroAdder
    # starts all seeds at [2.5, -1.2, 0.29])
    arc_init: list | None = None
    # std of every normally drawn weight (tables and projections) in place of the scaled
    # defaults (1/sqrt(fan_in), tables 1/sqrt(d)): tbukic's small-model recipe draws N(0, 0.02)
    init_std: float | None = None
    d_embed: int | None = None  # token part of the stream: its first d_embed dims; None = all
    split_positions: bool = False  # positions live only in the dims after d_embed (MicroAdder)
    v_from_tokens: bool = False  # V reads only the token part (the first d_embed dims)
    # own | up_t: down = up^T | up_t_rot: up^T with its d_ff pairs turned by one learned angle
    # | up_t_scaled: up^T with each hidden unit's row times its own number (d_ff numbers;
    # lokimorty's 39 p) | head (see unembed_head)
    mlp_down: str = "own"
    tie_gate: bool = False  # swiglu gate = a * up (1 number instead of d_model * d_ff)
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


SAMPLINGS = ("uniform", "values", "carry", "mixed", "enriched")
SAMPLERS = ("hash", "stream")
LAYOUTS = ("auto", "reference", "tiny")
# Train fields whose default changed: a checkpoint's train config that lacks one was made
# under the old default, so loading it fills these in before the dataclass defaults apply,
# and retraining reproduces it.
LEGACY_TRAIN_DEFAULTS = {"sampler": "stream"}


MAX_SEEDS = 1024  # seeds packed into one training run


@dataclass
class TrainConfig(DictConfig):
    _label = "train config"  # unannotated: a class attribute, not a dataclass field

    steps: int = 3000  # optimiser steps of the first cosine pass (early stop may end sooner)
    batch_size: int = 128  # problems per step *per seed*
    lr: float = 1e-2  # peak learning rate after warmup
    min_lr_ratio: float = 0.05  # cosine floor as a fraction of lr
    warmup: int = 50  # linear warmup steps
    weight_decay: float = 0.01  # AdamW decoupled decay, on the parameters weight_decay_scope says
    # matrices: projections and tables only (norm gains and biases are not pulled to 0) | all:
    # every parameter, the tie numbers and norm gains too (MicroAdder's and tbukic's AdamW)
    weight_decay_scope: str = "matrices"
    # adaptive decay (MicroAdder's 74 p): [[exact_match, factor], ...]; after each evaluation a
    # member decays at factor * weight_decay for the last pair whose held-out exact match it has
    # reached with >= 70% of its answer digits right, else at weight_decay (so decay returns if
    # it falls back). MicroAdder: [[0.02, 0.1], [0.2, 0.01]]. None = constant.
    wd_drops: list | None = None
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0  # per-seed global-norm clip; 0 = off
    seeds: int = 4  # K: seeds of one architecture trained together
    seed: int = 0  # seed i of the pack is seed + i (init and data)
    # uniform (operand lengths uniform) | values (operands uniform over the problem space) |
    # carry (carry cascades forced) | mixed: carry_frac carry, the rest half uniform, half values
    # | enriched: Quirke's classes S0..S5, M0..M4, N1..N4 in equal shares (add/sub/mix only;
    # core/data/quirke.py)
    sampling: str = "mixed"
    # hash: counter-based, keyed by (seed, step, row), all members in one vectorised call, the
    # same on CPU and CUDA (core/data/hash_sampling.py). stream: the older per-seed torch.Generator
    # stream; checkpoints saved without this field were trained with it, so loading one (or
    # retraining from its config.json) without the field means "stream" (model/checkpoint.py,
    # overrides.py); recipes/add10-742.yaml says `sampler: stream` itself.
    sampler: str = "hash"
    carry_frac: float = 0.25  # with "mixed": share of each batch drawn carry-enriched
    # the carry rows' pattern: chain (a carry, then a run of 9-sums of random length) | mixed
    # (a third each: a single carry at a random place, such a chain, a chain out of the top
    # digit; MicroAdder's sampler mixes these)
    carry_patterns: str = "chain"
    # The carry share fades linearly from carry_frac to 0 between these fractions of `steps`
    # (MicroAdder: 80% fading between 25% and 75%); equal = no fade.
    carry_fade_start: float = 0.0
    carry_fade_end: float = 0.0
    # with "mixed": share of the rows that are not carry rows drawn uniform over values (the
    # rest: uniform operand lengths); MicroAdder draws them all over values (1.0)
    values_share: float = 0.5
    # Unequal stages, as the records train: [[until_step, max_digits], ...] in rising order, e.g.
    # MicroAdder's [[2000, 3], [7000, 6]] (1-3 digits to step 2K, 1-6 to 7K, then all); when
    # given it replaces curriculum_steps / curriculum_stages.
    curriculum: list | None = None
    curriculum_steps: int = 0  # steps over which the longest operand length grows to full; 0 = off
    # 0: the longest operand grows by one digit at a time over curriculum_steps; k > 0: k equal
    # stages, stage i capped at ceil(N*(i+1)/(k+1)) digits (MicroAdder's 3 / 6 / 10 for k=2)
    curriculum_stages: int = 0
    # Length generalisation (McLeish et al. 2024): train only on operands of at most this many
    # digits although the task (vocabulary, context) covers more; None = the task's full length.
    # Evaluation during training is capped the same way, so seed selection never sees longer
    # problems; `arithsweep ood` measures how far the model generalises beyond it.
    train_digits: int | None = None
    restart_steps: int = 0  # a second cosine pass of this many steps (warm restart); 0 = off
    # Phases after the cosine (and restart), before the polish: a list of {steps, lr, schedule:
    # constant | cosine (to min_lr_ratio), grokfast: bool}. A phase with grokfast on applies the
    # Grokfast filter below; once any phase asks for it, only those phases do (tbukic's 36 p: a
    # long cosine, then a low-lr Grokfast phase). E.g. [{steps: 20000, lr: 1.0e-3,
    # schedule: cosine, min_lr_ratio: 0.1, grokfast: true}].
    phases: list | None = None
    # Grokfast-EMA gradient filter: g += lambda * EMA_alpha(g), amplifying the slow gradient
    # components that generalise; alpha 0 = off (the 36-p AdderBoard record used 0.98 and 3)
    grokfast_alpha: float = 0.0
    grokfast_lambda: float = 0.0
    # Polish: after training, this many steps at constant lr polish_lr on batches half made of
    # the member's own errors, mined from polish_pool problems of the TRAINING split only
    # (never a held-out problem: those are verification's). 0 = off.
    polish_steps: int = 0
    polish_lr: float = 1e-3
    polish_pool: int = 100_000
    # L-BFGS polish, last: per member, this many full-batch L-BFGS iterations on lbfgs_pool
    # fixed TRAINING-split problems (staghado's 122 p: 2,048); 0 = off
    lbfgs_steps: int = 0
    lbfgs_pool: int = 2048
    # Finishers for near misses (core/training/finish.py), after training, on the best member
    # when it misses the target (`train`; a search trial from 95% up): 95-99% models are
    # finished this way, not by more steps. Each is kept only if held-out exact match does not
    # fall (fine-tuning) or rises (CMA-ES); both see only the TRAINING split.
    # Targeted fine-tuning: up to finish_rounds rounds (0 = off) of finish_steps AdamW steps
    # (no decay) at finish_lr on batches of the member's errors among finish_pool fixed
    # training-split problems, padded with fresh training problems to batch_size; the errors
    # are mined again each round, until none is left (tbukic's 36 p: 2 rounds, 70 pairs, 1e-4).
    finish_rounds: int = 0
    finish_steps: int = 200
    finish_lr: float = 1e-4
    finish_pool: int = 10_000
    # CMA-ES polish of the whole weight vector (models of at most 128 numbers): this many
    # candidate evaluations (0 = off) from step size finish_cmaes_sigma, scored on the same
    # pool (the 49-p claim: sigma 5e-4, 97.4% -> 100%)
    finish_cmaes_evals: int = 0
    finish_cmaes_sigma: float = 5e-4
    eval_every: int = 100  # steps between exact-match evaluations
    eval_size: int = 4096  # held-out problems per evaluation (disjoint from the training stream)
    target: float = 0.99  # early stop once any seed reaches this exact match
    early_stop: bool = True
    # examples per forward/backward across the whole pack; a step is split into micro-batches
    # of about this size and their gradients summed (same update). 0 = auto: ~1024 on a CPU,
    # where a bigger call spills the L2 cache, and the whole step on a GPU.
    micro_batch: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    compile: bool = False  # torch.compile the packed loss (pays off on long runs)
    # on CUDA, record the whole step (forward, backward, clipping, AdamW) once as a CUDA graph
    # and replay it (core/training/step.py); false = launch every kernel every step (for comparison)
    cuda_graph: bool = True
    # how a step computes loss and gradients: reference (the PyTorch model) | tiny (one-block
    # models in one C kernel, CPU only: core/model/tiny_layout.py) | auto: tiny where the model
    # fits it and is small enough to gain (training.train.choose_layout), else reference
    layout: str = "auto"
    time_budget: float = 0.0  # seconds; stop after the evaluation that crosses it; 0 = none
    # A long run's whole state (weights, AdamW moments, Grokfast EMA, decay drops, data streams'
    # positions, RNGs, histories: core/training/resume.py) is written every checkpoint_every
    # steps, or with 0 about every checkpoint_seconds of wall time, and when the run stops, so
    # `train --resume` and a restored search trial continue it bit for bit. When states are
    # written never changes what is trained.
    checkpoint_every: int = 0
    checkpoint_seconds: float = 300.0

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"train config: {field}={getattr(self, field)!r}: {why}")

        def whole(field: str, lo: int) -> None:
            v = getattr(self, field)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= lo, field,
                 f"must be a whole number >= {lo}")

        for f in ("steps", "batch_size", "seeds", "eval_every", "eval_size"):
            whole(f, 1)
        # every seed is a copy of the model and its batch in one step: 100,000 took 14 GB and
        # five minutes before its first step; more than this is a typo, or several runs
        need(self.seeds <= MAX_SEEDS, "seeds", f"at most {MAX_SEEDS} are trained together; "
             f"train more in several runs (--seed sets the first)")
        for f in ("warmup", "curriculum_steps", "curriculum_stages", "restart_steps", "seed",
                  "micro_batch", "polish_steps", "checkpoint_every"):
            whole(f, 0)
        if self.train_digits is not None:
            whole("train_digits", 1)
        whole("polish_pool", 1)
        need(0 <= self.carry_fade_start <= self.carry_fade_end <= 1, "carry_fade_end",
             "carry_fade_start <= carry_fade_end must both be fractions of steps in [0, 1]")
        need(isinstance(self.values_share, (int, float)) and not isinstance(
            self.values_share, bool) and 0 <= self.values_share <= 1, "values_share",
             "must be a fraction in [0, 1]")
        need(0 <= self.grokfast_alpha < 1, "grokfast_alpha", "must be in [0, 1) (0 = off)")
        need(self.grokfast_lambda >= 0, "grokfast_lambda", "must be >= 0")
        need(self.polish_lr > 0, "polish_lr", "must be > 0")
        need(self.lr > 0, "lr", "must be > 0")
        need(self.checkpoint_seconds > 0, "checkpoint_seconds", "must be > 0")
        need(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]")
        need(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        need(0 <= self.beta1 < 1, "beta1", "must be in [0, 1)")
        need(0 <= self.beta2 < 1, "beta2", "must be in [0, 1)")
        need(self.grad_clip >= 0, "grad_clip", "must be >= 0 (0 = off)")
        need(self.sampling in SAMPLINGS, "sampling", f"must be one of {', '.join(SAMPLINGS)}")
        need(self.carry_patterns in ("chain", "mixed"), "carry_patterns", "must be chain or mixed")
        need(self.weight_decay_scope in ("matrices", "all"), "weight_decay_scope",
             "must be matrices or all")
        if self.curriculum is not None:
            self.curriculum = check_stages(self.curriculum)
        if self.wd_drops is not None:
            self.wd_drops = check_wd_drops(self.wd_drops)
        need(self.layout in LAYOUTS, "layout", f"must be one of {', '.join(LAYOUTS)}")
        need(self.sampler in SAMPLERS, "sampler", f"must be one of {', '.join(SAMPLERS)}")
        need(0 <= self.carry_frac <= 1, "carry_frac", "must be in [0, 1]")
        need(0 < self.target <= 1, "target", "must be in (0, 1]")
        need(self.time_budget >= 0, "time_budget", "must be >= 0 seconds (0 = none)")
        need(isinstance(self.device, str) and (self.device in ("auto", "cpu")
             or self.device.startswith("cuda")), "device", "must be auto, cpu, cuda or cuda:N")
        if self.phases is not None:
            self.phases = check_phases(self.phases)
        whole("lbfgs_steps", 0)
        whole("lbfgs_pool", 1)
        for f in ("finish_rounds", "finish_cmaes_evals"):
            whole(f, 0)
        whole("finish_steps", 1)
        whole("finish_pool", 1)
        for f in ("finish_lr", "finish_cmaes_sigma"):
            v = getattr(self, f)
            need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                 and v > 0, f, "must be a finite number > 0")

    @property
    def main_steps(self) -> int:
        """Steps before the polish: the cosine, the restart and every phase."""
        return self.steps + self.restart_steps + sum(p["steps"] for p in self.phases or ())

    @property
    def grokfast_phased(self) -> bool:  # the filter only in the phases that ask for it
        return any(p["grokfast"] for p in self.phases or ())
