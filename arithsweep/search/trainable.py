"""The Ray Tune function trainable: one search trial = one architecture, trained in rounds.

Runs inside a Ray worker. Round 1 trains the proposal's K seeds as one pack with
`arithsweep.core.training.population.train`; every evaluation is reported to Tune
(`tune.report`), with a checkpoint (the best seed and the whole training state, see
`trial_state`) whenever the trial's best exact match improves and every `checkpoint_every`
steps or about `checkpoint_seconds`; a trial Tune restores continues mid-run from it. A
trial stops on its own curve, never because a model of another size is ahead of it:

- reached: a seed's held-out exact match clears the target (Wilson bound, corrected for the
  best of K) *and* the seed passes on the whole problem set (or 200k held-out problems), the
  same rule `arithsweep train` uses;
- plateau: for `patience` evaluations (or a tenth of its schedule's, if more) no seed
  improved its exact match, its per-digit accuracy or its loss (a tiny model at chance whose
  answer digits are being learnt one by one, or whose loss still falls, keeps training; one
  whose best seed has learnt a tenth of the problems keeps training while the lr is above
  half its peak: it oscillates until the schedule's low-lr end settles it);
- budget: its steps or time ran out.

A near miss (best seed within `near_miss` of the target: a distance) first gets the finishers
where its space turns them on and its best is at finish.FINISH_FLOOR or above (a level; they
take minutes: a 95-99% model is finished, not retrained), then, if still below, a second
round: its best seed alone, from its own initialisation, for twice the steps. At these
sizes the seed is the lottery and length the cure: add3-micro-s1's 57-p start point stopped at
98.78% (seed 5 of 8, 25K steps and a polish); seed 5 alone for 50K steps answers 99.52% of all
10^6 problems, in 220 s on one core, where the round it replaced (16 fresh seeds for 50K steps)
costs about four times the first round. A recipe that groks late (`near_miss_round: continue`)
continues the best seed's best weights instead, as a few members with new data (`next_round`).
The last report carries `stop_reason`, `rounds`, and `seeds_reached` out of `seeds_trained`
(distinct seeds: a second round adds none): the success rate a user needs to reproduce the
architecture.

A pack (config with several proposals, see `arithsweep.search.packs`) trains them as one
population with `arithsweep.core.training.population.train_population`: one round, each
proposal with its own plateau / reached rule and, after it, the near-miss finishers by the
single trial's rule, reported under `p<j>/` keys in one Tune report per evaluation, and a
checkpoint holding `p<j>/best` for every proposal (and the pack's state) whenever one improves
or a state is due.

Workers never open the leaderboard or MLflow: all bookkeeping happens on the driver. Not run
by hand; `arithsweep.search.driver.run_search` passes `run_trial` to the Tuner.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from ray import tune

from arithsweep.core.errors import ConfigError
from arithsweep.search import packs
from arithsweep.search.options import SearchOptions
from arithsweep.search.trial import CONST_KEY, build_trial, params_if_possible
from arithsweep.search.trial_state import TrialState

# --patience (SearchOptions.patience: evaluations without progress before a trial counts as
# stuck), or this share of the trial's schedule, if longer: a long schedule is long because its
# models grok late (MicroAdder's 44 p on add10: no progress in exact match or loss from step
# 8K to 25.5K of 60K, then 45% by the end); on add3's 25K-40K schedules it is --patience
PATIENCE_SHARE = 0.1
# A best seed at LEARNT exact match or more has learnt part of the task; while the lr is above
# HIGH_LR of its peak such a seed oscillates (add10's 57 p: 0.2% <-> 59% from one evaluation
# to the next at lr 0.015-0.017, cut by the plateau rule at step 32.5K of 83K), and the
# schedule's low-lr end is what settles it, so until then its flat evaluations do not count
LEARNT = 0.1
HIGH_LR = 0.5
MIN_EM_GAIN = 0.002  # exact-match gain of the best seed that counts as progress
MIN_LOSS_GAIN = 0.02  # relative fall of the best seed's loss that counts as progress
MIN_DIGIT_GAIN = 0.005  # gain of the best seed's mean per-digit accuracy that counts


class Plateau:
    """Progress on the trial's own curve: the best seed's exact match, its loss, or its
    per-digit accuracy improving. Tiny models sit at chance exact match for tens of thousands
    of steps while they learn one answer digit after another (grokking); the digits they get
    right show that progress long before a whole answer does."""

    def __init__(self, patience: int = SearchOptions.patience) -> None:
        self.patience = patience
        self.best_em, self.best_loss, self.since = -1.0, math.inf, 0
        self.best_digits = -1.0

    def update(self, em: float, loss: float, digits: float | None = None,
               lr_share: float | None = None) -> bool:
        """Feed one evaluation (`digits`: the best seed's mean per-answer-digit accuracy;
        `lr_share`: the lr now over the schedule's peak); True once `patience` evaluations in
        a row made no progress, not counting those of a seed that has learnt part of the task
        (LEARNT) while the lr is still high (HIGH_LR)."""
        # A measure's mark moves only when it has made progress (torch's ReduceLROnPlateau
        # threshold rule): a slow, steady fall then adds up to progress. A mark that followed
        # every evaluation never saw one: add10-tbukic-s5's 38 p, continued at 90%, stopped
        # after 30K steps while its loss fell 7% (0.3% an evaluation) in them.
        better_em = em > self.best_em + MIN_EM_GAIN
        better_loss = loss < self.best_loss * (1 - MIN_LOSS_GAIN)
        better_digits = digits is not None and digits > self.best_digits + MIN_DIGIT_GAIN
        if better_em:
            self.best_em = em
        if better_loss:
            self.best_loss = loss
        if better_digits:
            self.best_digits = digits
        better = better_em or better_loss or better_digits
        self.since = 0 if better else self.since + 1
        if lr_share is not None and lr_share > HIGH_LR and self.best_em >= LEARNT:
            self.since = 0
        return self.since >= self.patience


def patience_for(const: dict[str, Any], cfg: Any) -> int:
    """Evaluations without progress before a trial of schedule `cfg` stops: the search's
    `--patience`, or PATIENCE_SHARE of the schedule's evaluations when that is more."""
    given = int(const.get("patience") or SearchOptions.patience)
    share = math.ceil(PATIENCE_SHARE * cfg.steps / max(1, cfg.eval_every)) if cfg.steps else 0
    return max(given, share)


def lr_share(point: Any, cfg: Any) -> float | None:
    """The lr at an evaluation over the schedule's peak (None when either is unknown)."""
    lr, peak = getattr(point, "lr", None), getattr(cfg, "lr", None)
    return float(lr) / float(peak) if lr is not None and peak else None


def digit_accuracy(point: Any) -> float | None:
    """The best live seed's mean accuracy over answer positions at one evaluation."""
    rows = [sum(r) / len(r) for r in (point.position_acc or []) if r]
    rows = [x for x in rows if not math.isnan(x)]
    return max(rows) if rows else None


def _metrics(point: Any, result: Any, best_em: float, step0: int) -> dict[str, Any]:
    """One Tune result row; lists become em_seed0.. / loss_seed0.. (Tune wants scalars)."""
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


def run_trial(config: dict[str, Any]) -> None:
    """The Tune trainable. Reports after every evaluation; returns when the trial ends."""
    const = config.get(CONST_KEY, {})
    import torch

    # One trial must not spread over the cores its neighbours were promised.
    cpus = const.get("cpus_per_trial") or SearchOptions.cpus_per_trial
    torch.set_num_threads(max(1, int(float(cpus))))
    _maybe_fail(config, const)
    try:
        setups = [build_trial(c) for c in packs.proposals_of(config)]
    except (ConfigError, TypeError, ValueError) as exc:
        # An invalid sampled combination: an infeasible trial, reported once, not a crash,
        # so Optuna learns to avoid it.
        tune.report({"best_em": 0.0, "em": 0.0, "params": params_if_possible(config),
                     "step": 0, "examples": 0, "elapsed": 0.0, "invalid_config": 1,
                     "stop_reason": "invalid config", "error": str(exc)[:500]})
        return
    if packs.is_pack(config):
        _Pack(setups, const, config).run()
    else:
        _Trial(setups[0], const, config).run()


def gets_finishers(reached: bool, best: float, floor: float) -> bool:
    """Does a trial get the finishers? When it did not reach the target (confirmed by the full
    check) and its best held-out exact match is `floor` (finish.FINISH_FLOOR) or more, a
    held-out figure at or above the target included: the full check can fail it, or (before
    the held-out gate of sampled tasks was the target itself) never be asked; add10's 44 p at
    99.29% held-out was written off without them."""
    return not reached and best >= floor


CONTINUE_SEEDS = 8  # a "continue" round's members: data orders are cheap in a tiny pack
# A continued round's peak lr over the lr the last round's cosine ended at. Measured on add10's
# 44 p (entry 57, 99.34%; 4 members, Grokfast on, decay 1e-5, 1K-step evaluations): from
# 1e-3, the lr its cosine ended at, members swung between 1% and 99.8% from the first 1K
# steps on (with the recipe's 0.01 decay too); from 1e-4 all four climbed, never below 98%,
# to 99.7-100% held-out in 30K steps
CONTINUE_LR_SHARE = 0.1


def next_round(cfg: Any, best_index: int, start: Path | None = None,
               best_em: float | None = None) -> Any:
    """A near miss's next round (TrainConfig.near_miss_round). "retrain": the last round's best
    seed (`best_index` into its pack) alone, from its own initialisation (a member trains the
    same in any pack), twice as long. "continue": from `start`, the checkpoint of that seed's
    best weights (held-out exact match `best_em`), as up to CONTINUE_SEEDS members with new
    data streams, for `steps` more steps of a cosine from CONTINUE_LR_SHARE of the lr the last
    one ended at, curriculum and warmup off, its weight decay where its held drops had taken
    it (wd_drops_hold: the start passed them; a full decay would pull every weight of a
    finished model for the evaluation it takes to drop again)."""
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
                       restart_steps=0, phases=None)
    return replace(cfg, seed=cfg.seed + int(best_index), seeds=1, steps=2 * cfg.steps,
                   restart_steps=2 * cfg.restart_steps)


class _Trial:
    def __init__(self, setup: Any, const: dict[str, Any], config: dict[str, Any]) -> None:
        from arithsweep.core.evaluation.confirm import FullCheck

        self.setup, self.const = setup, const
        self.target = float(setup.train_cfg.target)
        self.check = FullCheck(setup.task, self.target)
        self.ts = TrialState(config)
        self.ts.row_fn, self.ts.best_fn = self._take_row, self._write_best
        saved = self.ts.extra().get("trial", {})
        # a restored trial continues its round mid-run, with the counters it had then
        self.best = float(saved.get("best", _legacy_best()))
        self.step0 = int(saved.get("step0", 0))
        self.seeds_trained = int(saved.get("seeds_trained", 0))
        self.seeds_reached = int(saved.get("seeds_reached", 0))
        self.round = int(saved.get("round", 0))
        self.round_cfg = saved.get("round_cfg")
        self.plateau_saved = saved.get("plateau")
        self.stop_reason = ""
        self.row: dict[str, Any] | None = None
        self.result: Any = None

    def _saved(self, cfg: Any) -> dict[str, Any]:
        return {"trial": {"best": self.best, "step0": self.step0, "round": self.round,
                          "round_cfg": cfg.to_dict(), "seeds_trained": self.seeds_trained,
                          "seeds_reached": self.seeds_reached, "reason": self.reason,
                          "plateau": vars(self.plateau)}}

    def run(self) -> None:
        from arithsweep.core.config import TrainConfig
        from arithsweep.core.training.population import train

        cfg = self.setup.train_cfg
        if self.round_cfg is not None:  # the round the restored state belongs to
            cfg = TrainConfig.from_dict(self.round_cfg)
            if cfg.init_from and self.ts.rounds_best.is_dir():  # its start, restored with it
                cfg = replace(cfg, init_from=str(self.ts.rounds_best))
        rounds = 1 + int(self.const.get("extra_rounds", SearchOptions.extra_rounds) or 0)
        # a first round within this of the target earns another
        near = float(self.const.get("near_miss", SearchOptions.near_miss))
        last, first = None, self.round
        best_round = None  # the round whose best member the finishers get
        finished: dict[str, Any] = {}
        tried = None  # the round the finishers last ran on
        for r in range(first, rounds):
            self.round = r
            if r > first:
                # kept whatever this round does (a retrained seed can lose its lottery, a
                # continued one fall back), and a continued round's start
                best_round.save_best(self.ts.rounds_best)
                start = self.ts.rounds_best if cfg.near_miss_round == "continue" else None
                cfg = next_round(cfg, last.best_seed, start, float(best_round.best_em))
            self.plateau = Plateau(patience_for(self.const, cfg))
            self.reason = ""
            if r == first and self.plateau_saved:
                vars(self.plateau).update(self.plateau_saved)
            run_cfg = replace(cfg, early_stop=False)
            ckpt = self.ts.checkpointing(cfg, lambda c=cfg: self._saved(c), resume=r == first,
                                         model_cfg=self.setup.model_cfg, cfgs=[run_cfg])
            result = train(self.setup.task, self.setup.model_cfg, run_cfg,
                           on_eval=self._on_eval, on_step=self.ts.on_step, checkpoint=ckpt)
            self.ts.flush()
            if r == first and not self.reason and result.history:  # a finished state, replayed
                self.reason = _saved_reason(ckpt)
            last = result
            if best_round is None or result.best_em >= best_round.best_em:
                best_round = result
            self.stop_reason = self.reason or result.stop_reason
            self.step0 += result.steps
            self.seeds_trained += 0 if r else cfg.seeds
            final = result.history[-1].exact_match if result.history else []
            hits = sum(1 for e in final if not math.isnan(e) and e >= self.target)
            # a later round trains a seed already counted: it adds one only if none was
            self.seeds_reached += hits if r == 0 else int(hits > 0 and not self.seeds_reached)
            if self.reason == "reached target" or self.best < self.target - near:
                break
            if r + 1 < rounds:  # the finishers first: minutes, where a round is a schedule
                self.result = best_round
                finished, tried = self._finish(best_round), best_round
                if self.reason == "reached target":
                    break
        # what a finisher's checkpoint saves (_write_best); the checkpoints written during a
        # later round keep the finished rounds' best through ts.rounds_best
        self.result = best_round
        if tried is not best_round:
            finished = self._finish(best_round)
        self.ts.close()
        row = {"best_em": max(self.best, 0.0), "params": int(self.setup.params),
               "step": self.step0, "stop_reason": self.stop_reason, "rounds": self.round + 1,
               "seeds_trained": self.seeds_trained,
               "seeds_reached": max(self.seeds_reached, int(self.reason == "reached target")),
               "elapsed": float(last.wall_time) if last is not None else 0.0, "done": 1,
               **finished}
        tune.report(row)

    def _finish(self, result: Any) -> dict[str, Any]:
        """The near-miss finishers (TrainConfig finish_*, core/training/finish.py) on the best
        member of a trial that ended below the target at finish.FINISH_FLOOR or above.
        If one takes it over the line (the same full check as `_on_eval`), the finished model
        goes to Tune as the trial's checkpoint and the trial has reached the target. Returns
        {"finished_by": ...} for the last row when the fields are on, else {}."""
        from arithsweep.core.training.finish import FINISH_FLOOR, finish_best, finishers_on
        from arithsweep.search.trial_state import STATE

        if result is None or not finishers_on(result.train_cfg):
            return {}
        if not gets_finishers(self.reason == "reached target", self.best, FINISH_FLOOR):
            return {"finished_by": None}
        done = finish_best(result, self.check)
        if done["finished_by"] is not None:
            self.reason = self.stop_reason = "reached target"
            self.best = max(self.best, float(result.best_em))
            self.result = result  # what _write_best saves
            self.row = {"best_em": self.best, "em": float(result.best_em),
                        "params": int(self.setup.params), "step": self.step0,
                        "full_em": self.check.value(result),
                        "finished_by": done["finished_by"]}
            # a replayed finished round writes no state: the checkpoint then holds best/ alone
            (self.ts.dir / STATE).mkdir(parents=True, exist_ok=True)
            self.ts.flush(with_state=True)
        return {"finished_by": done["finished_by"]}

    def _on_eval(self, point: Any, result: Any) -> bool:
        best = max(float(result.best_em), 0.0)
        row = _metrics(point, result, max(best, self.best), self.step0)
        stop = False
        if self.check.held_out_reached(result) and self.check.passes(result):
            self.reason, stop = "reached target", True
            row["full_em"] = self.check.value(result)
        elif self.plateau.update(point.best_em, row["loss"], digit_accuracy(point),
                                 lr_share(point, self.setup.train_cfg)):
            self.reason, stop = "plateau", True
        if best > self.best:
            self.best, self.ts.improved = best, True
        self.row, self.result = row, result
        return stop

    def _take_row(self) -> dict[str, Any] | None:
        row, self.row = self.row, None
        return row

    def _write_best(self, d: Path) -> None:
        """best/: this round's best member, or the finished rounds' best where that is better
        (add10-tbukic-s1's 38 p: 91% in round 1, its checkpoint held round 2's 0.07%)."""
        cur = self.result.best_em if self.result is not None and self.result.best_state else None
        if self.ts.rounds_best_em() > (-1.0 if cur is None else cur):
            shutil.copytree(self.ts.rounds_best, d / "best")
        elif cur is not None:
            self.result.save_best(d / "best")


def _saved_reason(ckpt: Any) -> str:
    """The stop reason a finished, restored round had reached (its on_eval ran before)."""
    state = ckpt.resume
    return "" if state is None else state.doc.get("extra", {}).get("trial", {}).get("reason", "")


class _Pack:
    """A pack: proposals of one shape trained together, each judged on its own curve."""

    def __init__(self, setups: list[Any], const: dict[str, Any],
                 config: dict[str, Any]) -> None:
        import copy

        from arithsweep.core.evaluation.confirm import FullCheck

        self.setups, self.const = setups, const
        self.target = float(setups[0].train_cfg.target)
        check = FullCheck(setups[0].task, self.target)  # its problems are built once
        self.checks = [check] + [copy.copy(check) for _ in setups[1:]]
        for c in self.checks[1:]:
            c.checked = {}  # the cache is per proposal (keyed by its best step)
        self.plateaus = [Plateau(patience_for(const, s.train_cfg)) for s in setups]
        self.ts = TrialState(config)
        self.ts.row_fn, self.ts.best_fn = self._take_row, self._write_best
        saved = self.ts.extra().get("pack", {})
        self.best = list(saved.get("best", [_legacy_best(f"p{j}") for j in range(len(setups))]))
        self.reasons = list(saved.get("reasons", [""] * len(setups)))
        for p, v in zip(self.plateaus, saved.get("plateaus", [])):
            vars(p).update(v)
        self.results: dict[int, Any] = {}  # proposal -> its TrainResult (same object always)
        self.rows: dict[int, dict[str, Any]] = {}  # this evaluation's rows, not yet reported

    def run(self) -> None:
        from arithsweep.core.training.population import train_population

        cfgs = [replace(s.train_cfg, early_stop=False) for s in self.setups]
        extra = lambda: {"pack": {"best": self.best, "reasons": self.reasons,  # noqa: E731
                                  "plateaus": [vars(p) for p in self.plateaus]}}
        results = train_population(self.setups[0].task, self.setups[0].model_cfg, cfgs,
                                   on_eval=self._on_eval, on_step=self.ts.on_step,
                                   checkpoint=self.ts.checkpointing(
                                       cfgs[0], extra, model_cfg=self.setups[0].model_cfg,
                                       cfgs=cfgs))
        self.ts.flush()
        finished = self._finish(results)
        self.ts.close()
        row = self._row({"done": 1, "stop_reason": "pack done", "rounds": 1,
                         "step": max(r.steps for r in results),
                         "elapsed": max(r.wall_time for r in results)})
        for j, (cfg, r) in enumerate(zip(cfgs, results)):
            final = r.history[-1].exact_match if r.history else []
            reached = sum(1 for e in final if not math.isnan(e) and e >= self.target)
            reason = self.reasons[j] or r.stop_reason
            row.update({packs.key(j, "stop_reason"): reason, packs.key(j, "rounds"): 1,
                        packs.key(j, "step"): int(r.steps),
                        packs.key(j, "elapsed"): float(r.wall_time),
                        packs.key(j, "seeds_trained"): int(cfg.seeds),
                        packs.key(j, "seeds_reached"): max(reached,
                                                           int(reason == "reached target"))})
            if j in finished:
                row[packs.key(j, "finished_by")] = finished[j]
        tune.report(row)

    def _finish(self, results: list[Any]) -> dict[int, str | None]:
        """The near-miss finishers on each proposal, by `_Trial._finish`'s rule: one that ended
        below the target at finish.FINISH_FLOOR or above gets them, and one they take over
        the line is reported with its finished model in one more checkpoint. Returns each
        proposal's finisher (None: none took it over) where its fields turn them on."""
        from arithsweep.core.training.finish import FINISH_FLOOR, finish_best, finishers_on
        from arithsweep.search.trial_state import STATE

        out: dict[int, str | None] = {}
        for j, r in enumerate(results):
            if not finishers_on(r.train_cfg):
                continue
            out[j] = None
            if not gets_finishers(self.reasons[j] == "reached target", self.best[j], FINISH_FLOOR):
                continue
            out[j] = finish_best(r, self.checks[j])["finished_by"]
            if out[j] is not None:
                self.reasons[j] = "reached target"
                self.best[j] = max(self.best[j], float(r.best_em))
                self.results[j] = r  # what _write_best saves
                self.rows[j] = {"best_em": self.best[j], "em": float(r.best_em),
                                "step": int(r.steps), "examples": int(r.examples),
                                "elapsed": float(r.wall_time),
                                "full_em": self.checks[j].value(r), "finished_by": out[j]}
        if self.rows:  # a replayed finished pack writes no state: best/ alone then
            (self.ts.dir / STATE).mkdir(parents=True, exist_ok=True)
            self.ts.flush(with_state=True)
        return out

    def _row(self, extra: dict[str, Any]) -> dict[str, Any]:
        """Shared keys plus every proposal's running best (readers need it in every row)."""
        row = {"params": int(self.setups[0].params), "best_em": max(0.0, *self.best),
               "n_proposals": len(self.setups), **extra}
        row.update({packs.key(j, "best_em"): max(b, 0.0) for j, b in enumerate(self.best)})
        return row

    def _on_eval(self, j: int, point: Any, result: Any) -> bool:
        if j in self.rows:  # a new evaluation began before the last one was reported
            self.ts.flush()
        self.results[j] = result
        best = max(float(result.best_em), 0.0)
        row = _metrics(point, result, max(best, self.best[j]), 0)
        stop = False
        if self.checks[j].held_out_reached(result) and self.checks[j].passes(result):
            self.reasons[j], stop = "reached target", True
            row["full_em"] = self.checks[j].value(result)
        elif self.plateaus[j].update(point.best_em, row["loss"], digit_accuracy(point),
                                     lr_share(point, self.setups[j].train_cfg)):
            self.reasons[j], stop = "plateau", True
        if best > self.best[j]:
            self.best[j], self.ts.improved = best, True
        self.rows[j] = row
        return stop

    def _take_row(self) -> dict[str, Any] | None:
        """One Tune row for the evaluation just made, every proposal's row in it."""
        if not self.rows:
            return None
        rows, self.rows = self.rows, {}
        row = self._row({k: max(r[k] for r in rows.values())
                         for k in ("step", "examples", "elapsed")})
        row["em"] = max(r["em"] for r in rows.values())
        for j, r in rows.items():
            row.update({packs.key(j, k): v for k, v in r.items() if k != "params"})
        return row

    def _write_best(self, d: Path) -> None:
        # every proposal's best so far: Tune keeps only the latest checkpoint
        for j, r in self.results.items():
            if r.best_state:
                r.save_best(d / f"p{j}" / "best")


def _legacy_best(sub: str = "") -> float:
    """A restored checkpoint without a training state (a search made before states existed)
    retrains from step 0 but keeps its earlier best: the exact match in its best/config.json
    (-1 if there is none)."""
    import json

    ckpt = tune.get_checkpoint()
    if ckpt is None:
        return -1.0
    with ckpt.as_directory() as d:
        try:
            with open(Path(d) / sub / "best" / "config.json") as f:
                return float(json.load(f)["metrics"]["eval_exact_match"])
        except (OSError, ValueError, KeyError, TypeError):
            return -1.0


def _maybe_fail(config: dict[str, Any], const: dict[str, Any]) -> None:
    """Fault injection for tests: `fail_when` = {"model.d_model": 12} raises in matching trials.

    Lets the test suite prove that a crashing trial is recorded as failed without ending the
    search; set only through SearchOptions.fail_when, never by a search space.
    """
    cond = const.get("fail_when")
    if cond and all(config.get(k) == v for k, v in cond.items()):
        raise RuntimeError(f"injected failure for {cond}")
