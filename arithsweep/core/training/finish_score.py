"""How the finishers (finish.py) score a model: on torch's layout or on the tiny kernel.

`TrainConfig.finish_layout` chooses: `reference` computes every finisher's forward and loss
with the PyTorch model, as all finishes did before the switch; `tiny` with the tiny layout's
C kernel (`tiny_logits` for exact match and CMA-ES's objective, `tiny_loss` for the
fine-tuning rounds' AdamW steps); `auto` takes the layout that `train.choose_layout` picks for
the run's own training. The two agree to float32 rounding, not to the bit, so a finish on the
kernel walks to other floats than the same finish on torch's layout: that is why the switch is
a recorded field and not a silent speed-up.

Where the kernel pays: a CMA-ES generation scores every candidate on the whole pool (10,000
problems). On torch's layout that is one teacher-forced forward for exact match and a second
for the cross entropy, each a stream of tiny (K x n x d) ops; on the kernel it is one forward
whose logits give both. Entry 60's generation (14 candidates) took 1.0 CPU-s on torch's layout
and 0.10 on the kernel, one thread; the whole finish, docs/benchmarks.md#finishers-on-the-kernel.

    from arithsweep.core.training.finish_score import scorer
    sc = scorer(model_cfg, train_cfg, torch.device("cpu"))
    sc.layout, sc.why                    # "tiny", "36 parameters, one block"
    f = objective(packed, task, pool_set, tokens, mask, start, sc)  # one value per member
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

import arithsweep.core.training.train as T  # looked up at call time: tests patch T._loss_fn
from arithsweep.core.config import TrainConfig
from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.evaluate import EvalSet, Forward, exact_match
from arithsweep.core.model.model import ArithTransformer, ModelConfig
from arithsweep.core.model.tiny_layout import (
    LANES,
    kernel_threads,
    tiny_logits,
    tiny_loss,
    unsupported,
)

LOSS_TOKENS = 1 << 17  # tokens per forward when scoring CMA-ES candidates (all members together)
# logits (K x n x answer positions x vocabulary) per kernel forward when scoring CMA-ES
# candidates: 4 MB, so the torch ops after the kernel read them from cache; entry 60's
# objective took 0.10 CPU-s at this size, 0.13 at 4x it, and 0.11 at a quarter (the
# per-call cost, effective weights from ~40 small torch ops, then adds up)
KERNEL_LOGITS = 1 << 20


@dataclass(frozen=True)
class Scorer:
    """The layout the finishers score with ("tiny" or "reference") and why it was chosen."""

    layout: str
    why: str

    @property
    def tiny(self) -> bool:
        return self.layout == "tiny"

    @property
    def forward(self) -> Forward | None:
        """What `exact_match` computes logits with (None: the model's own forward)."""
        return tiny_logits if self.tiny else None

    @property
    def loss(self) -> Callable[..., torch.Tensor]:
        return tiny_loss if self.tiny else T._loss_fn

    @contextlib.contextmanager
    def threads(self) -> Iterator[None]:
        """Around a whole round or CMA-ES run: on the kernel, torch on one thread and the
        kernel on the rest (tiny_layout.kernel_threads: torch's spinning OpenMP workers
        otherwise hold the core the kernel's second thread needs)."""
        with kernel_threads() if self.tiny else contextlib.nullcontext():
            yield


def scorer(model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device) -> Scorer:
    """The finishers' layout for `cfg.finish_layout`; ConfigError when `tiny` is asked of a
    model or device the kernel cannot run."""
    if cfg.finish_layout == "reference":
        return Scorer("reference", "asked for")
    if cfg.finish_layout == "tiny":
        why = unsupported(model_cfg, device)
        if why is not None:
            raise ConfigError(f"train config: finish_layout='tiny': {why}")
        return Scorer("tiny", "asked for")
    return Scorer(*T.choose_layout(model_cfg, cfg, device))


def held_out_em(model: ArithTransformer, task: Task, held: EvalSet, sc: Scorer) -> list[float]:
    """Exact match of each member on `held`: (K,) fractions."""
    return exact_match(model, task, held, forward=sc.forward).float().mean(1).tolist()


@torch.no_grad()
def objective(packed: ArithTransformer, task: Task, pool_set: EvalSet, tokens: torch.Tensor,
              mask: torch.Tensor, start: int, sc: Scorer) -> list[float]:
    """Per member: error rate on the pool + its answer-token cross entropy, which breaks the
    error rate's ties, so CMA-ES sees a slope where exact match is flat. The same figure (to
    float32 rounding) in either layout; inf where it is not finite."""
    f = _kernel_objective(packed, pool_set) if sc.tiny else \
        _reference_objective(packed, task, pool_set, tokens, mask, start)
    return [x if math.isfinite(x) else math.inf for x in f]


def _reference_objective(packed: ArithTransformer, task: Task, pool_set: EvalSet,
                         tokens: torch.Tensor, mask: torch.Tensor, start: int) -> list[float]:
    """torch's layout: exact match, then the loss in chunks (the finishes made before
    finish_layout existed, to the bit)."""
    K, P = packed.k, tokens.shape[0]
    wrong = 1.0 - exact_match(packed, task, pool_set).double().mean(1)  # (K,)
    chunk = max(1, LOSS_TOKENS // (K * tokens.shape[1]))
    ce, w = torch.zeros(K, dtype=torch.float64), 0.0
    for s in range(0, P, chunk):
        t, m = tokens[s:s + chunk], mask[s:s + chunk]  # (c, T), (c, T-1)
        n = float(m[:, start:].sum())
        ce += T._loss_fn(packed, t.expand(K, *t.shape), m.expand(K, *m.shape),
                         start).double().cpu() * n
        w += n
    return (wrong + ce / max(w, 1.0)).tolist()


def _kernel_objective(packed: ArithTransformer, pool_set: EvalSet) -> list[float]:
    """The kernel's: one forward per chunk of the pool, whose logits give both the answers
    (argmax at every answer position, as exact_match) and the cross entropy (logsumexp minus
    the target's logit, summed over answer tokens in float64)."""
    K, n_all = packed.k, pool_set.n
    L, V = pool_set.targets.shape[1], packed.cfg.vocab_size
    chunk = max(LANES, KERNEL_LOGITS // (K * L * V) // LANES * LANES)  # whole tiles
    wrong = torch.zeros(K, dtype=torch.float64)
    ce, w = torch.zeros(K, dtype=torch.float64), 0.0
    for s in range(0, n_all, chunk):
        logits = tiny_logits(packed, pool_set.inputs[s:s + chunk], pool_set.p0)  # (K, n, L, V)
        tgt = pool_set.targets[s:s + chunk].long()  # (n, L)
        # max gives the argmax and logsumexp's shift in one pass (argmax, then logsumexp,
        # each reads every logit: ~1.5x the time)
        top, pred = logits.max(-1)  # (K, n, L)
        right = pred == tgt
        # a confident model's logits lie 100+ below their maximum, and exp of those is a
        # denormal float, ~10x slower to make on x86 (it was 80% of the objective's time);
        # from -80 on each term is < 2e-35 beside the maximum's 1, so the sum's float32 value
        # is the same without them
        shifted = (logits - top.unsqueeze(-1)).clamp_(min=-80.0)
        nll = shifted.exp_().sum(-1).log_().add_(top).sub_(
            logits.gather(-1, tgt.expand(K, *tgt.shape).unsqueeze(-1)).squeeze(-1))
        if pool_set.full:
            ok = right.all(-1)
            w += float(nll.shape[1] * L)
        else:
            m = pool_set.mask[s:s + chunk]  # (n, L) answer positions
            ok = (right | ~m).all(-1)
            nll = nll * m
            w += float(m.sum())
        wrong += (~ok).sum(1).double()
        ce += nll.double().sum((1, 2))
    return (wrong / max(n_all, 1) + ce / max(w, 1.0)).tolist()
