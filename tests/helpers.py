"""What several test files share to drive the command line, kept out of any one test file.

- `run(capsys, *args)`: the CLI in this process, as `(exit code, stdout, stderr)`;
- `run_cli(*args)`: the real console entry in a subprocess, as a user runs it;
- `one_error_line(out, *words)`: a mistake got one `error:` line on stderr and exit 2, no
  traceback;
- `no_heavy_imports(argv, env)`: the command ran without importing torch, ray or mlflow;
- `LONG_SPACE`, `LONG_STEPS`: a one-proposal search space whose trial trains every step of
  its schedule, writing a state every 200 (the tests that kill a search or its trial).

Test files import it as `from helpers import run` (tests/ is on sys.path: pytest's rootdir
import mode).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from arithsweep.cli.app import main

ROOT = Path(__file__).resolve().parents[1]
# a model too small to reach the target, so its one trial trains every step of its schedule
LONG_SPACE = """
name: test-long
model:
  n_layers: 1
  d_model: 4
  n_heads: 1
  d_ff: {choice: [4]}
train:
  steps: 2400
  lr: 0.01
  batch_size: 64
  seeds: 2
  eval_every: 100
  eval_size: 256
  checkpoint_every: 200
"""
LONG_STEPS = 2400


def run(capsys, *args) -> tuple[int, str, str]:
    old = sys.argv
    sys.argv = ["arithsweep", *map(str, args)]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = old
    o, e = capsys.readouterr()
    return code, o, e


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arithsweep", *args], capture_output=True,
                          text=True, timeout=180)


def one_error_line(out: subprocess.CompletedProcess, *words: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), out.stderr
    assert all(w in lines[0] for w in words), lines[0]


def no_heavy_imports(argv: list[str], env: dict) -> None:
    code = ("import sys; sys.argv = " + repr(["arithsweep", *argv]) + "\n"
            "from arithsweep.cli.app import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = {'torch', 'ray', 'mlflow'} & set(sys.modules)\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


def cpu_has(*flags: str) -> bool:
    """This CPU lists every one of `flags` in /proc/cpuinfo (False where it cannot be read):
    which of the kernel's builds (x86-64-v3, v4) a same-bits test can run here."""
    try:
        line = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return all(f in line.split() for f in flags)
