"""Where the tiny kernel's time goes, by the line of its tile function the samples fall in.

The instrument behind the kernel's time-by-line figures in docs/benchmarks.md. It takes the
kernel's inputs at the last of a few hundred training steps of the 36-p (or 44-p) anchor
(`kernel_ab.capture`), builds the kernel with the project's flags plus `-g` (debug lines do not
change the code GCC emits), calls its forward+backward --calls times on one thread under
`perf record -e cpu-clock` (a software clock: no hardware counters needed, so it also runs in
a VM), and sums the samples of each instruction of the tile function by the line of `tile`
they belong to (`addr2line -i`: a helper inlined into `tile` counts at its call's line), or by
a helper's own line with --inner. Needs `perf` and `addr2line` (binutils).

    python scripts/kernel_lines.py                      # 36 p, 64 seeds, 600 calls
    python scripts/kernel_lines.py --shape 44 --inner   # the helpers' own lines
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "arithsweep/core/model/tiny_kernel.c"


def child(so: str, shape: str, seeds: int, calls: int) -> None:
    """Runs under perf: the captured inputs through the -g build, `calls` times."""
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    import kernel_ab

    torch.set_num_threads(1)
    k = kernel_ab.capture(shape, seeds, 300)
    lib = kernel_ab.build(Path(so).with_suffix(".c"), Path(so).parent, Path(so).stem)
    for _ in range(calls):
        kernel_ab.call(lib, k, False)


def samples(data: Path, so: Path, symbol: str) -> list[tuple[str, float]]:
    """(address, percent of the symbol's samples) of each sampled instruction."""
    out = subprocess.run(["perf", "annotate", "--stdio", "-i", str(data), "-d", so.name, symbol],
                         capture_output=True, text=True, check=True).stdout
    rows = re.findall(r"^\s+([0-9.]+)\s+:\s+([0-9a-f]+):", out, re.M)
    return [(a, float(p)) for p, a in rows if float(p) > 0]


def lines_of(so: Path, addrs: list[str], inner: bool) -> dict[str, str]:
    """address -> "function:line": the outermost `tile` frame (or the innermost with inner)."""
    out = subprocess.run(["addr2line", "-e", str(so), "-i", "-f", "-a"],
                         input="\n".join("0x" + a for a in addrs), capture_output=True,
                         text=True, check=True).stdout.splitlines()
    where, cur, frames = {}, None, []

    def close() -> None:
        if cur is None:
            return
        pairs = [(frames[i], frames[i + 1].rsplit(":", 1)[-1].split()[0])
                 for i in range(0, len(frames) - 1, 2)]
        tile = [f"tile:{n}" for f, n in pairs if f == "tile"]
        where[cur] = (f"{pairs[0][0]}:{pairs[0][1]}" if inner or not tile else tile[-1])

    for line in out:
        if line.startswith("0x"):
            close()
            cur, frames = line[2:].lstrip("0") or "0", []
        else:
            frames.append(line)
    close()
    return where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("36", "44"), default="36")
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--calls", type=int, default=600)
    ap.add_argument("--inner", action="store_true", help="by the innermost inlined helper's line")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.shape, a.seeds, a.calls)
    missing = [t for t in ("perf", "addr2line") if shutil.which(t) is None]
    if missing:
        sys.exit(f"kernel_lines: needs {' and '.join(missing)} on PATH")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        so = tmp / "kernel_g.so"
        shutil.copy(SOURCE, so.with_suffix(".c"))
        env = {**os.environ, "ARITHSWEEP_KERNEL_CFLAGS":
               (os.environ.get("ARITHSWEEP_KERNEL_CFLAGS", "") + " -g").strip()}
        data = tmp / "perf.data"
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "10000", "-o", str(data),
                        "--", sys.executable, __file__, "--child", str(so), "--shape", a.shape,
                        "--seeds", str(a.seeds), "--calls", str(a.calls)], env=env, check=True)
        report = subprocess.run(["perf", "report", "--stdio", "-i", str(data), "--sort", "sym",
                                 "-d", so.name], capture_output=True, text=True,
                                check=True).stdout
        symbol = re.search(r"\[\.\]\s+(tile\w*)", report)
        if symbol is None:
            sys.exit("kernel_lines: no samples in the kernel's tile function")
        rows = samples(data, so, symbol.group(1))
        where = lines_of(so, [r[0] for r in rows], a.inner)
    total = collections.Counter()
    for addr, pct in rows:
        total[where.get(addr.lstrip("0"), "?")] += pct
    text = SOURCE.read_text().splitlines()
    print(f"{symbol.group(1)}, {a.shape} p, {a.seeds} seeds, {a.calls} calls: % of its samples")
    for key, pct in total.most_common(a.top):
        n = key.rsplit(":", 1)[-1]
        src = text[int(n) - 1].strip() if n.isdigit() and int(n) <= len(text) else ""
        print(f"{pct:6.2f}  {key:<22} {src[:90]}")


if __name__ == "__main__":
    main()
