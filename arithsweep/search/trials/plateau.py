"""The plateau rule: when a search trial has stopped making progress on its own curve.

A trial stops on its own curve, never because a model of another size is ahead of it. One of
its rules is the plateau: for `patience` evaluations (or a tenth of its schedule's, if more) no
seed improved its exact match, its per-digit accuracy or its loss. A tiny model at chance whose
answer digits are being learnt one by one, or whose loss still falls, keeps training; one whose
best seed has learnt a tenth of the problems keeps training while the lr is above half its peak
(it oscillates until the schedule's low-lr end settles it). Every proposal of a trial, alone or
in a pack, has its own `Plateau` per round (`search.trials.rounds.Proposal`).

Runs in a Ray worker; pure Python, so it is also tried by hand:

    from arithsweep.search.trials.plateau import Plateau
    p = Plateau(patience=3)
    [p.update(0.0, 1.7) for _ in range(4)]    # [False, False, False, True]
"""

from __future__ import annotations

import math
from typing import Any

from arithsweep.search.options import SearchOptions

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
               lr_share: float | None = None, saturated: bool = False) -> bool:
        """Feed one evaluation (`digits`: the best seed's mean per-answer-digit accuracy;
        `lr_share`: the lr now over the schedule's peak); True once `patience` evaluations in
        a row made no progress, not counting those of a seed that has learnt part of the task
        (LEARNT) while the lr is still high (HIGH_LR), nor `saturated` ones: every problem of
        the evaluation right, where the target asks for more than it can show (five or six
        nines against 4,096 problems), so flat is all it can read; the schedule's end and its
        polish decide there (a mix6 trial at six nines was cut 2K steps before its polish)."""
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
        if (lr_share is not None and lr_share > HIGH_LR and self.best_em >= LEARNT) or saturated:
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


def saturated(em: float, result: Any, target: float) -> bool:
    """Is the best seed right on every problem of an evaluation set too small to show the
    target (target above 1 - 1/size: five nines against 4,096 problems)?"""
    size = int(getattr(result, "eval_size", 0) or 0)
    return size > 0 and em >= 1.0 and target > 1.0 - 1.0 / size


def digit_accuracy(point: Any) -> float | None:
    """The best live seed's mean accuracy over answer positions at one evaluation."""
    rows = [sum(r) / len(r) for r in (point.position_acc or []) if r]
    rows = [x for x in rows if not math.isnan(x)]
    return max(rows) if rows else None
