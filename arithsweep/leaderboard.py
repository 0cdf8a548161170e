"""The verified leaderboard: SQLAlchemy 2 schema, numbered migrations, writes and queries.

Entries are only ever written from a qualifying `VerificationReport`; the same checkpoint
(sha256) twice is one entry, updated with the newer verification. The default database is
`leaderboard/leaderboard.db` under the current directory, overridden by `ARITHSWEEP_DB` (an
SQLAlchemy URL, so a team can use PostgreSQL, or a plain path). Imports neither torch, ray nor
mlflow: `arithsweep leaderboard` must answer in well under a second.

    python -c "from arithsweep.leaderboard import open_db; print(open_db(create=False).query())"

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
from sqlalchemy import JSON, BigInteger, Float, Index, Integer, String, Text, event, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, aliased, mapped_column
from sqlalchemy.schema import CreateColumn

from arithsweep.errors import ArithsweepError
from arithsweep.report import VerificationReport

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


class Leaderboard:
    """Verified entries in one database; thread-safe (each call uses its own session)."""

    def __init__(self, url: str, create: bool = True, busy_timeout: float = DEFAULT_BUSY_TIMEOUT):
        self.url = url
        self.where = _where(url)
        self._busy_timeout = busy_timeout
        self._engine: Engine | None = None
        path = _sqlite_path(url)
        if create or path is None or path.exists():
            self._connect(create)

    def _connect(self, create: bool) -> Engine:
        path = _sqlite_path(self.url)
        if create and path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ArithsweepError(f"cannot create {path.parent}: {e.strerror}") from e
        engine = _make_engine(self.url, self._busy_timeout)
        with _guard(self.where):
            try:
                with engine.connect() as conn:
                    has_entries = sa.inspect(conn).has_table("entries")
                if create or has_entries or path is None:
                    migrate(engine)
                    self._engine = engine
                else:
                    # An existing SQLite file without our tables (e.g. Optuna's): a reader
                    # sees an empty leaderboard and writes nothing.
                    engine.dispose()
            except BaseException:
                engine.dispose()
                raise
        return engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> Leaderboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writes ----------------------------------------------------------------------------

    def record(self, report: VerificationReport) -> tuple[dict[str, Any], bool]:
        """Store a qualifying report; returns (the entry as a row dict, created?)."""
        if isinstance(report, dict):
            report = VerificationReport.from_dict(report)
        if not report.qualifies:
            em, target = _distinct(report.exact_match, report.target)
            raise ArithsweepError(f"not recorded: exact match {em} is below the target {target}")
        sha = str(report.sha256).lower()
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ArithsweepError(f"not recorded: {report.sha256!r} is not a sha256 hex digest")
        values = _values(report, sha)
        engine = self._engine or self._connect(create=True)
        with _guard(self.where):
            for attempt in (1, 2):
                try:
                    return self._upsert(engine, sha, values)
                except IntegrityError:
                    # Another writer inserted the same sha between our SELECT and INSERT
                    # (possible on servers without BEGIN IMMEDIATE): update it instead.
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _upsert(self, engine: Engine, sha: str, values: dict[str, Any]) -> tuple[dict, bool]:
        with Session(_writer(engine), expire_on_commit=False) as s, s.begin():
            entry = s.scalars(select(Entry).where(Entry.sha256 == sha)).one_or_none()
            created = entry is None
            if created:
                entry = Entry(created_at=_now(), **values)
                s.add(entry)
            else:
                for k, v in values.items():
                    setattr(entry, k, v)
            s.flush()
            # Inside the transaction: any failure up to the commit leaves nothing written.
            return _entry_row(entry, self._rank_of(s, entry)), created

    @staticmethod
    def _rank_of(s: Session, entry: Entry) -> int:
        ranked = _ranked(task=entry.task, target=None).subquery()
        return s.scalar(select(ranked.c.rank).where(ranked.c.id == entry.id))

    # --- reads -----------------------------------------------------------------------------

    def query(
        self,
        task: str | None = None,
        target: float | None = None,
        limit: int | None = None,
        all: bool = False,  # shadows the builtin on purpose: it is the CLI's --all
    ) -> list[dict[str, Any]]:
        """Fewest params first (then higher exact match, then earlier); one row per task
        unless `all`. `target` keeps entries whose verified exact match >= target. Each row
        carries `rank`: its place within its task under the same filter (1 = best)."""
        if target is not None and not 0 < target <= 1:
            raise ArithsweepError(f"target must be in (0, 1], got {target}")
        if limit is not None and limit < 1:
            raise ArithsweepError(f"limit must be a positive number, got {limit}")
        if self._engine is None:
            return []
        ranked = _ranked(task, target).subquery()
        e = aliased(Entry, ranked)
        stmt = select(e, ranked.c.rank)
        if not all:
            stmt = stmt.where(ranked.c.rank == 1)
        stmt = stmt.order_by(*_order(e)).limit(limit)
        with _guard(self.where), Session(self._engine) as s:
            return [_entry_row(entry, rank) for entry, rank in s.execute(stmt)]

    def get(self, entry: str | int) -> dict[str, Any]:
        """One entry by id or by sha256 prefix (at least 6 hex digits)."""
        key = str(entry).strip().lower().removeprefix("sha256:")
        conds = []
        if key.isdigit():
            conds.append(Entry.id == int(key))
        if len(key) >= 6 and re.fullmatch(r"[0-9a-f]+", key):
            conds.append(Entry.sha256.startswith(key, autoescape=True))
        if not conds:
            raise ArithsweepError(f"{entry!r} is neither an entry id nor a sha256 prefix (6+ hex)")
        found: list[Entry] = []
        if self._engine is not None:
            with _guard(self.where), Session(self._engine) as s:
                found = list(s.scalars(select(Entry).where(sa.or_(*conds)).limit(10)))
                if len(found) == 1:
                    return _entry_row(found[0], self._rank_of(s, found[0]))
        if not found:
            raise ArithsweepError(f"no leaderboard entry {entry!r} in {self.where}")
        ids = ", ".join(str(f.id) for f in found)
        raise ArithsweepError(f"{entry!r} is ambiguous (entries {ids}); give more of the sha256")

    def count(self, task: str | None = None) -> int:
        if self._engine is None:
            return 0
        stmt = select(func.count()).select_from(Entry)
        if task is not None:
            stmt = stmt.where(Entry.task == task)
        with _guard(self.where), Session(self._engine) as s:
            return s.scalar(stmt)


def _order(e: Any) -> list[Any]:
    return [e.params, e.exact_match.desc(), e.created_at, e.id]


def _ranked(task: str | None, target: float | None) -> sa.Select:
    rank = func.row_number().over(partition_by=Entry.task, order_by=_order(Entry))
    stmt = select(Entry, rank.label("rank"))
    if task is not None:
        stmt = stmt.where(Entry.task == task)
    if target is not None:
        stmt = stmt.where(Entry.exact_match >= target)
    return stmt


def _values(r: VerificationReport, sha: str) -> dict[str, Any]:
    return dict(
        task=r.task, format=r.format, target=r.target, params=r.params,
        model_config=r.model_config, train_config=r.train_config, architecture=r.architecture,
        exact_match=r.exact_match, n_problems=r.n_problems, n_failures=r.n_failures,
        nines=r.nines, wilson_lower=r.wilson_lower, failures=r.failures,
        breakdown=r.breakdown(), suite=r.suite, suite_seed=r.suite_seed,
        suite_size=r.suite_size, checkpoint_path=r.checkpoint_path, sha256=sha,
        mlflow_run_id=r.mlflow_run_id, search_name=r.search_name, trial_id=r.trial_id,
        seed=r.seed, steps=r.steps, wall_time=r.wall_time, device=r.device,
        version=r.version, reproduce=r.reproduce, verified_at=r.verified_at,
    )  # fmt: skip


def _entry_row(entry: Entry, rank: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": rank}
    row.update({c.key: getattr(entry, c.key) for c in Entry.__table__.columns})
    return row


def _distinct(a: float, b: float) -> tuple[str, str]:
    """Format two different numbers with just enough digits that they print differently."""
    for digits in range(2, 17):
        sa_, sb = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if sa_ != sb:
            return sa_, sb
    return repr(a), repr(b)


def open_db(
    url: str | None = None, *, create: bool = True, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> Leaderboard:
    """Open (and migrate) the leaderboard at `url` (default: `default_db_url()`).

    With create=False a missing SQLite file is not created: queries return no rows until the
    first `record`, which creates it.
    """
    return Leaderboard(_normalize_url(url) if url else default_db_url(), create, busy_timeout)
