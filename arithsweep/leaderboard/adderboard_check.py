"""AdderBoard's own protocol, run on an exported submission file.

AdderBoard's `verify.py` imports a submission with `spec_from_file_location`, calls
`build_model()` -> `(model, metadata)`, then `add(model, a, b)` on 10 fixed edge cases and on
10,000 pairs drawn with `random.Random(2025).randint(0, 9_999_999_999)`; an exception counts as
a wrong answer, and a submission qualifies at >= 99%. This module does the same, so an export
is checked the way the board will check it (`arithsweep export N --adderboard F.py --check`).
`on_model` runs the same problems through a loaded model in one batch, as verification does
for an add10 checkpoint: the figure an entry records beside its suite's.

    python -m arithsweep.leaderboard.adderboard_check submissions/add10_36.py
"""

from __future__ import annotations

import importlib.util
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from arithsweep.core.errors import ArithsweepError
from arithsweep.core.evaluation.stats import OUTSIDE_BOARDS

TOP = 9_999_999_999
EDGE_CASES = [(0, 0), (0, 1), (TOP, 0), (TOP, 1), (TOP, TOP), (TOP, TOP),
              (5_000_000_000, 5_000_000_000), (1_111_111_111, 8_888_888_889),
              (1_234_567_890, 9_876_543_210), (1, TOP)]
N_RANDOM, SEED, THRESHOLD = 10_000, 2025, 0.99
TASK = next(t for t, (k, _) in OUTSIDE_BOARDS.items() if k == "adderboard")  # add10


@dataclass
class ProtocolResult:
    correct: int
    total: int
    params: int  # what the submission's metadata claims
    failures: list[tuple[int, int, int | None]]  # (a, b, got), the first few

    @property
    def accuracy(self) -> float:
        return self.correct / self.total

    @property
    def passed(self) -> bool:
        return self.accuracy >= THRESHOLD


def problems() -> list[tuple[int, int]]:
    rng = random.Random(SEED)
    return EDGE_CASES + [(rng.randint(0, TOP), rng.randint(0, TOP)) for _ in range(N_RANDOM)]


def on_model(model, task, limit: int | None = None) -> tuple[int, int]:
    """(problems, correct) of AdderBoard's protocol on a loaded model of `task` (add10, any
    format), batched: the count a faithful export of it scores under AdderBoard's verify.py.
    `limit`: the first problems only, as for `check_submission`."""
    import torch

    from arithsweep.core.evaluation.evaluate import exact_match

    if task.name != TASK:
        raise ArithsweepError(f"AdderBoard's protocol is for {TASK}, not {task.name}")
    pairs = torch.tensor(problems()[:limit], dtype=torch.long)  # (N, 2)
    a, b = pairs[:, 0].contiguous(), pairs[:, 1].contiguous()
    ok = exact_match(model, task, a, b, torch.zeros_like(a))[0]  # (N,)
    return int(ok.numel()), int(ok.sum())


def check_submission(path: str | Path, limit: int | None = None) -> ProtocolResult:
    """Import `path` as AdderBoard does and score it; `limit` checks only the first problems
    (edge cases first), for quick looks and tests."""
    path = Path(path)
    if not path.is_file():
        raise ArithsweepError(f"{path}: no such submission file")
    spec = importlib.util.spec_from_file_location(f"_adderboard_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ArithsweepError(f"{path}: not an importable Python file")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # as verify.py: the module is not registered in sys.modules
    model, meta = mod.build_model()
    todo = problems()[:limit]
    correct, failures = 0, []
    for a, b in todo:
        try:
            got = mod.add(model, a, b)
        except Exception:  # noqa: BLE001 - the board counts any exception as a failure
            got = None
        if got == a + b:
            correct += 1
        elif len(failures) < 10:
            failures.append((a, b, got))
    return ProtocolResult(correct, len(todo), int(meta.get("params", -1)), failures)


if __name__ == "__main__":  # pragma: no cover - a convenience for people holding a file
    res = check_submission(sys.argv[1])
    print(f"{res.correct}/{res.total} = {res.accuracy:.4%} ({'PASS' if res.passed else 'FAIL'}"
          f" at {THRESHOLD:.0%}), {res.params} parameters claimed")
