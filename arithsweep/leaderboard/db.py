"""Leaderboard storage: engines, URLs, SQLite setup, error translation, ORM schema, migrations.

The database layer under `arithsweep.leaderboard.board` (which holds the `Leaderboard` class and its
queries and re-exports the public names here). A database is named by an SQLAlchemy URL or a
plain path (`default_db_url()`: `ARITHSWEEP_DB`, else `leaderboard/leaderboard.db` under the
current directory). Imports neither torch, ray nor mlflow: it sits on the fast CLI path.

    python -c "from arithsweep.leaderboard.db import default_db_url, _make_engine, migrate; \
        print(migrate(_make_engine(default_db_url(), 10.0)))"

SQLite notes (why the connection setup looks the way it does): WAL so readers never block the
writer; a busy timeout so a second writer waits instead of failing; write transactions start
with BEGIN IMMEDIATE so that a read-then-write transaction cannot hit SQLite's instant
"database is locked" on lock upgrade (the busy timeout does not apply to that case).
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import JSON, BigInteger, Float, Index, Integer, String, Text, event, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.schema import CreateColumn

from arithsweep.core.errors import ArithsweepError

DEFAULT_BUSY_TIMEOUT = 10.0  # seconds a writer waits for another writer before giving up


def _now() -> str:
    # Fixed-width ISO-8601 UTC (microseconds) so string order is time order in any database.
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class Base(DeclarativeBase):
    pass


class Entry(Base):
    """One verified checkpoint. Mirrors the schema after all migrations (tests check this)."""

    __tablename__ = "entries"
    __table_args__ = (Index("ix_entries_task_params", "task", "params"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(64))
    target: Mapped[float] = mapped_column(Float)
    params: Mapped[int] = mapped_column(Integer)
    model_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    train_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    architecture: Mapped[str] = mapped_column(Text)
    exact_match: Mapped[float] = mapped_column(Float)
    n_problems: Mapped[int] = mapped_column(BigInteger)
    n_failures: Mapped[int] = mapped_column(BigInteger)
    nines: Mapped[int] = mapped_column(Integer)
    wilson_lower: Mapped[float] = mapped_column(Float)
    failures: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    breakdown: Mapped[dict[str, Any]] = mapped_column(JSON)
    suite: Mapped[str] = mapped_column(String(32))
    suite_seed: Mapped[int] = mapped_column(BigInteger)
    checkpoint_path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    search_name: Mapped[str | None] = mapped_column(Text)
    trial_id: Mapped[str | None] = mapped_column(Text)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    steps: Mapped[int | None] = mapped_column(BigInteger)
    wall_time: Mapped[float | None] = mapped_column(Float)
    device: Mapped[str | None] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(32))
    reproduce: Mapped[str] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(String(40))  # first recorded; kept on re-verification
    suite_size: Mapped[int | None] = mapped_column(BigInteger)  # migration 003
    verified_at: Mapped[str | None] = mapped_column(String(40))  # migration 003; latest verify


class AppliedMigration(Base):
    __tablename__ = "_migrations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(100))
    applied_at: Mapped[str] = mapped_column(String(40))


# --- migrations: append only; never edit one that has shipped -------------------------------
# Each is a plain function of an open Connection and spells out its own DDL (not Entry's
# current table), so a database created by any older version upgrades to the same schema.


def _m001_initial(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "entries", md,
        sa.Column("id", Integer, primary_key=True, autoincrement=True),
        sa.Column("task", String(64), nullable=False),
        sa.Column("format", String(64), nullable=False),
        sa.Column("target", Float, nullable=False),
        sa.Column("params", Integer, nullable=False),
        sa.Column("model_config", JSON, nullable=False),
        sa.Column("train_config", JSON, nullable=False),
        sa.Column("architecture", Text, nullable=False),
        sa.Column("exact_match", Float, nullable=False),
        sa.Column("n_problems", BigInteger, nullable=False),
        sa.Column("n_failures", BigInteger, nullable=False),
        sa.Column("nines", Integer, nullable=False),
        sa.Column("wilson_lower", Float, nullable=False),
        sa.Column("failures", JSON, nullable=False),
        sa.Column("breakdown", JSON, nullable=False),
        sa.Column("suite", String(32), nullable=False),
        sa.Column("suite_seed", BigInteger, nullable=False),
        sa.Column("checkpoint_path", Text, nullable=False),
        sa.Column("sha256", String(64), nullable=False),
        sa.Column("mlflow_run_id", String(64)),
        sa.Column("search_name", Text),
        sa.Column("trial_id", Text),
        sa.Column("seed", BigInteger),
        sa.Column("steps", BigInteger),
        sa.Column("wall_time", Float),
        sa.Column("device", String(64)),
        sa.Column("version", String(32), nullable=False),
        sa.Column("reproduce", Text, nullable=False),
        sa.Column("created_at", String(40), nullable=False),
        sa.UniqueConstraint("sha256", name="uq_entries_sha256"),
    ).create(conn)


def _m002_index_task_params(conn: Connection) -> None:
    # The leaderboard query is "fewest params for this task": serve it from an index.
    t = sa.Table("entries", sa.MetaData(), sa.Column("task"), sa.Column("params"))
    Index("ix_entries_task_params", t.c.task, t.c.params).create(conn)


def _m003_suite_size_verified_at(conn: Connection) -> None:
    # The suite's size belongs with its name and seed; verified_at changes when the same
    # checkpoint is re-verified while created_at keeps the first recording.
    _add_column(conn, "entries", sa.Column("suite_size", BigInteger))
    _add_column(conn, "entries", sa.Column("verified_at", String(40)))


def _add_column(conn: Connection, table: str, column: sa.Column) -> None:
    sa.Table(table, sa.MetaData(), column)  # CreateColumn needs the column attached to a table
    spec = CreateColumn(column).compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {spec}")


MIGRATIONS: list[Callable[[Connection], None]] = [
    _m001_initial,
    _m002_index_task_params,
    _m003_suite_size_verified_at,
]


def _migration_id(fn: Callable[..., Any]) -> tuple[int, str]:
    name = fn.__name__.lstrip("_")
    return int(re.match(r"m(\d+)_", name).group(1)), name


def _applied(conn: Connection) -> set[int] | None:
    """Ids of applied migrations, or None when the database has no `_migrations` table."""
    if not sa.inspect(conn).has_table(AppliedMigration.__tablename__):
        return None
    return set(conn.scalars(select(AppliedMigration.id)))


def migrate(engine: Engine) -> list[str]:
    """Apply the missing migrations in order, in one transaction; return the names applied."""
    with engine.connect() as conn:  # cheap read first: an up-to-date database is not locked
        done = _applied(conn)
    if done is not None and all(_migration_id(m)[0] in done for m in MIGRATIONS):
        return []
    names: list[str] = []
    with _writer(engine).begin() as conn:
        AppliedMigration.__table__.create(conn, checkfirst=True)
        done = _applied(conn) or set()  # re-read under the write lock: another process may win
        for fn in MIGRATIONS:
            num, name = _migration_id(fn)
            if num in done:
                continue
            if num == 1 and sa.inspect(conn).has_table("entries"):
                raise ArithsweepError(f"{_where(engine)} is not a leaderboard database")
            fn(conn)
            conn.execute(sa.insert(AppliedMigration).values(id=num, name=name, applied_at=_now()))
            names.append(name)
    return names


# --- URLs and connections --------------------------------------------------------------------


def _normalize_url(url: str) -> str:
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
        return _normalize_url(env)
    return _normalize_url(str(Path.cwd() / "leaderboard" / "leaderboard.db"))


def _sqlite_path(url: str) -> Path | None:
    u = sa.make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return None if u.database.startswith("file:") else Path(u.database)


def _where(engine_or_url: Engine | str) -> str:
    """How a database is named in messages: the file path, or the URL without its password."""
    url = engine_or_url if isinstance(engine_or_url, str) else str(engine_or_url.url)
    path = _sqlite_path(url)
    return str(path) if path else sa.make_url(url).render_as_string(hide_password=True)


def _writer(engine: Engine) -> Engine:
    # Write transactions on SQLite start with BEGIN IMMEDIATE (see the module docstring).
    return engine.execution_options(arithsweep_begin="IMMEDIATE")


def _make_engine(url: str, busy_timeout: float) -> Engine:
    try:
        engine = sa.create_engine(url, connect_args=_connect_args(url, busy_timeout))
    except ModuleNotFoundError as e:
        raise ArithsweepError(f"no database driver for {_where(url)}: pip install {e.name}") from e
    except ArgumentError as e:
        raise ArithsweepError(f"{_where(url)}: {e}") from e
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


def _translate(exc: BaseException, where: str) -> ArithsweepError:
    """One clear line for a database failure a user can cause (lock, wrong file, no access)."""
    orig = getattr(exc, "orig", None) or exc
    msg = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return ArithsweepError(
            f"leaderboard database {where} is locked by another writer; try again"
        )
    if "not a database" in low or "malformed" in low or "encrypted" in low:
        return ArithsweepError(f"{where} is not a leaderboard database")
    if "no such table" in low or "no such column" in low:
        return ArithsweepError(f"{where} is not a leaderboard database ({msg})")
    if "unable to open" in low:
        return ArithsweepError(f"cannot open leaderboard database {where} (check path/permissions)")
    if "readonly" in low or "read-only" in low:
        return ArithsweepError(f"leaderboard database {where} is read-only")
    return ArithsweepError(f"leaderboard database {where}: {msg}")


@contextmanager
def _guard(where: str) -> Iterator[None]:
    try:
        yield
    except (DBAPIError, sqlite3.Error) as e:
        raise _translate(e, where) from e
