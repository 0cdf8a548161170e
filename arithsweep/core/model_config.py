"""`ModelConfig`: the one validated description of an architecture in the searched family.

Torch-free on purpose, so that search spaces, the CLI and `arithsweep params` validate a
configuration without importing torch; `arithsweep.model` builds the network from it.

    from arithsweep.model_config import ModelConfig
    ModelConfig(vocab_size=14, n_ctx=35, d_model=7, d_ff=14).summary()
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arithsweep.dictconfig import DictConfig
from arithsweep.errors import ConfigError

ACTIVATIONS = ("relu", "gelu", "swiglu")
NORMS = ("layer", "rms", "none")
POSITIONS = ("learned", "sinusoidal", "rope", "abacus", "none")


@dataclass
class ModelConfig(DictConfig):
    _label = "model config"  # unannotated: a class attribute, not a dataclass field

    vocab_size: int  # from the task; token ids 0..9 are always the digits
    n_ctx: int  # longest input the model sees (learned position table size)
    n_layers: int = 1
    d_model: int = 16
    n_heads: int = 1
    d_head: int | None = None  # q/k width per head; None = d_model // n_heads
    d_vhead: int | None = None  # value width per head ("split widths"); None = d_model // n_heads
    d_ff: int = 64  # MLP hidden width; 0 = attention-only blocks
    activation: str = "relu"  # relu | gelu | swiglu (swiglu has two input projections)
    norm: str = "layer"  # layer | rms | none, before attention and before the MLP
    norm_bias: bool = True  # LayerNorm's additive bias (rms has none)
    final_norm: bool = True  # a norm before the unembedding
    share_norms: bool = False  # one set of norm weights for every norm site (AdderBoard trick)
    attn_bias: bool = False  # biases on q/k/v/o projections
    mlp_bias: bool = False  # biases on the MLP projections
    unembed_bias: bool = False
    tie_embeddings: bool = True  # unembedding = embedding transposed
    pos: str = "learned"  # learned | sinusoidal | rope | abacus | none
    rope_base: float = 10000.0  # only with pos == "rope"
    abacus_max: int = 32  # abacus table size: most digits one number may have (+1)
    n_loops: int = 1  # times the layer stack is applied with shared weights (looped transformer)
    input_injection: bool = True  # re-add the input embedding before each loop after the first
    rank: int = 0  # low-rank factorisation W = A @ B of attention/MLP projections; 0 = full rank
    tie_kv: bool = False  # keys and values share one projection (needs d_head == d_vhead)

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"model config: {field}={getattr(self, field)!r}: {why}")

        for name in ("vocab_size", "n_ctx", "n_layers", "d_model", "n_heads", "n_loops"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 1, name,
                 "must be a whole number >= 1")
        for name in ("d_ff", "rank"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, name,
                 "must be a whole number >= 0")
        need(self.vocab_size >= 10, "vocab_size", "must hold at least the ten digits")
        # from_dict takes JSON/YAML: "false" or 1 must not slip through as a truthy flag
        for name in ("norm_bias", "final_norm", "share_norms", "attn_bias", "mlp_bias",
                     "unembed_bias", "tie_embeddings", "input_injection", "tie_kv"):
            need(isinstance(getattr(self, name), bool), name, "must be true or false")
        need(isinstance(self.abacus_max, int) and not isinstance(self.abacus_max, bool),
             "abacus_max", "must be a whole number >= 2")
        need(isinstance(self.rope_base, (int, float)) and not isinstance(self.rope_base, bool)
             and math.isfinite(self.rope_base), "rope_base", "must be a finite number")
        need(self.activation in ACTIVATIONS, "activation",
             f"must be one of {', '.join(ACTIVATIONS)}")
        need(self.norm in NORMS, "norm", f"must be one of {', '.join(NORMS)}")
        need(self.pos in POSITIONS, "pos", f"must be one of {', '.join(POSITIONS)}")
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
        if self.pos == "rope":
            need(self.qk_head % 2 == 0, "d_head",
                 f"rope needs an even q/k head width (got {self.qk_head})")
            need(self.rope_base > 1, "rope_base", "must be > 1")
        need(self.abacus_max >= 2, "abacus_max", "must be >= 2")
        if self.tie_kv:
            need(self.qk_head == self.v_head, "tie_kv",
                 f"needs equal q/k and value head widths (got {self.qk_head} and {self.v_head})")
        if self.rank:
            need(self.rank < self.d_model, "rank",
                 f"must be below d_model={self.d_model} (0 = full)")

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
        return " ".join(parts)
