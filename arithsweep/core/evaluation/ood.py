"""Length generalisation: exact match on every (digits of a, digits of b) cell, far past training.

After "Transformers Can Do Arithmetic with the Right Embeddings" (McLeish et al. 2024): train on
operands of at most N digits (`TrainConfig.train_digits`, abacus positions with a random offset,
`ModelConfig.abacus_offset`), then test each M x M cell of operand lengths separately. A model
whose task is shorter than M is evaluated on the same operation and format widened to M digits
when its positions allow (abacus, rope, none: no table indexed by absolute position); a looped
model can be re-run with more recurrences (`loops`: the blocks' weights are shared), and
`ood_loop_sweep` runs it at several loop counts on the same problems, as the paper does to show
extra test-time loops carrying a looped model further past its training length.

Problems are drawn uniformly within each cell, distinct, and only from the holdout side of the
split (of both the wide task and the trained one), so nothing the model trained on, or was
selected on beyond train_digits, is scored; small cells are listed exhaustively instead. Cells
whose operands fit the trained task are scored in its layout, the others in the widened one.

    from arithsweep.core.evaluation.ood import ood_grid, save_heatmap
    g = ood_grid("runs/add8/best", max_digits=16, loops=None, per_cell=200, seed=0)
    print(g.ratio, g.exact_match[15][15]); save_heatmap(g, "ood.png")
    arithsweep ood runs/add8/best --max-digits 16 --png ood.png

    grids = ood_loop_sweep("runs/add8-looped/best", 16, loops=[1, 2, 4, 8], per_cell=200)
    print(loop_comparison(grids)); save_loop_curve(grids, "loops.png", name="add8-looped")
    arithsweep ood runs/add8-looped/best --max-digits 16 --loops 1,2,4,8 --png loops.png
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from arithsweep.core.config import ABACUS_POSITIONS
from arithsweep.core.data.sampling import _POW10, _distinct
from arithsweep.core.data.tasks import MAX_DIGITS, Task, get_task
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.evaluate import exact_match
from arithsweep.core.model.model import ArithTransformer, count_params

GOOD = 0.9  # exact match a cell needs to count as generalised (the `ratio`)
# a cell with at most this many problems per wanted one is listed, not sampled: its held-out
# side (~1/16) then holds at most ~4x what is wanted, too few for fast distinct draws
_ENUM_RATIO = 64
WIDE_POSITIONS = (*ABACUS_POSITIONS, "rope", "none")  # no table indexed by absolute position


@dataclass
class OODGrid:
    """Exact match per cell; row i = a has i+1 digits, column j = b has j+1 digits."""

    task: str  # the task evaluated (widened to max_digits when the trained one is shorter)
    format: str
    trained_task: str
    train_digits: int  # the in-distribution square is train_digits x train_digits
    max_digits: int
    loops: int  # recurrences used at test time
    trained_loops: int
    per_cell: int
    seed: int
    params: int
    exact_match: list[list[float | None]]  # None: the cell has no held-out problem
    problems: list[list[int]]
    in_distribution: list[list[bool]]
    # exact match of the problems whose longer operand has d digits (index d-1), pooled
    by_length: list[float | None]
    generalises_to: int  # largest d with by_length >= GOOD at every length up to d
    ratio: float  # generalises_to / train_digits
    clamped_from: int | None  # abacus: operand lengths from here on share the table's last row

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _load(model_or_checkpoint: Any, task: Task | None) -> tuple[ArithTransformer, Task, int]:
    """(model k=1, its task, train digits) from a path, a Checkpoint, a TrainResult or a model."""
    from arithsweep.core.model.checkpoint import Checkpoint, load_checkpoint

    obj = model_or_checkpoint
    if isinstance(obj, (str, Path)):
        obj = load_checkpoint(obj)
    if isinstance(obj, Checkpoint):
        model, task, tc = obj.model, obj.task, obj.train_cfg
    elif hasattr(obj, "best_model") and hasattr(obj, "train_cfg"):  # a TrainResult
        model, task, tc = obj.best_model(), obj.task, obj.train_cfg
    elif isinstance(obj, ArithTransformer):
        if task is None:
            raise ConfigError("ood_grid: a bare model needs task= (the task it was trained on)")
        model, tc = obj, None
    else:
        raise ConfigError(f"ood_grid: expected a checkpoint path, Checkpoint, TrainResult or "
                          f"ArithTransformer, got {type(obj).__name__}")
    if model.k != 1:
        raise ConfigError(f"ood_grid: expected one model (k=1), got a population of {model.k}")
    digits = getattr(tc, "train_digits", None) or task.n_digits
    return model, task, min(digits, task.n_digits)


def _rebuilt(model: ArithTransformer, **changes: Any) -> ArithTransformer:
    """The same weights under a config with `changes` (n_ctx, n_loops): neither changes any
    tensor's shape for the position kinds this is used with, so the state loads unchanged."""
    cfg = replace(model.cfg, **changes)
    new = ArithTransformer(cfg, k=1, generator=torch.Generator().manual_seed(0))
    new.load_state_dict(model.state_dict())
    return new.to(next(model.parameters()).device).eval()


def widen(model: ArithTransformer, task: Task, max_digits: int) -> tuple[ArithTransformer, Task]:
    """The model and task to test operands of up to `max_digits` digits with."""
    if task.op not in MAX_DIGITS:  # sort<N>: its lengths are item counts, not operands
        raise ConfigError(f"ood: {task.name} has no operand lengths to generalise over; "
                          f"it works on add, sub, mix and mul tasks")
    top = MAX_DIGITS[task.op]
    if not isinstance(max_digits, int) or isinstance(max_digits, bool) \
            or not 1 <= max_digits <= top:
        raise ConfigError(f"max_digits={max_digits!r}: must be a whole number in 1..{top} "
                          f"for {task.op} tasks")
    if max_digits <= task.n_digits:
        return model, task
    wide = get_task(f"{task.op}{max_digits}", task.fmt)
    cfg = model.cfg
    if wide.n_ctx <= cfg.n_ctx:
        return model, wide
    if cfg.pos not in WIDE_POSITIONS:
        fits = max(d for d in range(task.n_digits, top + 1)
                   if get_task(f"{task.op}{d}", task.fmt).n_ctx <= cfg.n_ctx)
        raise ConfigError(f"max_digits={max_digits}: a model with {cfg.pos} positions has "
                          f"context {cfg.n_ctx}, enough for {fits} digits; only abacus, rope "
                          f"and none positions extend past it")
    return _rebuilt(model, n_ctx=wide.n_ctx), wide


def with_loops(model: ArithTransformer, loops: int | None) -> ArithTransformer:
    """The same weights run with `loops` recurrences (None: as trained)."""
    if loops is None or loops == model.cfg.n_loops:
        return model
    if not isinstance(loops, int) or isinstance(loops, bool) or loops < 1:
        raise ConfigError(f"loops={loops!r}: must be a whole number >= 1")
    return _rebuilt(model, n_loops=loops)


def _numbers(m: int, digits: int, gen: torch.Generator) -> torch.Tensor:
    """(m,) int64 uniform among numbers with exactly `digits` digits (0 has one digit)."""
    if digits == 1:
        return torch.randint(0, 10, (m,), generator=gen)
    d = torch.randint(0, 10, (m, digits), generator=gen)  # (m, digits), least significant first
    d[:, -1] = torch.randint(1, 10, (m,), generator=gen)
    return (d * _POW10[:digits]).sum(1)


def _span(digits: int) -> torch.Tensor:  # every number with exactly `digits` digits
    return torch.arange(0 if digits == 1 else 10 ** (digits - 1), 10**digits)


def cell_problems(task: Task, da: int, db: int, n: int, gen: torch.Generator,
                  trained: Task | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Up to n distinct held-out problems (a, b, op), each (<=n,), with a of exactly `da` and b
    of exactly `db` digits, uniform within the cell. Held out means on the holdout side of
    `task` and, where both operands fit it, of `trained` (whose edge cases may differ)."""
    codes = torch.tensor(task.op_codes)

    def held(a: torch.Tensor, b: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
        out = task.is_holdout(a, b, op)
        if trained is not None and trained is not task:
            hi = 10**trained.n_digits
            fit = (a < hi) & (b < hi)
            out[fit] |= trained.is_holdout(a[fit], b[fit], op[fit])
        return out

    na = 10 if da == 1 else 9 * 10 ** (da - 1)
    nb = 10 if db == 1 else 9 * 10 ** (db - 1)
    if na * nb * len(codes) <= _ENUM_RATIO * n:  # list the cell, keep its held-out side, shuffle
        xa, xb = _span(da), _span(db)
        a = xa.repeat_interleave(nb).repeat(len(codes))
        b, op = xb.repeat(na * len(codes)), codes.repeat_interleave(na * nb)
        keep = held(a, b, op)
        a, b, op = a[keep], b[keep], op[keep]
        idx = torch.randperm(a.numel(), generator=gen)[:n]
        return a[idx], b[idx], op[idx]
    got = [torch.zeros(0, dtype=torch.int64)] * 3
    for _ in range(64):  # ~1/16 of draws are held out; distinct problems are the rule here
        m = 20 * (n - got[0].numel()) + 64
        a, b = _numbers(m, da, gen), _numbers(m, db, gen)
        op = codes[torch.randint(0, len(codes), (m,), generator=gen)]
        keep = held(a, b, op)
        both = [torch.cat(p) for p in zip(got, (a[keep], b[keep], op[keep]), strict=True)]
        got = [x[_distinct(*both)][:n] for x in both]
        if got[0].numel() >= n:
            break
    return got[0], got[1], got[2]


def _scored(model: ArithTransformer, task: Task, parts: list) -> torch.Tensor:
    """Exact match (N,) bool of the cells' problems, concatenated in order, under `task`."""
    if not parts:
        return torch.zeros(0, dtype=torch.bool)
    a, b, op = (torch.cat([p[i] for p in parts]) for i in range(3))
    return exact_match(model, task, a, b, op)[0]


def generalises_to(by_length: list[float | None]) -> int:
    """Largest d such that exact match is >= GOOD at every length 1..d (a length without
    problems neither passes nor breaks the run): [1, .95, None, .97, .5, .99] -> 4."""
    good = 0
    for d, e in enumerate(by_length, 1):
        if e is not None and e < GOOD:
            break
        good = d
    return good


def ood_grid(model_or_checkpoint: Any, max_digits: int, loops: int | None = None,
             per_cell: int = 200, seed: int = 0, task: Task | None = None) -> OODGrid:
    """Exact match on every (digits of a, digits of b) cell up to max_digits x max_digits.

    `model_or_checkpoint`: a checkpoint directory, a Checkpoint, a TrainResult, or a k=1
    ArithTransformer together with `task`. `loops`: recurrences at test time (None = as
    trained). Cells are evaluated in one batched teacher-forced pass (exact for EOS formats:
    the answer mask covers '<eos>')."""
    if not isinstance(per_cell, int) or isinstance(per_cell, bool) or per_cell < 1:
        raise ConfigError(f"per_cell={per_cell!r}: must be a whole number >= 1")
    model, trained, train_digits = _load(model_or_checkpoint, task)
    trained_loops = model.cfg.n_loops
    as_trained = with_loops(model, loops)
    model, wide = widen(model, trained, max_digits)
    model = with_loops(model, loops)
    M, gen = max_digits, torch.Generator().manual_seed(int(seed))
    cells = [(da, db) for da in range(1, M + 1) for db in range(1, M + 1)]
    parts = [cell_problems(wide, da, db, per_cell, gen, trained) for da, db in cells]
    # A cell whose operands fit the trained task is scored in the trained layout: a padded
    # format writes every operand at the task's width, so widening the task moves every
    # position, and a rope model whose heads reach operands at a fixed distance (the add10
    # frontier's) would score 0 even on the lengths it was trained on.
    fits = [max(c) <= trained.n_digits for c in cells]
    right = {f: _scored(as_trained if f else model, trained if f else wide,
                        [p for p, g in zip(parts, fits, strict=True) if g == f])
             for f in (True, False)}
    em = [[None] * M for _ in range(M)]
    n = [[0] * M for _ in range(M)]
    start = {True: 0, False: 0}
    for (da, db), p, f in zip(cells, parts, fits, strict=True):
        k, i = p[0].numel(), start[f]
        n[da - 1][db - 1] = k
        em[da - 1][db - 1] = float(right[f][i:i + k].float().mean()) if k else None
        start[f] += k
    inside = [[i < train_digits and j < train_digits for j in range(M)] for i in range(M)]
    # exact match by length: over the ring of cells whose longer operand has d digits, pooled
    # (a 1x1 cell holds only ~10 held-out problems; a lone cell would be too noisy a gate)
    by_length: list[float | None] = []
    for d in range(1, M + 1):
        ring = [(i, j) for i in range(d) for j in range(d) if i == d - 1 or j == d - 1]
        total = sum(n[i][j] for i, j in ring)
        hits = sum(round(em[i][j] * n[i][j]) for i, j in ring if n[i][j])
        by_length.append(hits / total if total else None)
    good = generalises_to(by_length)
    cfg = model.cfg
    # the answer (up to max_digits + 1 digits for add) is the longest number indexed
    clamped = cfg.abacus_max - 1 if cfg.pos == "abacus" and wide.n_answer_digits >= \
        cfg.abacus_max else None
    return OODGrid(task=wide.name, format=wide.fmt.name, trained_task=trained.name,
                   train_digits=train_digits, max_digits=M, loops=cfg.n_loops,
                   trained_loops=trained_loops, per_cell=per_cell, seed=int(seed),
                   params=count_params(model), exact_match=em, problems=n,
                   in_distribution=inside, by_length=by_length, generalises_to=good,
                   ratio=round(good / train_digits, 4), clamped_from=clamped)


def ood_loop_sweep(model_or_checkpoint: Any, max_digits: int, loops: Sequence[int],
                   per_cell: int = 200, seed: int = 0, task: Task | None = None) -> list[OODGrid]:
    """One `ood_grid` per test-time loop count in `loops`, in that order, all on the same
    problems (one seed): the paper's comparison of a looped model run with more or fewer
    recurrences than it trained with. Arguments as for `ood_grid`."""
    loops = list(loops)
    if not loops:
        raise ConfigError("loops=[]: give at least one loop count")
    for n in loops:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"loops={loops!r}: each must be a whole number >= 1, got {n!r}")
    if len(set(loops)) < len(loops):
        raise ConfigError(f"loops={loops!r}: a loop count is listed twice")
    obj = model_or_checkpoint
    if isinstance(obj, (str, Path)):  # load once, run at every loop count
        from arithsweep.core.model.checkpoint import load_checkpoint

        obj = load_checkpoint(obj)
    return [ood_grid(obj, max_digits, loops=n, per_cell=per_cell, seed=seed, task=task)
            for n in loops]


def diagonal(grid: OODGrid) -> list[float | None]:
    """Exact match of the n x n cells (both operands n digits), index n-1."""
    return [grid.exact_match[i][i] for i in range(grid.max_digits)]


def loop_comparison(grids: Sequence[OODGrid]) -> list[dict[str, Any]]:
    """Per loop count: the diagonal's exact match and the grid's `ratio` (what a sweep shows)."""
    return [{"loops": g.loops, "trained": g.loops == g.trained_loops, "diagonal": diagonal(g),
             "generalises_to": g.generalises_to, "ratio": g.ratio} for g in grids]


def save_heatmap(grid: OODGrid, path: str | Path) -> Path:
    """A PNG heatmap of the grid, the in-distribution square outlined; returns the path."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, and safe inside a Ray worker or CI
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    M = grid.max_digits
    vals = [[float("nan") if e is None else 100 * e for e in row] for row in grid.exact_match]
    size = min(12.0, 2.5 + 0.45 * M)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = ax.imshow(vals, origin="lower", cmap="viridis", vmin=0, vmax=100,
                   extent=(0.5, M + 0.5, 0.5, M + 0.5))
    if M <= 20:  # numbers stay legible up to about 20 x 20
        for i in range(M):
            for j in range(M):
                if vals[i][j] == vals[i][j]:  # not nan
                    ax.text(j + 1, i + 1, f"{vals[i][j]:.0f}", ha="center", va="center",
                            fontsize=7 if M > 12 else 9,
                            color="white" if vals[i][j] < 60 else "black")
    t = min(grid.train_digits, M)
    ax.add_patch(Rectangle((0.5, 0.5), t, t, fill=False, edgecolor="red", linewidth=2.5,
                           label=f"trained (<= {grid.train_digits} digits)"))
    ticks = range(1, M + 1, 1 if M <= 20 else 2)
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xlabel("digits of b")
    ax.set_ylabel("digits of a")
    loops = f", {grid.loops} loops" if grid.loops != grid.trained_loops else ""
    ax.set_title(f"{grid.trained_task} -> {grid.task} exact match (%){loops}\n"
                 f">= {GOOD:.0%} up to {grid.generalises_to} digits: "
                 f"{grid.ratio:.2f}x the training length")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize=8, frameon=False)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def save_loop_curve(grids: Sequence[OODGrid], path: str | Path, name: str | None = None) -> Path:
    """A PNG of exact match on the n x n cells against n, one line per loop count (the
    trained count bold), the trained length dotted; returns the path."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, and safe inside a Ray worker or CI
    import matplotlib.pyplot as plt

    if not grids:
        raise ConfigError("save_loop_curve: no grids to draw")
    g0 = grids[0]
    M = g0.max_digits
    xs = list(range(1, M + 1))
    fig, ax = plt.subplots(figsize=(9.5, 5))
    order = sorted(g.loops for g in grids)
    cmap = plt.get_cmap("viridis")
    for g in grids:
        trained = g.loops == g.trained_loops
        ys = [float("nan") if e is None else e for e in diagonal(g)]
        colour = cmap(0.85 * order.index(g.loops) / max(1, len(order) - 1))
        ax.plot(xs, ys, marker="o", color="black" if trained else colour,
                linewidth=3.2 if trained else 1.4, markersize=6 if trained else 4,
                zorder=3 if trained else 2,
                label=f"{g.loops} loop{'s' * (g.loops > 1)}{' (trained)' * trained}: "
                      f"ratio {g.ratio:.2f}")
    ax.axvline(g0.train_digits, color="grey", linestyle=":", linewidth=1.5,
               label=f"trained length ({g0.train_digits} digits)")
    ax.axhline(GOOD, color="lightgrey", linestyle="--", linewidth=1, zorder=1)
    ax.set_xticks(range(1, M + 1, 1 if M <= 20 else 2))
    ax.set_xlim(0.5, M + 0.5)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("digits of each operand (n x n cell)")
    ax.set_ylabel("exact match")
    who = f"{name}: " if name else ""
    ax.set_title(f"{who}{g0.trained_task} -> {g0.task}, {g0.params} parameters, trained with "
                 f"{g0.trained_loops} loops\nexact match by test-time loops")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    try:  # an unwritable path is the CLI's one error line; the figure is closed either way
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
