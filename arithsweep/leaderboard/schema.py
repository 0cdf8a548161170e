"""The leaderboard's ORM schema: `Entry` (one verified checkpoint) and `AppliedMigration`.

These classes describe the tables as they are after every migration in
`arithsweep.leaderboard.migrations` has run (the migrations spell out their own DDL, so that a
database created by an older arithsweep upgrades to exactly this; tests check the two agree).
Imports neither torch, ray nor mlflow: it sits on the fast CLI path.

    python -c "from arithsweep.leaderboard.schema import Entry; print(Entry.__table__.c.keys())"
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utc_timestamp() -> str:
    """Now as fixed-width ISO-8601 UTC (microseconds), the format of every *_at column.

    Fixed width so that string order is time order in any database (the ranking breaks ties
    on created_at).
    """
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
    """One row per migration applied: its number, its name ("m001_initial") and when.

    The table name and columns are what the first arithsweep releases wrote; they never change,
    since this table is how any later version tells what an existing database already has.
    """

    __tablename__ = "_migrations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(100))
    applied_at: Mapped[str] = mapped_column(String(40))
