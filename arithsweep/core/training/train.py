"""The packed trainer: K seeds of one architecture trained at once, at about the cost of one.

Every weight of `ArithTransformer` carries a leading seed dimension, so one forward/backward
and one AdamW step move all K models; each seed has its own data stream, its own gradient clip
and its own NaN guard (a seed whose loss goes non-finite is marked failed, the rest go on).
Seed i of a pack is `cfg.seed + i` for both init and data, so it trains the same whether it
runs alone or in a pack. Loss is on answer tokens only; exact match of every seed is measured
every `eval_every` steps on held-out problems that the training stream never draws.
This module holds the pieces (results, schedule, loss, clipping; the data streams are in
streams.py); the loop, the per-member AdamW and the stopping rule (`evaluation.confirm.reached`,
on its `eval_problems`) live in population.py (`train_population`, many proposals of one shape
in one pack), and `population.train` is a pack of one. Imports run one way: population ->
step -> train -> recipe.

    from arithsweep.core.training.population import train
    result = train(get_task("add3"), model_cfg, TrainConfig(seeds=4))
    result.save_best("runs/add3/best")
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError
from arithsweep.core.model.checkpoint import keep_start, save_checkpoint
from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params
from arithsweep.core.model.tiny_layout import unsupported
from arithsweep.core.training.resume import state_origin, sub


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r}: CUDA is not available on this machine")
    return torch.device(name)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, cosine to a floor; an optional second (restart) pass of the same shape;
    then each phase's own schedule; then polish_lr for the polish steps."""
    floor = cfg.lr * cfg.min_lr_ratio
    if step >= cfg.main_steps:  # the polish phase: a small constant rate
        return cfg.polish_lr
    start = cfg.steps + cfg.restart_steps
    for ph in cfg.phases or () if step >= start else ():  # after the cosine and the restart
        if step < start + ph["steps"]:
            if ph["schedule"] == "constant":
                return ph["lr"]
            t, low = (step - start) / max(1, ph["steps"] - 1), ph["lr"] * ph["min_lr_ratio"]
            return low + 0.5 * (ph["lr"] - low) * (1 + math.cos(math.pi * t))
        start += ph["steps"]
    if step >= cfg.steps and cfg.restart_steps:
        s, n, warm = step - cfg.steps, cfg.restart_steps, min(cfg.warmup, cfg.restart_steps // 10)
        ahead = 0
    else:
        s, n, warm, ahead = step, cfg.steps, cfg.warmup, cfg.cosine_from
    if s < warm:
        return cfg.lr * (s + 1) / warm
    t = min(1.0, (s - warm + ahead) / max(1, n - warm))
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * t))


@dataclass
class EvalPoint:
    step: int
    exact_match: list[float]  # per seed, on the held-out evaluation set (nan for failed seeds)
    loss: list[float]  # per seed, training loss averaged since the previous evaluation
    best_em: float  # max over live seeds
    lr: float
    elapsed: float  # seconds since training started
    examples: int  # training problems seen, all seeds together
    position_acc: list[list[float]] = field(default_factory=list)  # (K, answer_len)


@dataclass
class TrainResult:
    task: Task
    model_cfg: ModelConfig
    train_cfg: TrainConfig
    model: ArithTransformer  # the whole population after the last step
    params: int  # unique parameters of one member
    device: str
    history: list[EvalPoint] = field(default_factory=list)
    failed: list[bool] = field(default_factory=list)  # per seed: loss went non-finite
    best_seed: int = 0  # index into the pack of the best evaluation so far
    best_em: float = 0.0
    best_step: int = 0
    best_state: dict[str, torch.Tensor] = field(default_factory=dict)  # that member's weights then
    # per seed, its best held-out exact match so far and its weights then, (n, ...) stacked:
    # what a path's selection continues (core/training/path.py)
    member_best: list[float] = field(default_factory=list)
    member_best_state: dict[str, torch.Tensor] = field(default_factory=dict)
    best_phase: str = ""  # a path's: the phase whose member is the best (core/training/path.py)
    steps: int = 0
    wall_time: float = 0.0
    examples: int = 0
    stopped_early: bool = False
    stop_reason: str = ""
    eval_size: int = 0  # distinct held-out problems per evaluation (confirm.eval_problems)
    step_mode: str = ""  # "captured" (one CUDA graph per step) or "eager (<why>)": step.py
    layout: str = ""  # "tiny" or "reference" (choose_layout) ...
    layout_why: str = ""  # ... and why
    # seconds inside the training loop itself: wall_time less what callbacks (full checks, Tune
    # reports) and state writes took, so examples/s is the loop's own rate
    train_seconds: float = 0.0

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.train_seconds if self.train_seconds > 0 else 0.0

    # the run's record as a training state holds it (resume.py): JSON for the figures, tensors
    # for the best member's weights
    _STATE_FIELDS = ("failed", "best_seed", "best_em", "best_step", "steps", "wall_time",
                     "examples", "stopped_early", "stop_reason", "train_seconds")

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        doc = {k: getattr(self, k) for k in self._STATE_FIELDS}
        doc["history"] = [asdict(p) for p in self.history]
        doc["member_best"] = list(self.member_best)
        t = {f"best.{k}": v for k, v in self.best_state.items()}
        t.update({f"mbest.{k}": v for k, v in self.member_best_state.items()})
        return t, doc

    def load(self, tensors: dict[str, torch.Tensor], doc: dict[str, Any]) -> None:
        for k in self._STATE_FIELDS:
            setattr(self, k, doc[k])
        self.history = [EvalPoint(**p) for p in doc["history"]]
        self.best_state = sub(tensors, "best.")
        # states written before per-member bests were kept have neither
        self.member_best = list(doc.get("member_best") or [])
        self.member_best_state = sub(tensors, "mbest.")

    @torch.no_grad()
    def keep_member_bests(self, em: list[float]) -> None:
        """After an evaluation (`em` per seed, nan for failed ones): each seed whose held-out
        exact match is at its best so far keeps its weights (ties go to the newer ones)."""
        params = dict(self.model.named_parameters())  # (n, ...) views of the pack's
        if not self.member_best:
            self.member_best = [-1.0] * len(em)
            self.member_best_state = {k: p.detach().clone() for k, p in params.items()}
        for i, e in enumerate(em):
            if e == e and e >= self.member_best[i]:
                self.member_best[i] = float(e)
                for k, p in params.items():
                    self.member_best_state[k][i].copy_(p[i])

    def best_model(self) -> ArithTransformer:
        """The best member as a k=1 model, at its best evaluation."""
        state = self.best_state or self.model.member_state(self.best_seed)
        return ArithTransformer.from_member_state(self.model_cfg, state)

    def save_best(self, path: str | Path, meta: dict[str, Any] | None = None) -> str:
        metrics = {"eval_exact_match": self.best_em, "best_step": self.best_step,
                   "steps": self.steps, "wall_time": round(self.wall_time, 3)}
        info = {"seed": self.train_cfg.seed + self.best_seed, "seed_index": self.best_seed,
                "steps": self.steps, "wall_time": round(self.wall_time, 3),
                "device": self.device, "layout": self.layout,
                "repeats": repeats(self.layout, self.device),
                **(meta or {})}
        # a continued run's checkpoint carries its start, so its --config runs anywhere
        cfg, start = keep_start(self.train_cfg, path)
        origin = state_origin(self.train_cfg.init_from if self.train_cfg else None)
        return save_checkpoint(path, self.best_model(), self.task, 0, cfg, metrics,
                               {**info, **start, **origin})


def micro_batches(cfg: TrainConfig) -> int:
    """How many pieces each member's batch is split into (see TrainConfig.micro_batch): a
    function of the member's own batch alone. A piece's gradients are summed into the step's,
    so a split rounds differently from the whole batch; when the count followed the pack's
    size (seeds x batch per 1024 on a CPU, before), a member trained to other floats alone
    than in a pack (issue 55)."""
    if not cfg.micro_batch:
        return 1
    return max(1, cfg.batch_size // cfg.micro_batch)


# Above this many parameters `layout: auto` keeps the reference layout: its GEMMs pay once the
# widths reach ~100 (one-block add10 models on a 2-core CPU, 8 seeds: tiny 1.5x the reference
# at 36k parameters, 0.9x at 79k; `arithsweep bench`'s crossover rows, README)
TINY_MAX_PARAMS = 40_000


# Where the same seed gives the same weights (docs/training.md), recorded in each checkpoint's
# meta and said by its published section: the tiny kernel's rounding is pinned (no fused
# multiply-adds, whatever the instruction set or compiler), and torch's ops around it gave the
# same bits with its AVX2 and AVX-512 kernels (tests/test_kernel_target.py); the reference
# layout's matrix products are torch's and its BLAS's, chosen per CPU kind
ANY_X86 = "any x86-64 with AVX2 or AVX-512"
ONE_KIND = "a machine of the same kind"


def repeats(layout: str, device: str) -> str:
    """Where a run in `layout` on `device` gives the same weights again (same arithsweep and
    torch): ANY_X86 for the tiny layout, else ONE_KIND."""
    return ANY_X86 if str(layout).startswith("tiny") and str(device) == "cpu" else ONE_KIND


def choose_layout(model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device,
                  ) -> tuple[str, str]:
    """(layout, why) for TrainConfig.layout: "tiny" or "reference", and the reason."""
    if cfg.layout == "reference":
        return "reference", "asked for"
    why = unsupported(model_cfg, device)
    if cfg.layout == "tiny":
        if why is not None:
            raise ConfigError(f"train config: layout='tiny': {why}")
        return "tiny", "asked for"
    if why is not None:
        return "reference", why
    if cfg.compile:
        return "reference", "compile=true compiles the reference loss"
    n = count_params(model_cfg)
    if n > TINY_MAX_PARAMS:
        return "reference", f"{n} parameters (tiny pays up to {TINY_MAX_PARAMS})"
    return "tiny", f"{n} parameters, one block"


def _loss_fn(model: ArithTransformer, tokens: torch.Tensor, mask: torch.Tensor,
             start: int = 0, active: torch.Tensor | None = None) -> torch.Tensor:
    """Per-seed mean cross entropy over answer tokens: (K,). Input positions before `start`
    never predict an answer token, so they are not unembedded at all. `active` is for layouts
    that can skip members (the tiny one); this one computes them all and the step masks."""
    tokens = tokens.long()  # the training streams' are uint8; embedding and targets take int64
    logits = model(tokens[..., :-1], from_pos=start)  # (K, B, T-1-start, V)
    target, mask = tokens[..., start + 1:], mask[..., start:]
    ce = F.cross_entropy(logits.flatten(0, 2), target.flatten(), reduction="none")
    ce = ce.view(mask.shape) * mask  # (K, B, T-1-start)
    return ce.sum((1, 2)) / mask.sum((1, 2)).clamp(min=1)


def member_sq_norms(grads: list[torch.Tensor], k: int) -> torch.Tensor:
    """(K,) each member's squared global gradient norm, summed in an order set by the
    parameters' sizes alone: one zero-padded (K, 2^n) table of squares, halved elementwise
    n times. torch's reductions are not that: `stack(...).sum(0)` over the parameters, a
    reduction across (P, K), gave other bits for K = 1, 4, 5, 7 or 64 than for K = 2 or 8
    (measured, torch 2.13 on x86-64), so a member was clipped, and trained, to other floats
    alone than in a pack (issue 55). An elementwise add rounds each sum by itself, whatever
    K and the vector width."""
    flat = [g.reshape(k, -1) for g in grads]
    n = sum(f.shape[1] for f in flat)
    width = 1 << (n - 1).bit_length()  # the next power of two; + 0.0 changes no square
    sq = torch.cat([*flat, flat[0].new_zeros(k, width - n)], 1).square()
    while width > 1:
        width //= 2
        sq = sq[:, :width] + sq[:, width:]
    return sq.view(k)


@torch.no_grad()
def _clip_and_guard(model: ArithTransformer | list[torch.Tensor], clip: float | torch.Tensor,
                    alive: torch.Tensor) -> None:
    """Per-seed global-norm clipping to `clip` (one norm, or (K,) per member; <= 0 = off); a
    seed whose gradient is not finite dies (`alive`, (K,), is updated in place) and dead
    seeds' gradients become exactly 0 so they stay inert. `model`: or its parameters, listed
    once (a step need not walk the modules again)."""
    params = model if isinstance(model, list) else model.parameters()
    grads = [p.grad for p in params if p.grad is not None]
    sq = member_sq_norms(grads, alive.numel())  # (K,)
    alive &= torch.isfinite(sq)
    scale = torch.ones_like(sq)
    if isinstance(clip, torch.Tensor):  # (K,): a member with clip 0 is not clipped
        scale = torch.where(clip > 0, (clip / (sq.sqrt() + 1e-6)).clamp(max=1.0), 1.0)
    elif clip > 0:
        scale = (clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    # where, not a product: a dead seed's norm is NaN and 0 * NaN would poison its gradient
    scale = torch.where(alive, scale, 0.0)
    for g in grads:
        g.nan_to_num_(0.0, 0.0, 0.0).mul_(scale.view(-1, *([1] * (g.dim() - 1))))

