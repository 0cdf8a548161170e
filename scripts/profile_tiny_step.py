"""Where a tiny-layout training step spends its time: the 36-p (or 44-p) recipe, K seeds.

Wraps the pieces of the training loop with CPU-time counters (the thread's own time, so
another process on the machine inflates them far less than wall time) and trains the anchor's
whole recipe for --steps steps: data (sampling and encoding), forming the effective weights
(the ties, in torch), the C kernel (forward and backward of every sequence), autograd back
through the effective weights, Grokfast, clipping, AdamW (torch ops, or from arithmetic 3 on
one C call), and the evaluation (4,096 held-out problems, charged at the recipe's interval
whatever --steps is). Prints milliseconds per step.
torch and the kernel run on one thread (--threads), as a search trial does.

    python scripts/profile_tiny_step.py                  # 36 p, 64 seeds, 400 steps
    python scripts/profile_tiny_step.py --shape 44 --seeds 32
    PYTHONPATH=/tmp/old-checkout python scripts/profile_tiny_step.py   # another version's

It runs on the code of 291e02f (2026-11-28, the issue-55 baseline) and every later version: a
module that moved is found where that version keeps it, and the anchor's keys that only the
path reads (path, finish_*) are left out for both, as population.train ignores them anyway.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
spent: dict[str, float] = collections.defaultdict(float)


evaluating = [False]


def timed(name: str, fn, training_only: bool = False):
    def wrapper(*args, **kwargs):
        t = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            if not (training_only and evaluating[0]):
                spent[name] += time.thread_time() - t
    return wrapper


def evaluation(fn):
    def wrapper(*args, **kwargs):
        evaluating[0] = True
        spent["evaluations"] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            evaluating[0] = False
    return wrapper


def anchor_file(shape: str, tmp: Path) -> Path:
    """The anchor's recipe without what only the path reads (path, finish_*): the first phase,
    the loop that population.train runs, which any version from 291e02f on can read."""
    from arithsweep.core.yaml_loader import load_yaml  # its float rule (1e-3 is a number)

    doc = load_yaml((ROOT / f"recipes/anchors/tbukic-{shape}.yaml").read_text())
    doc["train"] = {k: v for k, v in doc["train"].items()
                    if k != "path" and not k.startswith("finish_")}
    out = tmp / f"tbukic-{shape}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("36", "44"), default="36")
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import arithsweep.core.model.tiny_layout as TL
    import arithsweep.core.training.optim as O
    import arithsweep.core.training.population as P
    import arithsweep.core.training.recipe as R
    import arithsweep.core.training.train as T
    from arithsweep.core.overrides import build_configs

    with tempfile.TemporaryDirectory() as d:
        task, model_cfg, cfg = build_configs(None, None, anchor_file(a.shape, Path(d)), {})
    cfg = replace(cfg, seeds=a.seeds, steps=a.steps)
    P.train(task, model_cfg, replace(cfg, steps=3))  # kernel built and loaded, caches warm
    try:  # 5901a67 on: the pack's batch stream lives in packing.py
        from arithsweep.core.training.packing import PackStream
    except ImportError:  # before: population.py's own
        PackStream = P._PackStream
    PackStream.next = timed("data", PackStream.next)
    TL._kernel_args = timed("effective weights", TL._kernel_args)
    TL._TinyLoss.forward = staticmethod(timed("kernel call", TL._TinyLoss.forward))
    TL._run = timed("kernel (C)", TL._run, training_only=True)
    torch.Tensor.backward = timed("autograd backward", torch.Tensor.backward)
    R.GrokfastEMA.apply = timed("Grokfast", R.GrokfastEMA.apply)
    T._clip_and_guard = timed("clipping", T._clip_and_guard)
    O.PackAdamW.step = timed("AdamW", O.PackAdamW.step)
    try:  # arithmetic 3 on: the three above in one C call (a version before it has no such file)
        import arithsweep.core.model.tiny_step as TS

        TS.NativeTail.__call__ = timed("tail", TS.NativeTail.__call__)
    except ImportError:
        pass
    P._PackRun._evaluate_all = evaluation(timed("evaluation", P._PackRun._evaluate_all))
    loop = timed("whole loop", P._PackRun.run)
    P._PackRun.run = loop
    import arithsweep.core.training.step as S  # after the patch: PackStep reads it at init

    S._clip_and_guard = T._clip_and_guard
    P.train(task, model_cfg, cfg)
    n = a.steps
    per_eval = spent["evaluation"] / max(1, spent["evaluations"])
    rows = {
        "data": spent["data"] / n,
        "effective weights (torch)": spent["effective weights"] / n,
        "kernel forward+backward (C)": spent["kernel (C)"] / n,
        "kernel call overhead (Python)": (spent["kernel call"] - spent["kernel (C)"]) / n,
        "autograd backward": spent["autograd backward"] / n,
        "Grokfast": spent["Grokfast"] / n,
        "clipping": spent["clipping"] / n,
        "AdamW": spent["AdamW"] / n,
        "Grokfast + clipping + AdamW in one C call": spent["tail"] / n,
    }
    accounted = sum(rows.values())
    loop = (spent["whole loop"] - spent["evaluation"]) / n
    rows["rest of the step (Python, small torch ops)"] = loop - accounted
    rows[f"evaluation (every {cfg.eval_every} steps)"] = per_eval / cfg.eval_every
    total = sum(rows.values())
    ex = a.seeds * cfg.batch_size
    print(f"{a.shape} p, {a.seeds} seeds, {n} steps, {a.threads} thread(s): "
          f"{1e3 * total:.2f} CPU-ms a step, {ex / total:,.0f} examples per CPU-second")
    print("| part | ms a step | share |\n|---|---:|---:|")
    for k, v in rows.items():
        print(f"| {k} | {1e3 * v:.2f} | {100 * v / total:.0f}% |")


if __name__ == "__main__":
    main()
