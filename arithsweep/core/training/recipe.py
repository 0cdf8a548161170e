"""The training recipe for tiny models: how gradients are filtered and the polish phases (on
the model's own errors, and L-BFGS). Every knob is a `TrainConfig` field a space can search;
what each step samples (carry share, curriculum) is `data.mix`, which both samplers read.

Tiny arithmetic models are a grokking problem: whether a seed learns depends on the data mix
over time and on long enough training. What published tiny adders needed, as TrainConfig fields:

- a carry-heavy share of each batch that fades over training (`carry_frac`, `carry_fade_*`;
  MicroAdder: 80% fading to 0 between 25% and 75% of the steps), in `data.mix`;
- a digit-length curriculum, linear or in stages (`curriculum_steps`, `curriculum_stages`),
  in `data.mix`;
- Grokfast-EMA, which amplifies the slow gradient components (`grokfast_alpha/lambda`);
- a polish phase on the model's own errors (`polish_*`), mined from the TRAINING split only:
  `Task.sample(split="train")` never returns a held-out problem, and every problem
  verification uses is held out (edge cases included), so polishing cannot see them.

    python -c "from arithsweep.core.training.recipe import grokfast_on; \\
        from arithsweep.core.config import TrainConfig as T; \\
        print(grokfast_on(T(grokfast_alpha=0.98), 0), grokfast_on(T(), 0))"
"""

from __future__ import annotations

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task

WD_DROP_DIGITS = 0.7  # answer-digit accuracy a wd_drops step also needs (MicroAdder's gate)


def wd_factors(drops: list[list[float]], exact: list[float], digits: list[list[float]],
               held: list[float] | None = None) -> list[float]:
    """Per member, the weight-decay factor `TrainConfig.wd_drops` gives it after an evaluation:
    exact (K,) held-out exact match, digits (K, answer_len) accuracy per answer position.
    held (K,): the factors so far, for `wd_drops_hold` (tbukic's rule: no digit gate, and a
    factor only ever falls); None = MicroAdder's rule, re-read at every evaluation."""
    out = []
    for j, (em, acc) in enumerate(zip(exact, digits)):
        ok = em == em and (held is not None  # nan: failed
                           or bool(acc) and sum(acc) / len(acc) >= WD_DROP_DIGITS)
        f = drop_factor(drops, em) if ok else 1.0
        out.append(f if held is None else min(f, held[j]))
    return out


def drop_factor(drops: list[list[float]], em: float) -> float:
    """The decay factor of the last `drops` step whose exact match `em` has passed (1.0 for
    none): [[0.01, 0.1], [0.05, 0.001]] gives 0.001 at 90%."""
    return next((f for at, f in reversed(drops) if em >= at), 1.0)


def decay_factors(wd: torch.Tensor, base: torch.Tensor) -> list[float]:
    """Per member, the factor its decay `wd` (K,) is at relative to `base` (K,); 1 where the
    base is 0 (nothing to drop)."""
    return torch.where(base > 0, wd / base.clamp_min(1e-30), torch.ones_like(base)).tolist()


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

    def __init__(self, params: list[torch.nn.Parameter], alpha: float, lam: float,
                 start: str = "grad") -> None:
        self.params, self.alpha, self.lam, self.start = params, alpha, lam, start
        self.ema: list[torch.Tensor] | None = None

    @torch.no_grad()
    def apply(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.ema is None and self.start == "grad":  # the paper's gradfilter_ema
            self.ema = [g.detach().clone() for g in grads]
        else:  # "zero": the first step's average is (1 - alpha) g (TrainConfig.grokfast_start)
            if self.ema is None:
                self.ema = [torch.zeros_like(g) for g in grads]
            torch._foreach_mul_(self.ema, self.alpha)
            torch._foreach_add_(self.ema, grads, alpha=1 - self.alpha)
        torch._foreach_add_(grads, self.ema, alpha=self.lam)


def near_zero_part(task: Task, cfg: TrainConfig, pool: int) -> int:
    """How many of a `pool`-problem mining pool (the polish's, the finishers') are subtractions
    near zero: the share `near_zero_share` asks, on a task with subtraction (else none)."""
    return int(pool * cfg.near_zero_share) if 1 in getattr(task, "op_codes", ()) else 0


@torch.no_grad()
def mine_errors(model: torch.nn.Module, task: Task, cfg: TrainConfig,
                gen: torch.Generator) -> list[tuple[torch.Tensor, ...]]:
    """Per member, the training-split problems (a, b, op) it gets wrong among `polish_pool`
    drawn from the training side of the split (half uniform lengths, half carry-enriched, after
    the share of subtractions near zero `near_zero_share` asks)."""
    from arithsweep.core.evaluation.evaluate import exact_match

    near = near_zero_part(task, cfg, cfg.polish_pool)
    half = (cfg.polish_pool - near) // 2
    cap = cfg.train_digits  # polishing must not train on longer operands than training did
    parts = [task.sample(cfg.polish_pool - near - half, gen, "uniform", cap, split="train"),
             task.sample(half, gen, "carry" if task.op != "mul" else "values", cap,
                         split="train")]
    if near:  # subtractions near zero (TrainConfig.near_zero_share)
        parts.append(task.sample(near, gen, "near_zero", cap, split="train"))
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
