"""The `arithsweep` command line: parse, call one function, print a Rich table or --json.

Heavy libraries (torch, ray, mlflow) are imported inside the commands that need them, so
`arithsweep --help` and `arithsweep leaderboard` stay fast. Every user mistake ends in one line
on stderr (`error: …`) and exit code 2; nothing is half-written.

    arithsweep train --task add3
    arithsweep --help
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from arithsweep.errors import ArithsweepError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    help="Search for the smallest transformer that does integer arithmetic, verify it, "
         "and keep a leaderboard.",
)
# piped output is not cut to 80 columns: a leaderboard row is wider than that
out = Console(width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True)

TASK_HELP = "task: add<N>, sub<N>, mix<N> (N = 1..18) or mul<N> (N = 1..9), e.g. add3"
FORMAT_HELP = "format words, comma-separated: pad|nopad, revans|fwdans, revops|fwdops, delim|nodelim"
SET_HELP = "override any model or train field, e.g. --set final_norm=false (repeatable)"
DB_HELP = "leaderboard database: SQLAlchemy URL or file path (default $ARITHSWEEP_DB or leaderboard/leaderboard.db)"


def _json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _model_overrides(sets: list[str] | None, **named: Any) -> dict[str, Any]:
    from arithsweep.configs import parse_sets

    return {**{k: v for k, v in named.items() if v is not None}, **parse_sets(sets)}


@app.command()
def train(
    task: str = typer.Option(None, "--task", "-t", help=TASK_HELP),
    fmt: str = typer.Option(None, "--format", help=FORMAT_HELP),
    config: Path = typer.Option(None, "--config", "-c", help="YAML/JSON with model:/train: sections, or a checkpoint's config.json"),
    d_model: int = typer.Option(None, "--d-model", help="residual width"),
    layers: int = typer.Option(None, "--layers", help="transformer blocks"),
    heads: int = typer.Option(None, "--heads", help="attention heads"),
    d_ff: int = typer.Option(None, "--d-ff", help="MLP width (0 = no MLP)"),
    pos: str = typer.Option(None, "--pos", help="learned | sinusoidal | rope | abacus | none"),
    seeds: int = typer.Option(None, "--seeds", "-k", help="seeds trained together"),
    steps: int = typer.Option(None, "--steps", help="optimiser steps"),
    lr: float = typer.Option(None, "--lr", help="peak learning rate"),
    seed: int = typer.Option(None, "--seed", help="first seed of the pack"),
    target: float = typer.Option(None, "--target", help="stop once a seed reaches this exact match"),
    device: str = typer.Option(None, "--device", help="auto | cpu | cuda | cuda:N"),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    out_dir: Path = typer.Option(None, "--out", "-o", help="checkpoint directory (default runs/<task>-<time>)"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Train K seeds of one architecture together; save the best as a checkpoint."""
    import time

    from arithsweep.configs import build_configs

    over = _model_overrides(sets, d_model=d_model, n_layers=layers, n_heads=heads, d_ff=d_ff,
                            pos=pos, seeds=seeds, steps=steps, lr=lr, seed=seed,
                            target=target, device=device)
    t, m, tc = build_configs(task, fmt, config, over)
    from arithsweep.jobs import train_job

    dest = out_dir or Path("runs") / f"{t.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    res = train_job(t, m, tc, dest, progress=not as_json)
    if as_json:
        return _json(res)
    tab = Table(title=f"{res['task']} · {res['architecture']}")
    for c in ("seed", "eval exact match", ""):
        tab.add_column(c)
    for i, e in enumerate(res["seed_exact_match"]):
        mark = "best" if tc.seed + i == res["best_seed"] else (
            "failed (NaN)" if i in res["failed_seeds"] else "")
        tab.add_row(str(tc.seed + i), f"{e:.4f}", mark)
    out.print(tab)
    ok = "[green]reached[/]" if res["reached_target"] else "[red]below[/]"
    out.print(
        f"parameters [bold]{res['params']}[/] · best seed {res['best_seed']} exact match "
        f"[bold]{res['final_exact_match']:.5f}[/] on {res['final_problems']} ({ok} target "
        f"{res['target']}) · {res['steps']} steps ({res['stop_reason']}) · "
        f"train {res['train_seconds']}s + full checks {res['check_seconds']}s · "
        f"{res['examples_per_s']:,} examples/s on {res['device']}\n"
        f"checkpoint {res['checkpoint']}"
    )


@app.command()
def ask(
    checkpoint: Path = typer.Argument(..., help="checkpoint directory"),
    problems: list[str] = typer.Argument(None, help='problems such as "123+456"'),
    file: Path = typer.Option(None, "--file", "-f", help="a file with one problem per line"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ask a trained model arithmetic questions (greedy decoding)."""
    items = list(problems or [])
    if file is not None:
        if not file.is_file():
            raise ArithsweepError(f"--file {file}: no such file")
        items += [ln.strip() for ln in file.read_text().splitlines() if ln.strip()]
    if not items:
        raise ArithsweepError('no problems given: e.g. arithsweep ask CHECKPOINT "123+456"')
    from arithsweep.jobs import ask_job

    res = ask_job(checkpoint, items)
    if as_json:
        return _json(res)
    tab = Table(title=f"{res['task']} · {res['params']} parameters")
    for c in ("problem", "model", "true", ""):
        tab.add_column(c)
    for r in res["results"]:
        tab.add_row(r["problem"], str(r["answer"]), str(r["expected"]),
                    "[green]right[/]" if r["correct"] else "[red]wrong[/]")
    out.print(tab)
    out.print(f"{res['correct']}/{res['total']} right")


@app.command()
def params(
    task: str = typer.Option(None, "--task", "-t", help=TASK_HELP),
    fmt: str = typer.Option(None, "--format", help=FORMAT_HELP),
    config: Path = typer.Option(None, "--config", "-c", help="YAML/JSON with a model: section"),
    d_model: int = typer.Option(None, "--d-model"),
    layers: int = typer.Option(None, "--layers"),
    heads: int = typer.Option(None, "--heads"),
    d_ff: int = typer.Option(None, "--d-ff"),
    pos: str = typer.Option(None, "--pos"),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Unique parameter count of an architecture, per component, without training."""
    from arithsweep.configs import build_configs

    over = _model_overrides(sets, d_model=d_model, n_layers=layers, n_heads=heads, d_ff=d_ff,
                            pos=pos)
    t, m, _ = build_configs(task, fmt, config, over)
    from arithsweep.jobs import params_job

    res = params_job(t, m)
    if as_json:
        return _json(res)
    tab = Table(title=f"{res['task']} · {res['architecture']}")
    tab.add_column("component")
    tab.add_column("params", justify="right")
    for row in res["breakdown"]:
        tab.add_row(row["component"], str(row["params"]))
    tab.add_row("[bold]total (unique)[/]", f"[bold]{res['params']}[/]")
    out.print(tab)
    out.print(f"vocab {res['vocab_size']} ({' '.join(res['vocab'])}) · context {res['n_ctx']}")


@app.command()
def bench(
    quick: bool = typer.Option(False, "--quick", help="fewer steps (a smoke run, noisier ratios)"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Packed vs sequential training throughput, and exact-match throughput, as ratios."""
    from arithsweep.bench import run_bench

    res = run_bench(quick=quick, device=device, log=None if as_json else err.print)
    if as_json:
        return _json(res)
    tab = Table(title=f"packed training, {res['model']} on {res['task']} ({res['device']})")
    for c in ("K", "packed ex/s", "sequential ex/s", "packed / sequential"):
        tab.add_column(c, justify="right")
    for r in res["packing"]:
        tab.add_row(str(r["k"]), f"{r['packed_ex_s']:,.0f}", f"{r['sequential_ex_s']:,.0f}",
                    f"[bold]{r['ratio']:.2f}x[/]")
    out.print(tab)
    e = res["exact_match"]
    out.print(f"exact match on {e['problems']:,} {res['task']} problems ({e['params']} params): "
              f"{e['seconds']:.2f}s = {e['problems_per_s']:,.0f}/s teacher-forced; greedy decoding "
              f"{e['greedy_per_s']:,.0f}/s ({e['speedup']:.1f}x slower)")


def main() -> None:
    """Console-script entry: user errors become one line on stderr and exit code 2."""
    try:  # typer >= 0.20 vendors click as typer._click; older releases use click itself
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover
        from click import exceptions as cx

    cmd = typer.main.get_command(app)
    try:
        code = cmd.main(args=sys.argv[1:], prog_name="arithsweep", standalone_mode=False)
    except getattr(cx, "NoArgsIsHelpError", ()) as e:
        print(e.ctx.get_help() if e.ctx else "arithsweep --help", file=sys.stderr)
        sys.exit(0 if not sys.argv[1:] else 2)
    except (typer.Abort, getattr(cx, "Abort", typer.Abort)):
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except cx.UsageError as e:
        hint = f" (see arithsweep {e.ctx.info_name} --help)" if e.ctx and e.ctx.parent else ""
        print(f"error: {_one_line(e.format_message())}{hint}", file=sys.stderr)
        sys.exit(2)
    except cx.ClickException as e:
        print(f"error: {_one_line(e.format_message())}", file=sys.stderr)
        sys.exit(2)
    except ArithsweepError as e:
        print(f"error: {_one_line(str(e)) or type(e).__name__}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def _one_line(msg: str) -> str:
    return " ".join(msg.split())

# the other commands live in their own modules; importing them registers them on `app`
from arithsweep import cli_board, cli_search  # noqa: E402,F401
