"""`arithsweep bench`: throughput figures as ratios measured side by side in one run.

1. Packed training: K seeds trained together by one `train()` call vs the same K seeds trained
   one after another (K single-seed `train()` calls), for K = 1, 8, 32; aggregate training
   examples/s, end to end (sampling, forward, backward, AdamW, the closing evaluation).
2. Exact match: 10^6 add10 problems through the teacher-forced fast path on a ~760-parameter
   model, against greedy decoding on a sample.

Absolute numbers depend on the machine; the ratios are the point.

    arithsweep bench            # ~1-2 minutes on a 2-core CPU
    arithsweep bench --quick    # a smoke run
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.evaluate import exact_match, greedy_decode
from arithsweep.core.model import ArithTransformer, ModelConfig, count_params
from arithsweep.core.tasks import get_task
from arithsweep.core.train import resolve_device, train

BENCH_TASK = "add10"


def bench_model(task) -> ModelConfig:
    """The gpt-acc-jax-style model: d7, one head, ff14, tied, no linear biases."""
    return ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, n_layers=1, d_model=7,
                       n_heads=1, d_ff=14, norm="layer", final_norm=False,
                       tie_embeddings=True, pos="learned")


def _train_cfg(k: int, steps: int, seed: int, device: str) -> TrainConfig:
    # eval once at the end on a small set: the benchmark is about the training step
    return TrainConfig(steps=steps, seeds=k, seed=seed, batch_size=128, eval_every=10**9,
                       eval_size=256, early_stop=False, warmup=10, device=device)


def _examples_per_s(task, cfg: ModelConfig, k: int, steps: int, seed: int, device: str) -> float:
    t0 = time.perf_counter()
    r = train(task, cfg, _train_cfg(k, steps, seed, device))
    return r.examples / (time.perf_counter() - t0)


def packing(task, cfg: ModelConfig, ks: tuple[int, ...], steps: int, device: str,
            log: Callable[[str], None] | None) -> list[dict[str, float]]:
    _examples_per_s(task, cfg, max(ks), 5, 0, device)  # warm caches and allocator once
    rows = []
    for k in ks:
        packed = _examples_per_s(task, cfg, k, steps, 0, device)
        t0, examples = time.perf_counter(), 0
        for i in range(k):
            r = train(task, cfg, _train_cfg(1, steps, i, device))
            examples += r.examples
        sequential = examples / (time.perf_counter() - t0)
        rows.append({"k": k, "packed_ex_s": packed, "sequential_ex_s": sequential,
                     "ratio": packed / sequential})
        if log:
            log(f"K={k}: packed {packed:,.0f} ex/s, sequential {sequential:,.0f} ex/s, "
                f"{packed / sequential:.2f}x")
    return rows


def em_throughput(task, cfg: ModelConfig, n: int, n_greedy: int, device: str) -> dict[str, Any]:
    dev = resolve_device(device)
    model = ArithTransformer(cfg, k=1, seeds=[0]).to(dev)
    a, b, op = task.sample(n, torch.Generator().manual_seed(1), "uniform", split="holdout")
    exact_match(model, task, a[:4096], b[:4096], op[:4096])  # warm-up
    t0 = time.perf_counter()
    exact_match(model, task, a, b, op)
    tf = time.perf_counter() - t0
    t0 = time.perf_counter()
    greedy_decode(model, task, a[:n_greedy], b[:n_greedy], op[:n_greedy])
    gr = time.perf_counter() - t0
    return {"problems": n, "params": count_params(model), "seconds": tf,
            "problems_per_s": n / tf, "greedy_per_s": n_greedy / gr,
            "speedup": (n / tf) / (n_greedy / gr)}


def run_bench(quick: bool = False, device: str = "auto",
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    task = get_task(BENCH_TASK)
    cfg = bench_model(task)
    dev = str(resolve_device(device))
    steps = 20 if quick else 60
    ks = (1, 8) if quick else (1, 8, 32)
    rows = packing(task, cfg, ks, steps, dev, log)
    em = em_throughput(task, cfg, 10**5 if quick else 10**6, 5_000 if quick else 20_000, dev)
    return {"task": task.name, "model": cfg.summary(), "params": count_params(cfg),
            "device": dev, "threads": torch.get_num_threads(), "steps": steps,
            "batch_per_seed": 128, "packing": rows, "exact_match": em}
