"""Population training: many proposals that share a model shape, trained in one pack.

A *proposal* is one `TrainConfig` (its own lr, warmup, decay, clip, seeds...). Proposals whose
`pack_key`s are equal differ only in `PER_MEMBER_FIELDS`, so their seeds can live in one
`ArithTransformer` of K = sum(seeds) members: one forward/backward and one optimiser step move
every proposal at once, with per-member (K,) learning rates, weight decays and clip norms.
Member i of proposal j is seed cfgs[j].seed + i for init and data, exactly as in `train()`,
so it reaches the same weights as when that proposal trains alone (to float tolerance).

Each proposal stops on its own (target reached, time budget, its `on_eval` returning True,
every seed failed); its members are then frozen (zero learning rate, zero gradient) and the
pack ends once every proposal has stopped. `train()` is this with a single proposal.

    from arithsweep.core.training.population import pack_key, train_population
    cfgs = [TrainConfig(lr=lr, seeds=2) for lr in (3e-3, 1e-2, 3e-2)]
    results = train_population(get_task("add3"), model_cfg, cfgs)  # one TrainResult each
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

import arithsweep.core.training.train as T  # looked up at call time: tests patch T._loss_fn
from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.confirm import eval_problems, reached
from arithsweep.core.evaluation.evaluate import EvalSet, answer_start, score
from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params
from arithsweep.core.model.tiny_layout import kernel_threads, tiny_logits, tiny_loss
from arithsweep.core.training.recipe import GrokfastEMA, grokfast_on, lbfgs_polish, wd_factors
from arithsweep.core.training.step import PackStep, capture_blocker

# Fields that may differ between the proposals of one pack: per-member optimiser settings and
# the per-proposal stopping rule. Everything else (shape of the step, data recipe, schedule
# length, evaluation cadence, device) is shared by the whole pack.
PER_MEMBER_FIELDS = ("lr", "min_lr_ratio", "warmup", "weight_decay", "grad_clip", "polish_lr",
                     "seed", "seeds", "target", "early_stop", "time_budget")
LR_CHUNK = 256  # schedule rows built per host call: amortises lr_at over many steps

OnEval = Callable[[int, "T.EvalPoint", "T.TrainResult"], bool | None]


def pack_key(model_cfg: ModelConfig, cfg: TrainConfig) -> tuple:
    """Proposals with equal keys can be trained in one pack by `train_population`."""
    shared = tuple((k, _frozen(v)) for k, v in cfg.to_dict().items()
                   if k not in PER_MEMBER_FIELDS)
    return tuple(sorted((k, _frozen(v)) for k, v in model_cfg.to_dict().items())), shared


def _frozen(v):  # list fields (curriculum stages, arc_init) as tuples: a pack key is hashed
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


def _check_pack(model_cfg: ModelConfig, cfgs: Sequence[TrainConfig]) -> None:
    if not cfgs:
        raise ConfigError("train_population: no proposals given")
    first = dict(pack_key(model_cfg, cfgs[0])[1])
    for j, c in enumerate(cfgs[1:], 1):
        other = dict(pack_key(model_cfg, c)[1])
        diff = [k for k in first if first[k] != other[k]]
        if diff:
            raise ConfigError(f"proposal {j} cannot share a pack with proposal 0: {diff[0]}="
                              f"{other[diff[0]]!r} vs {first[diff[0]]!r} (pack_key differs)")


class PackAdamW:
    """AdamW over (K, ...) parameters with a per-member learning rate and weight decay.

    torch.optim.AdamW holds one lr per parameter tensor, but a pack needs one per member (the
    leading K dim). Same update as AdamW (decoupled decay first, bias-corrected moments), with
    decay on matrices only. Capturable style: the step count and every coefficient stay on the
    device, so a step issues no host sync and a CUDA graph could replay it. A member whose lr
    is 0 does not move at all (decay factor exactly 1, update exactly 0)."""

    def __init__(self, params: list[torch.Tensor], weight_decay: torch.Tensor,
                 betas: tuple[float, float], eps: float = 1e-8, scope: str = "matrices") -> None:
        self.params = params
        # "matrices": a norm gain pulled to 0 fights the norm; "all" is the records' AdamW
        self.decay = [p for p in params if scope == "all" or p.dim() >= 3]
        self.wd, (self.b1, self.b2), self.eps = weight_decay, betas, eps  # wd (K,)
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = torch.zeros((), dtype=torch.float32, device=weight_decay.device)

    @staticmethod
    def _per(x: torch.Tensor, ps: list[torch.Tensor]) -> list[torch.Tensor]:
        """(K,) -> one (K, 1, ..., 1) view per parameter, broadcasting over its member."""
        return [x.view(-1, *([1] * (p.dim() - 1))) for p in ps]

    def zero_grad(self, set_to_none: bool = False) -> None:
        if set_to_none:  # before a CUDA graph capture, whose backward assigns the gradients
            for p in self.params:
                p.grad = None
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_zero_(grads)

    @torch.no_grad()
    def step(self, lr: torch.Tensor) -> None:  # lr (K,), 0 for members that must not move
        ps = self.params
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in ps]
        self.t += 1
        bc1 = 1 - self.b1 ** self.t  # 0-d device tensors: no host sync
        bc2_sqrt = (1 - self.b2 ** self.t).sqrt()
        if self.decay:
            torch._foreach_mul_(self.decay, self._per(1 - lr * self.wd, self.decay))
        torch._foreach_lerp_(self.m, grads, 1 - self.b1)
        torch._foreach_mul_(self.v, self.b2)
        torch._foreach_addcmul_(self.v, grads, grads, value=1 - self.b2)
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denom, bc2_sqrt)
        torch._foreach_add_(denom, self.eps)
        upd = torch._foreach_div(self.m, denom)
        torch._foreach_mul_(upd, self._per(-lr / bc1, ps))
        torch._foreach_add_(ps, upd)


class _LrTable:
    """Per-member learning rates, (K,) on the device, from `lr_at` (the one schedule), built
    LR_CHUNK steps at a time so the loop reads a device row and never syncs."""

    def __init__(self, cfgs: Sequence[TrainConfig], counts: list[int], device: torch.device):
        self.cfgs, self.counts, self.device = cfgs, counts, device
        self.base, self.rows = -LR_CHUNK, torch.empty(0)

    def at(self, step: int) -> torch.Tensor:
        if not 0 <= step - self.base < LR_CHUNK:
            self.base = step
            steps = range(step, step + LR_CHUNK)
            cols = [torch.tensor([T.lr_at(s, c) for s in steps]).unsqueeze(1).expand(-1, n)
                    for c, n in zip(self.cfgs, self.counts)]  # (LR_CHUNK, n_j) each
            self.rows = torch.cat(cols, 1).to(self.device, torch.float32)  # (LR_CHUNK, K)
        return self.rows[step - self.base]


class _PackStream:
    """The pack's batches: each proposal's own `_DataStream` (its seeds), stacked on K. A
    stopped proposal stops drawing (its members are frozen) and repeats its last batch."""

    def __init__(self, task: Task, cfgs: Sequence[TrainConfig], device: torch.device):
        self.streams = [T._DataStream(task, c, device) for c in cfgs]
        self.last: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(cfgs)
        self.running = [True] * len(cfgs)

    def polish(self, models: list[ArithTransformer], device: torch.device) -> None:
        for j, m in enumerate(models):  # mined per proposal: its seed, its members
            if self.running[j]:
                self.streams[j] = T._PolishStream(self.streams[j], m, device)

    def next(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        for j, s in enumerate(self.streams):
            if self.running[j] or self.last[j] is None:
                self.last[j] = s.next(step)  # (n_j, B, T), (n_j, B, T-1)
        if len(self.last) == 1:
            return self.last[0]  # type: ignore[return-value]
        return tuple(torch.cat([b[i] for b in self.last], 0) for i in range(2))  # (K, B, ...)


def _member_view(model: ArithTransformer, off: int, n: int) -> ArithTransformer:
    """Members off..off+n of `model` as an n-member model whose weights are views of the
    pack's (no copy: it always shows the pack's current weights)."""
    if off == 0 and n == model.k:
        return model
    dev = next(model.parameters()).device
    sub = ArithTransformer(model.cfg, k=n, generator=torch.Generator().manual_seed(0)).to(dev)
    for sp, pp in zip(sub.parameters(), model.parameters(), strict=True):
        sp.data = pp.data[off:off + n]
    return sub


def train_population(task: Task, model_cfg: ModelConfig, cfgs: Sequence[TrainConfig],
                     on_eval: OnEval | None = None,
                     on_step: Callable[[int, int], None] | None = None) -> list[T.TrainResult]:
    """Train every proposal's seeds in one pack; one TrainResult per proposal, in order.
    `on_eval(j, point, result)` may return True to stop proposal j."""
    if model_cfg.vocab_size < task.vocab_size or model_cfg.n_ctx < task.n_ctx:
        raise ConfigError(
            f"model config vocab_size={model_cfg.vocab_size}, n_ctx={model_cfg.n_ctx} does not "
            f"fit task {task.name} (vocab_size={task.vocab_size}, n_ctx={task.n_ctx})"
        )
    _check_pack(model_cfg, cfgs)
    c0, P = cfgs[0], len(cfgs)
    counts = [c.seeds for c in cfgs]
    offs = [sum(counts[:j]) for j in range(P)]
    K = sum(counts)
    device = T.resolve_device(c0.device)
    seeds = [c.seed + i for c in cfgs for i in range(c.seeds)]  # as train() numbers them
    model = ArithTransformer(model_cfg, k=K, seeds=seeds).to(device)
    params = list(model.parameters())

    def per_member(field: str) -> torch.Tensor:  # (K,) on the device
        vals = [float(getattr(c, field)) for c, n in zip(cfgs, counts) for _ in range(n)]
        return torch.tensor(vals, dtype=torch.float32, device=device)

    base_wd = per_member("weight_decay")  # (K,); wd_drops scales it per member
    opt = PackAdamW(params, base_wd.clone(), (c0.beta1, c0.beta2), scope=c0.weight_decay_scope)
    clip = per_member("grad_clip")  # (K,); 0 = off for that member
    lrs = _LrTable(cfgs, counts, device)
    layout, layout_why = T.choose_layout(model_cfg, c0, device)
    loss_fn = torch.compile(T._loss_fn, dynamic=False) if c0.compile else T._loss_fn
    step_threads, eval_forward = contextlib.nullcontext, None
    if layout == "tiny":  # its kernel scores training's evaluations too (~10x the model's pass)
        loss_fn, step_threads, eval_forward = tiny_loss, kernel_threads, tiny_logits
    data = _PackStream(task, cfgs, device)
    ea, eb, eop = eval_problems(task, c0.eval_size, c0.train_digits)  # (N,) each
    eval_set = EvalSet(task, ea, eb, eop, device)  # encoded once, on the device
    results = [T.TrainResult(task=task, model_cfg=model_cfg, train_cfg=c,
                             model=_member_view(model, o, n), params=count_params(model),
                             device=str(device), failed=[False] * n, eval_size=ea.numel(),
                             layout=layout, layout_why=layout_why)
               for c, o, n in zip(cfgs, offs, counts)]
    alive = torch.ones(K, dtype=torch.bool, device=device)  # False: loss went non-finite
    running = torch.ones(K, dtype=torch.bool, device=device)  # False: proposal stopped
    # the tiny kernel keeps each tile in cache itself: splitting the step would only add calls
    n_micro = 1 if layout == "tiny" else T.micro_batches(replace(c0, seeds=K), device)
    start = answer_start(task)
    loss_sum = torch.zeros(K, dtype=torch.float64, device=device)
    loss_n = 0
    main = c0.main_steps
    total = main + c0.polish_steps
    grokfast = GrokfastEMA(params, c0.grokfast_alpha, c0.grokfast_lambda) \
        if c0.grokfast_alpha else None
    filtered = grokfast_on(c0, 0)
    runner = PackStep(model, opt, loss_fn, clip, alive, running, loss_sum, start,
                      c0.batch_size, n_micro, grokfast if filtered else None,
                      blocker=capture_blocker(device, model_cfg, c0, n_micro))
    t0 = time.perf_counter()
    step = 0
    while step < total:
        if step == main and c0.polish_steps:  # every seed's own errors, training split only
            data.polish([r.model for r in results], device)
        if c0.grokfast_phased and grokfast_on(c0, step) != filtered:  # a phase boundary
            filtered = not filtered
            runner.grokfast = grokfast if filtered else None
        model.train()
        with step_threads():  # tiny layout: torch on one thread, the kernel on the rest
            tokens, mask = data.next(step)  # (K, B, T), (K, B, T-1)
            runner(tokens, mask, lrs.at(step))
        loss_n += 1
        step += 1
        for j, r in enumerate(results):
            if data.running[j]:
                r.examples += counts[j] * c0.batch_size
        if on_step is not None:
            on_step(step, total)
        if step % c0.eval_every and step != total:
            continue
        # ---- evaluation: the only host sync besides sampling ----
        failed = (~alive).tolist()
        right, pos_acc = score(model, task, eval_set, forward=eval_forward)  # (K, N), (K, L)
        ok, mean_loss = right.float().mean(1).tolist(), (loss_sum / max(1, loss_n)).tolist()
        pos_acc = pos_acc.tolist()
        loss_sum.zero_()
        loss_n = 0
        elapsed = time.perf_counter() - t0
        for j, (c, r, o, n) in enumerate(zip(cfgs, results, offs, counts)):
            if not data.running[j]:
                continue
            if _evaluate(j, c, r, step, failed[o:o + n], ok[o:o + n], mean_loss[o:o + n],
                         pos_acc[o:o + n], elapsed, ea.numel(), total, on_eval):
                data.running[j] = False
                running[o:o + n] = False  # frozen from the next step on
        if not any(data.running):
            break
        if c0.wd_drops:
            opt.wd.copy_(base_wd * torch.tensor(wd_factors(c0.wd_drops, ok, pos_acc),
                                                device=device))
    if c0.lbfgs_steps:
        _lbfgs_and_score(model, task, cfgs, results, offs, counts, alive, eval_set, start, step,
                         t0, device, on_eval)
    for j, (r, o, n) in enumerate(zip(results, offs, counts)):
        r.step_mode = runner.describe()
        if data.running[j]:  # ran to the end of the schedule
            r.steps, r.wall_time = step, time.perf_counter() - t0
            r.failed = (~alive[o:o + n]).tolist()
            r.stop_reason = r.stop_reason or "step budget"
    return results


def _evaluate(j: int, cfg: TrainConfig, result: T.TrainResult, step: int, failed: list[bool],
              ok: list[float], loss: list[float], pos_acc: list[list[float]], elapsed: float,
              n_eval: int, total: int, on_eval: OnEval | None) -> bool:
    """Record proposal j's evaluation at `step`; True when the proposal stops here."""
    n = len(ok)
    result.failed = failed
    em = [float("nan") if failed[i] else ok[i] for i in range(n)]
    live = [e for e in em if not math.isnan(e)]
    point = T.EvalPoint(step=step, exact_match=em, loss=loss,
                        best_em=max(live) if live else 0.0, lr=T.lr_at(step - 1, cfg),
                        elapsed=elapsed, examples=result.examples, position_acc=pos_acc)
    result.history.append(point)
    # ties go to the newer weights: at equal held-out accuracy they have trained longer
    if (live and point.best_em >= result.best_em) or not result.best_state:
        i = max(range(n), key=lambda k: -1.0 if math.isnan(em[k]) else em[k])
        result.best_seed, result.best_em, result.best_step = i, max(live, default=0.0), step
        result.best_state = result.model.member_state(i)
    result.steps, result.wall_time = step, elapsed
    stop = bool(on_eval(j, point, result)) if on_eval is not None else False
    if not live:
        result.stopped_early, result.stop_reason = True, "every seed failed (non-finite loss)"
    elif cfg.early_stop and reached(point.best_em, n_eval, cfg.target, len(live)):
        result.stopped_early, result.stop_reason = step < total, "reached target"
    elif cfg.time_budget and point.elapsed >= cfg.time_budget:
        result.stopped_early, result.stop_reason = True, "time budget"
    elif stop:
        result.stopped_early, result.stop_reason = True, "stopped by caller"
    else:
        return False
    return True


def _lbfgs_and_score(model, task, cfgs, results, offs, counts, alive, eval_set, start, step,
                     t0, device, on_eval) -> None:
    """The L-BFGS polish of every live member, then one more evaluation per proposal (its
    best state moves only if the polish did not make it worse: `_evaluate` keeps the best)."""
    live = alive.tolist()
    model.train()
    for c, o, n in zip(cfgs, offs, counts):
        members = [_member_view(model, o + i, 1) for i in range(n) if live[o + i]]
        lbfgs_polish(members, task, c, T._loss_fn, start, device)
    right, pos_acc = score(model, task, eval_set)  # (K, N), (K, answer_len)
    ok, pos_acc = right.float().mean(1).tolist(), pos_acc.tolist()
    elapsed = time.perf_counter() - t0
    for j, (c, r, o, n) in enumerate(zip(cfgs, results, offs, counts)):
        stop_reason = r.stop_reason
        _evaluate(j, c, r, step, [not x for x in live[o:o + n]], ok[o:o + n],
                  [float("nan")] * n, pos_acc[o:o + n], elapsed, eval_set.n,
                  step, on_eval)
        r.stop_reason = stop_reason or r.stop_reason


def train(
    task: Task,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    on_eval: Callable[[T.EvalPoint, T.TrainResult], bool | None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> T.TrainResult:
    """Train cfg.seeds seeds of `model_cfg` on `task`: a pack of one proposal. `on_eval` may
    return True to stop."""
    cb = None if on_eval is None else (lambda _j, point, result: on_eval(point, result))
    return train_population(task, model_cfg, [cfg], cb, on_step)[0]
