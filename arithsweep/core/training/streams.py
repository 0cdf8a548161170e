"""The batches a pack trains on: each proposal's per-seed stream, and the polish's mix.

`_DataStream` samples DATA_CHUNK_STEPS steps of every seed's batches at a time, by the hash
sampler (each step's batch a function of seed and step alone) or one torch.Generator per seed;
`_PolishStream` mixes a member's own mined errors into half of each batch. Both save what
rebuilds them bit for bit into a training state (`state`, `load`/`restore`). `packing.PackStream`
stacks one stream per proposal; `bench` times the sampling.

    python -c "import torch; from arithsweep.core.config import TrainConfig; \\
        from arithsweep.core.data.tasks import get_task; \\
        from arithsweep.core.training.streams import _DataStream; \\
        s = _DataStream(get_task('add2'), TrainConfig(seeds=2), torch.device('cpu')); \\
        print([x.shape for x in s.next(0)])"
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.hash_sampling import HASH_MODES, HashSampler
from arithsweep.core.data.mix import carry_mode, carry_share, curriculum_cap, values_rows
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model.model import ArithTransformer
from arithsweep.core.training.recipe import mine_errors
from arithsweep.core.training.resume import generator_state, set_generator

DATA_CHUNK_STEPS = 32  # batches sampled per call: amortises sampling overhead over many steps


class _DataStream:
    """Per-seed training batches, sampled DATA_CHUNK_STEPS steps at a time.

    sampler "hash" (hash_sampling.HashSampler): every member's batches for the chunk in one
    vectorised call on the model's device, each step's batch a function of (seed, step) alone.
    sampler "stream": one torch.Generator per seed, as every run before the hash sampler;
    also the fallback, with a warning, for what the hash sampler does not implement.
    Either keeps the chunk as uint8 tokens (S, K, B, T) and a bool mask (S, K, B, T-1)."""

    def __init__(self, task: Task, cfg: TrainConfig, device: torch.device):
        self.task, self.cfg, self.device = task, cfg, device
        self.gens = [torch.Generator().manual_seed(1_000_003 * (cfg.seed + i) + 17)
                     for i in range(cfg.seeds)]
        self.buf: tuple[torch.Tensor, torch.Tensor] | None = None
        self.pos = DATA_CHUNK_STEPS
        # what rebuilds `buf` on resume: the step of the last refill and (stream sampler) the
        # generators' states before it; the chunk itself is not saved
        self.refill_step: int | None = None
        self.gens_pre: list[torch.Tensor] | None = None
        self.hash: HashSampler | None = None
        # members a cull stopped (population._cull): the hash sampler skips their rows (zeros:
        # a stopped member is never trained on them); the stream sampler draws every member,
        # as its generators advance member by member
        self.skip: list[bool] = [False] * cfg.seeds
        self.why_stream = ""  # why a run that asked for sampler "hash" streams instead
        if cfg.sampler == "hash":
            if not isinstance(task, Task):
                self.why_stream = f"task {task.name} is not an arithmetic Task"
            elif cfg.sampling not in HASH_MODES:
                self.why_stream = f"sampling={cfg.sampling!r} is not one of {HASH_MODES}"
            else:
                self.hash = HashSampler(task, cfg, device, self._max_len)
            if self.why_stream:
                warnings.warn(f"sampler 'hash' falls back to 'stream': {self.why_stream}",
                              stacklevel=2)

    def _max_len(self, step: int) -> int | None:
        # train_digits caps every draw (length generalisation); a curriculum grows up to it
        top = self.cfg.train_digits
        if top is not None and top > self.task.n_digits:
            raise ConfigError(f"train config: train_digits={top}: must be at most the task's "
                              f"{self.task.n_digits} digits ({self.task.name})")
        cap = curriculum_cap(self.cfg, top or self.task.n_digits, step)
        return top if cap is None else cap

    def _sample_member(self, gen: torch.Generator, n: int, max_len: int | None, step: int):
        cfg, task = self.cfg, self.task
        if cfg.sampling == "enriched":  # Quirke's classes in equal shares
            from arithsweep.core.data.quirke import enriched_sample

            return enriched_sample(task, n, gen, "train", max_len)
        if cfg.sampling != "mixed":
            mode = carry_mode(cfg) if cfg.sampling == "carry" else cfg.sampling
            return task.sample(n, gen, mode, max_len, split="train")
        n_carry = int(round(n * carry_share(cfg, step)))
        n_values = values_rows(cfg, n - n_carry)
        parts = [task.sample(n - n_carry - n_values, gen, "uniform", max_len, split="train"),
                 task.sample(n_values, gen, "values", max_len, split="train"),
                 task.sample(n_carry, gen, carry_mode(cfg), max_len, split="train")]
        return tuple(torch.cat([p[i] for p in parts]) for i in range(3))

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        t = {f"gen{i}": generator_state(g) for i, g in enumerate(self.gens)}
        t.update({f"pre{i}": g for i, g in enumerate(self.gens_pre or [])})
        return t, {"pos": self.pos, "refill_step": self.refill_step}

    def load(self, t: dict[str, torch.Tensor], doc: dict[str, Any]) -> None:
        if doc["refill_step"] is not None:  # the chunk in use, drawn again from the same state
            for i, g in enumerate(self.gens):
                if f"pre{i}" in t:
                    set_generator(g, t[f"pre{i}"])
            self._refill(doc["refill_step"])
        for i, g in enumerate(self.gens):
            set_generator(g, t[f"gen{i}"])
        self.pos = doc["pos"]

    def _refill(self, step: int) -> None:
        self.refill_step = step
        if self.hash is not None:  # (S, K, B, T) uint8, (S, K, B, T-1) bool, on the device
            live = [i for i in range(self.cfg.seeds) if not self.skip[i]]
            steps = list(range(step, step + DATA_CHUNK_STEPS))
            # each (seed, step) batch is a function of those two alone: a survivor's rows are
            # the same whichever members are drawn beside it
            drawn = self.hash.batches([self.cfg.seed + i for i in live], steps)
            if len(live) < self.cfg.seeds:
                full = tuple(x.new_zeros((x.shape[0], self.cfg.seeds, *x.shape[2:]))
                             for x in drawn)
                for f, x in zip(full, drawn):
                    f[:, live] = x
                drawn = full
            self.buf, self.pos = drawn, 0
            return
        S, B, K = DATA_CHUNK_STEPS, self.cfg.batch_size, self.cfg.seeds
        n, rows = B * S, []
        self.gens_pre = [generator_state(g) for g in self.gens]
        for gen in self.gens:
            a, b, op = self._sample_member(gen, n, self._max_len(step), step)
            perm = torch.randperm(n, generator=gen)  # mix carry and uniform rows across steps
            rows.append((a[perm], b[perm], op[perm]))
        # every member's rows in one encode (rows are encoded independently); uint8 tokens,
        # as the hash sampler's: 8x fewer bytes, and next() widens one step at a time
        t, m = self.task.encode(*(torch.cat(x) for x in zip(*rows)), dtype=torch.uint8)
        # (S, K, B, T) so that one step's batch is a contiguous slice
        self.buf = tuple(x.view(K, S, B, -1).transpose(0, 1).contiguous().to(self.device)
                         for x in (t, m))
        self.pos = 0

    def next(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pos >= DATA_CHUNK_STEPS:
            self._refill(step)
        assert self.buf is not None
        i, self.pos = self.pos, self.pos + 1
        # uint8 tokens, as drawn: the tiny kernel reads them so, the reference loss widens them
        return self.buf[0][i], self.buf[1][i]  # (K, B, T), (K, B, T-1)


class _PolishStream:
    """The polish phase's batches: per member, half its own errors (mined once from the
    training split, see recipe.mine_errors), half the ordinary training stream. `errors`:
    the pool as mined before (a resumed run), instead of mining it again."""

    def __init__(self, data: _DataStream, model: ArithTransformer | None, device: torch.device,
                 errors: list[tuple[torch.Tensor, torch.Tensor]] | None = None):
        self.data, cfg = data, data.cfg
        if errors is None:
            assert model is not None
            gen = torch.Generator().manual_seed(0x9011_5400 + cfg.seed)
            errors = [data.task.encode(*e) for e in mine_errors(model, data.task, cfg, gen)]
        self.errors = [(t.to(device), m.to(device)) for t, m in errors]  # (E_k, T) each
        self.half = cfg.batch_size // 2

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        t, doc = self.data.state()
        for k, (et, em) in enumerate(self.errors):
            t[f"err{k}.tokens"], t[f"err{k}.mask"] = et, em
        return t, {**doc, "polish": len(self.errors)}

    @classmethod
    def restore(cls, data: _DataStream, t: dict[str, torch.Tensor], doc: dict[str, Any],
                device: torch.device) -> _PolishStream:
        data.load(t, doc)
        errors = [(t[f"err{k}.tokens"], t[f"err{k}.mask"]) for k in range(doc["polish"])]
        return cls(data, None, device, errors)

    def next(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, mask = (x.clone() for x in self.data.next(step))  # (K, B, T), (K, B, T-1)
        for k, (et, em) in enumerate(self.errors):
            if et.shape[0]:  # a member that makes no error keeps the ordinary batch
                idx = torch.randint(et.shape[0], (self.half,), generator=self.data.gens[k])
                tokens[k, :self.half], mask[k, :self.half] = et[idx], em[idx]
        return tokens, mask
