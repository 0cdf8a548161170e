"""Tests for arithsweep.core.data.tasks: encoding round trips, carry classes, holdout split,
sampling."""

import random

import pytest
import torch

from arithsweep.core.data.tasks import Format, get_task, parse_format, task_names_help
from arithsweep.core.errors import ConfigError

FORMATS = [None, "nopad", "fwdans", "revops,nodelim", "nopad,fwdans,revops", "fwdans,nodelim"]
TASKS = ["add3", "sub3", "mix3", "mul3", "add18", "sub18", "mix18", "mul9", "add1", "mix1"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def ref_cascade(a, b, op, n):
    """Plain-Python longest carry/borrow run, digit by digit."""
    if op == 2:
        cols = [0] * (2 * n - 1)
        for i in range(n):
            for j in range(n):
                cols[i + j] += (a // 10**i % 10) * (b // 10**j % 10)
    else:
        x, y = (a, b) if op == 0 or a >= b else (b, a)
        sign = 1 if op == 0 else -1
        cols = [x // 10**i % 10 + sign * (y // 10**i % 10) for i in range(n)]
    carry = run = best = 0
    for c in cols:
        carry = int(c - carry < 0) if op == 1 else (c + carry) // 10
        run = run + 1 if carry else 0
        best = max(best, run)
    return best


def ref_holdout(a, b, op):
    """Keyed word sum folded to 32 bits, then murmur3's fmix32, in plain Python ints."""
    m = 0xFFFFFFFF
    keys = (0x9E3779B, 0x7F4A7C1, 0x5BD1E99, 0x27D4EB3, 0x165667B)
    s = sum(w * k for w, k in zip((a & m, a >> 32, b & m, b >> 32, op), keys, strict=True))
    assert s < 2**63
    h = (s & m) ^ (s >> 32)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return h & 15 == 0


def test_vocab_is_minimal_and_digits_first():
    assert get_task("add3").vocab == tuple("0123456789") + ("+", "=")
    assert get_task("add3").vocab_size == 12
    assert get_task("sub3", "nodelim").vocab == tuple("0123456789") + ("-",)
    assert get_task("mix3").vocab[10:] == ("+", "-", "=")
    assert get_task("mix3", "nodelim").vocab[10:] == ("+", "-")
    assert get_task("mul2").vocab[10:] == ("*", "=")
    assert get_task("add3", "pad,nodelim").vocab_size == 10
    assert get_task("add3", "nopad").vocab[10:] == ("+", "=", "<eos>", "<pad>")


def test_lengths_and_sizes():
    t = get_task("add10")
    assert (t.prompt_len, t.answer_len, t.seq_len, t.n_ctx) == (22, 11, 33, 32)
    assert (get_task("sub4").answer_len, get_task("mix4").answer_len) == (5, 6)
    assert get_task("mul3").answer_len == 6
    assert get_task("add3", "nopad").answer_len == 5
    assert get_task("add3").n_problems == 10**6
    assert get_task("mix3").n_problems == 2 * 10**6
    assert [get_task(n).n_carry_classes for n in ("add3", "sub3", "mix3", "mul3")] == [4, 3, 4, 6]


def test_literal_examples_from_the_docstring():
    assert get_task("add10").example() == "0000000042+0000000007=  ->  94000000000"
    assert get_task("sub4").example() == "0007-0042=  ->  -5300"
    assert get_task("mix4").example() == "0007-0042=  ->  -53000"
    assert get_task("mul3").example() == "042*007=  ->  492000"
    assert get_task("add3", "nopad").example() == "42+7=  ->  94<eos>"
    assert get_task("add3", "revops").example() == "240+700=  ->  9400"


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_decode_round_trip(name, fmt):
    task = get_task(name, fmt)
    a1, b1, op1 = task.sample(150, gen(1))
    a2, b2, op2 = task.sample(150, gen(2), mode="carry")
    edge_a = torch.tensor([0, 10**task.n_digits - 1, 10**task.n_digits - 1])
    edge_b = torch.tensor([0, 10**task.n_digits - 1, 0])
    a, b = torch.cat([a1, a2, edge_a]), torch.cat([b1, b2, edge_b])
    op = torch.cat([op1, op2, torch.full((3,), task.op_codes[-1])])
    tokens, mask = task.encode(a, b, op)
    assert tokens.shape == (len(a), task.seq_len) and mask.shape == (len(a), task.seq_len - 1)
    assert int(tokens.max()) < task.vocab_size and int(tokens.min()) >= 0
    truth = task.answer(a, b, op).tolist()
    prompts = task.encode_prompt(a, b, op)
    targets = tokens[:, 1:]
    for i in range(len(a)):
        answer = targets[i][mask[i]].tolist()
        assert task.decode_answer(answer) == truth[i]
        assert tokens[i].tolist()[: len(prompts[i]) + len(answer)] == prompts[i] + answer
        assert len(prompts[i]) <= task.prompt_len and len(answer) <= task.answer_len
        if task.fmt.pad:
            assert len(prompts[i]) == task.prompt_len and len(answer) == task.answer_len
        else:  # everything after the answer is padding, and padding is never a target
            rest = tokens[i, len(prompts[i]) + len(answer):]
            assert bool((rest == task.token_id["<pad>"]).all())


def test_prompts_read_as_the_problem():
    t = get_task("mix3", "nopad,fwdans")
    a, b = torch.tensor([42, 7, 0, 500]), torch.tensor([7, 42, 0, 5])
    op = torch.tensor([0, 1, 1, 1])
    tokens, mask = t.encode(a, b, op)
    rows = [t.render(p) for p in t.encode_prompt(a, b, op)]
    assert rows == ["42+7=", "7-42=", "0-0=", "500-5="]
    answers = [t.render(tokens[i, 1:][mask[i]].tolist()) for i in range(4)]
    assert answers == ["049<eos>", "-35<eos>", "00<eos>", "0495<eos>"]
    p = get_task("sub3", "fwdans,nodelim")
    tokens, _ = p.encode(torch.tensor([7]), torch.tensor([42]), 1)
    assert p.render(tokens[0].tolist()) == "007042-035"


def test_decode_rejects_malformed_answers():
    add = get_task("add3")
    assert add.decode_answer([4, 9, 0, 0]) == 94
    assert add.decode_answer([4, 9, 0]) is None  # too short
    assert add.decode_answer([4, 9, 0, 10]) is None  # '+' is not a digit
    sub = get_task("sub3")
    minus = sub.token_id["-"]
    assert sub.decode_answer([minus, 5, 3, 0]) == -35
    assert sub.decode_answer([0, 5, 3, 0]) == 35
    assert sub.decode_answer([minus, 0, 0, 0]) is None  # "-0" is never written
    assert sub.decode_answer([5, 5, 3, 0]) is None  # no sign
    nopad = get_task("add3", "nopad")
    eos = nopad.token_id["<eos>"]
    assert nopad.decode_answer([4, 9, eos, 3]) == 94
    assert nopad.decode_answer([4, 9]) is None  # no <eos>
    assert nopad.decode_answer([4, 0, eos]) is None  # leading zero (reversed)
    assert nopad.decode_answer([eos]) is None


def test_carry_class_hand_cases():
    add = get_task("add3")
    a, b = torch.tensor([999, 123, 15, 0, 95, 909]), torch.tensor([1, 456, 5, 0, 5, 91])
    assert add.carry_class(a, b, 0).tolist() == [3, 0, 1, 0, 2, 3]
    sub = get_task("sub4")
    a, b = torch.tensor([100, 1, 1000, 52, 57, 7, 1010]), torch.tensor([1, 100, 1, 7, 2, 7, 1])
    assert sub.carry_class(a, b, 1).tolist() == [2, 2, 3, 1, 0, 0, 1]
    assert get_task("mul1").carry_class(torch.tensor([3, 9]), torch.tensor([3, 9]), 2).tolist() \
        == [0, 1]


@pytest.mark.parametrize("name", ["add6", "sub6", "mix6", "mul3", "mix18", "mul9"])
def test_carry_class_matches_python_reference(name):
    task = get_task(name)
    a, b, op = (torch.cat(x) for x in zip(task.sample(300, gen(3)),
                                          task.sample(300, gen(4), mode="carry"), strict=True))
    got = task.carry_class(a, b, op)
    want = [ref_cascade(x, y, o, task.n_digits) for x, y, o in zip(a.tolist(), b.tolist(),
                                                                    op.tolist(), strict=True)]
    assert got.tolist() == want
    assert int(got.max()) < task.n_carry_classes


def test_holdout_hash_matches_python_reference_and_rate():
    rng = random.Random(0)
    t = get_task("mix18")
    a = [rng.randrange(10**rng.randint(1, 18)) for _ in range(3000)] + [0, 10**18 - 1]
    b = [rng.randrange(10**rng.randint(1, 18)) for _ in range(3000)] + [0, 10**18 - 1]
    op = [rng.randrange(2) for _ in range(3002)]
    got = t.is_holdout(torch.tensor(a), torch.tensor(b), torch.tensor(op)).tolist()
    edges = set(t.edge_cases())  # held out whatever their hash (10**18-1 twice is one)
    assert got == [ref_holdout(x, y, o) or (x, y, o) in edges
                   for x, y, o in zip(a, b, op, strict=True)]
    a, b, op = get_task("mix2").enumerate_all()
    rate = get_task("mix2").is_holdout(a, b, op).float().mean().item()
    assert 0.05 < rate < 0.075


def test_train_and_holdout_samples_are_disjoint():
    task = get_task("add2")
    a, b, op = task.enumerate_all()
    hold = task.is_holdout(a, b, op)
    hold_set = set((a[hold] * 100 + b[hold]).tolist())
    tr = task.sample(4000, gen(5))
    ho = task.sample(4000, gen(5), split="holdout")
    assert not bool(task.is_holdout(*tr).any()) and bool(task.is_holdout(*ho).all())
    assert set((ho[0] * 100 + ho[1]).tolist()) <= hold_set
    assert not set((tr[0] * 100 + tr[1]).tolist()) & hold_set
    for mode in ("uniform", "carry"):  # the big-task path too, and carry mode
        big = get_task("mix10")
        assert bool(big.is_holdout(*big.sample(500, gen(6), mode=mode, split="holdout")).all())
        assert not bool(big.is_holdout(*big.sample(500, gen(6), mode=mode)).any())


def rows(a, b, op):
    return list(zip(a.tolist(), b.tolist(), op.tolist(), strict=True))


@pytest.mark.parametrize("name,n,mode", [("add10", 20_000, "uniform"), ("mix4", 3000, "values"),
                                         ("add3", 3000, "carry"), ("sub2", 300, "uniform")])
def test_holdout_samples_are_distinct(name, n, mode):
    # before the fix, draws were with replacement: 20k uniform add10 draws repeat the few
    # held-out problems with two 1-digit operands hundreds of times
    task = get_task(name)
    a, b, op = task.sample(n, gen(12), mode, split="holdout")
    assert len(set(rows(a, b, op))) == a.numel() == n
    assert bool(task.is_holdout(a, b, op).all())
    again = task.sample(n, gen(12), mode, split="holdout")
    assert all(torch.equal(x, y) for x, y in zip((a, b, op), again, strict=True))


def test_holdout_sample_takes_all_when_short_and_honours_exclude():
    task = get_task("add2")
    every = task.enumerate_all()
    held = set(rows(*(x[task.is_holdout(*every)] for x in every)))
    allof = task.sample(10_000, gen(13), "values", split="holdout")
    assert sorted(rows(*allof)) == sorted(held)  # fewer than asked: each held-out one once
    first = task.sample(500, gen(14), "values", split="holdout")
    rest = task.sample(500, gen(14), "uniform", split="holdout", exclude=first)
    assert rest[0].numel() == len(held) - 500 and not set(rows(*first)) & set(rows(*rest))
    near = task.sample(len(held) - 3, gen(15), "carry", split="holdout")  # carry runs dry
    assert len(set(rows(*near))) == near[0].numel() == len(held) - 3
    with pytest.raises(ConfigError, match="holdout"):
        task.sample(5, gen(), exclude=first)


def test_sample_is_deterministic_and_respects_max_len():
    task = get_task("add6")
    a, b, op = task.sample(6000, gen(7), max_len=3)
    assert all(torch.equal(x, y) for x, y in zip((a, b, op), task.sample(6000, gen(7), max_len=3),
                                                 strict=True))
    la, lb = task.operand_lengths(a, b)
    counts = torch.bincount(la, minlength=7).tolist()
    assert counts[0] == 0 and counts[4:] == [0, 0, 0] and min(counts[1:4]) > 1700
    assert int(lb.max()) == 3 and bool((op == 0).all())
    la, _ = task.operand_lengths(*task.sample(6000, gen(8))[:2])
    assert min(torch.bincount(la, minlength=7).tolist()[1:]) > 800
    for mode in ("uniform", "carry"):
        for name in ("add10", "sub10", "mix10"):
            t = get_task(name)
            a, b, _ = t.sample(2000, gen(9), mode=mode, max_len=4)
            assert max(t.operand_lengths(a, b)[0].max(), t.operand_lengths(a, b)[1].max()) <= 4
            assert int(a.min()) >= 0 and int(b.min()) >= 0
    mix = get_task("mix3").sample(2000, gen(10))[2]
    assert 800 < int((mix == 1).sum()) < 1200


@pytest.mark.parametrize("name", ["add10", "sub10", "mix10"])
def test_carry_mode_gives_long_cascades(name):
    task = get_task(name)
    uniform = task.carry_class(*task.sample(4000, gen(11)))
    carry = task.carry_class(*task.sample(4000, gen(11), mode="carry"))
    assert (carry >= 5).float().mean() > 5 * (uniform >= 5).float().mean() + 0.05
    assert (carry >= 1).float().mean() > 0.9
    assert int(carry.max()) >= task.n_carry_classes - 2


def test_enumerate_all():
    a, b, op = get_task("add2").enumerate_all()
    assert len(a) == 10**4 and len(set((a * 100 + b).tolist())) == 10**4
    a, b, op = get_task("mix1").enumerate_all()
    assert len(a) == 200 and len(set((a * 1000 + b * 10 + op).tolist())) == 200
    assert sorted(set(op.tolist())) == [0, 1]
    with pytest.raises(ConfigError, match="10\\*\\*6"):
        get_task("add10").enumerate_all()


def test_formats_and_names():
    assert Format().name == "pad,revans,fwdops,delim"
    assert parse_format(None) == parse_format("") == Format()
    assert parse_format(" nopad, fwdans ").name == "nopad,fwdans,fwdops,delim"
    assert get_task("add10", "revops").fmt.name == "pad,revans,revops,delim"
    assert get_task(" ADD10 ").name == "add10" and get_task("mul9").n_digits == 9
    with pytest.raises(ConfigError, match="pad\\|nopad, revans\\|fwdans"):
        parse_format("pad,reverse")
    with pytest.raises(ConfigError, match="ambiguous"):
        parse_format("nopad,nodelim")
    with pytest.raises(ConfigError, match="both ways"):
        parse_format("pad,nopad")
    for bad in ("foo", "add0", "add19", "mul10", "div3", "add"):
        with pytest.raises(ConfigError, match=r"add<N>, sub<N>, mix<N> \(N = 1..18\) or mul<N>"):
            get_task(bad)
    assert "nodelim" in task_names_help() and "mul<N>" in task_names_help()


def test_parse_and_format_problem():
    mix = get_task("mix3")
    assert mix.parse_problem("123+456") == (123, 456, 0)
    assert mix.parse_problem(" 12 - 40 ") == (12, 40, 1)
    assert get_task("mul1").parse_problem("7*8") == (7, 8, 2)
    assert mix.format_problem(12, 40, 1) == "12-40"
    for bad, why in [("12+", "cannot parse"), ("1+2+3", "cannot parse"), ("7*8", "operator"),
                     ("1000+1", "out of range"), ("-5+3", "out of range"), ("abc", "parse")]:
        with pytest.raises(ConfigError, match=why):
            mix.parse_problem(bad)
    with pytest.raises(ConfigError, match="A\\+B"):
        get_task("add2").parse_problem("5-3")


def test_bad_arguments_are_config_errors():
    task = get_task("add3")
    with pytest.raises(ConfigError, match="uniform\\|values\\|carry"):
        task.sample(4, gen(), mode="nines")
    with pytest.raises(ConfigError, match="train\\|holdout"):
        task.sample(4, gen(), split="test")
    with pytest.raises(ConfigError, match="1..3"):
        task.sample(4, gen(), max_len=4)
    with pytest.raises(ConfigError, match="0..999"):
        task.encode(torch.tensor([1000]), torch.tensor([1]), 0)
    with pytest.raises(ConfigError, match="op codes"):
        task.encode(torch.tensor([1]), torch.tensor([1]), 1)
    assert [x.numel() for x in task.sample(0, gen())] == [0, 0, 0]


@pytest.mark.parametrize("name", ["add10", "add3", "sub6", "mix4", "mul3"])
def test_verification_edge_cases_are_never_drawn_for_training(name):
    # before the fix, 10 of the 11 add10 edge cases hashed to the training side
    task = get_task(name)
    edges = torch.tensor(task.edge_cases())
    assert bool(task.is_holdout(edges[:, 0], edges[:, 1], edges[:, 2]).all())
    # a train sample restricted to 1-digit operands hits (0,0), (1,1) etc. if they were allowed
    gen = torch.Generator().manual_seed(0)
    a, b, op = task.sample(20_000, gen, "uniform", max_len=1, split="train")
    drawn = set(zip(a.tolist(), b.tolist(), op.tolist()))
    assert not drawn & set(task.edge_cases())


def test_a_task_is_built_once_per_name_and_format():
    """get_task hands every caller in a process the one Task of a name and format (tasks are
    frozen), however the format is spelled; another format is another task."""
    t = get_task("add3")
    assert get_task("add3", None) is t and get_task("add3", Format()) is t
    assert get_task("add3", Format().name) is t
    other = get_task("add3", "fwdans")
    assert other is not t and other.fmt != t.fmt
    assert get_task("sort3") is get_task("sort3")
    with pytest.raises(ConfigError, match="unknown task 'add99'"):
        get_task("add99")


def test_trial_builds_share_the_task_and_copy_the_model():
    from arithsweep.search.trials.configs import _task_and_model

    model = {"d_model": 8, "n_heads": 2, "d_ff": 16}
    t1, m1 = _task_and_model("add2", model, {})
    t2, m2 = _task_and_model("add2", dict(model), {})
    assert t1 is t2 is get_task("add2")
    assert m1 == m2 and m1 is not m2  # a caller may change its ModelConfig
    m1.d_model = 4
    assert _task_and_model("add2", model, {})[1].d_model == 8
