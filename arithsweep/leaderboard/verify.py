"""The verification protocol, suite "v2": re-derive a checkpoint's claims from its weights alone.

- parameters: recomputed from the loaded tensors (metadata is only compared, never believed);
- problems: every problem when the task has at most 10^6; otherwise, all on the held-out split
  that the training stream never draws and from a fixed seed, 10^6 uniform random problems plus
  10^5 with uniform operand lengths (none of them repeating the random part), AdderBoard's
  edge cases, carry/borrow-cascade problems of every cascade length and, for add/sub/mix,
  Quirke's enriched data: ENRICHED_PER_CLASS distinct problems of each of his classes
  (S0..S5, M0..M4, N1..N4, see core/data/quirke.py), none repeating an earlier part;
- exact match by the teacher-forced fast path (proved equal to greedy decoding in the tests),
  failures shown by real greedy decoding, Quirke's nines, the Wilson 95% lower bound and
  breakdowns by carry class, operand lengths, answer length and Quirke class (each with its
  own exact match, failures and nines);
- for add10, AdderBoard's own protocol beside the suite (its 10 edge cases and 10,000 pairs of
  `random.Random(2025)`, adderboard_check.on_model): a search's add10 find at a target of 99% or
  more must pass it too (`make_verifier`), as AdderBoard checks an export.

At a target of six nines (0.999999) or above, suite "v2+1M-per-op": Quirke counts a mixed
model's nines on each operation, and one failure in 10^6 needs 10^6 problems of each, where v2
holds ~570K of each for mix6. The v2 problems, then, from the same generator, each operation
topped up to PER_OP distinct held-out problems (core/evaluation/per_op.py: a quarter
Quirke-enriched, answers near zero for subtraction, the rest uniform over values and operand
lengths), none repeating an earlier one; a task whose operations each have at most PER_OP
problems (mix3) is checked on every one of them instead, as every task of at most 10^6 is.

Suite v1 was the same without the enriched part and with a lengths part that could repeat
random problems; entries verified with it keep "v1" as their suite name.

    from arithsweep.leaderboard.verify import verify
    print(verify("runs/add3/best", target=0.99).summary())
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import torch

from arithsweep import __version__
from arithsweep.core.arithmetic import alone_as_in_pack
from arithsweep.core.data.quirke import class_names, enriched_sample, supported
from arithsweep.core.data.sampling import _distinct
from arithsweep.core.data.tasks import OP_NAMES, Task
from arithsweep.core.errors import ArithsweepError, ConfigError
from arithsweep.core.evaluation.evaluate import breakdown, exact_match, greedy_decode
from arithsweep.core.evaluation.per_op import every_problem, op_sample, per_op_size
from arithsweep.core.model.checkpoint import START, Checkpoint, load_checkpoint
from arithsweep.leaderboard import adderboard_check
from arithsweep.leaderboard.provenance import (
    PROVENANCE,
    checkpoint_provenance,
    published_entry,
    set_args,
)
from arithsweep.leaderboard.report import (
    SUITE,
    TARGET,
    VerificationReport,
    nines,
    wilson_lower,
)

SUITE_SEED = 0x0ADD_5EED  # the suite's random sample; no training stream uses this seed
EXHAUSTIVE_MAX = 10**6
RANDOM_SIZE = 10**6  # operands uniform over 0..10^N-1, as AdderBoard samples
LENGTHS_SIZE = 10**5  # operand lengths uniform, so short operands are checked too
PER_CASCADE = 1000  # problems per cascade length in the stress part
ENRICHED_PER_CLASS = 2000  # Quirke-enriched problems per class (add10: 6 classes, mix10: 15)
SHOW_FAILURES = 10
CHUNK = 50_000
SUITE_PER_OP = f"{SUITE}+1M-per-op"  # v2 with each operation topped up to PER_OP problems


def _cascades(task: Task, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Up to PER_CASCADE held-out problems of every carry-cascade length >= 1 (cascade 0 is
    plentiful in the random part), drawn carry-enriched and stratified by class."""
    keep_a, keep_b, keep_op = ([torch.zeros(0, dtype=torch.long)] for _ in range(3))
    if task.op == "mul":  # the carry-enriched sampler has no multiplication mode
        return keep_a[0], keep_b[0], keep_op[0]
    top = task.n_carry_classes - 1
    counts = torch.zeros(top + 1, dtype=torch.long)
    for _ in range(12):
        a, b, op = task.sample(25_000, gen, "carry", split="holdout")
        cls = task.carry_class(a, b, op).clamp(0, top)
        for c in range(1, top + 1):
            room = PER_CASCADE - int(counts[c])
            idx = (cls == c).nonzero().flatten()[: max(0, room)]
            counts[c] += idx.numel()
            keep_a.append(a[idx])
            keep_b.append(b[idx])
            keep_op.append(op[idx])
        # the longest classes a sampler can reach may be rare or impossible (a 1-digit
        # subtraction never borrows): stop once every class seen so far is full
        if bool((counts[1:][counts[1:] > 0] >= PER_CASCADE).all()) and int(counts[-1]) > 0:
            break
    return torch.cat(keep_a), torch.cat(keep_b), torch.cat(keep_op)


def _lengths_part(task: Task, gen: torch.Generator,
                  seen: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """LENGTHS_SIZE distinct held-out problems with uniform operand lengths, none in `seen`.
    Drawn first without `exclude=` and then cleaned and topped up: the same result as one
    exclude= call, without re-sorting the million problems of `seen` in every draw round."""
    part = task.sample(LENGTHS_SIZE, gen, "uniform", split="holdout")
    k = seen[0].numel()
    idx = _distinct(*(torch.cat(p) for p in zip(seen, part, strict=True)))
    part = tuple(x[idx[idx >= k] - k] for x in part)
    missing = LENGTHS_SIZE - part[0].numel()
    if missing:  # collisions with `seen` (small tasks): draw the rest avoiding both
        both = tuple(torch.cat(p) for p in zip(seen, part, strict=True))
        more = task.sample(missing, gen, "uniform", split="holdout", exclude=both)
        part = tuple(torch.cat(p) for p in zip(part, more, strict=True))
    return part


def build_suite(task: Task, target: float = TARGET,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Problems of the suite for `task` at `target`: (a, b, op, seed); see `suite_for`."""
    return suite_for(task, target)[:4]


def suite_for(task: Task, target: float = TARGET,
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, str]:
    """Problems of the suite for `task` at `target` and its name: (a, b, op, seed, suite).
    Suite v2, or at six nines v2 with every operation topped up to PER_OP problems."""
    if task.op == "sort":  # sorting has its own cases (ties, sorted, reversed): see sort_task
        from arithsweep.core.data.sort_task import sort_suite

        return (*sort_suite(task), SUITE)
    need = per_op_size(target)
    if need and 100**task.n_digits <= need:  # each operation fits whole: check every problem
        name = SUITE if task.n_problems <= EXHAUSTIVE_MAX else SUITE_PER_OP
        return (*every_problem(task), 0, name)
    if task.n_problems <= EXHAUSTIVE_MAX:
        return (*task.enumerate_all(), 0, SUITE)
    gen = torch.Generator().manual_seed(SUITE_SEED)
    ra, rb, rop = task.sample(RANDOM_SIZE, gen, "values", split="holdout")
    parts = [(ra, rb, rop), _lengths_part(task, gen, (ra, rb, rop))]
    edges = torch.tensor(task.edge_cases(), dtype=torch.long).view(-1, 3)
    parts += [(edges[:, 0], edges[:, 1], edges[:, 2]), _cascades(task, gen)]
    if supported(task):
        seen = tuple(torch.cat(p) for p in zip(*parts, strict=True))
        n_enriched = ENRICHED_PER_CLASS * len(class_names(task))
        parts.append(enriched_sample(task, n_enriched, gen, split="holdout", exclude=seen))
    a, b, op = (torch.cat(p) for p in zip(*parts, strict=True))
    name, have = SUITE, torch.zeros(0)
    if need:  # distinct problems count: the cascade part and the edge cases may repeat others
        have = torch.bincount(op[_distinct(a, b, op)], minlength=max(task.op_codes) + 1)
    for code in task.op_codes if need else ():
        short = need - int(have[code])
        if short > 0:  # the same generator goes on, so the v2 part stays v2's problems
            more = op_sample(task, code, short, gen, exclude=(a, b, op))
            if more[0].numel() < short:
                raise ConfigError(f"{task.name}: only {int(have[code]) + more[0].numel():,} "
                                  f"held-out {OP_NAMES[code]} problems for a suite of {need:,}")
            a, b, op = (torch.cat(p) for p in zip((a, b, op), more, strict=True))
            name = SUITE_PER_OP
    return a, b, op, SUITE_SEED, name


def reproduce_command(ck: Checkpoint) -> str:
    """The shell command that retrains this checkpoint's member from scratch, or, for a
    finished checkpoint (`arithsweep finish`), that finishes its kept start again."""
    finish_set = ck.meta.get("finish_set")
    if isinstance(finish_set, dict) and (ck.path / START).is_dir():
        return shlex.join(["arithsweep", "finish", str(ck.path / START), "--out", "finished",
                           *set_args(finish_set)])
    parts = ["arithsweep", "train", "--task", ck.task.name, "--format", ck.task.fmt.name,
             "--config", str(ck.path / "config.json")]
    if ck.train_cfg is not None and ck.train_cfg.seeds > 1 and (
            ck.meta.get("finished_by") or (_torch_layout(ck) and not alone_as_in_pack(ck.meta))):
        # finished inside its run: the finishers draw from the run's first seed, not the
        # member's; or trained by torch's ops before arithmetic 6 (or on a GPU), whose
        # batched kernels rounded a pack of K otherwise than one (a mix6 pack of 2 and its
        # seed alone parted within 1,000 steps): only the whole pack gives the same weights
        return shlex.join([*parts, *_stopped(ck)])
    seed = ck.meta.get("seed", ck.train_cfg.seed if ck.train_cfg else 0)
    return shlex.join([*parts, "--seeds", "1", "--seed", str(seed), *_stopped(ck)])


def _kept_command(entry: dict[str, Any]) -> str | None:
    """The retrain command a published entry.json keeps, when it is one of ours."""
    cmd = entry.get("reproduce")
    return cmd if isinstance(cmd, str) and cmd.startswith("arithsweep ") else None


def _torch_layout(ck: Checkpoint) -> bool:
    """Did its run train in the reference layout (torch's ops), not the tiny kernel?"""
    from arithsweep.core.training.train import choose_layout

    try:
        return choose_layout(ck.model_cfg, ck.train_cfg, torch.device("cpu"))[0] != "tiny"
    except ArithsweepError:  # a layout this machine cannot run: say the pack, to be safe
        return True


def _stopped(ck: Checkpoint) -> list[str]:
    """For a model its run's own rules stopped before the schedule's end (a search trial's
    plateau, a cut): the --set that stops the retrain there too, the schedule unchanged, and
    no time budget to stop it sooner on a slower machine."""
    from arithsweep.core.training.path import path_steps

    cfg, steps = ck.train_cfg, ck.meta.get("steps")
    if cfg is None or not isinstance(steps, int) or isinstance(steps, bool):
        return []
    whole = path_steps(cfg) if cfg.path else cfg.main_steps + cfg.polish_steps
    if cfg.stop_at is not None or steps >= whole:
        return []
    final = ck.meta.get("final_exact_match")  # `train`'s own end: stopped early at the target
    if cfg.early_stop and isinstance(final, (int, float)) and final >= cfg.target:
        return []  # its retrain stops there by the same rule
    # the finishers stay as the config has them: a search trial's near miss got them on its
    # best, and keeps what they kept even when they do not reach the target, as `train` does
    # (the six-nines mix6 pack retrained this way to entry 63's sha256)
    return ["--set", f"stop_at={steps}", "--set", "time_budget=0"]


def verify(
    checkpoint: str | Any,
    target: float = TARGET,
    extra: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    device: str = "cpu",
) -> VerificationReport:
    """Run the suite for `target` on a checkpoint (path or loaded Checkpoint) and report
    (suite v2, or v2+1M-per-op at six nines); never records."""
    if not (0 < target <= 1):
        raise ConfigError(f"target {target}: must be in (0, 1]")
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    task, model = ck.task, ck.model.to(device)
    a, b, op, seed, suite = suite_for(task, target)
    n = a.numel()
    ok_parts = []
    for start in range(0, n, CHUNK):
        s = slice(start, min(n, start + CHUNK))
        ok_parts.append(exact_match(model, task, a[s], b[s], op[s])[0])
        if progress is not None:
            progress(s.stop, n)
    ok = torch.cat(ok_parts)  # (N,)
    n_fail = int((~ok).sum())
    bad = (~ok).nonzero().flatten()[:SHOW_FAILURES]
    got = greedy_decode(model, task, a[bad], b[bad], op[bad]) if bad.numel() else []
    truth = task.answer(a[bad], b[bad], op[bad]).tolist()
    failures = [{"problem": task.format_problem(int(a[i]), int(b[i]), int(op[i])),
                 "expected": task.show_answer(t), "got": task.show_answer(g)}
                for i, t, g in zip(bad.tolist(), truth, got)]
    parts = breakdown(ok, task, a, b, op)
    if task.name == adderboard_check.TASK:  # AdderBoard's own problems, beside the suite
        n_ab, ok_ab = adderboard_check.on_model(model, task)
        parts["by_protocol"] = {"adderboard": (n_ab, ok_ab)}
    # provenance: the caller's, else a published folder's entry.json (its retrain command
    # too: the one that trained it), else the search folder the checkpoint sits in, else the
    # checkpoint's own meta
    kept = published_entry(ck.path, ck.sha256) or checkpoint_provenance(ck.path)
    extra = {**{k: kept[k] for k in PROVENANCE if kept.get(k)},
             **{k: v for k, v in (extra or {}).items() if v is not None}}
    meta = ck.meta
    return VerificationReport(
        task=task.name, format=task.fmt.name, target=target, params=ck.params,
        exact_match=(n - n_fail) / n, n_problems=n, n_failures=n_fail, failures=failures,
        nines=nines(n_fail, n), wilson_lower=wilson_lower(n - n_fail, n),
        **{k: {name: {"n": v[0], "correct": v[1]} for name, v in d.items()}
           for k, d in parts.items()},
        suite=suite, suite_seed=seed, suite_size=n,
        sha256=ck.sha256, checkpoint_path=str(ck.path),
        architecture=ck.model_cfg.summary(), model_config=ck.model_cfg.to_dict(),
        train_config=ck.train_cfg.to_dict() if ck.train_cfg else {},
        seed=meta.get("seed"), steps=meta.get("steps"), wall_time=meta.get("wall_time"),
        device=meta.get("device"),
        mlflow_run_id=extra.get("mlflow_run_id", meta.get("mlflow_run_id")),
        search_name=extra.get("search_name", meta.get("search_name")),
        trial_id=extra.get("trial_id", meta.get("trial_id")),
        reproduce=_kept_command(kept) or reproduce_command(ck), version=__version__,
    )


def make_verifier(db_url: str | None = None):
    """A search `Verifier`: verify a candidate checkpoint, record it when it qualifies.

    The search driver calls it on its own process (workers never open the database); the
    CLI builds it, so the search wing never imports the leaderboard wing.
    """
    from arithsweep.leaderboard.board import open_db

    def verify_and_record(c: dict) -> dict:
        try:
            report = verify(c["checkpoint"], c["target"], extra={
                "mlflow_run_id": c.get("mlflow_run_id"), "search_name": c.get("search_name"),
                "trial_id": c.get("trial_id")})
        except ArithsweepError as exc:  # a broken checkpoint fails this candidate only
            return {"qualifies": False, "exact_match": None, "error": str(exc)}
        # a search's add10 find is AdderBoard's too: short of its protocol, it is no find
        short = report.protocol_shortfalls()
        qualifies = report.qualifies and not short
        summary = report.summary() + (f"; not recorded: {' and '.join(short)} is below its "
                                      f"board's bar" if report.qualifies and short else "")
        item = {"params": report.params, "exact_match": report.exact_match,
                "qualifies": qualifies, "n_problems": report.n_problems,
                "n_failures": report.n_failures, "summary": summary}
        if qualifies:
            db = open_db(db_url)
            try:
                row, created = db.record(report)
            finally:
                db.close()
            item.update(entry_id=row.get("id"), created=created)
        return item

    return verify_and_record
