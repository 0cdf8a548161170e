"""`TrainConfig`: every knob of one training run of K packed seeds, validated.

Kept apart from the trainer so that the search space translator and the CLI can build and
validate a training config without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from arithsweep.dictconfig import DictConfig
from arithsweep.errors import ConfigError

SAMPLINGS = ("uniform", "values", "carry", "mixed")


@dataclass
class TrainConfig(DictConfig):
    _label = "train config"  # unannotated: a class attribute, not a dataclass field

    steps: int = 3000  # optimiser steps of the first cosine pass (early stop may end sooner)
    batch_size: int = 128  # problems per step *per seed*
    lr: float = 3e-3  # peak learning rate after warmup
    min_lr_ratio: float = 0.05  # cosine floor as a fraction of lr
    warmup: int = 100  # linear warmup steps
    weight_decay: float = 0.01  # AdamW decay on matrices only (not norms, biases)
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0  # per-seed global-norm clip; 0 = off
    seeds: int = 4  # K: seeds of one architecture trained together
    seed: int = 0  # seed i of the pack is seed + i (init and data)
    # uniform (operand lengths uniform) | values (operands uniform over the problem space) |
    # carry (carry cascades forced) | mixed: carry_frac carry, the rest half uniform, half values
    sampling: str = "mixed"
    carry_frac: float = 0.25  # with "mixed": share of each batch drawn carry-enriched
    curriculum_steps: int = 0  # steps over which the longest operand length grows to full; 0 = off
    restart_steps: int = 0  # a second cosine pass of this many steps (warm restart); 0 = off
    eval_every: int = 250  # steps between exact-match evaluations
    eval_size: int = 4096  # held-out problems per evaluation (disjoint from the training stream)
    target: float = 0.99  # early stop once any seed reaches this exact match
    early_stop: bool = True
    # examples per forward/backward across the whole pack; a step is split into micro-batches
    # of about this size and their gradients summed (same update). 0 = auto: ~1024 on a CPU,
    # where a bigger call spills the L2 cache, and the whole step on a GPU.
    micro_batch: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    compile: bool = False  # torch.compile the packed loss (pays off on long runs)
    time_budget: float = 0.0  # seconds; stop after the evaluation that crosses it; 0 = none

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"train config: {field}={getattr(self, field)!r}: {why}")

        def whole(field: str, lo: int) -> None:
            v = getattr(self, field)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= lo, field,
                 f"must be a whole number >= {lo}")

        for f in ("steps", "batch_size", "seeds", "eval_every", "eval_size"):
            whole(f, 1)
        for f in ("warmup", "curriculum_steps", "restart_steps", "seed", "micro_batch"):
            whole(f, 0)
        need(self.lr > 0, "lr", "must be > 0")
        need(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]")
        need(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        need(0 <= self.beta1 < 1, "beta1", "must be in [0, 1)")
        need(0 <= self.beta2 < 1, "beta2", "must be in [0, 1)")
        need(self.grad_clip >= 0, "grad_clip", "must be >= 0 (0 = off)")
        need(self.sampling in SAMPLINGS, "sampling", f"must be one of {', '.join(SAMPLINGS)}")
        need(0 <= self.carry_frac <= 1, "carry_frac", "must be in [0, 1]")
        need(0 < self.target <= 1, "target", "must be in (0, 1]")
        need(self.time_budget >= 0, "time_budget", "must be >= 0 seconds (0 = none)")
        need(isinstance(self.device, str) and (self.device in ("auto", "cpu")
             or self.device.startswith("cuda")), "device", "must be auto, cpu, cuda or cuda:N")

