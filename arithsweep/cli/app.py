"""The `arithsweep` command line: one Typer app, one list of commands, one error policy.

Parse, call one function, print a Rich table or --json. Heavy libraries (torch, ray, mlflow)
are imported inside the commands that need them, so `arithsweep --help` and `arithsweep
leaderboard` stay fast. Every user mistake ends in one line on stderr (`error: …`) and exit
code 2; nothing is half-written.

    arithsweep train --task add3
    arithsweep --help
"""

from __future__ import annotations

import re
import sys
import warnings

import typer

from arithsweep.cli import board_cmds, inspect_cmds, ood_cmds, run_cmds, search_cmds
from arithsweep.cli.common import one_line
from arithsweep.core.errors import ArithsweepError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    help="Search for the smallest transformer that does integer arithmetic, verify it, "
         "and keep a leaderboard.",
)

# The one list of commands, in the order `--help` shows them.
COMMANDS = (
    run_cmds.train, run_cmds.finish, run_cmds.ask, run_cmds.params, run_cmds.bench,
    search_cmds.search, search_cmds.spaces, search_cmds.ui,
    board_cmds.verify, board_cmds.leaderboard, board_cmds.show, board_cmds.export,
    board_cmds.publish, inspect_cmds.inspect, ood_cmds.ood,
)
for _command in COMMANDS:
    app.command()(_command)


def _out_of_memory(e: BaseException) -> bool:
    text = str(e)
    return (isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in text or "out of memory" in text.lower())


def _allocation(e: BaseException) -> str:
    """'you tried to allocate 32000000000 bytes' out of torch's message, else its first line."""
    text = str(e)
    i = text.find("tried to allocate")
    return text[i:].split(".")[0].split(" Error")[0] if i >= 0 else (text or type(e).__name__)


def main() -> None:
    """Console-script entry: user errors become one line on stderr and exit code 2."""
    try:  # typer >= 0.20 vendors click as typer._click; older releases use click itself
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover
        from click import exceptions as cx

    cmd = typer.main.get_command(app)
    # a library's warning reaches a user as one line, not a source line and a category name
    warnings.formatwarning = lambda message, *_a, **_k: f"warning: {one_line(str(message))}\n"
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
        name = getattr(e, "option_name", "") or ""
        if isinstance(e, cx.NoSuchOption) and re.fullmatch(r"-[\d.]+\S*", name):
            # `ask CK -1+2`: a problem that starts with '-' reads as an option
            arg = next((a for a in sys.argv[1:] if a.startswith(name)), name)
            hint = (f" ({arg!r} reads as an option: put a problem that starts with '-' "
                    f"after --, e.g. arithsweep {e.ctx.info_name if e.ctx else 'ask'} "
                    f"CHECKPOINT -- {arg})")
        print(f"error: {one_line(e.format_message())}{hint}", file=sys.stderr)
        sys.exit(2)
    except cx.ClickException as e:
        print(f"error: {one_line(e.format_message())}", file=sys.stderr)
        sys.exit(2)
    except ArithsweepError as e:
        print(f"error: {one_line(str(e)) or type(e).__name__}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a path the user named: read-only, a folder, a file in the way...
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{one_line(e.strerror or str(e))}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except (MemoryError, RuntimeError) as e:  # torch's allocators raise RuntimeError subclasses
        if not _out_of_memory(e):
            raise
        print(f"error: out of memory ({one_line(_allocation(e))}): lower batch_size, seeds, "
              f"the model's width or the problems asked for", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
