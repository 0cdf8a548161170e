"""Side-by-side throughput: arithsweep against tbukic's own training code, one run, one machine.

Trains the 36-p and 44-p shapes (recipes/anchors/tbukic-36.yaml, tbukic-44.yaml) with their
whole recipe (sampling, curriculum, Grokfast, decay drops, clipping, evaluation at the recipe's
interval) for a fixed number of steps, in arithsweep and, given the reference's checkout
(repository tbukic/M10S-Transformer at a05e46ed: docs/parity.md says how to get it), in the
reference's own `train_one` (its curr+gf+awd recipe, one seed, one thread, its evaluation every
2,000 steps), and prints examples/s of each and their ratio. arithsweep trains two ways:

- "one process": one pack of --seeds seeds on every core (the kernel's threads);
- "one per core": one pack of --seeds / cores seeds per core, as many processes as cores at
  once, torch on one thread each (what a search with cpus_per_trial 1 runs).

The script is outside the installed package because it imports the reference (a measuring
instrument, never part of this repository). Without the reference it says how to get it and
prints arithsweep's figures alone. Timings on a shared machine are noisy: read the ratios of
one run, and repeat (--repeat) to see the spread.

    python scripts/bench_reference.py                        # arithsweep alone
    python scripts/bench_reference.py /tmp/M10S --steps 2000  # both, ~4 CPU-minutes
    python scripts/bench_reference.py /tmp/M10S --shapes 36 --modes one --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANCHORS = {"36": "recipes/anchors/tbukic-36.yaml", "44": "recipes/anchors/tbukic-44.yaml"}
REF_CONFIGS = {"36": "36p_ff2_tieQO_KrotQ_shnorm_VeqQ_downRotUpT_tieQKnorm",
               "44": "44p_ff2_tieQO_KeqQ_shnorm_VeqQ"}
REF_ALGO = "curr+gf+awd"  # the anchors' recipe in its sweep code
REF_SEED = 8  # the record's seed
HOW_TO_GET = ("no reference given: to compare, clone it and pass its folder (docs/parity.md):\n"
              "  git clone https://github.com/tbukic/M10S-Transformer /tmp/M10S\n"
              "  git -C /tmp/M10S checkout a05e46ed\n"
              "  python scripts/bench_reference.py /tmp/M10S")


def arithsweep_rate(shape: str, seeds: int, steps: int, first_seed: int = 0,
                    ready: Callable[[], None] | None = None) -> dict:
    """One pack of `seeds` seeds of `shape`, its recipe for `steps` steps: examples/s.
    `ready()`: called after the warm-up, before the timed run starts (a start barrier)."""
    from arithsweep.core.overrides import build_configs
    from arithsweep.core.training.population import train

    task, model_cfg, cfg = build_configs(None, None, ROOT / ANCHORS[shape], {})
    cfg = replace(cfg, seeds=seeds, steps=steps, seed=first_seed)
    train(task, model_cfg, replace(cfg, steps=3))  # builds and loads the kernel, warms caches
    if ready is not None:
        ready()
    t0 = time.perf_counter()
    r = train(task, model_cfg, cfg)
    dt = time.perf_counter() - t0
    return {"examples": r.examples, "seconds": dt, "layout": r.layout,
            "evaluations": len(r.history)}


def per_core(shape: str, seeds: int, steps: int, cores: int) -> dict:
    """`cores` processes at once, each a pack of seeds / cores on one thread: aggregate rate."""
    each = max(1, seeds // cores)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, __file__, "--child", shape, str(each), str(steps),
                               str(i * each)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
             for i in range(cores)]
    # a start barrier: every child warms up (imports, kernel build), then all time at once, so
    # none runs its first steps with a core to itself
    for p in procs:
        assert p.stdout is not None
        while (line := p.stdout.readline()) and line.strip() != "ready":
            pass  # anything a child prints before its warm-up ends
        if not line:
            raise SystemExit("error: a per-core child failed before its timed run")
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    rows = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("error: a per-core child failed")
    # every child times its own loop; they ran at once, so the slowest bounds the wall time
    return {"examples": sum(r["examples"] for r in rows),
            "seconds": max(r["seconds"] for r in rows), "layout": rows[0]["layout"],
            "evaluations": rows[0]["evaluations"]}


def reference_rate(folder: Path, shape: str, steps: int) -> dict:
    """The reference's train_one, one seed, one thread, `steps` steps, its evaluation every
    2,000 steps: examples/s (its batch is 128)."""
    import torch

    sys.path[:0] = [str(folder / "experiments"), str(folder / "src")]
    import sub50_sweep as sweep  # noqa: PLC0415 - importable once its folder is on the path

    cfg = next(c for c in sweep.CONFIGS if c["name"] == REF_CONFIGS[shape])
    algo = next(a for a in sweep.ALGORITHMS if a["name"] == REF_ALGO)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            r = sweep.train_one(cfg, algo, REF_SEED, steps, 2000, "cpu", out)
            dt = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    return {"examples": steps * algo.get("batch_size", 128), "seconds": dt,
            "params": r["params"] if r else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference", nargs="?", type=Path,
                    help="the M10S-Transformer checkout (docs/parity.md); omit: arithsweep alone")
    ap.add_argument("--steps", type=int, default=2000,
                    help="steps of every run (default 2000: one evaluation each)")
    ap.add_argument("--seeds", type=int, default=64, help="arithsweep's seeds (default 64)")
    ap.add_argument("--shapes", nargs="+", default=["36", "44"], choices=sorted(ANCHORS))
    ap.add_argument("--modes", nargs="+", default=["one", "per-core"],
                    choices=["one", "per-core"], help="how arithsweep uses the cores")
    ap.add_argument("--repeat", type=int, default=1, help="rounds, interleaved (default 1)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:  # one per-core process: its figures as one JSON line
        import torch

        torch.set_num_threads(1)
        shape, seeds, steps, first = a.child

        def ready() -> None:  # tell the parent, wait for its go
            print("ready", flush=True)
            sys.stdin.readline()

        print(json.dumps(arithsweep_rate(shape, int(seeds), int(steps), int(first), ready)))
        return
    if a.reference is not None and not (a.reference / "experiments" / "sub50_sweep.py").is_file():
        print(f"error: {a.reference}/experiments/sub50_sweep.py not found: give the "
              "M10S-Transformer checkout (docs/parity.md)", file=sys.stderr)
        raise SystemExit(2)
    if a.reference is None:
        print(HOW_TO_GET, file=sys.stderr)
    cores = os.cpu_count() or 1
    rows = []
    for rnd in range(a.repeat):
        for shape in a.shapes:
            ref = reference_rate(a.reference, shape, a.steps) if a.reference else None
            for mode in a.modes:
                r = (arithsweep_rate(shape, a.seeds, a.steps) if mode == "one"
                     else per_core(shape, a.seeds, a.steps, cores))
                eps = r["examples"] / r["seconds"]
                row = {"round": rnd, "shape": shape, "mode": mode, "seeds": a.seeds,
                       "steps": a.steps, "cores": cores, "arithsweep_ex_s": eps,
                       "layout": r["layout"], "evaluations": r["evaluations"]}
                if ref:
                    ref_eps = ref["examples"] / ref["seconds"]
                    row.update(reference_ex_s=ref_eps, ratio=eps / ref_eps,
                               ratio_per_core=eps / ref_eps / cores)
                rows.append(row)
                if not a.json:
                    tail = "" if not ref else (
                        f" | reference {ref_eps:,.0f} ex/s (1 seed, 1 thread) | "
                        f"{row['ratio']:.1f}x, {row['ratio_per_core']:.1f}x core for core")
                    print(f"{shape} p, {mode:8s}: arithsweep {eps:,.0f} ex/s ({a.seeds} seeds, "
                          f"{cores} cores, {r['layout']}){tail}", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
