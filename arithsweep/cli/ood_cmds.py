"""`arithsweep ood`: length generalisation of one model, as a digits-of-a x digits-of-b grid.

Takes a leaderboard entry (id or sha256 prefix, the local database's or else a published one,
resolved like `show`) or a checkpoint directory, evaluates exact match per cell with
`arithsweep.core.evaluation.ood.ood_grid` (torch is imported inside the command), prints a
Rich table or --json, optionally writes a heatmap PNG, and logs that PNG to the model's MLflow
run when it has one and the tracking store exists.
`--loops` with a comma list sweeps a looped model's test-time recurrences instead: one grid per
loop count on the same problems, compared on the n x n diagonal (a table, a curve PNG).

    arithsweep ood runs/add8/best --max-digits 16 --png ood.png
    arithsweep ood 3 --loops 4 --json
    arithsweep ood runs/add8-looped --max-digits 16 --loops 1,2,4,8 --png loops.png
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from arithsweep.cli.common import DB_HELP, check_outputs, err, out, print_json
from arithsweep.core.errors import ArithsweepError


def _resolve(target: str, db: str | None) -> tuple[Path, str | None]:
    """(checkpoint dir, MLflow run id or None) for a checkpoint path or a leaderboard entry
    (local, else published: entry_lookup.entry_checkpoint, as `inspect` resolves it)."""
    from arithsweep.leaderboard.entry_lookup import entry_checkpoint

    path, row = entry_checkpoint(target, db)
    return path, (row or {}).get("mlflow_run_id")


def _log_png(run_id: str | None, png: Path, uri: str | None) -> str | None:
    """Attach the heatmap to the model's MLflow run; None (silently) when there is no run or
    no tracking store: the grid is the result, the upload a convenience."""
    if not run_id:
        return None
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        db = Path("searches") / "mlflow.db"
        if not db.is_file():
            return None
        uri = f"sqlite:///{db.absolute()}"
    try:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=uri).log_artifact(run_id, str(png), artifact_path="ood")
    except Exception:  # noqa: BLE001 - an unknown run or a locked store must not lose the grid
        return None
    return uri


def _cell(e: float | None, inside: bool) -> str:
    if e is None:
        return "[dim]-[/]"
    colour = "green" if e >= 0.9 else "yellow" if e >= 0.5 else "red"
    text = f"[{colour}]{100 * e:.0f}[/]"
    return f"[bold underline]{text}[/]" if inside else text


def _table(g: Any) -> Table:
    tab = Table(title=f"{g.trained_task} -> {g.task} · exact match % per cell "
                      f"(underlined: trained lengths <= {g.train_digits})")
    tab.add_column("a \\ b", justify="right", style="bold")
    for j in range(g.max_digits):
        tab.add_column(str(j + 1), justify="right")
    for i, row in enumerate(g.exact_match):
        tab.add_row(str(i + 1), *(_cell(e, g.in_distribution[i][j]) for j, e in enumerate(row)))
    return tab


def _closing(g: Any, what: str, png: Path | None, run_id: str | None, logged: Any) -> None:
    """The lines every ood output ends with: the abacus clamp note, where the PNG went."""
    if g.clamped_from is not None:
        err.print(f"note: abacus indices above {g.clamped_from} share the table's last row "
                  f"(abacus_max={g.clamped_from + 1})")
    if png is not None:
        out.print(f"{what} {png}" + (f" (logged to MLflow run {run_id})" if logged else ""))


def _loop_counts(text: str | None) -> list[int] | None:
    """--loops "4" -> [4], "1,2,4,8" -> [1, 2, 4, 8], None -> None (as trained)."""
    if text is None:
        return None
    counts: list[int] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            raise ArithsweepError(f"--loops {text!r}: an empty item; give one loop count or a "
                                  f"comma list such as 1,2,4,8")
        if not re.fullmatch(r"[+-]?\d+", item) or int(item) < 1:
            raise ArithsweepError(f"--loops {text}: {item!r} must be a whole number >= 1 (one "
                                  f"loop count or a comma list such as 1,2,4,8)")
        if int(item) in counts:
            raise ArithsweepError(f"--loops {text}: {int(item)} is listed twice")
        counts.append(int(item))
    return counts


def _loop_table(grids: list[Any]) -> Table:
    g0 = grids[0]
    tab = Table(title=f"{g0.trained_task} -> {g0.task} · exact match % on n x n digits by "
                      f"test-time loops (underlined: trained lengths <= {g0.train_digits})")
    tab.add_column("loops \\ n", justify="right", style="bold")
    for j in range(g0.max_digits):
        tab.add_column(str(j + 1), justify="right")
    tab.add_column("ratio", justify="right")
    for g in grids:
        trained = g.loops == g.trained_loops
        label = f"{g.loops} (trained)" if trained else str(g.loops)
        ratio = f"[bold]{g.ratio:.2f}[/]" if trained else f"{g.ratio:.2f}"
        tab.add_row(label, *(_cell(g.exact_match[i][i], i < g.train_digits)
                             for i in range(g.max_digits)), ratio)
    return tab


def _sweep(ck: Any, counts: list[int], max_digits: int, per_cell: int, seed: int,
           png: Path | None, run_id: str | None, mlflow_uri: str | None, as_json: bool) -> None:
    """`--loops 1,2,4,8`: one grid per loop count, compared on the diagonal."""
    from arithsweep.core.evaluation.ood import loop_comparison, ood_loop_sweep, save_loop_curve

    grids = ood_loop_sweep(ck, max_digits, counts, per_cell=per_cell, seed=seed)
    logged = None
    if png is not None:
        save_loop_curve(grids, png, name=Path(ck.path).name)
        logged = _log_png(run_id, png, mlflow_uri)
    g0 = grids[0]
    if as_json:
        return print_json({
            "task": g0.task, "trained_task": g0.trained_task, "train_digits": g0.train_digits,
            "max_digits": g0.max_digits, "trained_loops": g0.trained_loops,
            "per_cell": g0.per_cell, "seed": g0.seed, "params": g0.params,
            "comparison": loop_comparison(grids),
            "loops": [{"loops": g.loops, **g.to_dict()} for g in grids],
            "checkpoint": str(ck.path), "png": str(png) if png else None,
            "mlflow_run_id": run_id, "png_logged_to": logged})
    out.print(_loop_table(grids))
    ratios = " ".join(f"{g.loops}:{g.ratio:.2f}" for g in grids)
    out.print(f"{g0.params} parameters · trained on <= {g0.train_digits} digits with "
              f"{g0.trained_loops} loops · ratio (exact match >= 90% at every length up to it, "
              f"over the trained length) by loops: [bold]{ratios}[/]")
    _closing(g0, "loop curve", png, run_id, logged)


def ood(
    target: str = typer.Argument(..., metavar="ENTRY|CHECKPOINT", help="leaderboard entry (id or sha256 prefix: the local database's entry when it holds one, else the published one in entries.json beside it), a published checkpoint folder's name, or a checkpoint directory"),
    max_digits: int = typer.Option(None, "--max-digits", "-m", help="test operands up to M digits (default: twice the trained length, at least the task's)"),
    loops: str = typer.Option(None, "--loops", help="recurrences at test time for a looped model (default: as trained); a comma list (1,2,4,8) compares them"),
    per_cell: int = typer.Option(200, "--per-cell", help="held-out problems per cell (fewer where a cell has fewer)"),
    seed: int = typer.Option(0, "--seed", help="seed of the problem sample"),
    png: Path = typer.Option(None, "--png", help="write a heatmap PNG here, or with several --loops a curve per loop count (logged to the MLflow run, if any)"),
    mlflow_uri: str = typer.Option(None, "--mlflow-uri", help="tracking URI for the PNG (default $MLFLOW_TRACKING_URI or searches/mlflow.db)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Length generalisation: exact match per (digits of a, digits of b) cell, past training."""
    if max_digits is not None and max_digits < 1:
        raise ArithsweepError(f"--max-digits {max_digits}: must be >= 1")
    counts = _loop_counts(loops)
    if png is not None and png.suffix.lower() != ".png":  # matplotlib would add .png unasked
        raise ArithsweepError(f"--png {png}: the picture is a PNG; give a path ending in .png")
    check_outputs(files={"--png": png})  # before the grid, which can take minutes
    path, run_id = _resolve(target, db)
    from arithsweep.core.data.tasks import MAX_DIGITS
    from arithsweep.core.evaluation.ood import WIDE_POSITIONS, ood_grid, save_heatmap
    from arithsweep.core.model.checkpoint import load_checkpoint

    ck = load_checkpoint(path)
    run_id = run_id or ck.meta.get("mlflow_run_id")
    if loops is not None and ck.model_cfg.n_loops == 1:
        raise ArithsweepError(f"--loops {loops}: this model does not loop (n_loops=1); "
                              f"--loops re-runs a looped model's shared blocks")
    if max_digits is None:
        trained = (ck.train_cfg.train_digits if ck.train_cfg else None) or ck.task.n_digits
        max_digits = min(MAX_DIGITS[ck.task.op], max(ck.task.n_digits, 2 * trained))
        if ck.model_cfg.pos not in WIDE_POSITIONS:  # a table of positions ends where it ends
            err.print(f"note: {ck.model_cfg.pos} positions hold {ck.task.n_digits}-digit "
                      f"operands at most; the grid stops there (abacus, rope or none go "
                      f"further)")
            max_digits = ck.task.n_digits
    if counts is not None and len(counts) > 1:
        return _sweep(ck, counts, max_digits, per_cell, seed, png, run_id, mlflow_uri, as_json)
    g = ood_grid(ck, max_digits, loops=counts[0] if counts else None, per_cell=per_cell, seed=seed)
    logged = None
    if png is not None:
        save_heatmap(g, png)
        logged = _log_png(run_id, png, mlflow_uri)
    if as_json:
        return print_json({**g.to_dict(), "checkpoint": str(ck.path),
                           "png": str(png) if png else None, "mlflow_run_id": run_id,
                           "png_logged_to": logged})
    out.print(_table(g))
    loops_note = f" · {g.loops} loops (trained {g.trained_loops})" \
        if g.loops != g.trained_loops else ""
    lengths = " ".join("-" if e is None else f"{d}:{100 * e:.0f}"
                       for d, e in enumerate(g.by_length, 1))
    out.print(f"exact match % by longer operand's digits: {lengths}")
    out.print(f"{g.params} parameters · trained on <= {g.train_digits} digits · exact match "
              f">= 90% at every length up to [bold]{g.generalises_to}[/] digits: ratio "
              f"[bold]{g.ratio:.2f}[/]{loops_note}")
    _closing(g, "heatmap", png, run_id, logged)
