"""The hash sampler's C rows (core/data/native_rows.py) give the torch ops' integers exactly:
candidates of the uniform and value modes, the holdout test with its edge cases, a pad
format's digits, and so whole training batches, for several tasks, caps and formats.

    .venv/bin/python -m pytest tests/test_native_rows.py -q
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.data import hash_sampling as HS
from arithsweep.core.data import native_rows
from arithsweep.core.data.tasks import get_task

pytestmark = pytest.mark.skipif(native_rows.available() is not None,
                                reason=f"C rows unavailable: {native_rows.available()}")


def _torch(monkeypatch, fn):
    """fn() with the C rows switched off."""
    with monkeypatch.context() as m:
        m.setenv(native_rows.OFF_ENV, "0")
        assert not native_rows.usable(torch.zeros(1))
        return fn()


@pytest.mark.parametrize("name", ["add3", "add10", "sub6", "mul4", "mix6", "add18"])
@pytest.mark.parametrize("mode", native_rows.MODES)
def test_candidates_are_the_torch_rows(monkeypatch, name, mode):
    task = get_task(name)
    g = torch.Generator().manual_seed(7)
    n = 4000
    key = torch.randint(0, 2**32, (n,), generator=g)
    cap = torch.randint(1, task.n_digits + 1, (n,), generator=g)
    op = torch.full((n,), task.op_codes[0])

    def rows():
        return HS._mode_pair(mode, HS._Words(key), cap, op, task)

    c, t = rows(), _torch(monkeypatch, rows)
    assert torch.equal(c[0], t[0]) and torch.equal(c[1], t[1])
    assert int((c[0] > 0).sum()) > n // 2  # real draws, not zeros


@pytest.mark.parametrize("name", ["add3", "add10", "sub6", "mix6"])
def test_the_holdout_test_is_the_torch_one(monkeypatch, name):
    task = get_task(name)
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randint(0, 10**task.n_digits, (20000,), generator=g) for _ in range(2))
    codes = torch.tensor(task.op_codes)
    op = codes[torch.randint(0, len(codes), (20000,), generator=g)]
    edges = torch.tensor(task.edge_cases())  # every edge case is held out, by either
    a, b, op = (torch.cat((x, edges[:, i])) for i, x in enumerate((a, b, op)))
    c, t = task._held(a, b, op), _torch(monkeypatch, lambda: task._held(a, b, op))
    assert c.dtype == t.dtype == torch.bool and torch.equal(c, t)
    assert bool(c[-len(edges):].all()) and 0.03 < float(c[:-len(edges)].float().mean()) < 0.1


@pytest.mark.parametrize("fmt", [None, "pad,revans,revops,delim,zeros", "pad,revans"])
def test_digits_of_a_pad_format_are_the_torch_ones(monkeypatch, fmt):
    task = get_task("add10", fmt)
    a, b, op = task.sample(3000, torch.Generator().manual_seed(1), "uniform", None)

    def enc():
        return task.encode(a, b, op, dtype=torch.uint8)

    (ct, cm), (tt, tm) = enc(), _torch(monkeypatch, enc)
    assert torch.equal(ct, tt) and torch.equal(cm, tm)


@pytest.mark.parametrize("sampling, extra", [
    ("values", {"values_lengths": "shared", "curriculum": [[3, 3], [6, 6]]}),
    ("uniform", {}),
    ("mixed", {"curriculum": [[4, 2]]}),
])
def test_training_batches_are_the_same(monkeypatch, sampling, extra):
    task = get_task("add10", "pad,revans,revops,delim,zeros")
    cfg = replace(TrainConfig(seeds=3, batch_size=48), sampling=sampling, **extra)
    steps = list(range(0, 10))

    def batches():
        return HS.HashSampler(task, cfg).batches([5, 6, 7], steps)

    (ct, cm), (tt, tm) = batches(), _torch(monkeypatch, batches)
    assert torch.equal(ct, tt) and torch.equal(cm, tm)


@pytest.mark.parametrize("name", ["add3", "add10"])
def test_one_pass_pick_is_the_candidate_by_candidate_rows(name):
    """rows_pick (every candidate drawn and tested in one C pass) against _candidates (the
    same rows op by op): the same operands, and the same rows left to the fallback pool (all R
    candidates held out: ~15 in these 10^6 rows, more at cap 1)."""
    task = get_task(name)
    hs = HS.HashSampler(task, TrainConfig(seeds=1, batch_size=128, sampling="values"))
    g = torch.Generator().manual_seed(11)
    B, R = 128, HS.CANDIDATES
    k = HS.step_keys(torch.arange(8), torch.arange(1000)).reshape(-1)  # (S*K,)
    key0 = HS._mix(k[:, None] ^ torch.arange(B) * R).reshape(-1)  # (N,)
    mode = torch.tensor(native_rows.MODES)[torch.randint(0, 3, key0.shape, generator=g)]
    cap = torch.randint(1, task.n_digits + 1, key0.shape, generator=g)
    (ta, tb, _), rows = hs._candidates(k, key0, mode, cap, frozenset(native_rows.MODES))
    a, b, pool = native_rows.pick(key0, k, B, R, mode, cap, task.n_digits, task.op_codes[0],
                                  task.edge_cases(), len(task.op_codes))
    assert torch.equal(a, ta) and torch.equal(b, tb)
    assert torch.equal(pool.nonzero().squeeze(1), rows) and rows.numel() > 0


def test_switched_off_it_says_why(monkeypatch):
    monkeypatch.setenv(native_rows.OFF_ENV, "0")
    assert native_rows.available() == f"{native_rows.OFF_ENV}=0"


def test_an_adderboard_export_stands_in_for_them(tmp_path):
    """A submission is one file: encoding's and tasks' calls into the C rows must resolve
    there to the torch ops (ruff's undefined-name check on the exported source)."""
    import importlib.util
    import subprocess
    import sys

    from arithsweep.leaderboard.adderboard import submission_source

    src = submission_source({"task": "add10", "id": 1, "params": 36, "sha256": "0",
                             "exact_match": 1.0, "n_problems": 1, "suite": "s"}, "w")
    assert "native_rows.usable(" in src and "class native_rows:" in src
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff not installed")
    (tmp_path / "sub.py").write_text(src)
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                          "--select", "F821", str(tmp_path / "sub.py")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
