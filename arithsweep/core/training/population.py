"""Population training: many proposals that share a model shape, trained in one pack.

A *proposal* is one `TrainConfig` (its own lr, warmup, decay, clip, seeds...). Proposals whose
`pack_key`s are equal (packing.py) differ only in `PER_MEMBER_FIELDS`, so their seeds can live
in one `ArithTransformer` of K = sum(seeds) members: one forward/backward and one optimiser
step move every proposal at once, with per-member (K,) learning rates, weight decays and clip norms.
Member i of proposal j is seed cfgs[j].seed + i for init and data, exactly as in `train()`,
so it reaches the same weights as when that proposal trains alone, to the bit on a CPU in
either layout (tests/test_member_alone.py).

Each proposal stops on its own (target reached, time budget, its `on_eval` returning True,
every seed failed); its members are then frozen (zero learning rate, zero gradient) and the
pack ends once every proposal has stopped. `train()` is this with a single proposal.

    from arithsweep.core.training.population import train_population
    cfgs = [TrainConfig(lr=lr, seeds=2) for lr in (3e-3, 1e-2, 3e-2)]
    results = train_population(get_task("add3"), model_cfg, cfgs)  # one TrainResult each
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence

import torch

import arithsweep.core.training.train as T  # looked up at call time: tests patch T._loss_fn
from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.confirm import eval_problems, reached
from arithsweep.core.evaluation.evaluate import EvalSet, answer_start, score
from arithsweep.core.model.checkpoint import start_members_from
from arithsweep.core.model.model import ArithTransformer, ModelConfig, count_params
from arithsweep.core.model.tiny_layout import kernel_threads, tiny_logits, tiny_loss
from arithsweep.core.model.tiny_step import NativeTail
from arithsweep.core.training.optim import LrTable, PackAdamW
from arithsweep.core.training.packing import PackStream, check_pack, member_view
from arithsweep.core.training.recipe import (
    GrokfastEMA,
    decay_factors,
    grokfast_on,
    lbfgs_polish,
    wd_factors,
)
from arithsweep.core.training.resume import (
    Checkpointing,
    carry_moments,
    culled_in_state,
    generator_state,
    is_state_dir,
    prefixed,
    same_run,
    set_generator,
    start_members_from_state,
    sub,
    write_state,
)
from arithsweep.core.training.step import PackStep, capture_blocker

OnEval = Callable[[int, "T.EvalPoint", "T.TrainResult"], bool | None]


def train_population(task: Task, model_cfg: ModelConfig, cfgs: Sequence[TrainConfig],
                     on_eval: OnEval | None = None,
                     on_step: Callable[[int, int], None] | None = None,
                     checkpoint: Checkpointing | None = None) -> list[T.TrainResult]:
    """Train every proposal's seeds in one pack; one TrainResult per proposal, in order.
    `on_eval(j, point, result)` may return True to stop proposal j. `checkpoint`: where and how
    often the run's whole state is written (resume.py), and the state to continue from."""
    if model_cfg.vocab_size < task.vocab_size or model_cfg.n_ctx < task.n_ctx:
        raise ConfigError(
            f"model config vocab_size={model_cfg.vocab_size}, n_ctx={model_cfg.n_ctx} does not "
            f"fit task {task.name} (vocab_size={task.vocab_size}, n_ctx={task.n_ctx})"
        )
    check_pack(model_cfg, cfgs)
    return _PackRun(task, model_cfg, cfgs, on_eval, on_step, checkpoint).run()


class _PackRun:
    """One pack's training loop, and the state it writes and reads back (`state`/`load`)."""

    def __init__(self, task: Task, model_cfg: ModelConfig, cfgs: Sequence[TrainConfig],
                 on_eval: OnEval | None, on_step: Callable[[int, int], None] | None,
                 checkpoint: Checkpointing | None) -> None:
        self.task, self.model_cfg, self.cfgs = task, model_cfg, list(cfgs)
        self.on_eval, self.on_step, self.ckpt = on_eval, on_step, checkpoint
        c0 = self.c0 = cfgs[0]
        self.counts = counts = [c.seeds for c in cfgs]
        self.offs = [sum(counts[:j]) for j in range(len(cfgs))]
        K = sum(counts)
        self.device = device = T.resolve_device(c0.device)
        seeds = [c.seed + i for c in cfgs for i in range(c.seeds)]  # as train() numbers them
        self.model = model = ArithTransformer(model_cfg, k=K, seeds=seeds).to(device)
        resuming = checkpoint is not None and checkpoint.resume is not None
        self.culled = torch.zeros(K, dtype=torch.bool, device=device)  # stopped by TrainConfig.cull
        if c0.init_from and not resuming:  # a resumed state holds the weights it reached
            if is_state_dir(c0.init_from):  # a run's state: each member from its own
                start_members_from_state(model, c0.init_from)
                was = culled_in_state(c0.init_from)  # a culled member stays out of the path
                if was is not None and was.shape == self.culled.shape:
                    self.culled.copy_(was)
            else:
                start_members_from(model, task, c0.init_from)
        params = list(model.parameters())

        def per_member(field: str) -> torch.Tensor:  # (K,) on the device
            vals = [float(getattr(c, field)) for c, n in zip(cfgs, counts) for _ in range(n)]
            return torch.tensor(vals, dtype=torch.float32, device=device)

        self.base_wd = per_member("weight_decay")  # (K,); wd_drops scales it per member
        self.opt = PackAdamW(params, self.base_wd.clone(), (c0.beta1, c0.beta2),
                             scope=c0.weight_decay_scope)
        self.lrs = LrTable(cfgs, counts, device)
        layout, layout_why = T.choose_layout(model_cfg, c0, device)
        loss_fn = torch.compile(T._loss_fn, dynamic=False) if c0.compile else T._loss_fn
        self.step_threads, self.eval_forward = contextlib.nullcontext, None
        if layout == "tiny":  # its kernel scores training's evaluations too (~10x the model's)
            loss_fn, self.step_threads, self.eval_forward = tiny_loss, kernel_threads, tiny_logits
        self.data = PackStream(task, cfgs, device)
        self._skip()
        ea, eb, eop = eval_problems(task, c0.eval_size, c0.train_digits)  # (N,) each
        self.eval_set = EvalSet(task, ea, eb, eop, device)  # encoded once, on the device
        self.results = [T.TrainResult(task=task, model_cfg=model_cfg, train_cfg=c,
                                      model=member_view(model, o, n), params=count_params(model),
                                      device=str(device), failed=[False] * n,
                                      eval_size=ea.numel(), layout=layout, layout_why=layout_why)
                        for c, o, n in zip(cfgs, self.offs, counts)]
        self.alive = torch.ones(K, dtype=torch.bool, device=device)  # False: loss non-finite
        self.running = ~self.culled  # False: stopped
        # the tiny kernel keeps each tile in cache itself: splitting a step only adds calls.
        # The split is each member's own (never the pack's size): the same alone as in a pack
        n_micro = 1 if layout == "tiny" else T.micro_batches(c0)
        self.start = answer_start(task)
        self.loss_sum = torch.zeros(K, dtype=torch.float64, device=device)
        self.loss_n = 0
        self.main, self.total = c0.main_steps, c0.main_steps + c0.polish_steps
        self.grokfast = GrokfastEMA(params, c0.grokfast_alpha, c0.grokfast_lambda,
                                    c0.grokfast_start) if c0.grokfast_alpha else None
        self.filtered = grokfast_on(c0, 0)
        if c0.init_from and c0.init_moments and not resuming:  # a path phase's `moments: keep`
            carry_moments(self.opt, self.grokfast, c0.init_from)
        self.step, self.elapsed0, self.outside, self.finished = 0, 0.0, 0.0, False
        if resuming:
            self.load(checkpoint.resume.tensors, checkpoint.resume.doc)
        self.runner = PackStep(model, self.opt, loss_fn, per_member("grad_clip"), self.alive,
                               self.running, self.loss_sum, self.start, c0.batch_size, n_micro,
                               self.grokfast if self.filtered else None,
                               blocker=capture_blocker(device, model_cfg, c0, n_micro),
                               tail=NativeTail(self.opt) if layout == "tiny" else None)

    def _elapsed(self) -> float:
        return self.elapsed0 + time.perf_counter() - self.t0

    def run(self) -> list[T.TrainResult]:
        c0, data, results, step = self.c0, self.data, self.results, self.step
        self.t0 = time.perf_counter()
        end = min(self.total, c0.stop_at or self.total)
        while step < end and any(data.running) and not self.finished:
            if step == self.main and c0.polish_steps:  # each seed's own errors, training split
                data.polish([r.model for r in results], self.device)
            if c0.grokfast_phased and grokfast_on(c0, step) != self.filtered:  # phase boundary
                self.filtered = not self.filtered
                self.runner.grokfast = self.grokfast if self.filtered else None
            if not self.model.training:  # after an evaluation (train() walks every module)
                self.model.train()
            with self.step_threads():  # tiny layout: torch on one thread, the kernel on the rest
                tokens, mask = data.next(step)  # (K, B, T), (K, B, T-1)
                self.runner(tokens, mask, self.lrs.at(step))
            self.loss_n += 1
            step = self.step = step + 1
            for j, r in enumerate(results):
                if data.running[j]:
                    r.examples += self.drawn[j] * c0.batch_size
            if self.on_step is not None:
                self.on_step(step, self.total)
            if step % c0.eval_every == 0 or step == end:
                self._evaluate_all(step)
                self._cull(step)
            if self.ckpt is not None and any(data.running) and self.ckpt.due(step):
                self.save()
        if c0.lbfgs_steps and not self.finished:
            _lbfgs_and_score(self, step)
        for j, (r, o, n) in enumerate(zip(results, self.offs, self.counts)):
            r.step_mode = self.runner.describe()
            if data.running[j]:  # ran to the end of the schedule
                r.steps, r.wall_time = step, self._elapsed()
                r.train_seconds = r.wall_time - self.outside
                r.failed = (~self.alive[o:o + n]).tolist()
                r.stop_reason = r.stop_reason or "step budget"
        if self.ckpt is not None and not self.finished:
            self.finished = True
            self.save()  # a resume of this state returns these results without training
        return results

    def _evaluate_all(self, step: int) -> None:
        """The evaluation: the only host sync besides sampling."""
        data, offs, counts = self.data, self.offs, self.counts
        failed = (~self.alive).tolist()
        right, pos_acc = score(self.model, self.task, self.eval_set,
                               forward=self.eval_forward)  # (K, N), (K, L)
        ok = right.float().mean(1).tolist()
        mean_loss, pos_acc = (self.loss_sum / max(1, self.loss_n)).tolist(), pos_acc.tolist()
        self.loss_sum.zero_()
        self.loss_n = 0
        elapsed = self._elapsed()
        for j, (c, r, o, n) in enumerate(zip(self.cfgs, self.results, offs, counts)):
            if not data.running[j]:
                continue
            r.train_seconds = elapsed - self.outside
            t = time.perf_counter()  # the caller's time (full checks, reports) is not training's
            stop = _evaluate(j, c, r, step, failed[o:o + n], ok[o:o + n], mean_loss[o:o + n],
                             pos_acc[o:o + n], elapsed, self.eval_set.n, self.total,
                             self.on_eval)
            self.outside += time.perf_counter() - t
            if stop:
                data.running[j] = False
                self.running[o:o + n] = False  # frozen from the next step on
        if self.c0.wd_drops and any(data.running):
            # the factors so far live in the optimiser's decay, which a resume restores
            held = decay_factors(self.opt.wd, self.base_wd) if self.c0.wd_drops_hold else None
            factors = wd_factors(self.c0.wd_drops, ok, pos_acc, held)
            self.opt.wd.copy_(self.base_wd * torch.tensor(factors, device=self.device))

    def _cull(self, step: int) -> None:
        """TrainConfig.cull at `step`: in each running proposal, only the members with the best
        held-out exact match so far go on (ties to the lower seed); the rest stop here."""
        keep = dict(self.c0.cull or ()).get(step)
        if keep is None:
            return
        live_now = (self.running & self.alive).tolist()
        for j, (r, o, n) in enumerate(zip(self.results, self.offs, self.counts)):
            live = [i for i in range(n) if live_now[o + i]]
            if not self.data.running[j] or len(live) <= keep:
                continue
            ranked = sorted(live, key=lambda i: (-r.member_best[i], i))
            for i in ranked[keep:]:
                self.running[o + i] = False
                self.culled[o + i] = True
        self._skip()

    def _skip(self) -> None:
        """A culled member's batches are not drawn, nor counted as trained examples."""
        culled = self.culled.tolist()
        self.data.skip(culled)
        self.drawn = [n - sum(culled[o:o + n]) for o, n in zip(self.offs, self.counts)]

    # ---------------------------------------------------------------------------- state
    def save(self) -> None:
        t = time.perf_counter()
        tensors, doc = self.state()
        path = write_state(self.ckpt.dir, self.step, tensors, doc)
        self.ckpt.last_write = time.perf_counter()
        self.outside += self.ckpt.last_write - t
        if self.ckpt.on_save is not None:
            self.ckpt.on_save(path, self.step)
        self.outside += time.perf_counter() - self.ckpt.last_write

    def state(self) -> tuple[dict[str, torch.Tensor], dict]:
        tensors = prefixed(dict(self.model.named_parameters()), "model.")
        tensors.update(prefixed(self.opt.state(), "opt."))
        if self.grokfast is not None and self.grokfast.ema is not None:
            tensors.update({f"grokfast.{i}": e for i, e in enumerate(self.grokfast.ema)})
        tensors.update({"alive": self.alive, "running": self.running, "culled": self.culled,
                        "loss_sum": self.loss_sum, "torch_rng": torch.get_rng_state()})
        for i, g in enumerate(self.model._offset_gens or []):
            tensors[f"abacus_gen.{i}"] = generator_state(g)
        data_t, data_doc = self.data.state()
        tensors.update(prefixed(data_t, "data."))
        docs = []
        for j, r in enumerate(self.results):
            rt, rd = r.state()
            tensors.update(prefixed(rt, f"result{j}."))
            docs.append(rd)
        doc = {"task": self.task.name, "format_name": self.task.fmt.name,
               # the kind of run (arithmetic.kind_of): a resume under a later arithmetic goes
               # on where no version since moved this kind's floats
               "layout": self.results[0].layout, "device": str(self.device),
               "model": self.model_cfg.to_dict(), "train": [c.to_dict() for c in self.cfgs],
               "finished": self.finished, "loss_n": self.loss_n, "filtered": self.filtered,
               "elapsed": self._elapsed(), "outside": self.outside, "data": data_doc,
               "results": docs, "extra": self.ckpt.extra() if self.ckpt.extra else {}}
        return tensors, doc

    @torch.no_grad()
    def load(self, t: dict[str, torch.Tensor], doc: dict) -> None:
        if not same_run(self.ckpt.resume, self.model_cfg, self.cfgs):
            raise ConfigError("the training state to resume was written for another model or "
                              "train config than this run's")
        for name, p in self.model.named_parameters():
            p.copy_(t[f"model.{name}"])
        self.opt.load(sub(t, "opt."))
        if self.grokfast is not None and "grokfast.0" in t:
            n = sum(1 for k in t if k.startswith("grokfast."))
            self.grokfast.ema = [t[f"grokfast.{i}"].to(self.device) for i in range(n)]
        self.alive.copy_(t["alive"])
        self.running.copy_(t["running"])
        if "culled" in t:  # a state from before culls has none
            self.culled.copy_(t["culled"])
        self._skip()
        self.loss_sum.copy_(t["loss_sum"])
        torch.set_rng_state(t["torch_rng"])
        if "abacus_gen.0" in t:  # the training-time abacus offsets' own generators
            self.model._offset_gens = [set_generator(torch.Generator(), t[f"abacus_gen.{i}"])
                                       for i in range(self.model.k)]
        self.data.load(sub(t, "data."), doc["data"], self.device)
        for j, r in enumerate(self.results):
            r.load(sub(t, f"result{j}."), doc["results"][j])
        self.step, self.loss_n, self.filtered = int(doc["step"]), doc["loss_n"], doc["filtered"]
        self.elapsed0, self.outside, self.finished = doc["elapsed"], doc["outside"], doc["finished"]


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
    result.keep_member_bests(em)
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


def _lbfgs_and_score(run: _PackRun, step: int) -> None:
    """The L-BFGS polish of every live member, then one more evaluation per proposal (its
    best state moves only if the polish did not make it worse: `_evaluate` keeps the best)."""
    live = run.alive.tolist()
    run.model.train()
    for c, o, n in zip(run.cfgs, run.offs, run.counts):
        members = [member_view(run.model, o + i, 1) for i in range(n) if live[o + i]]
        lbfgs_polish(members, run.task, c, T._loss_fn, run.start, run.device)
    right, pos_acc = score(run.model, run.task, run.eval_set)  # (K, N), (K, answer_len)
    ok, pos_acc = right.float().mean(1).tolist(), pos_acc.tolist()
    elapsed = run._elapsed()
    for j, (c, r, o, n) in enumerate(zip(run.cfgs, run.results, run.offs, run.counts)):
        stop_reason = r.stop_reason
        _evaluate(j, c, r, step, [not x for x in live[o:o + n]], ok[o:o + n],
                  [float("nan")] * n, pos_acc[o:o + n], elapsed, run.eval_set.n,
                  step, run.on_eval)
        r.stop_reason = stop_reason or r.stop_reason


def train(
    task: Task,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    on_eval: Callable[[T.EvalPoint, T.TrainResult], bool | None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    checkpoint: Checkpointing | None = None,
) -> T.TrainResult:
    """Train cfg.seeds seeds of `model_cfg` on `task`: a pack of one proposal. `on_eval` may
    return True to stop."""
    cb = None if on_eval is None else (lambda _j, point, result: on_eval(point, result))
    return train_population(task, model_cfg, [cfg], cb, on_step, checkpoint)[0]
