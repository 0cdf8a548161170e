"""What `arithsweep train`, `ask` and `params` do, as plain functions returning JSON-safe dicts.

The CLI parses and prints; these functions do the work, so they are also the Python API:

    from arithsweep.core.api import train_job
    from arithsweep.core.overrides import build_configs
    task, m, t = build_configs("add3", None, None, {})
    print(train_job(task, m, t, out="runs/add3")["final_exact_match"])
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task, get_task
from arithsweep.core.errors import ArithsweepError, CheckpointError, ConfigError
from arithsweep.core.evaluation.confirm import FullCheck
from arithsweep.core.evaluation.evaluate import greedy_decode
from arithsweep.core.model.checkpoint import load_checkpoint
from arithsweep.core.model.model import ModelConfig, count_params, param_breakdown
from arithsweep.core.training.path import PHASES_DIR, path_state
from arithsweep.core.training.population import train
from arithsweep.core.training.resume import STATE_DIR, Checkpointing, RunState, latest_state
from arithsweep.core.training.train import EvalPoint, TrainResult


def _progress(enabled: bool):
    """A Rich progress bar on stderr when it is a terminal; None (silent) when piped."""
    if not enabled or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total} steps"),
                    TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


def train_job(
    task: Task,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    out: str | Path,
    progress: bool = True,
    log: str | Path | None = None,
    resume: RunState | None = None,
) -> dict[str, Any]:
    """Train, check the best seed on the full problem set (or a large held-out sample), save.
    `log`: a file that gets one line per evaluation (step, elapsed, every seed's exact match).
    The run's whole state is written to `out`/resume as it trains; `resume` (`resume_job`)
    continues from one such state, and ends as the uninterrupted run would have.

    Early stopping is confirmed on that full set: when the held-out evaluation says a seed has
    reached the target, the seed is checked on every problem (or 200k held-out ones) and
    training stops only if it passes there too. A best-of-K evaluation on a few thousand
    problems is optimistic (the winner's curse), and "reached target" must mean the real thing.
    """
    if train_cfg.init_from and resume is None:
        from arithsweep.core.model.checkpoint import load_checkpoint
        from arithsweep.core.training.resume import is_state_dir, latest_state

        # a bad start fails before training, not after
        if is_state_dir(train_cfg.init_from):
            latest_state(train_cfg.init_from, continuing=False)  # only its weights start this
        else:
            load_checkpoint(train_cfg.init_from)
    bar = _progress(progress)
    handle = None
    # the stop rule the search uses too; on train_digits-long operands only, if capped
    check = FullCheck(task, train_cfg.target, train_cfg.train_digits)
    what = check.what

    def full_check(r: TrainResult) -> float:
        if bar is not None and r.best_step not in check.checked:
            bar.update(handle, status=f"checking the best seed on {what}")
        return check.value(r)

    def on_step(step: int, total: int) -> None:
        if bar is not None and step % 10 == 0:
            bar.update(handle, completed=step, total=total)

    def on_eval(p: EvalPoint, r: TrainResult) -> bool:
        if log is not None:
            with open(log, "a") as f:  # opened per line: a reader sees each one at once
                f.write(f"step {p.step} {p.elapsed:.0f}s best {p.best_em:.4f} seeds "
                        f"{' '.join(f'{e:.3f}' for e in p.exact_match)} "
                        f"loss {min(p.loss):.4f}\n")
        if bar is not None:
            em = " ".join(f"{e:.3f}" for e in p.exact_match)
            bar.update(handle, completed=p.step,
                       status=f"best EM {p.best_em:.4f}  seeds [{em}]  loss {min(p.loss):.4f}")
        if train_cfg.early_stop and check.held_out_reached(r):
            return full_check(r) >= train_cfg.target
        return False

    t0 = time.perf_counter()
    out = Path(out).absolute()
    # the job as given (the loop trains with early_stop off: this job's on_eval stops it)
    job = {"task": task.name, "format": task.fmt.name, "model": model_cfg.to_dict(),
           "train": train_cfg.to_dict()}
    if log is not None:
        log = Path(log).absolute()
        job["log"] = str(log)  # a resumed run goes on writing the same curve
        if resume is not None:
            _cut_log(log, resume.doc.get("path_step", resume.step))
    ckpt = Checkpointing(out / STATE_DIR, train_cfg.checkpoint_every,
                         train_cfg.checkpoint_seconds, extra=lambda: {"job": job},
                         resume=resume)
    if bar is not None:
        bar.start()
        handle = bar.add_task(f"{task.name} x{train_cfg.seeds} seeds",
                              total=_total_steps(train_cfg), status="")
        if resume is not None:
            bar.update(handle, completed=resume.step)
    try:
        if train_cfg.path:  # a frontier recipe's whole path, each phase in out/phases/
            from arithsweep.core.training.path import train_path

            result = train_path(task, model_cfg, train_cfg, out,
                                on_eval=lambda _i, _j, p, r: on_eval(p, r), on_step=on_step,
                                extra=lambda: {"job": job})
        else:
            result = train(task, model_cfg, replace(train_cfg, early_stop=False),
                           on_eval=on_eval, on_step=on_step, checkpoint=ckpt)
    finally:
        if bar is not None:
            bar.stop()
    result.train_cfg = train_cfg  # the recipe as given, so --config reproduces this run
    if result.stop_reason == "stopped by caller":
        result.stop_reason = f"reached target on {what}"
    # the loop's own seconds: the full checks and state writes inside it are not training
    train_s = result.train_seconds
    final = full_check(result)
    # near-miss finishers (TrainConfig finish_*; core/training/finish.py) on the best seed,
    # judged by the same full check; the keys appear only when a finisher field is on
    from arithsweep.core.training.finish import finish_best, finishers_on

    finished: dict[str, Any] = {}
    if finishers_on(train_cfg):
        finished = {"finished_by": None, "finishers": []}
        if final < train_cfg.target:
            finished = finish_best(result, check)
            final = full_check(result)
    last = result.history[-1] if result.history else None
    # seeds whose last held-out exact match reached the target (the best one is confirmed
    # on the full set): the success rate a user needs to reproduce this architecture
    reached_n = sum(1 for e in (last.exact_match if last else []) if e >= train_cfg.target)
    reached_n = max(reached_n, int(final >= train_cfg.target))
    if train_cfg.path:  # which phase's member the checkpoint holds
        finished["path_phase"] = result.best_phase
    sha = result.save_best(out, meta={"final_exact_match": final, "final_problems": what,
                                      "seeds_reached": reached_n,
                                      "seeds_trained": train_cfg.seeds,
                                      **{k: v for k, v in finished.items() if k != "finishers"}})
    return {
        "task": task.name, "format": task.fmt.name, "params": result.params,
        "architecture": model_cfg.summary(), "seeds": train_cfg.seeds,
        "seed_exact_match": last.exact_match if last else [],
        "failed_seeds": [i for i, f in enumerate(result.failed) if f],
        "best_seed": train_cfg.seed + result.best_seed, "eval_exact_match": result.best_em,
        "final_exact_match": final, "final_problems": what, "target": train_cfg.target,
        "reached_target": final >= train_cfg.target,
        "steps": result.steps, "stop_reason": result.stop_reason,
        "seeds_reached": reached_n,
        "train_seconds": round(train_s, 2),
        "check_seconds": round(check.seconds, 2),
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "examples_per_s": round(result.examples_per_s),
        "device": result.device, "layout": result.layout, "layout_why": result.layout_why,
        "checkpoint": str(out), "sha256": sha,
        "model": model_cfg.to_dict(), "train": train_cfg.to_dict(), **finished,
    }


def resume_state(out: str | Path) -> RunState:
    """The newest training state of the `train` run in folder `out`; a CheckpointError naming
    why there is none to resume (or that the run already finished)."""
    out = Path(out).expanduser().absolute()
    if not out.is_dir():
        raise CheckpointError(f"--resume {out}: no such run folder")
    state = latest_state(out / STATE_DIR)
    if state is None and (out / PHASES_DIR).is_dir():  # a path: its newest phase's state
        state = path_state(out)
    if state is None:
        raise CheckpointError(f"--resume {out}: no training state in {out / STATE_DIR} "
                              f"(a run writes one every checkpoint_every steps)")
    if "job" not in state.doc.get("extra", {}):
        raise CheckpointError(f"--resume {out}: that state was not written by `arithsweep "
                              f"train` (a search trial resumes with `search --resume`)")
    return state


def _total_steps(cfg: TrainConfig) -> int:
    if cfg.path:
        from arithsweep.core.training.path import path_steps

        return path_steps(cfg)
    return cfg.main_steps


def resume_job(out: str | Path, progress: bool = True,
               log: str | Path | None = None) -> dict[str, Any]:
    """Continue the killed `arithsweep train` run in `out` from its last state, appending to its
    own `--log` unless `log` names another file. A finished run raises AlreadyFinished; a state
    whose configs no longer validate, a ConfigError."""
    state = resume_state(out)
    job = state.doc["extra"]["job"]
    if state.finished and (Path(out) / "config.json").is_file():
        r = state.doc["results"][0]
        raise AlreadyFinished(f"{Path(out).absolute()}: this run already finished at step "
                              f"{state.doc.get('path_step', r['steps'])} ({r['stop_reason']}); "
                              f"its best checkpoint is that "
                              f"folder")
    try:
        task = get_task(job["task"], job["format"])
        model_cfg = ModelConfig.from_dict(job["model"])
        train_cfg = TrainConfig.from_dict(job["train"])
    except (ArithsweepError, TypeError, KeyError) as e:
        raise ConfigError(f"--resume {out}: its configuration no longer validates: {e}") from None
    if log is None:
        log = job.get("log")
    return train_job(task, model_cfg, train_cfg, out, progress=progress, log=log, resume=state)


def _cut_log(log: Path, step: int) -> None:
    """Drop the log's lines past `step`: the resumed run writes them again, so the file reads
    as one uninterrupted run."""
    if not log.is_file():
        return
    lines = log.read_text().splitlines(keepends=True)
    keep = [ln for ln in lines if not (ln.startswith("step ") and ln.split()[1].isdigit()
                                       and int(ln.split()[1]) > step)]
    if len(keep) != len(lines):
        log.write_text("".join(keep))


class AlreadyFinished(ArithsweepError):
    """`train --resume` of a run that has nothing left to do."""


def finish_job(checkpoint: str | Path, out: str | Path,
               overrides: dict[str, Any]) -> dict[str, Any]:
    """The near-miss finishers (core/training/finish.py) on a saved checkpoint: its own train
    config with `overrides` (finish_rounds, finish_cmaes_evals, ...), judged, as `train` judges
    them, on the run's held-out evaluation set and its full check's problems (never the
    verification suite); the result is written to `out` as a new checkpoint."""
    from arithsweep.core.model.checkpoint import keep_finish_start, save_checkpoint
    from arithsweep.core.model.model import ArithTransformer
    from arithsweep.core.overrides import split_overrides
    from arithsweep.core.training.finish import finish, finishers_on
    from arithsweep.core.training.train import ONE_KIND  # on either finish_layout (below)

    ck = load_checkpoint(checkpoint)
    m_over, t_over = split_overrides(overrides)
    if m_over:
        raise ConfigError(f"finish changes no model field: {', '.join(sorted(m_over))}")
    base = ck.train_cfg.to_dict() if ck.train_cfg is not None else {}
    cfg = TrainConfig.from_dict({**base, **t_over})
    if not finishers_on(cfg):
        raise ConfigError("no finisher is on: --set finish_rounds=N and/or "
                          "--set finish_cmaes_evals=N")
    check = FullCheck(ck.task, cfg.target, cfg.train_digits)
    before = check.score(ck.model)
    done = finish(ck.task, ck.model_cfg, cfg, ck.model.member_state(0),
                  lambda m: check.score(m) >= cfg.target)
    model = ArithTransformer.from_member_state(ck.model_cfg, done.state)
    final = check.score(model)
    sha = save_checkpoint(out, model, ck.task, 0, cfg, {"eval_exact_match": done.held_out},
                          {**ck.meta, "finished_from": ck.sha256,
                           "finished_by": done.finished_by, "final_exact_match": final,
                           # CMA-ES's covariance algebra runs in numpy, whose BLAS picks its
                           # kernels by CPU: no test holds a finish's bits across machines
                           "final_problems": check.what, "repeats": ONE_KIND,
                           # with start/ below: `finish start --set ...` makes it again
                           "finish_set": dict(t_over)})
    keep_finish_start(ck.path, out)
    return {"checkpoint": str(Path(out).absolute()), "source": str(ck.path),
            "source_sha256": ck.sha256, "task": ck.task.name, "params": ck.params,
            "held_out_before": done.held_out_before, "held_out": done.held_out,
            "final_before": before, "final_exact_match": final, "final_problems": check.what,
            "target": cfg.target, "reached_target": final >= cfg.target,
            "finished_by": done.finished_by, "finishers": done.records, "sha256": sha}


def ask_job(checkpoint: str | Path, problems: list[str]) -> dict[str, Any]:
    """The model's greedy answer to each problem, the true answer, right or wrong."""
    ck = load_checkpoint(checkpoint)
    task = ck.task
    parsed = [task.parse_problem(p) for p in problems]
    a = torch.tensor([p[0] for p in parsed], dtype=torch.long)
    b = torch.tensor([p[1] for p in parsed], dtype=torch.long)
    op = torch.tensor([p[2] for p in parsed], dtype=torch.long)
    got = greedy_decode(ck.model, task, a, b, op) if parsed else []
    truth = task.answer(a, b, op).tolist() if parsed else []
    rows = [{"problem": task.format_problem(*p), "answer": task.show_answer(g),
             "expected": task.show_answer(t), "correct": g == t}
            for p, g, t in zip(parsed, got, truth)]
    return {"checkpoint": str(ck.path), "task": task.name, "params": ck.params,
            "correct": sum(r["correct"] for r in rows), "total": len(rows), "results": rows}


def params_job(task: Task, model_cfg: ModelConfig) -> dict[str, Any]:
    """Unique parameter count with a per-component breakdown, without training: counted from
    the shapes alone (the meta device), so a huge architecture is counted, not allocated."""
    return {
        "task": task.name, "format": task.fmt.name, "params": count_params(model_cfg),
        "vocab_size": task.vocab_size, "n_ctx": task.n_ctx,
        "vocab": list(task.vocab), "architecture": model_cfg.summary(),
        "breakdown": [{"component": c, "params": n} for c, n in param_breakdown(model_cfg)],
        "model": model_cfg.to_dict(),
    }
