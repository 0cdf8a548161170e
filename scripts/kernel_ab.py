"""Two builds of the tiny kernel on the same inputs: do they give the same bits, and how fast?

The instrument behind every "same bits" claim about a kernel change. It trains the 36-p (or
44-p) anchor's recipe for a few hundred steps so the weights are a real run's, keeps the last
step's kernel inputs (tokens, masks, effective weights, RoPE tables), builds each kernel
source with the project's own flags (`tiny_layout.build_flags`, so the AVX2 target too via
ARITHSWEEP_KERNEL_TARGET), and calls `tiny_fwd_bwd` and `tiny_logits` of each on one thread,
interleaved rounds. It prints the sha256 of the gradients, losses and logits of each build
(equal hashes = the same bits) and the CPU milliseconds of one 64-seed step's kernel work.

    python scripts/kernel_ab.py                        # HEAD's kernel vs the working tree's
    python scripts/kernel_ab.py --old REV --shape 44   # another commit's kernel
    python scripts/kernel_ab.py --old a.c --new b.c    # two files
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "arithsweep/core/model/tiny_kernel.c"


def source(spec: str, tmp: Path, name: str) -> Path:
    """A kernel source: a file path, or a git revision of the repository's kernel."""
    if Path(spec).is_file():
        return Path(spec)
    out = tmp / f"{name}.c"
    out.write_bytes(subprocess.run(["git", "show", f"{spec}:{KERNEL}"], cwd=ROOT, check=True,
                                   capture_output=True).stdout)
    return out


def build(src: Path, tmp: Path, name: str) -> ctypes.CDLL:
    from arithsweep.core.model import tiny_layout as TL

    so = tmp / f"{name}.so"
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, *TL.build_flags(), "-o", str(so), str(src), "-lm"], check=True)
    lib = ctypes.CDLL(str(so))
    p = ctypes.c_void_p
    lib.tiny_fwd_bwd.argtypes = [p, ctypes.c_float, ctypes.c_float, p, ctypes.c_int,
                                 p, p, p, p, p, p, p]
    lib.tiny_logits.argtypes = [p, ctypes.c_float, ctypes.c_float, p, ctypes.c_int, p, p,
                                p, p, p]
    return lib


def capture(shape: str, seeds: int, steps: int) -> dict:
    """The kernel's inputs at the last of `steps` training steps of the anchor's recipe."""
    import arithsweep.core.model.tiny_layout as TL
    import arithsweep.core.training.population as P
    from arithsweep.core.overrides import build_configs

    task, model_cfg, cfg = build_configs(None, None,
                                         ROOT / f"recipes/anchors/tbukic-{shape}.yaml", {})
    kept: dict = {}
    forward = TL._TinyLoss.forward

    def keep(ctx, plan, ties, tok, mask, msum, cos, sin, scale, eps, *w):
        # the kernel reads the N_WEIGHTS effective weights; what follows them (arithmetic 5
        # on) is the ties' own tensors, for their backward only
        kept.update(plan=plan, tok=tok.clone(), mask=mask.clone(), cos=cos, sin=sin,
                    scale=scale, eps=eps, w=[None if t is None else t.detach().clone()
                                             .contiguous() for t in w[:TL.N_WEIGHTS]])
        return forward(ctx, plan, ties, tok, mask, msum, cos, sin, scale, eps, *w)

    TL._TinyLoss.forward = staticmethod(keep)
    P.train(task, model_cfg, replace(cfg, seeds=seeds, steps=steps, eval_every=10**9))
    TL._TinyLoss.forward = forward
    return kept


def call(lib: ctypes.CDLL, k: dict, logits: bool) -> tuple[float, bytes]:
    """(CPU seconds, output bytes) of one pass over every chunk on this thread."""
    plan = k["plan"]
    w = k["w"]
    ptrs = (ctypes.c_void_p * len(w))(*[0 if t is None else t.data_ptr() for t in w])
    n = plan.n_chunks
    if logits:
        Ti, s, V = int(plan.dims[0]), int(plan.dims[1]), int(plan.dims[8])
        out = torch.full((plan.K, int(plan.dims[11]), Ti - s, V, 16), float("nan"))
        t = time.thread_time()
        lib.tiny_logits(plan.dims.data_ptr(), k["eps"], k["scale"], plan.chunks.data_ptr(), n,
                        k["tok"].data_ptr(), ptrs, k["cos"].data_ptr(), k["sin"].data_ptr(),
                        out.data_ptr())
        return time.thread_time() - t, out.numpy().tobytes()
    grads = torch.full((n, plan.G), float("nan"))
    loss = torch.full((n,), float("nan"), dtype=torch.float64)
    t = time.thread_time()
    lib.tiny_fwd_bwd(plan.dims.data_ptr(), k["eps"], k["scale"], plan.chunks.data_ptr(), n,
                     k["tok"].data_ptr(), k["mask"].data_ptr(), ptrs, k["cos"].data_ptr(),
                     k["sin"].data_ptr(), grads.data_ptr(), loss.data_ptr())
    return time.thread_time() - t, grads.numpy().tobytes() + loss.numpy().tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", default="HEAD", help="a git revision or a .c file (HEAD)")
    ap.add_argument("--new", default=str(ROOT / KERNEL), help="a .c file or a revision")
    ap.add_argument("--shape", choices=("36", "44"), default="36")
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR", help="build into DIR and keep it (perf annotate)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    k = capture(a.shape, a.seeds, a.train_steps)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(a.keep or d)
        tmp.mkdir(parents=True, exist_ok=True)
        libs = {n: build(source(s, tmp, n), tmp, n) for n, s in (("old", a.old), ("new", a.new))}
        best = {(n, lg): float("inf") for n in libs for lg in (False, True)}
        digest = {}
        for _ in range(a.rounds):
            for n, lib in libs.items():
                for lg in (False, True):
                    sec, out = call(lib, k, lg)
                    best[n, lg] = min(best[n, lg], sec)
                    h = hashlib.sha256(out).hexdigest()[:16]
                    assert digest.setdefault((n, lg), h) == h, "a build is not deterministic"
    for lg, what in ((False, "forward+backward"), (True, "logits")):
        o, nw = best["old", lg], best["new", lg]
        same = "same bits" if digest["old", lg] == digest["new", lg] else "DIFFERENT BITS"
        print(f"{what}: old {1e3 * o:.2f} ms ({digest['old', lg]}), new {1e3 * nw:.2f} ms "
              f"({digest['new', lg]}): {o / nw:.2f}x, {same}")


if __name__ == "__main__":
    main()
