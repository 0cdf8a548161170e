"""The checks and labels of `ModelConfig`'s frontier options and `TrainConfig`'s list fields.

Kept beside `arithsweep.core.model_config` and `train_config` (which call them from their
`__post_init__`s and `summary`) so that the dataclasses read as their fields and defaults;
torch-free like them.

    python -c "from arithsweep.core.config_checks import check_stages; \
        print(check_stages([[2000, 3], [7000, 6]]))"
"""

from __future__ import annotations

import math
from typing import Any

from arithsweep.core.errors import ConfigError
from arithsweep.core.numbers import read_number


def check_frontier(cfg, need) -> None:
    """The frontier options' mutual requirements, for ModelConfig.__post_init__ (`cfg` is the
    config, `need(ok, field, why)` its error helper): each message says what to change."""
    for name in ("rank_q", "rank_k", "rank_v", "rank_o", "rank_mlp"):
        r = getattr(cfg, name)
        if r:
            need(r < cfg.d_model, name, f"must be below d_model={cfg.d_model} (0 = full)")
    if cfg.n_kv_heads is not None:
        need(cfg.n_heads % cfg.n_kv_heads == 0, "n_kv_heads",
             f"must divide n_heads={cfg.n_heads}")
    if cfg.d_embed is not None:
        need(cfg.d_embed <= cfg.d_model, "d_embed",
             f"must be at most d_model={cfg.d_model}")
    if cfg.embed in ("arc", "arc2"):
        need(cfg.tok_dims >= 2, "embed", f"{cfg.embed} needs a token part at least 2 wide")
    if cfg.split_positions:
        need(cfg.tok_dims < cfg.d_model, "split_positions",
             "needs d_embed < d_model (the dims after d_embed hold the positions)")
        need(cfg.pos in ("learned", "sinusoidal", "abacus", "digit_index"),
             "split_positions", "needs additive positions (learned, sinusoidal, abacus, "
             "digit_index)")
    if cfg.v_from_tokens:
        need(not (cfg.tie_kv or cfg.tie_v), "v_from_tokens",
             "V reads the token part only, so it cannot be tied to K or Q")
    if cfg.tie_k == "rotated":
        need(cfg.qk_head >= 2, "tie_k",
             f"rotated turns pairs of K's coordinates: it needs d_head >= 2 (got {cfg.qk_head})")
        need(cfg.qk_head % 2 == 0 or cfg.rope_pairs == "interleaved", "tie_k",
             f"rotated needs an even d_head, or rope_pairs interleaved to leave the last "
             f"coordinate unturned (got d_head {cfg.qk_head}, pairs {cfg.rope_pairs})")
    if cfg.tie_k != "none":
        need(not cfg.tie_kv, "tie_k", "K from Q and K = V together: use tie_v instead")
        need(cfg.kv_heads == cfg.n_heads, "tie_k", "K from Q needs n_kv_heads == n_heads")
    if cfg.tie_v:
        need(cfg.qk_head == cfg.v_head and cfg.kv_heads == cfg.n_heads, "tie_v",
             "V = Q needs d_vhead == d_head and n_kv_heads == n_heads")
        need(not cfg.tie_kv, "tie_v", "V = Q and K = V together: use tie_k: q")
    if cfg.tie_o:
        need(cfg.qk_head == cfg.v_head, "tie_o", "O = Q^T needs d_vhead == d_head")
    if cfg.mlp_down != "own":
        need(cfg.d_ff > 0, "mlp_down", "needs an MLP (d_ff > 0)")
    if cfg.mlp_down == "head":
        need(cfg.unembed_head and cfg.d_ff == cfg.tok_dims, "mlp_down",
             "head needs unembed_head and d_ff == d_embed (down = P^T)")
    if cfg.unembed_head:
        need(cfg.tie_embeddings and not cfg.unembed_bias, "unembed_head",
             "needs tie_embeddings (the head projects onto the token table) and no bias")
    if cfg.v_from_head:
        need(cfg.v_from_tokens and cfg.unembed_head and cfg.kv_heads * cfg.v_head
             == cfg.d_model, "v_from_head",
             "needs v_from_tokens, unembed_head and n_kv_heads * d_vhead == d_model")
    if cfg.qk_from_positions:
        need(cfg.split_positions, "qk_from_positions", "needs split_positions")
        need(not (cfg.tie_o or cfg.tie_v or cfg.tie_kv), "qk_from_positions",
             "Q reads the position part only, so O, V and K = V cannot be tied to it")
    if cfg.pos == "digit_index":
        need(isinstance(cfg.places, str) and len(cfg.places) >= cfg.n_ctx
             and all(c == "." or c.isalnum() and c.isascii() for c in cfg.places),
             "places", f"digit_index needs a place per position (at least n_ctx="
                       f"{cfg.n_ctx} chars of 0-9 a-z . A-Z)")
    if cfg.place_learned:
        need(cfg.pos == "digit_index", "place_learned", "needs pos digit_index")
    if cfg.mlp_down == "up_t_rot":
        need(cfg.d_ff % 2 == 0, "mlp_down", f"up_t_rot needs an even d_ff (got {cfg.d_ff})")
    if cfg.tie_gate:
        need(cfg.activation == "swiglu", "tie_gate", "needs activation swiglu")
    else:  # a scale of a gate that is its own weight would be a silent no-op: say so
        need(cfg.gate_scale == "scalar", "gate_scale",
             "scales the gate tied to up: it needs tie_gate true (else leave it at scalar)")
    if cfg.norm_weight == "scalar":
        need(cfg.norm != "none", "norm_weight", "scalar needs a norm (norm layer or rms)")
    if cfg.loop_mix:
        need(cfg.n_loops >= 2, "loop_mix", f"needs n_loops >= 2 (got {cfg.n_loops})")
    if cfg.qk_from_tokens:
        need(cfg.tok_dims < cfg.d_model, "qk_from_tokens",
             "needs d_embed < d_model (Q and K read the first d_embed dims)")
        need(not cfg.qk_from_positions, "qk_from_tokens",
             "Q and K read the tokens or the positions, not both: drop qk_from_positions")
    if cfg.qk_norm_pattern is not None:  # checked, then kept only where it is read: a space
        # fixes it beside a searched qk_norm, and a head / shared model is the same model
        # without it (a board entry's point in the space must not differ by it)
        pattern = _pattern(cfg, need)
        cfg.qk_norm_pattern = pattern if cfg.qk_norm == "scalar" else None


def _pattern(cfg, need) -> list[float]:
    """qk_norm_pattern as floats: a list of finite numbers, d_head of them with qk_norm scalar
    (the only mode that reads it: a space may fix it beside a searched qk_norm)."""
    p = cfg.qk_norm_pattern
    need(isinstance(p, (list, tuple)) and len(p) > 0 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        for v in p), "qk_norm_pattern",
         "must be a list of numbers, one per q/k coordinate, e.g. [1, 0.25, 0, -1] (or null)")
    if cfg.qk_norm == "scalar":
        need(len(p) == cfg.qk_head, "qk_norm_pattern",
             f"needs d_head={cfg.qk_head} numbers (got {len(p)})")
    return [float(v) for v in p]


def frontier_labels(cfg) -> list[str]:
    """The frontier options' part of ModelConfig.summary() (`cfg` is the config)."""
    out = []
    if cfg.n_kv_heads is not None and cfg.n_kv_heads != cfg.n_heads:
        out.append(f"kv{cfg.n_kv_heads}")
    if cfg.qk_norm == "scalar" and cfg.qk_norm_pattern is not None:
        out.append("qkn-a*" + ",".join(f"{v:g}" for v in cfg.qk_norm_pattern))
    elif cfg.qk_norm != "none":
        out.append(f"qkn-{cfg.qk_norm}")
    if cfg.norm_weight == "scalar":
        out.append("norm-scalar")
    if cfg.loop_mix:
        out.append("loop-mix")
    if cfg.pos == "rope" and cfg.rope_pairs != "split":
        out.append("rope-il")
    if cfg.tie_k != "none":
        out.append({"q": "k=q", "scaled": "k=aq", "rotated": "k=rot(q)"}[cfg.tie_k])
    gate = {"scalar": "gate=a*up", "vector": "gate=a_j*up", "none": "gate=up"}[cfg.gate_scale]
    out += [lab for on, lab in ((cfg.tie_v, "v=q"), (cfg.tie_o, "o=qT"),
                                (cfg.split_positions, "split-pos"),
                                (cfg.v_from_tokens, "v<-tok"), (cfg.tie_gate, gate))
            if on]
    ranks = [f"{p}{cfg.rank_of(p)}" for p in ("q", "k", "v", "o", "mlp")
             if getattr(cfg, f"rank_{p}") is not None]
    if ranks:
        out.append("r:" + ",".join(ranks))
    if cfg.embed != "table":
        out.append(f"emb-{cfg.embed}")
    if cfg.d_embed is not None and cfg.d_embed != cfg.d_model:
        out.append(f"de{cfg.d_embed}")
    if cfg.mlp_down != "own":
        out.append(f"down={cfg.mlp_down}")
    out += [lab for on, lab in ((cfg.qk_from_positions, "qk<-pos"),
                                (cfg.qk_from_tokens, "qk<-tok"),
                                (cfg.unembed_head, "head"), (cfg.v_from_head, "v=headT"),
                                (cfg.place_learned, "places-learned"))
            if on]
    return out


def _rising_pairs(value: Any, kind: type, bad: ConfigError, field: str,
                  ok: Any) -> list[list[Any]]:
    """A non-empty list of [a, b] pairs of `kind` numbers (read as everywhere else: YAML's `2e3`
    is text, JSON's a float), each pair passing `ok`, the first numbers strictly rising; `bad`
    otherwise."""
    if not isinstance(value, (list, tuple)) or not value:
        raise bad
    out: list[list[Any]] = []
    for pair in value:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise bad
        try:
            pair = [read_number(x, kind, field) for x in pair]
        except ConfigError:
            raise bad from None
        if not ok(*pair) or (out and pair[0] <= out[-1][0]):
            raise bad
        out.append(pair)
    return out


def check_stages(value: Any) -> list[list[int]]:
    """Validate a curriculum [[until_step, max_digits], ...]: whole numbers, steps rising."""
    bad = ConfigError(f"train config: curriculum={value!r}: must be a list of [until_step, "
                      f"max_digits] pairs of whole numbers >= 1 with rising steps, e.g. "
                      f"[[2000, 3], [7000, 6]]")
    return _rising_pairs(value, int, bad, "curriculum", lambda step, digits: min(step, digits) >= 1)


def check_wd_drops(value: Any) -> list[list[float]]:
    """Validate adaptive weight decay [[exact_match, factor], ...]: fractions, rising exact
    match, factors in [0, 1]."""
    bad = ConfigError(f"train config: wd_drops={value!r}: must be a list of [exact_match, "
                      f"factor] pairs, exact match in (0, 1] rising, factor in [0, 1], e.g. "
                      f"[[0.02, 0.1], [0.2, 0.01]]")
    return [[float(at), float(f)] for at, f in _rising_pairs(
        value, float, bad, "wd_drops", lambda at, f: 0 < at <= 1 and 0 <= f <= 1)]


def check_cull(value: Any, steps: int, eval_every: int) -> list[list[int]]:
    """Validate successive halving [[step, keep], ...]: evaluation steps within the schedule,
    rising, each keeping at least one member, never more than the cull before (a keep of
    the proposal's seeds or more culls none: a space's seeds follow each proposal's size)."""
    bad = ConfigError(f"train config: cull={value!r}: must be a list of [step, keep] pairs of "
                      f"whole numbers, steps rising evaluation steps (multiples of eval_every "
                      f"{eval_every}) up to steps ({steps}), keep >= 1 and not rising, e.g. "
                      f"[[50000, 32], [200000, 8]]")
    pairs = _rising_pairs(value, int, bad, "cull", lambda at, keep: 0 < at <= steps
                          and at % eval_every == 0 and keep >= 1)
    if any(b[1] > a[1] for a, b in zip(pairs, pairs[1:])):
        raise bad
    return pairs


_PHASE_KEYS = {"steps": int, "lr": float, "schedule": str, "min_lr_ratio": float,
               "grokfast": bool}


def check_phases(value: Any) -> list[dict[str, Any]]:
    """Validate the phases list; fill each phase's defaults (constant lr, no filter)."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"train config: phases={value!r}: {why}; e.g. [{{steps: 20000, "
                           f"lr: 1.0e-3, schedule: cosine, grokfast: true}}]")

    if not isinstance(value, (list, tuple)):
        raise bad("must be a list of phases")
    out = []
    for ph in value:
        if not isinstance(ph, dict) or set(ph) - set(_PHASE_KEYS) or not {"steps", "lr"} <= set(ph):
            raise bad(f"each phase is a mapping of steps, lr and optionally schedule, "
                      f"min_lr_ratio, grokfast (got {ph!r})")
        p = {"schedule": "constant", "min_lr_ratio": 0.1, "grokfast": False, **ph}
        steps = _phase_number(p, "steps", int, bad("a phase's steps must be a whole number >= 1"))
        lr = _phase_number(p, "lr", float, bad("a phase's lr must be a number > 0"))
        ratio = _phase_number(p, "min_lr_ratio", float,
                              bad("a phase's min_lr_ratio must be in [0, 1]"))
        if steps < 1:
            raise bad("a phase's steps must be a whole number >= 1")
        if not lr > 0:
            raise bad("a phase's lr must be a number > 0")
        if not 0 <= ratio <= 1:
            raise bad("a phase's min_lr_ratio must be in [0, 1]")
        if p["schedule"] not in ("constant", "cosine") or not isinstance(p["grokfast"], bool):
            raise bad("schedule is constant or cosine, grokfast true or false")
        out.append({**p, "steps": steps, "lr": float(lr), "min_lr_ratio": float(ratio)})
    return out


def _phase_number(phase: dict[str, Any], key: str, kind: type, bad: ConfigError) -> Any:
    """A phase's number read as every config number is (`read_number`); `bad` if it is none."""
    try:
        return read_number(phase[key], kind, f"phases: {key}")
    except ConfigError:
        raise bad from None
