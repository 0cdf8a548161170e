"""Finishers for near misses: what takes a trained 95-99% model to the target, after training.

The smallest published adders were not finished by their training run alone (see
reference/frontier-architectures.md): tbukic's 36 p took two rounds of targeted fine-tuning
(70 error pairs, lr 1e-4), the 49-p claim a CMA-ES pass over its weights (sigma 5e-4). Both
are here, run on one trained member (`TrainResult.best_model()`), switched on by TrainConfig
fields (0 = off), in this order:

- targeted fine-tuning (`finish_rounds`, `finish_steps`, `finish_lr`, `finish_pool`): find the
  problems the member gets wrong among `finish_pool` fixed problems of the TRAINING split
  (`Task.sample(split="train")`, as `recipe.mine_errors`: never a held-out problem, and every
  problem verification uses is held out), train `finish_steps` AdamW steps (no decay) on
  batches of those pairs padded with fresh training problems, mine again; stop when the pool
  has no error left or after `finish_rounds` rounds;
- CMA-ES polish (`finish_cmaes_evals`, `finish_cmaes_sigma`) of the whole weight vector of a
  model of at most CMAES_MAX_PARAMS numbers, scored on the same training-split pool (error
  rate + answer-token cross entropy); every generation's candidates are one packed model.

Both compute their forwards and losses in the layout `finish_layout` names (finish_score.py:
torch's by default, the tiny kernel on request); each record says which.

Each finisher is judged on the run's own held-out evaluation set (`confirm.eval_problems`,
disjoint from the training split; never the verification suite): fine-tuning is kept unless
held-out exact match falls (its best round by that measure), CMA-ES only if it rises; what is
not kept leaves the weights bit for bit as they were. `arithsweep train` runs them when the
best seed misses the target, a search trial when it misses it at FINISH_FLOOR or above.

    arithsweep train --task add3 --set finish_rounds=3 --set finish_cmaes_evals=2000 --json
    from arithsweep.core.training.finish import finish
    done = finish(task, model_cfg, train_cfg, result.best_model().member_state(0))
    print(done.finished_by, done.records)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task
from arithsweep.core.evaluation.confirm import eval_problems
from arithsweep.core.evaluation.evaluate import EvalSet, answer_start, exact_match
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.training.finish_score import Scorer, held_out_em, objective, scorer
from arithsweep.core.training.recipe import near_zero_part

FINETUNE, CMAES = "targeted fine-tuning", "cma-es"
# a search trial below the target whose best held-out exact match is at least this gets the
# finishers (a level; the search's `near_miss` is a distance from the target)
FINISH_FLOOR = 0.95
# CMA-ES keeps an n x n covariance and needs ~n generations to adapt it: past ~100 numbers a
# budget of a few thousand evaluations barely moves it (measured here: 400 evaluations on a
# 720-p add2 model never beat its starting point's objective at sigma 1e-2; the 49-p claim
# ran it on 49)
CMAES_MAX_PARAMS = 128
# error pairs fill at most this share of a fine-tuning batch (as in the polish phase), so
# that many errors cannot crowd out the padding that keeps the rest of the model in place
ERROR_SHARE = 0.5

Passes = Callable[[ArithTransformer], bool]


def finishers_on(cfg: TrainConfig) -> bool:
    return bool(cfg.finish_rounds or cfg.finish_cmaes_evals)


@dataclass
class Finished:
    """What the finishers did to one member. Each record names its finisher, says whether it
    was kept and the held-out exact match before and after; fine-tuning's also holds `pairs`
    (the pool's errors at the start of each round, then those left), `stop` and the held-out
    figure after each round; CMA-ES's the evaluations made and the pool objective before and
    after (or `skipped`, why it did not run)."""

    state: dict[str, torch.Tensor]  # its weights after them (the input's own dict if none kept)
    held_out_before: float  # exact match on the run's held-out evaluation set
    held_out: float  # ... after
    finished_by: str | None = None  # the finisher after which `passes` first held
    records: list[dict[str, Any]] = field(default_factory=list)  # one per finisher that ran
    # per fine-tuning round, the pairs (a, b, op) it mined, all from the training split
    mined: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)


def training_pool(task: Task, cfg: TrainConfig, gen: torch.Generator,
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`finish_pool` TRAINING-split problems, a third each over values (mostly full length, as
    verification's random part), over operand lengths, and carry-enriched, after the share
    `near_zero_share` asks of subtractions near zero: (P,) each."""
    cap, near = cfg.train_digits, near_zero_part(task, cfg, cfg.finish_pool)
    n = cfg.finish_pool - near
    third = n // 3
    carry = "carry" if getattr(task, "op", None) != "mul" else "uniform"
    parts = [task.sample(n - 2 * third, gen, "values", cap, split="train"),
             task.sample(third, gen, "uniform", cap, split="train"),
             task.sample(third, gen, carry, cap, split="train")]
    if near:
        parts.append(task.sample(near, gen, "near_zero", cap, split="train"))
    return tuple(torch.cat([p[i] for p in parts]) for i in range(3))



def finish(task: Task, model_cfg: ModelConfig, cfg: TrainConfig,
           state: dict[str, torch.Tensor], passes: Passes | None = None,
           max_params: int = CMAES_MAX_PARAMS) -> Finished:
    """Run the finishers `cfg` switches on over one member's `state`, in order, until
    `passes(model)` holds (default: held-out exact match >= cfg.target). The input `state` is
    never written to."""
    device = next(iter(state.values())).device
    sc = scorer(model_cfg, cfg, device)  # before any work: a refused finish_layout is one line
    model = ArithTransformer.from_member_state(model_cfg, state).to(device)
    a, b, op = eval_problems(task, cfg.eval_size, cfg.train_digits)
    held = EvalSet(task, a, b, op, device)
    gen = torch.Generator().manual_seed(0xF1_7150 + cfg.seed)
    pool = training_pool(task, cfg, gen)
    if passes is None:
        passes = lambda m: held_out_em(m, task, held, sc)[0] >= cfg.target  # noqa: E731
    before = now = held_out_em(model, task, held, sc)[0]
    done = Finished(state, before, before)
    order = [(FINETUNE, cfg.finish_rounds, _finetune), (CMAES, cfg.finish_cmaes_evals, _cmaes)]
    for name, on, run in order:
        if not on:
            continue
        t0 = time.perf_counter()
        with sc.threads():
            rec = {"finisher": name, "layout": sc.layout,
                   **run(model, task, cfg, pool, held, now, gen, done, passes, max_params, sc)}
        if rec["kept"]:
            now = rec["held_out_after"]
            rec.setdefault("passes", bool(passes(model)))
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        done.records.append(rec)
        if rec.get("passes"):
            done.finished_by = name
            break
    if any(r.get("kept") for r in done.records):
        done.state, done.held_out = model.member_state(0), now
    return done


def finish_best(result: Any, check: Any) -> dict[str, Any]:
    """The finishers on a `TrainResult`'s best member, "passes" judged on the problems of
    `check` (an `evaluation.confirm.FullCheck`, the run's own stop rule). What they keep becomes
    the result's best state (and `check` forgets its figure for the member before); returns
    {"finished_by": a finisher's name or None, "finishers": one record per finisher that ran}."""
    state = result.best_state or result.model.member_state(result.best_seed)
    done = finish(result.task, result.model_cfg, result.train_cfg, state,
                  lambda m: check.score(m) >= check.target)
    if done.state is not state:
        result.best_state, result.best_em = done.state, done.held_out
        check.checked.pop(result.best_step, None)
    return {"finished_by": done.finished_by, "finishers": done.records}


def _finetune(model: ArithTransformer, task: Task, cfg: TrainConfig, pool, held: EvalSet,
              before: float, gen: torch.Generator, done: Finished, passes: Passes,
              _max: int, sc: Scorer) -> dict[str, Any]:
    """Rounds of mine-then-train on the pool's errors, until none is left, the round limit,
    or a round that `passes`; the best round by held-out exact match (later rounds win ties:
    they fixed more training errors) is kept unless it is below `before`, else `model` is put
    back."""
    start, B = answer_start(task), cfg.batch_size
    pool_set = EvalSet(task, *pool, held.device)
    saved = model.member_state(0)
    best, best_em = saved, before
    pairs, ems, stop = [], [], "round limit"
    for r in range(cfg.finish_rounds + 1):
        wrong = ~exact_match(model, task, pool_set, forward=sc.forward)[0]  # (P,)
        pairs.append(int(wrong.sum()))
        if not pairs[-1]:
            stop = "no errors left in the pool"
            break
        if r == cfg.finish_rounds:
            break
        errs = tuple(x[wrong] for x in pool)
        done.mined.append(errs)
        if not _train_round(model, task, cfg, errs, gen, start, B, held.device, sc):
            stop = "non-finite loss"
            break
        ems.append(held_out_em(model, task, held, sc)[0])
        if ems[-1] >= best_em:
            best, best_em = model.member_state(0), ems[-1]
            if passes(model):
                stop = "passes"
                break
    kept = bool(ems) and best is not saved
    model.load_member_state(0, best if kept else saved)
    rec = {"rounds": len(ems), "pairs": pairs, "stop": stop, "lr": cfg.finish_lr,
           "steps": cfg.finish_steps, "held_out_rounds": ems, "held_out_before": before,
           "held_out_after": best_em if kept else before, "kept": kept}
    return {**rec, "passes": True} if stop == "passes" else rec


def _train_round(model: ArithTransformer, task: Task, cfg: TrainConfig, errs, gen, start: int,
                 B: int, device: torch.device, sc: Scorer) -> bool:
    """finish_steps AdamW steps on error pairs padded with fresh training problems, the loss
    and its gradients from `sc`'s layout; False (and the round's damage left for the caller
    to undo) on a non-finite loss."""
    n_err = min(int(errs[0].numel()), max(1, int(B * ERROR_SHARE)))
    n_pad = B - n_err
    et, em = (x.to(device) for x in task.encode(*errs))  # (E, T), (E, T-1)
    half = (cfg.finish_steps * n_pad) // 2
    parts = [task.sample(cfg.finish_steps * n_pad - half, gen, "values", cfg.train_digits,
                         split="train"),
             task.sample(half, gen, "uniform", cfg.train_digits, split="train")]
    pad = tuple(torch.cat([p[i] for p in parts]) for i in range(3))
    perm = torch.randperm(pad[0].numel(), generator=gen)
    pt, pm = (x.to(device) for x in task.encode(*(x[perm] for x in pad)))  # (S*n_pad, T)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.finish_lr, betas=(cfg.beta1, cfg.beta2),
                            weight_decay=0.0)
    model.train()
    for s in range(cfg.finish_steps):
        idx = torch.randperm(et.shape[0], generator=gen)[:n_err].to(device)
        tokens = torch.cat([et[idx], pt[s * n_pad:(s + 1) * n_pad]])[None]  # (1, B, T)
        mask = torch.cat([em[idx], pm[s * n_pad:(s + 1) * n_pad]])[None]  # (1, B, T-1)
        opt.zero_grad(set_to_none=True)
        loss = sc.loss(model, tokens, mask, start).sum()
        if not torch.isfinite(loss):
            return False
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
    return True


def _flat(model: ArithTransformer) -> torch.Tensor:
    """Member 0's weights as one float64 CPU vector (n,), in parameters() order."""
    return torch.cat([p.detach()[0].flatten() for p in model.parameters()]).double().cpu()


def _load_rows(model: ArithTransformer, X: torch.Tensor) -> None:
    """Member i of `model` takes the weights in row i of X (K, n)."""
    off = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p[0].numel()
            p.copy_(X[:, off:off + n].view(p.shape).to(p.dtype))
            off += n


def cmaes_seed(seed: int) -> int:
    """The seed CMA-ES gets for training seed `seed`: numpy's legacy seeding takes 1..2**32-1
    (0 would mean "from the clock"), and a search's seeds are far larger (2e11)."""
    return 1 + (0x0C3A + int(seed)) % (2**32 - 1)


def _cmaes(model: ArithTransformer, task: Task, cfg: TrainConfig, pool, held: EvalSet,
           before: float, gen: torch.Generator, done: Finished, _passes: Passes,
           max_params: int, sc: Scorer) -> dict[str, Any]:
    """CMA-ES from the member's weights on the pool objective; the best candidate replaces
    them only if it answers more held-out problems."""
    import cma
    import numpy as np

    x0 = _flat(model)
    n = x0.numel()
    if n > max_params:
        return {"skipped": f"{n} parameters (CMA-ES runs up to {max_params})", "kept": False}
    device, start = held.device, answer_start(task)
    pool_set = EvalSet(task, *pool, device)
    tokens, mask = (x.to(device) for x in task.encode(*pool))  # (P, T), (P, T-1)
    sigma = cfg.finish_cmaes_sigma
    rng = np.random.get_state()  # cma seeds numpy's global generator: give it back after
    try:
        es = cma.CMAEvolutionStrategy(x0.numpy(), sigma, {
            "seed": cmaes_seed(cfg.seed), "maxfevals": cfg.finish_cmaes_evals, "verbose": -9})
        packed = ArithTransformer(model.cfg, k=es.popsize,
                                  generator=torch.Generator().manual_seed(0)).to(device)
        _load_rows(packed, x0[None].expand(es.popsize, n))
        f0 = objective(packed, task, pool_set, tokens, mask, start, sc)[0]
        while not es.stop():
            X = es.ask()
            _load_rows(packed, torch.as_tensor(np.asarray(X)))
            es.tell(X, objective(packed, task, pool_set, tokens, mask, start, sc))
    finally:
        np.random.set_state(rng)
    rec = {"evals": int(es.result.evaluations), "sigma": sigma, "params": n,
           "objective_before": f0, "objective_after": float(es.result.fbest),
           "held_out_before": before, "held_out_after": before, "kept": False}
    if es.result.xbest is None or not es.result.fbest < f0:
        return rec
    cand = ArithTransformer.from_member_state(model.cfg, model.member_state(0)).to(device)
    _load_rows(cand, torch.as_tensor(es.result.xbest)[None])
    after = held_out_em(cand, task, held, sc)[0]
    rec["held_out_candidate"] = after
    if after > before:
        model.load_member_state(0, cand.member_state(0))
        rec.update(held_out_after=after, kept=True)
    return rec


def member_floor(target: float) -> float:
    """The held-out exact match from which a member gets the finishers: FINISH_FLOOR of the
    target (94.05% at 0.99)."""
    return FINISH_FLOOR * target


def finish_members(result: Any, check: Any) -> dict[str, Any]:
    """The finishers on every member of a `TrainResult` whose best held-out exact match is
    `member_floor` or more (its best weights, `member_best_state`), best first, until one
    passes `check`; a run without per-member bests gets `finish_best`. The member that
    passes (or, if none does, the best one's finished weights where they were kept) becomes
    the result's best. Returns `finish_best`'s keys plus "members": the members finished."""
    floor = member_floor(float(result.train_cfg.target))
    bests = result.member_best
    if not bests or not result.member_best_state:
        return {**finish_best(result, check), "members": [result.best_seed]}
    order = sorted((i for i, e in enumerate(bests) if e == e and e >= floor),
                   key=lambda i: (-bests[i], i))
    if not order:  # the best member only, as before: the gate is the caller's
        order = [result.best_seed]
    records, tried = [], []
    for i in order:
        state = {k: v[i] for k, v in result.member_best_state.items()}
        done = finish(result.task, result.model_cfg, result.train_cfg, state,
                      lambda m: check.score(m) >= check.target)
        tried.append(i)
        records += [{**r, "member": i} for r in done.records]
        if done.finished_by is not None or (i == order[0] and done.state is not state):
            result.best_state, result.best_em, result.best_seed = (
                done.state, done.held_out, i)
            check.checked.pop(result.best_step, None)
        if done.finished_by is not None:
            return {"finished_by": done.finished_by, "finishers": records, "members": tried}
    return {"finished_by": None, "finishers": records, "members": tried}
