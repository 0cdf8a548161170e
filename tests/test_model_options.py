"""The ties and scalars that take the AdderBoard family below 36 (issue 33 item 4): one number
per norm, QK-norm as one number times a fixed pattern, a block applied twice with a learned
mix, Q and K on the token part, down = up^T scaled per hidden unit, plus gate = a * up on
tbukic's 36. Each against its plain form with the derived weights written in by hand, its
exact count, a checkpoint round trip, the tiny layout, its errors, and the adderboard space
that exposes them all."""

from __future__ import annotations

import pytest
import torch

from arithsweep.core.api import params_job
from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model import tiny_layout as TL
from arithsweep.core.model.checkpoint import load_checkpoint, save_checkpoint
from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params, param_breakdown
from arithsweep.core.overrides import build_configs

ANCHOR = "recipes/anchors/tbukic-36.yaml"
QUARTER = [1.0, 0.25, 0.0, -1.0]  # lokimorty's "anti-quarter" QK-norm pattern
# every new option at once on tbukic's 36, the smallest tie of each kind
ALL_TIES = dict(tie_gate=True, norm_weight="scalar", qk_norm="scalar", qk_norm_pattern=QUARTER,
                d_embed=2, qk_from_tokens=True, tie_k="q", mlp_down="up_t")
LOOPED = dict(n_loops=2, input_injection=False, loop_mix=True)


def t36(**kw) -> ModelConfig:
    """tbukic's 36-p record (the anchor file) with `kw` on top, as `arithsweep params` reads it."""
    return build_configs(None, None, ANCHOR, kw)[1]


def _tokens(cfg: ModelConfig, b: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (b, cfg.n_ctx), generator=g)


def _model(cfg: ModelConfig, k: int = 2) -> ArithTransformer:
    """Members with every scalar off its neutral start, so each shapes the logits."""
    model = ArithTransformer(cfg, k=k, seeds=list(range(5, 5 + k)))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("gain", "scale", "mix", "angle")):
                p.copy_(torch.linspace(-0.7, 1.3, k * p[0].numel()).view_as(p))
    return model


# ------------------------------------------------------------------------------ counts
@pytest.mark.parametrize(("kw", "want"), [
    ({}, 36),
    ({"tie_gate": True}, 31),  # gate 6 -> a
    ({"norm_weight": "scalar"}, 34),  # the one shared norm: 3 -> 1
    ({"qk_norm": "scalar"}, 33),  # the shared QK-norm weight: 4 -> 1
    ({"qk_norm": "scalar", "qk_norm_pattern": QUARTER}, 33),  # the pattern is fixed: 0
    ({"d_embed": 2, "qk_from_tokens": True}, 32),  # Q reads 2 of 3 dims: 12 -> 8
    ({"mlp_down": "up_t_scaled"}, 37),  # the down angle (1) -> a scale per hidden unit (2)
    ({"n_loops": 2}, 36),  # looping shares every weight
    ({"n_loops": 2, "loop_mix": True}, 37),  # ... and the mix adds exactly one
    (ALL_TIES, 20),
    ({**ALL_TIES, **LOOPED}, 21),
])
def test_each_option_counts_exactly(kw, want):
    cfg = t36(**kw)
    assert count_params(cfg) == want
    assert params_job(get_task("add10", "pad,revans,revops,delim,zeros"), cfg)["params"] == want


def test_the_new_owned_numbers_are_rows_of_the_table():
    by = dict(param_breakdown(t36(**ALL_TIES, **LOOPED)))
    assert by == {"embed.arc": 3, "layer0.attn.qk_norm_scale": 1, "layer0.attn.q": 8,
                  "layer0.mlp.gate_scale": 1, "layer0.mlp.up": 6, "shared_norm.gain": 1,
                  "loop.mix": 1}
    assert dict(param_breakdown(t36(mlp_down="up_t_scaled")))["layer0.mlp.down_scale"] == 2


def test_a_scalar_norm_replaces_d_numbers_by_one_at_every_site():
    # three own LayerNorms (with biases, which stay vectors) and a final one, d 6
    base = dict(vocab_size=10, n_ctx=12, d_model=6, n_heads=2, d_ff=8, norm="layer")
    vec, one = ModelConfig(**base), ModelConfig(**base, norm_weight="scalar")
    assert count_params(vec) - count_params(one) == 3 * (6 - 1)
    by = dict(param_breakdown(one))
    assert by["layer0.norm1.gain"] == 1 and by["layer0.norm1"] == 6  # the bias, a vector


def test_a_qk_scalar_replaces_the_vector_of_either_qk_norm():
    for anchor in ("tbukic-44", "tbukic-62"):  # own q and k weights: 8 -> 1
        doc = build_configs(None, None, f"recipes/anchors/{anchor}.yaml", {})[1]
        cfg = build_configs(None, None, f"recipes/anchors/{anchor}.yaml",
                            {"qk_norm": "scalar", "qk_norm_pattern": QUARTER})[1]
        assert count_params(doc) - count_params(cfg) == 8 - 1


# ----------------------------------------------------- each derived weight, written in by hand
def _logits(model: ArithTransformer, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(tokens)


def _plain_twin(model: ArithTransformer, cfg: ModelConfig, derive) -> ArithTransformer:
    """A model of the plain config `cfg` holding `model`'s weights, with the derived ones
    written in by `derive(state) -> state` (one member's tensors)."""
    twin = ArithTransformer(cfg, k=model.k)
    for i in range(model.k):
        twin.load_member_state(i, derive(model.member_state(i)))
    return twin


def test_a_scalar_norm_is_its_number_times_ones():
    model = _model(t36(norm_weight="scalar"))

    def derive(s):
        return {("shared_norm.weight" if n == "shared_norm.gain" else n):
                (t.expand(3).clone() if n == "shared_norm.gain" else t) for n, t in s.items()}

    twin = _plain_twin(model, t36(), derive)
    torch.testing.assert_close(_logits(model, _tokens(model.cfg)),
                               _logits(twin, _tokens(model.cfg)), rtol=0, atol=0)


@pytest.mark.parametrize("pattern", [None, QUARTER])
def test_a_qk_scalar_is_its_number_times_the_pattern(pattern):
    model = _model(t36(qk_norm="scalar", qk_norm_pattern=pattern))
    key = "layers.0.attn.qk_norm"
    p = torch.tensor(pattern or [1.0] * 4)

    def derive(s):
        out = {n: t for n, t in s.items() if n != key + "_scale"}
        return {**out, key: s[key + "_scale"] * p}

    twin = _plain_twin(model, t36(), derive)
    torch.testing.assert_close(_logits(model, _tokens(model.cfg)),
                               _logits(twin, _tokens(model.cfg)), rtol=0, atol=0)


def test_q_and_k_on_the_tokens_read_zeros_elsewhere():
    # K = V too (tbukic's 62): both projections read the first 2 of 3 dims
    doc = "recipes/anchors/tbukic-62.yaml"
    cfg = build_configs(None, None, doc, {"d_embed": 2, "qk_from_tokens": True})[1]
    plain = build_configs(None, None, doc, {"d_embed": 2})[1]
    model = _model(cfg)

    def derive(s):  # (2, out) -> (3, out): a zero row for the unread dim
        return {n: torch.cat([t, t.new_zeros(1, t.shape[1])]) if n.endswith(("q.weight",
                "kv.weight")) else t for n, t in s.items()}

    twin = _plain_twin(model, plain, derive)
    torch.testing.assert_close(_logits(model, _tokens(cfg)), _logits(twin, _tokens(cfg)),
                               rtol=0, atol=0)


def test_a_scaled_up_transpose_is_down():
    model = _model(t36(mlp_down="up_t_scaled"))

    def derive(s):  # W_down (ff, d) = W_up^T (ff, d) with row j times s_j
        out = {n: t for n, t in s.items() if n != "layers.0.mlp.down_scale"}
        scale = s["layers.0.mlp.down_scale"]
        return {**out, "layers.0.mlp.down.weight": s["layers.0.mlp.up.weight"].T * scale[:, None]}

    twin = _plain_twin(model, t36(mlp_down="own"), derive)
    torch.testing.assert_close(_logits(model, _tokens(model.cfg)),
                               _logits(twin, _tokens(model.cfg)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("inject", [False, True])
def test_the_loop_mix_blends_the_second_pass_in(inject):
    """m = 0 is the single pass, m = 1 the plain second pass; without a final norm the logits
    are linear in the stream, so any m is their blend. From an answer position on, as the
    forward computes only those rows in the last pass."""
    kw = dict(final_norm=False, n_loops=2, input_injection=inject)
    model = _model(t36(**kw, loop_mix=True), k=1)
    tokens = _tokens(model.cfg)
    one = _plain_twin(model, t36(final_norm=False), lambda s: {
        n: t for n, t in s.items() if n != "loop.mix"})
    two = _plain_twin(model, t36(**kw), lambda s: {n: t for n, t in s.items() if n != "loop.mix"})
    with torch.no_grad():
        model.loop.mix.zero_()
        torch.testing.assert_close(_logits(model, tokens), _logits(one, tokens))
        model.loop.mix.fill_(1.0)
        torch.testing.assert_close(_logits(model, tokens), _logits(two, tokens))
        model.loop.mix.fill_(0.3)
        want = 0.7 * _logits(one, tokens) + 0.3 * _logits(two, tokens)
        torch.testing.assert_close(_logits(model, tokens), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(tokens, from_pos=23), want[:, :, 23:],
                                   rtol=1e-5, atol=1e-5)


def test_a_loop_mix_starts_at_the_single_pass_and_learns():
    model = ArithTransformer(t36(**LOOPED), k=2, seeds=[0, 1])
    assert not model.loop.mix.any()
    model(_tokens(model.cfg)).square().mean().backward()
    assert model.loop.mix.grad.abs().min() > 0


@pytest.mark.parametrize("kw", [ALL_TIES, {**ALL_TIES, **LOOPED},
                                {"mlp_down": "up_t_scaled", "norm_weight": "scalar"}])
def test_every_owned_number_gets_a_gradient(kw):
    model = _model(t36(**kw))
    model(_tokens(model.cfg)).square().mean().backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, n


# --------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("kw", [ALL_TIES, {**ALL_TIES, **LOOPED}, {"mlp_down": "up_t_scaled"},
                                {"qk_norm": "scalar"}])
def test_a_checkpoint_round_trips_with_identical_logits(tmp_path, kw):
    cfg = t36(**kw)
    model = _model(cfg, k=1)
    task = get_task("add10", "pad,revans,revops,delim,zeros")
    save_checkpoint(tmp_path / "ck", model, task)
    ck = load_checkpoint(tmp_path / "ck")
    assert ck.model_cfg == cfg and ck.params == count_params(cfg)
    tokens = _tokens(cfg)
    assert torch.equal(_logits(ck.model, tokens), _logits(model, tokens))


def test_the_all_ties_model_exports_under_adderboards_protocol(tmp_path):
    """AdderBoard counts the exported model's parameters itself: 21, as arithsweep does."""
    from arithsweep.core.hashing import sha256_file
    from arithsweep.leaderboard.adderboard import export_adderboard
    from arithsweep.leaderboard.adderboard_check import EDGE_CASES, check_submission

    cfg = t36(**ALL_TIES, **LOOPED)
    task = get_task("add10", "pad,revans,revops,delim,zeros")
    save_checkpoint(tmp_path / "ck", _model(cfg, k=1), task)
    row = {"id": 1, "task": "add10", "params": 21, "checkpoint_path": str(tmp_path / "ck"),
           "sha256": sha256_file(tmp_path / "ck" / "model.safetensors"),
           "model_config": cfg.to_dict(), "architecture": cfg.summary()}
    export_adderboard(row, tmp_path / "sub" / "add10_21.py")
    res = check_submission(tmp_path / "sub" / "add10_21.py", limit=len(EDGE_CASES))
    assert res.params == 21 and res.total == len(EDGE_CASES)


# ---------------------------------------------------------------------------- tiny layout
TINY = {"scalar-norms": dict(norm_weight="scalar"),
        "scalar-own-layernorms": dict(norm_weight="scalar", share_norms=False, norm="layer"),
        "qk-scalar-pattern": dict(qk_norm="scalar", qk_norm_pattern=QUARTER),
        "qk-on-tokens-kv": dict(d_embed=2, qk_from_tokens=True, tie_k="none", tie_v=False,
                                tie_kv=True),
        "down-scaled": dict(mlp_down="up_t_scaled"),
        "all-ties": ALL_TIES}


@pytest.mark.skipif(TL.load_error() is not None, reason="tiny kernel unavailable")
@pytest.mark.parametrize("name", list(TINY))
def test_the_tiny_layout_runs_each_option_as_the_reference(name):
    from test_tiny_layout import _batch, _loss_and_grads

    from arithsweep.core.training.train import _loss_fn

    cfg = t36(**TINY[name])
    assert TL.unsupported(cfg, "cpu") is None
    model = _model(cfg, k=3)
    tokens, mask = _batch(cfg, 3, 37)
    w = torch.tensor([1.0, -2.0, 0.5])
    ref, gref = _loss_and_grads(_loss_fn, model, tokens, mask, 21, w)
    got, grad = _loss_and_grads(TL.tiny_loss, model, tokens, mask, 21, w)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert grad.keys() == gref.keys()
    for n in gref:
        torch.testing.assert_close(grad[n], gref[n], rtol=1e-4, atol=1e-5, msg=n)
    inputs = tokens[..., :-1]
    with torch.no_grad():  # raw logits to 1e-4, as test_tiny_layout: float32 rounding
        torch.testing.assert_close(TL.tiny_logits(model, inputs, 21), model(inputs, from_pos=21),
                                   rtol=1e-4, atol=1e-4)


def test_the_tiny_layout_names_the_looped_mix():
    assert "loop" in TL.unsupported(t36(**ALL_TIES, **LOOPED), "cpu")


# ------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("kw", "field"), [
    ({"norm_weight": "matrix"}, "norm_weight"),
    ({"norm_weight": "scalar", "norm": "none", "share_norms": False}, "norm_weight"),
    ({"qk_norm": "scalar", "qk_norm_pattern": [1, 0.25, 0]}, "qk_norm_pattern"),
    ({"qk_norm_pattern": "quarter"}, "qk_norm_pattern"),
    ({"qk_norm_pattern": [1, "x", 0, 1]}, "qk_norm_pattern"),
    ({"qk_norm_pattern": [1, float("nan"), 0, 1]}, "qk_norm_pattern"),
    ({"qk_norm_pattern": [True, 1, 0, 1]}, "qk_norm_pattern"),
    ({"qk_norm_pattern": []}, "qk_norm_pattern"),
    ({"loop_mix": True}, "loop_mix"),
    ({"loop_mix": "yes", "n_loops": 2}, "loop_mix"),
    ({"qk_from_tokens": True}, "qk_from_tokens"),  # no d_embed: the tokens are the stream
    ({"qk_from_tokens": 1, "d_embed": 2}, "qk_from_tokens"),
    ({"mlp_down": "up_t_scaled", "d_ff": 0}, "mlp_down"),
    # one coordinate has no pair to turn (was a ZeroDivisionError at the first step)
    ({"d_head": 1, "d_vhead": 1, "pos": "none", "qk_norm": "none"}, "tie_k"),
])
def test_a_bad_value_is_one_line_naming_its_field(kw, field):
    with pytest.raises(ConfigError) as e:
        t36(**kw)
    msg = str(e.value)
    assert "\n" not in msg and f"{field}=" in msg


def test_a_pattern_is_read_only_with_qk_norm_scalar():
    # as arc_init only with embed arc: a space may fix it beside a searched qk_norm
    cfg = t36(qk_norm="shared", qk_norm_pattern=[1, 2])
    assert count_params(cfg) == 36 and "qkn-shared" in cfg.summary()
    assert cfg == t36(qk_norm="shared")  # kept only where it is read: the same model
    assert t36(qk_norm="scalar", qk_norm_pattern=[1, 0, 0, 2]).qk_norm_pattern == [1.0, 0, 0, 2]
    assert ModelConfig.from_dict(t36(**ALL_TIES).to_dict()) == t36(**ALL_TIES)


# -------------------------------------------------------------------------------- space
def test_the_adderboard_space_exposes_every_option_and_keeps_its_start():
    import optuna

    from arithsweep.search.propose.shrink import _full_config
    from arithsweep.search.space.spaces import load_space
    from arithsweep.search.trials.configs import ProposalSizer

    space, sizer = load_space("adderboard"), ProposalSizer({"task": "add10"})
    choices = {p.name.partition(".")[2]: set(p.choices) for p in space.searched
               if p.kind == "choice"}
    for key, want in {"tie_gate": {True}, "norm_weight": {"scalar"}, "qk_norm": {"scalar"},
                      "loop_mix": {True}, "n_loops": {2}, "input_injection": {False},
                      "qk_from_tokens": {True}, "d_embed": {2}, "tie_kv": {True},
                      "v_from_tokens": {True}, "tie_k": {"q", "scaled", "rotated"},
                      "mlp_down": {"up_t", "up_t_rot", "up_t_scaled"}}.items():
        assert want <= choices[key], key
    (start,) = space.start
    assert sizer(_full_config(space, start)) == 146  # staghado's, every new tie off
    smallest = {"model.d_model": 3, "model.d_embed": 2, "model.n_heads": 1, "model.d_ff": 2,
                "model.norm_weight": "scalar", "model.share_norms": True,
                "model.qk_norm": "scalar", "model.embed": "arc", "model.qk_from_tokens": True,
                "model.tie_o": True, "model.tie_k": "q", "model.tie_v": True,
                "model.tie_gate": True, "model.mlp_down": "up_t", "model.n_loops": 1}
    assert sizer(_full_config(space, smallest)) == 20
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(60):  # every sample is a valid model (the `when`s keep ties compatible)
        trial = study.ask()
        sample = space.suggest(trial)
        study.tell(trial, 0.0)
        space.validate_sample(sample, vocab_size=10, n_ctx=34)


# ----------------------------------------------------------- the microadder space below 51
@pytest.mark.parametrize(("point", "want", "parts"), [
    ({}, 57, {"head": 10, "slots": 6, "layer0.attn.q": 12, "shared_norm": 5}),
    ({"model.d_head": 2}, 51, {"layer0.attn.q": 6}),
    ({"model.d_head": 2, "model.norm_weight": "scalar"}, 47, {"shared_norm.gain": 1}),
    # d_model 4: the token part stays 2, the position part loses the spiral's ramp
    ({"model.d_model": 4}, 44, {"head": 8, "slots": 4, "layer0.attn.q": 8, "shared_norm": 4}),
    ({"model.d_model": 4, "model.d_head": 2}, 40,
     {"head": 8, "slots": 4, "layer0.attn.q": 4, "layer0.attn.o": 8, "layer0.mlp.up": 8}),
])
def test_the_microadder_space_points_count_exactly_on_add3(point, want, parts):
    from arithsweep.search.propose.shrink import _full_config
    from arithsweep.search.space.spaces import load_space
    from arithsweep.search.trials.configs import CONST_KEY, build_trial

    space = load_space("microadder")
    start = {"model.d_head": 4, "model.mlp_down": "head", "train.lr": 0.02}
    setup = build_trial({**_full_config(space, {**start, **point}),
                         CONST_KEY: {"task": "add3", "target": 0.99}})
    assert setup.params == want
    by = dict(param_breakdown(setup.model_cfg))
    assert {k: by[k] for k in parts} == parts
