"""The optimiser tail of a tiny-layout step (Grokfast, NaN guard, clipping, AdamW) in one C call.

After the kernel's forward and backward, a CPU tiny-layout step used to run its tail as a few
hundred small torch ops (`GrokfastEMA.apply`, `_clip_and_guard`, `PackAdamW.step`), each
costing more in dispatch than in arithmetic for a model of a few dozen parameters.
`tiny_step.c` does the same job for every member and parameter in one call: the pointers to
each tensor (weights, gradients, both moments, the Grokfast average) are gathered once and
handed over again as long as the tensors stay the same. Its numbers are arithmetic 3
(core/arithmetic.py): the formulas are the torch tail's, each rounded in float32 as written
in the C file, with the clipping norm summed in double in an order set by a member's own
parameter sizes, so a member trains to the same bits alone and in any pack.

The tiny layout is available only when both the kernel and this build (same compiler, same
flags) load: `tiny_layout.load_error()` says why not, and `auto` then trains in the reference
layout, whose tail stays torch's (as it does on CUDA).

    from arithsweep.core.model.tiny_step import NativeTail
    tail = NativeTail(opt)                         # opt: a PackAdamW (training/optim.py)
    tail(grokfast, clip, alive, running, lr)       # after backward; clip (K,) or a float
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch
from torch import Tensor

from arithsweep.core import native

_SOURCE = Path(__file__).with_name("tiny_step.c")
CFLAGS_ENV = "ARITHSWEEP_KERNEL_CFLAGS"  # the kernel's extra flags (tiny_layout.CFLAGS_ENV)
G_OFF, G_EMA, G_INIT = 0, 1, 2  # the C file's Grokfast modes


def build_flags() -> list[str]:
    """The kernel's flags (tiny_layout.build_flags): contraction off, so that a build for AVX2
    and one for AVX-512 round every a*b + c the same (tests/test_native_step.py)."""
    return ["-O3", "-fno-math-errno", "-shared", "-fPIC", f"-march={native.target()}",
            "-ffp-contract=off", *os.environ.get(CFLAGS_ENV, "").split()]


def load_error() -> str | None:
    """None once the tail is built and loaded, else why not (no C compiler, ...)."""
    return _native.error()


def _declare(lib: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.tiny_step.argtypes = [i, i, p, p, p, p, p, p, p, i, p, p, p, p, p, p, p]
    lib.tiny_step.restype = None


_native = native.Library(_SOURCE, build_flags, "the tiny step's optimiser tail", _declare)


def _addresses(ts: list[Tensor]) -> ctypes.Array:
    return (ctypes.c_void_p * len(ts))(*[t.data_ptr() for t in ts])


def _checked(ts: list[Tensor], what: str) -> None:
    for t in ts:
        if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
            raise RuntimeError(f"the tiny step's tail takes contiguous float32 CPU tensors; "
                               f"a {what} is {t.dtype}, {tuple(t.stride())} on {t.device}")


class NativeTail:
    """Grokfast, guard, clipping and AdamW of a pack's step, for the optimiser `opt` (a
    PackAdamW: its params, decayed tensors, moments m and v, step count t and decay wd (K,),
    all (K, ...) float32 on the CPU). Reads the gradients in place and leaves in them what
    AdamW used (filtered, clipped, a dead member's 0), as the torch tail does."""

    def __init__(self, opt) -> None:
        if (why := load_error()) is not None:
            raise RuntimeError(why)
        self.opt, self.params = opt, list(opt.params)
        self.K = K = opt.wd.numel()
        decayed = {id(p) for p in opt.decay}
        self.n = torch.tensor([p.numel() // K for p in self.params], dtype=torch.int64)  # (P,)
        self.decay = torch.tensor([id(p) in decayed for p in self.params], dtype=torch.uint8)
        _checked([*self.params, *opt.m, *opt.v], "weight or moment")
        # PackAdamW.load and carry_moments copy into m and v: their addresses hold
        self.p, self.m, self.v = (_addresses(x) for x in (self.params, opt.m, opt.v))
        self._grads: list[Tensor] = []
        self._g: ctypes.Array | None = None
        self._ema: list[Tensor] | None = None
        self._e: ctypes.Array | None = None
        self.hyper: Tensor | None = None  # (H_N,) float32, with the Grokfast filter's numbers
        self._filter: tuple[float, float] | None = None

    def _gradients(self) -> ctypes.Array:
        """The gradients' addresses, gathered again only when a tensor changed. A parameter
        without one (never reached by backward) gets zeros: AdamW still moves its moments and
        decays it, as the torch tail's step does with a missing gradient."""
        grads = [p.grad for p in self.params]
        if len(grads) != len(self._grads) or any(
                a is not b for a, b in zip(grads, self._grads)):
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            self._grads = [p.grad for p in self.params]
            _checked(self._grads, "gradient")
            self._g = _addresses(self._grads)
        assert self._g is not None
        return self._g

    def _average(self, grokfast) -> tuple[int, ctypes.Array | None]:
        """(the C file's Grokfast mode, the averages' addresses) this step. The averages are
        made here on the filter's first step (zeros, or the gradient itself for start "grad"),
        one per parameter, in the parameters' order: GrokfastEMA.ema, which a state saves."""
        if grokfast is None:
            return G_OFF, None
        mode = G_EMA
        if grokfast.ema is None:
            grokfast.ema = [torch.zeros_like(p) for p in self.params]
            mode = G_INIT if grokfast.start == "grad" else G_EMA
        if grokfast.ema is not self._ema:  # new, or another list loaded from a state
            if len(grokfast.ema) != len(self.params):
                raise RuntimeError(f"a Grokfast average of {len(grokfast.ema)} tensors for "
                                   f"{len(self.params)} parameters")
            grokfast.ema = [e.contiguous() for e in grokfast.ema]
            _checked(grokfast.ema, "Grokfast average")
            self._ema, self._e = grokfast.ema, _addresses(grokfast.ema)
        return mode, self._e

    def _constants(self, grokfast) -> Tensor:
        alpha, lam = (grokfast.alpha, grokfast.lam) if grokfast is not None else (0.0, 0.0)
        if self.hyper is None or (grokfast is not None and self._filter != (alpha, lam)):
            o = self.opt
            # each rounded once to float32, as torch's ops take a Python float
            self.hyper = torch.tensor([alpha, 1 - alpha, lam, o.b1, 1 - o.b1, o.b2, 1 - o.b2,
                                       o.eps], dtype=torch.float32)
            self._filter = (alpha, lam)
        return self.hyper

    @torch.no_grad()
    def __call__(self, grokfast, clip: Tensor | float, alive: Tensor, running: Tensor,
                 lr: Tensor) -> None:
        """One step. grokfast: a GrokfastEMA, or None where the filter is off this step;
        clip (K,) float32 or one float (<= 0: off); alive (K,) bool, updated in place;
        running (K,) bool; lr (K,) float32. A member dead or stopped does not move."""
        g = self._gradients()
        mode, e = self._average(grokfast)
        h = self._constants(grokfast)
        if not isinstance(clip, Tensor):
            clip = torch.full((self.K,), float(clip))
        o, ptr = self.opt, ctypes.c_void_p
        clip, lr, wd = (x.to(torch.float32).contiguous() for x in (clip, lr, o.wd))
        for x in (alive, running):
            assert x.dtype == torch.bool and x.is_contiguous() and x.numel() == self.K
        assert o.t.dtype == torch.float32 and lr.numel() == clip.numel() == self.K
        lib = _native.lib
        assert lib is not None
        lib.tiny_step(self.K, len(self.params), ptr(self.n.data_ptr()),
                       ptr(self.decay.data_ptr()), self.p, g, self.m, self.v, e, mode,
                       ptr(h.data_ptr()), ptr(o.t.data_ptr()), ptr(lr.data_ptr()),
                       ptr(wd.data_ptr()), ptr(clip.data_ptr()), ptr(alive.data_ptr()),
                       ptr(running.data_ptr()))
