"""What a winner of the 36 costs under other schedules, from the 128 seeds' measured curves.

A member trains the same bits alone as in any pack (tests/test_member_alone.py), so a cull
(`TrainConfig.cull`: at a step, only the best members by held-out exact match so far go on)
changes nothing for a survivor: its curve after the cull is the one the whole pack drew. The
curves of entry 60's run (the cosine phase `s0.log`, `s64.log`; the Grokfast phase from every
seed's own last state `g0.log`, `g64.log`; one line per evaluation of 4,096 held-out problems)
therefore say exactly which seeds each schedule keeps and what they reach. A winner is a seed
at 97% held-out or more after the path (its best evaluation, the weights the finishers start
from); entry 60's seed 24 (99.0%) was the one.

The CPU cost counts member-steps at a pack's measured step cost, one thread
(`scripts/profile_tiny_step.py --seeds K`, arithmetic 5, the 36's whole recipe), linear
between the measured pack sizes; the evaluations (1% of a step) and finishers are left out.

    python studies/tbukic36-parity/ticket.py
    python studies/tbukic36-parity/ticket.py --cost 8:1.04,32:3.18,128:11.48
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from seed_levels import read  # noqa: E402  (studies/seed_levels.py: the logs' reader)

COSINE, GROKFAST = 200_000, 100_000
WIN = 0.97
# (name, culls [[step of the whole path, keep], ...], Grokfast phase on)
SCHEDULES = [
    ("the record's path: 200K cosine + 100K Grokfast, every seed", [], True),
    ("the cosine alone (200K)", [], False),
    ("cull to 32 at 50K, to 8 at 200K (the tbukic space's)", [[50_000, 32], [200_000, 8]], True),
    ("cull to 16 at 50K, to 4 at 200K", [[50_000, 16], [200_000, 4]], True),
    ("cull to 32 at 50K, 16 at 100K, 4 at 200K", [[50_000, 32], [100_000, 16], [200_000, 4]],
     True),
]


def curves() -> list[dict[int, float]]:
    """Each of the 128 seeds' held-out exact match by step of the whole path."""
    out: list[dict[int, float]] = []
    for cos, grok in (("s0.log", "g0.log"), ("s64.log", "g64.log")):
        a, b = read(HERE / cos), read(HERE / grok)
        for i in range(len(a[min(a)])):
            c = {s: v[i] for s, v in a.items()}
            c.update({COSINE + s: v[i] for s, v in b.items()})
            out.append(c)
    return out


def step_ms(k: int, cost: dict[int, float]) -> float:
    """One step of a k-member pack, ms, linear between (and beyond) the measured sizes."""
    ks = sorted(cost)
    lo = max([x for x in ks if x <= k] or ks[:1])
    hi = min([x for x in ks if x >= k] or ks[-1:])
    if lo == hi:
        lo, hi = (ks[0], ks[1]) if k < ks[0] else (ks[-2], ks[-1])
    return cost[lo] + (cost[hi] - cost[lo]) * (k - lo) / (hi - lo)


def run(seeds: list[dict[int, float]], culls: list[list[int]], grokfast: bool,
        cost: dict[int, float]) -> tuple[float, list[int], list[int]]:
    """CPU-hours, the winners, and the seeds that trained to the end."""
    end = COSINE + (GROKFAST if grokfast else 0)
    live, at, ms = list(range(len(seeds))), 0, 0.0
    for step, keep in [*culls, [end, None]]:
        ms += (step - at) * step_ms(len(live), cost)
        at = step
        if keep is not None and len(live) > keep:  # best so far, ties to the lower seed
            best = {i: max(v for s, v in seeds[i].items() if s <= step) for i in live}
            live = sorted(live, key=lambda i: (-best[i], i))[:keep]
    bests = [max(v for s, v in c.items() if s <= end) for c in seeds]
    return ms / 3.6e6, [i for i in live if bests[i] >= WIN], live


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cost", default="8:1.04,32:3.18,128:11.48",
                    help="K:ms of a K-member step (profile_tiny_step.py), comma separated")
    a = ap.parse_args()
    cost = {int(k): float(v) for k, v in (p.split(":") for p in a.cost.split(","))}
    seeds = curves()
    print("| schedule | CPU-hours a 128-seed ticket | winners (>= 97% held-out) | "
          "winners per CPU-hour | seeds to the end |")
    print("|---|---:|---|---:|---:|")
    for name, culls, grok in SCHEDULES:
        hours, won, live = run(seeds, culls, grok, cost)
        who = ", ".join(f"seed {i}" for i in won) or "none"
        print(f"| {name} | {hours:.2f} | {len(won)} ({who}) | {len(won) / hours:.2f} | "
              f"{len(live)} |")


if __name__ == "__main__":
    main()
