"""The training recipe for tiny models: what each step samples, how gradients are filtered,
and the polish phase's error mining. Every knob is a `TrainConfig` field a space can search.

Tiny arithmetic models are a grokking problem: whether a seed learns depends on the data mix
over time and on long enough training. What published tiny adders needed, as fields here:

- a carry-heavy share of each batch that fades over training (`carry_frac`, `carry_fade_*`;
  MicroAdder: 80% fading to 0 between 25% and 75% of the steps);
- a digit-length curriculum, linear or in stages (`curriculum_steps`, `curriculum_stages`);
- Grokfast-EMA, which amplifies the slow gradient components (`grokfast_alpha/lambda`);
- a polish phase on the model's own errors (`polish_*`), mined from the TRAINING split only:
  `Task.sample(split="train")` never returns a held-out problem, and every problem
  verification uses is held out (edge cases included), so polishing cannot see them.

    python -c "from arithsweep.core.training.recipe import carry_share; \\
        from arithsweep.core.config import TrainConfig as T; print(carry_share(T(carry_frac=.8, \\
        carry_fade_start=.25, carry_fade_end=.75, steps=100), 50))"
"""

from __future__ import annotations

import math

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task


def carry_share(cfg: TrainConfig, step: int) -> float:
    """Share of a batch drawn carry-enriched at `step` (with sampling "mixed")."""
    start, end = cfg.carry_fade_start * cfg.steps, cfg.carry_fade_end * cfg.steps
    if end <= start or step <= start:
        return cfg.carry_frac
    return cfg.carry_frac * max(0.0, 1.0 - (step - start) / (end - start))


def carry_mode(cfg: TrainConfig) -> str:
    """The Task.sample mode of the carry share: one chain pattern, or MicroAdder's mix."""
    return "carry_patterns" if cfg.carry_patterns == "mixed" else "carry"


def curriculum_cap(cfg: TrainConfig, n_digits: int, step: int) -> int | None:
    """Longest operand length allowed at `step`; None = the task's full length."""
    if cfg.curriculum:  # unequal stages: the first whose end lies ahead
        return next((min(n_digits, cap) for until, cap in cfg.curriculum if step < until), None)
    c = cfg.curriculum_steps
    if not c or step >= c:
        return None
    if cfg.curriculum_stages:
        k = cfg.curriculum_stages
        stage = min(k, (step * (k + 1)) // c)  # 0..k over the curriculum
        return max(1, math.ceil(n_digits * (stage + 1) / (k + 1)))
    return max(1, min(n_digits, 1 + (n_digits * step) // c))


def grokfast_on(cfg: TrainConfig, step: int) -> bool:
    """Does the Grokfast filter run at `step`? Everywhere when alpha > 0, unless a phase asks
    for it: then only inside such phases."""
    if not cfg.grokfast_alpha:
        return False
    if not cfg.grokfast_phased:
        return True
    start = cfg.steps + cfg.restart_steps
    for ph in cfg.phases or ():
        if start <= step < start + ph["steps"]:
            return ph["grokfast"]
        start += ph["steps"]
    return False


class GrokfastEMA:
    """Grokfast-EMA (Lee et al. 2024): g <- g + lambda * ema(g), per parameter, per member.

    The EMA lives in buffers shaped like the parameters, so the K members of a pack keep
    separate filters (every weight has a leading K dimension)."""

    def __init__(self, params: list[torch.nn.Parameter], alpha: float, lam: float) -> None:
        self.params, self.alpha, self.lam = params, alpha, lam
        self.ema: list[torch.Tensor] | None = None

    @torch.no_grad()
    def apply(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.ema is None:
            self.ema = [g.detach().clone() for g in grads]
        else:
            torch._foreach_mul_(self.ema, self.alpha)
            torch._foreach_add_(self.ema, grads, alpha=1 - self.alpha)
        torch._foreach_add_(grads, self.ema, alpha=self.lam)


@torch.no_grad()
def mine_errors(model: torch.nn.Module, task: Task, cfg: TrainConfig,
                gen: torch.Generator) -> list[tuple[torch.Tensor, ...]]:
    """Per member, the training-split problems (a, b, op) it gets wrong among `polish_pool`
    drawn from the training side of the split (half uniform lengths, half carry-enriched)."""
    from arithsweep.core.evaluation.evaluate import exact_match

    half = cfg.polish_pool // 2
    cap = cfg.train_digits  # polishing must not train on longer operands than training did
    parts = [task.sample(cfg.polish_pool - half, gen, "uniform", cap, split="train"),
             task.sample(half, gen, "carry" if task.op != "mul" else "values", cap,
                         split="train")]
    a, b, op = (torch.cat([p[i] for p in parts]) for i in range(3))  # (P,) each
    wrong = ~exact_match(model, task, a, b, op)  # (K, P)
    return [(a[w], b[w], op[w]) for w in wrong]


def lbfgs_polish(members: list[torch.nn.Module], task: Task, cfg: TrainConfig,
                 loss_fn, start: int, device: torch.device) -> None:
    """Full-batch L-BFGS on `cfg.lbfgs_pool` fixed TRAINING-split problems, one member at a
    time (each `members[i]` a one-member view whose tensors are the pack's): the curvature
    pairs of one member never mix with another's, so a member polishes the same in any pack.
    A member whose loss turns non-finite is put back as it was."""
    gen = torch.Generator().manual_seed(0x1BF6_5000 + cfg.seed)
    half = cfg.lbfgs_pool // 2
    parts = [task.sample(cfg.lbfgs_pool - half, gen, "values", cfg.train_digits, split="train"),
             task.sample(half, gen, "carry" if task.op != "mul" else "uniform",
                         cfg.train_digits, split="train")]
    a, b, op = (torch.cat([p[i] for p in parts]) for i in range(3))
    tokens, mask = (x.to(device)[None] for x in task.encode(a, b, op))  # (1, P, T), (1, P, T-1)
    for m in members:
        params = list(m.parameters())
        saved = [p.detach().clone() for p in params]
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=cfg.lbfgs_steps,
                                history_size=20, line_search_fn="strong_wolfe")

        def closure(m=m, opt=opt):
            opt.zero_grad()
            loss = loss_fn(m, tokens, mask, start).sum()
            loss.backward()
            return loss

        opt.step(closure)
        with torch.no_grad():
            if not torch.isfinite(loss_fn(m, tokens, mask, start)).all():
                for p, s in zip(params, saved):
                    p.copy_(s)
