"""Length generalisation: abacus offsets, train_digits, the per-cell grid, `arithsweep ood` and
its sweep over a looped model's test-time recurrences (`--loops 1,2,4`).

    python -m pytest -q tests/test_ood.py -x
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import one_error_line, run, run_cli  # tests/ is on sys.path (rootdir import mode)

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.confirm import eval_problems
from arithsweep.core.evaluation.evaluate import exact_match, greedy_decode
from arithsweep.core.evaluation.ood import (
    cell_problems,
    generalises_to,
    loop_comparison,
    ood_grid,
    ood_loop_sweep,
    save_loop_curve,
    widen,
    with_loops,
)
from arithsweep.core.model.checkpoint import save_checkpoint
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.training.streams import _DataStream

FMT = "nopad,revops,revans"  # the paper's setting: reversed operands and answer, no padding


def _model(task, **kw) -> ArithTransformer:
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, pos="abacus",
                      abacus_max=12, d_model=8, n_heads=2, d_ff=16, **kw)
    return ArithTransformer(cfg, k=1, seeds=[0])


def test_abacus_offset_applies_in_train_mode_only():
    task = get_task("add3", FMT)
    tokens = task.encode(torch.tensor([5, 123]), torch.tensor([77, 4]), torch.tensor([0, 0]))[0]
    x = tokens[:, :-1]  # (B, T)
    model = _model(task, abacus_offset=6)
    model.eval()
    zero = torch.zeros(1, 2, dtype=torch.long)
    base = model(x)
    assert torch.equal(base, model(x, abacus_offset=zero))  # eval: offset 0
    model.train()
    outs = [model(x) for _ in range(4)]
    assert any(not torch.allclose(o, base) for o in outs)  # drawn offsets move the positions
    # an explicit offset k shifts every digit's index by k: the same as a table shifted by k
    model.eval()
    shifted = copy.deepcopy(model)
    with torch.no_grad():
        shifted.abacus.weight[0, 1:9] = model.abacus.weight[0, 4:12]  # non-digits keep row 0
    three = torch.full((1, 2), 3, dtype=torch.long)
    # the longest number has 4 digits: indices 1..4 + 3 = 4..7 stay inside the 12-row table
    assert torch.allclose(model(x, abacus_offset=three), shifted(x), atol=1e-5)
    assert not torch.allclose(model(x, abacus_offset=three), base)


def test_train_digits_caps_training_and_selection():
    task = get_task("add6", FMT)
    cfg = TrainConfig(train_digits=3, seeds=2, batch_size=64)
    stream = _DataStream(task, cfg, torch.device("cpu"))
    tokens, mask = stream.next(0)  # (K, B, T), (K, B, T-1)
    # nopad: a prompt of two <= 3-digit numbers, '+' and '=' is at most 8 tokens long
    eq = task.token_id["="]
    assert int((tokens == eq).float().argmax(-1).max()) <= 3 + 1 + 3
    a, b, _ = eval_problems(task, 500, max_len=3)
    assert int(a.max()) < 1000 and int(b.max()) < 1000
    assert int(eval_problems(task, 500)[0].max()) >= 1000  # uncapped reaches long operands
    with pytest.raises(ConfigError, match="train_digits"):
        _DataStream(task, replace(cfg, train_digits=7), torch.device("cpu")).next(0)
    with pytest.raises(ConfigError, match="train_digits"):
        TrainConfig(train_digits=0)


@pytest.mark.parametrize("da,db", [(1, 1), (2, 3), (5, 4), (6, 6)])
def test_cell_sampler_puts_distinct_held_out_problems_in_their_cell(da, db):
    wide, trained = get_task("add6", FMT), get_task("add3", FMT)
    a, b, op = cell_problems(wide, da, db, 300, torch.Generator().manual_seed(1), trained)
    la, lb = wide.operand_lengths(a, b)
    assert a.numel() > 0 and bool((la == da).all()) and bool((lb == db).all())
    assert bool(wide.is_holdout(a, b, op).all())
    assert len(set(zip(a.tolist(), b.tolist()))) == a.numel()  # distinct
    if da * db >= 6:  # big cells give the full count; 1x1 has only its few held-out problems
        assert a.numel() == 300
    else:
        assert a.numel() < 30


def test_grid_shape_and_in_distribution_square():
    task = get_task("add2", FMT)
    model = _model(task)
    g = ood_grid(model, 4, per_cell=20, seed=3, task=task)
    assert (g.task, g.trained_task, g.train_digits, g.max_digits) == ("add4", "add2", 2, 4)
    assert len(g.exact_match) == 4 and all(len(r) == 4 for r in g.exact_match)
    assert g.in_distribution == [[i < 2 and j < 2 for j in range(4)] for i in range(4)]
    assert g.problems[3][3] == 20 and 0 < g.problems[0][0] < 20
    assert all(e is None or 0 <= e <= 1 for r in g.exact_match for e in r)
    assert g.ratio == g.generalises_to / 2
    for d in range(1, 5):  # by_length pools the ring of cells whose longer operand has d digits
        ring = [(i, j) for i in range(d) for j in range(d) if max(i, j) == d - 1]
        hits = sum(g.exact_match[i][j] * g.problems[i][j] for i, j in ring)
        assert g.by_length[d - 1] == pytest.approx(hits / sum(g.problems[i][j] for i, j in ring))
    again = ood_grid(model, 4, per_cell=20, seed=3, task=task)
    assert again.exact_match == g.exact_match  # a fixed seed is a fixed sample


def test_generalisation_length_is_the_first_break_below_90_percent():
    assert generalises_to([1.0, 0.95, None, 0.97, 0.5, 0.99]) == 4
    assert generalises_to([0.89, 1.0]) == 0
    assert generalises_to([0.9, 0.9]) == 2


def test_loops_override_changes_n_loops_only():
    task = get_task("add3", FMT)
    model = _model(task, n_loops=2)
    more = with_loops(model, 5)
    assert more.cfg == replace(model.cfg, n_loops=5)
    for (n, p), (m, q) in zip(model.named_parameters(), more.named_parameters(), strict=True):
        assert n == m and torch.equal(p, q)
    x = task.encode(torch.tensor([12]), torch.tensor([34]), torch.tensor([0]))[0][:, :-1]
    assert not torch.allclose(model.eval()(x), more(x))  # three more passes of the blocks
    assert with_loops(model, None) is model
    with pytest.raises(ConfigError, match="loops"):
        with_loops(model, 0)
    g = ood_grid(model, 3, loops=4, per_cell=5, task=task)
    assert (g.loops, g.trained_loops) == (4, 2)


def test_widen_refuses_learned_positions_past_their_table():
    task = get_task("add2", FMT)
    learned = ArithTransformer(ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx), k=1)
    with pytest.raises(ConfigError, match="learned positions"):
        widen(learned, task, 5)
    assert widen(learned, task, 2)[1] is task
    with pytest.raises(ConfigError, match="max_digits"):
        widen(_model(task), task, 19)
    m, wide = widen(_model(task), task, 6)
    assert wide.name == "add6" and m.cfg.n_ctx == wide.n_ctx


def test_abacus_rope_widens_with_its_weights_and_no_table(tmp_path):
    """abacus_rope has no position table: widening only grows the context, the add3 problems
    score the same in it, and the grid never reports a clamped table."""
    task = get_task("add3", FMT)
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, pos="abacus_rope",
                      abacus_max=16, rope_base=1.0, d_model=8, n_heads=2, d_ff=16)
    model = ArithTransformer(cfg, k=1, seeds=[0]).eval()
    wide_model, wide = widen(model, task, 9)
    assert wide.name == "add9" and wide_model.cfg.n_ctx == wide.n_ctx > cfg.n_ctx
    x = task.encode(torch.tensor([5, 123]), torch.tensor([77, 4]), torch.tensor([0, 0]))[0]
    with torch.no_grad():
        torch.testing.assert_close(wide_model(x[:, :-1]), model(x[:, :-1]))
    save_checkpoint(tmp_path / "ck", model, task)
    g = ood_grid(tmp_path / "ck", 5, per_cell=10, seed=1)
    assert g.max_digits == 5 and g.clamped_from is None and len(g.by_length) == 5


def test_cli_bad_max_digits_is_one_line_and_exit_2(capsys, tmp_path):
    task = get_task("add2", FMT)
    save_checkpoint(tmp_path / "ck", _model(task), task)
    for bad in ("0", "40"):
        code, out, err = run(capsys, "ood", tmp_path / "ck", "--max-digits", bad)
        assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
        assert "max" in err and "Traceback" not in err
    code, _, err = run(capsys, "ood", tmp_path / "nothing-here", "--db", tmp_path / "lb.db")
    assert code == 2 and "neither a checkpoint" in err and len(err.strip().splitlines()) == 1


def test_abacus_model_trained_on_two_digits_runs_on_a_four_digit_grid(capsys, tmp_path):
    """End to end: train on add2 lengths inside an add3 task (train_digits), save, then
    `arithsweep ood` on a 4 x 4 grid with a PNG. A short run on purpose (the CPU is shared):
    this checks the plumbing; how well a longer run generalises is for `arithsweep ood`."""
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train

    task, m, t = build_configs("add3", FMT, None, dict(
        pos="abacus", abacus_max=8, abacus_offset=2, d_model=16, n_heads=2, d_ff=32,
        steps=20, seeds=1, lr=1e-2, train_digits=2, eval_every=20, eval_size=256,
        early_stop=False))
    result = train(task, m, t)
    result.save_best(tmp_path / "ck")
    png = tmp_path / "ood.png"
    code, out, err = run(capsys, "ood", tmp_path / "ck", "--max-digits", "4", "--per-cell",
                         "30", "--seed", "5", "--png", png, "--json")
    assert code == 0, err
    g = json.loads(out)
    # train_digits comes from the checkpoint's train config; the add3 model runs as add4
    assert (g["task"], g["trained_task"], g["train_digits"], g["max_digits"]) == \
        ("add4", "add3", 2, 4)
    assert g["in_distribution"][1][1] and not g["in_distribution"][1][2]
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    # the CLI reports what the Python API computes on the same sample
    api = ood_grid(tmp_path / "ck", 4, per_cell=30, seed=5)
    assert api.exact_match == g["exact_match"] and api.problems == g["problems"]
    # and that is the model's teacher-forced exact match on those very problems
    wide = get_task("add4", FMT)
    model, _ = widen(result.best_model(), task, 4)
    a, b, op = cell_problems(wide, 2, 2, 30, torch.Generator().manual_seed(0), task)
    got = greedy_decode(model, wide, a, b, op)
    greedy = sum(x == y for x, y in zip(got, wide.answer(a, b, op).tolist())) / a.numel()
    assert abs(float(exact_match(model, wide, a, b, op).float().mean()) - greedy) < 1e-9
    code, out, _ = run(capsys, "ood", tmp_path / "ck", "--max-digits", "3", "--per-cell", "20")
    assert code == 0 and "ratio" in out and "add3 -> add3" in out


def test_ood_refuses_a_task_without_operand_lengths():
    task = get_task("sort3")
    model = ArithTransformer(ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx,
                                         pos="abacus"))
    with pytest.raises(ConfigError, match="no operand lengths"):
        widen(model, task, 4)


@pytest.fixture(scope="module")
def looped(tmp_path_factory):
    """A tiny looped abacus checkpoint (2 loops, input injection) after a few steps on add2
    lengths of add3: the sweep tests check structure and consistency, not accuracy."""
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train

    task, m, t = build_configs("add3", FMT, None, dict(
        pos="abacus", abacus_max=8, d_model=16, n_heads=2, d_ff=32, n_loops=2,
        input_injection=True, steps=200, seeds=1, lr=1e-2, train_digits=2, eval_every=200,
        eval_size=256, early_stop=False))
    path = tmp_path_factory.mktemp("looped") / "ck"
    train(task, m, t).save_best(path)
    return path


def test_loop_sweep_is_one_grid_per_count_on_the_same_problems(looped):
    grids = ood_loop_sweep(looped, 4, [1, 2, 3], per_cell=20, seed=7)
    assert [g.loops for g in grids] == [1, 2, 3] and {g.trained_loops for g in grids} == {2}
    assert all(g.problems == grids[0].problems for g in grids)  # one seed, one sample
    # the trained loop count's grid is the single grid, at loops=2 and as trained
    single = ood_grid(looped, 4, loops=2, per_cell=20, seed=7)
    assert grids[1].to_dict() == single.to_dict()
    assert ood_grid(looped, 4, per_cell=20, seed=7).to_dict() == single.to_dict()
    assert grids[2].to_dict() == ood_grid(looped, 4, loops=3, per_cell=20, seed=7).to_dict()
    comp = loop_comparison(grids)
    assert [(c["loops"], c["trained"]) for c in comp] == [(1, False), (2, True), (3, False)]
    assert comp[1]["diagonal"] == [single.exact_match[i][i] for i in range(4)]
    assert [(c["ratio"], c["generalises_to"]) for c in comp] == \
        [(g.ratio, g.generalises_to) for g in grids]
    with pytest.raises(ConfigError, match="twice"):
        ood_loop_sweep(looped, 4, [2, 2])
    with pytest.raises(ConfigError, match=">= 1"):
        ood_loop_sweep(looped, 4, [1, 0])
    with pytest.raises(ConfigError, match="at least one"):
        ood_loop_sweep(looped, 4, [])


def test_cli_loop_sweep_json_table_and_curve(capsys, tmp_path, looped):
    args = ("ood", looped, "--max-digits", "3", "--per-cell", "20", "--seed", "7")
    code, out, err = run(capsys, *args, "--loops", "1,2", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert (got["trained_loops"], got["train_digits"], got["max_digits"]) == (2, 2, 3)
    assert [x["loops"] for x in got["loops"]] == [1, 2]
    api = ood_loop_sweep(looped, 3, [1, 2], per_cell=20, seed=7)  # the CLI reports the API
    assert got["loops"] == [g.to_dict() for g in api]
    assert got["comparison"] == loop_comparison(api)
    # one value keeps the single grid's output
    code, out, err = run(capsys, *args, "--loops", "2", "--json")
    assert code == 0, err
    one = json.loads(out)
    assert "comparison" not in one and one["exact_match"] == api[1].exact_match
    code, out, err = run(capsys, *args, "--loops", "1, 2")
    assert code == 0, err
    assert "2 (trained)" in out and "ratio" in out and "1:" in out
    png = tmp_path / "curves" / "loops.png"
    code, out, err = run(capsys, *args, "--loops", "1,2,4", "--png", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "loop curve" in out
    assert save_loop_curve(api, tmp_path / "api.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_loops_are_one_error_line(tmp_path, looped):
    for bad, word in [("0", ">= 1"), ("-2", ">= 1"), ("two", "'two'"), ("1,,2", "empty"),
                      ("", "empty"), ("2,2", "twice")]:
        one_error_line(run_cli("ood", str(looped), "--loops", bad), "--loops", word)
    task = get_task("add2", FMT)
    save_checkpoint(tmp_path / "flat", _model(task), task)  # n_loops=1
    one_error_line(run_cli("ood", str(tmp_path / "flat"), "--loops", "1,2"), "does not loop")


def test_a_padded_rope_model_is_scored_as_trained_inside_its_lengths():
    """The published add10 rope adder writes operands at width 10 and reaches them at a fixed
    distance; widened to 11 digits every position moves. Its trained lengths must still read
    as the ~100% they are (they read 0 when every cell was encoded at the wider width)."""
    ck = Path(__file__).parent.parent / "leaderboard" / "checkpoints" / "add10-56-e8f443c8"
    g = ood_grid(str(ck), 11, per_cell=20)
    assert g.task == "add11" and g.trained_task == "add10"
    assert all(e is not None and e >= 0.9 for e in g.by_length[:10]), g.by_length
    assert g.generalises_to == 10 and g.ratio == 1.0
    assert g.by_length[10] is not None and g.by_length[10] < 0.9  # past it: the new layout
