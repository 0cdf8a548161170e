"""Tests for arithsweep.core.data.sort_task: the sort<N> task's encoding, stable order against
Python's `sorted`, the holdout split, its verification suite, a tiny model that learns it, and
the CLI.

    python -m pytest -q tests/test_sort_task.py -x
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from arithsweep.core.data import sort_task as st
from arithsweep.core.data.sort_task import SortTask, sort_suite
from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError

FORMATS = [None, "nodelim", "revops", "revops,nodelim"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def py_values(task, a):
    return [a // 100**i % 100 for i in range(task.n_items)]


def py_sorted_labels(values):
    """The reference: Python's (stable) sorted over label indices, as labels."""
    return "".join(chr(97 + i) for i in sorted(range(len(values)), key=lambda i: values[i]))


def problems(task, n=300, seed=0):
    """A mix of every sampling mode (ties, sorted and reversed rows come from "carry")."""
    parts = [task.sample(n, gen(seed + i), m) for i, m in enumerate(("uniform", "values", "carry"))]
    return tuple(torch.cat([p[i] for p in parts]) for i in range(3))


# ---------------------------------------------------------------- names, formats, literal tokens


def test_names_formats_and_errors():
    t = get_task("sort3")
    assert isinstance(t, SortTask) and t.name == "sort3" and t.n_items == 3
    assert t.example() == "a12b07c30=  ->  bac"
    assert get_task("sort3", "nodelim").example() == "120730  ->  bac"
    assert get_task("sort3", "revops").example() == "a21b70c03=  ->  bac"
    # the answer is labels: the default revans is normalised away, so names round-trip
    assert t.fmt.name == "pad,fwdans,fwdops,delim"
    assert get_task("sort3", t.fmt.name) == t and get_task("SORT3 ") == t
    assert t.vocab == tuple("0123456789abc=") and t.vocab_size == 14
    assert (t.prompt_len, t.answer_len, t.n_ctx, t.n_problems) == (10, 3, 12, 10**6)
    for bad in ("sort1", "sort10", "sortx", "sort"):
        with pytest.raises(ConfigError, match="sort<N>"):
            get_task(bad)
    with pytest.raises(ConfigError, match="nopad"):
        get_task("sort3", "nopad,delim")
    with pytest.raises(ConfigError, match="sort<N>"):
        get_task("add0")  # the arithmetic error now names sort too


@pytest.mark.parametrize("n", [2, 3, 5, 9])
@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_decode_round_trip(n, fmt):
    """encode -> the prompt's tokens spell the values, the answer's decode to task.answer,
    which is Python's stable sort of the labels; format_problem -> parse_problem round-trips."""
    task = get_task(f"sort{n}", fmt)
    a, b, op = problems(task, 200, seed=n)
    tokens, mask = task.encode(a, b, op)
    assert tokens.shape == (a.numel(), task.seq_len) and mask.shape == (a.numel(), task.n_ctx)
    assert bool((mask.sum(1) == n).all()) and int(tokens.max()) < task.vocab_size
    truth = task.answer(a, b, op).tolist()
    prompts = task.encode_prompt(a, b, op)
    for row, p, x, ans in zip(tokens.tolist(), prompts, a.tolist(), truth):
        vals = py_values(task, x)
        want = py_sorted_labels(vals)
        assert task.render(row[task.prompt_len:]) == want
        assert task.decode_answer(row[task.prompt_len:]) == ans
        assert task.labels_of(ans) == want
        # the prompt spells the values, item by item (label first with delim)
        text, w = task.render(p), 3 if task.fmt.delimiters else 2
        chunks = [text[i * w:(i + 1) * w] for i in range(n)]
        digits = [c[-2:][::-1] if task.fmt.reverse_operands else c[-2:] for c in chunks]
        assert [int(d) for d in digits] == vals
        if task.fmt.delimiters:
            assert [c[0] for c in chunks] == [chr(97 + i) for i in range(n)] and text[-1] == "="
        assert task.parse_problem(task.format_problem(x, n, 0)) == (x, n, 0)
    # malformed answers decode to None: repeated label, wrong count, a digit, too short
    bad = [[10] * n, [10 + i for i in range(n - 1)], [0] + [10 + i for i in range(n - 1)]]
    assert all(task.decode_answer(t) is None for t in bad)


def test_ties_sort_stably_like_python_sorted():
    t = get_task("sort3")
    cases = {"a:5,b:5,c:1": "cab", "a:12,b:7,c:30": "bac", "a:0,b:0,c:0": "abc",
             "a:9,b:10,c:9": "acb", "99,0,99": "bac"}
    for text, want in cases.items():
        a, b, op = t.parse_problem(text)
        assert t.labels_of(int(t.answer([a], [b], [op])[0])) == want
    t5 = get_task("sort5")
    a, b, op = t5.sample(3000, gen(3), "carry")
    ties, inv = t5.ties(a).tolist(), t5.carry_class(a, b, op).tolist()
    assert sum(x > 0 for x in ties) > 500  # carry mode really makes ties
    for x, ans, nt, ni in zip(a.tolist(), t5.answer(a, b, op).tolist(), ties, inv):
        v = py_values(t5, x)
        assert t5.labels_of(ans) == py_sorted_labels(v)
        pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
        assert nt == sum(v[i] == v[j] for i, j in pairs)
        assert ni == sum(v[i] > v[j] for i, j in pairs)


def test_parse_problem_errors():
    t = get_task("sort3")
    for bad, match in (("a:1,b:2", "3 comma-separated"), ("a:1,b:2,c:3,d:4", "3 comma"),
                       ("a:1,c:2,b:3", "in order"), ("a:1,b:200,c:3", "out of range"),
                       ("1+2", "cannot parse"), ("a:1,b:-2,c:3", "cannot parse")):
        with pytest.raises(ConfigError, match=match):
            t.parse_problem(bad)
    with pytest.raises(ConfigError, match="sort3 problems"):
        t.answer([5], [4], [0])  # b must be the item count


# ---------------------------------------------------------------- the holdout split


def test_holdout_split_is_deterministic_and_disjoint_from_training():
    t = get_task("sort4")
    x = torch.randint(0, t.n_problems, (200_000,), generator=gen(1))
    h = t.is_holdout(x, 4, 0)
    assert torch.equal(h, t.is_holdout(x.clone(), 4, 0))
    assert 0.05 < h.float().mean() < 0.075  # ~1/16
    edges = torch.tensor([e[0] for e in t.edge_cases()])
    assert bool(t.is_holdout(edges, 4, 0).all())
    for mode in ("uniform", "values", "carry"):
        for cap in (1, 2):
            a, b, op = t.sample(5000, gen(2), mode, cap, split="train")
            assert not bool(t.is_holdout(a, b, op).any())
            assert bool((t.values(a) < 10**cap).all())
            ha, hb, hop = t.sample(2000, gen(2), mode, cap, split="holdout")
            assert bool(t.is_holdout(ha, hb, hop).all()) and ha.unique().numel() == ha.numel()
    # the same generator seed gives the same holdout draw; exclude= is respected
    first = t.sample(3000, gen(5), "values", split="holdout")
    assert torch.equal(first[0], t.sample(3000, gen(5), "values", split="holdout")[0])
    rest = t.sample(3000, gen(6), "uniform", split="holdout", exclude=first)
    assert not bool(torch.isin(rest[0], first[0]).any())
    # a small side is listed exactly: sort2 with values 0..9 holds few problems
    t2 = get_task("sort2")
    every = t2.sample(10**6, gen(0), "values", 1, split="holdout")[0]
    grid = torch.tensor([i + 100 * j for i in range(10) for j in range(10)])
    assert set(every.tolist()) == set(grid[t2.is_holdout(grid, 2, 0)].tolist())


def test_enumerate_all_and_bad_sampling():
    a, b, op = get_task("sort2").enumerate_all()
    assert a.unique().numel() == 10**4 and bool((b == 2).all()) and bool((op == 0).all())
    with pytest.raises(ConfigError, match="10\\*\\*6"):
        get_task("sort4").enumerate_all()
    with pytest.raises(ConfigError, match="max_len"):
        get_task("sort3").sample(4, gen(), "uniform", 3)
    with pytest.raises(ConfigError, match="mode"):
        get_task("sort3").sample(4, gen(), "cascade")


# ---------------------------------------------------------------- verification suite


def test_suite_has_uniform_ties_sorted_and_reversed_cases(monkeypatch):
    from arithsweep.leaderboard.verify import build_suite

    t = get_task("sort4")
    # verification's own dispatch, at a test's size (the real suite is 1.13M problems)
    monkeypatch.setattr(st, "SUITE_RANDOM", 4000)
    monkeypatch.setattr(st, "SUITE_LENGTHS", 1000)
    monkeypatch.setattr(st, "SUITE_PER_KIND", 500)
    a, b, op, seed = build_suite(t)
    assert seed == st.SUITE_SEED and a.numel() == 4000 + 1000 + 3 * 500 + len(t.edge_cases())
    assert bool(t.is_holdout(a, b, op).all())  # nothing training may draw
    assert torch.equal(a, build_suite(t)[0])  # a fixed seed: the same suite every time
    inv = t.carry_class(a, b, op)
    # the uniform part is in every order alike: inversions of 4 random distinct values follow
    # the Mahonian counts 1, 3, 5, 6, 5, 3, 1 (of 24)
    freq = torch.bincount(inv[:4000], minlength=7).float() / 4000
    assert torch.allclose(freq, torch.tensor([1, 3, 5, 6, 5, 3, 1]) / 24, atol=0.03), freq
    kinds = a[5000:6500].view(3, 500)
    assert bool((t.ties(kinds[0]) > 0).all())
    assert bool((t.carry_class(kinds[1], 4, 0) == 0).all())
    assert bool((t.carry_class(kinds[2], 4, 0) == 6).all())  # strictly reversed
    assert set(e[0] for e in t.edge_cases()) <= set(a.tolist())
    # sort2/sort3 check every problem
    a3, _, _, seed3 = sort_suite(get_task("sort3"))
    assert a3.numel() == 10**6 and seed3 == 0
    # the breakdown verification prints does not trip over sort answers
    from arithsweep.core.evaluation.evaluate import breakdown

    parts = breakdown(torch.ones(a.numel(), dtype=torch.bool), t, a, b, op)
    assert set(parts["by_carry"]) == {f"S{i}" for i in range(7)}
    assert parts["by_answer_len"] == {"4": (a.numel(), a.numel())}


def test_adderboard_export_refuses_sort():
    from arithsweep.core.errors import ArithsweepError
    from arithsweep.leaderboard.adderboard import export_adderboard

    with pytest.raises(ArithsweepError, match=r"addition \(add10\) only"):
        export_adderboard({"id": 1, "task": "sort3"}, "x.py")


# ---------------------------------------------------------------- a model that learns it

SORT_MODEL = {"n_layers": 2, "d_model": 16, "n_heads": 2, "d_ff": 32}
# measured: 62% exact match after 100 steps, 72% after 200, 85% after 300 (on held-out problems)
SORT_TRAIN = {"steps": 200, "batch_size": 128, "lr": 1e-2, "warmup": 50, "seeds": 1,
              "eval_every": 100, "eval_size": 512, "early_stop": False}


@pytest.fixture(scope="module")
def sort_trained(tmp_path_factory):
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train

    task, m, t = build_configs("sort3", None, None, {**SORT_MODEL, **SORT_TRAIN})
    result = train(task, m, t)
    path = tmp_path_factory.mktemp("ckpt") / "sort3"
    result.save_best(path)
    return result, path


def test_tiny_model_learns_sort3(sort_trained):
    """Chance is 1/6 for three distinct values; 200 steps must do far better on held-out
    problems, and greedy decoding must agree with the teacher-forced fast path."""
    from arithsweep.core.evaluation.evaluate import exact_match, greedy_decode

    result, _ = sort_trained
    task = result.task
    model = result.best_model()
    a, b, op = task.sample(2000, gen(9), "values", split="holdout")
    ok = exact_match(model, task, a, b, op)[0]
    assert float(ok.float().mean()) > 0.5, float(ok.float().mean())
    got = greedy_decode(model, task, a[:300], b[:300], op[:300])
    truth = task.answer(a[:300], b[:300], op[:300]).tolist()
    assert [g == t for g, t in zip(got, truth)] == ok[:300].tolist()


def test_cli_train_verify_ask_sort(capsys, tmp_path, monkeypatch):
    """`arithsweep train --task sort4` then `arithsweep verify` on its checkpoint, in process
    so the suite can be sized down (sort3's suite is all 10^6 problems: ~40 s of forward
    passes on a loaded 2-core CPU even for a 4-wide model), then `ask` it."""
    from helpers import run

    code, out, err = run(capsys, "train", "--task", "sort4", "--steps", "20", "--seeds", "1",
                         "--layers", "1", "--d-model", "4", "--heads", "1", "--d-ff", "0",
                         "--out", tmp_path / "s4", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["task"] == "sort4" and (tmp_path / "s4" / "model.safetensors").is_file()

    monkeypatch.setattr(st, "SUITE_RANDOM", 3000)
    monkeypatch.setattr(st, "SUITE_LENGTHS", 1000)
    monkeypatch.setattr(st, "SUITE_PER_KIND", 300)
    code, out, err = run(capsys, "verify", tmp_path / "s4", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["task"] == "sort4" and rep["n_problems"] == 3000 + 1000 + 900 + 11
    assert rep["suite_seed"] == st.SUITE_SEED and rep["params"] == res["params"]
    assert set(rep["by_carry"]) == {f"S{i}" for i in range(7)}  # inversions 0..6
    # 20 steps do not sort: failures are listed, each problem in the task's own text form
    assert rep["failures"] and all(":" in f["problem"] for f in rep["failures"])
    assert all(f["expected"].isalpha() for f in rep["failures"])  # labels, e.g. dbac

    code, out, err = run(capsys, "ask", tmp_path / "s4", "a:12,b:7,c:30,d:1", "5,5,1,5", "--json")
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert [r["expected"] for r in rows] == ["dbac", "cabd"]  # labels, not packed 4213, 3124
    assert all(r["answer"] is None or isinstance(r["answer"], str) for r in rows)
    assert [r["problem"] for r in rows] == ["a:12,b:7,c:30,d:1", "a:5,b:5,c:1,d:5"]
    code, _, err = run(capsys, "ask", tmp_path / "s4", "a:1,b:2")
    assert code == 2 and "error:" in err and "Traceback" not in err


def test_random_problem_text_round_trip():
    t, rng = get_task("sort9"), random.Random(0)
    for _ in range(200):
        vals = [rng.randrange(100) for _ in range(9)]
        a, n, op = t.parse_problem(",".join(map(str, vals)))
        assert py_values(t, a) == vals and t.format_problem(a, n, op).count(":") == 9
