"""The pack's optimiser and learning-rate table: AdamW with one lr and decay per member.

`train_population` (population.py) steps every member of a pack with one `PackAdamW.step`,
reading each step's per-member learning rates from `LrTable` (the schedule is `train.lr_at`).
Both keep what a step needs on the device, so a step issues no host sync.

    opt = PackAdamW(list(model.parameters()), wd, (0.9, 0.98))   # wd (K,)
    opt.step(LrTable(cfgs, counts, device).at(step))
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from arithsweep.core.config import TrainConfig
from arithsweep.core.training.train import lr_at

LR_CHUNK = 256  # schedule rows built per host call: amortises lr_at over many steps


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

    def state(self) -> dict[str, torch.Tensor]:
        """Moments, step count and the current per-member decay (wd_drops moves it)."""
        t = {"t": self.t, "wd": self.wd}
        t.update({f"m{i}": m for i, m in enumerate(self.m)})
        t.update({f"v{i}": v for i, v in enumerate(self.v)})
        return t

    @torch.no_grad()
    def load(self, t: dict[str, torch.Tensor]) -> None:
        self.t.copy_(t["t"])
        self.wd.copy_(t["wd"])
        for i, (m, v) in enumerate(zip(self.m, self.v)):
            m.copy_(t[f"m{i}"])
            v.copy_(t[f"v{i}"])


class LrTable:
    """Per-member learning rates, (K,) on the device, from `lr_at` (the one schedule), built
    LR_CHUNK steps at a time so the loop reads a device row and never syncs."""

    def __init__(self, cfgs: Sequence[TrainConfig], counts: list[int], device: torch.device):
        self.cfgs, self.counts, self.device = cfgs, counts, device
        self.base, self.rows = -LR_CHUNK, torch.empty(0)

    def at(self, step: int) -> torch.Tensor:
        if not 0 <= step - self.base < LR_CHUNK:
            self.base = step
            steps = range(step, step + LR_CHUNK)
            cols = [torch.tensor([lr_at(s, c) for s in steps]).unsqueeze(1).expand(-1, n)
                    for c, n in zip(self.cfgs, self.counts)]  # (LR_CHUNK, n_j) each
            self.rows = torch.cat(cols, 1).to(self.device, torch.float32)  # (LR_CHUNK, K)
        return self.rows[step - self.base]
