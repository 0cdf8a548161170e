"""What every command module shares: the consoles, the help texts, JSON output, overrides.

Command modules import this, never the app (`arithsweep.cli.app` imports them and registers
their functions), so the dependency runs one way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Iterable
from typing import Any

from rich.console import Console

# piped output is not cut to 80 columns: a leaderboard row is wider than that
out = Console(width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True)

TASK_HELP = "task: add<N>, sub<N>, mix<N> (N = 1..18), mul<N> (N = 1..9) or sort<N> (N = 2..9), e.g. add3"
FORMAT_HELP = "format words, comma-separated: pad|nopad, revans|fwdans, revops|fwdops, delim|nodelim"
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


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def model_overrides(sets: list[str] | None, **named: Any) -> dict[str, Any]:
    """Named options that were given, then `--set KEY=VALUE` pairs, as one override dict."""
    from arithsweep.core.overrides import parse_sets

    return {**{k: v for k, v in named.items() if v is not None}, **parse_sets(sets)}


def one_line(msg: str) -> str:
    return " ".join(msg.split())
