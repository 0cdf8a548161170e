"""`arithsweep bench`: throughput figures as ratios measured side by side in one run.

1. Packed training: K seeds trained together by one `train()` call vs the same K seeds trained
   one after another (K single-seed `train()` calls), for K = 1, 8, 32; aggregate training
   examples/s, end to end (sampling, forward, backward, AdamW, the closing evaluation).
2. Exact match: 10^6 add10 problems through the teacher-forced fast path on a ~760-parameter
   model, against greedy decoding on a sample.
3. Population packing: P proposals (own lr / decay / warmup) x K seeds in one
   `train_population` pack vs one `train()` per proposal, one after another, as proposals
   trained per hour, on the add10 bench model and on a 244-parameter add3 model.

4. On CUDA only: aggregate training examples/s at K = 1, 64, 1024 seeds of the add10 bench
   model with the default step (one captured CUDA graph, fused attention), the GPU's
   utilisation sampled while it runs, and at K = 1024 the same pack eager and with the manual
   attention kernel, as ratios.

5. Tiny models (`bench_tiny`): the 87- and 60-parameter add10 adders, examples/s of each
   training layout (1 seed, packs of 4/8/64, batch 1024, torch.compile) and of a plain PyTorch
   loop of the same model.

Absolute numbers depend on the machine; the ratios are the point.

    arithsweep bench            # ~2-3 minutes on a 2-core CPU
    arithsweep bench --quick    # a smoke run
    arithsweep bench --device cuda
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from arithsweep.core.bench_tiny import crossover_rows, tiny_rows
from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import get_task
from arithsweep.core.evaluation.evaluate import exact_match, greedy_decode
from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params
from arithsweep.core.training.population import train, train_population
from arithsweep.core.training.train import resolve_device

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


def _proposals(p: int, k: int, steps: int, device: str) -> list[TrainConfig]:
    # P proposals as a search makes them: one shape, each its own lr / decay / warmup / seeds
    return [replace(_train_cfg(k, steps, j * k, device), lr=3e-3 * 10 ** (j / max(1, p - 1)),
                    weight_decay=(0.0, 0.01, 0.1)[j % 3], warmup=5 + 5 * (j % 3))
            for j in range(p)]


def population(task, cfg: ModelConfig, p: int, k: int, steps: int, device: str,
               log: Callable[[str], None] | None) -> dict[str, Any]:
    """P proposals x K seeds in one pack (train_population) vs one proposal per run (P
    train() calls of K seeds, one after another), as proposals trained per hour."""
    cfgs = _proposals(p, k, steps, device)
    train_population(task, cfg, _proposals(p, k, 5, device))  # warm caches and allocator once
    t0 = time.perf_counter()
    train_population(task, cfg, cfgs)
    packed = time.perf_counter() - t0
    t0 = time.perf_counter()
    for c in cfgs:
        train(task, cfg, c)
    sequential = time.perf_counter() - t0
    row = {"task": task.name, "model": cfg.summary(), "params": count_params(cfg),
           "proposals": p, "seeds": k, "steps": steps,
           "packed_per_h": 3600 * p / packed, "sequential_per_h": 3600 * p / sequential,
           "ratio": sequential / packed}
    if log:
        log(f"{task.name} {row['params']}p: {p} proposals x {k} seeds, one pack "
            f"{row['packed_per_h']:,.0f} proposals/h, one per run "
            f"{row['sequential_per_h']:,.0f} proposals/h, {row['ratio']:.2f}x")
    return row


def population_rows(quick: bool, device: str,
                    log: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """`population` on the add10 bench model and on a small add3 model."""
    # K=2 seeds a proposal, as a search spends them; the pack is P*K = 16 members
    p, k, steps = (4, 2, 20) if quick else (8, 2, 60)
    add3 = get_task("add3")
    small = ModelConfig(vocab_size=add3.vocab_size, n_ctx=add3.n_ctx, d_model=4, n_heads=1,
                        d_ff=8)
    add10 = get_task(BENCH_TASK)
    return [population(t, c, p, k, steps, device, log)
            for t, c in ((add10, bench_model(add10)), (add3, small))]


def em_throughput(task, cfg: ModelConfig, n: int, n_greedy: int, device: str) -> dict[str, Any]:
    """Exact match of n problems (encoding included), with today's chunking and with the
    earlier 2**18-token chunks back to back (their ratio is the gain), and greedy decoding."""
    dev = resolve_device(device)
    model = ArithTransformer(cfg, k=1, seeds=[0]).to(dev)
    a, b, op = task.sample(n, torch.Generator().manual_seed(1), "uniform", split="holdout")
    exact_match(model, task, a[:4096], b[:4096], op[:4096])  # warm-up
    t0 = time.perf_counter()
    exact_match(model, task, a, b, op)
    tf = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact_match(model, task, a, b, op, chunk=max(256, (1 << 18) // task.seq_len))
    old = time.perf_counter() - t0
    t0 = time.perf_counter()
    greedy_decode(model, task, a[:n_greedy], b[:n_greedy], op[:n_greedy])
    gr = time.perf_counter() - t0
    return {"problems": n, "params": count_params(model), "seconds": tf,
            "problems_per_s": n / tf, "greedy_per_s": n_greedy / gr,
            "speedup": (n / tf) / (n_greedy / gr), "old_chunk_seconds": old,
            "vs_old_chunk": old / tf}


def sampler_throughput(task, k: int, chunks: int, device: str,
                       log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Training problems/s, sampled and encoded, for K members: sampler "hash" vs "stream"."""
    from arithsweep.core.training.streams import DATA_CHUNK_STEPS, _DataStream

    dev, out = resolve_device(device), {}
    for sampler in ("hash", "stream"):
        data = _DataStream(task, TrainConfig(seeds=k, sampler=sampler), dev)
        data._refill(0)  # warm-up (and the hash sampler's fallback pools)
        t0 = time.perf_counter()
        for i in range(1, chunks + 1):
            data._refill(i * DATA_CHUNK_STEPS)
        n = chunks * DATA_CHUNK_STEPS * k * data.cfg.batch_size
        out[f"{sampler}_per_s"] = n / (time.perf_counter() - t0)
    row = {"k": k, **out, "ratio": out["hash_per_s"] / out["stream_per_s"]}
    if log:
        log(f"sampler, K={k}: hash {row['hash_per_s']:,.0f} problems/s, stream "
            f"{row['stream_per_s']:,.0f} problems/s, {row['ratio']:.2f}x")
    return row


class _Utilisation:
    """GPU busy percentage sampled every 0.1 s while a block runs (None without NVML)."""

    def __enter__(self) -> _Utilisation:
        import threading

        self.samples: list[float] = []
        self._stop = threading.Event()

        def poll() -> None:
            while not self._stop.wait(0.1):
                try:
                    self.samples.append(float(torch.cuda.utilization()))
                except Exception:  # noqa: BLE001 - no pynvml / NVML: report None
                    return

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def cuda_rows(task, cfg: ModelConfig, device: str, quick: bool,
              log: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """Aggregate examples/s on CUDA by K, step mode and attention kernel (see module doc)."""
    from arithsweep.core.model import layers

    steps, batch = (20, 256) if quick else (60, 256)
    runs = [(k, True, "fused") for k in (1, 64, 1024)] + [(1024, False, "fused"),
                                                          (1024, True, "manual")]
    rows = []
    for k, graph, kernel in runs:
        tc = replace(_train_cfg(k, steps, 0, device), batch_size=batch, cuda_graph=graph)
        saved, layers.ATTENTION["cuda"] = layers.ATTENTION["cuda"], kernel
        try:
            train(task, cfg, replace(tc, steps=5))  # warm-up: allocator, cuBLAS, capture
            torch.cuda.synchronize()
            with _Utilisation() as util:
                t0 = time.perf_counter()
                r = train(task, cfg, tc)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
        finally:
            layers.ATTENTION["cuda"] = saved
        row = {"k": k, "batch_per_seed": batch, "step": r.step_mode, "attention": kernel,
               "examples_per_s": r.examples / dt, "gpu_util": util.mean,
               "gpu": torch.cuda.get_device_name()}
        rows.append(row)
        if log:
            u = "n/a" if util.mean is None else f"{util.mean:.0f}%"
            log(f"cuda K={k} ({r.step_mode}, {kernel} attention): "
                f"{row['examples_per_s']:,.0f} ex/s, GPU busy {u}")
    default = next(r for r, (k, graph, kernel) in zip(rows, runs)
                   if (k, graph, kernel) == (1024, True, "fused"))["examples_per_s"]
    for row in rows:
        row["vs_default_k1024"] = row["examples_per_s"] / default
    return rows


def run_bench(quick: bool = False, device: str = "auto",
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    task = get_task(BENCH_TASK)
    cfg = bench_model(task)
    dev = str(resolve_device(device))
    steps = 20 if quick else 60
    ks = (1, 8) if quick else (1, 8, 32)
    rows = packing(task, cfg, ks, steps, dev, log)
    em = em_throughput(task, cfg, 10**5 if quick else 10**6, 5_000 if quick else 20_000, dev)
    gpu = cuda_rows(task, cfg, dev, quick, log) if dev.startswith("cuda") else []
    return {"cuda": gpu, "task": task.name, "model": cfg.summary(), "params": count_params(cfg),
            "device": dev, "threads": torch.get_num_threads(), "steps": steps,
            "batch_per_seed": 128, "packing": rows, "exact_match": em,
            "population": population_rows(quick, dev, log),
            "sampler": sampler_throughput(task, 8, 2 if quick else 8, dev, log),
            "tiny": tiny_rows(quick, dev, log),
            "tiny_crossover": [] if quick or dev != "cpu" else crossover_rows(dev, log)}
