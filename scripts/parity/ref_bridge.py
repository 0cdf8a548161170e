"""The bridge between tbukic's M10S-Transformer code and arithsweep, for the parity study.

Loads the reference from its checkout (never from this repository: it is a measuring
instrument), builds its 36 p and 44 p models, maps their weights onto an arithsweep member of
the same shape, draws batches with the reference's own sampler, and runs both trainers on
those batches from those weights, recording every step's weights.

Used by scripts/parity/diff_reference.py; run that:

    python scripts/parity/diff_reference.py /path/to/M10S-Transformer --shape 36
"""

from __future__ import annotations

import contextlib
import random
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
# shape -> (the reference sweep's config name, arithsweep's anchor)
SHAPES = {
    "36": ("36p_ff2_tieQO_KrotQ_shnorm_VeqQ_downRotUpT_tieQKnorm",
           "recipes/anchors/tbukic-36.yaml"),
    "44": ("44p_ff2_tieQO_KeqQ_shnorm_VeqQ", "recipes/anchors/tbukic-44.yaml"),
}
ALGO = "curr+gf+awd"  # the sweep's "universal recipe for small models", the anchors' recipe


def load_reference(folder: str | Path):
    """The reference's experiments/sub50_sweep.py as a module (it puts its src/ on the path)."""
    folder = Path(folder).resolve()
    script = folder / "experiments" / "sub50_sweep.py"
    if not script.is_file():
        raise SystemExit(f"error: {script} not found: give the M10S-Transformer checkout")
    for p in (folder / "experiments", folder / "src"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    import sub50_sweep  # noqa: PLC0415 - only importable once its folder is on the path

    return sub50_sweep


def ref_cfg(sweep, shape: str) -> dict:
    name = SHAPES[shape][0]
    return next(c for c in sweep.CONFIGS if c["name"] == name)


def ref_algo(sweep) -> dict:
    return next(a for a in sweep.ALGORITHMS if a["name"] == ALGO)


def ref_model(sweep, shape: str, seed: int):
    """The reference's model of `shape` as train_one builds it for `seed`."""
    random.seed(seed)
    torch.manual_seed(seed)
    return sweep.build_model(ref_cfg(sweep, shape), "cpu")[0]


def our_configs(shape: str, **train_over):
    """(task, model config, train config) of arithsweep's anchor, train fields overridden."""
    from arithsweep.core.overrides import build_configs

    task, mcfg, tcfg = build_configs(None, None, str(ROOT / SHAPES[shape][1]), {})
    for k, v in train_over.items():
        setattr(tcfg, k, v)
    return task, mcfg, type(tcfg).from_dict(tcfg.to_dict())


def mapped_state(ref, mcfg) -> dict[str, torch.Tensor]:
    """The reference model's weights as one arithsweep member's state (names, layouts).

    nn.Linear holds W (out, in), arithsweep W^T (in, out). The K angle maps as it is; the down
    angle flips sign: the reference's down = up^T R(theta) turns the hidden pair by theta,
    arithsweep's up_t_rot turns W_down's columns, which is R(-theta)."""
    sd = {k: v.detach().clone() for k, v in ref.named_parameters()}
    out = {"embed.arc": torch.stack([sd["arc_A"], sd["arc_start"], sd["arc_stride"]]),
           "shared_norm.weight": sd["block.ln1.weight"],
           "layers.0.attn.q.weight": sd["block.attn.q_proj.weight"].T.contiguous(),
           "layers.0.mlp.gate.weight": sd["block.mlp.gate_proj.weight"].T.contiguous(),
           "layers.0.mlp.up.weight": sd["block.mlp.up_proj.weight"].T.contiguous()}
    if mcfg.qk_norm == "shared":
        out["layers.0.attn.qk_norm"] = sd["block.attn.q_norm.weight"]
    else:
        out["layers.0.attn.q_norm"] = sd["block.attn.q_norm.weight"]
        out["layers.0.attn.k_norm"] = sd["block.attn.k_norm.weight"]
    if mcfg.tie_k == "rotated":
        out["layers.0.attn.k_angle"] = sd["block.attn.k_proj.theta"].reshape(1)
    if mcfg.mlp_down == "up_t_rot":
        out["layers.0.mlp.down_angle"] = -sd["block.mlp.down_proj.theta"].reshape(1)
    elif mcfg.mlp_down == "own":
        out["layers.0.mlp.down.weight"] = sd["block.mlp.down_proj.weight"].T.contiguous()
    return out


def our_model(mcfg, state: dict[str, torch.Tensor]):
    from arithsweep.core.model.model import ArithTransformer

    return ArithTransformer.from_member_state(mcfg, state)


def ref_batches(sweep, steps: int, seed: int, batch: int = 128) -> list[torch.Tensor]:
    """The reference's batches for steps 1..steps (its curriculum), from random.seed(seed):
    full sequences (B, 35), prompt 24 tokens + the 11 reversed sum digits."""
    random.seed(seed)
    curr = ref_algo(sweep)["digit_curriculum"]
    return [sweep.generate_batch(batch, "cpu", sweep.get_max_digits(s, curr))[0]
            for s in range(1, steps + 1)]


def answer_mask(full: torch.Tensor) -> torch.Tensor:
    """arithsweep's loss mask (B, 34) for a reference sequence: the 11 answer predictions."""
    m = torch.zeros(full.shape[0], full.shape[1] - 1, dtype=torch.bool)
    m[:, 23:] = True
    return m


def run_reference(sweep, shape: str, seed: int, batches: list[torch.Tensor],
                  **algo_over) -> list[dict[str, torch.Tensor]]:
    """The reference's own train_one on `batches`; the weights before every step and after the
    last (len(batches) + 1 states, in the reference's names). Its evaluation (500 fresh
    problems every 2,000 steps) is replaced by 0%: no decay drop fires inside the run."""
    held: dict = {}
    states: list[dict[str, torch.Tensor]] = []

    def snap():
        return {k: v.detach().clone() for k, v in held["model"].named_parameters()}

    def build(cfg, device, init_scheme=None):
        held["model"], n = orig_build(cfg, device, init_scheme)
        return held["model"], n

    def batch(bs, device, max_digits=10):
        states.append(snap())
        full = batches[len(states) - 1]
        labels = full.clone()
        labels[:, :24] = -100
        return full, labels

    orig_build = sweep.build_model
    algo = {**ref_algo(sweep), **algo_over}
    patches = {"build_model": build, "generate_batch": batch,
               "evaluate": lambda *a, **k: (0.0, 0.0)}
    saved = {k: getattr(sweep, k) for k in patches}
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        try:
            for k, v in patches.items():
                setattr(sweep, k, v)
            sweep.train_one(ref_cfg(sweep, shape), algo, seed, len(batches), 10**9, "cpu", tmp)
        finally:
            for k, v in saved.items():
                setattr(sweep, k, v)
    states.append(snap())
    return states


def run_ours(task, mcfg, tcfg, start: dict[str, torch.Tensor],
             batches: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """arithsweep's own trainer (train_population, one member) from `start` on `batches`; the
    weights before every step and after the last."""
    import arithsweep.core.training.population as P
    import arithsweep.core.training.train as T

    mask = [answer_mask(b) for b in batches]

    class Fed:  # the pack's data stream, replaced by the reference's batches
        def __init__(self, *_a, **_k):
            pass

        def next(self, step):
            return batches[step][None], mask[step][None]

    class Started(P.ArithTransformer):  # every member starts from the mapped weights
        def __init__(self, cfg, k=1, generator=None, seeds=None):
            super().__init__(cfg, k=k, generator=torch.Generator().manual_seed(0))
            if k == 1 and seeds is not None:
                self.load_member_state(0, start)
                held["model"] = self

    held: dict = {}
    states: list[dict[str, torch.Tensor]] = [{k: v.clone() for k, v in start.items()}]

    def on_step(step, total):
        states.append(held["model"].member_state(0))

    saved = (T._DataStream, P.ArithTransformer)
    try:
        T._DataStream, P.ArithTransformer = Fed, Started
        P.train_population(task, mcfg, [tcfg], on_step=on_step)
    finally:
        T._DataStream, P.ArithTransformer = saved
    return states
