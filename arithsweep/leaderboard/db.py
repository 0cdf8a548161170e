"""Leaderboard storage plumbing: database URLs, engines, SQLite setup, error translation.

The layer under `arithsweep.leaderboard.board` (the `Leaderboard` class); the tables are in
`schema.py`, their migrations in `migrations.py`. A database is named by an SQLAlchemy URL or a
plain path (`default_db_url()`: `ARITHSWEEP_DB`, else `leaderboard/leaderboard.db` under the
current directory). Imports neither torch, ray nor mlflow: it sits on the fast CLI path.

    python -c "from arithsweep.leaderboard.db import default_db_url, where; \
        print(where(default_db_url()))"

SQLite notes (why the connection setup looks the way it does): WAL so readers never block the
writer; a busy timeout so a second writer waits instead of failing; write transactions start
with BEGIN IMMEDIATE so that a read-then-write transaction cannot hit SQLite's instant
"database is locked" on lock upgrade (the busy timeout does not apply to that case).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, DBAPIError

from arithsweep.core.errors import ArithsweepError

DEFAULT_BUSY_TIMEOUT = 10.0  # seconds a writer waits for another writer before giving up


def normalize_url(url: str) -> str:
    """A plain path becomes sqlite:///<abs path>; relative sqlite paths become absolute."""
    url = url.strip()
    if not url:
        raise ArithsweepError("the leaderboard database URL is empty")
    if "://" not in url:
        return f"sqlite:///{os.path.abspath(os.path.expanduser(url))}"
    try:
        u = sa.make_url(url)
    except ArgumentError as e:
        raise ArithsweepError(f"{url!r} is not a database URL or path") from e
    db = u.database
    if u.get_backend_name() == "sqlite" and db and db != ":memory:" and not db.startswith("file:"):
        u = u.set(database=os.path.abspath(os.path.expanduser(db)))
    return u.render_as_string(hide_password=False)


def default_db_url() -> str:
    """`ARITHSWEEP_DB` (URL or path) if set, else sqlite:///<cwd>/leaderboard/leaderboard.db."""
    env = os.environ.get("ARITHSWEEP_DB", "").strip()
    if env:
        return normalize_url(env)
    return normalize_url(str(Path.cwd() / "leaderboard" / "leaderboard.db"))


def sqlite_path(url: str) -> Path | None:
    u = sa.make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return None if u.database.startswith("file:") else Path(u.database)


def where(engine_or_url: Engine | str) -> str:
    """How a database is named in messages: the file path, or the URL without its password."""
    url = engine_or_url if isinstance(engine_or_url, str) else str(engine_or_url.url)
    path = sqlite_path(url)
    return str(path) if path else sa.make_url(url).render_as_string(hide_password=True)


def writer(engine: Engine) -> Engine:
    # Write transactions on SQLite start with BEGIN IMMEDIATE (see the module docstring).
    return engine.execution_options(arithsweep_begin="IMMEDIATE")


# the module a SQLAlchemy dialect imports -> the package that provides it on PyPI
_DRIVER_PACKAGES = {"MySQLdb": "mysqlclient", "psycopg2": "psycopg2-binary",
                    "pymysql": "PyMySQL", "psycopg": "psycopg[binary]"}


def make_engine(url: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Engine:
    """An engine for `url`; on SQLite every connection gets the setup in the module docstring."""
    try:
        engine = sa.create_engine(url, connect_args=_connect_args(url, busy_timeout))
    except ModuleNotFoundError as e:
        package = _DRIVER_PACKAGES.get(e.name or "", e.name)
        raise ArithsweepError(f"no database driver for {where(url)}: pip install {package}") from e
    except ArgumentError as e:
        raise ArithsweepError(f"{where(url)}: {e}") from e
    if engine.dialect.name != "sqlite":
        return engine

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control from pysqlite (it would BEGIN lazily, only before DML).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; no fsync per reader
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get('arithsweep_begin', '')}")

    return engine


def _connect_args(url: str, busy_timeout: float) -> dict[str, Any]:
    return {"timeout": busy_timeout} if sa.make_url(url).get_backend_name() == "sqlite" else {}


def translate(exc: BaseException, name: str) -> ArithsweepError:
    """One clear line for a database failure a user can cause (lock, wrong file, no access)."""
    orig = getattr(exc, "orig", None) or exc
    msg = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return ArithsweepError(
            f"leaderboard database {name} is locked by another writer; try again"
        )
    if "not a database" in low or "malformed" in low or "encrypted" in low:
        return ArithsweepError(f"{name} is not a leaderboard database")
    if "no such table" in low or "no such column" in low:
        return ArithsweepError(f"{name} is not a leaderboard database ({msg})")
    if "unable to open" in low:
        return ArithsweepError(f"cannot open leaderboard database {name} (check path/permissions)")
    if "readonly" in low or "read-only" in low:
        return ArithsweepError(f"leaderboard database {name} is read-only")
    return ArithsweepError(f"leaderboard database {name}: {msg}")


@contextmanager
def guard(name: str) -> Iterator[None]:
    """Turn database errors raised inside the block into one ArithsweepError line."""
    try:
        yield
    except (DBAPIError, sqlite3.Error) as e:
        raise translate(e, name) from e
