"""ArithTransformer / ModelConfig: parameter counts by hand, population semantics, and the packed
forward checked against a naive per-member reference written independently below."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from arithsweep.core.errors import CheckpointError, ConfigError
from arithsweep.core.model.layers import abacus_index
from arithsweep.core.model.model import (
    ArithTransformer,
    ModelConfig,
    count_params,
    param_breakdown,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These models are tiny: a second intra-op thread only adds contention on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The AdderBoard check: 763 without a final norm, 777 with one.
BASE = dict(vocab_size=14, n_ctx=35, d_model=7, n_layers=1, n_heads=1, d_ff=14, attn_bias=False,
            mlp_bias=False, norm="layer", norm_bias=True, tie_embeddings=True, pos="learned",
            final_norm=False)


def cfg_of(**kw) -> ModelConfig:
    return ModelConfig(**{**BASE, **kw})


def test_adderboard_reference_counts():
    assert count_params(cfg_of()) == 763
    assert count_params(cfg_of(final_norm=True)) == 777
    assert count_params(ArithTransformer(cfg_of(final_norm=True))) == 777


# BASE by hand (V=14, T=35, d=7, ff=14): embed V*d = 98, learned positions T*d = 245,
# q/k/v/o 4*d*d = 196, mlp 2*d*ff = 196, two LayerNorms 2*2d = 28 -> 763.
ATTN, MLP, NORMS, POS = 4 * 7 * 7, 2 * 7 * 14, 2 * 2 * 7, 35 * 7
COUNTS = [
    ({}, 98 + POS + ATTN + MLP + NORMS),
    ({"final_norm": True}, 763 + 2 * 7),  # + LN weight and bias
    ({"norm": "rms"}, 763 - 2 * 7),  # rms has a weight only
    ({"norm": "rms", "final_norm": True}, 763 - 2 * 7 + 7),
    ({"norm": "none", "final_norm": True}, 763 - NORMS),  # no norm anywhere
    ({"norm_bias": False}, 763 - 2 * 7),
    ({"share_norms": True}, 763 - 2 * 7),  # one (w, b) set instead of two
    ({"share_norms": True, "final_norm": True}, 763 - 2 * 7),  # the final site reuses it
    ({"attn_bias": True}, 763 + 7 + 7 + 7 + 7),  # q, k, v, o biases
    ({"mlp_bias": True}, 763 + 14 + 7),  # d_ff + d
    ({"activation": "swiglu"}, 763 + 7 * 14),  # + W_gate
    ({"activation": "gelu"}, 763),
    ({"unembed_bias": True}, 763 + 14),
    ({"tie_embeddings": False}, 763 + 7 * 14),  # separate d x V unembedding
    ({"pos": "sinusoidal"}, 763 - POS),  # fixed: counts 0
    ({"pos": "none"}, 763 - POS),
    ({"pos": "abacus", "abacus_max": 12}, 763 - POS + 12 * 7),  # abacus table abacus_max x d
    ({"pos": "rope", "d_head": 2}, 763 - POS - 2 * 7 * 7 + 2 * 7 * 2),  # q, k: d x 2; rope 0
    ({"n_loops": 3}, 763),  # shared weights
    ({"n_loops": 3, "input_injection": False}, 763),
    ({"rank": 2}, 763 - ATTN - MLP + 4 * 2 * (7 + 7) + 2 * 2 * (7 + 14)),  # r * (d_in + d_out)
    ({"rank": 2, "attn_bias": True}, 763 - ATTN - MLP + 4 * 2 * 14 + 2 * 2 * 21 + 28),
    ({"tie_kv": True}, 763 - 7 * 7),  # k and v share one d x d
    ({"d_ff": 0}, 763 - MLP - 2 * 7),  # no MLP and no norm2
    ({"n_heads": 2, "d_head": 3, "d_vhead": 2}, 763 - ATTN + 2 * 7 * 6 + 2 * 7 * 4),
    ({"n_layers": 2}, 763 + ATTN + MLP + NORMS),
    ({"n_layers": 2, "share_norms": True}, 763 + ATTN + MLP - 2 * 7),
]


@pytest.mark.parametrize(("overrides", "expected"), COUNTS, ids=[str(o) for o, _ in COUNTS])
def test_param_count_by_hand(overrides, expected):
    cfg = cfg_of(**overrides)
    model = ArithTransformer(cfg, k=2)
    assert count_params(cfg) == expected
    assert count_params(model) == expected
    assert sum(n for _, n in param_breakdown(model)) == expected
    assert param_breakdown(cfg) == param_breakdown(model)


def combos() -> list[ModelConfig]:
    """A deterministic spread of combined options."""
    g = torch.Generator().manual_seed(0)

    def pick(xs):
        return xs[int(torch.randint(len(xs), (1,), generator=g))]

    out = []
    for _ in range(40):
        heads = pick([1, 2])
        kw = dict(vocab_size=pick([12, 14]), n_ctx=pick([9, 13]), n_layers=pick([1, 2]),
                  d_model=8, n_heads=heads, d_ff=pick([0, 12]),
                  activation=pick(["relu", "gelu", "swiglu"]), norm=pick(["layer", "rms", "none"]),
                  norm_bias=pick([True, False]), final_norm=pick([True, False]),
                  share_norms=pick([True, False]), attn_bias=pick([True, False]),
                  mlp_bias=pick([True, False]), unembed_bias=pick([True, False]),
                  tie_embeddings=pick([True, False]),
                  pos=pick(["learned", "sinusoidal", "rope", "abacus", "none"]),
                  abacus_max=pick([4, 8]), n_loops=pick([1, 2]),
                  input_injection=pick([True, False]), rank=pick([0, 3]),
                  tie_kv=pick([True, False]), d_head=pick([None, 2]))
        if kw["tie_kv"]:
            kw["d_vhead"] = kw["d_head"]
        out.append(ModelConfig(**kw))
    return out


def test_counts_agree_for_combined_options():
    for cfg in combos():
        model = ArithTransformer(cfg, k=2)
        assert count_params(model) == count_params(cfg) == sum(n for _, n in param_breakdown(cfg))


def test_fixed_positions_count_zero():
    none = count_params(cfg_of(pos="none", d_head=2))
    assert count_params(cfg_of(pos="sinusoidal", d_head=2)) == none
    assert count_params(cfg_of(pos="rope", d_head=2)) == none
    for pos in ("sinusoidal", "rope"):
        names = [c for c, _ in param_breakdown(cfg_of(pos=pos, d_head=2))]
        assert not any(c.startswith(("pos", "abacus")) for c in names), names
    assert dict(param_breakdown(cfg_of()))["pos"] == 35 * 7
    assert dict(param_breakdown(cfg_of(pos="abacus")))["abacus"] == 32 * 7


def test_breakdown_names_are_readable():
    names = [c for c, _ in param_breakdown(cfg_of(final_norm=True, tie_embeddings=False))]
    assert names == ["embed", "pos", "layer0.norm1", "layer0.attn.q", "layer0.attn.k",
                     "layer0.attn.v", "layer0.attn.o", "layer0.norm2", "layer0.mlp.up",
                     "layer0.mlp.down", "final_norm", "unembed"]


# ---------------------------------------------------------------- an independent reference


def reference_logits(cfg: ModelConfig, st: dict[str, torch.Tensor], tokens: torch.Tensor):
    """One member, written the plain way (per-head SDPA, affine norms, python-loop abacus)."""
    B, T = tokens.shape
    d, H = cfg.d_model, cfg.n_heads

    def mat(name):
        return st[f"{name}.weight"] if f"{name}.weight" in st else st[f"{name}.A"] @ st[f"{name}.B"]

    def lin(x, name):
        return x @ mat(name) + st.get(f"{name}.bias", 0.0)

    def norm(x, name):
        name = "shared_norm" if cfg.share_norms else name
        if cfg.norm == "layer":
            return F.layer_norm(x, (d,), st[f"{name}.weight"], st.get(f"{name}.bias"), eps=1e-5)
        if cfg.norm == "rms":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * st[f"{name}.weight"]
        return x

    def rope(x, at):  # (B, H, T, dh): rotate (x_i, x_{i+half}) by at[b, t] * base^(-i/half)
        half = x.shape[-1] // 2
        rate = cfg.rope_base ** (-torch.arange(half) / half)
        if cfg.pos == "abacus_rope":
            rate = rate * math.pi / cfg.abacus_max
        ang = (at[:, None, :, None] * rate).float()  # (B, 1, T, half)
        z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(ang), ang)
        return torch.cat([z.real, z.imag], dim=-1)

    def runs(cap):  # (B, T): each digit's place in its run of digits, 0 for other tokens
        idx = torch.zeros_like(tokens)
        for b in range(B):
            run = 0
            for t in range(T):
                run = run + 1 if tokens[b, t] < 10 else 0
                idx[b, t] = min(run, cap)
        return idx

    x0 = st["embed.weight"][tokens]
    if cfg.pos == "learned":
        x0 = x0 + st["pos.weight"][:T]
    elif cfg.pos == "sinusoidal":
        pe = torch.zeros(T, d)
        for t in range(T):
            for j in range(d):
                a = t / 10000 ** ((j - j % 2) / d)
                pe[t, j] = math.sin(a) if j % 2 == 0 else math.cos(a)
        x0 = x0 + pe * math.sqrt(2 / d)
    elif cfg.pos == "abacus":
        x0 = x0 + st["abacus.weight"][runs(cfg.abacus_max - 1)]
    at = runs(T) if cfg.pos.startswith("abacus_") else torch.arange(T).expand(B, T)
    x = x0
    for loop in range(cfg.n_loops):
        if loop and cfg.input_injection:
            x = x + x0
        for i in range(cfg.n_layers):
            p = f"layers.{i}"
            h = norm(x, f"{p}.norm1")
            q = lin(h, f"{p}.attn.q").view(B, T, H, -1).transpose(1, 2)
            kk = lin(h, f"{p}.attn.kv" if cfg.tie_kv else f"{p}.attn.k")
            v = kk if cfg.tie_kv else lin(h, f"{p}.attn.v")
            kk, v = kk.view(B, T, H, -1).transpose(1, 2), v.view(B, T, H, -1).transpose(1, 2)
            if cfg.pos in ("rope", "abacus_rope"):
                q, kk = rope(q, at), rope(kk, at)
            bias = torch.zeros(B, H, T, T).masked_fill(~torch.ones(T, T).bool().tril(), -math.inf)
            if cfg.pos == "abacus_bias":  # -softplus(slope) |gap - reach| on digit keys
                a = st[f"{p}.attn.slope"].view(1, H, 1, 1), st[f"{p}.attn.reach"].view(1, H, 1, 1)
                gap = (at[:, None, :] - at[:, :, None]).unsqueeze(1)  # (B, 1, Tq, T)
                bias = bias - F.softplus(a[0]) * (gap - a[1]).abs() * (tokens < 10)[:, None, None]
            o = F.scaled_dot_product_attention(q, kk, v, attn_mask=bias)
            x = x + lin(o.transpose(1, 2).reshape(B, T, -1), f"{p}.attn.o")
            if cfg.d_ff:
                h = norm(x, f"{p}.norm2")
                if cfg.activation == "swiglu":
                    h = F.silu(lin(h, f"{p}.mlp.gate")) * lin(h, f"{p}.mlp.up")
                else:
                    act = F.relu if cfg.activation == "relu" else F.gelu
                    h = act(lin(h, f"{p}.mlp.up"))
                x = x + lin(h, f"{p}.mlp.down")
    if cfg.final_norm:
        x = norm(x, "final_norm")
    w = st["embed.weight"].T if cfg.tie_embeddings else st["unembed.weight"]
    return x @ w + st.get("unembed.bias", 0.0)


def digits_and_symbols(cfg, k, B, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, 10, (k, B, T), generator=g)
    sym = torch.rand(k, B, T, generator=g) < 0.3  # runs of digits broken by non-digit tokens
    return torch.where(sym, torch.randint(10, cfg.vocab_size, (k, B, T), generator=g), tok)


EQUIV = {
    "base": {},
    "final_norm_biases": dict(final_norm=True, attn_bias=True, mlp_bias=True, unembed_bias=True,
                              tie_embeddings=False),
    "rope_2heads": dict(pos="rope", n_heads=2, d_head=2, d_vhead=3),
    "abacus": dict(pos="abacus", abacus_max=4),
    "abacus_bias_rms": dict(pos="abacus_bias", n_heads=2, d_head=4, d_vhead=3, norm="rms"),
    "abacus_rope_loops": dict(pos="abacus_rope", abacus_max=5, rope_base=3.0, n_heads=2,
                              d_head=4, d_vhead=3, n_loops=2),
    "loops_sinusoidal": dict(n_loops=3, pos="sinusoidal", n_layers=2),
    "loops_no_injection_rms": dict(n_loops=2, input_injection=False, norm="rms", final_norm=True),
    "swiglu_shared_norms": dict(activation="swiglu", share_norms=True, final_norm=True),
    "low_rank_gelu": dict(rank=3, activation="gelu", attn_bias=True, mlp_bias=True),
    "tie_kv_rope": dict(tie_kv=True, pos="rope", d_head=4, d_vhead=4),
    "attention_only_nonorm": dict(d_ff=0, norm="none", pos="none"),
}


@pytest.mark.parametrize("name", list(EQUIV))
def test_members_match_single_models_and_reference(name):
    cfg = cfg_of(n_ctx=12, **EQUIV[name])
    pack = ArithTransformer(cfg, k=3, seeds=[5, 6, 7])
    tok = digits_and_symbols(cfg, 3, 4, 12)
    with torch.no_grad():
        logits = pack(tok)
        assert logits.shape == (3, 4, 12, 14) and logits.dtype == torch.float32
        for i in range(3):
            single = ArithTransformer.from_member_state(cfg, pack.member_state(i))
            torch.testing.assert_close(single(tok[i : i + 1])[0], logits[i], atol=1e-5, rtol=1e-5)
            ref = reference_logits(cfg, pack.member_state(i), tok[i])
            torch.testing.assert_close(logits[i], ref, atol=1e-4, rtol=1e-4)
            # seeds: member i of the pack is the single model initialised with [seeds[i]]
            seeded = ArithTransformer(cfg, k=1, seeds=[5 + i])
            for n, t in seeded.member_state(0).items():
                assert torch.equal(t, pack.member_state(i)[n]), n
    # gradients too: the attention backward is hand-written and norm affines are folded
    w = torch.randn(3, 4, 12, 14, generator=torch.Generator().manual_seed(1))
    (pack(tok) * w).sum().backward()
    for i in range(3):
        st = {n: t.requires_grad_() for n, t in pack.member_state(i).items()}
        (reference_logits(cfg, st, tok[i]) * w[i]).sum().backward()
        for n, p in pack.named_parameters():
            torch.testing.assert_close(p.grad[i], st[n].grad, atol=1e-4, rtol=1e-4, msg=n)


def test_shared_batch_broadcasts_to_every_member():
    cfg = cfg_of(n_ctx=10)
    pack = ArithTransformer(cfg, k=3, seeds=[0, 1, 2])
    tok = digits_and_symbols(cfg, 1, 5, 10)[0]
    with torch.no_grad():
        torch.testing.assert_close(pack(tok), pack(tok.expand(3, 5, 10)))


def test_abacus_index():
    t = torch.tensor([[[3, 4, 10, 5, 6, 7, 11, 12, 8]]])
    assert abacus_index(t).tolist() == [[[1, 2, 0, 1, 2, 3, 0, 0, 1]]]


def test_abacus_rope_sees_differences_of_place_only():
    """Turning q and k by the abacus index makes attention depend on index differences alone:
    shifting every index of an all-digit sequence by k changes nothing (a learned abacus table
    would change), while shifting only some digits does; no position parameter exists."""
    cfg = cfg_of(n_ctx=12, pos="abacus_rope", abacus_max=8, n_heads=2, d_head=4, d_vhead=3)
    model = ArithTransformer(cfg, k=2, seeds=[0, 1]).eval()
    assert not any("abacus" in n or n.startswith("pos") for n, _ in model.named_parameters())
    tok = torch.randint(0, 10, (2, 3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = model(tok)
        shifted = model(tok, abacus_offset=torch.full((2, 3), 5))
        torch.testing.assert_close(shifted, base, atol=1e-5, rtol=1e-5)
        tok[..., 6] = 10  # a non-digit (index 0, never offset) splits the run in two
        mixed = model(tok), model(tok, abacus_offset=torch.full((2, 3), 5))
        assert not torch.allclose(*mixed, atol=1e-3)


def test_causal():
    for extra in ({}, {"pos": "abacus"}, {"pos": "rope", "d_head": 2, "n_loops": 2},
                  {"pos": "abacus_rope", "d_head": 2, "d_vhead": 3, "n_heads": 2},
                  {"pos": "abacus_bias"}):
        cfg = cfg_of(n_ctx=12, **extra)
        model = ArithTransformer(cfg, k=2, seeds=[0, 1])
        tok = digits_and_symbols(cfg, 2, 3, 12)
        changed = tok.clone()
        changed[..., 7:] = (changed[..., 7:] + 3) % cfg.vocab_size
        with torch.no_grad():
            a, b = model(tok), model(changed)
        torch.testing.assert_close(a[..., :7, :], b[..., :7, :])
        assert not torch.allclose(a[..., 7:, :], b[..., 7:, :])


def test_gradient_steps_reduce_loss():
    cfg = cfg_of(n_ctx=8, final_norm=True)
    model = ArithTransformer(cfg, k=2, generator=torch.Generator().manual_seed(0))
    tok = digits_and_symbols(cfg, 2, 16, 8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss():  # predict the next token
        logits = model(tok)[..., :-1, :]
        return F.cross_entropy(logits.reshape(-1, cfg.vocab_size), tok[..., 1:].reshape(-1))

    first = loss().item()
    for _ in range(30):
        opt.zero_grad()
        loss().backward()
        opt.step()
    assert loss().item() < first - 0.3
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_init_is_seeded_and_sane():
    cfg = cfg_of()
    a = ArithTransformer(cfg, k=2, seeds=[1, 2])
    b = ArithTransformer(cfg, k=2, seeds=[1, 2])
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
    assert not torch.equal(a.embed.weight[0], a.embed.weight[1])
    st = a.member_state(0)
    assert torch.equal(st["layers.0.norm1.weight"], torch.ones(7))
    assert torch.equal(st["layers.0.norm1.bias"], torch.zeros(7))
    with torch.no_grad():  # logits start O(1), not saturated
        std = a(digits_and_symbols(cfg, 2, 8, 35)).std().item()
    assert 0.2 < std < 5


# ---------------------------------------------------------------- member state


def test_member_state_round_trip():
    cfg = cfg_of(rank=2, attn_bias=True)
    pack = ArithTransformer(cfg, k=3, seeds=[0, 1, 2])
    st = pack.member_state(2)
    assert list(st) == [n for n, _ in pack.named_parameters()]
    assert all(t.is_contiguous() and t.shape == p.shape[1:]
               for t, p in zip(st.values(), pack.parameters()))
    st["embed.weight"].add_(1.0)  # a clone: the pack is untouched
    assert not torch.equal(st["embed.weight"], pack.embed.weight[2])
    pack.load_member_state(0, st)
    for n, t in pack.member_state(0).items():
        assert torch.equal(t, st[n]), n
    assert torch.equal(pack.member_state(1)["embed.weight"], ArithTransformer(
        cfg, k=1, seeds=[1]).member_state(0)["embed.weight"])


def test_load_member_state_errors_name_the_tensor():
    cfg = cfg_of()
    model = ArithTransformer(cfg, k=2)
    st = model.member_state(0)
    bad = dict(st, **{"layers.0.attn.q.weight": torch.zeros(7, 8)})
    with pytest.raises(CheckpointError, match=r"layers\.0\.attn\.q\.weight.*\(7, 8\)"):
        model.load_member_state(1, bad)
    missing = {n: t for n, t in st.items() if n != "pos.weight"}
    with pytest.raises(CheckpointError, match=r"missing.*pos\.weight"):
        ArithTransformer.from_member_state(cfg, missing)
    with pytest.raises(CheckpointError, match=r"unexpected.*final_norm\.weight"):
        model.load_member_state(0, dict(st, **{"final_norm.weight": torch.ones(7)}))
    # a checkpoint from a wider model than its config says
    wide = ArithTransformer(cfg_of(d_model=8), k=1).member_state(0)
    with pytest.raises(CheckpointError, match="embed.weight"):
        ArithTransformer.from_member_state(cfg, wide)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("overrides", "field"), [
    ({"activation": "tanh"}, "activation"),
    ({"norm": "batch"}, "norm"),
    ({"pos": "alibi"}, "pos"),
    ({"d_model": 0}, "d_model"),
    ({"n_heads": 2}, "n_heads"),  # 7 not divisible by 2
    ({"pos": "rope"}, "d_head"),  # q/k width 7 is odd
    ({"pos": "rope", "d_head": 2, "rope_base": 1.0}, "rope_base"),
    ({"tie_kv": True, "d_head": 2}, "tie_kv"),
    ({"rank": 7}, "rank"),
    ({"d_ff": -1}, "d_ff"),
    ({"vocab_size": 9}, "vocab_size"),
    ({"abacus_max": 1}, "abacus_max"),
    ({"tie_embeddings": "false"}, "tie_embeddings"),
    ({"d_head": True}, "d_head"),
    ({"rope_base": "big"}, "rope_base"),
])
def test_validation_names_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        cfg_of(**overrides)


def test_config_round_trip():
    cfg = cfg_of(pos="rope", d_head=2, rank=3, tie_kv=True, d_vhead=2)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="bogus"):
        ModelConfig.from_dict({**cfg.to_dict(), "bogus": 1})
    assert dataclasses.replace(cfg, final_norm=True).final_norm


def test_forward_rejects_bad_shapes():
    model = ArithTransformer(cfg_of(n_ctx=6), k=2)
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(3, 1, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(2, 1, 7, dtype=torch.long))
