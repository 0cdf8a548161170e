"""LEADERBOARD.md's sections per seed project: what each project arithsweep was specified from
reported, and what arithsweep reproduced of it, from the verified entries alone.

Five projects brought users here (AdderBoard's tiny 10-digit adders, McLeish et al.'s abacus
length generalisation, Quirke's verified add/sub, the arithmetic notebook's sorting task, APT's
look inside a model). Each `Project` says which entries belong to it (a predicate on a
leaderboard row) and which pictures, if present under the published folder's `pictures/`,
go beside its table. A project with no entry yet says so instead of borrowing one.

No torch: `publish` imports this module on the fast path.

    python -c "from arithsweep.leaderboard.projects import PROJECTS; print(PROJECTS[0].title)"
    arithsweep ood ENTRY --png leaderboard/pictures/ood-add8.png   # then: arithsweep publish
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arithsweep.core.config import ABACUS_POSITIONS
from arithsweep.core.evaluation.stats import nines, percent

PICTURES = "pictures"  # beside LEADERBOARD.md; committed by hand, linked when present
# (ood-*: `arithsweep ood --png`; inspect-*: `arithsweep inspect --png`; frontier-<task>*: a
# search's params_vs_em.png, copied)


def _task(pattern: str) -> Callable[[dict[str, Any]], bool]:
    rx = re.compile(pattern)
    return lambda row: bool(rx.fullmatch(str(row.get("task", ""))))


def _abacus(row: dict[str, Any]) -> bool:
    return (row.get("model_config") or {}).get("pos") in ABACUS_POSITIONS


@dataclass(frozen=True)
class Project:
    key: str
    title: str
    reported: str  # what the project itself reported, in one paragraph of markdown
    ours: str  # how arithsweep reproduces it (commands), one paragraph of markdown
    matches: Callable[[dict[str, Any]], bool]
    pictures: tuple[str, ...] = field(default=())  # glob patterns under pictures/


PROJECTS: tuple[Project, ...] = (
    Project(
        "adderboard", "AdderBoard: the smallest 10-digit adders",
        "AdderBoard ranks transformers that add two 10-digit numbers with at least 99% exact "
        "match on 10 edge cases and 10,000 random pairs, counting unique parameters after "
        "tying. The smallest trained entry has 36 parameters (one layer, d=3, heavy weight "
        "tying, Grokfast and fine-tuning on error pairs); the PyTorch replication of the "
        "gpt-acc-jax recipe reached 99.65% with 763 parameters.",
        "Found by the search itself: `arithsweep search --task add10 --target 0.99` (the "
        "`adderboard` space, one trial at a time on one CPU core) started from staghado's "
        "146-parameter shape and, by shrink moves from each verified incumbent (a tie switched "
        "on, a width cut), verified 146, 119, 84, 79, 70, 66, 60 and then a 59-parameter adder: "
        "one query head of width 4 at d_model 3, V = Q, O = Q^T, K its own, shared QK-norm, "
        "RoPE base 3 on interleaved pairs, the digits on an arc, SwiGLU d_ff 4 whose down "
        "projection is up^T turned by one angle, one norm weight for every site (1 of 8 seeds; "
        "the search's command, wall time and seeds are under the entry). The public models' "
        "configurations are in `recipes/anchors/` (`arithsweep params "
        "recipes/anchors/tbukic-36.yaml` prints 36); trained from its file, MicroAdder's "
        "74-parameter one (`recipes/anchors/microadder-74.yaml`: a learned digit-place spiral, "
        "adaptive weight decay, 120K steps) answers every one of the 1,122,011 verification "
        "problems and all 10,010 of AdderBoard's (1 of 8 seeds, 49 minutes on 2 CPU cores); "
        "the hand recipe `recipes/add10-85.yaml` trains an 85-parameter one. Verified on a "
        "held-out sample 100x larger "
        "than AdderBoard's; `arithsweep export N --adderboard F.py --check` writes a "
        "submission and runs AdderBoard's protocol on it: the 59-parameter one answers 9,981 "
        "of its 10,010 problems (99.71%, the board's bar is 99%). Its one head reads both "
        "operands' digits at once (two diagonals in the picture): they sit 12 positions apart, "
        "about two turns of RoPE's 1-radian pair and one of its 0.577-radian pair. The record's "
        "own 36-parameter shape, trained here at parity with its author's code (docs/parity.md) "
        "by `arithsweep train`, not found by the search: its cosine phase (`arithsweep train "
        "--config recipes/anchors/tbukic-36.yaml --seeds 64 --seed 0 --out s0`, 200K steps), "
        "a Grokfast phase from every seed's own last state (`arithsweep train --config "
        "recipes/anchors/tbukic-36.yaml --seeds 64 --seed 0 --init-from s0/resume --set "
        "steps=100000 --set lr=0.001 --set min_lr_ratio=0.1 --set grokfast_lambda=3.0 --set "
        "curriculum=null --set cosine_from=0 --out g0`), then the finishers on its best "
        "seed, mining training problems only (the command under the entry). The whole path "
        "is now one command, `arithsweep train --config recipes/anchors/tbukic-36.yaml "
        "--seeds 64 --out t36` (its `path:` holds both phases and the finishers; a test "
        "holds a short path to the chained commands' weights): 99.40% of the "
        "1,122,011 problems and "
        "9,956 of AdderBoard's 10,010 (99.46%). It is seed 24, the best of 128 seeds trained "
        "this way (docs/results.md#tbukic36-parity); its pack took about 1.4 CPU-hours, its "
        "finishing 45 minutes of a core.",
        _task(r"add10"), ("adderboard-*.png", "frontier-add10*.png"),
    ),
    Project(
        "abacus", "Length generalisation: abacus positions and looped blocks (McLeish et al.)",
        "\"Transformers Can Do Arithmetic with the Right Embeddings\" trains on operands of at "
        "most 20 digits and reaches 99% exact match on 100-digit addition, about five times "
        "the training length, with abacus embeddings (each digit's index within its number, "
        "randomly offset in training); looped transformers with input injection help further.",
        "`arithsweep train --config recipes/add3-8836.yaml` trains add3 (operands of at most "
        "3 digits) in one layer looped three times with input injection, whose heads read "
        "digit places by `abacus_bias` (each head adds -slope x |place gap - reach| to its "
        "scores on digit keys; q and k carry no positions): 100% of all 10^6 add3 problems "
        "and >= 99% in every cell up to 18 x 18 digits, the longest a task holds (6x, 2 of 2 "
        "seeds >= 96%); at d_model 16 (`recipes/add3-2372.yaml`, 2,372 p) 94-100% to 18 "
        "digits. The paper's learned place table is the baseline below them: add8 looped "
        "twice, offset 0..40, >= 90% up to 11 digits (1.38x); add6, up to 7 (1.17x). The "
        "first picture per entry is its grid by operand lengths (the outlined square is what "
        "training saw), the loops picture its exact match by test-time loop count (`arithsweep "
        "ood ENTRY --max-digits 18 --loops 1,2,3,4,6`). Each entry is verified on its own "
        "task; `--set train_digits=N` trains a wider task on short operands only.",
        _abacus, ("ood-*.png",),
    ),
    Project(
        "quirke", "Verified addition and subtraction by class (Quirke)",
        "Quirke's verified-circuit models add, subtract and do both in one model, and are "
        "judged per question class: additions S0-S5 by their longest carry cascade through "
        "sum-9 digits, subtractions M0-M4 (positive answers) and N1-N4 (negative answers) by "
        "their borrow cascades, on class-enriched test data, reported as \"nines\" of accuracy "
        "(six nines: at most one failure per million).",
        "`arithsweep train --config recipes/sub3-4624.yaml` (or `recipes/mix3-4656.yaml`) "
        "trains on Quirke's class-enriched problems (`--set sampling=enriched`), and "
        "`arithsweep search --task sub3 --target 0.99 --time-budget 25m` descends from that "
        "shape in the `quirke` space (its frontier below); at 6 digits "
        "`arithsweep search --task mix6 --target 0.99999` searches the `quirke6` space "
        "(2-3 layers, d_model 20-32) at Quirke's five nines. "
        "`arithsweep verify` reports exact match and nines per class for add, sub and mix "
        "tasks, and for a mixed task per operation (it qualifies only when addition and "
        "subtraction each reach the target), on every problem where a task has at most 10^6 "
        "and otherwise on a million held-out ones plus 2,000 enriched problems per class.",
        _task(r"(sub|mix)\d+"), ("frontier-sub*.png", "frontier-mix*.png"),
    ),
    Project(
        "sort", "Sorting labelled numbers (the arithmetic notebook's third task)",
        "Beside addition and subtraction, the notebook trains a small transformer to put "
        "labelled numbers in order: `a:12,b:7,c:30` gives `bac`.",
        "The `sortN` tasks have their own vocabulary, exact match and verification suite "
        "(uniform, ties, already sorted, reversed; every problem for sort2 and sort3); "
        "`arithsweep train --config recipes/sort3-4672.yaml` (or `recipes/sort5-4832.yaml`) "
        "trains the entries below.",
        _task(r"sort\d+"), ("frontier-sort*.png",),
    ),
    Project(
        "apt", "Looking inside a model (APT)",
        "APT's views of an arithmetic transformer: attention patterns per head, the residual "
        "stream, and exact match by answer length.",
        "`arithsweep inspect ENTRY \"123+456\"` draws every head's attention over the tokens "
        "and the probabilities at each answer position, and reports accuracy by answer length "
        "and answer position, for any entry on this board; pictures of published ones follow.",
        lambda row: False, ("inspect-*.png",),
    ),
)


def _percent(x: Any) -> str:
    # publish's own rounding (down, so a model with failures never shows 100%); imported here
    # because publish imports this module

    return percent(x)


def _class_table(row: dict[str, Any]) -> list[str]:
    """Per-class (and, for a mixed task, per-operation first) exact match and nines."""
    parts = row.get("breakdown") or {}
    by = parts.get("by_class") or {}
    if not by:
        return []
    out = ["", f"Per class, {row.get('task')} · {row.get('params')} params:", "",
           "| class | problems | exact match | nines |", "|---|---:|---:|---:|"]
    ops = {f"all {k}": v for k, v in (parts.get("by_op") or {}).items()}
    for name, b in {**ops, **by}.items():
        n, c = int(b.get("n", 0)), int(b.get("correct", 0))
        out.append(f"| {name} | {n:,} | {_percent(c / n if n else None)} | {nines(n - c, n)} |")
    return out


def project_sections(rows: list[dict[str, Any]], dest: Path,
                     seeds_of: Callable[[dict[str, Any]], str]) -> list[str]:
    """One markdown section per project: what it reported, our matching entries, pictures."""
    out = []
    for p in PROJECTS:
        mine = [r for r in rows if p.matches(r)]
        text = [f"## {p.title}", "", f"**Reported:** {p.reported}", "",
                f"**In arithsweep:** {p.ours}", ""]
        if mine:
            text += ["| task | params | exact match | nines | suite | seeds reached |",
                     "|---|---:|---:|---:|---|---|"]
            text += [f"| {r.get('task')} | {r.get('params')} | {_percent(r.get('exact_match'))} "
                     f"| {r.get('nines', '')} | {r.get('suite', '')} | {seeds_of(r)} |"
                     for r in mine]
            for r in mine:
                text += _class_table(r)
        elif p.key != "apt":
            text.append("_Not reproduced yet: no verified entry of this kind on this board._")
        pics = sorted({f for pat in p.pictures for f in (dest / PICTURES).glob(pat)})
        for pic in pics:
            text += ["", f"![{pic.stem}]({PICTURES}/{pic.name})"]
        out.append("\n".join(text))
    return out
