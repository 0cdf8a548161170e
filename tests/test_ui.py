"""`arithsweep ui`: the server's whole process tree ends on SIGTERM, a taken port is refused in
one line (real optuna-dashboard on a real Optuna SQLite study; processes read from /proc)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _tree(pid: int) -> set[int]:
    kids, out, todo = _children(), set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo += kids.get(p, [])
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_sigterm_ends_the_whole_dashboard_tree(tmp_path):
    import optuna

    (tmp_path / "s1").mkdir()
    optuna.create_study(study_name="s1", storage=f"sqlite:///{tmp_path / 's1' / 'optuna.db'}")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "arithsweep", "ui", "--root", str(tmp_path),
                             "--optuna", "s1", "--port", str(port)],
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while not any("ready" in ln for ln in lines):
            assert time.monotonic() < deadline and proc.poll() is None, lines
            lines.append(proc.stderr.readline())
        tree = _tree(proc.pid)
        assert len(tree) >= 2  # arithsweep and the server it started
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 30  # a guard, not a timing assumption: exits are reaped
        while [p for p in tree if _alive(p)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in tree if _alive(p)], "processes outlived arithsweep ui"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _tree(proc.pid) - {os.getpid()}:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_taken_port_is_one_error_line(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(b"")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "arithsweep", "ui", "--root", str(tmp_path),
                              "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: port ")
