"""Open a found model in TransformerLens: a HookedTransformerConfig (JSON) and its state dict.

What for: mechanistic-interpretability work on the smallest models arithsweep finds, with
TransformerLens's hooks, `run_with_cache`, FactoredMatrix circuits and patching tools. Every
weight the forward pass uses is written as a plain TransformerLens weight: ties and derived
weights (K = f(Q), V = Q, O = Q^T, down = up^T, arc embeddings, unembedding heads, low-rank
products, shared norms) come from the model's own functions in core/model/weights.py, fixed
positions (sinusoidal, digit_index, abacus on fixed-layout formats) become the positional table
W_pos, q/k and value heads of different widths are zero-padded to one d_head (attn_scale keeps
sqrt(q/k width)), looped blocks without input injection are unrolled. What TransformerLens
cannot express is refused in one line naming the feature (`TransformerLensUnsupported`).
Before anything is written the export runs both models on the task's problems and refuses if
their float64 logits differ by more than 1e-4 or their float32 greedy answers differ at all.

    pip install -e ".[interp]"
    arithsweep export add3-51-cdd87c29 --transformer-lens tl/add3-51   # published entry
    arithsweep export runs/add3/best --transformer-lens tl/mine          # a checkpoint folder

    model = HookedTransformer(HookedTransformerConfig(**json.load(open("tl/add3-51/config.json"))))
    model.load_state_dict(safetensors.torch.load_file("tl/add3-51/model.safetensors"))

DIR also gets arithsweep.json (task, vocabulary, source sha256, the check's numbers);
docs/transformer-lens.md lists which published entries export and why the others do not.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from arithsweep import __version__
from arithsweep.core.config import ModelConfig
from arithsweep.core.errors import ArithsweepError
from arithsweep.core.model.layers import abacus_index
from arithsweep.core.model.weights import (
    attn_biases,
    attn_weights,
    mlp_weights,
    o_bias,
    pos_part,
    token_table,
)

TOLERANCE = 1e-4  # largest |logit difference| in float64 an export may show
CHECK_PROBLEMS = 1000  # of the task's problems, edge cases first
# The ModelConfig fields this export reads or has shown harmless; another field at a value
# other than its default is refused, so an option added later is never exported wrongly.
KNOWN = frozenset({
    "vocab_size", "n_ctx", "n_layers", "d_model", "n_heads", "d_head", "d_vhead", "d_ff",
    "activation", "norm", "norm_bias", "final_norm", "share_norms", "attn_bias", "mlp_bias",
    "unembed_bias", "tie_embeddings", "pos", "rope_base", "abacus_max", "abacus_offset",
    "n_loops", "input_injection", "loop_mix", "rank", "tie_kv", "n_kv_heads", "norm_weight",
    "qk_norm", "qk_norm_pattern", "rope_pairs", "tie_k", "tie_v", "tie_o", "rank_q", "rank_k",
    "rank_v", "rank_o", "rank_mlp", "embed", "arc_init", "init_std", "d_embed",
    "split_positions", "v_from_tokens", "mlp_down", "tie_gate", "gate_scale", "qk_from_tokens",
    "qk_from_positions", "places", "place_learned", "unembed_head", "v_from_head",
    "norm_eps", "k_angle_init", "down_angle_init",  # the angles: where training starts only
})


class TransformerLensUnsupported(ArithsweepError):
    """The model uses a feature TransformerLens's HookedTransformer cannot express."""


def fixed_layout(task) -> bool:
    """True when every problem of `task` puts digits at the same positions (padded formats
    without a sign token), so a digit's abacus index depends on its position alone."""
    return bool(task.fmt.pad) and not task.signed


def why_not(cfg: ModelConfig, task) -> str | None:
    """The feature of `cfg` (on `task`'s format) that HookedTransformer lacks, or None."""
    for f in fields(ModelConfig):
        if f.name not in KNOWN and getattr(cfg, f.name) != f.default:
            return f"{f.name}={getattr(cfg, f.name)!r} (an option this export does not know)"
    if cfg.pos == "abacus_bias":
        return ("abacus_bias positions (a per-head attention score bias read from each digit's "
                "place; HookedTransformer's attention adds none)")
    if cfg.pos == "abacus_rope":
        return ("abacus_rope positions (rotary angles from each digit's place within its "
                "number, not from the token's position)")
    if cfg.pos == "abacus" and not fixed_layout(task):
        return (f"abacus positions on format {task.fmt.name} (a digit's place within its number "
                f"varies from problem to problem, so no fixed positional table W_pos holds it)")
    if cfg.n_loops > 1 and cfg.loop_mix:
        return "loop_mix (each loop blends the stream it started from with its output)"
    if cfg.n_loops > 1 and cfg.input_injection:
        return "looped blocks with input injection (the embedding is added again before each loop)"
    if cfg.norm != "none" and not cfg.final_norm:
        return ("blocks with norms but no final norm (HookedTransformer applies ln_final "
                "whenever normalization_type is set)")
    if cfg.d_ff and cfg.activation == "swiglu" and cfg.mlp_bias:
        return ("swiglu with MLP biases (HookedTransformer's gated MLP adds b_in after the "
                "gate product, not to each projection)")
    if cfg.qk_norm != "none" and cfg.qk_head < cfg.v_head:
        return ("QK-norm on q/k heads narrower than the value heads (one d_head: zero-padding "
                "q and k would change their RMS)")
    return None


def hooked_config(cfg: ModelConfig, name: str) -> dict[str, Any]:
    """HookedTransformerConfig's fields for `cfg` (JSON-ready; device and dtype left out)."""
    qk, vh, H, Hkv = cfg.qk_head, cfg.v_head, cfg.n_heads, cfg.kv_heads
    rope = cfg.pos == "rope"
    out: dict[str, Any] = {
        "model_name": f"arithsweep-{name}", "n_layers": cfg.n_layers * cfg.n_loops,
        "d_model": cfg.d_model, "n_ctx": cfg.n_ctx, "n_heads": H, "d_head": max(qk, vh),
        "d_vocab": cfg.vocab_size, "d_vocab_out": cfg.vocab_size,
        "normalization_type": {"layer": "LN", "rms": "RMS", "none": None}[cfg.norm],
        "eps": cfg.norm_eps, "use_attn_scale": True, "attn_scale": math.sqrt(qk),
        "positional_embedding_type": "rotary" if rope else "standard",
        "default_prepend_bos": False,
    }
    if Hkv != H:  # fields set only when needed, so an older TransformerLens can take the rest
        out["n_key_value_heads"] = Hkv
    if cfg.qk_norm != "none":
        out["use_qk_norm"] = True
    if rope:
        out.update(rotary_dim=qk, rotary_base=float(cfg.rope_base),
                   rotary_adjacent_pairs=cfg.rope_pairs == "interleaved")
    if cfg.d_ff:
        out.update(d_mlp=cfg.d_ff, gated_mlp=cfg.activation == "swiglu",
                   act_fn={"swiglu": "silu"}.get(cfg.activation, cfg.activation))
    else:
        out.update(attn_only=True)
    return out


def _positions(model, task) -> Tensor:
    """W_pos (n_ctx, d): the rows a position adds to its token's embedding."""
    cfg = model.cfg
    T, d = cfg.n_ctx, cfg.d_model
    rows = model.position_rows(T)
    if rows is not None:
        return rows[0]
    table = torch.zeros(T, d)
    if cfg.pos == "abacus":  # fixed layout: one problem's indices are every problem's
        a, b, op = (torch.tensor([x]) for x in task.edge_cases()[0])
        tokens = task.encode(a, b, op)[0][:, :-1]  # (1, task.n_ctx)
        idx = abacus_index(tokens)[0].clamp(max=cfg.abacus_max - 1)
        table[:idx.numel()] = pos_part(model.abacus.weight, d)[0][idx]
    return table


def _norm(prefix: str, norm, cfg: ModelConfig) -> dict[str, Tensor]:
    """A norm site's weights (a norm module is truthy, so `a or b` picks the one present)."""
    if cfg.norm == "none":
        return {}
    out = {f"{prefix}.w": norm.weight[0]}
    if cfg.norm == "layer":
        out[f"{prefix}.b"] = norm.bias[0] if norm.bias is not None else torch.zeros(cfg.d_model)
    return out


@torch.no_grad()
def hooked_weights(model, task) -> dict[str, Tensor]:
    """Every HookedTransformer parameter, by its state-dict name, from member 0 of `model`."""
    cfg = model.cfg
    d, H, Hkv, qk, vh = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.qk_head, cfg.v_head
    dh, gqa = max(qk, vh), Hkv != H
    head = model.head.weight if cfg.unembed_head else None
    emb = token_table(model.embed, cfg)  # (1, V, d)

    def w_in(wt: Tensor, h: int, width: int) -> Tensor:  # W^T (h*width, d) -> (h, d, dh)
        return F.pad(wt.reshape(h, width, d).transpose(1, 2), (0, dh - width))

    def b_in(b: Tensor, h: int, width: int) -> Tensor:  # (h*width,) -> (h, dh)
        return F.pad(b.reshape(h, width), (0, dh - width))

    sd: dict[str, Tensor] = {"embed.W_E": emb[0]}
    if cfg.pos != "rope":
        sd["pos_embed.W_pos"] = _positions(model, task)
    for i in range(cfg.n_layers * cfg.n_loops):
        blk, p = model.layers[i % cfg.n_layers], f"blocks.{i}"
        a = blk.attn
        sd.update(_norm(f"{p}.ln1", blk.norm1 or model.shared_norm, cfg))
        wq, wk, wv, wo = attn_weights(a, cfg, head)
        if cfg.tie_kv:
            wk = wv = a.kv.matrix_t()
        bias = attn_biases(a, cfg)
        if bias is None:
            bq, bk, bv = torch.zeros(H * qk), torch.zeros(Hkv * qk), torch.zeros(Hkv * vh)
        else:
            bq, bk, *rest = bias[0].split([H * qk, Hkv * qk, Hkv * vh][:2 + (not cfg.tie_kv)])
            bv = bk if cfg.tie_kv else rest[0]
        kv = "_" if gqa else ""  # GroupedQueryAttention names its K/V tensors _W_K, _b_K, ...
        sd.update({
            f"{p}.attn.W_Q": w_in(wq[0], H, qk), f"{p}.attn.b_Q": b_in(bq, H, qk),
            f"{p}.attn.{kv}W_K": w_in(wk[0], Hkv, qk), f"{p}.attn.{kv}b_K": b_in(bk, Hkv, qk),
            f"{p}.attn.{kv}W_V": w_in(wv[0], Hkv, vh), f"{p}.attn.{kv}b_V": b_in(bv, Hkv, vh),
            # O: W^T (d, H*vh) -> (H, vh, d), padded rows read the padded (zero) values
            f"{p}.attn.W_O": F.pad(wo[0].T.reshape(H, vh, d), (0, 0, 0, dh - vh)),
            f"{p}.attn.b_O": (bo[0] if (bo := o_bias(a, cfg)) is not None else torch.zeros(d)),
        })
        if cfg.qk_norm != "none":
            qn, kn = (a.q_norm, a.k_norm) if cfg.qk_norm == "head" else (a.qk_norm,) * 2
            sd.update({f"{p}.attn.q_norm.w": qn[0], f"{p}.attn.k_norm.w": kn[0]})
        if blk.mlp is None:
            continue
        m = blk.mlp
        sd.update(_norm(f"{p}.ln2", blk.norm2 or model.shared_norm, cfg))
        wg, wu, wd = mlp_weights(m, cfg, head)
        down = getattr(m, "down", None)
        sd.update({
            f"{p}.mlp.W_in": wu[0].T, f"{p}.mlp.W_out": wd[0].T,
            f"{p}.mlp.b_in": m.up.bias[0] if cfg.mlp_bias else torch.zeros(cfg.d_ff),
            f"{p}.mlp.b_out": (down.bias[0] if down is not None and down.bias is not None
                               else torch.zeros(d)),
        })
        if wg is not None:
            sd[f"{p}.mlp.W_gate"] = wg[0].T
    sd.update(_norm("ln_final", model.shared_norm or model.final_norm, cfg))
    wt = emb if cfg.tie_embeddings else model.unembed.weight.transpose(1, 2)
    if cfg.unembed_head:  # logits = E_tok P^T norm(x)
        wt = torch.bmm(emb[..., :cfg.tok_dims], head.transpose(1, 2))
    sd["unembed.W_U"] = wt[0].T
    sd["unembed.b_U"] = (model.unembed.bias[0] if cfg.unembed_bias
                         else torch.zeros(cfg.vocab_size))
    return {k: v.detach().contiguous().clone() for k, v in sd.items()}


def _transformer_lens():
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError as e:
        raise ArithsweepError(f"TransformerLens (with HookedTransformer, versions 2 and 3) is "
                              f"not importable ({e}): pip install -e '.[interp]'") from None
    return HookedTransformer, HookedTransformerConfig


def build_hooked(model, task, name: str):
    """(HookedTransformer on the CPU holding `model`'s member 0 in the model's dtype, its
    config as JSON fields); TransformerLensUnsupported when it cannot hold it."""
    cfg = model.cfg
    if (why := why_not(cfg, task)) is not None:
        raise TransformerLensUnsupported(why)
    HookedTransformer, HookedTransformerConfig = _transformer_lens()
    doc = hooked_config(cfg, name)
    have = {f.name for f in fields(HookedTransformerConfig)}
    if missing := sorted(k for k in doc if k not in have):
        raise TransformerLensUnsupported(f"{', '.join(missing)} (the HookedTransformerConfig "
                                         f"of this TransformerLens has no such field)")
    dtype = next(model.parameters()).dtype
    hooked = HookedTransformer(HookedTransformerConfig(**doc, device="cpu", dtype=dtype))
    params = dict(hooked.named_parameters())
    ours = hooked_weights(model, task)
    if set(ours) != set(params):  # a bug in the mapping, not the user's doing
        raise RuntimeError(f"weights differ: only ours {sorted(set(ours) - set(params))}, "
                           f"only TransformerLens's {sorted(set(params) - set(ours))}")
    if bad := [k for k, t in ours.items() if t.shape != params[k].shape]:
        raise RuntimeError(f"{bad[0]}: shape {tuple(ours[bad[0]].shape)}, HookedTransformer "
                           f"wants {tuple(params[bad[0]].shape)}")
    hooked.load_state_dict({**hooked.state_dict(), **ours}, strict=True)
    return hooked.eval(), doc


def float64_copy(model):
    """`model` in float64, its rotary tables recomputed in float64 too (the model keeps them in
    float32): where logits reach the thousands, float32 rounding alone moves them by ~0.1."""
    m = copy.deepcopy(model).double()
    cfg = m.cfg
    if cfg.pos == "rope":
        half = cfg.qk_head // 2
        inv = cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) / half)
        ang = torch.outer(inv, torch.arange(cfg.n_ctx, dtype=torch.float64))  # (half, T)
        m.rope_cos, m.rope_sin = ang.cos(), ang.sin()
    return m


def check_problems(task, n: int = CHECK_PROBLEMS, seed: int = 0) -> tuple[Tensor, ...]:
    """n problems (a, b, op) of `task`: its edge cases, then distinct random ones."""
    edges = torch.tensor(task.edge_cases(), dtype=torch.int64).T
    gen = torch.Generator().manual_seed(seed)
    if task.n_problems <= 10**6:
        every = task.enumerate_all()
        pick = torch.randperm(every[0].numel(), generator=gen)[:n]
        drawn = tuple(x[pick] for x in every)
    else:
        drawn = task.sample(n, gen, "uniform", split="holdout")
    return tuple(torch.cat([e, x])[:n] for e, x in zip(edges, drawn, strict=True))


class _AsPopulation(torch.nn.Module):
    """A HookedTransformer answering as a one-member ArithTransformer (for greedy_decode)."""

    def __init__(self, hooked) -> None:
        super().__init__()
        self.hooked, self.k = hooked, 1

    def forward(self, tokens: Tensor) -> Tensor:
        return self.hooked(tokens.long()).unsqueeze(0)


@torch.inference_mode()
def compare(model, hooked, task, problems: tuple[Tensor, ...], greedy: bool = True,
            ) -> dict[str, Any]:
    """Both models on `problems`: the largest |logit difference| at any position, teacher
    forced, and (`greedy`) how many greedy answers differ."""
    from arithsweep.core.evaluation.evaluate import greedy_decode

    inputs = task.encode(*problems)[0][:, :-1]
    out = {"max_abs_logit_diff": (model.eval()(inputs)[0] - hooked(inputs)).abs().max().item()}
    if greedy:
        theirs = greedy_decode(_AsPopulation(hooked), task, *problems)
        out["greedy_mismatches"] = sum(
            x != y for x, y in zip(greedy_decode(model, task, *problems), theirs, strict=True))
    return out


def _check(ck, hooked) -> dict[str, Any]:
    """export's check (see export_checkpoint); TransformerLensUnsupported when it fails."""
    problems = check_problems(ck.task)
    m64 = float64_copy(ck.model)
    exact = compare(m64, build_hooked(m64, ck.task, ck.path.name)[0], ck.task, problems, False)
    res = compare(ck.model, hooked, ck.task, problems)
    if not exact["max_abs_logit_diff"] <= TOLERANCE or res["greedy_mismatches"]:
        raise TransformerLensUnsupported(
            f"{ck.path.name}: the HookedTransformer's float64 logits differ from arithsweep's by "
            f"{exact['max_abs_logit_diff']:.3g} (more than {TOLERANCE:g} is a bug) and "
            f"{res['greedy_mismatches']} greedy answers differ: not exported")
    return {"problems": int(problems[0].numel()),
            "max_abs_logit_diff_float64": exact["max_abs_logit_diff"],
            "max_abs_logit_diff_float32": res["max_abs_logit_diff"],
            "greedy_mismatches": res["greedy_mismatches"]}


def export_checkpoint(path: str | Path, out_dir: str | Path, check: bool = True,
                      ) -> dict[str, Any]:
    """Write `out_dir`/config.json, model.safetensors (float32, as the checkpoint) and
    arithsweep.json for the checkpoint folder `path`. Checked first (`check`, which the tests
    do their own way), on the task's problems: the same mapping in float64 must give
    arithsweep's logits to TOLERANCE, and the float32 model written the same greedy answers;
    nothing is written otherwise."""
    import importlib.metadata as md

    from safetensors.torch import save_file

    from arithsweep.core.model.checkpoint import load_checkpoint

    ck = load_checkpoint(path)
    try:
        hooked, doc = build_hooked(ck.model, ck.task, ck.path.name)
    except TransformerLensUnsupported as e:
        raise TransformerLensUnsupported(f"{ck.path.name}: TransformerLens cannot express {e}") \
            from None
    checked = _check(ck, hooked) if check else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in hooked.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(doc, indent=2) + "\n")
    meta = {"source": str(ck.path), "sha256": ck.sha256, "params": ck.params,
            "task": ck.task.name, "format": ck.task.fmt.name, "vocab": list(ck.task.vocab),
            "example": ck.task.example(), "check": checked, "arithsweep": __version__,
            "transformer_lens": md.version("transformer-lens")}
    (out / "arithsweep.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {**meta, "dir": str(out)}


def resolve(entry: str, db: str | None = None) -> Path:
    """The checkpoint folder ENTRY names: a folder itself, else the entry `show`, `inspect` and
    `ood` find (entry_lookup: the local database first, then the published entries.json, a
    published entry's weights sha256-checked)."""
    from arithsweep.leaderboard.entry_lookup import entry_checkpoint

    return entry_checkpoint(entry, db)[0]


def export_entry(entry: str, out_dir: str | Path, db: str | None = None) -> dict[str, Any]:
    """`arithsweep export ENTRY --transformer-lens DIR`: resolve ENTRY, export, check."""
    return export_checkpoint(resolve(entry, db), out_dir)
