"""`arithsweep inspect` and arithsweep.core.evaluation.inspect on the session's trained add2
model: the captured attention is a real causal softmax (checked against plain torch), the answer
probabilities and greedy answer agree with evaluate.greedy_decode, the accuracy views add up,
the PNG is a PNG, and the CLI answers --json, entry ids and bad problems properly."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import run

from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.evaluate import exact_match, greedy_decode
from arithsweep.core.evaluation.inspect import accuracy_views, draw, inspect_problem
from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.model.model import ArithTransformer, ModelConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ck(add2_trained):
    return load_checkpoint(add2_trained[1])


def _plain_attention(state: dict, cfg: ModelConfig, tokens: list[int], head: int) -> torch.Tensor:
    """Layer 0's attention for one head, written the textbook way (T, d) from the raw tensors
    (learned positions and LayerNorm, as the add2 fixture uses)."""
    T, d = len(tokens), cfg.d_model
    x = state["embed.weight"][tokens] + state["pos.weight"][:T]  # (T, d)
    y = F.layer_norm(x, (d,), state["layers.0.norm1.weight"], state["layers.0.norm1.bias"], 1e-5)
    qk = cfg.qk_head
    cols = slice(head * qk, (head + 1) * qk)
    q = y @ state["layers.0.attn.q.weight"][:, cols]  # (T, qk)
    k = y @ state["layers.0.attn.k.weight"][:, cols]
    s = q @ k.T / qk**0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1)


def test_attention_is_causal_sums_to_one_and_matches_plain_torch(ck):
    cfg = ck.model_cfg
    assert cfg.pos == "learned" and cfg.norm == "layer" and not cfg.tie_kv and cfg.rank == 0
    res = inspect_problem(ck.model, ck.task, "57+68")
    T = len(res["tokens"])
    assert res["tokens"][:res["prompt_len"]] == list("57+68=")
    assert len(res["attention"]) == cfg.n_layers * cfg.n_heads * cfg.n_loops
    for att in res["attention"]:
        w = torch.tensor(att["weights"], dtype=torch.float64)  # (T, T)
        assert w.shape == (T, T)
        assert torch.allclose(w.sum(-1), torch.ones(T, dtype=torch.float64), atol=1e-4)
        assert (w.triu(1) == 0).all() and (w >= 0).all()
    ids = [ck.task.token_id[t] for t in res["tokens"]]
    state = ck.model.member_state(0)
    for h in range(cfg.n_heads):
        want = _plain_attention(state, cfg, ids, h)
        got = torch.tensor(res["attention"][h]["weights"], dtype=torch.float32)
        assert torch.allclose(got, want, atol=2e-5), (h, (got - want).abs().max())
    # the residual norms: one after the embedding, one after each block
    assert [r["stage"] for r in res["residual_norms"]] == ["embed", "L0"]
    assert all(len(r["norms"]) == T and min(r["norms"]) > 0 for r in res["residual_norms"])


def test_capturing_changes_nothing_and_switches_off(ck):
    tokens, _ = ck.task.encode(torch.tensor([12, 99]), torch.tensor([34, 1]), torch.tensor([0, 0]))
    plain = ck.model(tokens[:, :-1])
    with ck.model.capturing() as cap:
        seen = ck.model(tokens[:, :-1])
    assert torch.equal(plain, seen) and ck.model._capture is None
    assert cap["attn"][0].shape == (1, 2, ck.model_cfg.n_heads, tokens.shape[1] - 1,
                                    tokens.shape[1] - 1)
    ck.model(tokens[:, :-1])
    assert len(cap["attn"]) == ck.model_cfg.n_layers  # nothing recorded after the block


@pytest.mark.parametrize("trained", [True, False])
def test_probabilities_and_greedy_answer_agree_with_greedy_decode(ck, trained):
    task = ck.task
    model = ck.model if trained else ArithTransformer(ck.model_cfg, k=1, seeds=[3])
    problems = ["12+34", "99+99", "0+0", "50+50", "7+93"]
    for s in problems:
        res = inspect_problem(model, task, s)
        a, b, op = task.parse_problem(s)
        want = greedy_decode(model, task, torch.tensor([a]), torch.tensor([b]), torch.tensor([op]))
        assert res["greedy_answer"] == want[0], s
        assert res["expected_answer"] == a + b
        assert res["correct"] == (want[0] == a + b)
        probs = torch.tensor(res["answer"]["probs"], dtype=torch.float64)
        assert probs.shape == (task.answer_len, task.vocab_size)
        assert torch.allclose(probs.sum(-1), torch.ones(len(probs), dtype=torch.float64),
                              atol=1e-4)
        # the chosen token is the argmax the greedy step took at that position
        chosen = [task.vocab[i] for i in probs.argmax(-1).tolist()]
        assert chosen == res["answer"]["chosen"]
        if trained:
            assert res["correct"] and res["answer"]["chosen"] == res["answer"]["expected"]
            assert min(p[task.token_id[c]] for p, c in zip(res["answer"]["probs"],
                                                            res["answer"]["chosen"])) > 0.5


def test_population_member_and_looped_rope_model():
    task = get_task("add2")
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, n_layers=2, n_loops=2,
                      pos="rope", d_model=8, n_heads=2, d_ff=8)
    model = ArithTransformer(cfg, k=3, seeds=[0, 1, 2])
    res = [inspect_problem(model, task, "12+34", member=m) for m in range(3)]
    assert [(a["loop"], a["layer"], a["head"]) for a in res[0]["attention"]] == [
        (r, layer, h) for r in range(2) for layer in range(2) for h in range(2)]
    assert len(res[0]["residual_norms"]) == 1 + 2 * 2
    assert res[0]["attention"][0]["weights"] != res[1]["attention"][0]["weights"]
    a, b, op = torch.tensor([12]), torch.tensor([34]), torch.tensor([0])
    for m in range(3):
        assert res[m]["greedy_answer"] == greedy_decode(model, task, a, b, op, member=m)[0]
    with pytest.raises(ConfigError, match="member 3"):
        inspect_problem(model, task, "12+34", member=3)
    with pytest.raises(ConfigError, match="cannot parse"):
        inspect_problem(model, task, "12 plus 34")


def test_accuracy_views_add_up(ck):
    task = ck.task
    views = accuracy_views(ck.model, task, n=10**4)
    assert views["source"] == "all problems" and views["problems"] == task.n_problems
    for key in ("by_answer_len", "by_carry"):
        assert sum(r["problems"] for r in views[key]) == views["problems"]
    right = int(exact_match(ck.model, task, *task.enumerate_all())[0].sum())
    assert sum(r["correct"] for r in views["by_answer_len"]) == right
    assert [r["answer_len"] for r in views["by_answer_len"]] == [1, 2, 3]
    sums = [a + b for a in range(100) for b in range(100)]
    want = [sum(lo <= s < hi for s in sums) for lo, hi in ((0, 10), (10, 100), (100, 1000))]
    assert [r["problems"] for r in views["by_answer_len"]] == want  # 55, 4995, 4950
    assert [r["label"] for r in views["by_position"]] == ["10^0", "10^1", "10^2"]


def test_accuracy_views_sample_held_out_problems_for_big_tasks():
    task = get_task("add3")
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, d_model=8, d_ff=8)
    model = ArithTransformer(cfg, k=2, seeds=[0, 1])
    views = accuracy_views(model, task, n=300, member=1)
    assert views["problems"] == 300 and views["source"].startswith("held-out")
    assert sum(r["problems"] for r in views["by_answer_len"]) == 300
    assert len(views["by_position"]) == task.answer_len
    assert all(0 <= r["accuracy"] <= 1 for r in views["by_position"])
    with pytest.raises(ConfigError):
        accuracy_views(model, task, n=0)


def test_draw_writes_a_png(ck, tmp_path):
    res = inspect_problem(ck.model, ck.task, "57+68")
    views = accuracy_views(ck.model, ck.task, n=2000)
    path = draw(res, tmp_path / "pics" / "add2.png", views)
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    import matplotlib.image

    img = matplotlib.image.imread(path)  # parses the whole file
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 300
    with pytest.raises(ConfigError, match="PNG"):
        draw(res, tmp_path / "add2.jpg")


def test_cli_inspect_checkpoint_entry_and_bad_input(capsys, tmp_path, monkeypatch, add2_trained):
    _, ckpt = add2_trained
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "inspect", ckpt, "57+68", "--json", "-n", "500")
    assert code == 0, err
    res = json.loads(out)
    assert res["greedy_answer"] == 125 and res["correct"] and res["entry"] is None
    assert res["png"] == "inspect-add2.png"
    assert (tmp_path / res["png"]).read_bytes()[:8] == PNG_MAGIC
    assert res["views"]["problems"] == 500

    code, out, err = run(capsys, "inspect", ckpt, "3+4", "--no-png", "-n", "100")
    assert code == 0, err
    assert "model says 7" in out and "exact match by answer length" in out

    db = tmp_path / "lb.db"
    code, _, err = run(capsys, "verify", ckpt, "--record", "--db", db, "--json")
    assert code == 0, err
    code, out, err = run(capsys, "inspect", "1", "9+9", "--db", db, "--json", "--png",
                         tmp_path / "e.png", "-n", "100")
    assert code == 0, err
    res = json.loads(out)
    assert res["entry"] == 1 and res["greedy_answer"] == 18 and (tmp_path / "e.png").is_file()

    for args, needle in [((ckpt, "123+4"), "out of range"), ((ckpt, "1*2"), "'*'"),
                         ((ckpt, "12+34", "--member", "1"), "member 1"),
                         (("no/such/dir", "1+2"), "neither"),
                         (("7", "1+2", "--db", db), "no leaderboard entry"),
                         ((ckpt, "1+2", "--png", "x.jpg"), ".png")]:
        code, out, err = run(capsys, "inspect", *args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (args, err)
        assert needle in lines[0], (args, lines[0])
