"""Leaderboard schema migrations: ordered, decorated functions, recorded in `_migrations`.

A migration is a function of an open Connection named `m<NNN>_<what>`, registered with the
`@migration` decorator (as simonw's `llm` does it). `migrate(engine)` runs, in registration
order, each one the database has not recorded yet, each in its own transaction together with
the row that records it (id NNN, name "m<NNN>_<what>", time), so a failure leaves the database
at the last migration that finished. The ids and names are the ones the first arithsweep
releases recorded, so databases they created upgrade in place. Imports neither torch, ray nor
mlflow: every leaderboard command opens the database through `migrate`.

    python -c "from arithsweep.leaderboard.db import default_db_url, make_engine; \
        from arithsweep.leaderboard.migrations import migrate; \
        print(migrate(make_engine(default_db_url())))"

Adding one: append a function below, numbered one past the last. Never edit, renumber or
remove one that has shipped; each spells out its own DDL (never `Entry`'s current table) so
that a database created by any older version ends up with the same schema as a new one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy import JSON, BigInteger, Float, Index, Integer, String, Text, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.schema import CreateColumn

from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.db import where, writer
from arithsweep.leaderboard.schema import AppliedMigration, utc_timestamp

MigrationFn = Callable[[Connection], None]
_NAME = re.compile(r"m(\d+)_\w+")


def migration_id(fn: Callable[..., object]) -> tuple[int, str]:
    """(number, recorded name) of a migration: `_m003_x` and `m003_x` are both (3, "m003_x")."""
    name = fn.__name__.lstrip("_")
    m = _NAME.fullmatch(name)
    if m is None:
        raise ValueError(f"migration {fn.__name__!r}: name it m<NNN>_<what>, e.g. m004_add_x")
    return int(m.group(1)), name


class Migrations:
    """An ordered registry of migrations; `register` is the decorator.

    Registration order is run order, and each migration's number must be one past the previous
    one's, so the order in the file, the numbers in the names and the ids in `_migrations`
    cannot disagree. Breaking that is a bug in arithsweep, reported when the module is imported.
    """

    def __init__(self) -> None:
        self._fns: list[MigrationFn] = []

    def register(self, fn: MigrationFn) -> MigrationFn:
        num, name = migration_id(fn)
        if num != len(self._fns) + 1:
            raise ValueError(f"migration {name} registered as number {len(self._fns) + 1}")
        self._fns.append(fn)
        return fn

    def __iter__(self) -> Iterator[MigrationFn]:
        return iter(self._fns)

    def __len__(self) -> int:
        return len(self._fns)

    def __getitem__(self, i: int) -> MigrationFn:
        return self._fns[i]


MIGRATIONS = Migrations()
migration = MIGRATIONS.register


def applied(conn: Connection) -> set[int] | None:
    """Ids of applied migrations, or None when the database has no `_migrations` table."""
    if not sa.inspect(conn).has_table(AppliedMigration.__tablename__):
        return None
    return set(conn.scalars(select(AppliedMigration.id)))


def migrate(engine: Engine, migrations: Iterable[MigrationFn] = MIGRATIONS) -> list[str]:
    """Apply the migrations not recorded yet, in order, one transaction each; return their names.

    An up-to-date database costs one read and takes no write lock.
    """
    with engine.connect() as conn:
        done = applied(conn) or set()
    pending = [fn for fn in migrations if migration_id(fn)[0] not in done]
    names: list[str] = []
    for fn in pending:
        num, name = migration_id(fn)
        with writer(engine).begin() as conn:
            AppliedMigration.__table__.create(conn, checkfirst=True)
            if num in (applied(conn) or set()):
                continue  # re-read under the write lock: another process applied it meanwhile
            if num == 1 and sa.inspect(conn).has_table("entries"):
                # someone else's `entries` table: refuse rather than alter it (the rollback
                # also drops the `_migrations` table made above)
                raise ArithsweepError(f"{where(engine)} is not a leaderboard database")
            fn(conn)
            conn.execute(sa.insert(AppliedMigration).values(
                id=num, name=name, applied_at=utc_timestamp()))
        names.append(name)
    return names


def add_column(conn: Connection, table: str, column: sa.Column) -> None:
    """ALTER TABLE ... ADD COLUMN, with the column's type spelled for this database."""
    sa.Table(table, sa.MetaData(), column)  # CreateColumn needs the column attached to a table
    spec = CreateColumn(column).compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {spec}")


# --- the migrations: append only ---------------------------------------------------------------


@migration
def m001_initial(conn: Connection) -> None:
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


@migration
def m002_index_task_params(conn: Connection) -> None:
    # The leaderboard query is "fewest params for this task": serve it from an index.
    t = sa.Table("entries", sa.MetaData(), sa.Column("task"), sa.Column("params"))
    Index("ix_entries_task_params", t.c.task, t.c.params).create(conn)


@migration
def m003_suite_size_verified_at(conn: Connection) -> None:
    # The suite's size belongs with its name and seed; verified_at changes when the same
    # checkpoint is re-verified while created_at keeps the first recording.
    add_column(conn, "entries", sa.Column("suite_size", BigInteger))
    add_column(conn, "entries", sa.Column("verified_at", String(40)))
