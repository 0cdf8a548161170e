"""Training-step diff of arithsweep's trainer against tbukic's own code (M10S-Transformer).

Gives both trainers the same initial weights (the reference's, mapped onto an arithsweep member)
and the same batches (the reference's sampler), then compares the forward pass (logits, loss),
the first optimiser step and 2,000-step trajectories, and each component in isolation (AdamW,
clipping, the cosine, Grokfast, the decay drops, the curriculum's sampler, the initial
distributions, RoPE, QK-norm, the rotations). Prints a markdown report (docs/parity.md has
one, and how to get the reference: it is never part of this repository).

    python scripts/parity/diff_reference.py /path/to/M10S-Transformer [--shape 36|44]
        [--steps 2000] [--seed 8] [--out report.md]

Needs arithsweep installed (pip install -e .) and the reference's folder (its experiments/
sub50_sweep.py and src/minimal10digittransformer/). One thread: about 2 CPU-minutes a shape.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import components as C  # noqa: E402
import ref_bridge as R  # noqa: E402

TOLS = (1e-6, 1e-4, 1e-2)  # max |weight diff| thresholds a trajectory is said to part at


def max_diff(sweep, ref, mcfg, ref_state, ours_state) -> tuple[float, str]:
    """Largest |difference| between the reference's weights (its names) and ours, and where."""
    ref.load_state_dict({**ref.state_dict(), **ref_state}, strict=False)
    mapped = R.mapped_state(ref, mcfg)
    return max(((mapped[k] - ours_state[k]).abs().max().item(), k) for k in mapped)


def our_train(shape: str, steps: int, **over):
    """The anchor's (task, model, train) configs for a fed run of `steps` steps, one member."""
    task, mcfg, tcfg = R.our_configs(shape)
    tcfg = replace(tcfg, steps=steps, seeds=1, eval_every=steps, eval_size=64,
                   layout="reference", device="cpu", phases=None, restart_steps=0,
                   polish_steps=0, lbfgs_steps=0, early_stop=False, checkpoint_every=0,
                   **{k: v for k, v in over.items() if k != "norm_eps"})
    if "norm_eps" in over:
        mcfg = replace(mcfg, norm_eps=over["norm_eps"])
    return task, mcfg, tcfg


def first_step(sweep, shape: str, seed: int) -> list[str]:
    """Forward pass and the first optimiser step, at the anchor's settings."""
    task, mcfg, tcfg = our_train(shape, 2000)
    ref = R.ref_model(sweep, shape, seed)
    start = R.mapped_state(ref, mcfg)
    ours = R.our_model(mcfg, start)
    full = R.ref_batches(sweep, 1, seed)[0]
    with torch.no_grad():
        lr_ = ref(full)
        lo = ours(full[:, :-1], from_pos=23)[0]  # (B, 11, V): the answer predictions
        loss_r = F.cross_entropy(lr_[:, :-1].reshape(-1, 10), torch.where(
            torch.arange(35) < 24, -100, full)[:, 1:].reshape(-1), ignore_index=-100).item()
        loss_o = F.cross_entropy(lo.reshape(-1, 10), full[:, 24:].reshape(-1)).item()
    d_logit = (lr_[:, 23:34] - lo).abs().max().item()
    two = R.ref_batches(sweep, 2, seed)  # a 2-step schedule on both sides
    rs = R.run_reference(sweep, shape, seed, two)
    os_ = R.run_ours(*our_train(shape, 2), start, two)
    d1, where = max_diff(sweep, ref, mcfg, rs[1], os_[1])
    ok = lambda d: "**equal**" if d <= 1e-6 else "**differs**"  # noqa: E731
    return [f"- forward pass: max |logit diff| {d_logit:.1e} (logits up to "
            f"{lr_.abs().max():.1f}), loss {loss_r:.7f} vs {loss_o:.7f}: {ok(d_logit / 10)}"
            f" (to 1e-6 relative)",
            f"- first optimiser step: max |weight diff| {d1:.1e} ({where}): {ok(d1)}"]


def trajectories(sweep, shape: str, seed: int, steps: int) -> list[str]:
    """2,000 steps from the same start on the same batches: at parity, and with each
    difference the study found put back as it was before, one at a time."""
    batches = R.ref_batches(sweep, steps, seed)
    ref = R.ref_model(sweep, shape, seed)
    t = time.perf_counter()
    rs = R.run_reference(sweep, shape, seed, batches)
    t_ref = time.perf_counter() - t
    _, mcfg0, tcfg0 = R.our_configs(shape)
    variants = [("at parity (the anchor as committed)", {})]
    before = {"norm_eps": 1e-5, "grokfast_start": "grad", "cosine_from": 0}
    if tcfg0.grokfast_lambda != 3.0 and shape == "36":
        before["grokfast_lambda"] = 3.0
    variants += [(f"{k} {v} (before)", {k: v}) for k, v in before.items()]
    lines = [f"Reference: {steps} steps in {t_ref:.0f} s on one thread.", "",
             "| run | step 1 | step 10 | step 100 | last step | first step past "
             + " / ".join(f"{x:g}" for x in TOLS) + " | first to part |",
             "|---|---|---|---|---|---|---|"]
    for label, over in variants:
        task, mcfg, tcfg = our_train(shape, steps, **over)
        start = R.mapped_state(R.ref_model(sweep, shape, seed), mcfg)
        os_ = R.run_ours(task, mcfg, tcfg, start, batches)
        diffs = [max_diff(sweep, ref, mcfg, rs[s], os_[s]) for s in range(len(rs))]
        firsts = [next((s for s, (d, _) in enumerate(diffs) if d > tol), None) for tol in TOLS]
        part = next((diffs[s][1] for s in firsts if s is not None), "-")
        cell = lambda s, d=diffs: f"{d[s][0]:.1e}" if s < len(d) else "-"  # noqa: E731
        lines.append(f"| {label} | {cell(1)} | {cell(10)} | {cell(100)} | {cell(steps)} | "
                     + " / ".join("never" if f is None else str(f) for f in firsts)
                     + f" | {part} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference", help="the M10S-Transformer checkout (commit a05e46ed)")
    ap.add_argument("--shape", choices=sorted(R.SHAPES), action="append",
                    help="36 or 44 (default both)")
    ap.add_argument("--steps", type=int, default=2000, help="trajectory length")
    ap.add_argument("--seed", type=int, default=8, help="the reference's seed (the 36's: 8)")
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()
    if args.steps < 100:
        print("error: --steps must be at least 100", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(1)
    sweep = R.load_reference(args.reference)
    shapes = args.shape or ["36", "44"]
    out = ["# Parity report: arithsweep vs tbukic's M10S-Transformer", "",
           f"torch {torch.__version__}, seed {args.seed}, one thread, the reference's "
           f"`{R.ALGO}` recipe against `recipes/anchors/tbukic-<shape>.yaml`.", ""]
    for shape in shapes:
        out += [f"## The {shape} p", ""] + first_step(sweep, shape, args.seed) + [""]
        out += [f"### {args.steps}-step trajectories", ""]
        out += trajectories(sweep, shape, args.seed, args.steps) + [""]
    task, mcfg, tcfg = R.our_configs(shapes[0])
    rows = [C.adamw(tcfg), C.clipping(), C.cosine(sweep, tcfg), C.grokfast(sweep, tcfg),
            C.decay_drops(tcfg)] + C.curriculum(sweep, task, tcfg)
    rows += [C.initial(sweep, s, R.our_configs(s)[1]) for s in shapes]
    rows += C.layers(sweep, R.our_configs("36")[1])
    out += ["## Components in isolation", "", "| component | verdict | detail |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
