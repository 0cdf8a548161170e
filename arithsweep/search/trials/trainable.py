"""The Ray Tune function trainable: one search trial = one shape, one or many proposals of it.

Runs inside a Ray worker. A trial's proposals (one, or a pack of them: `packs`) train
their first round together, as one population (`core.training.population.train_population`);
each is judged on its own curve by the rules of `rounds` (reached, plateau, budget), and
a near miss gets the finishers and its next rounds there, trained alone, one proposal after
another. A single proposal is a pack of one: the same rules, the same code. Every evaluation is
reported to Tune (`tune.report`; a pack's under `p<j>/` keys, `packs.key`), with a checkpoint
(the best model(s) and the whole training state, see `state`) whenever a best improves
and every `checkpoint_every` steps or about `checkpoint_seconds`; a trial Tune restores, or the
replay of a proposal the deadline cut (`search.trials.replay`, alone or from a pack), continues
mid-run from it.

Workers never open the leaderboard or MLflow: all bookkeeping happens on the driver. Not run
by hand; `arithsweep.search.driver.run_search` passes `run_trial` to the Tuner (by reference:
keep it here, or saved searches cannot be resumed).
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from ray import tune

from arithsweep.core.errors import ConfigError
from arithsweep.search.options import SearchOptions
from arithsweep.search.trials import cores, packs
from arithsweep.search.trials.configs import CONST_KEY, build_trial, params_if_possible, seeds_trial
from arithsweep.search.trials.rounds import BELOW_FLOOR, REACHED, Proposal, gets_finishers
from arithsweep.search.trials.state import STATE, TrialState


def run_trial(config: dict[str, Any]) -> None:
    """The Tune trainable. Reports after every evaluation; returns when the trial ends."""
    const = config.get(CONST_KEY, {})
    import torch

    # One trial must not spread over the cores its neighbours were promised; a trial alone
    # may have been lent the spare ones (search.trials.cores).
    base = float(const.get("cpus_per_trial") or SearchOptions.cpus_per_trial)
    threads = cores.trial_cpus(base)
    torch.set_num_threads(threads)
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
    TrialRunner(setups, const, config, cpus=threads, grown=threads > base).run()


class TrialRunner:
    """A trial's proposals through their rounds: the training calls, the Tune rows (plain
    keys for a single proposal, `p<j>/` keys in a pack) and the checkpoints' best models."""

    def __init__(self, setups: list[Any], const: dict[str, Any], config: dict[str, Any],
                 cpus: int = 1, grown: bool = False) -> None:
        from arithsweep.core.evaluation.confirm import FullCheck

        self.const, self.pack = const, packs.is_pack(config) or len(setups) > 1
        self.ts = TrialState(config, cpus=cpus, grown=grown)
        self.ts.row_fn, self.ts.best_fn = self._take_row, self._write_best
        items = packs.proposals_of(config)  # (a runner built by hand may name no trials)
        ids = ([seeds_trial(c) for c in items] if len(items) == len(setups)
               else list(range(len(setups))))
        saved, self.busy = self.ts.counters(ids)  # busy: the proposals the state trains
        check = FullCheck(setups[0].task, float(setups[0].train_cfg.target))  # built once
        self.proposals = []
        for j, (s, mine, seeds_of) in enumerate(zip(setups, saved, ids)):
            if j:  # the full check's cache is per proposal (keyed by its best step)
                check = copy.copy(check)
                check.checked = {}
            if "best" not in mine:  # a checkpoint without a state: its best/config.json
                mine = {**mine, "best": self.ts.legacy_best(self._sub(j))}
            self.proposals.append(Proposal(s, check, const, mine,
                                           self.ts.rounds_best / self._sub(j), seeds_of))
        self.rows: dict[int, dict[str, Any]] = {}  # this evaluation's rows, not yet reported

    def _sub(self, j: int) -> str:
        """Proposal j's folder in a checkpoint ("" alone, "p<j>" in a pack)."""
        return f"p{j}" if self.pack else ""

    def run(self) -> None:
        rounds = 1 + int(self.const.get("extra_rounds", SearchOptions.extra_rounds) or 0)
        # a round within this of the target earns another
        near = float(self.const.get("near_miss", SearchOptions.near_miss))
        group = self.busy or [j for j, p in enumerate(self.proposals) if not p.done]
        first = True
        while group:
            # a path's proposals (all or none: a path is part of the pack key) train it as
            # their first round, and a near miss's new ticket again; its other later rounds
            # continue its best, from configs without a path (rounds.next_round)
            path = all(self.proposals[j].cfg.path for j in group)
            results = self._train_path(group) if path else self._train(group, resume=first)
            for j, result in zip(group, results):
                self.proposals[j].end_round(result, rounds, near, self._finish)
            # a near miss's next rounds: alone, one proposal after another
            group, first = [j for j, p in enumerate(self.proposals) if not p.done][:1], False
        self.ts.close()
        tune.report(self._last_row())

    def _train(self, group: list[int], resume: bool) -> list[Any]:
        """One training call: proposals `group` together, each in its own round."""
        from arithsweep.core.training.population import train_population

        self.busy = group
        cfgs = [replace(self.proposals[j].cfg, early_stop=False) for j in group]
        setup = self.proposals[group[0]].setup
        ckpt = self.ts.checkpointing(cfgs[0], self._saved, resume=resume,
                                     model_cfg=setup.model_cfg, cfgs=cfgs)
        if ckpt.resume is None:  # trains from step 0: nothing stopped it yet
            for j in group:
                self.proposals[j].reason = ""
        results = train_population(
            setup.task, setup.model_cfg, cfgs, on_step=self.ts.on_step, checkpoint=ckpt,
            on_eval=lambda i, point, result: self._on_eval(group[i], point, result))
        self.ts.flush()
        return results

    def _train_path(self, group: list[int]) -> list[Any]:
        """The proposals' paths (core.training.path), every phase one pack, its states in
        the trial's state folder (so every Tune checkpoint carries them, and a restored trial
        continues mid-phase). The plateau rule runs in the last phase only; inside earlier
        ones a plateau could only end a phase that its steps end anyway, and a proposal whose
        best member stays below the path's floor (rounds.below_floor) is given up."""
        from arithsweep.core.training.path import (
            path_steps,
            phase_configs,
            train_paths,
        )
        from arithsweep.core.training.resume import latest_state
        from arithsweep.search.trials.plateau import Plateau, patience_for

        self.busy = group
        cfgs = [self.proposals[j].cfg for j in group]
        setup = self.proposals[group[0]].setup
        last = len(cfgs[0].path) - 1

        phase_cfgs: dict[tuple[int, int], Any] = {}
        starts: dict[tuple[int, int], int] = {}  # (proposal, phase) -> its first step

        def ckpt_for(d):
            ckpt = self.ts.checkpointing(cfgs[0], self._saved, resume=False)
            ckpt.dir, ckpt.resume = d, latest_state(d)
            return ckpt

        def on_eval(i: int, jj: int, point: Any, result: Any) -> bool | str:
            j = group[jj]
            p = self.proposals[j]
            if (j, i) not in phase_cfgs:  # built once a phase, not at every evaluation
                phase_cfgs[j, i] = phase_configs(p.cfg, i, None)[0]
                starts[j, i] = path_steps(p.cfg, i)  # on the path's steps
            phase_cfg = phase_cfgs[j, i]
            if p.phase != i:  # a new phase: its own patience, counted afresh
                p.phase = i
                p.plateau = Plateau(patience_for(self.const, phase_cfg))
            stop = self._on_eval(j, point, result, phase_cfg, plateau=i == last,
                                 phase_step=point.step - starts[j, i])
            return stop if not stop or p.reason in (REACHED, BELOW_FLOOR) else "phase"

        results = train_paths(setup.task, setup.model_cfg, cfgs,
                              self.ts.dir / STATE / self._path_states(group), on_eval,
                              self.ts.on_step,
                              ckpt_for)
        self.ts.flush()
        return results

    def _path_states(self, group: list[int]) -> str:
        """The path states' folder of the group's round: a new ticket's path is its own."""
        from arithsweep.core.training.path import PATH_STATES

        rnd = self.proposals[group[0]].round
        return PATH_STATES if rnd == 0 else f"{PATH_STATES}-r{rnd}"

    def _saved(self) -> dict[str, Any]:
        """The trial's own state, saved with every training state (JSON)."""
        return {"proposals": [p.saved() for p in self.proposals], "busy": self.busy}

    def _on_eval(self, j: int, point: Any, result: Any, phase_cfg: Any = None,
                 plateau: bool = True, phase_step: int | None = None) -> bool:
        if j in self.rows:  # a new evaluation began before the last one was reported
            self.ts.flush()
        self.rows[j], stop, improved = self.proposals[j].evaluate(point, result, phase_cfg,
                                                                  plateau, phase_step)
        self.ts.improved |= improved
        return stop

    def _finish(self, p: Proposal) -> dict[str, Any]:
        """The near-miss finishers (TrainConfig finish_*, core/training/finish.py) on every
        member of `p`'s best round from finish.member_floor (95% of the target) up, best
        first, when it ended below the target. If one takes a member over the line (the same
        full check as its evaluations), the finished model goes to Tune in one more
        checkpoint and the proposal has reached the target. Returns {"finished_by": ...,
        "finished_members": n} for its last row when its fields turn them on, else {}."""
        from arithsweep.core.training.finish import finish_members, finishers_on, member_floor

        result = p.result
        if result is None or not finishers_on(result.train_cfg):
            return {}
        if not gets_finishers(p.reason == REACHED, p.best, member_floor(p.target)):
            return {"finished_by": None}
        done = finish_members(result, p.check)
        said = {"finished_by": done["finished_by"], "finished_members": len(done["members"])}
        if done["finished_by"] is not None:
            self.rows[self.proposals.index(p)] = p.mark_finished(result, done["finished_by"])
            p.finished = said  # before the flush: best/'s meta says it (_write_best)
            # a replayed finished round writes no state: the checkpoint then holds best/ alone
            (self.ts.dir / STATE).mkdir(parents=True, exist_ok=True)
            self.ts.flush(with_state=True)
        return said

    def _shared(self, extra: dict[str, Any]) -> dict[str, Any]:
        """A pack row's shared keys plus every proposal's running best (readers need it in
        every row)."""
        bests = [p.best for p in self.proposals]
        row = {"params": int(self.proposals[0].setup.params), "best_em": max(0.0, *bests),
               "n_proposals": len(self.proposals), **extra}
        row.update({packs.key(j, "best_em"): max(b, 0.0) for j, b in enumerate(bests)})
        return row

    def _take_row(self) -> dict[str, Any] | None:
        """One Tune row for the evaluation just made, every proposal's row in it."""
        if not self.rows:
            return None
        rows, self.rows = self.rows, {}
        if not self.pack:
            return rows[0]
        row = self._shared({k: max(r[k] for r in rows.values())
                            for k in ("step", "examples", "elapsed")})
        row["em"] = max(r["em"] for r in rows.values())
        for j, r in rows.items():
            row.update({packs.key(j, k): v for k, v in r.items() if k != "params"})
        return row

    def _last_row(self) -> dict[str, Any]:
        lasts = [p.last_row() for p in self.proposals]
        if not self.pack:
            return lasts[0]
        row = self._shared({"done": 1, "stop_reason": "pack done",
                            **{k: max(r[k] for r in lasts) for k in ("rounds", "step",
                                                                      "elapsed")}})
        for j, r in enumerate(lasts):
            row.update({packs.key(j, k): v for k, v in r.items() if k not in ("params", "done")})
        return row

    def _write_best(self, d: Path) -> None:
        """Each proposal's best/ (p<j>/best in a pack; Tune keeps only the latest checkpoint):
        its round's best member, or its finished rounds' best where that is better
        (add10-tbukic-s1's 38 p: 91% in round 1, its checkpoint held round 2's 0.07%)."""
        for j, p in enumerate(self.proposals):
            dest = d / self._sub(j) / "best"
            cur = p.result.best_em if p.result is not None and p.result.best_state else None
            if self.ts.rounds_best_em(p.rounds_best) > (-1.0 if cur is None else cur):
                shutil.copytree(p.rounds_best, dest)
            elif cur is not None:
                # a finished member says so: its retrain is the whole pack's, whose first seed
                # the finishers drew from (leaderboard.verify.reproduce_command)
                by = (p.finished or {}).get("finished_by")
                p.result.save_best(dest, {"finished_by": by} if by else None)


def _maybe_fail(config: dict[str, Any], const: dict[str, Any]) -> None:
    """Fault injection for tests: `fail_when` = {"model.d_model": 12} raises in matching trials.

    Lets the test suite prove that a crashing trial is recorded as failed without ending the
    search; set only through SearchOptions.fail_when, never by a search space.
    """
    cond = const.get("fail_when")
    if cond and all(config.get(k) == v for k, v in cond.items()):
        raise RuntimeError(f"injected failure for {cond}")
