"""Entry 60's published finish on torch's layout and on the tiny kernel, interleaved.

Runs `arithsweep finish leaderboard/checkpoints/add10-36-424351b3/start --set
finish_cmaes_evals=3000 --set finish_lr=0.0001 --set finish_rounds=3` (its published command)
with `--set finish_layout=L` for each layout in turn, --rounds times, each run a fresh process
on one thread (torch's and the kernel's: "one core", as the issue's 253 s was measured), and
prints each run's wall and CPU seconds, the CMA-ES record's own seconds, what finished it and
the final exact match, then the ratio of the medians (reference / tiny). A shared machine's
speed moves within minutes: alternating the layouts keeps a slow spell from landing on one.

    python scripts/finish_ab.py                       # tiny, reference, tiny, reference
    python scripts/finish_ab.py --rounds 1 --layouts tiny
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = ROOT / "leaderboard" / "checkpoints" / "add10-36-424351b3" / "start"
SETS = {"finish_cmaes_evals": 3000, "finish_lr": 0.0001, "finish_rounds": 3}

ONE = """
import json, sys, time, torch
torch.set_num_threads(1)
from arithsweep.core.api import finish_job
t, c = time.perf_counter(), time.process_time()
res = finish_job(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "finished_by": res["finished_by"], "final": res["final_exact_match"],
                  "problems": res["final_problems"], "sha256": res["sha256"],
                  "finishers": [{k: r.get(k) for k in ("finisher", "layout", "seconds", "kept",
                                                       "evals", "held_out_after")}
                                for r in res["finishers"]]}))
"""


def run(layout: str, tmp: Path, i: int) -> dict:
    out = tmp / f"{layout}-{i}"
    sets = json.dumps({**SETS, "finish_layout": layout})
    p = subprocess.run([sys.executable, "-c", ONE, str(START), str(out), sets], cwd=ROOT,
                       check=True, capture_output=True, text=True,
                       env={"OMP_NUM_THREADS": "1", **__import__("os").environ})
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layouts", default="tiny,reference")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    got: dict[str, list[dict]] = {lay: [] for lay in layouts}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for lay in layouts:
                r = run(lay, Path(tmp), i)
                got[lay].append(r)
                secs = " + ".join(f"{f['seconds']}" for f in r["finishers"])
                print(f"{lay:9s} wall {r['wall']:7.1f} s  cpu {r['cpu']:7.1f} s  finishers "
                      f"{secs} s  finished by {r['finished_by']}  final "
                      f"{r['final']:.5f} on {r['problems']}  sha256 {r['sha256'][:8]}",
                      flush=True)
    if len(layouts) == 2:
        med = {lay: {k: statistics.median(r[k] for r in got[lay]) for k in ("wall", "cpu")}
               for lay in layouts}
        a, b = layouts[1], layouts[0]
        print(f"{a} / {b}: wall {med[a]['wall'] / med[b]['wall']:.2f}x, "
              f"cpu {med[a]['cpu'] / med[b]['cpu']:.2f}x (medians)")


if __name__ == "__main__":
    main()
