"""The search's one picture: unique parameters (log x) against best exact match, per trial.

Feasible trials (exact match >= target) are highlighted, the target is a dashed line and the
Pareto frontier (fewest parameters for each level of exact match) is drawn as a step line.
Uses matplotlib's Agg backend, so it works on headless machines and inside Ray drivers.

    python -m arithsweep.search.report.plots searches/add2-20250101-120000/summary.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def plot_params_vs_em(rows: list[dict[str, Any]], target: float, path: str | Path,
                      title: str = "") -> str | None:
    """Write the PNG to `path`; rows need params, best_em, feasible, errored. Returns the
    path, or None when no trial has a parameter count to plot."""
    import matplotlib

    matplotlib.use("Agg", force=True)  # never try to open a window
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    pts = [r for r in rows if int(r.get("params") or 0) > 0]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    groups = (
        ("infeasible", "#9aa0a6", "o",
         [r for r in pts if not r.get("feasible") and not r.get("errored")]),
        ("errored", "#d93025", "x", [r for r in pts if r.get("errored")]),
        ("feasible", "#1a73e8", "o", [r for r in pts if r.get("feasible")]),
    )
    for label, color, marker, rs in groups:
        if rs:
            ax.scatter([r["params"] for r in rs], [float(r.get("best_em") or 0.0) for r in rs],
                       c=color, marker=marker, s=36, label=f"{label} ({len(rs)})", zorder=3,
                       edgecolors="none" if marker == "o" else None)
    front = frontier(pts)
    if len(front) > 1:
        ax.step([p for p, _ in front], [e for _, e in front], where="post", color="#1a73e8",
                alpha=0.4, linewidth=1, label="frontier", zorder=2)
    ax.axhline(target, color="#188038", linestyle="--", linewidth=1,
               label=f"target {target:g}", zorder=1)
    ax.set_xscale("log")
    xs = sorted({int(r["params"]) for r in pts})
    ax.set_xlim(xs[0] / 1.15, xs[-1] * 1.15)  # keep edge points off the frame
    ax.xaxis.set_minor_formatter(NullFormatter())  # minor log labels collide on short ranges
    if xs[-1] / xs[0] < 10:  # no decade inside the range: label the measured sizes instead,
        gap = (xs[-1] / xs[0]) ** (1 / 7)  # at most ~8, spaced on the log axis so none collide
        ticks = [xs[0]]
        for x in xs[1:]:
            if x / ticks[-1] >= gap:
                ticks.append(x)
        ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("unique parameters (log scale)")
    ax.set_ylabel("best exact match")
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)  # figures are global state in pyplot: free it, a driver may plot again
    return str(out)


def frontier(rows: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """Pareto points (params, exact match): no trial has fewer-or-equal params and higher EM."""
    pts = sorted(((int(r["params"]), float(r.get("best_em") or 0.0)) for r in rows
                  if not r.get("errored") and int(r.get("params") or 0) > 0),
                 key=lambda p: (p[0], -p[1]))
    out: list[tuple[int, float]] = []
    for params, em in pts:
        if not out or em > out[-1][1]:
            out.append((params, em))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m arithsweep.search.report.plots SEARCH_DIR/summary.json",
              file=sys.stderr)
        return 2
    doc = json.loads(Path(argv[0]).read_text())
    out = plot_params_vs_em(doc["trials"], doc["target"], Path(argv[0]).with_name(
        "params_vs_em.png"), title=f"{doc['name']}: {doc['task']}, target {doc['target']:g}")
    print(out or "nothing to plot")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
