"""Every command that writes a file or a folder says in one line on stderr, before any long
work, when it cannot write where it was told (a file where a folder must be, a folder where a
file must be, a folder without write permission), naming the option, the path and why; exit 2,
no traceback. The check is `arithsweep.cli.common.check_outputs`.

    .venv/bin/python -m pytest tests/test_output_paths.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run  # tests/ is on sys.path (rootdir import mode)

from arithsweep.cli.common import check_outputs
from arithsweep.core.errors import ArithsweepError

ENTRY = str(Path(__file__).parent.parent / "leaderboard" / "checkpoints" / "add2-216-52b633c5")


@pytest.fixture
def blocker(tmp_path: Path) -> Path:
    """A plain file: nothing can be written under it, even by root (CI's user); and a
    folder whose name looks like a picture's."""
    f = tmp_path / "notadir"
    f.write_text("x")
    (tmp_path / "dir.png").mkdir()
    return f


def one_line(result: tuple[int, str, str], *words: str) -> str:
    code, _, err = result
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def test_ood_png_under_a_file_names_it_instead_of_file_exists(tmp_path, blocker):
    """The reported bug: `ood ... --png notadir/o.png` printed "notadir: File exists" (after
    computing the grid); the real console entry, as a user runs it."""
    out = subprocess.run([sys.executable, "-m", "arithsweep", "ood", ENTRY, "--png",
                          "notadir/o.png"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    line = one_line((out.returncode, out.stdout, out.stderr), "--png notadir/o.png",
                    "notadir is a file, not a folder")
    assert "File exists" not in line and not out.stdout


@pytest.mark.parametrize("args,words", [
    (["ood", ENTRY, "--png", "{p}"], ["--png", "is a folder"]),
    (["inspect", ENTRY, "12+34", "--png", "{f}/x.png"], ["--png", "notadir is a file"]),
    (["inspect", ENTRY, "12+34", "--png", "{p}"], ["--png", "is a folder"]),
    (["train", "--task", "add1", "--out", "{f}"], ["--out", "is a file, not a folder"]),
    (["train", "--task", "add1", "--out", "{f}/run"], ["--out", "notadir is a file"]),
    (["train", "--task", "add1", "--log", "{d}"], ["--log", "is a folder"]),
    (["train", "--task", "add1", "--log", "{d}/no/such/x.log"], ["--log", "does not exist"]),
    (["train", "--task", "add1", "--log", "{f}/x.log"], ["--log", "notadir is a file"]),
    (["export", "--markdown", "{d}"], ["--markdown", "is a folder"]),
    (["export", "--markdown", "{f}/lb.md"], ["--markdown", "notadir is a file"]),
    (["export", "1", "--adderboard", "{f}/sub.py"], ["--adderboard", "notadir is a file"]),
    (["publish", "--dir", "{f}"], ["--dir", "is a file, not a folder"]),
    (["publish", "--dir", "{f}/board"], ["--dir", "notadir is a file"]),
    (["search", "--task", "add3", "--root", "{f}/searches"], ["--root", "notadir is a file"]),
    (["search", "--task", "add3", "--root", "{d}", "--db", "{f}/lb.db"], ["--db", "notadir"]),
    (["search", "--task", "add3", "--root", "{d}", "--mlflow-uri", "sqlite:///{f}/m.db"],
     ["--mlflow-uri", "notadir is a file"]),
    (["verify", ENTRY, "--record", "--db", "{f}/lb.db"], ["--db", "notadir is a file"]),
    (["verify", "--published", "--db", "{f}/lb.db"], ["--db", "notadir is a file"]),
])
def test_an_unwritable_output_is_one_clear_line(capsys, tmp_path, monkeypatch, blocker, args,
                                                words):
    """Each fails in the check, before training, verifying, a grid or a search starts."""
    monkeypatch.setenv("ARITHSWEEP_DB", str(tmp_path / "lb.db"))
    monkeypatch.chdir(tmp_path)
    argv = [a.format(f=blocker, d=tmp_path, p=tmp_path / "dir.png") for a in args]
    line = one_line(run(capsys, *argv), *words)
    assert "cannot write there" in line
    assert blocker.read_text() == "x" and not (tmp_path / "lb.db").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["dir.png", "notadir"]  # no more


def test_an_adderboard_weights_folder_blocked_by_a_file(capsys, tmp_path):
    """export --adderboard F.py also writes F_weights/ beside it."""
    (tmp_path / "sub_weights").write_text("x")
    one_line(run(capsys, "export", "1", "--adderboard", tmp_path / "sub.py", "--db",
                 tmp_path / "lb.db"), "--adderboard's weights folder", "sub_weights",
             "is a file, not a folder")
    assert not (tmp_path / "sub.py").exists() and not (tmp_path / "lb.db").exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_a_read_only_folder_is_named(capsys, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        one_line(run(capsys, "ood", ENTRY, "--png", ro / "o.png"), "permission denied")
        one_line(run(capsys, "train", "--task", "add1", "--out", ro / "run"), "not writable")
    finally:
        ro.chmod(0o700)


def test_check_outputs_passes_what_can_be_written(tmp_path, blocker):
    check_outputs(files={"--png": tmp_path / "new" / "deeper" / "o.png", "--x": None},
                  dirs={"--out": tmp_path / "a" / "b", "--root": tmp_path},
                  appends={"--log": tmp_path / "x.log"},
                  urls={"--db": f"sqlite:///{tmp_path}/lb.db",
                        "--mlflow-uri": "http://127.0.0.1:5000"})
    check_outputs(files={"--png": blocker})  # an existing file is overwritten: fine
    with pytest.raises(ArithsweepError, match=r"^--log .*: cannot write there: the folder "):
        check_outputs(appends={"--log": tmp_path / "new" / "x.log"})  # nothing creates it
    with pytest.raises(ArithsweepError, match="not a regular file"):
        check_outputs(files={"--png": "/dev/null"} if Path("/dev/null").exists() else {})
