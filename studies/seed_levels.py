"""Seeds above each exact-match level at each checkpoint step, from `arithsweep train --log`
files (one line per evaluation: `step N Ts best B seeds e0 e1 ... loss ...`) or the reference's
per-seed CSVs (tbukic/M10S-Transformer's sub50_sweep.py: `step,loss,acc,lr,wd`, one seed a
file, acc on 500 fresh problems), packs pooled.

    python studies/seed_levels.py studies/tbukic36-parity/s0.log studies/tbukic36-parity/s64.log
    python studies/seed_levels.py studies/tbukic36-parity/reference/*.csv

Prints a markdown table: at every --every steps (default 50,000) and at the last step all
logs reached, how many of the pooled seeds are above 10 / 50 / 90 / 99% held-out, the best
seed, and whether a seed was ever above each level by then.
"""

from __future__ import annotations

import argparse
from pathlib import Path

LEVELS = (0.10, 0.50, 0.90, 0.99)


def read(path: Path) -> dict[int, list[float]]:
    rows = {}
    if path.suffix == ".csv":  # the reference's: one seed
        for line in path.read_text().splitlines()[1:]:
            step, _, acc, *_ = line.split(",")
            rows[int(step)] = [float(acc)]
        return rows
    last = None
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) > 6 and parts[0] == "step" and "seeds" in parts:
            at = parts.index("seeds") + 1
            end = parts.index("loss") if "loss" in parts else len(parts)
            step, seeds = int(parts[1]), [float(x) for x in parts[at:end]]
            # a path phase with perturb_lr logs one line per lr group, back to back: one pack
            rows[step] = rows[step] + seeds if step == last else seeds
            last = step
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--every", type=int, default=50_000)
    args = ap.parse_args()
    packs = [read(p) for p in args.logs]
    last = min(max(p) for p in packs)
    steps = [s for s in range(args.every, last + 1, args.every)]
    if not steps or steps[-1] != last:
        steps.append(last)
    n = sum(len(p[min(p)]) for p in packs)
    head = " | ".join(f"> {lv:.0%} now (ever)" for lv in LEVELS)
    print(f"| step | {head} | best seed |")
    print("|---:|" + "---:|" * len(LEVELS) + "---:|")
    for s in steps:
        now = [e for p in packs for e in p[max(k for k in p if k <= s)]]
        ever = [max(col) for p in packs
                for col in zip(*(v for k, v in p.items() if k <= s))]
        cells = " | ".join(f"{sum(e > lv for e in now)} ({sum(e > lv for e in ever)})"
                           for lv in LEVELS)
        print(f"| {s:,} | {cells} | {max(now):.2%} |")
    print(f"\n{n} seeds.")


if __name__ == "__main__":
    main()
