"""The verification protocol, suite "v1": re-derive a checkpoint's claims from its weights alone.

- parameters: recomputed from the loaded tensors (metadata is only compared, never believed);
- problems: every problem when the task has at most 10^6; otherwise, all on the held-out split
  that the training stream never draws and from a fixed seed, 10^6 uniform random problems plus
  10^5 with uniform operand lengths, AdderBoard's edge cases, and carry/borrow-cascade
  problems of every cascade length;
- exact match by the teacher-forced fast path (proved equal to greedy decoding in the tests),
  failures shown by real greedy decoding, Quirke's nines, the Wilson 95% lower bound and
  breakdowns by carry class and operand lengths.

    from arithsweep.leaderboard.verify import verify
    print(verify("runs/add3/best", target=0.99).summary())
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import torch

from arithsweep import __version__
from arithsweep.core.checkpoint import Checkpoint, load_checkpoint
from arithsweep.core.errors import ArithsweepError, ConfigError
from arithsweep.core.evaluate import breakdown, exact_match, greedy_decode
from arithsweep.core.tasks import Task
from arithsweep.leaderboard.report import SUITE, VerificationReport, nines, wilson_lower

SUITE_SEED = 0x0ADD_5EED  # the v1 random sample; no training stream uses this seed
EXHAUSTIVE_MAX = 10**6
RANDOM_SIZE = 10**6  # operands uniform over 0..10^N-1, as AdderBoard samples
LENGTHS_SIZE = 10**5  # operand lengths uniform, so short operands are checked too
PER_CASCADE = 1000  # problems per cascade length in the stress part
SHOW_FAILURES = 10
CHUNK = 50_000


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


def build_suite(task: Task) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Problems of suite v1 for `task`: (a, b, op, seed)."""
    if task.n_problems <= EXHAUSTIVE_MAX:
        return (*task.enumerate_all(), 0)
    gen = torch.Generator().manual_seed(SUITE_SEED)
    ra, rb, rop = task.sample(RANDOM_SIZE, gen, "values", split="holdout")
    la, lb, lop = task.sample(LENGTHS_SIZE, gen, "uniform", split="holdout")
    edges = torch.tensor(task.edge_cases(), dtype=torch.long).view(-1, 3)
    ca, cb, cop = _cascades(task, gen)
    return (torch.cat([ra, la, edges[:, 0], ca]), torch.cat([rb, lb, edges[:, 1], cb]),
            torch.cat([rop, lop, edges[:, 2], cop]), SUITE_SEED)


def reproduce_command(ck: Checkpoint) -> str:
    """The shell command that retrains this checkpoint's member from scratch."""
    seed = ck.meta.get("seed", ck.train_cfg.seed if ck.train_cfg else 0)
    parts = ["arithsweep", "train", "--task", ck.task.name, "--format", ck.task.fmt.name,
             "--config", str(ck.path / "config.json"), "--seeds", "1", "--seed", str(seed)]
    return shlex.join(parts)


def verify(
    checkpoint: str | Any,
    target: float = 0.99,
    extra: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    device: str = "cpu",
) -> VerificationReport:
    """Run suite v1 on a checkpoint (path or loaded Checkpoint) and report; never records."""
    if not (0 < target <= 1):
        raise ConfigError(f"target {target}: must be in (0, 1]")
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    task, model = ck.task, ck.model.to(device)
    a, b, op, seed = build_suite(task)
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
                 "expected": t, "got": g} for i, t, g in zip(bad.tolist(), truth, got)]
    parts = breakdown(ok, task, a, b, op)
    meta, extra = ck.meta, extra or {}
    return VerificationReport(
        task=task.name, format=task.fmt.name, target=target, params=ck.params,
        exact_match=(n - n_fail) / n, n_problems=n, n_failures=n_fail, failures=failures,
        nines=nines(n_fail, n), wilson_lower=wilson_lower(n - n_fail, n),
        **{k: {name: {"n": v[0], "correct": v[1]} for name, v in d.items()}
           for k, d in parts.items()},
        suite=SUITE, suite_seed=seed, suite_size=n,
        sha256=ck.sha256, checkpoint_path=str(ck.path),
        architecture=ck.model_cfg.summary(), model_config=ck.model_cfg.to_dict(),
        train_config=ck.train_cfg.to_dict() if ck.train_cfg else {},
        seed=meta.get("seed"), steps=meta.get("steps"), wall_time=meta.get("wall_time"),
        device=meta.get("device"),
        mlflow_run_id=extra.get("mlflow_run_id", meta.get("mlflow_run_id")),
        search_name=extra.get("search_name", meta.get("search_name")),
        trial_id=extra.get("trial_id", meta.get("trial_id")),
        reproduce=reproduce_command(ck), version=__version__,
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
        item = {"params": report.params, "exact_match": report.exact_match,
                "qualifies": report.qualifies, "n_problems": report.n_problems,
                "n_failures": report.n_failures, "summary": report.summary()}
        if report.qualifies:
            db = open_db(db_url)
            try:
                row, created = db.record(report)
            finally:
                db.close()
            item.update(entry_id=row.get("id"), created=created)
        return item

    return verify_and_record
