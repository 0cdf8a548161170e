"""One optimiser step of a pack, eager or (on CUDA) captured once and replayed as a CUDA graph.

A step of a tiny model is launch-bound: ~200 kernels (forward, backward, per-member clipping,
AdamW) whose launch cost is the same whatever K is. `PackStep` runs the step body eagerly on the
CPU; on CUDA it runs EAGER_STEPS steps eagerly (on a side stream, as capture requires), then records
the body once with `torch.cuda.graph` and from then on replays it: one launch per step. The
inputs a step reads are static device buffers refreshed in place before each replay (tokens,
loss mask, per-member lr), and everything the body writes (gradients, Adam moments, the step
count, `alive`, the loss sum) stays at the addresses captured. The body has no host sync:
`PackAdamW` keeps its coefficients on the device and clipping is per member on the device.

In the CPU tiny layout the tail after backward (Grokfast, guard, clipping, AdamW) is one C call
instead, `tail` (model/tiny_step.py's NativeTail: arithmetic 3); elsewhere it is torch's ops.

Captured and eager steps compute the same thing in the same order; where CUDA is present
`tests/test_step.py` checks a captured run against an eager one on the same batches. Capture
is skipped, with the reason in `PackStep.reason`, where it is turned off (TrainConfig.cuda_graph)
or cannot hold: CPU, torch.compile'd loss, micro-batching, training-time abacus offsets (drawn
on the host each step), or a batch whose shape or dtype differs from the captured one (that
step then runs eagerly).

    step = PackStep(model, opt, loss_fn, clip, alive, running, loss_sum, start, batch_size,
                    n_micro, blocker=capture_blocker(device, model_cfg, train_cfg, n_micro))
    losses = step(tokens, mask, lr)  # (K,) per-member loss of this step, on the device
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from arithsweep.core.training.train import _clip_and_guard

# steps run eagerly before capture (not TrainConfig.warmup, the lr's): lazy state (grokfast
# EMA, cuBLAS handles) is made
EAGER_STEPS = 3

LossFn = Callable[..., Tensor]


def capture_blocker(device: torch.device, model_cfg, cfg, n_micro: int) -> str | None:
    """Why this pack's step cannot be captured as a CUDA graph, or None if it can."""
    if device.type != "cuda":
        return "not CUDA"
    if not cfg.cuda_graph:
        return "cuda_graph=false"
    if cfg.compile:
        return "compile=true (torch.compile manages its own graphs)"
    if n_micro != 1:
        return f"micro-batching ({n_micro} pieces per step)"
    if cfg.grokfast_phased:
        return "Grokfast in phases turns the filter on and off"
    if model_cfg.pos == "abacus" and model_cfg.abacus_offset:
        return "abacus offsets are drawn on the host every step"
    return None


class PackStep:
    """Callable step of a pack: (tokens, mask, lr) -> per-member losses (K,).

    `alive`, `running` (K,) bool and `loss_sum` (K,) float64 are the caller's device tensors,
    read and updated in place (the caller flips `running` between steps, in place too)."""

    def __init__(self, model, opt, loss_fn: LossFn, clip: Tensor, alive: Tensor,
                 running: Tensor, loss_sum: Tensor, start: int, batch_size: int, n_micro: int,
                 grokfast=None, blocker: str | None = "not requested", tail=None) -> None:
        self.model, self.opt, self.loss_fn, self.clip = model, opt, loss_fn, clip
        # the CPU tiny layout's NativeTail (model/tiny_step.py): Grokfast, guard, clipping and
        # AdamW in one C call; None: torch's ops below (reference layout, CUDA and its graphs)
        self.tail = tail
        self.params = list(model.parameters())
        self.alive, self.running, self.loss_sum = alive, running, loss_sum
        self.start, self.batch_size, self.n_micro = start, batch_size, n_micro
        self.grokfast = grokfast
        self._clip_and_guard = _clip_and_guard  # one clipping rule for every path
        self.mode = "eager" if blocker else "warmup"  # -> "captured" after EAGER_STEPS steps
        self.reason = blocker  # why eager, for logs and the bench
        self.done = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[Tensor, Tensor, Tensor] | None = None
        self.out: Tensor | None = None

    def describe(self) -> str:
        """"captured", or "eager (<why>)": what TrainResult.step_mode reports."""
        return self.mode if self.mode == "captured" else f"eager ({self.reason})"

    # ---------------------------------------------------------------------------- the body
    def _body(self, tokens: Tensor, mask: Tensor, lr: Tensor, zero: bool = True) -> Tensor:
        """tokens (K, B, T), mask (K, B, T-1), lr (K,) -> losses (K,). `zero=False` inside a
        capture: gradients are then None and backward assigns them (no accumulate)."""
        model = self.model
        if zero:
            self.opt.zero_grad()
        losses = None
        active = self.alive & self.running
        # d sum(where(active, mb, 0)) / d mb, as its backward forms it: 1 where active, else 0
        weight = active.float()
        for t_mb, m_mb in zip(tokens.chunk(self.n_micro, 1), mask.chunk(self.n_micro, 1)):
            mb = self.loss_fn(model, t_mb, m_mb, self.start, active)
            share = t_mb.shape[1] / self.batch_size  # of the step's mean
            if share != 1.0:  # x 1.0 changes no bit: one op and autograd node fewer
                mb = mb * share
            # a dead or frozen seed contributes nothing (a dead one's NaN would poison the sum):
            # the gradient of where(active, mb, 0).sum() handed to backward directly, the same
            # numbers without a where, a sum and their autograd nodes
            mb.backward(weight.to(mb.dtype))
            # 0 + x is x for a loss (never -0.0): the first piece's losses need no add
            losses = mb.detach() if losses is None else losses + mb.detach()
        assert losses is not None
        self.alive &= torch.isfinite(losses) | ~self.running  # a frozen member cannot fail
        if self.tail is not None:  # the same three stages, in C (arithmetic 3)
            self.tail(self.grokfast, self.clip, self.alive, self.running, lr)
            active = self.alive & self.running
        else:
            if self.grokfast is not None:
                self.grokfast.apply()  # before clipping, as in the Grokfast paper
            self._clip_and_guard(self.params, self.clip, self.alive)
            active = self.alive & self.running
            self.opt.step(lr * active)  # a zero lr leaves dead and frozen members exactly put
        self.loss_sum += torch.where(active, losses.double(), 0.0)
        return losses

    # ---------------------------------------------------------------------------- dispatch
    def __call__(self, tokens: Tensor, mask: Tensor, lr: Tensor) -> Tensor:
        self.done += 1
        if self.mode == "eager":
            return self._body(tokens, mask, lr)
        if self.mode == "warmup":
            out = self._on_side_stream(lambda: self._body(tokens, mask, lr))
            if self.done >= EAGER_STEPS:
                self._capture(tokens, mask, lr)
            return out
        st = self.static
        assert st is not None and self.graph is not None and self.out is not None
        if tokens.shape != st[0].shape or tokens.dtype != st[0].dtype \
                or mask.shape != st[1].shape:
            return self._body(tokens, mask, lr)  # a differently shaped batch: eager, once
        st[0].copy_(tokens, non_blocking=True)
        st[1].copy_(mask, non_blocking=True)
        st[2].copy_(lr, non_blocking=True)
        self.graph.replay()
        return self.out.clone()  # the graph overwrites its output on the next replay

    @staticmethod
    def _on_side_stream(fn: Callable[[], Tensor]) -> Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = fn()
        torch.cuda.current_stream().wait_stream(side)
        return out

    def _capture(self, tokens: Tensor, mask: Tensor, lr: Tensor) -> None:
        """Record the body once. Nothing runs during capture, so the next call's replay is the
        step after the warmup ones. Any failure falls back to eager with a warning."""
        try:
            self.static = (tokens.clone(), mask.clone(), lr.clone())
            torch.cuda.synchronize()
            self.opt.zero_grad(set_to_none=True)  # backward in the graph assigns fresh grads
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.out = self._body(*self.static, zero=False)
            self.graph, self.mode = graph, "captured"
        except Exception as exc:  # noqa: BLE001 - any capture failure: keep training eagerly
            self.graph, self.static, self.out = None, None, None
            self.mode, self.reason = "eager", f"capture failed: {exc}"
            warnings.warn(f"CUDA graph capture failed, training eagerly: {exc}", stacklevel=2)
            torch.cuda.synchronize()
