"""Leaderboard commands: `verify`, `leaderboard`, `show`, `export`, `publish`.

`leaderboard`, `show` and `publish` import neither torch nor ray nor mlflow (they read SQLite
through SQLAlchemy only), so they answer in well under a second; `verify` and
`export --adderboard` load weights and import torch inside the command.

    arithsweep verify runs/add3/best --record
    arithsweep leaderboard --task add3
    arithsweep publish --dir leaderboard
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from arithsweep.cli.common import DB_HELP, err, out, print_json
from arithsweep.core.errors import ArithsweepError


def _open(db: str | None, create: bool):
    from arithsweep.leaderboard.board import open_db

    return open_db(db, create=create)


def verify(
    checkpoint: Path = typer.Argument(..., help="checkpoint directory (safetensors + config.json)"),
    target: float = typer.Option(None, "--target", help="exact match needed to qualify, in (0, 1] (default 0.99, or the target a published folder was verified at)"),
    record: bool = typer.Option(False, "--record", help="add a qualifying result to the leaderboard"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Verify a checkpoint with the current suite (params and exact match from the weights
    alone; per Quirke class too for add, sub and mix)."""
    from arithsweep.leaderboard.provenance import published_entry

    kept = published_entry(checkpoint)  # a published folder: its entry number and target
    if target is None:
        target = kept.get("target") if isinstance(kept.get("target"), float) else 0.99
    if not 0 < target <= 1:
        raise ArithsweepError(f"--target {target}: must be in (0, 1]")
    board = _open(db, create=True) if record else None  # a bad --db fails before the long run
    from arithsweep.leaderboard.verify import verify as run_verify

    if as_json or not sys.stderr.isatty():
        report = run_verify(checkpoint, target)
    else:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as bar:
            h = bar.add_task("verifying", total=None)
            report = run_verify(checkpoint, target,
                                progress=lambda d, n: bar.update(h, completed=d, total=n))
    entry = None
    if record and report.qualifies:  # a published folder keeps its entry id where it is free
        same = kept.get("sha256") == report.sha256
        entry, created = board.record(report, kept.get("entry_id") if same else None)
    res = {**report.to_dict(), "by_class_table": report.class_table(),
           "qualifies": report.qualifies, "entry_id": entry["id"] if entry else None}
    if as_json:
        print_json(res)
    else:
        from arithsweep.cli.render import report_detail

        out.print(report_detail(report))
        verdict = "[green]qualifies[/]" if report.qualifies else "[red]does not qualify[/]"
        out.print(f"{report.summary().split(';')[0]}; {verdict} for target {target:g}")
        if entry:
            out.print(f"recorded as leaderboard entry {entry['id']} "
                      f"({'new' if created else 'updated'}) in {board.where}")
    if record and not report.qualifies:
        raise ArithsweepError(
            f"not recorded: exact match {report.exact_match:.6f} is below the target {target:g}")


def _empty_board(board) -> str:
    """What an empty leaderboard says: a fresh clone has the published models' checkpoints
    but no database (it is not committed), so say where the published ones are."""
    what = (f"no entries in {board.where}" if board.exists
            else f"no leaderboard database at {board.where} yet")
    line = f"{what} (add one: arithsweep verify CHECKPOINT --record)"
    published = Path("leaderboard") / "checkpoints"
    if published.is_dir() and any(p.is_dir() for p in published.iterdir()):
        line += (f"; the models published here are listed in leaderboard/LEADERBOARD.md and "
                 f"re-verified into it with: arithsweep verify {published}/NAME --record")
    return line


def leaderboard(
    task: str = typer.Option(None, "--task", "-t", help="only this task, e.g. add10"),
    target: float = typer.Option(None, "--target", help="only entries verified at >= this exact match"),
    limit: int = typer.Option(None, "--limit", "-n", help="at most N rows"),
    all_rows: bool = typer.Option(False, "--all", help="every entry, not one best row per task"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv"),
    as_md: bool = typer.Option(False, "--markdown"),
) -> None:
    """Verified results, fewest parameters first."""
    if sum((as_json, as_csv, as_md)) > 1:
        raise ArithsweepError("choose one of --json, --csv, --markdown")
    from arithsweep.cli import render as tables
    from arithsweep.leaderboard import tables as formats

    if task is not None:
        from arithsweep.core.data.formats import task_name  # torch-free: this path stays fast

        task = task_name(task)
    board = _open(db, create=False)
    rows = board.query(task=task, target=target, limit=limit, all=all_rows)
    if as_json:
        sys.stdout.write(formats.to_json(rows) + "\n")
    elif as_csv:
        sys.stdout.write(formats.to_csv(rows))
    elif as_md:
        sys.stdout.write(formats.to_markdown(rows))
    elif not rows and (task is not None or target is not None):
        err.print(f"no entries in {board.where} match"
                  + (f" task {task}" if task else "")
                  + (f" target >= {target}" if target is not None else "")
                  + f" ({len(board.query(all=True))} entries in all)")
    elif not rows:
        err.print(_empty_board(board))
    else:
        out.print(tables.rich_table(rows, title=f"arithsweep leaderboard · {board.where}"))


def show(
    entry: str = typer.Argument(..., help="entry id or sha256 prefix"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Everything about one entry: configs, breakdowns, checkpoint, MLflow run, reproduce command."""
    from arithsweep.cli import render as tables

    row = _open(db, create=False).get(entry)
    if as_json:
        print_json(row)
    else:
        out.print(tables.entry_detail(row))


def export(
    entry: str = typer.Argument(None, help="entry id or sha256 prefix (with --markdown: only that entry)"),
    adderboard: Path = typer.Option(None, "--adderboard", help="write an AdderBoard submission .py"),
    check: bool = typer.Option(False, "--check", help="with --adderboard: run AdderBoard's protocol on the written file"),
    markdown: Path = typer.Option(None, "--markdown", help="write the leaderboard table as markdown"),
    all_rows: bool = typer.Option(False, "--all", help="with --markdown: every entry"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Export an entry as an AdderBoard submission, or the leaderboard as markdown."""
    if (adderboard is None) == (markdown is None):
        raise ArithsweepError("choose one of --adderboard FILE.py (with an ENTRY) or --markdown FILE.md")
    board = _open(db, create=False)
    if markdown is not None:
        from arithsweep.leaderboard.publish import MARKDOWN
        from arithsweep.leaderboard.tables import to_markdown

        if markdown.name == MARKDOWN and (markdown.parent / "checkpoints").is_dir():
            raise ArithsweepError(f"--markdown {markdown}: that is what `arithsweep publish` "
                                  f"writes beside its checkpoints; export to another file")
        rows = [board.get(entry)] if entry is not None else board.query(all=all_rows)
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(to_markdown(rows, title="arithsweep leaderboard"))
        out.print(f"wrote {len(rows)} rows to {markdown}")
        return
    if entry is None:
        raise ArithsweepError("--adderboard needs an ENTRY id, e.g. arithsweep export 1 --adderboard sub.py")
    if adderboard.suffix != ".py":
        raise ArithsweepError(f"--adderboard {adderboard}: the submission must be a .py file")
    from arithsweep.leaderboard.adderboard import export_adderboard

    row = board.get(entry)
    written = export_adderboard(row, adderboard)
    out.print(f"wrote {adderboard} and {', '.join(str(p) for p in written)}; check it with "
              f"AdderBoard's verify.py {adderboard}")
    if check:
        from arithsweep.leaderboard.adderboard_check import THRESHOLD, check_submission

        res = check_submission(adderboard)
        out.print(f"AdderBoard's protocol: {res.correct}/{res.total} = {res.accuracy:.4%} "
                  f"({'passes' if res.passed else 'FAILS'} at {THRESHOLD:.0%}), "
                  f"{res.params} parameters")
        if not res.passed:
            raise typer.Exit(1)


def publish(
    dest: Path = typer.Option(Path("leaderboard"), "--dir", help="folder to write LEADERBOARD.md and checkpoints/ into"),
    all_rows: bool = typer.Option(False, "--all", help="every entry, not the best per task and the smallest per (task, target)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    root: Path = typer.Option(Path("searches"), "--root", help="where searches live: an entry a search found gets its command and cost from there (else from the search folder its checkpoint sits in)"),
    drop: bool = typer.Option(False, "--drop", help="remove published entries the database does not hold (default: refuse)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Write LEADERBOARD.md and a checked copy of every listed checkpoint, ready to commit."""
    from arithsweep.leaderboard import publish as pub

    board = _open(db, create=False)
    rows = board.query(all=True)
    if not rows:
        raise ArithsweepError(f"no entries in {board.where} to publish "
                              "(add one: arithsweep verify CHECKPOINT --record)")
    res = pub.publish(rows if all_rows else pub.select_rows(rows), dest, searches_root=root,
                      known=[str(r.get("sha256")) for r in rows], drop=drop)
    if as_json:
        print_json(res)
    else:
        out.print(f"wrote {res['markdown']} and {len(res['entries'])} checkpoint folder(s) "
                  f"under {dest / pub.CHECKPOINTS}")
