"""What every command module shares: the consoles, the help texts, JSON output, overrides,
and the early check of every path a command will write (`check_outputs`).

Command modules import this, never the app (`arithsweep.cli.app` imports them and registers
their functions), so the dependency runs one way.

    python -c "from arithsweep.cli.common import check_outputs; \
        check_outputs(files={'--png': 'README.md/o.png'})"  # raises: README.md is a file
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from arithsweep.core.data.formats import _FORMAT_HELP
from arithsweep.core.errors import ArithsweepError

# piped output is not cut to 80 columns: a leaderboard row is wider than that
out = Console(width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True)

TASK_HELP = "task: add<N>, sub<N>, mix<N> (N = 1..18), mul<N> (N = 1..9) or sort<N> (N = 2..9), e.g. add3"
# from the parser's own word list, so a new format word (zeros) is in the help as it lands
FORMAT_HELP = (f"format words, comma-separated: {_FORMAT_HELP} (zeros: the delimiter slots "
               "are the digit 0, AdderBoard's layout)")
# a CHECKPOINT argument that takes a board entry too (entry_lookup.checkpoint_or_entry)
ENTRY_TOO = ("or a leaderboard entry: an id, a sha256 prefix or a published folder's name "
             "(the local database's entry, else the published one in entries.json)")
SET_HELP = "override any model or train field, e.g. --set final_norm=false (repeatable)"
DB_HELP = "leaderboard database: SQLAlchemy URL or file path (default $ARITHSWEEP_DB or leaderboard/leaderboard.db)"


def table(title: str, columns: Iterable[str], right: bool | Collection[str] = (),
          **kw: Any) -> Any:
    """A Rich table with these columns; `right` names the right-aligned ones (True: all);
    `kw` goes to rich.table.Table (caption, title_justify, ...)."""
    from rich.table import Table

    tab = Table(title=title, **kw)
    for c in columns:
        tab.add_column(c, justify="right" if right is True or (right and c in right) else "left")
    return tab


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Inside, whatever is written to stdout, by Python or by a library's native code or
    threads (Ray's "(raylet) A worker died or was killed ..." when a trial's process dies),
    goes to stderr: a `--json` command's stdout then holds its JSON object alone."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def model_overrides(sets: list[str] | None, **named: Any) -> dict[str, Any]:
    """Named options that were given, then `--set KEY=VALUE` pairs, as one override dict."""
    from arithsweep.core.overrides import parse_sets

    return {**{k: v for k, v in named.items() if v is not None}, **parse_sets(sets)}


def one_line(msg: str) -> str:
    return " ".join(msg.split())


# --- output paths: checked before any long work, so a typo costs a second, not a training run

Where = str | os.PathLike | None


def _blocked(path: Path, create_parents: bool = True) -> str | None:
    """Why `path` (not there yet) cannot be created, or None: the nearest existing folder
    above it must be a writable folder (and, unless `create_parents`, be its parent)."""
    for above in (*path.parents, Path.cwd()):  # named as given: "notadir", not /home/...
        if above.exists() or above.is_symlink():
            break
        if not create_parents:
            return f"the folder {above} does not exist"
    if not above.is_dir():
        return f"{above} is a file, not a folder"
    if not os.access(above, os.W_OK | os.X_OK):
        return f"the folder {above} is not writable (permission denied)"
    return None


def _file_problem(path: Path, create_parents: bool = True) -> str | None:
    if path.is_dir():
        return "that is a folder; give a file name"
    if path.exists() or path.is_symlink():
        if not path.is_file():
            return "that is not a regular file"
        return None if os.access(path, os.W_OK) else "the file is not writable (permission denied)"
    return _blocked(path, create_parents)


def _dir_problem(path: Path) -> str | None:
    if path.is_dir():
        ok = os.access(path, os.W_OK | os.X_OK)
        return None if ok else "the folder is not writable (permission denied)"
    if path.exists() or path.is_symlink():
        return "that is a file, not a folder"
    return _blocked(path)


def _db_file(flag: str, url: Where) -> Path | None:
    """The SQLite file behind a database option, or None (not given, not SQLite, or not a URL:
    the command says so itself). The leaderboard's `--db` left out means its default database;
    any other option (an MLflow URI) is checked only as a sqlite:/// URL."""
    if url is None and flag != "--db":
        return None
    from arithsweep.leaderboard.db import default_db_url, normalize_url, sqlite_path

    text = str(url or "")
    if flag != "--db" and not text.startswith("sqlite:"):
        return None
    try:
        return sqlite_path(normalize_url(text) if text else default_db_url())
    except (ArithsweepError, ValueError):  # SQLAlchemy's ArgumentError is a ValueError
        return None


def check_outputs(
    files: Mapping[str, Where] | None = None,
    dirs: Mapping[str, Where] | None = None,
    appends: Mapping[str, Where] | None = None,
    urls: Mapping[str, Where] | None = None,
) -> None:
    """Raise one clear `ArithsweepError` ("--png a/o.png: a is a file, not a folder") for the
    first output path that cannot be written; call it before a command's long work. Each
    mapping goes option name -> path (None: not given, skipped). `files` are written (their
    missing folders created), `dirs` are folders created or filled, `appends` files opened
    for appending where they stand (their folder must exist), `urls` databases (SQLAlchemy
    URL or path; only SQLite files are checked; "--db" None is the default leaderboard)."""
    checks: list[tuple[str, Path | None, Any]] = []
    checks += [(k, None if v is None else Path(v), _file_problem) for k, v in (files or {}).items()]
    checks += [(k, None if v is None else Path(v), _dir_problem) for k, v in (dirs or {}).items()]
    checks += [(k, None if v is None else Path(v), lambda p: _file_problem(p, False))
               for k, v in (appends or {}).items()]
    checks += [(k, _db_file(k, v), _file_problem) for k, v in (urls or {}).items()]
    for flag, path, problem in checks:
        why = None if path is None else problem(path.expanduser())
        if why:
            raise ArithsweepError(f"{flag} {path}: cannot write there: {why}")
