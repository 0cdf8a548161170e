"""The finishers on the tiny kernel (TrainConfig.finish_layout, core/training/finish_score.py):
the kernel scores CMA-ES's objective and exact match as torch's layout does (to float32
rounding), each finisher computes with the layout the field names and says which, and the
field is validated and recorded. The models are published add3 (37 p) and add2 (216 p)
entries: one block each, so the kernel runs them; nothing here trains more than a few steps."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.evaluate import EvalSet, answer_start, exact_match
from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.model.tiny_layout import load_error, tiny_logits
from arithsweep.core.training import finish as F
from arithsweep.core.training import finish_score as S

BOARD = Path(__file__).resolve().parents[1] / "leaderboard" / "checkpoints"
ADD3 = BOARD / "add3-37-8991a2a9"
ADD2 = BOARD / "add2-216-52b633c5"

pytestmark = pytest.mark.skipif(load_error() is not None, reason=f"no kernel: {load_error()}")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()  # two threads on a busy 2-core machine slow the kernel down
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def add3():
    ck = load_checkpoint(ADD3)
    # a small pool and held-out set: the figures are compared, not the finish's outcome
    return ck, replace(ck.train_cfg, finish_pool=3000, eval_size=1024)


def _candidates(ck, k: int, sigma: float) -> ArithTransformer:
    """k members around the checkpoint's weights, as a CMA-ES generation packs them."""
    x0 = F._flat(ck.model)
    gen = torch.Generator().manual_seed(5)
    X = x0[None] + sigma * torch.randn(k, x0.numel(), generator=gen, dtype=torch.float64)
    packed = ArithTransformer(ck.model_cfg, k=k, generator=torch.Generator().manual_seed(0))
    F._load_rows(packed, X)
    return packed


# CMA-ES's own step (no errors on the pool), a step with a few dozen, one far off
@pytest.mark.parametrize("sigma", [5e-4, 3e-3, 2e-2])
def test_the_kernel_scores_the_cma_es_objective_as_torch_does(add3, sigma):
    ck, cfg = add3
    task = ck.task
    pool = F.training_pool(task, cfg, torch.Generator().manual_seed(3))
    pool_set = EvalSet(task, *pool)
    tokens, mask = task.encode(*pool)
    packed = _candidates(ck, 6, sigma)
    ref, tiny = (S.objective(packed, task, pool_set, tokens, mask, answer_start(task),
                             S.Scorer(lay, "test")) for lay in ("reference", "tiny"))
    assert all(math.isfinite(x) for x in ref)
    for r, t in zip(ref, tiny, strict=True):
        assert math.isclose(r, t, rel_tol=1e-4, abs_tol=1e-5), (ref, tiny)
    # the error rate's part is a count: the same problems are wrong in both
    assert torch.equal(exact_match(packed, task, pool_set),
                       exact_match(packed, task, pool_set, forward=tiny_logits))
    if sigma > 1e-3:
        assert max(ref) > 0.01  # this case does have wrong answers to count


def test_a_format_without_padding_is_scored_on_its_answer_positions_alone():
    from arithsweep.core.overrides import build_configs

    task, m, t = build_configs("add2", "nopad,revans,revops,delim", None,
                               {"d_model": 4, "n_heads": 1, "d_ff": 8, "finish_pool": 600})
    pool = F.training_pool(task, t, torch.Generator().manual_seed(1))
    pool_set = EvalSet(task, *pool)
    assert not pool_set.full  # answers start at different positions: the mask matters
    tokens, mask = task.encode(*pool)
    packed = ArithTransformer(m, k=3, seeds=[0, 1, 2])
    ref, tiny = (S.objective(packed, task, pool_set, tokens, mask, answer_start(task),
                             S.Scorer(lay, "test")) for lay in ("reference", "tiny"))
    for r, x in zip(ref, tiny, strict=True):
        assert math.isclose(r, x, rel_tol=1e-5), (ref, tiny)


def _counting(monkeypatch) -> dict[str, int]:
    """Count the kernel's calls made through the finishers' scorer."""
    calls = {"tiny_logits": 0, "tiny_loss": 0}
    for name in calls:
        real = getattr(S, name)

        def counted(*a, _real=real, _name=name, **kw):
            calls[_name] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(S, name, counted)
    return calls


def test_each_finisher_computes_in_the_layout_finish_layout_names_and_says_so(add3, monkeypatch):
    ck, cfg = add3
    cfg = replace(cfg, finish_rounds=1, finish_steps=3, finish_cmaes_evals=20)
    # the entry answers all 3000 pool problems: a nudged copy gets some wrong (24), so the
    # fine-tuning round has pairs to train on
    state = _candidates(ck, 1, 3e-3).member_state(0)
    calls = _counting(monkeypatch)

    def never(_model) -> bool:  # both finishers run, whatever they reach
        return False

    done = {}
    for lay in ("reference", "tiny"):
        before = dict(calls)
        done[lay] = F.finish(ck.task, ck.model_cfg, replace(cfg, finish_layout=lay), state,
                             never)
        ran = {k: calls[k] - before[k] for k in calls}
        assert [r["layout"] for r in done[lay].records] == [lay, lay]
        assert [r["finisher"] for r in done[lay].records] == [F.FINETUNE, F.CMAES]
        assert done[lay].records[0]["pairs"][0] > 0
        if lay == "reference":
            assert ran == {"tiny_logits": 0, "tiny_loss": 0}
        else:  # exact match and the objective through tiny_logits, the AdamW steps tiny_loss
            assert ran["tiny_loss"] == 3 and ran["tiny_logits"] > 3
    # the same start scored both ways: held-out figures and CMA-ES's objective agree
    ref, tiny = (done[lay] for lay in ("reference", "tiny"))
    assert ref.held_out_before == tiny.held_out_before
    f0 = [d.records[1]["objective_before"] for d in (ref, tiny)]
    assert math.isclose(*f0, rel_tol=1e-4, abs_tol=1e-5), f0


def test_auto_takes_the_layout_training_would_and_tiny_is_refused_where_the_kernel_cannot_run(
        add3):
    ck, cfg = add3
    cpu = torch.device("cpu")
    assert TrainConfig().finish_layout == "reference"  # what every earlier finish computed on
    sc = S.scorer(ck.model_cfg, replace(cfg, finish_layout="auto"), cpu)
    assert (sc.layout, sc.why) == ("tiny", "37 parameters, one block")
    sc = S.scorer(ck.model_cfg, replace(cfg, finish_layout="auto", layout="reference"), cpu)
    assert (sc.layout, sc.why) == ("reference", "asked for")
    deep = ModelConfig.from_dict({**ck.model_cfg.to_dict(), "n_layers": 2})
    sc = S.scorer(deep, replace(cfg, finish_layout="auto"), cpu)
    assert sc.layout == "reference" and "2 layers" in sc.why
    with pytest.raises(ConfigError, match="finish_layout='tiny': 2 layers"):
        F.finish(ck.task, deep, replace(cfg, finish_layout="tiny", finish_rounds=1),
                 ArithTransformer(deep).member_state(0))


def test_finish_layout_validates():
    with pytest.raises(ConfigError, match="finish_layout"):
        TrainConfig(finish_layout="kernel")
    assert TrainConfig.from_dict({"finish_layout": "auto"}).finish_layout == "auto"


def test_a_finished_checkpoint_records_the_layout_its_finishers_computed_on(tmp_path):
    from arithsweep.core.api import finish_job

    res = finish_job(ADD2, tmp_path / "fin", {"finish_rounds": 1, "finish_steps": 2,
                                              "finish_pool": 2000, "finish_layout": "tiny"})
    assert [r["layout"] for r in res["finishers"]] == ["tiny"]
    doc = json.loads((tmp_path / "fin" / "config.json").read_text())
    assert doc["train"]["finish_layout"] == "tiny"
    assert doc["meta"]["finish_set"]["finish_layout"] == "tiny"
    assert load_checkpoint(tmp_path / "fin").train_cfg.finish_layout == "tiny"
