"""The frontier options (core/model/weights.py): each tie, embedding and head layout against a plain
per-member PyTorch reference written independently here, their exact counts, gradients into
every owned tensor, and a checkpoint round trip."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.formats import fill_places
from arithsweep.core.data.mix import curriculum_cap
from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model.checkpoint import load_checkpoint, save_checkpoint
from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params, param_breakdown
from arithsweep.core.overrides import build_configs
from arithsweep.core.training.population import PackAdamW, train
from arithsweep.core.training.recipe import grokfast_on
from arithsweep.core.training.train import lr_at

# tbukic's shared base (reference/frontier-architectures.md): 1 layer, d 3, one head of width 4
BASE = dict(vocab_size=10, n_ctx=34, d_model=3, n_heads=1, d_head=4, d_vhead=4, d_ff=2,
            activation="swiglu", norm="rms", pos="rope", rope_base=3.0)


def cfg_of(**kw) -> ModelConfig:
    return ModelConfig(**{**BASE, **kw})


# --------------------------------------------------------------------------------- counts
@pytest.mark.parametrize(("kw", "want"), [
    ({}, 95 - 8 + 18),  # 30 embed + 4 * 12 projections + 9 norms + 9 * ff
    ({"qk_norm": "head"}, 95 + 18),  # tbukic's formula: 95 + 9 ff
    ({"qk_norm": "shared"}, 95 + 18 - 4),
    ({"qk_norm": "head", "tie_k": "q"}, 113 - 12),
    ({"qk_norm": "head", "tie_k": "scaled"}, 113 - 11),
    ({"qk_norm": "head", "tie_k": "rotated"}, 113 - 11),
    ({"qk_norm": "head", "tie_o": True}, 113 - 12),
    ({"qk_norm": "head", "tie_v": True}, 113 - 12),
    ({"qk_norm": "head", "share_norms": True}, 113 - 6),
    ({"qk_norm": "head", "embed": "arc"}, 113 - 27),
    ({"qk_norm": "head", "mlp_down": "up_t"}, 113 - 6),
    ({"qk_norm": "head", "mlp_down": "up_t_rot"}, 113 - 5),
    ({"qk_norm": "head", "tie_gate": True}, 113 - 5),
    ({"qk_norm": "head", "rank_o": 1}, 113 - 12 + 4 + 3),
    ({"qk_norm": "head", "d_ff": 3}, 122),  # staghado's 122
    ({"qk_norm": "head", "d_ff": 3, "n_heads": 2, "n_kv_heads": 1}, 146),  # 119 + 9 ff
    ({"qk_norm": "head", "d_ff": 6, "n_heads": 2, "n_kv_heads": 1}, 173),
])
def test_counts_follow_the_published_arithmetic(kw, want):
    assert count_params(cfg_of(**kw)) == want


# tbukic's sweep below 36 (experiments/sub50_sweep.py at a05e46ed): the 36's base (arc, V = Q,
# O = Q^T, one shared norm, K = Q turned, one QK-norm) with one of its ties changed; each count
# is the sweep's own, by hand in the comment from the 36 = 3 arc + 12 q + 4 qk-norm + 1 angle
# + 3 norm + 6 gate + 6 up + 1 down angle
SUB36 = dict(embed="arc", tie_k="rotated", tie_v=True, tie_o=True, qk_norm="shared",
             share_norms=True, mlp_down="up_t", rope_pairs="interleaved")


@pytest.mark.parametrize(("kw", "want"), [
    ({}, 35),  # "35p_..._KrotQ_..._downUpT": down = up^T, no angle: 36 - 1
    ({"tie_k": "scaled"}, 35),  # "35p_..._KaQ_..._downUpT": a instead of the angle
    ({"tie_k": "q"}, 34),  # "34p_..._KeqQ_..._downUpT": 35 - 1
    ({"embed": "arc2"}, 34),  # "34p_..._dropA": the arc's radius fixed, 3 -> 2 numbers
    ({"qk_norm": "head", "tie_gate": True}, 34),  # "34p_..._gateA_downUpT": 35 + 4 - 6 + 1
    ({"tie_gate": True, "gate_scale": "vector"}, 31),  # "31p_..._gateVec": 35 - 6 + 2
    ({"tie_gate": True}, 30),  # "30p_..._gateA_downUpT_tieQKnorm": 35 - 6 + 1
    ({"tie_k": "scaled", "tie_gate": True, "gate_scale": "none"}, 29),  # "29p_..._gateEqUp": 35 - 6
    ({"d_ff": 1, "tie_gate": True}, 27),  # "27p_ff1_..._gateA_downUpT": 3+12+4+1+3+1+3
    ({"d_ff": 1, "mlp_down": "own"}, 32),  # "32p_ff1_..._tieQKnorm": 3+12+4+1+3+3+3+3
    ({"activation": "relu", "tie_k": "q"}, 28),  # "28p_relu_ff2_tied_norot": 3+12+4+3+6
    ({"d_model": 2, "mlp_down": "own"}, 30),  # "30p_d2_swiglu_ff2": 3+8+4+1+2+4+4+4
    ({"d_model": 2, "activation": "relu", "tie_k": "q"}, 21),  # "21p_d2_relu_ff2_tied_norot"
    # the smallest the tbukic space allows: d 2, ff 1, relu, K = Q, down = up^T, the arc's
    # radius fixed, one norm number, the anti-quarter QK-norm number: 2 + 8 + 1 + 1 + 2
    ({"d_model": 2, "d_ff": 1, "activation": "relu", "tie_k": "q", "embed": "arc2",
      "norm_weight": "scalar", "qk_norm": "scalar", "qk_norm_pattern": [1, 0.25, 0, -1]}, 14),
])
def test_tbukic_points_below_36_count_as_its_sweep_counts(kw, want):
    assert count_params(cfg_of(**{**SUB36, **kw})) == want


def test_the_36_parameter_record_counts_36():
    cfg = cfg_of(embed="arc", tie_k="rotated", tie_v=True, tie_o=True, qk_norm="shared",
                 share_norms=True, mlp_down="up_t_rot", rope_pairs="interleaved")
    assert count_params(cfg) == 36


def test_split_subspaces_count_only_their_part():
    # d 5 = 3 token dims + 2 position dims: the learned table is n_ctx x 2, V reads 3 dims
    cfg = ModelConfig(vocab_size=10, n_ctx=34, d_model=5, n_heads=1, d_head=4, d_vhead=4,
                      d_ff=2, pos="learned", d_embed=3, split_positions=True,
                      v_from_tokens=True)
    by = dict(param_breakdown(cfg))
    assert by["embed"] == 10 * 3 and by["pos"] == 34 * 2 and by["layer0.attn.v"] == 3 * 4


@pytest.mark.parametrize(("kw", "field"), [
    ({"tie_v": True, "d_vhead": 2}, "tie_v"),
    ({"tie_o": True, "d_vhead": 2}, "tie_o"),
    ({"n_heads": 3, "n_kv_heads": 2}, "n_kv_heads"),
    ({"tie_k": "rotated", "d_head": 3, "pos": "none"}, "tie_k"),
    ({"mlp_down": "up_t_rot", "d_ff": 3}, "mlp_down"),
    ({"tie_gate": True, "activation": "relu"}, "tie_gate"),
    ({"embed": "arc", "d_embed": 1}, "embed"),
    ({"split_positions": True}, "split_positions"),
    ({"qk_norm": "both"}, "qk_norm"),
    ({"tie_k": "q", "tie_kv": True}, "tie_k"),
    ({"gate_scale": "none"}, "gate_scale"),  # scales a gate that is its own weight
    ({"gate_scale": "vector", "tie_gate": False}, "gate_scale"),
    ({"gate_scale": "one"}, "gate_scale"),
    ({"embed": "arc2", "d_embed": 1}, "embed"),
])
def test_impossible_combinations_name_their_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        cfg_of(**kw)


# ------------------------------------------------------------------- the plain reference
def _rms(x, w=None):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    return y if w is None else y * w


def _rope(x, base, interleaved):  # x (B, H, T, w)
    T, w = x.shape[-2], x.shape[-1]
    half = w // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) / half)
    ang = (torch.arange(T, dtype=torch.float64)[:, None] * inv).float()  # (T, half)
    c, s = ang.cos(), ang.sin()
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, a * s + b * c], -1)


def _turn(w, theta, interleaved):  # rotate the columns of w (d, width) pairwise
    half = w.shape[1] // 2
    idx = [(2 * i, 2 * i + 1) if interleaved else (i, i + half) for i in range(half)]
    out = w.clone()
    c, s = math.cos(theta), math.sin(theta)
    for i, j in idx:
        out[:, i] = c * w[:, i] - s * w[:, j]
        out[:, j] = s * w[:, i] + c * w[:, j]
    return out


def reference(cfg: ModelConfig, st: dict[str, torch.Tensor], tokens: torch.Tensor):
    """One member, written the way the published adders write it: x (B, T, d), W (d_in, d_out)."""
    B, T = tokens.shape
    d, H, Hkv, w = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.qk_head
    il = cfg.rope_pairs == "interleaved"
    if cfg.embed in ("arc", "arc2"):  # arc2: the radius fixed at arc_init's, else 1
        r, start, stride = ([cfg.arc_init[0] if cfg.arc_init else 1.0]
                            if cfg.embed == "arc2" else []) + st["embed.arc"].tolist()
        ang = start + stride * torch.arange(10, dtype=torch.float32)
        E = torch.zeros(cfg.vocab_size, d)
        E[:10, 0], E[:10, 1] = r * ang.cos(), r * ang.sin()
    else:
        E = F.pad(st["embed.weight"], (0, d - cfg.tok_dims))
    x = E[tokens]
    tok = cfg.tok_dims
    if cfg.pos == "learned":
        P = st["pos.weight"][:T]
        x = x + F.pad(P, (d - P.shape[1], 0))
    elif cfg.pos == "digit_index":  # MicroAdder's spiral: a clock of places of radius 3.5
        # plus a ramp of 0.15 a place (its 74 p learns all four numbers), and the slot rows
        dp = d - tok if cfg.split_positions else d
        R, ph, ramp, off = st["place.spiral"].tolist() if cfg.place_learned \
            else (3.5, 0.0, 0.15, 0.0)
        rows = []
        for c in cfg.places[:T]:
            if c.isupper():
                letters = sorted({x for x in cfg.places if x.isupper()})
                rows.append(st["slots.weight"][letters.index(c)])
            elif c == ".":
                rows.append(torch.zeros(dp))
            else:
                i = int(c, 36)
                v = [R * f(2 * math.pi * i / (10 * 2 ** j) + ph) for j in range(dp // 2)
                     for f in (math.cos, math.sin)]
                rows.append(torch.tensor(v + ([ramp * i + off] if dp % 2 else []),
                                         dtype=torch.float32))
        x = x + F.pad(torch.stack(rows), (d - dp, 0))
    shared = st.get("shared_norm.weight")
    n1 = shared if shared is not None else st["layers.0.norm1.weight"]
    n2 = shared if shared is not None else st["layers.0.norm2.weight"]
    nf = shared if shared is not None else st["final_norm.weight"]
    Wq = st["layers.0.attn.q.weight"]
    if cfg.qk_from_positions:
        Wq = F.pad(Wq, (0, 0, tok, 0))  # zero rows on the token part
    Ph = st.get("head.weight")  # (d, tok)
    Wk = {"none": lambda: st.get("layers.0.attn.k.weight"), "q": lambda: Wq,
          "scaled": lambda: Wq * st["layers.0.attn.k_scale"],
          "rotated": lambda: torch.cat([_turn(Wq[:, h * w:(h + 1) * w],
                                              float(st["layers.0.attn.k_angle"]), il)
                                        for h in range(H)], 1)}[cfg.tie_k]()
    Wv = Wq if cfg.tie_v else Ph.T if cfg.v_from_head else st["layers.0.attn.v.weight"]
    if Wv.shape[0] < d:
        Wv = F.pad(Wv, (0, 0, 0, d - Wv.shape[0]))
    Wo = Wq.T if cfg.tie_o else st["layers.0.attn.o.A"] @ st["layers.0.attn.o.B"] \
        if cfg.rank_of("o") else st["layers.0.attn.o.weight"]
    h = _rms(x, n1)
    q = (h @ Wq).view(B, T, H, w).transpose(1, 2)
    k = (h @ Wk).view(B, T, Hkv, w).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    v = (h @ Wv).view(B, T, Hkv, cfg.v_head).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    if cfg.qk_norm == "head":
        q, k = _rms(q, st["layers.0.attn.q_norm"]), _rms(k, st["layers.0.attn.k_norm"])
    elif cfg.qk_norm == "shared":
        q, k = _rms(q, st["layers.0.attn.qk_norm"]), _rms(k, st["layers.0.attn.qk_norm"])
    if cfg.pos == "rope":
        q, k = _rope(q, cfg.rope_base, il), _rope(k, cfg.rope_base, il)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + o.transpose(1, 2).reshape(B, T, -1) @ Wo
    h = _rms(x, n2)
    Wu = st["layers.0.mlp.up.weight"]
    Wd = {"own": lambda: st["layers.0.mlp.down.weight"], "up_t": lambda: Wu.T,
          "up_t_rot": lambda: _turn(Wu, float(st["layers.0.mlp.down_angle"]), True).T,
          "head": lambda: Ph.T}[cfg.mlp_down]()
    if cfg.activation == "swiglu":
        Wg = st["layers.0.mlp.gate.weight"] if not cfg.tie_gate else Wu \
            if cfg.gate_scale == "none" else Wu * st["layers.0.mlp.gate_scale"]  # (1 | ff,)
        x = x + (F.silu(h @ Wg) * (h @ Wu)) @ Wd
    else:
        x = x + (F.relu if cfg.activation == "relu" else F.gelu)(h @ Wu) @ Wd
    if cfg.unembed_head:
        return (_rms(x, nf) @ Ph) @ E[:, :tok].T
    return _rms(x, nf) @ E.T  # (B, T, V)


CASES = {
    "plain+qknorm": dict(qk_norm="head"),
    "record-36": dict(embed="arc", tie_k="rotated", tie_v=True, tie_o=True, qk_norm="shared",
                      share_norms=True, mlp_down="up_t_rot", rope_pairs="interleaved"),
    "k=q,split-rope": dict(tie_k="q", qk_norm="head", mlp_down="up_t"),
    "k=aq,gate=a*up": dict(tie_k="scaled", tie_gate=True, share_norms=True),
    "k=rot(q),split": dict(tie_k="rotated", qk_norm="shared"),
    "grouped-kv": dict(n_heads=2, n_kv_heads=1, qk_norm="head", d_ff=3),
    "microadder-67": dict(d_model=5, d_vhead=5, activation="gelu", share_norms=True,
                          embed="arc", d_embed=2, pos="digit_index",
                          places=".0123456789B.0123456789A0123456789", split_positions=True,
                          qk_from_positions=True, tie_k="rotated", rope_pairs="interleaved",
                          v_from_tokens=True, unembed_head=True, v_from_head=True, rank_o=1),
    "microadder-57": dict(d_model=5, d_vhead=5, activation="gelu", share_norms=True,
                          embed="arc", d_embed=2, pos="digit_index",
                          places=".0123456789B.0123456789A0123456789", split_positions=True,
                          qk_from_positions=True, tie_k="rotated", rope_pairs="interleaved",
                          v_from_tokens=True, unembed_head=True, v_from_head=True, rank_o=1,
                          mlp_down="head"),
    "microadder-74": dict(d_model=5, d_head=5, d_vhead=5, activation="gelu", share_norms=True,
                          embed="arc", d_embed=2, pos="digit_index", place_learned=True,
                          places=".0123456789B.0123456789A0123456789", split_positions=True,
                          qk_from_positions=True, tie_k="rotated", rope_pairs="interleaved",
                          v_from_tokens=True, unembed_head=True, v_from_head=True, rank_o=1),
    # tbukic's sweep below 36: gate = up, gate = a_j up (per hidden unit), the arc's radius
    # fixed (at arc_init's 2.5), ff 1 with gate = a up, a relu MLP with down = up^T
    "sub36-gate=up": dict(SUB36, tie_k="scaled", tie_gate=True, gate_scale="none"),
    "sub36-gate=a_j*up,arc2": dict(SUB36, tie_gate=True, gate_scale="vector", embed="arc2",
                                   arc_init=[2.5, -1.2, 0.29]),
    "sub36-ff1,arc2-unit": dict(SUB36, d_ff=1, tie_gate=True, embed="arc2"),
    "sub36-relu,d2": dict(SUB36, d_model=2, activation="relu", tie_k="q"),
    "digit-index-full-width": dict(pos="digit_index", places="0123456789A" * 4),
    "digit-index-learned": dict(pos="digit_index", places="0123456789A" * 4, place_learned=True),
    "split-subspaces": dict(d_model=5, d_embed=3, split_positions=True, v_from_tokens=True,
                            pos="learned", tie_o=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_matches_the_plain_reference(name):
    cfg = cfg_of(**CASES[name])
    model = ArithTransformer(cfg, k=2, seeds=[3, 4])
    with torch.no_grad():  # move the tie numbers off their neutral start so they matter
        for n, p in model.named_parameters():
            if n.endswith(("angle", "scale", "spiral")):
                p.add_(torch.tensor([[0.7], [-0.4]]))
    tokens = torch.randint(0, 10, (2, 5, 34), generator=torch.Generator().manual_seed(1))
    got = model(tokens)  # (2, 5, 34, 10)
    for i in range(2):
        want = reference(cfg, model.member_state(i), tokens[i])
        torch.testing.assert_close(got[i], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(CASES))
def test_every_owned_tensor_gets_a_gradient(name):
    model = ArithTransformer(cfg_of(**CASES[name]), k=2, seeds=[0, 1])
    with torch.no_grad():  # a low-rank O starts at B = 0: what feeds it gets no gradient yet
        for n, p in model.named_parameters():
            if n.endswith("o.B"):
                assert not p.any(), n
                p.normal_()
    model(torch.randint(0, 10, (3, 34))).square().mean().backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, n


def test_a_frontier_checkpoint_round_trips(tmp_path):
    cfg = cfg_of(**CASES["record-36"])
    model = ArithTransformer(cfg, k=1, seeds=[7])
    task = get_task("add10", "pad,revans,revops,delim,zeros")
    save_checkpoint(tmp_path / "c", model, task, 0, TrainConfig())
    ck = load_checkpoint(tmp_path / "c")
    assert ck.model_cfg == cfg and count_params(ck.model) == 36
    tokens = torch.randint(0, 10, (4, 34))
    torch.testing.assert_close(ck.model(tokens), model(tokens))


def test_zero_delimiter_format_is_adderboards_layout():
    task = get_task("add10", "pad,revans,revops,delim,zeros")
    assert task.vocab_size == 10 and task.prompt_len == 24 and task.n_ctx == 34
    prompt = task.encode_prompt(torch.tensor([1234567890]), torch.tensor([5]),
                                torch.tensor([0]))[0]
    # AdderBoard's encode: [0] + reversed(a, 10 digits) + [0, 0] + reversed(b) + [0]
    want = [0] + [int(c) for c in reversed(f"{1234567890:010d}")] + [0, 0] \
        + [int(c) for c in reversed(f"{5:010d}")] + [0]
    assert prompt == want
    with pytest.raises(ConfigError, match="zeros"):
        get_task("add3", "nopad,zeros")
    with pytest.raises(ConfigError, match="zeros"):
        get_task("mix3", "zeros")


# ------------------------------------------------------------------------- the anchors
ANCHORS = sorted((Path(__file__).parent.parent / "recipes" / "anchors").glob("*.yaml"))


def test_there_are_at_least_five_anchors():
    assert len(ANCHORS) >= 5


@pytest.mark.parametrize("path", ANCHORS, ids=lambda p: p.stem)
def test_each_anchor_counts_its_published_parameters(path):
    """`arithsweep params FILE` prints the count the file's name (the author's) states."""
    task, model_cfg, _ = build_configs(None, None, path, {})
    assert count_params(model_cfg) == int(path.stem.rsplit("-", 1)[1])


def test_unequal_curriculum_stages_and_decay_scope():
    cfg = TrainConfig(curriculum=[[2000, 3], [7000, 6]], weight_decay_scope="all")
    assert [curriculum_cap(cfg, 10, s) for s in (0, 1999, 2000, 6999, 7000)] == \
        [3, 3, 6, 6, None]
    with pytest.raises(ConfigError, match="curriculum"):
        TrainConfig(curriculum=[[2000, 3], [1000, 6]])
    with pytest.raises(ConfigError, match="weight_decay_scope"):
        TrainConfig(weight_decay_scope="norms")
    model = ArithTransformer(cfg_of(embed="arc", qk_norm="shared"), k=1, seeds=[0])
    ps = list(model.parameters())
    wd = torch.tensor([0.5])
    every = PackAdamW(ps, wd, (0.9, 0.98), scope="all").decay
    mats = PackAdamW(ps, wd, (0.9, 0.98)).decay
    assert len(every) == len(ps) > len(mats)  # the arc and the norm gains decay under "all"


# ------------------------------------------------------------------- training phases
def test_phases_follow_the_cosine_with_their_own_schedule_and_filter():
    cfg = TrainConfig(steps=300, warmup=0, grokfast_alpha=0.9, grokfast_lambda=2.0, phases=[
        {"steps": 100, "lr": 1e-3, "schedule": "cosine", "min_lr_ratio": 0.1, "grokfast": True},
        {"steps": 50, "lr": 5e-4}], polish_steps=10, polish_lr=2e-4)
    assert cfg.main_steps == 450
    assert lr_at(299, cfg) == pytest.approx(cfg.lr * cfg.min_lr_ratio, rel=1e-3)
    assert lr_at(300, cfg) == pytest.approx(1e-3) and lr_at(399, cfg) == pytest.approx(1e-4)
    assert lr_at(400, cfg) == lr_at(449, cfg) == 5e-4 and lr_at(450, cfg) == 2e-4
    on = [grokfast_on(cfg, s) for s in (0, 299, 300, 399, 400, 455)]
    assert on == [False, False, True, True, False, False]
    assert all(grokfast_on(TrainConfig(grokfast_alpha=0.9), s) for s in (0, 5000))
    with pytest.raises(ConfigError, match="phases"):
        TrainConfig(phases=[{"steps": 10}])
    with pytest.raises(ConfigError, match="phases"):
        TrainConfig(phases=[{"steps": 10, "lr": 1e-3, "optimiser": "sgd"}])


@pytest.mark.slow
def test_lbfgs_polishes_a_member_the_same_in_a_pack_as_alone():
    task = get_task("add2")
    mcfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, d_model=8, d_ff=16)
    kw = dict(steps=60, eval_every=60, early_stop=False, lbfgs_steps=5, lbfgs_pool=256,
              sampler="hash")
    pack = train(task, mcfg, TrainConfig(seeds=2, seed=0, **kw))
    alone = train(task, mcfg, TrainConfig(seeds=1, seed=0, **kw))
    assert len(pack.history) == 2  # the last evaluation scores the polished weights
    for (n, a), b in zip(pack.model.member_state(0).items(),
                         alone.model.member_state(0).values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.parametrize("sampler", ["stream", "hash"])
def test_carry_patterns_mix_single_carries_chains_and_carries_out(sampler):
    """MicroAdder's carry sampler: more single carries and more carries out of the top digit
    than the one-chain pattern, and still only training-split problems."""
    from arithsweep.core.training.streams import _DataStream

    task = get_task("add6")

    def shares(patterns: str) -> tuple[float, float]:
        cfg = TrainConfig(sampling="carry", carry_patterns=patterns, sampler=sampler,
                          seeds=1, batch_size=2048)
        tokens, _ = _DataStream(task, cfg, torch.device("cpu")).next(0)  # (1, B, T)
        a = torch.tensor([int("".join(map(str, r[:6].tolist()))) for r in tokens[0]])
        b = torch.tensor([int("".join(map(str, r[7:13].tolist()))) for r in tokens[0]])
        assert not task.is_holdout(a, b, torch.zeros_like(a)).any()
        run = task.carry_class(a, b, torch.zeros_like(a))
        top = 10 ** torch.maximum(*task.operand_lengths(a, b))
        return (run == 1).float().mean().item(), (a + b >= top).float().mean().item()

    (single0, out0), (single1, out1) = shares("chain"), shares("mixed")
    assert single1 > single0 + 0.03 and out1 > out0 + 0.03


def test_a_frontier_export_runs_under_adderboards_protocol(tmp_path):
    """The exported file imports as AdderBoard's verify.py imports it, its model's unique
    parameters are the count, and the protocol's problems (edge cases first) run through it."""
    from arithsweep.core.model.checkpoint import sha256_file
    from arithsweep.leaderboard.adderboard import export_adderboard
    from arithsweep.leaderboard.adderboard_check import EDGE_CASES, check_submission, problems

    cfg = cfg_of(**CASES["record-36"])
    task = get_task("add10", "pad,revans,revops,delim,zeros")
    model = ArithTransformer(cfg, k=1, seeds=[7])
    save_checkpoint(tmp_path / "ck", model, task, 0, TrainConfig())
    row = {"id": 1, "task": "add10", "params": 36, "checkpoint_path": str(tmp_path / "ck"),
           "sha256": sha256_file(tmp_path / "ck" / "model.safetensors"),
           "model_config": cfg.to_dict(), "architecture": cfg.summary()}
    export_adderboard(row, tmp_path / "sub" / "add10_36.py")
    res = check_submission(tmp_path / "sub" / "add10_36.py", limit=len(EDGE_CASES) + 2)
    assert res.total == 12 and res.params == 36 and 0 <= res.correct <= 12
    assert len(problems()) == 10_010 and problems()[:10] == EDGE_CASES


def test_places_come_from_the_task_and_must_fit_its_layout():
    task = get_task("add3", "pad,revans,revops,delim,zeros")
    assert task.places() == ".012..012.012"
    assert fill_places(task, {"pos": "digit_index"})["places"] == ".012..012.012"
    assert fill_places(task, {"pos": "digit_index", "places": ".012B.012A012"})
    with pytest.raises(ConfigError, match="layout"):
        fill_places(task, {"pos": "digit_index", "places": "0123456789A" * 2})
    with pytest.raises(ConfigError, match="nopad"):
        get_task("add3", "nopad").places()


def test_microadder_starts_where_its_author_started():
    """MicroAdder's init, which its 67-p model needed here: every seed's arc at the given
    (radius, start, stride), the learned slot rows near 0, a rank-1 O at zero; a config that
    does not name arc_init keeps a unit clock from a random start; a malformed one is refused."""
    doc = build_configs(None, None, "recipes/anchors/microadder-67.yaml", {})[1]
    model = ArithTransformer(doc, k=3, seeds=[0, 1, 2])
    arc = model.embed.arc.detach()
    assert torch.equal(arc, torch.tensor([[2.5, -1.2, 0.29]]).expand(3, 3))
    assert float(model.slots.weight.detach().abs().max()) < 0.1
    o = model.layers[0].attn.o
    assert not o.B.any() and 0 < float(o.A.detach().abs().max()) <= 1
    plain = ArithTransformer(cfg_of(embed="arc"), k=2, seeds=[0, 1])
    assert torch.allclose(plain.embed.arc[:, 0], torch.ones(2))
    assert plain.embed.arc[0, 1] != plain.embed.arc[1, 1]
    for bad in ([1.0, 2.0], [1.0, 2.0, "x"], [1.0, float("nan"), 2.0], "2.5"):
        with pytest.raises(ConfigError, match="three numbers"):
            cfg_of(embed="arc", arc_init=bad)


def test_places_microadder_puts_its_two_learned_rows_in_any_addition_layout():
    """`places: microadder` is the anchor's own string on add10 and the same idea on add2/add3
    (the '=' slot and the slot after the first operand), so one space fits them all."""
    zeros = "pad,revans,revops,delim,zeros"
    anchor = build_configs(None, None, "recipes/anchors/microadder-57.yaml", {})[1]
    got = {n: fill_places(get_task(n, zeros), {"pos": "digit_index", "places": "microadder"})
           ["places"] for n in ("add2", "add3", "add10")}
    assert got["add10"] == anchor.places
    assert got == {**got, "add2": ".01B.01A01", "add3": ".012B.012A012"}
    _, cfg, _ = build_configs("add3", None, "recipes/anchors/microadder-57.yaml",
                              {"places": "microadder"})
    assert count_params(cfg) == 57 and cfg.places == ".012B.012A012"


def test_a_learned_place_pattern_starts_as_the_fixed_one_and_costs_four():
    """place_learned: the spiral's four numbers are parameters that start where the fixed
    pattern is, so the same seeds give the same first logits; only digit_index takes it."""
    kw = CASES["microadder-67"]
    fixed = ArithTransformer(cfg_of(**kw), k=2, seeds=[5, 6])
    learned = ArithTransformer(cfg_of(**kw, place_learned=True), k=2, seeds=[5, 6])
    assert count_params(learned) == count_params(fixed) + 4
    tokens = torch.randint(0, 10, (3, 34), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(learned(tokens), fixed(tokens), rtol=0, atol=1e-6)
    with pytest.raises(ConfigError, match="place_learned"):
        cfg_of(place_learned=True)
    with pytest.raises(ConfigError, match="tie_k"):  # an odd width turns interleaved pairs only
        cfg_of(d_head=5, pos="learned", tie_k="rotated")
