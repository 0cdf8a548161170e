"""`arithsweep ood`: length generalisation of one model, as a digits-of-a x digits-of-b grid.

Takes a leaderboard entry (id or sha256 prefix, resolved like `show`) or a checkpoint
directory, evaluates exact match per cell with `arithsweep.core.evaluation.ood.ood_grid` (torch is
imported inside the command), prints a Rich table or --json, optionally writes a heatmap PNG,
and logs that PNG to the model's MLflow run when it has one and the tracking store exists.

    arithsweep ood runs/add8/best --max-digits 16 --png ood.png
    arithsweep ood 3 --loops 4 --json
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from arithsweep.cli.common import DB_HELP, err, out, print_json
from arithsweep.core.errors import ArithsweepError


def _resolve(target: str, db: str | None) -> tuple[Path, str | None]:
    """(checkpoint dir, MLflow run id or None) for a checkpoint path or a leaderboard entry."""
    p = Path(target).expanduser()
    if p.exists():
        return p, None
    from arithsweep.leaderboard.board import open_db

    try:
        row = open_db(db, create=False).get(target)
    except ArithsweepError as e:
        raise ArithsweepError(f"{target!r} is neither a checkpoint directory nor a leaderboard "
                              f"entry ({e})") from None
    return Path(row["checkpoint_path"]), row.get("mlflow_run_id")


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


def ood(
    target: str = typer.Argument(..., metavar="ENTRY|CHECKPOINT", help="leaderboard entry (id or sha256 prefix) or checkpoint directory"),
    max_digits: int = typer.Option(None, "--max-digits", "-m", help="test operands up to M digits (default: twice the trained length, at least the task's)"),
    loops: int = typer.Option(None, "--loops", help="recurrences at test time for a looped model (default: as trained)"),
    per_cell: int = typer.Option(200, "--per-cell", help="held-out problems per cell (fewer where a cell has fewer)"),
    seed: int = typer.Option(0, "--seed", help="seed of the problem sample"),
    png: Path = typer.Option(None, "--png", help="write a heatmap PNG here (logged to the MLflow run, if any)"),
    mlflow_uri: str = typer.Option(None, "--mlflow-uri", help="tracking URI for the PNG (default $MLFLOW_TRACKING_URI or searches/mlflow.db)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Length generalisation: exact match per (digits of a, digits of b) cell, past training."""
    if max_digits is not None and max_digits < 1:
        raise ArithsweepError(f"--max-digits {max_digits}: must be >= 1")
    if loops is not None and loops < 1:
        raise ArithsweepError(f"--loops {loops}: must be >= 1")
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
    g = ood_grid(ck, max_digits, loops=loops, per_cell=per_cell, seed=seed)
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
    if g.clamped_from is not None:
        err.print(f"note: abacus indices above {g.clamped_from} share the table's last row "
                  f"(abacus_max={g.clamped_from + 1})")
    if png is not None:
        out.print(f"heatmap {png}" + (f" (logged to MLflow run {run_id})" if logged else ""))
