"""The statistics that exact match is judged by, shared by training and verification.

- `wilson_lower`: the Wilson score 95% lower bound on the true exact match, which stays honest
  for accuracies at or near 100% where the normal approximation claims certainty;
- `nines`: Quirke's tiers ("at most 1 failure per 10**6 problems = six nines"), counted with
  integers only so that float rounding can never award a tier.

Pure standard library: `arithsweep leaderboard` imports it without torch.

    python -c "from arithsweep.core.stats import *; print(wilson_lower(990, 1000), nines(1, 10**6))"
"""

from __future__ import annotations

import math

from arithsweep.core.errors import ArithsweepError

Z95 = 1.959963984540054  # two-sided 95% normal quantile


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
