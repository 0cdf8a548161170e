"""One proposal's way through its search trial: its stop rules, its rounds and its rows.

A trial trains one proposal or a pack of them (`packs`); each is a `Proposal` here, with
the same rules whether it trains alone or beside others:

- reached: a seed's held-out exact match clears the target (Wilson bound, corrected for the
  best of K) *and* the seed passes on the whole problem set (or 200k held-out problems), the
  same rule `arithsweep train` uses;
- plateau: `search.trials.plateau` (in a path's last phase; an earlier phase ends by its
  steps, or below the path's floor: `below_floor`);
- budget: its steps or time ran out.

A near miss (best seed within `near_miss` of the target: a distance) first gets the finishers
where its space turns them on and its best is at finish.FINISH_FLOOR or above (a level; they
take minutes: a 95-99% model is finished, not retrained, `gets_finishers`), then, if still
below, a next round (`next_round`): its best seed alone, from its own initialisation, for twice
the steps. At these sizes the seed is the lottery and length the cure: add3-micro-s1's 57-p
start point stopped at 98.78% (seed 5 of 8, 25K steps and a polish); seed 5 alone for 50K steps
answers 99.52% of all 10^6 problems, in 220 s on one core, where the round it replaced (16
fresh seeds for 50K steps) costs about four times the first round. A recipe that groks late
(`near_miss_round: continue`) continues the best seed's best weights instead, as a few members
with new data. The last row carries `stop_reason`, `rounds`, and `seeds_reached` out of
`seeds_trained` (distinct seeds: a later round adds none): the success rate a user needs to
reproduce the architecture.

What a proposal keeps between rounds (`saved`) goes into every training state, so a restored
trial, or the replay of a proposal the deadline cut, continues where it was. Runs in a Ray
worker, driven by `search.trials.trainable.TrialRunner`; `next_round` is tried by hand:

    from arithsweep.search.trials.rounds import next_round
    next_round(train_cfg, best_index=5)      # seed 5 alone, twice the steps
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from arithsweep.core.errors import ConfigError
from arithsweep.search.trials.plateau import (
    Plateau,
    digit_accuracy,
    lr_share,
    patience_for,
    saturated,
)

REACHED = "reached target"  # a stop reason: the full check passed (or a finisher got it there)
CONTINUE_SEEDS = 8  # a "continue" round's members: data orders are cheap in a tiny pack
# A continued round's peak lr over the lr the last round's cosine ended at. Measured on add10's
# 44 p (entry 57, 99.34%; 4 members, Grokfast on, decay 1e-5, 1K-step evaluations): from
# 1e-3, the lr its cosine ended at, members swung between 1% and 99.8% from the first 1K
# steps on (with the recipe's 0.01 decay too); from 1e-4 all four climbed, never below 98%,
# to 99.7-100% held-out in 30K steps
CONTINUE_LR_SHARE = 0.1
# A path's earlier phase has no plateau rule (the Grokfast phase after it lifts a flat cosine:
# the 36's winner), so a shape that learns nothing would train it to its end: the search below
# the 36 spent 66K steps (17 minutes of a core) of a 200K-step phase on a 23 p at 0.17%. Past
# FLOOR_AT of an earlier phase, a proposal whose best member is below FLOOR is given up. The
# measurement (the cosine phase's --log curves, studies/tbukic36-parity, studies/tbukic35): at
# 50K of 200K steps the packs' best members were at 13% and 29% (the 36: 10-16 of 64 members
# above 1%; its winner, seed 24, itself at 2.3%) and at 5.4% and 11.6% (the 35); the 23 p's
# best, 0.17% at 66K, is 30 times below the slowest of them
FLOOR, FLOOR_AT = 0.01, 0.25
BELOW_FLOOR = "below the path's floor"  # a stop reason


def below_floor(best: float, phase_step: int, phase_steps: int) -> bool:
    """Is a path's earlier phase, `phase_step` of its `phase_steps` in, hopeless: past FLOOR_AT
    of it with its best member's held-out exact match still under FLOOR?"""
    return phase_step >= FLOOR_AT * phase_steps and best < FLOOR


def gets_finishers(reached: bool, best: float, floor: float) -> bool:
    """Does a trial get the finishers? When it did not reach the target (confirmed by the full
    check) and its best held-out exact match is `floor` (finish.FINISH_FLOOR) or more, a
    held-out figure at or above the target included: the full check can fail it, or (before
    the held-out gate of sampled tasks was the target itself) never be asked; add10's 44 p at
    99.29% held-out was written off without them."""
    return not reached and best >= floor


def next_round(cfg: Any, best_index: int, start: Path | None = None,
               best_em: float | None = None) -> Any:
    """A near miss's next round (TrainConfig.near_miss_round). "retrain": the last round's best
    seed (`best_index` into its pack) alone, from its own initialisation (a member trains the
    same in any pack), twice as long. "continue": from `start`, the checkpoint of that seed's
    best weights (held-out exact match `best_em`), as up to CONTINUE_SEEDS members with new
    data streams, for `steps` more steps of a cosine from CONTINUE_LR_SHARE of the lr the last
    one ended at, curriculum and warmup off, its weight decay where its held drops had taken
    it (wd_drops_hold: the start passed them; a full decay would pull every weight of a
    finished model for the evaluation it takes to drop again). "ticket": the same schedule,
    its path included, with the next `seeds` seeds (a lottery shape's new ticket)."""
    if cfg.near_miss_round == "ticket":
        return replace(cfg, seed=cfg.seed + cfg.seeds, init_from=None)
    if cfg.path:  # a path's near miss continues from its last phase's schedule
        from arithsweep.core.training.path import phase_configs

        cfg = replace(phase_configs(cfg, len(cfg.path) - 1, Path("."))[0],
                      near_miss_round="continue", init_from=None, init_moments=False)
    if cfg.near_miss_round == "continue":
        if start is None:
            raise ConfigError("near_miss_round=continue: no checkpoint to continue from")
        from arithsweep.core.training.recipe import drop_factor

        wd = cfg.weight_decay
        if cfg.wd_drops and cfg.wd_drops_hold and best_em is not None:
            wd *= drop_factor(cfg.wd_drops, best_em)
        return replace(cfg, init_from=str(start), seed=cfg.seed + cfg.seeds,
                       seeds=min(cfg.seeds, CONTINUE_SEEDS),
                       lr=cfg.lr * cfg.min_lr_ratio * CONTINUE_LR_SHARE, weight_decay=wd,
                       warmup=0, curriculum=None, curriculum_steps=0, curriculum_stages=0,
                       restart_steps=0, phases=None, path=None)
    return replace(cfg, seed=cfg.seed + int(best_index), seeds=1, steps=2 * cfg.steps,
                   restart_steps=2 * cfg.restart_steps)


def metrics(point: Any, result: Any, best_em: float, step0: int) -> dict[str, Any]:
    """One evaluation's row; lists become em_seed0.. / loss_seed0.. (Tune wants scalars)."""
    live = [x for x in point.loss if not math.isnan(x)]
    row: dict[str, Any] = {
        "best_em": float(best_em),  # running best of the trial: Optuna's constraint uses it
        "em": float(point.best_em),  # best seed at this evaluation
        "loss": float(min(live)) if live else float("nan"),
        "params": int(result.params),
        "step": step0 + int(point.step),
        "examples": int(point.examples),
        "elapsed": float(point.elapsed),
        "lr": float(point.lr),
        "failed_seeds": int(sum(bool(f) for f in result.failed)),
        "layout": result.layout,  # tiny | reference: how the steps ran
    }
    for i, em in enumerate(point.exact_match):
        row[f"em_seed{i}"] = float(em)
    for i, loss in enumerate(point.loss):
        row[f"loss_seed{i}"] = float(loss)
    return row


class Proposal:
    """One proposal of a trial: its round's config and plateau, its running best and counters,
    and the rules that end an evaluation (`evaluate`) and a round (`end_round`). `saved`: what
    a restored state kept of it ({} on a fresh start); `rounds_best`: where its finished rounds'
    best model is kept (the continued round's start)."""

    def __init__(self, setup: Any, check: Any, const: dict[str, Any], saved: dict[str, Any],
                 rounds_best: Path, seeds_of: int) -> None:
        from arithsweep.core.config import TrainConfig

        self.setup, self.check, self.const = setup, check, const
        self.rounds_best, self.seeds_of = rounds_best, seeds_of
        self.target = float(setup.train_cfg.target)
        self.best = float(saved.get("best", -1.0))
        self.step0 = int(saved.get("step0", 0))  # steps of its finished rounds
        self.seeds_trained = int(saved.get("seeds_trained", 0))
        self.seeds_reached = int(saved.get("seeds_reached", 0))
        self.round = int(saved.get("round", 0))
        self.cfg = setup.train_cfg
        if saved.get("round_cfg"):  # the round the restored state belongs to
            self.cfg = TrainConfig.from_dict(saved["round_cfg"])
            if self.cfg.init_from and rounds_best.is_dir():  # its start, restored with it
                self.cfg = replace(self.cfg, init_from=str(rounds_best))
        self.plateau = Plateau(patience_for(const, self.cfg))
        vars(self.plateau).update(saved.get("plateau") or {})
        self.reason = str(saved.get("reason", ""))  # why this round stopped it ("": running)
        self.stop_reason = str(saved.get("stop_reason", ""))
        self.last_seed = int(saved.get("last_seed", 0))  # the last round's best seed
        self.elapsed = float(saved.get("elapsed", 0.0))  # the last round's wall time
        self.finished: dict[str, Any] = dict(saved.get("finished") or {})  # finished_by
        self.done = bool(saved.get("done"))  # its rounds and finishers are over
        self.phase = int(saved.get("phase", 0))  # the path phase its plateau counts (a path's)
        self.result: Any = None  # the TrainResult its checkpoints' best model comes from
        self.best_round: Any = None  # the round whose best member the finishers get
        self.tried: Any = None  # the round the finishers last ran on

    def saved(self) -> dict[str, Any]:
        """What a training state keeps of this proposal (JSON)."""
        return {"best": self.best, "step0": self.step0, "round": self.round,
                "round_cfg": self.cfg.to_dict(), "seeds_trained": self.seeds_trained,
                "seeds_reached": self.seeds_reached, "reason": self.reason,
                "plateau": vars(self.plateau), "stop_reason": self.stop_reason,
                "last_seed": self.last_seed, "elapsed": self.elapsed,
                "finished": self.finished, "done": self.done, "seeds_of": self.seeds_of,
                "phase": self.phase}

    def evaluate(self, point: Any, result: Any, phase_cfg: Any = None,
                 plateau: bool = True, phase_step: int | None = None,
                 ) -> tuple[dict[str, Any], bool, bool]:
        """One evaluation: (its row, stop this round?, did the running best improve?).
        Inside a path (`phase_cfg`: the phase's own config, `phase_step` the step within it)
        the plateau rule reads the phase's lr, and runs only where `plateau` (the last phase);
        an earlier one ends by its steps, or `below_floor`."""
        self.result = result
        best = max(float(result.best_em), 0.0)
        row = metrics(point, result, max(best, self.best), self.step0)
        stop = False
        if self.check.held_out_reached(result) and self.check.passes(result):
            self.reason, stop = REACHED, True
            row["full_em"] = self.check.value(result)
        elif plateau and self.plateau.update(point.best_em, row["loss"], digit_accuracy(point),
                                             lr_share(point, phase_cfg or self.setup.train_cfg),
                                             saturated(point.best_em, result, self.target)):
            self.reason, stop = "plateau", True
        elif (not plateau and phase_cfg is not None and phase_step is not None
              and below_floor(max(best, self.best), phase_step, phase_cfg.main_steps)):
            self.reason, stop = BELOW_FLOOR, True
        improved = best > self.best
        self.best = max(self.best, best)
        return row, stop, improved

    def end_round(self, result: Any, rounds: int, near: float,
                  finish: Callable[[Proposal], dict[str, Any]]) -> None:
        """Count a finished round; then the finishers and a next round for a near miss with
        rounds left (`rounds` in all, `near`: the near-miss distance), else the finishers on
        its best round and done. `finish(self)` runs the finishers on `self.result`."""
        if self.best_round is None or result.best_em >= self.best_round.best_em:
            self.best_round = result
        self.stop_reason = self.reason or result.stop_reason
        self.step0 += result.steps
        ticket = self.cfg.near_miss_round == "ticket"
        fresh = self.round == 0 or ticket  # seeds of its own
        self.seeds_trained += self.cfg.seeds if fresh else 0
        final = result.history[-1].exact_match if result.history else []
        hits = sum(1 for e in final if not math.isnan(e) and e >= self.target)
        # a later round trains a seed already counted: it adds one only if none was
        self.seeds_reached += hits if fresh else int(hits > 0 and not self.seeds_reached)
        self.last_seed, self.elapsed = int(result.best_seed), float(result.wall_time)
        # what a finisher's checkpoint saves; later rounds' checkpoints keep the finished
        # rounds' best through rounds_best
        self.result = self.best_round
        more = (self.reason != REACHED and self.best >= self.target - near
                and self.round + 1 < rounds)
        if more:  # the finishers first: minutes, where a round is a schedule
            self.finished, self.tried = finish(self), self.best_round
            more = self.reason != REACHED
        if not more:
            if self.tried is not self.best_round:
                self.finished = finish(self)
            self.done = True
            return
        # kept whatever the next round does (a retrained seed can lose its lottery, a
        # continued one fall back), and a continued round's start
        self.best_round.save_best(self.rounds_best)
        start = (self.rounds_best if not ticket and (
            self.cfg.near_miss_round == "continue" or self.cfg.path) else None)
        self.cfg = next_round(self.cfg, self.last_seed, start, float(self.best_round.best_em))
        self.round += 1
        self.plateau = Plateau(patience_for(self.const, self.cfg))
        self.reason = ""

    def mark_finished(self, result: Any, finished_by: str) -> dict[str, Any]:
        """A finisher took it over the line: reached, with `result`'s best; returns the row
        that says so."""
        self.reason = self.stop_reason = REACHED
        self.best = max(self.best, float(result.best_em))
        return {"best_em": self.best, "em": float(result.best_em),
                "params": int(self.setup.params), "step": self.step0,
                "examples": int(result.examples), "elapsed": float(result.wall_time),
                "full_em": self.check.value(result), "finished_by": finished_by}

    def last_row(self) -> dict[str, Any]:
        """Its last row, once it is done."""
        return {"best_em": max(self.best, 0.0), "params": int(self.setup.params),
                "step": self.step0, "stop_reason": self.stop_reason, "rounds": self.round + 1,
                "seeds_trained": self.seeds_trained,
                "seeds_reached": max(self.seeds_reached, int(self.reason == REACHED)),
                "elapsed": self.elapsed, "done": 1, **self.finished}
