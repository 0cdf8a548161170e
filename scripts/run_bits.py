"""The bits of a whole training run: do two versions of the code train the same model?

kernel_ab.py compares two builds of the tiny kernel on one step's inputs; this compares what a
run ends on when anything around the kernel changes too (data, the Python step, the
optimiser, evaluation). It trains an anchor's whole recipe (recipes/anchors/tbukic-36.yaml or
-44.yaml) for --steps steps with --seeds seeds, evaluating every --eval-every steps, and prints
the sha256 of the final weights and of every evaluation's figures (exact match, loss,
per-position accuracy; not the times). Equal hashes from two checkouts = the same run.

    python scripts/run_bits.py                                   # this checkout
    PYTHONPATH=/tmp/old python /tmp/old/scripts/run_bits.py      # another (git worktree add)
    ARITHSWEEP_KERNEL_TARGET=x86-64-v3 ATEN_CPU_CAPABILITY=avx2 python scripts/run_bits.py
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("36", "44"), default="36")
    ap.add_argument("--seeds", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2100)
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import arithsweep
    import arithsweep.core.training.population as P
    from arithsweep.core.overrides import build_configs

    task, model_cfg, cfg = build_configs(None, None,
                                         ROOT / f"recipes/anchors/tbukic-{a.shape}.yaml", {})
    r = P.train(task, model_cfg, replace(cfg, seeds=a.seeds, steps=a.steps,
                                         eval_every=a.eval_every))
    weights = hashlib.sha256()
    for p in r.model.parameters():
        weights.update(p.detach().numpy().tobytes())
    evals = repr([(e.step, e.exact_match, e.loss, e.position_acc) for e in r.history])
    print(f"{Path(arithsweep.__file__).parents[1]}: {a.shape} p, {a.seeds} seeds, {a.steps} "
          f"steps: weights {weights.hexdigest()[:16]}, "
          f"evaluations {hashlib.sha256(evals.encode()).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
