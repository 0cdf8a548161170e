"""User mistakes get one `error:` line on stderr and exit 2, never a traceback (subprocess: the
real console entry, as a user runs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ENTRY = str(Path(__file__).parent.parent / "leaderboard" / "checkpoints" / "add2-216-52b633c5")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arithsweep", *args], capture_output=True,
                          text=True, timeout=180)


def one_error_line(out: subprocess.CompletedProcess, *words: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), out.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_ask_file_that_is_not_utf8_or_not_a_file(tmp_path):
    bad = tmp_path / "problems.txt"
    bad.write_bytes(b"\xff\xfe1+2\n")
    one_error_line(run("ask", ENTRY, "--file", str(bad)), "not UTF-8")
    one_error_line(run("ask", ENTRY, "--file", str(tmp_path)), "no such file")


@pytest.mark.parametrize("width", ["100000", "1000000"])
def test_params_of_a_huge_model_counts_without_allocating(width):
    out = run("params", "--task", "add3", "--d-model", width, "--heads", "1", "--json")
    assert out.returncode == 0, out.stderr[-500:]
    assert '"params"' in out.stdout
