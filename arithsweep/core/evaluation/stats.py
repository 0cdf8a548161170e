"""The statistics that exact match is judged by, shared by training and verification.

- `wilson_lower`: the Wilson score 95% lower bound on the true exact match, which stays honest
  for accuracies at or near 100% where the normal approximation claims certainty;
- `z_for`: the two-sided normal quantile for a given alpha, so that a bound taken over the best
  of K seeds can be Bonferroni-corrected (alpha / K);
- `percent`: exact match as shown everywhere, 4 decimals rounded down (never a false 100%);
- `nines`: Quirke's tiers ("at most 1 failure per 10**6 problems = six nines"), counted with
  integers only so that float rounding can never award a tier;
- `per_operation`: a mixed task's failures and nines on each operation, in one line.
- `outside_protocols`: an outside board's protocol on its own problems (add10: AdderBoard's).

Pure standard library: `arithsweep leaderboard` imports it without torch.

    python -c "from arithsweep.core.evaluation.stats import *; \\
        print(wilson_lower(990, 1000), nines(1, 10**6))"
    python -c "from arithsweep.core.evaluation.stats import *; print(z_for(0.05), z_for(0.05 / 8))"
"""

from __future__ import annotations

import math
from decimal import ROUND_DOWN, Decimal
from statistics import NormalDist
from typing import Any

from arithsweep.core.errors import ArithsweepError

Z95 = 1.959963984540054  # two-sided 95% normal quantile (= z_for(0.05))


def z_for(alpha: float) -> float:
    """Two-sided normal quantile: P(|Z| > z) = alpha. z_for(0.05) = Z95; z_for(0.05 / 8) = 2.73
    bounds all of 8 seeds at once at 95% (Bonferroni), as picking the best of 8 needs."""
    if not 0 < alpha < 1:
        raise ArithsweepError(f"z_for: alpha={alpha} must be in (0, 1)")
    return NormalDist().inv_cdf(1 - alpha / 2)


def wilson_lower(correct: int, n: int, z: float = Z95) -> float:
    """Wilson score lower bound for `correct` successes out of `n` (0.0 when n == 0)."""
    if n <= 0:
        return 0.0
    if not 0 <= correct <= n:
        raise ArithsweepError(f"wilson_lower: correct={correct} is outside 0..n={n}")
    p = correct / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # max(): the formula is exactly 0 at correct == 0 but may round to a tiny negative.
    return max(0.0, (centre - margin) / (1 + z2 / n))


def nines(failures: int, n: int) -> int:
    """Largest k with max(failures, 1) * 10**k <= n: 1 failure in 10**6 = 6; 0 in 10**4 = 4.

    Zero failures count as one so that checking 10**4 problems can never claim more than
    4 nines, however clean. 0 when n == 0 or failures exceed n.
    """
    if n <= 0:
        return 0
    unit = max(failures, 1)
    k = 0  # also the answer when even k = 0 fails (more failures than problems)
    while unit * 10 ** (k + 1) <= n:
        k += 1
    return k


def percent(x: float | None) -> str:
    """Exact match as a percentage with 4 decimals, rounded down: 0.9999999 -> "99.9999%".

    Rounded down so that a model with failures never shows as 100.0000%; via Decimal(repr)
    so that 0.99 stays 99.0000% and does not become 98.9999%.
    """
    if x is None:
        return ""
    return f"{(Decimal(repr(float(x))) * 100).quantize(Decimal('0.0001'), ROUND_DOWN)}%"


# How verify and LEADERBOARD.md name a breakdown's buckets.
_BREAKDOWN_NAMES = {"by_lengths": "operand lengths {k}",
                    "by_answer_len": "{k}-digit answers", "by_class": "Quirke class {k}",
                    "by_special": "{k}", "by_op": "operation {k}"}


def per_operation(by_op: dict[str, Any] | None, target: Any = None) -> dict[str, str]:
    """A mixed task's headline per operation for `show` and `verify`, {"by operation": "add 0
    failures in 566,209 (5 nines); sub ..."}, naming an operation below `target`: Quirke counts
    a mix model's nines on each, and an entry qualifies only when each reaches the target.
    Empty for one operation, or an entry stored before the breakdown by operation existed.
    `by_op` maps each operation to {"n": problems, "correct": correct}."""
    parts = []
    for name, b in (by_op or {}).items():
        n, correct = int(b["n"]), int(b["correct"])
        below = isinstance(target, int | float) and n > 0 and correct / n < target
        parts.append(f"{name} {n - correct:,} failures in {n:,} ({nines(n - correct, n)} nines"
                     f"{', below the target' if below else ''})")
    return {"by operation": "; ".join(parts)} if parts else {}


# Outside boards' protocols a verification also runs (by_protocol): name and the board's bar;
# and the task each checks, with the size of the board's own sample of problems.
PROTOCOLS = {"adderboard": ("AdderBoard's protocol", 0.99)}
OUTSIDE_BOARDS = {"add10": ("adderboard", 10_010)}


def protocol_aim(task_name: str, target: float) -> float:
    """Where a search's trials stop for a task an outside board checks on its own sample, at a
    target at or above that board's bar: at least two standard errors of its sample above its
    bar (add10 from 0.99: 0.992), so that a find passes there too; else the target. Entry 64
    stopped at 0.99 and verified 99.01% of the suite and 98.93% of AdderBoard's 10,010."""
    key, n = OUTSIDE_BOARDS.get(task_name, (None, 0))
    bar = PROTOCOLS[key][1] if key else None
    if bar is None or target < bar:
        return target
    return max(target, round(bar + 2 * math.sqrt(bar * (1 - bar) / n), 4))


def protocol_figure(key: str, b: Any) -> str:
    """"9,945 / 10,010 (99.35%, passes its 99%)": one outside protocol's bucket ({"n",
    "correct"} or a Bucket-like) against that board's bar."""
    n, c = (int(b["n"]), int(b["correct"])) if isinstance(b, dict) else (b.n, b.correct)
    bar = PROTOCOLS.get(key, (key, None))[1]
    verdict = "" if bar is None or not n else \
        f", {'passes' if c / n >= bar else 'fails'} its {bar:.0%}"
    return f"{c:,} / {n:,} ({c / n if n else 0:.2%}{verdict})"


def protocol_line(key: str, b: Any) -> str:
    """"AdderBoard's protocol 9,945 / 10,010 (99.35%, passes its 99%)"."""
    return f"{PROTOCOLS.get(key, (key,))[0]} {protocol_figure(key, b)}"


def outside_protocols(by_protocol: dict[str, Any] | None) -> dict[str, str]:
    """`show`'s and `verify`'s lines for the outside protocols an entry was run on, {"AdderBoard's
    protocol": "9,945 / 10,010 (99.35%, passes its 99%)"}; empty for an entry verified
    before verification ran them, or of a task no outside board checks."""
    return {PROTOCOLS.get(k, (k,))[0]: protocol_figure(k, b)
            for k, b in (by_protocol or {}).items()}


def class_health(breakdown: dict[str, dict[str, Any]], min_problems: int = 10,
                 ) -> list[tuple[str, int, float]]:
    """Every bucket of a verification breakdown with at least `min_problems` problems, worst
    exact match first: (name, problems, exact match). `breakdown` maps each breakdown
    ("by_carry", ...) to {key: {"n": problems, "correct": correct}} (or Bucket-likes)."""
    out = []
    for part, buckets in (breakdown or {}).items():
        label = _BREAKDOWN_NAMES.get(part)
        if label is None or part == "by_carry":
            continue  # by_special holds the longest chains; sorting reuses it for inversions
        for key, b in buckets.items():
            n, c = (b["n"], b["correct"]) if isinstance(b, dict) else (b.n, b.correct)
            if n >= min_problems:
                out.append((label.format(k=key), int(n), c / n))
    return sorted(out, key=lambda x: (x[2], -x[1]))
