"""Run a UI server (the MLflow UI, optuna-dashboard) for `arithsweep ui` and stop all of it.

The MLflow UI is a tree of processes (its server, workers, their helpers): signalling only the
child left fifteen of them running after `arithsweep ui` got SIGTERM. Here the server starts in
a process group of its own, and SIGTERM, SIGINT (Ctrl-C), SIGHUP or the server's own exit end
the whole group. The port is checked before starting (the MLflow UI used to exit 0 on a taken
port) and a line says when the page answers. Telemetry is off, as Ray's usage stats are.

    arithsweep ui --port 5001
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

from arithsweep.cli.common import err
from arithsweep.core.errors import ArithsweepError

STOP_GRACE = 5.0  # seconds the group gets after SIGTERM before SIGKILL
READY_WAIT = 180.0  # seconds to wait for the page before saying it is slow


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise ArithsweepError(f"--port {port}: must be in 1..65535")
    if not port_free(port):
        raise ArithsweepError(f"port {port} on 127.0.0.1 is in use: pass another --port")


def _answers(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's whole process group, SIGKILL to whatever outlives the grace."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; its helpers may not be
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        return


def serve_until_stopped(cmd: list[str], port: int, what: str, pages: list[str] = ()) -> int:
    """Start `cmd` (a server on 127.0.0.1:`port`) and block until it exits or we are told to
    stop; returns the exit code for the CLI (0 when stopped by a signal). `pages`: URL
    fragments to print once the server answers."""
    check_port(port)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    stopping: list[int] = []

    def on_signal(signum, _frame) -> None:
        stopping.append(signum)
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    err.print(f"starting {what} (Ctrl-C stops it) ...")
    try:
        start, ready = time.monotonic(), False
        while proc.poll() is None:
            if not ready and _answers(port):
                ready = True
                err.print(f"ready: http://127.0.0.1:{port}")
                for page in pages:
                    err.print(f"  http://127.0.0.1:{port}/{page}")
            elif not ready and time.monotonic() - start > READY_WAIT:
                ready = True
                err.print(f"still starting after {READY_WAIT:.0f} s; it may be slow to load")
            time.sleep(0.25 if not ready else 1.0)
        if proc.returncode and not ready:
            raise ArithsweepError(f"{what} did not start (exit code {proc.returncode})")
        return proc.returncode or 0
    except KeyboardInterrupt:
        return 0
    finally:
        _stop_group(proc)
        for s, h in old.items():
            signal.signal(s, h)
