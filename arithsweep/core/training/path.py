"""A frontier recipe's whole path in one call: its phases, selection between them, in order.

`TrainConfig.path` (checked by core/path_checks.py) lists the phases. Phase i trains the pack
as `train_population` would with that phase's own config (the top level with the phase's
fields), and its states live in `<out>/phases/<i>-<name>/resume`:

- a phase without `select` starts every member from its own last weights in the phase
  before (exactly `train --init-from <out>/resume` with the phase's fields: the same weights
  as the chained commands it replaces, a test holds it), its moments fresh or, with
  `moments: keep`, carried over (`init_moments`);
- a phase with `select: k` first re-forms the pack: the k members with the best held-out
  exact match of the phase before (the evaluation set training already selects on, never a
  verification problem) are continued as copies of their best weights, member m a copy of
  the (m mod k)-th best, with new data streams (seeds after every earlier phase's), and with
  `perturb_lr` the copies in groups at those lr factors: PBT's exploit and explore inside
  one pack. The selected start is written to the phase's `start/` folder before it trains.

A killed path resumes mid-phase: finished phases return their results from their last state
without training, the interrupted one continues from its own. A phase that reaches the target
(its caller's `on_eval` stops it) ends the path.

Lambda is not perturbed: the Grokfast filter is one for the whole pack (`GrokfastEMA`), and a
per-member lambda would change its arithmetic for every run.

    from arithsweep.core.training.path import train_path
    result = train_path(task, model_cfg, TrainConfig(seeds=8, path=[{}, {"steps": 500,
                        "lr": 1e-3, "select": 2}]), Path("runs/p").absolute())
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import arithsweep.core.training.train as T
from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task
from arithsweep.core.model.model import ModelConfig
from arithsweep.core.path_checks import phase_fields
from arithsweep.core.training.population import train_population
from arithsweep.core.training.resume import (
    STATE_DIR,
    Checkpointing,
    RunState,
    latest_state,
    prefixed,
    write_state,
)

PHASES_DIR = "phases"  # <out>/phases/<i>-<name>/{resume,start}
PATH_STATES = "path"  # a search trial's paths, in its state folder (search/trials/trainable.py)
START_DIR = "start"
ENDED = "ended.json"  # the proposals whose path ended in a phase (their caller's stop)

PathEval = Callable[[int, int, "T.EvalPoint", "T.TrainResult"], bool | None]


def phase_dir(out: Path, cfg: TrainConfig, i: int) -> Path:
    return out / PHASES_DIR / f"{i}-{cfg.path[i]['name']}"


def phase_configs(cfg: TrainConfig, i: int, start: Path | None) -> list[TrainConfig]:
    """Phase i's proposals (one, or one per perturb_lr factor), `start` its members' start
    (the phase before's state folder, or the selection's)."""
    ph = cfg.path[i]
    fields = phase_fields(ph)
    top = {k: v for k, v in cfg.to_dict().items() if k != "path"}
    if i:  # culls are at a phase's own steps: the top level's are the first phase's
        top["cull"] = None
    c = TrainConfig.from_dict({**top, **fields, "path": None})
    if cfg.stop_at is not None:  # the path's step, as this phase counts: a stop inside it
        at = cfg.stop_at - path_steps(cfg, i)
        c = replace(c, stop_at=at if 0 < at < c.main_steps + c.polish_steps else None)
    if i == 0:
        return [c]
    c = replace(c, init_from=str(start), init_moments=ph["moments"] == "keep")
    if not ph["select"]:
        return [c]
    # new data streams: seeds after every earlier phase's, unless the phase names its own
    seed = c.seed if "seed" in fields else cfg.seed + i * cfg.seeds
    factors = ph["perturb_lr"] or [1.0]
    n = cfg.seeds // len(factors)
    return [replace(c, seed=seed + j * n, seeds=n, lr=c.lr * f) for j, f in enumerate(factors)]


def member_bests(results: list[T.TrainResult]) -> list[float]:
    """Every member's best held-out exact match over a phase, proposals in order (-1 for a
    run that kept none)."""
    return [e for r in results for e in (r.member_best or [-1.0] * r.train_cfg.seeds)]


def selected(results: list[T.TrainResult], k: int) -> list[int]:
    """The k members (indices into the pack, proposals in order) with the best held-out
    exact match over the phase, best first; ties to the lower index."""
    best = member_bests(results)
    order = sorted(range(len(best)), key=lambda m: (-(best[m] if best[m] == best[m] else -1), m))
    return order[:k]


def write_selection(d: Path, model_cfg: ModelConfig, results: list[T.TrainResult], k: int,
                    seeds: int) -> list[int]:
    """The selection's start state in `d`: member m of the new pack is a copy of the
    (m mod k)-th best member's best weights. Returns the parents, member by member."""
    top = selected(results, k)
    stacked: dict[str, list[torch.Tensor]] = {}
    for r in results:
        states = r.member_best_state or {n: p.detach() for n, p in r.model.named_parameters()}
        for name, t in states.items():
            stacked.setdefault(name, []).append(t)
    pack = {name: torch.cat(ts, 0) for name, ts in stacked.items()}  # (K_before, ...)
    parents = [top[m % len(top)] for m in range(seeds)]
    idx = torch.tensor(parents)
    tensors = prefixed({name: t[idx].clone() for name, t in pack.items()}, "model.")
    bests = member_bests(results)
    write_state(d, 0, tensors, {"model": model_cfg.to_dict(), "finished": True,
                                "selected": top, "selected_em": [bests[m] for m in top],
                                "parents": parents})
    return parents


def train_path(task: Task, model_cfg: ModelConfig, cfg: TrainConfig, out: Path,
               on_eval: PathEval | None = None,
               on_step: Callable[[int, int], None] | None = None,
               extra: Callable[[], dict[str, Any]] | None = None) -> T.TrainResult:
    """Run every phase of `cfg.path` into `out` (absolute), resuming whatever states are
    there; one TrainResult for the whole path (`merge`). `on_eval(phase, j, point, result)`
    may return True to stop (the target reached), which ends the path; `on_step(step, total)`
    counts steps over the whole path."""
    def ckpt_for(d: Path) -> Checkpointing:
        return Checkpointing(d, cfg.checkpoint_every, cfg.checkpoint_seconds, extra=extra,
                             resume=latest_state(d))

    return train_paths(task, model_cfg, [cfg], out, on_eval, on_step, ckpt_for)[0]


def train_paths(task: Task, model_cfg: ModelConfig, cfgs: list[TrainConfig], out: Path,
                on_eval: PathEval | None, on_step: Callable[[int, int], None] | None,
                ckpt_for: Callable[[Path], Checkpointing]) -> list[T.TrainResult]:
    """The paths of several proposals of one shape (a search trial's pack; their paths are
    the same but for per-member fields), each phase one pack of every proposal whose path has
    not ended; one merged TrainResult per proposal. `ckpt_for(state_dir)`: the phase's
    Checkpointing (the caller's cadence and hooks, the state there to resume). `on_eval`'s
    j is the proposal; it may return True (that proposal's path ends: the target), or
    "phase" (its phase ends, its path goes on)."""
    out = Path(out).absolute()
    path = cfgs[0].path
    total = path_steps(cfgs[0])
    done_steps = 0
    phases: list[list[list[T.TrainResult]]] = [[] for _ in cfgs]  # [proposal][phase][group]
    starts: list[Path | None] = [None] * len(cfgs)
    going = list(range(len(cfgs)))  # proposals whose path goes on
    for i in range(len(path)):
        stop = cfgs[0].stop_at  # TrainConfig.stop_at, on the path's steps: no phase after it
        if stop is not None and path_steps(cfgs[0], i) >= stop:
            break
        d = phase_dir(out, cfgs[0], i)
        groups: list[tuple[int, TrainConfig]] = []
        for j in going:
            if i and path[i]["select"]:
                sd = d / START_DIR / (f"p{j}" if len(cfgs) > 1 else "")
                if latest_state(sd) is None:
                    write_selection(sd, model_cfg, phases[j][-1], path[i]["select"],
                                    cfgs[j].seeds)
                starts[j] = sd
            groups += [(j, replace(c, early_stop=False))
                       for c in phase_configs(cfgs[j], i, starts[j])]
        # whose path ended in this phase, written when it ends (before the state that
        # follows): a resumed finished phase calls no on_eval, and its results say only
        # "stopped by caller", whether the path ended or only the phase
        mark = d / ENDED
        ended: set[int] = set(json.loads(mark.read_text())) if mark.is_file() else set()

        def phase_eval(g: int, p: T.EvalPoint, r: T.TrainResult, i=i, o=done_steps,
                       groups=groups, ended=ended, mark=mark) -> bool:
            said = on_eval(i, groups[g][0], replace(p, step=o + p.step), r)
            if said and said != "phase" and groups[g][0] not in ended:
                ended.add(groups[g][0])
                mark.parent.mkdir(parents=True, exist_ok=True)
                mark.write_text(json.dumps(sorted(ended)))
            return bool(said)

        results = train_population(
            task, model_cfg, [c for _, c in groups], checkpoint=ckpt_for(d / STATE_DIR),
            on_eval=None if on_eval is None else phase_eval,
            on_step=None if on_step is None else (
                lambda s, _t, o=done_steps: on_step(o + s, total)))
        for j in going:
            phases[j].append([r for (jj, _), r in zip(groups, results) if jj == j])
            starts[j] = d / STATE_DIR
        done_steps += max(r.steps for r in results)
        going = [j for j in going if j not in ended]
        if not going:
            break
    return [merge(c, ph) for c, ph in zip(cfgs, phases)]


def path_steps(cfg: TrainConfig, before: int | None = None) -> int:
    """Every phase's steps (polish included), in all; or those of the phases `before` phase
    i (where phase i starts on the path's steps)."""
    n = len(cfg.path) if before is None else before
    return sum(c.main_steps + c.polish_steps
               for i in range(n) for c in phase_configs(cfg, i, Path("."))[:1])


def merge(cfg: TrainConfig, phases: list[list[T.TrainResult]]) -> T.TrainResult:
    """One TrainResult for the path: its best member over every phase (a later phase wins
    ties), the curves one after another on the path's steps, the last phase's pack, members
    and per-member bests, and the time and examples of all of them."""
    last = phases[-1]
    r0 = last[0]
    out = T.TrainResult(task=r0.task, model_cfg=r0.model_cfg, train_cfg=cfg, model=r0.model,
                        params=r0.params, device=r0.device, eval_size=r0.eval_size,
                        layout=r0.layout, layout_why=r0.layout_why, step_mode=r0.step_mode)
    offset = 0
    best_phase = 0
    for i, results in enumerate(phases):
        for j, r in enumerate(results):
            before = sum(x.train_cfg.seeds for x in results[:j])
            if r.best_state and r.best_em >= out.best_em:
                out.best_em, out.best_state = r.best_em, r.best_state
                out.best_seed, out.best_step = before + r.best_seed, offset + r.best_step
                best_phase = i
        out.history += _joined(results, offset)
        out.wall_time += max(r.wall_time for r in results)
        out.train_seconds += max(r.train_seconds for r in results)
        out.examples += sum(r.examples for r in results)
        offset += max(r.steps for r in results)
    out.steps = offset
    out.failed = [f for r in last for f in r.failed]
    out.member_best = member_bests(last)
    if all(r.member_best_state for r in last):
        out.member_best_state = {n: torch.cat([r.member_best_state[n] for r in last], 0)
                                 for n in r0.member_best_state}
    out.stop_reason = next((r.stop_reason for r in last if r.stopped_early), r0.stop_reason)
    out.stopped_early = any(r.stopped_early for r in last)
    out.best_phase = cfg.path[best_phase]["name"]
    return out


def _joined(results: list[T.TrainResult], offset: int) -> list[T.EvalPoint]:
    """A phase's evaluations with its proposals' seeds side by side (a stopped proposal's
    members read nan), on the path's steps."""
    steps = sorted({p.step for r in results for p in r.history})
    rows = []
    for s in steps:
        em, loss, acc, pts = [], [], [], []
        for r in results:
            p = next((q for q in r.history if q.step == s), None)
            n = r.train_cfg.seeds
            em += p.exact_match if p else [math.nan] * n
            loss += p.loss if p else [math.nan] * n
            acc += p.position_acc if p else [[] for _ in range(n)]
            if p:
                pts.append(p)
        live = [e for e in em if e == e]
        rows.append(T.EvalPoint(step=offset + s, exact_match=em, loss=loss,
                                best_em=max(live) if live else 0.0, lr=pts[0].lr,
                                elapsed=max(p.elapsed for p in pts),
                                examples=sum(p.examples for p in pts), position_acc=acc))
    return rows


def path_state(out: Path) -> RunState | None:
    """The newest state of the path run in `out` (what `train --resume` continues), its doc's
    "path_step" the step on the whole path; None if no phase has written one."""
    dirs = sorted((d for d in (Path(out) / PHASES_DIR).iterdir()
                   if d.is_dir() and d.name.split("-", 1)[0].isdigit()),
                  key=lambda d: int(d.name.split("-", 1)[0]))
    found, before = None, 0
    for d in dirs:
        state = latest_state(d / STATE_DIR)
        if state is None:
            break
        if found is not None:
            before += max(int(r["steps"]) for r in found.doc["results"])
        found = state
    if found is not None:
        found.doc["path_step"] = before + found.step
    return found
