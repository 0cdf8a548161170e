"""Starting or joining Ray for a search, and holding the libraries' console output back while
it runs: the CLI draws its own live table, and a mistyped `--address` should read as one line.

Driver side; `arithsweep.search.driver.run_search` uses it:

    with quiet_logs():
        started = ray_up(SearchOptions(task="add2"))
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path

from arithsweep.core.errors import ArithsweepError
from arithsweep.search.options import SearchOptions

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the arithsweep package


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def quiet_logs():
    """Hold Ray, Tune, Optuna and MLflow console logs back during a search, then restore the
    levels. The CLI draws its own live table, and a crashed trial shows there, in summary.json
    and in MLflow (traceback in the trial's error.txt), so Tune's ERROR tracebacks are held too.
    """
    import mlflow  # noqa: F401 - both set their logger levels on import: import them first
    import optuna  # noqa: F401

    w, c = logging.WARNING, logging.CRITICAL
    levels = {"ray": w, "ray.tune": c, "ray.train": c, "optuna": w, "mlflow": w, "alembic": w}
    saved = {n: logging.getLogger(n).level for n in levels}
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)
    # Tune warns every few seconds about the (cheap, local) snapshots forced by num_to_keep.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no status tables
    try:
        yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


def ray_up(opts: SearchOptions) -> bool:
    """Start or join Ray unless the caller already did; True when we must shut it down."""
    import ray

    if ray.is_initialized():
        return False
    _check_reachable(opts.address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # the same choice for MLflow
    # Workers import arithsweep by name (the trainable and callbacks are pickled by reference).
    path = [str(_PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
    try:
        with _native_stderr_held():
            if opts.address is None:
                ray.init(address="local", num_cpus=opts.num_cpus or os.cpu_count(),
                         include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING, runtime_env={"env_vars": env})
            else:
                # A cluster's workers may not have this checkout: ship the package with the job
                ray.init(address=opts.address, log_to_driver=False,
                         logging_level=logging.WARNING,
                         runtime_env={"py_modules": [str(_PACKAGE_DIR)]})
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ArithsweepError(f"cannot start or join Ray at {opts.address or 'local'}: "
                              f"{first_line(exc)}") from None
    return True


def _check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """Refuse a HOST:PORT (or ray://HOST:PORT) where nothing listens, at once: Ray itself
    retries a refused local port for minutes before it gives up. None and 'auto' pass."""
    if address is None or address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ArithsweepError(f"--address {address!r}: expected HOST:PORT, ray://HOST:PORT "
                              "or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ArithsweepError(f"cannot join Ray at {address}: nothing answers there "
                              f"({exc.strerror or exc})") from None


@contextlib.contextmanager
def _native_stderr_held():
    """Hold what is written to file descriptor 2 while Ray starts or joins, and replay it only
    if that worked: Ray's C++ client logs a line a second (about 20) while it fails to reach
    an address, and a user's mistyped --address should read as our one error line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        ok = False
        try:
            yield
            ok = True
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                held.seek(0)
                sys.stderr.write(held.read().decode(errors="replace"))
