"""The leaderboard database (schema, migrations, writes, queries, concurrency, bad files) and
its renderings; every test uses its own SQLite file under tmp_path.

    .venv/bin/python -m pytest tests/test_leaderboard.py -q
"""

from __future__ import annotations

import csv
import io
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
from arithsweep.cli.render import entry_detail, rich_table, to_csv, to_json, to_markdown
from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.board import MIGRATIONS, Entry, default_db_url, migrate, open_db

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
        "arithsweep.leaderboard.report; import sys; "
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
    names = [fn.__name__.lstrip("_") for fn in MIGRATIONS]
    assert [r.name for r in rows] == names and len(names) >= 3
    assert [r.id for r in rows] == list(range(1, len(names) + 1))
    assert mode == "wal"
    assert migrate(lb._engine) == []  # a second run is a no-op
    lb.close()
    assert open_db(url).count() == 0  # and so is reopening


def test_old_database_is_upgraded_in_place(url):
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a database as version 001 left it, with one entry
        lbmod.AppliedMigration.__table__.create(conn)
        lbmod._m001_initial(conn)
        conn.execute(sa.insert(lbmod.AppliedMigration).values(id=1, name="m001_initial",
                                                               applied_at="2020"))  # fmt: skip
        values = lbmod._values(make_report(), sha(7))
        del values["suite_size"], values["verified_at"]
        values["created_at"] = "2020-01-01T00:00:00.000000+00:00"
        old_entries = sa.Table("entries", sa.MetaData(), autoload_with=conn)
        conn.execute(sa.insert(old_entries).values(**values))
    engine.dispose()
    lb = open_db(url)
    (row,) = lb.query()
    assert row["sha256"] == sha(7) and row["suite_size"] is None and row["params"] == 777


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
    for i in range(int(sys.argv[2])):
        lb.record(make_report(sha256=f"{i:064x}", params=100 + i))
""")


def test_concurrent_reader_and_writer_processes(url):
    open_db(url).close()
    n = 40
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, url, str(n)], env=env,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    reader = open_db(url, create=False)
    seen = [0]
    while writer.poll() is None:
        count = len(reader.query(all=True))
        assert count >= seen[-1], f"count went backwards: {seen[-1]} -> {count}"
        seen.append(count)
        time.sleep(0.005)  # 2 shared cores: leave the writer room
    assert writer.returncode == 0, writer.stderr.read()
    assert reader.count() == n and len(reader.query(all=True)) == n
    assert len(seen) > 2


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


def test_renderings_contain_the_rows(url):
    lb = open_db(url)
    lb.record(make_report(sha256=sha(1), params=777, exact_match=0.9999999, target=0.99))
    lb.record(make_report(sha256=sha(2), task="add10", params=1234, architecture="a|b"))
    rows = lb.query()
    md = to_markdown(rows, title="Smallest verified models")
    assert md.startswith("## Smallest verified models")
    assert "| rank | task | params | exact match | nines |" in md
    assert "| 1 | add3 | 777 | 99.9999% |" in md  # rounded down, never 100%
    assert "a\\|b" in md and "1,000" in md
    assert "_No verified entries" in to_markdown([])
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert [r["params"] for r in parsed] == ["777", "1234"]
    assert json.loads(parsed[0]["model_config"]) == {"d_model": 7, "n_layers": 1}
    assert json.loads(to_json(rows)) == json.loads(json.dumps(rows))
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(rich_table(rows))
    console.print(entry_detail(lb.get(sha(1))))
    text = console.export_text()
    assert "add10" in text and "1234" in text and "99.9999%" in text
    for needle in ("By carry class", "S1", "3x3", sha(1), "/tmp/ck/best", "arithsweep train",
                   "123+456", "Model config"):  # fmt: skip
        assert needle in text
