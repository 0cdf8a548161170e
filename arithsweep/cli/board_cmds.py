"""Leaderboard commands: `verify`, `leaderboard`, `show`, `export`, `publish`.

`leaderboard`, `show` and `publish` import neither torch nor ray nor mlflow (they read SQLite
through SQLAlchemy only, and the published board's entries.json with hashlib), so they answer
in well under a second; `verify` and `export --adderboard` load weights and import torch
inside the command. `leaderboard` lists the local database's entries and those published
beside it (leaderboard/entries.json, each checked by sha256), told apart by their source;
`verify --published` re-verifies every published one into the local database. `show` takes
a published entry's id too (entry_lookup.entry_row, the lookup of `inspect`, `ood` and
`search --from-entry`: the local database's entry first).

    arithsweep verify runs/add3/best --record
    arithsweep verify --published leaderboard
    arithsweep leaderboard --task add3
    arithsweep publish --dir leaderboard
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from arithsweep.cli.common import DB_HELP, check_outputs, err, out, print_json, table
from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.report import TARGET


def _open(db: str | None, create: bool):
    from arithsweep.leaderboard.board import open_db

    return open_db(db, create=create)


def verify(
    checkpoint: Path = typer.Argument(None, help="checkpoint directory (safetensors + config.json) or a leaderboard entry (id, sha256 prefix or published folder name: the local database's, else entries.json's); with --published, the folder `arithsweep publish` wrote (default: leaderboard, as publish's --dir)"),
    target: float = typer.Option(None, "--target", help=f"exact match needed to qualify, in (0, 1] (default {TARGET:g}, or the target a published folder was verified at)"),
    record: bool = typer.Option(False, "--record", help="add a qualifying result to the leaderboard"),
    published: bool = typer.Option(False, "--published", help="re-verify every entry published in the folder (its entries.json) and record each into the database"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Verify a checkpoint with the current suite (params and exact match from the weights
    alone; per Quirke class too for add, sub and mix)."""
    if published:
        return _verify_published(checkpoint, target, db, as_json)
    if checkpoint is None:
        raise ArithsweepError("give a CHECKPOINT directory (or --published to re-verify the "
                              "published entries)")
    from arithsweep.leaderboard.entry_lookup import checkpoint_or_entry
    from arithsweep.leaderboard.provenance import published_entry

    checkpoint = checkpoint_or_entry(checkpoint, db)[0]
    kept = published_entry(checkpoint)  # a published folder: its entry number and target
    if target is None:
        target = kept.get("target") if isinstance(kept.get("target"), float) else TARGET
    if not 0 < target <= 1:
        raise ArithsweepError(f"--target {target}: must be in (0, 1]")
    check_outputs(urls={"--db": db} if record else None)
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
           "qualifies": report.qualifies, "entry_id": entry["id"] if entry else None,
           "protocol_shortfalls": report.protocol_shortfalls()}
    if as_json:
        print_json(res)
    else:
        from arithsweep.cli.render import report_detail

        out.print(report_detail(report))
        verdict = "[green]qualifies[/]" if report.qualifies else "[red]does not qualify[/]"
        out.print(f"{report.measured()}; {verdict} for target {target:g}")
        for short in report.protocol_shortfalls():  # a search would keep looking at this size
            out.print(f"[yellow]{short}: a search does not take it as a find[/]")
        if entry:
            out.print(f"recorded as leaderboard entry {entry['id']} "
                      f"({'new' if created else 'updated'}) in {board.where}")
    if record and not report.qualifies:
        raise ArithsweepError(f"not recorded: {' and '.join(report.shortfalls())} is below "
                              f"the target {target:g}")


def _verify_published(folder: Path | None, target: float | None, db: str | None,
                      as_json: bool) -> None:
    """`verify --published`: every published entry re-verified by the suite and recorded."""
    from arithsweep.leaderboard import published as pub

    if target is not None:
        raise ArithsweepError("--target: --published re-verifies each entry at the target it "
                              "was published with")
    check_outputs(urls={"--db": db})
    board = _open(db, create=False)  # created by the first record, not by a mistake here
    folder = folder if folder is not None else Path("leaderboard")  # publish's --dir default
    rows = pub.published_rows(folder, required=True)
    if not rows:
        raise ArithsweepError(f"no published entries in {pub.label(folder)}/{pub.INDEX}")
    from rich.progress import Progress

    results = []
    with Progress(console=err, transient=True, disable=as_json or not sys.stderr.isatty()) as bar:
        whole = bar.add_task("published entries", total=len(rows))
        one = bar.add_task("", total=None)
        for row in rows:
            bar.update(one, description=Path(row["checkpoint_path"]).name, completed=0,
                       total=None)
            results.append(pub.reverify(row, board, progress=lambda d, n: bar.update(
                one, completed=d, total=n)))
            bar.advance(whole)
    if as_json:
        print_json(results)
    else:
        from arithsweep.core.evaluation.stats import percent

        tab = table(f"re-verified from {pub.label(folder)} into {board.where}",
                    ("checkpoint", "params", "published", "measured", "problems", "entry",
                     "status"), right={"params", "published", "measured", "problems", "entry"})
        for r in results:
            n = r.get("n_problems")
            tab.add_row(Path(str(r["checkpoint"])).name, str(r.get("params")),
                        percent(r.get("published_exact_match")), percent(r.get("exact_match")),
                        "" if n is None else f"{n:,}", str(r.get("entry_id") or ""),
                        r["status"], style=None if r["recorded"] else "red")
        out.print(tab)
    failed = [Path(str(r["checkpoint"])).name for r in results if not r["recorded"]]
    if failed:
        raise ArithsweepError(f"{len(failed)} of {len(results)} published entries were not "
                              f"recorded ({', '.join(failed)}); see each one's status")
    if not as_json:
        out.print(f"recorded all {len(results)} published entries in {board.where}")


def _empty_board(board) -> str:
    """What an empty leaderboard says (no database, and nothing published beside it): a
    fresh clone has the published models' checkpoints but no database (it is not committed),
    so say where the published ones are."""
    what = (f"no entries in {board.where}" if board.exists
            else f"no leaderboard database at {board.where} yet")
    line = f"{what} (add one: arithsweep verify CHECKPOINT --record)"
    published = Path("leaderboard") / "checkpoints"
    if published.is_dir() and any(p.is_dir() for p in published.iterdir()):
        line += (f"; the models published here are listed in leaderboard/LEADERBOARD.md "
                 f"(arithsweep leaderboard --published leaderboard) and re-verified into it "
                 f"with: arithsweep verify {published}/NAME --record, or all of them with: "
                 f"arithsweep verify --published leaderboard")
    return line


def _published(board, folder: str | None) -> tuple[list[dict], str | None, str | None]:
    """(published rows, their folder's label, the problem with its index or None); the
    folder: --published as given ('' for none), else the database's own folder."""
    from arithsweep.leaderboard import published as pub

    where = pub.default_folder(board.url) if folder is None else Path(folder) if folder else None
    if where is None:
        return [], None, None
    try:
        return pub.published_rows(where, required=bool(folder)), pub.label(where), None
    except pub.PublishedIndexError as e:
        return [], pub.label(where), str(e)


def _board_table(rows: list[dict], title: str, sourced: bool):
    """render.rich_table, with a source column when a published board is listed too."""
    from rich.text import Text

    from arithsweep.cli.render import rich_table
    from arithsweep.leaderboard import published as pub

    if not sourced:
        return rich_table(rows, title=title)
    tab = rich_table([], title=title)
    tab.add_column("source", no_wrap=True)
    for r in rows:
        bad = r.get("sha256_ok") is False
        tab.add_row(*pub.display_cells(r), Text(pub.source_cell(r), "bold red" if bad else ""))
    return tab


def leaderboard(
    task: str = typer.Option(None, "--task", "-t", help="only this task, e.g. add10"),
    target: float = typer.Option(None, "--target", help="only entries verified at >= this exact match"),
    limit: int = typer.Option(None, "--limit", "-n", help="at most N rows"),
    all_rows: bool = typer.Option(False, "--all", help="every entry, not one best row per task"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    published: str = typer.Option(None, "--published", help="a folder `arithsweep publish` wrote (its entries.json), listed beside the database's entries (default: the database's own folder, leaderboard/; '' for none)"),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv"),
    as_md: bool = typer.Option(False, "--markdown"),
) -> None:
    """Verified results, fewest parameters first: the local database's entries and the
    published ones beside it (each published checkpoint checked by sha256)."""
    if sum((as_json, as_csv, as_md)) > 1:
        raise ArithsweepError("choose one of --json, --csv, --markdown")
    from arithsweep.leaderboard import published as pub
    from arithsweep.leaderboard import tables as formats

    if task is not None:
        from arithsweep.core.data.formats import task_name  # torch-free: this path stays fast

        task = task_name(task)
    board = _open(db, create=False)
    # a fresh clone (no local entry) lists the whole published board, as LEADERBOARD.md's table
    all_rows = all_rows or not board.count()
    rows = board.query(task=task, target=target, limit=limit, all=all_rows)  # checks them too
    shown, folder, problem = _published(board, published)
    if problem and not board.count():
        raise ArithsweepError(problem)
    if problem:  # the local entries still list; one plain line (Rich would wrap it)
        print(f"warning: {problem}; listing {board.where} only", file=sys.stderr)
    rows = (pub.merge(board.query(task=task, all=True), shown, task, target, limit, all_rows)
            if shown else pub.as_local(rows))
    listed = sum(r["source"] == "published" for r in rows)  # a source column once any is
    if as_json:
        sys.stdout.write(formats.to_json(rows) + "\n")
    elif as_csv:
        sys.stdout.write(pub.add_source_columns(formats.to_csv(rows), rows))
    elif as_md:
        sys.stdout.write(pub.to_markdown(rows) if shown else formats.to_markdown(rows))
    elif not rows and (task is not None or target is not None):
        also = f" or {folder}/{pub.INDEX}" if shown else ""
        total = len(pub.merge(board.query(all=True), shown, all=True))
        err.print(f"no entries in {board.where}{also} match"
                  + (f" task {task}" if task else "")
                  + (f" target >= {target}" if target is not None else "")
                  + f" ({total} entries in all)")
    elif not rows:
        err.print(_empty_board(board))
    else:
        title = f"arithsweep leaderboard · {board.where}" + (
            f" + published {folder}/{pub.INDEX}" if shown else "")
        out.print(_board_table(rows, title, bool(shown)))
        if not all_rows and limit is None and len(rows) < (total := len(pub.merge(
                board.query(all=True), shown, all=True))):
            out.print(f"best row per task; --all lists all {total} entries", highlight=False)
        if listed:
            again = shlex.join(["arithsweep", "verify", "--published", str(folder)]
                               + (["--db", db] if db else []))
            out.print(f"{listed} published entr{'y' if listed == 1 else 'ies'} listed as "
                      f"published: weights checked by sha256, figures as published; re-verify "
                      f"all of them into {board.where} with: {again}", highlight=False)


def show(
    entry: str = typer.Argument(..., help="entry id or sha256 prefix, or a published checkpoint folder's name (add3-51-cdd87c29): the local database's entry when it holds one, else the published one in entries.json beside it (as export --transformer-lens takes it)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Everything about one entry: configs, breakdowns, checkpoint, MLflow run, reproduce
    command; for a published entry what its publication holds, marked published."""
    from arithsweep.cli import render as tables
    from arithsweep.leaderboard.entry_lookup import entry_row
    from arithsweep.leaderboard.published import retrains_of, source_cell

    row = entry_row(entry, db)
    if as_json:
        return print_json(row)
    # with the arithmetic and the commit its reproduce command needs (core.arithmetic)
    retrains = retrains_of(row)
    if row["source"] != "published":
        out.print(tables.entry_detail(row))
        return out.print(retrains, highlight=False) if retrains else None
    # a publication holds no recording date, and a failing checkpoint no rank: "-", not None
    out.print(tables.entry_detail({**row, "rank": row.get("rank") or "-",
                                   "created_at": row.get("created_at") or "-"}))
    missing = [w for k, w in (("breakdown", "breakdowns"), ("failures", "failure list"))
               if not row.get(k) and (k != "failures" or row.get("n_failures"))]
    bad = row.get("sha256_ok") is False
    out.print(f"[{'bold red' if bad else 'bold'}]source: {source_cell(row)}[/] "
              f"({row['index']}; weights {row.get('status')}); figures as published, not "
              f"measured here; seeds reached {row.get('seeds_reached') or '-'}"
              + (f"; not in the publication: {', '.join(missing)}" if missing else "")
              + f"; re-measure with: arithsweep verify {row.get('checkpoint_path')}",
              highlight=False)
    if retrains:
        out.print(retrains, highlight=False)


def export(
    entry: str = typer.Argument(None, help="entry id or sha256 prefix (the local database's entry when it holds one, else the published one in entries.json beside it), a published checkpoint folder's name (add3-51-cdd87c29) or, with --adderboard and --transformer-lens, a checkpoint folder; with --markdown: only that entry"),
    adderboard: Path = typer.Option(None, "--adderboard", help="write an AdderBoard submission .py"),
    check: bool = typer.Option(False, "--check", help="with --adderboard: run AdderBoard's protocol on the written file"),
    markdown: Path = typer.Option(None, "--markdown", help="write the leaderboard table as markdown"),
    transformer_lens: Path = typer.Option(None, "--transformer-lens", help="write a TransformerLens HookedTransformerConfig (config.json) and state dict (model.safetensors) into this folder, checked against the model first (needs the interp extra)"),
    all_rows: bool = typer.Option(False, "--all", help="with --markdown: every entry"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Export an entry as an AdderBoard submission or a TransformerLens model, or the
    leaderboard as markdown."""
    if sum(o is not None for o in (adderboard, markdown, transformer_lens)) != 1:
        raise ArithsweepError("choose one of --adderboard FILE.py (with an ENTRY), "
                              "--transformer-lens DIR (with an ENTRY) or --markdown FILE.md")
    if transformer_lens is not None:
        if entry is None:
            raise ArithsweepError("--transformer-lens needs an ENTRY: an entry id, a sha256 "
                                  "prefix or a checkpoint folder")
        check_outputs(dirs={"--transformer-lens": transformer_lens})
        from arithsweep.leaderboard.transformer_lens_export import export_entry

        res = export_entry(entry, transformer_lens, db)
        out.print(f"wrote {transformer_lens}/config.json and model.safetensors "
                  f"(HookedTransformer of {res['task']}, {res['params']} parameters; logits "
                  f"within {res['check']['max_abs_logit_diff_float64']:.1g} in float64 and the "
                  f"same greedy answers on {res['check']['problems']} problems)", highlight=False)
        return
    weights = adderboard.parent / f"{adderboard.stem}_weights" if adderboard else None
    check_outputs(files={"--markdown": markdown, "--adderboard": adderboard},
                  dirs={"--adderboard's weights folder": weights})
    board = _open(db, create=False)
    if markdown is not None:
        from arithsweep.leaderboard.publish import MARKDOWN
        from arithsweep.leaderboard.tables import to_markdown

        if markdown.name == MARKDOWN and (markdown.parent / "checkpoints").is_dir():
            raise ArithsweepError(f"--markdown {markdown}: that is what `arithsweep publish` "
                                  f"writes beside its checkpoints; export to another file")
        from arithsweep.leaderboard.entry_lookup import entry_row

        rows = [entry_row(entry, db)] if entry is not None else board.query(all=all_rows)
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(to_markdown(rows, title="arithsweep leaderboard"))
        out.print(f"wrote {len(rows)} rows to {markdown}")
        return
    if entry is None:
        raise ArithsweepError("--adderboard needs an ENTRY (an entry id, a sha256 prefix, a "
                              "published folder's name or a checkpoint folder), e.g. "
                              "arithsweep export 1 --adderboard sub.py")
    if adderboard.suffix != ".py":
        raise ArithsweepError(f"--adderboard {adderboard}: the submission must be a .py file")
    from arithsweep.leaderboard.adderboard import export_adderboard
    from arithsweep.leaderboard.entry_lookup import export_row

    written = export_adderboard(export_row(entry, db), adderboard)
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

    check_outputs(dirs={"--dir": dest})
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
