"""The version of training's arithmetic: which floats a seed trains to, and which commit gives
them again.

"Deterministic" has a stated reach (docs/training.md#where-the-same-seed-gives-the-same-weights):
for one version of this arithmetic, the same configuration and seed give the same weights. A
change that moves any float of training (the order of a sum, how a batch is split, a kernel's
rounding) is a new version: it bumps ARITHMETIC and adds a row to VERSIONS. Every checkpoint
training saves records the version (config.json's meta.arithmetic), every training state too,
and a state of another version is refused rather than continued with other floats. A checkpoint
or state without the field was trained with version 1, the arithmetic before the field.

Torch-free: the board's listing (`arithsweep leaderboard`, publish) says it for each entry.

    python -c "from arithsweep.core.arithmetic import ARITHMETIC, retrains; \\
        print(ARITHMETIC, retrains({'meta': {'repeats': 'a machine of the same kind'}}))"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# 1: every commit before 3bb0c50. Within it, only checkpoints from 4d71828 on (meta.repeats)
#    repeat bit for bit: earlier builds left the kernel's fused multiply-adds to the compiler.
# 2: 3bb0c50 on. A member trains to the same bits alone and in any pack: the clipping norm is
#    summed in an order set by the parameters' sizes (train.member_sq_norms), no longer by
#    torch's reduction over (parameters, members), and micro_batch splits each member's own
#    batch (0: none) instead of ~1024 rows of the whole pack on a CPU. Runs whose clip acted,
#    and reference-layout CPU runs of >= 2048 rows a step, train to other floats than in 1.
# 3: b48b8b8 on. The CPU tiny layout's optimiser tail (Grokfast, the NaN guard, clipping,
#    AdamW) is one C call (model/tiny_step.c) instead of torch's ops: each element rounded in
#    float32 as that file writes it, the clipping norm summed in double over 8 partial sums
#    a member, AdamW's bias corrections b**t by squaring in double.
#    Tiny-layout runs train to other floats than in 2 (a step's weights within ~1e-7);
#    reference-layout and CUDA runs keep 2's floats, their tail being torch's still.
# 4: the tiny kernel's multiply-accumulates (products, sums of products, norms, attention,
#    RoPE, the exp and erf polynomials) are explicit fused multiply-adds (vfma in
#    model/tiny_kernel.c: one rounding, so AVX2 and AVX-512 builds give the same bits, as
#    tests/test_kernel_target.py checks with GCC and Clang (12 and 14 here, with versions 4
#    and 5's ties and tail); contraction stays off for the rest): 1.12x the kernel's speed.
#    Tiny-layout runs train to other floats than in 3; reference-layout and CUDA runs keep 3's.
# 5: the tiny layout's ties (the effective weights from the owned numbers, and their gradients
#    back) are one C call each way (model/tiny_ties.c) for the tbukic family's rules instead
#    of torch's ops and autograd: cos and sin libm's double ones rounded to float, each sum
#    a member's own in a fixed order. Tiny-layout runs of those rules train to other floats
#    than in 4 (weights and gradients within ~1e-6 relative); other rules, reference-layout
#    and CUDA runs keep 4's.
# 6: the reference layout's folded LayerNorm bias (each norm's bias folded into the projection
#    it feeds, W^T beta) is summed in index order by elementwise adds for every pack size,
#    forward and backward (layers.member_matvec), instead of by torch.bmm, which on torch 2.13
#    x86-64 summed in index order for K > 1 but handed K = 1 to BLAS's gemv, rounding otherwise
#    once d * d_out >= 400: a member alone parted from the same member in a pack. CPU packs
#    (K >= 2) train to 5's bits; a single-seed CPU reference-layout run of a LayerNorm-with-bias
#    model of that width trains to other floats than in 5 (its pack's), and CUDA runs of such
#    models to other floats too. Tiny-layout, RMSNorm and bias-free runs keep 5's.
ARITHMETIC = 6
FIELD = "arithmetic"  # its key in a checkpoint's meta and in a training state
# From this version on a member trains to the same bits alone as in any pack on a CPU, in the
# reference layout too (the tiny layout from 2 on): one seed's command retrains it
ALONE_AS_IN_A_PACK = 6


# The kinds of run whose floats a version may move: the tiny layout on a CPU, the reference
# layout on a CPU, and any run on a GPU. A run keeps its floats across a version that moved
# another kind (3 to 5 moved the tiny layout's alone), so its checkpoint retrains, and its
# training state goes on, at any commit from its own version to the first that moved its kind.
KINDS = ("tiny", "reference", "cuda")


@dataclass(frozen=True)
class Version:
    first: str | None  # its first commit (None: the first version)
    last: str | None  # its last commit (None: still the current version)
    # the commit named for retraining its checkpoints bit for bit: one where a published
    # entry's commands were run again to the same weights, else its last commit (which has
    # every feature a config of that version may use)
    retrain: str | None
    moved: tuple[str, ...] = KINDS  # the kinds of run it gave other floats than the version before


# Bumping ARITHMETIC: give the old version its last commit (and retrain commit), add the new one
VERSIONS = {
    1: Version(first=None, last="970b2be", retrain="8d8bf16"),  # entry 60's commands, checked
    2: Version(first="3bb0c50", last="8701213", retrain="8701213"),
    3: Version(first="b48b8b8", last="a0e9ca1", retrain="a0e9ca1", moved=("tiny",)),
    4: Version(first="0533952", last="07dfba1", retrain="07dfba1", moved=("tiny",)),
    5: Version(first="92b8369", last="ec44aaa", retrain="ec44aaa", moved=("tiny",)),
    6: Version(first="eb7a75a", last=None, retrain=None, moved=("reference", "cuda")),
}


def kind_of(meta: dict[str, Any] | None) -> str | None:
    """The kind of run (KINDS) a checkpoint's meta or a training state's doc records: its
    "layout" and "device" (written from arithmetic 6 on), else what its "repeats" says (only
    the tiny layout on a CPU repeats on any x86-64); None where neither says."""
    meta = meta or {}
    device, layout = str(meta.get("device") or ""), meta.get("layout")
    if meta.get("finished_from"):  # `arithsweep finish`'s output: CMA-ES's numpy algebra too
        return None
    if device.startswith("cuda"):
        return "cuda"
    if layout in ("tiny", "reference"):
        return str(layout)
    repeats = meta.get("repeats")
    if not repeats:
        return None
    return "tiny" if str(repeats).startswith("any x86-64") else "reference"


def alone_as_in_pack(meta: dict[str, Any] | None) -> bool:
    """Does one seed of a checkpoint's run train alone to the weights it had in its pack? A
    CPU run from ALONE_AS_IN_A_PACK on (the tiny layout's from 2 on; its commands already name
    one seed)."""
    meta = meta or {}
    return (version_of(meta) >= ALONE_AS_IN_A_PACK
            and str(meta.get("device") or "cpu") == "cpu")


def same_floats(version: int, kind: str | None) -> bool:
    """Does this arithsweep train a `kind` run of `version` to its floats? Yes for its own
    version, and for an older one when no version since moved that kind's floats."""
    if version == ARITHMETIC:
        return True
    if version not in VERSIONS or kind is None:
        return False
    return all(kind not in VERSIONS[v].moved for v in range(version + 1, ARITHMETIC + 1))


def version_of(doc: dict[str, Any] | None) -> int:
    """The arithmetic version a checkpoint's meta or a training state's doc records; 1 for one
    written before the field (and for anything that is not a whole number)."""
    v = (doc or {}).get(FIELD, 1)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else 1


def retrain_commit(version: int, kind: str | None = None) -> str | None:
    """The commit that trains `version`'s floats: None for this arithsweep's own version and
    for an older one whose `kind` of run no version since moved (any commit of either does),
    and for a version newer than this arithsweep knows."""
    known = VERSIONS.get(version)
    if known is None or same_floats(version, kind):
        return None
    return known.retrain or known.last


def at_commit(version: int, kind: str | None = None) -> str:
    """"retrains bit for bit at commit C (how to get C)" for a checkpoint of `version` trained
    by a `kind` run."""
    if version not in VERSIONS:
        return (f"newer than this arithsweep's {ARITHMETIC}: retrains bit for bit with the "
                f"arithsweep that trained it")
    commit = retrain_commit(version, kind)
    if commit is None:  # named by its first commit, any later one that keeps its floats does
        # (a config field added later, such as cull, needs a commit that reads it)
        which = (f"arithmetic {version}" if version == ARITHMETIC else
                 f"arithmetic {version} to {ARITHMETIC} (no version since moved a {kind} "
                 f"run's floats)")
        return (f"retrains bit for bit at any commit of {which} that reads its config (from "
                f"{VERSIONS[version].first} on)")
    return (f"retrains bit for bit at commit {commit} (`git checkout {commit}` or "
            f"`pip install git+<repo>@{commit}`)")


def retrains(config: dict[str, Any]) -> str:
    """For a checkpoint's config.json: its arithmetic and the commit that retrains it bit for
    bit, in words (LEADERBOARD.md and `arithsweep show` print it). One trained before the
    kernel's rounding was pinned (no meta.repeats) retrains at no commit bit for bit."""
    meta = config.get("meta") if isinstance(config.get("meta"), dict) else {}
    v = version_of(meta)
    if not meta.get("repeats"):
        return (f"arithmetic {v}, trained before the kernel's rounding was pinned: no commit "
                f"retrains it bit for bit")
    return f"arithmetic {v}, {at_commit(v, kind_of(meta))}"


def state_refused(what: str, version: int) -> str:
    """The one line that refuses to continue a state (or a search) of another version: at its
    version's last commit, whose code has every feature a run of that version may use."""
    known = VERSIONS.get(version)
    commit = known.last if known is not None and version != ARITHMETIC else None
    where = (f"continue it at commit {commit} (git checkout {commit})" if commit else
             "continue it with the arithsweep that wrote it")
    return (f"{what}: written with arithmetic {version}, and this arithsweep trains with "
            f"arithmetic {ARITHMETIC}, whose floats differ; {where}, or start it afresh")
