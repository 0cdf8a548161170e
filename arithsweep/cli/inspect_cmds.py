"""`arithsweep inspect`: look inside a leaderboard entry or a checkpoint on one problem.

Prints (or `--json`) every head's attention on the problem, the answer probabilities, the greedy
answer and whether it is right, and the model's exact match by answer length and accuracy by
answer position on held-out problems (all problems for small tasks); draws them as a PNG.
torch and matplotlib are imported inside the command.

    arithsweep inspect 1 "12+34"                      # leaderboard entry 1
    arithsweep inspect 34 "123+456" --no-png          # a published entry (leaderboard/entries.json)
    arithsweep inspect runs/add3/best "123+456" --png add3.png --json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from arithsweep.cli.common import DB_HELP, check_outputs, out, print_json, table
from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.report import TARGET


def _entry(row: dict[str, Any]) -> str:
    """"entry 3", or "published entry 34" for one from entries.json."""
    return ("published " if row.get("source") == "published" else "") + f"entry {row['id']}"


def _top_keys(res: dict[str, Any]) -> Table:
    """For each answer position, where each head looks hardest: 'token@position weight'."""
    P, toks, G = res["prompt_len"], res["tokens"], len(res["answer"]["chosen"])
    tab = Table(title="where each head looks hardest", caption="key token@position weight")
    tab.add_column("writes")
    loops = res["n_loops"] > 1
    for att in res["attention"]:
        tab.add_column(f"L{att['layer']}" + (f"r{att['loop']}" if loops else "")
                       + f"H{att['head']}", justify="right")
    for i in range(G):
        q = P - 1 + i  # the query position whose output is answer token i
        cells = []
        for att in res["attention"]:
            row = att["weights"][q]
            j = max(range(len(row)), key=row.__getitem__)
            cells.append(f"{toks[j]}@{j} {row[j]:.2f}")
        tab.add_row(f"{res['answer']['labels'][i]} {res['answer']['chosen'][i]}", *cells)
    return tab


def _print(res: dict[str, Any], views: dict[str, Any], png: Path | None, what: str) -> None:
    ok = "[green]right[/]" if res["correct"] else "[red]wrong[/]"
    out.print(f"{what}\n{res['task']} ({res['format']}) · {res['problem']} = "
              f"{res['expected_answer']} · model says [bold]{res['greedy_answer']}[/] ({ok}) · "
              f"input tokens: {' '.join(res['tokens'])}")
    ans, vocab = res["answer"], res["vocab"]
    tab = table("answer probabilities", ("position", "chosen", "p(chosen)", "true", "p(true)"),
                right=True, caption="on the model's own greedy answer")
    for lab, c, e, pr in zip(ans["labels"], ans["chosen"], ans["expected"], ans["probs"]):
        pe = f"{pr[vocab.index(e)]:.4f}" if e is not None else "-"
        mark = "" if c == e else "[red]"
        tab.add_row(lab, f"{mark}{c}", f"{pr[vocab.index(c)]:.4f}", str(e), pe)
    out.print(tab)
    out.print(_top_keys(res))
    out.print(f"{views['problems']:,} problems, {views['source']}: exact match "
              f"{views['exact_match']:.4f}")
    tab = table("exact match by answer length",
                ("answer digits", "problems", "correct", "exact match"), right=True)
    for r in views["by_answer_len"]:
        tab.add_row(str(r["answer_len"]), f"{r['problems']:,}", f"{r['correct']:,}",
                    f"{r['exact_match']:.4f}")
    out.print(tab)
    tab = table("accuracy by answer position", ("position", "holds", "accuracy"), right=True)
    for r in views["by_position"]:
        style = "" if r["accuracy"] >= TARGET else "[red]"  # below the board's target
        tab.add_row(str(r["position"]), r["label"], f"{style}{r['accuracy']:.4f}")
    out.print(tab)
    if png is not None:
        out.print(f"wrote {png}")


def inspect(
    target: str = typer.Argument(..., metavar="ENTRY|CHECKPOINT", help="leaderboard entry id or sha256 prefix (the local database's entry when it holds one, else the published one in entries.json beside it), a published checkpoint folder's name, or a checkpoint directory"),
    problem: str = typer.Argument(..., help='one problem of the model\'s task, e.g. "123+456"'),
    png: Path = typer.Option(None, "--png", help="where to draw the picture (default ./inspect-<task>.png)"),
    no_png: bool = typer.Option(False, "--no-png", help="draw nothing"),
    member: int = typer.Option(0, "--member", help="which model of a population (checkpoints hold one: 0)"),
    n: int = typer.Option(10_000, "--problems", "-n", help="held-out problems for the accuracy views (every problem when the task has at most this many)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="print every number as JSON"),
) -> None:
    """Look inside a model: attention per head, answer probabilities, accuracy by length/position."""
    if png is not None and no_png:
        raise ArithsweepError("choose one of --png PATH and --no-png")
    if n < 1:
        raise ArithsweepError(f"--problems {n}: must be at least 1")
    if png is not None and png.suffix.lower() != ".png":
        raise ArithsweepError(f"--png {png}: the picture is a PNG; give a path ending in .png")
    from arithsweep.leaderboard.entry_lookup import entry_checkpoint

    path, row = entry_checkpoint(target, db)
    from arithsweep.core.evaluation.inspect import accuracy_views, draw, inspect_problem
    from arithsweep.core.model.checkpoint import load_checkpoint

    ck = load_checkpoint(path)
    if row is not None and row.get("sha256") and row["sha256"] != ck.sha256:
        raise ArithsweepError(f"entry {row['id']}: the checkpoint at {ck.path} has changed since "
                              "it was verified (sha256 differs); re-verify it")
    dest = None if no_png else (png or Path(f"inspect-{ck.task.name}.png"))
    check_outputs(files={"--png": dest})  # the default name needs the task: after loading
    res = inspect_problem(ck.model, ck.task, problem, member=member)
    views = accuracy_views(ck.model, ck.task, n=n, member=member)
    what = (f"{_entry(row)} · " if row else "") + f"{ck.params} parameters · {ck.path}"
    if dest is not None:
        draw(res, dest, views, title=f"{res['task']} · {res['problem']} · {ck.params} parameters"
             + (f" · {_entry(row)}" if row else ""))
    if as_json:
        return print_json({"checkpoint": str(ck.path), "entry": row["id"] if row else None,
                           "source": row["source"] if row else None,
                           "params": ck.params, "png": str(dest) if dest else None,
                           **res, "views": views})
    _print(res, views, dest, what)
