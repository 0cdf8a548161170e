"""The verified leaderboard: the `Leaderboard` class (writes and queries) and `open_db`.

Entries are only ever written from a qualifying `VerificationReport`; the same checkpoint
(sha256) twice is one entry, updated with the newer verification (its retrain command kept:
that one trained it). The default database is
`leaderboard/leaderboard.db` under the current directory, overridden by `ARITHSWEEP_DB` (an
SQLAlchemy URL, so a team can use PostgreSQL, or a plain path). Engines, URLs and SQLite setup
live in `db.py`, the ORM classes in `schema.py`, the migrations in `migrations.py`. Imports
neither torch, ray nor mlflow: `arithsweep leaderboard` must answer in well under a second.

    python -c "from arithsweep.leaderboard.board import open_db; \
        print(open_db(create=False).query())"
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.db import (
    DEFAULT_BUSY_TIMEOUT,
    default_db_url,
    guard,
    make_engine,
    normalize_url,
    sqlite_path,
    where,
    writer,
)
from arithsweep.leaderboard.migrations import migrate
from arithsweep.leaderboard.report import VerificationReport
from arithsweep.leaderboard.schema import Entry, utc_timestamp

# What callers outside the leaderboard wing use; the plumbing has its own modules.
__all__ = ["DEFAULT_BUSY_TIMEOUT", "Leaderboard", "default_db_url", "open_db"]

# Kept when an entry is recorded again: provenance, not a measurement. Today's rule for a
# checkpoint's command (a `--set stop_at` for a model stopped early) can differ from the one
# that was run, and only the run one is known to give these weights.
KEPT_ON_RERECORD = ("reproduce",)


class Leaderboard:
    """Verified entries in one database; thread-safe (each call uses its own session)."""

    def __init__(self, url: str, create: bool = True, busy_timeout: float = DEFAULT_BUSY_TIMEOUT):
        self.url = url
        self.where = where(url)
        self._busy_timeout = busy_timeout
        self._engine: Engine | None = None
        path = sqlite_path(url)
        if create or path is None or path.exists():
            self._connect(create)

    def _connect(self, create: bool) -> Engine:
        path = sqlite_path(self.url)
        if create and path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ArithsweepError(f"cannot create {path.parent}: {e.strerror}") from e
        engine = make_engine(self.url, self._busy_timeout)
        with guard(self.where):
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

    @property
    def exists(self) -> bool:
        """False for a reader opened on a SQLite file that is not there (or holds no
        leaderboard): it answers no rows."""
        return self._engine is not None

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> Leaderboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writes ----------------------------------------------------------------------------

    def record(self, report: VerificationReport,
               entry_id: int | None = None) -> tuple[dict[str, Any], bool]:
        """Store a qualifying report; returns (the entry as a row dict, created?). A new entry
        takes `entry_id` (its published number) when no other entry has it."""
        if isinstance(report, dict):
            report = VerificationReport.from_dict(report)
        if not report.qualifies:
            em, target = _distinct(report.exact_match, report.target)
            what = (f"exact match {em}" if report.exact_match < report.target
                    else "; ".join(report.shortfalls()))  # an operation of a mixed task
            raise ArithsweepError(f"not recorded: {what} is below the target {target}")
        sha = str(report.sha256).lower()
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ArithsweepError(f"not recorded: {report.sha256!r} is not a sha256 hex digest")
        values = _values(report, sha)
        engine = self._engine or self._connect(create=True)
        with guard(self.where):
            for attempt in (1, 2):
                try:
                    return self._upsert(engine, sha, values, entry_id)
                except IntegrityError:
                    # Another writer inserted the same sha between our SELECT and INSERT
                    # (possible on servers without BEGIN IMMEDIATE): update it instead.
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _upsert(self, engine: Engine, sha: str, values: dict[str, Any],
                entry_id: int | None = None) -> tuple[dict, bool]:
        with Session(writer(engine), expire_on_commit=False) as s, s.begin():
            entry = s.scalars(select(Entry).where(Entry.sha256 == sha)).one_or_none()
            created = entry is None
            if created:
                entry = Entry(created_at=utc_timestamp(), **values)
                if isinstance(entry_id, int) and entry_id > 0 and s.get(Entry, entry_id) is None:
                    entry.id = entry_id
                s.add(entry)
            else:  # measured again; its retrain command is what trained it, so it stays
                for k, v in values.items():
                    if k not in KEPT_ON_RERECORD or not getattr(entry, k):
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
        with guard(self.where), Session(self._engine) as s:
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
            with guard(self.where), Session(self._engine) as s:
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
        with guard(self.where), Session(self._engine) as s:
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
    return Leaderboard(normalize_url(url) if url else default_db_url(), create, busy_timeout)
