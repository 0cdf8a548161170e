"""What may share a pack, and a pack's batches and member views (population.py trains packs).

Proposals whose `pack_key`s are equal differ only in `PER_MEMBER_FIELDS` (per-member
optimiser settings and the per-proposal stopping rule), so `train_population` can train their
seeds as the members of one model; `PackStream` stacks each proposal's batches on the member
axis, and `member_view` shows some members as a model of their own without a copy.

    from arithsweep.core.training.packing import pack_key
    pack_key(model_cfg, TrainConfig(lr=1e-2)) == pack_key(model_cfg, TrainConfig(lr=3e-2))  # True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.training.resume import prefixed, sub
from arithsweep.core.training.streams import _DataStream, _PolishStream

# Fields that may differ between the proposals of one pack: per-member optimiser settings and
# the per-proposal stopping rule. Everything else (shape of the step, data recipe, schedule
# length, evaluation cadence, device) is shared by the whole pack.
PER_MEMBER_FIELDS = ("lr", "min_lr_ratio", "warmup", "weight_decay", "grad_clip", "polish_lr",
                     "seed", "seeds", "target", "early_stop", "time_budget")


def pack_key(model_cfg: ModelConfig, cfg: TrainConfig) -> tuple:
    """Proposals with equal keys can be trained in one pack by `train_population`."""
    shared = tuple((k, _frozen(v)) for k, v in cfg.to_dict().items()
                   if k not in PER_MEMBER_FIELDS)
    return tuple(sorted((k, _frozen(v)) for k, v in model_cfg.to_dict().items())), shared


def _frozen(v):  # list fields (curriculum stages, arc_init) as tuples: a pack key is hashed
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


def check_pack(model_cfg: ModelConfig, cfgs: Sequence[TrainConfig]) -> None:
    """ConfigError unless every proposal of `cfgs` may share one pack with the first."""
    if not cfgs:
        raise ConfigError("train_population: no proposals given")
    first = dict(pack_key(model_cfg, cfgs[0])[1])
    for j, c in enumerate(cfgs[1:], 1):
        other = dict(pack_key(model_cfg, c)[1])
        diff = [k for k in first if first[k] != other[k]]
        if diff:
            raise ConfigError(f"proposal {j} cannot share a pack with proposal 0: {diff[0]}="
                              f"{other[diff[0]]!r} vs {first[diff[0]]!r} (pack_key differs)")


class PackStream:
    """The pack's batches: each proposal's own `_DataStream` (its seeds), stacked on K. A
    stopped proposal stops drawing (its members are frozen) and repeats its last batch."""

    def __init__(self, task: Task, cfgs: Sequence[TrainConfig], device: torch.device):
        self.streams = [_DataStream(task, c, device) for c in cfgs]
        self.counts = [c.seeds for c in cfgs]
        self.last: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(cfgs)
        self.running = [True] * len(cfgs)

    def skip(self, stopped: list[bool]) -> None:
        """The pack's members (K,) a cull stopped: their streams draw no more of their rows."""
        o = 0
        for s, n in zip(self.streams, self.counts):
            getattr(s, "data", s).skip = stopped[o:o + n]  # a polish stream's own draws
            o += n

    def polish(self, models: list[ArithTransformer], device: torch.device) -> None:
        for j, m in enumerate(models):  # mined per proposal: its seed, its members
            if self.running[j]:
                self.streams[j] = _PolishStream(self.streams[j], m, device)

    def state(self) -> tuple[dict[str, torch.Tensor], dict]:
        tensors, docs = {}, []
        for j, s in enumerate(self.streams):
            t, doc = s.state()
            tensors.update(prefixed(t, f"{j}."))
            if not self.running[j] and self.last[j] is not None:  # a stopped one repeats it
                tensors[f"{j}.last.tokens"], tensors[f"{j}.last.mask"] = self.last[j]
            docs.append(doc)
        return tensors, {"streams": docs, "running": list(self.running)}

    def load(self, tensors: dict[str, torch.Tensor], doc: dict, device: torch.device) -> None:
        self.running = list(doc["running"])
        for j, d in enumerate(doc["streams"]):
            t = sub(tensors, f"{j}.")
            if "polish" in d:
                self.streams[j] = _PolishStream.restore(self.streams[j], t, d, device)
            else:
                self.streams[j].load(t, d)
            if "last.tokens" in t:
                self.last[j] = (t["last.tokens"].to(device), t["last.mask"].to(device))

    def next(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        for j, s in enumerate(self.streams):
            if self.running[j] or self.last[j] is None:
                self.last[j] = s.next(step)  # (n_j, B, T), (n_j, B, T-1)
        if len(self.last) == 1:
            return self.last[0]  # type: ignore[return-value]
        return tuple(torch.cat([b[i] for b in self.last], 0) for i in range(2))  # (K, B, ...)


def member_view(model: ArithTransformer, off: int, n: int) -> ArithTransformer:
    """Members off..off+n of `model` as an n-member model whose weights are views of the
    pack's (no copy: it always shows the pack's current weights)."""
    if off == 0 and n == model.k:
        return model
    dev = next(model.parameters()).device
    view = ArithTransformer(model.cfg, k=n, generator=torch.Generator().manual_seed(0)).to(dev)
    for sp, pp in zip(view.parameters(), model.parameters(), strict=True):
        sp.data = pp.data[off:off + n]
    return view
