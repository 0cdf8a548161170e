"""profile_tiny_step.py for two versions of the code, interleaved, medians of each part.

This machine's speed moves by up to 15% within an hour, so one profile of each version can
invert a real difference. This runs `scripts/profile_tiny_step.py` (this checkout's copy) for
each version in turn, --rounds times, each in a fresh process with the version on PYTHONPATH
(a git revision is checked out into a temporary worktree), and prints the median of every part
and of the whole step per version, the range of the whole step, and the ratio of the medians.

    python scripts/profile_ab.py --old 291e02f                 # that commit against this tree
    python scripts/profile_ab.py --old d4dea76 --new HEAD --seeds 32 --rounds 6
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "scripts" / "profile_tiny_step.py"


def checkout(spec: str, tmp: Path) -> Path:
    """A folder holding version `spec`: this tree for ".", else a worktree of the revision."""
    if spec == ".":
        return ROOT
    path = tmp / spec.replace("/", "_")
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(path), spec], cwd=ROOT,
                   check=True, capture_output=True)
    return path


def profile(folder: Path, args: list[str]) -> dict[str, float]:
    """One profile_tiny_step run of the code in `folder`: ms a step per part, and "step"."""
    out = subprocess.run([sys.executable, str(PROFILE), *args], cwd=folder, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(folder)}).stdout
    parts = {m[1]: float(m[2]) for m in re.finditer(r"^\| (.+?) \| ([\d.]+) \|", out, re.M)}
    parts["step"] = float(re.search(r"([\d.]+) CPU-ms a step", out)[1])
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="a git revision, or . for this tree")
    ap.add_argument("--new", default=".", help="a git revision, or . for this tree (default)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--shape", choices=("36", "44"), default="36")
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    args = ["--shape", a.shape, "--seeds", str(a.seeds), "--steps", str(a.steps)]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        folders = {"old": checkout(a.old, tmp), "new": checkout(a.new, tmp)}
        try:
            runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
            for r in range(a.rounds):
                for name, folder in folders.items():
                    runs[name].append(profile(folder, args))
                    print(f"round {r + 1} {name}: {runs[name][-1]['step']:.2f} ms a step",
                          file=sys.stderr)
        finally:
            for f in folders.values():
                if f != ROOT:
                    subprocess.run(["git", "worktree", "remove", "--force", str(f)], cwd=ROOT,
                                   capture_output=True)
    med = {n: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for n, rs in runs.items()}
    print(f"{a.shape} p, {a.seeds} seeds, {a.steps} steps, {a.rounds} rounds: median CPU-ms "
          f"a step ({a.old} -> {a.new})")
    print(f"| part | {a.old} | {a.new} |\n|---|---:|---:|")
    for k in med["old"]:
        if k != "step":
            print(f"| {k} | {med['old'][k]:.2f} | {med['new'].get(k, float('nan')):.2f} |")
    lo = {n: (min(x["step"] for x in rs), max(x["step"] for x in rs)) for n, rs in runs.items()}
    print(f"| **a whole step** | {med['old']['step']:.2f} ({lo['old'][0]:.2f}-{lo['old'][1]:.2f})"
          f" | {med['new']['step']:.2f} ({lo['new'][0]:.2f}-{lo['new'][1]:.2f}) |")
    print(f"new / old examples per CPU-second: {med['old']['step'] / med['new']['step']:.2f}x")


if __name__ == "__main__":
    main()
