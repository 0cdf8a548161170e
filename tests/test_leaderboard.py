"""The leaderboard database (schema, migrations, writes, queries, concurrency, bad files) and
its Rich renderings; every test uses its own SQLite file under tmp_path. The string formats
and `publish` are tested in test_publish.py.

    .venv/bin/python -m pytest tests/test_leaderboard.py -q
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from test_report import make_report  # tests/ is on sys.path (pytest's rootdir import mode)

import arithsweep.leaderboard.board as lbmod
from arithsweep.cli.render import entry_detail, rich_table
from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.board import default_db_url, open_db
from arithsweep.leaderboard.db import make_engine
from arithsweep.leaderboard.migrations import MIGRATIONS, Migrations, migrate, migration_id
from arithsweep.leaderboard.schema import Entry

ROOT = Path(__file__).resolve().parents[1]
ENTRY_COLUMNS = {
    "id", "task", "format", "target", "params", "model_config", "train_config", "architecture",
    "exact_match", "n_problems", "n_failures", "nines", "wilson_lower", "failures", "breakdown",
    "suite", "suite_seed", "suite_size", "checkpoint_path", "sha256", "mlflow_run_id",
    "search_name", "trial_id", "seed", "steps", "wall_time", "device", "version", "reproduce",
    "created_at", "verified_at",
}  # fmt: skip


def sha(i: int) -> str:
    return f"{i:064x}"


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'lb.db'}"


def test_no_heavy_imports():
    code = (
        "import arithsweep.leaderboard.board, arithsweep.cli.render, "
        "arithsweep.leaderboard.report, arithsweep.leaderboard.publish; import sys; "
        "assert not {'torch','ray','mlflow'} & set(sys.modules), "
        "{'torch','ray','mlflow'} & set(sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env, timeout=60)


def test_fresh_database_schema_and_migrations(url):
    lb = open_db(url)
    insp = sa.inspect(lb._engine)
    assert {c["name"] for c in insp.get_columns("entries")} == ENTRY_COLUMNS
    assert set(Entry.__table__.columns.keys()) == ENTRY_COLUMNS  # the ORM matches the DDL
    assert any(ix["column_names"] == ["task", "params"] for ix in insp.get_indexes("entries"))
    with lb._engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, name FROM _migrations ORDER BY id")).all()
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    names = [migration_id(fn)[1] for fn in MIGRATIONS]
    assert [r.name for r in rows] == names and len(names) >= 3
    assert [r.id for r in rows] == list(range(1, len(names) + 1))
    assert mode == "wal"
    assert migrate(lb._engine) == []  # a second run is a no-op
    lb.close()
    assert open_db(url).count() == 0  # and so is reopening


# What the first releases (a hand-kept MIGRATIONS list in db.py) wrote on SQLite, copied from
# the sqlite_master of a database they made: such a database must upgrade in place.
OLD_DDL = [
    "CREATE TABLE _migrations (id INTEGER NOT NULL, name VARCHAR(100) NOT NULL, "
    "applied_at VARCHAR(40) NOT NULL, PRIMARY KEY (id))",
    "CREATE TABLE entries (id INTEGER NOT NULL, task VARCHAR(64) NOT NULL, format VARCHAR(64) "
    "NOT NULL, target FLOAT NOT NULL, params INTEGER NOT NULL, model_config JSON NOT NULL, "
    "train_config JSON NOT NULL, architecture TEXT NOT NULL, exact_match FLOAT NOT NULL, "
    "n_problems BIGINT NOT NULL, n_failures BIGINT NOT NULL, nines INTEGER NOT NULL, "
    "wilson_lower FLOAT NOT NULL, failures JSON NOT NULL, breakdown JSON NOT NULL, suite "
    "VARCHAR(32) NOT NULL, suite_seed BIGINT NOT NULL, checkpoint_path TEXT NOT NULL, sha256 "
    "VARCHAR(64) NOT NULL, mlflow_run_id VARCHAR(64), search_name TEXT, trial_id TEXT, seed "
    "BIGINT, steps BIGINT, wall_time FLOAT, device VARCHAR(64), version VARCHAR(32) NOT NULL, "
    "reproduce TEXT NOT NULL, created_at VARCHAR(40) NOT NULL, PRIMARY KEY (id), "
    "CONSTRAINT uq_entries_sha256 UNIQUE (sha256))",
]
OLD_STEPS = {2: ["CREATE INDEX ix_entries_task_params ON entries (task, params)"],
             3: ["ALTER TABLE entries ADD COLUMN suite_size BIGINT",
                 "ALTER TABLE entries ADD COLUMN verified_at VARCHAR(40)"]}  # fmt: skip
OLD_NAMES = ["m001_initial", "m002_index_task_params", "m003_suite_size_verified_at"]


def old_database(path: Path, applied: int) -> None:
    """A database as the old migration code left it after its first `applied` migrations."""
    values = lbmod._values(make_report(), sha(7))
    del values["suite_size"], values["verified_at"]
    values["created_at"] = "2020-01-01T00:00:00.000000+00:00"
    values = {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in values.items()}
    with sqlite3.connect(path) as conn:
        for stmt in OLD_DDL + [q for i in range(2, applied + 1) for q in OLD_STEPS[i]]:
            conn.execute(stmt)
        conn.executemany("INSERT INTO _migrations VALUES (?, ?, '2020')",
                         list(enumerate(OLD_NAMES[:applied], 1)))
        conn.execute(f"INSERT INTO entries ({', '.join(values)}) "
                     f"VALUES ({', '.join('?' * len(values))})", list(values.values()))
    conn.close()


@pytest.mark.parametrize("applied", [1, 2, 3])
def test_database_from_the_old_migration_code_upgrades(tmp_path, applied):
    path = tmp_path / "old.db"
    old_database(path, applied)
    engine = make_engine(f"sqlite:///{path}")
    assert migrate(engine) == OLD_NAMES[applied:]  # only what the old code had not applied
    assert migrate(engine) == []
    with engine.connect() as conn:
        recorded = conn.execute(sa.text("SELECT id, name, applied_at FROM _migrations")).all()
        insp = sa.inspect(conn)
        assert {c["name"] for c in insp.get_columns("entries")} == ENTRY_COLUMNS
        assert any(ix["name"] == "ix_entries_task_params" for ix in insp.get_indexes("entries"))
    engine.dispose()
    assert [(r.id, r.name) for r in recorded] == list(enumerate(OLD_NAMES, 1))
    assert [r.applied_at for r in recorded][:applied] == ["2020"] * applied  # left alone
    lb = open_db(str(path))
    (row,) = lb.query()
    assert row["sha256"] == sha(7) and row["suite_size"] is None and row["params"] == 777
    lb.record(make_report(sha256=sha(8), params=5))
    assert [r["sha256"] for r in lb.query(all=True)] == [sha(8), sha(7)]


def test_migrations_register_and_run_in_order(url):
    assert [migration_id(fn) for fn in MIGRATIONS][:3] == list(enumerate(OLD_NAMES, 1))
    reg, ran = Migrations(), []

    @reg.register
    def m001_first(conn):
        ran.append(1)
        conn.exec_driver_sql("CREATE TABLE a (x INTEGER)")

    @reg.register
    def _m002_second(conn):  # a leading underscore is not part of the recorded name
        ran.append(2)
        conn.exec_driver_sql("INSERT INTO a VALUES (2)")

    def m004_skips_one(conn): ...

    def add_x(conn): ...

    with pytest.raises(ValueError, match="m004_skips_one registered as number 3"):
        reg.register(m004_skips_one)
    with pytest.raises(ValueError, match="m<NNN>_<what>"):
        reg.register(add_x)
    assert [fn.__name__ for fn in reg] == ["m001_first", "_m002_second"]
    engine = make_engine(url)
    assert migrate(engine, reg) == ["m001_first", "m002_second"] and ran == [1, 2]
    assert migrate(engine, reg) == [] and ran == [1, 2]  # idempotent: nothing runs twice
    with engine.connect() as conn:
        names = conn.exec_driver_sql("SELECT name FROM _migrations ORDER BY id").scalars().all()
    assert names == ["m001_first", "m002_second"]
    engine.dispose()


def test_each_migration_is_its_own_transaction(url):
    reg, crash = Migrations(), [True]

    @reg.register
    def m001_a(conn):
        conn.exec_driver_sql("CREATE TABLE a (x)")

    @reg.register
    def m002_b(conn):
        conn.exec_driver_sql("CREATE TABLE b (x)")
        if crash:
            raise RuntimeError("crash halfway through m002")

    engine = make_engine(url)
    with pytest.raises(RuntimeError, match="halfway"):
        migrate(engine, reg)
    with engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
        done = conn.exec_driver_sql("SELECT id, name FROM _migrations").all()
    assert "a" in tables and "b" not in tables and [tuple(r) for r in done] == [(1, "m001_a")]
    crash.clear()
    assert migrate(engine, reg) == ["m002_b"]  # m001 is not run again
    engine.dispose()


def test_record_refuses_non_qualifying_and_writes_nothing(url):
    lb = open_db(url)
    with pytest.raises(ArithsweepError, match="exact match 0.87 is below the target 0.99"):
        lb.record(make_report(exact_match=0.87))
    with pytest.raises(ArithsweepError, match="0.98999 is below the target 0.99"):
        lb.record(make_report(exact_match=0.98999))
    with pytest.raises(ArithsweepError, match="sha256"):
        lb.record(make_report(sha256="not-a-hash"))
    assert lb.count() == 0


def test_record_is_one_transaction(url, monkeypatch):
    lb = open_db(url)

    def boom(*a, **k):
        raise RuntimeError("crash after the INSERT, before the commit")

    monkeypatch.setattr(lbmod, "_entry_row", boom)
    with pytest.raises(RuntimeError):
        lb.record(make_report())
    monkeypatch.undo()
    assert lb.count() == 0


def test_same_checkpoint_twice_is_one_entry(url):
    lb = open_db(url)
    first, created = lb.record(make_report(sha256=sha(1).upper(), exact_match=0.995))
    assert created and first["rank"] == 1 and first["sha256"] == sha(1)
    again, created = lb.record(make_report(sha256=sha(1), exact_match=0.999, suite_size=5))
    assert not created
    assert (again["id"], again["created_at"]) == (first["id"], first["created_at"])
    assert again["exact_match"] == 0.999 and again["suite_size"] == 5
    assert lb.count() == 1
    row = lb.get(first["id"])
    assert row["breakdown"]["by_carry"]["S1"] == {"n": 400, "correct": 399}
    assert row["model_config"] == {"d_model": 7, "n_layers": 1}
    assert row["failures"][0]["got"] == 578


def test_query_order_one_per_task_limit_target(url):
    lb = open_db(url)
    for i, (task, params, em) in enumerate([
        ("add3", 900, 1.0), ("add3", 500, 0.995), ("add3", 500, 0.999), ("add3", 700, 0.9999),
        ("add10", 2000, 0.99), ("add10", 1500, 0.995),
    ]):  # fmt: skip
        lb.record(make_report(sha256=sha(i), task=task, params=params, exact_match=em))
    rows = lb.query(task="add3", all=True)
    assert [(r["params"], r["exact_match"]) for r in rows] == [
        (500, 0.999), (500, 0.995), (700, 0.9999), (900, 1.0)]  # fmt: skip
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    best = lb.query()
    assert [(r["task"], r["params"], r["rank"]) for r in best] == [
        ("add3", 500, 1), ("add10", 1500, 1)]  # fmt: skip
    assert [r["params"] for r in lb.query(task="add3", all=True, limit=2)] == [500, 500]
    strict = lb.query(task="add3", target=0.999, all=True)
    assert [(r["params"], r["rank"]) for r in strict] == [(500, 1), (700, 2), (900, 3)]
    assert [r["params"] for r in lb.query(target=0.9999)] == [700]
    assert lb.query(task="nope") == []
    # Ties on params and exact match: the earlier entry first.
    lb.record(make_report(sha256=sha(99), task="add3", params=500, exact_match=0.999))
    assert [r["sha256"] for r in lb.query(task="add3", all=True, limit=2)] == [sha(2), sha(99)]
    with pytest.raises(ArithsweepError, match="target"):
        lb.query(target=1.5)
    with pytest.raises(ArithsweepError, match="limit"):
        lb.query(limit=0)


def test_get_by_id_and_sha_prefix(url):
    lb = open_db(url)
    a, _ = lb.record(make_report(sha256="abcdef01" + "0" * 56))
    b, _ = lb.record(make_report(sha256="abcdef02" + "0" * 56))
    assert lb.get(str(a["id"]))["sha256"] == a["sha256"]
    assert lb.get(b["id"])["id"] == b["id"]
    assert lb.get("ABCDEF02")["id"] == b["id"]
    assert lb.get("sha256:abcdef01")["id"] == a["id"]
    with pytest.raises(ArithsweepError, match="ambiguous"):
        lb.get("abcdef")
    with pytest.raises(ArithsweepError, match="no leaderboard entry"):
        lb.get("999")
    with pytest.raises(ArithsweepError, match="no leaderboard entry"):
        lb.get("ffffff")
    with pytest.raises(ArithsweepError, match="neither"):
        lb.get("abc")  # too short for a prefix, not an id


def test_reader_does_not_create_the_database(tmp_path):
    path = tmp_path / "sub" / "lb.db"
    lb = open_db(str(path), create=False)
    assert lb.query() == [] and lb.count() == 0 and not path.parent.exists()
    with pytest.raises(ArithsweepError, match="no leaderboard entry"):
        lb.get("1")
    lb.record(make_report())  # the first write creates it
    assert path.exists() and open_db(str(path), create=False).count() == 1


def test_default_db_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARITHSWEEP_DB", raising=False)
    assert default_db_url() == f"sqlite:///{tmp_path}/leaderboard/leaderboard.db"
    monkeypatch.setenv("ARITHSWEEP_DB", "x/my.db")
    assert default_db_url() == f"sqlite:///{tmp_path}/x/my.db"
    monkeypatch.setenv("ARITHSWEEP_DB", "sqlite:///rel.db")
    assert default_db_url() == f"sqlite:///{tmp_path}/rel.db"
    monkeypatch.setenv("ARITHSWEEP_DB", "postgresql://u:pw@host/db")
    assert default_db_url() == "postgresql://u:pw@host/db"
    monkeypatch.setenv("ARITHSWEEP_DB", "x/my.db")
    open_db().record(make_report())
    assert (tmp_path / "x" / "my.db").exists()


def test_garbage_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_bytes(b"this is not a database\n" * 200)
    for create in (True, False):
        with pytest.raises(ArithsweepError, match=f"{bad} is not a leaderboard database"):
            open_db(str(bad), create=create)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE entries (x)")
    with pytest.raises(ArithsweepError, match="not a leaderboard database"):
        open_db(str(foreign))
    with pytest.raises(ArithsweepError, match="cannot open"):
        open_db(str(tmp_path), create=True)  # a directory


def test_other_tables_in_the_same_file_are_fine(tmp_path):
    shared = tmp_path / "shared.db"
    with sqlite3.connect(shared) as conn:
        conn.execute("CREATE TABLE studies (study_id INTEGER)")  # as Optuna would
    assert open_db(str(shared), create=False).query() == []
    with sqlite3.connect(shared) as conn:  # the reader wrote nothing
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["studies"]
    open_db(str(shared)).record(make_report())
    assert open_db(str(shared), create=False).count() == 1


def test_locked_database_is_a_clear_error(url, tmp_path):
    open_db(url).record(make_report(sha256=sha(1)))
    holder = sqlite3.connect(tmp_path / "lb.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        lb = open_db(url, busy_timeout=0.2)
        assert lb.count() == 1  # WAL: reading still works
        with pytest.raises(ArithsweepError, match="is locked by another writer; try again"):
            lb.record(make_report(sha256=sha(2)))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    lb.record(make_report(sha256=sha(2)))
    assert lb.count() == 2


WRITER = textwrap.dedent("""
    import sys
    from arithsweep.leaderboard.board import open_db
    from test_report import make_report
    lb = open_db(sys.argv[1])
    n, lockstep = int(sys.argv[2]), int(sys.argv[3])
    for i in range(n):
        lb.record(make_report(sha256=f"{i:064x}", params=100 + i))
        if i < lockstep:  # say it is committed, then wait until the reader has looked
            print(i, flush=True)
            sys.stdin.readline()
""")


def test_concurrent_reader_and_writer_processes(url):
    """A reader in another process sees each committed entry and never a count going back.

    The first half runs in lockstep (the writer waits for the reader after each commit),
    so the intermediate states are observed however the machine schedules the two; the
    second half runs free, the reader polling while the writer commits.
    """
    open_db(url).close()
    n, lockstep = 40, 20
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, url, str(n), str(lockstep)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    reader = open_db(url, create=False)
    seen = [0]
    for i in range(lockstep):
        line = writer.stdout.readline()
        assert line.strip() == str(i), writer.stderr.read()
        assert reader.count() == i + 1 and len(reader.query(all=True)) == i + 1
        seen.append(i + 1)
        writer.stdin.write("\n")
        writer.stdin.flush()
    while writer.poll() is None:
        count = len(reader.query(all=True))
        assert count >= seen[-1], f"count went backwards: {seen[-1]} -> {count}"
        seen.append(count)
        time.sleep(0.005)  # 2 shared cores: leave the writer room
    assert writer.returncode == 0, writer.stderr.read()
    assert reader.count() == n and len(reader.query(all=True)) == n


def test_concurrent_writers_same_checkpoints(url):
    open_db(url).close()
    errors: list[BaseException] = []

    def write():
        lb = open_db(url)
        try:
            for i in range(15):
                lb.record(make_report(sha256=sha(i), params=200 + i))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert open_db(url).count() == 15


def test_rich_renderings_contain_the_rows(url):
    lb = open_db(url)
    lb.record(make_report(sha256=sha(1), params=777, exact_match=0.9999999, target=0.99))
    lb.record(make_report(sha256=sha(2), task="add10", params=1234, architecture="a|b"))
    rows = lb.query()
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(rich_table(rows))
    console.print(entry_detail(lb.get(sha(1))))
    text = console.export_text()
    assert "add10" in text and "1234" in text and "99.9999%" in text
    for needle in ("By longest carry chain", "chain 1", "3x3", sha(1), "/tmp/ck/best",
                   "arithsweep train", "123+456", "Model config"):  # fmt: skip
        assert needle in text
