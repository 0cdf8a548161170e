"""User mistakes get one `error:` line on stderr and exit 2, never a traceback (subprocess: the
real console entry, as a user runs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import one_error_line, run_cli  # tests/ is on sys.path (rootdir import mode)

ENTRY = str(Path(__file__).parent.parent / "leaderboard" / "checkpoints" / "add2-216-52b633c5")


def test_ask_file_that_is_not_utf8_or_not_a_file(tmp_path):
    bad = tmp_path / "problems.txt"
    bad.write_bytes(b"\xff\xfe1+2\n")
    one_error_line(run_cli("ask", ENTRY, "--file", str(bad)), "not UTF-8")
    one_error_line(run_cli("ask", ENTRY, "--file", str(tmp_path)), "no such file")


@pytest.mark.parametrize("width", ["100000", "1000000"])
def test_params_of_a_huge_model_counts_without_allocating(width):
    out = run_cli("params", "--task", "add3", "--d-model", width, "--heads", "1", "--json")
    assert out.returncode == 0, out.stderr[-500:]
    assert '"params"' in out.stdout


def test_unwritable_outputs_are_one_line(tmp_path):
    """A path under a plain file cannot be written, even by root (CI's user): inspect's PNG,
    export's markdown into a folder, and a `<name>_weights` folder blocked by a file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    one_error_line(run_cli("inspect", ENTRY, "12+34", "--png", str(blocker / "x.png")), "a-file")
    db = tmp_path / "lb.db"
    assert run_cli("verify", ENTRY, "--record", "--db", str(db)).returncode == 0
    one_error_line(run_cli("export", "--markdown", str(tmp_path), "--db", str(db)))
    sha8 = ENTRY[-8:]  # a published entry keeps its number; its weights' prefix names it too
    one_error_line(run_cli("export", sha8, "--adderboard", str(tmp_path / "add2.py"), "--db",
                       str(db)), "add10")
    board = tmp_path / "board"
    (board / "checkpoints").mkdir(parents=True)
    one_error_line(run_cli("export", "--markdown", str(board / "LEADERBOARD.md"), "--db", str(db)),
                   "publish")
    md = tmp_path / "one.md"
    out = run_cli("export", sha8, "--markdown", str(md), "--db", str(db))
    assert out.returncode == 0 and "add2" in md.read_text()


@pytest.mark.parametrize("ck", sorted(Path(ENTRY).parent.glob("add10-*")), ids=lambda p: p.name)
def test_the_published_add10_adders_pass_adderboards_protocol(tmp_path, ck):
    """Each published add10 entry, exported as AdderBoard takes it, answers AdderBoard's own
    problems (the first 200 of its 10,010 here; `export --check` runs all of them)."""
    from arithsweep.core.model.checkpoint import load_checkpoint, sha256_file
    from arithsweep.leaderboard.adderboard import export_adderboard
    from arithsweep.leaderboard.adderboard_check import check_submission

    params = load_checkpoint(ck).params
    row = {"id": 1, "task": "add10", "params": params, "checkpoint_path": str(ck),
           "sha256": sha256_file(ck / "model.safetensors")}
    export_adderboard(row, tmp_path / "add10.py")
    res = check_submission(tmp_path / "add10.py", limit=200)
    assert res.params == params <= 100 and res.total == 200 and res.accuracy >= 0.97


def test_leaderboard_task_filter_is_validated_and_an_empty_match_says_so(tmp_path):
    db = tmp_path / "lb.db"
    assert run_cli("verify", ENTRY, "--record", "--db", str(db)).returncode == 0
    one_error_line(run_cli("leaderboard", "--task", "add0", "--db", str(db)), "unknown task 'add0'")
    out = run_cli("leaderboard", "--task", "ADD2", "--db", str(db), "--json")
    assert out.returncode == 0 and '"add2"' in out.stdout  # names are case-insensitive
    out = run_cli("leaderboard", "--task", "mul2", "--db", str(db))
    said = " ".join(out.stderr.split())  # Rich wraps stderr at 80 columns
    assert out.returncode == 0 and "match task mul2 (1 entries in all)" in said


def test_ood_defaults_fit_a_learned_position_model_and_loops_need_a_looped_one():
    out = run_cli("ood", ENTRY, "--json")
    assert out.returncode == 0, out.stderr
    assert "hold 2-digit operands" in " ".join(out.stderr.split())
    one_error_line(run_cli("ood", ENTRY, "--loops", "2"), "does not loop")


def test_a_missing_database_driver_names_the_package_to_install():
    one_error_line(run_cli("leaderboard", "--db", "mysql://u:p@localhost/x"),
                   "pip install mysqlclient")


def test_publish_to_an_absolute_dir_writes_no_absolute_paths(tmp_path):
    db = tmp_path / "lb.db"
    assert run_cli("verify", ENTRY, "--record", "--db", str(db)).returncode == 0
    dest = tmp_path / "site" / "board"
    assert run_cli("publish", "--dir", str(dest), "--db", str(db)).returncode == 0
    text = (dest / "LEADERBOARD.md").read_text()
    assert str(tmp_path) not in text and "arithsweep verify board/checkpoints/add2-216" in text


def test_bench_on_an_unknown_device_is_one_line():
    one_error_line(run_cli("bench", "--device", "tpu"), "--device", "tpu")


@pytest.mark.parametrize("address,words", [("127.0.0.1:1", ("nothing answers",)),
                                           ("no-port", ("HOST:PORT",))])
def test_search_at_an_address_where_no_ray_listens_is_one_line(tmp_path, address, words):
    """Ray alone retries a refused local port for minutes and logs a line a second."""
    out = run_cli("search", "--task", "add2", "--address", address, "--trials", "1",
                  "--root", str(tmp_path), "--name", "s", "--fresh")
    # the search's own two lines (where it starts, what it searches), then the one error
    *said, last = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert [ln.split()[0] for ln in said] == ["starting", "searching"], out.stderr
    assert last.startswith("error:") and all(w in last for w in words), last
    # nothing ran, so the name is still free for the corrected command
    assert not (tmp_path / "s").exists()


def test_ood_png_without_the_png_suffix_is_refused(tmp_path):
    """matplotlib would write DIR.png while the command reported DIR."""
    one_error_line(run_cli("ood", ENTRY, "--png", str(tmp_path / "heat")), ".png")


def test_a_warning_is_one_line(tmp_path):
    out = run_cli("train", "--task", "sort3", "--steps", "2", "--seeds", "1", "-o",
              str(tmp_path / "run"), "--set", "eval_size=64", "--json")
    assert out.returncode == 0, out.stderr[-800:]
    warned = [ln for ln in out.stderr.splitlines() if "falls back" in ln]
    assert warned and all(ln.startswith("warning: ") for ln in warned), out.stderr
    assert "UserWarning" not in out.stderr and "self.streams" not in out.stderr


def test_train_config_that_is_a_folder_says_so(tmp_path):
    """A checkpoint folder handed to --config: 'no such file' would send the user looking for a
    typo; the line says it is a folder and where the config inside is."""
    one_error_line(run_cli("train", "--config", ENTRY), "a folder", "config.json")
    one_error_line(run_cli("train", "--config", str(tmp_path)), "a folder")


def test_a_batch_or_pack_too_large_for_memory_is_one_line():
    """A batch of 10^11 asked torch for 3.2 TB and printed its allocator's traceback; 100,000
    seeds grew to 14 GB over five minutes before the first step."""
    one_error_line(run_cli("train", "--task", "add3", "--set", "batch_size=100000000000",
                       "--set", "steps=1"), "out of memory", "batch_size")
    one_error_line(run_cli("train", "--task", "add3", "--seeds", "100000"), "seeds=100000",
                   "at most 1024")


def test_a_file_that_is_no_config_names_a_few_of_its_sections(tmp_path):
    junk = tmp_path / "junk.yaml"
    junk.write_text("".join(f"line{i}: {i}\n" for i in range(30)))
    out = run_cli("params", "--config", str(junk))
    one_error_line(out, "unknown section(s) 'line0'", "and 25 more")
    assert len(out.stderr) < 300


def test_an_absent_database_says_so_and_points_at_the_published_models(tmp_path):
    """A fresh clone has leaderboard/checkpoints/ but no database (it is not committed):
    `leaderboard` said "no entries" as if nothing were published."""
    db = tmp_path / "nowhere" / "lb.db"
    out = subprocess.run([sys.executable, "-m", "arithsweep", "leaderboard", "--db", str(db)],
                         capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent.parent)
    assert out.returncode == 0 and "Traceback" not in out.stderr
    said = " ".join(out.stderr.split())
    # Rich wraps stderr at 80 columns, inside a long path too: compare without whitespace
    assert "".join(f"no leaderboard database at {db} yet".split()) in "".join(said.split())
    assert "leaderboard/LEADERBOARD.md" in said and "leaderboard/checkpoints/NAME" in said
    assert not db.parent.exists()  # a reader creates nothing


def test_a_problem_that_starts_with_a_minus_says_how_to_pass_it():
    out = run_cli("ask", ENTRY, "-1+2")
    one_error_line(out, "'-1+2' reads as an option", "-- -1+2")
    one_error_line(run_cli("ask", ENTRY, "--", "-1+2"), "out of range")


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200),
                                          ("2h15m", 8100), ("1d 2h", 93600), ("1.5h", 5400),
                                          ("0", 0), (None, 0)])
def test_durations_read_as_people_write_them(text, seconds):
    from arithsweep.cli.search_cmds import parse_duration

    assert parse_duration(text, "--time-budget") == seconds


@pytest.mark.parametrize("text,says", [("15m2h", "largest first"), ("2h2h", "each unit once"),
                                       ("2x", "expected a duration"), ("h", "expected")])
def test_a_duration_it_cannot_read_is_one_line(tmp_path, text, says):
    out = run_cli("search", "--task", "add2", "--time-budget", text, "--root", str(tmp_path))
    one_error_line(out, says)
    assert not any(tmp_path.iterdir())  # refused before anything was made
