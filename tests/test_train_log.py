"""`arithsweep train --log FILE`: one line per evaluation, for runs in the background."""

from __future__ import annotations

import subprocess
import sys


def test_train_log_gets_one_line_per_evaluation(tmp_path):
    log = tmp_path / "progress.log"
    out = subprocess.run(
        [sys.executable, "-m", "arithsweep", "train", "--task", "add2", "--steps", "60",
         "--seeds", "2", "--set", "eval_every=20", "--set", "early_stop=false",
         "--out", str(tmp_path / "ck"), "--log", str(log), "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = log.read_text().splitlines()
    assert [ln.split()[1] for ln in lines] == ["20", "40", "60"]
    assert all(len(ln.split(" seeds ")[1].split(" loss ")[0].split()) == 2 for ln in lines)
