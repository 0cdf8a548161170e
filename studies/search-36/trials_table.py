"""The table of every shape the search below the 36 trained: from each Tune trial's own files.

For each trial of `searches/add10-path36/tune` (in the order Optuna proposed them): its unique
parameters, how its shape differs from tbukic's 36 (entry 60), the steps it trained, and at
the end of the path's first phase (200,000 steps, where it got there) and at its last
evaluation, how many of its seeds were above 10 / 50 / 90 / 99% held-out exact match, its
best seed, and why it stopped. The per-seed figures are the `em_seed<i>` columns Tune wrote
to each trial's progress.csv (one row per evaluation).

    python studies/search-36/trials_table.py          # a markdown table
    python studies/search-36/trials_table.py studies/search-36b/searches/add10-path36b
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

TUNE = Path(__file__).parent / "searches" / "add10-path36" / "tune"
LEVELS = (0.10, 0.50, 0.90, 0.99)
PHASE_END = 200_000  # the tbukic space's cosine phase (its path's first)
THE_36 = {"d_model": 3, "d_ff": 2, "activation": "swiglu", "norm_weight": "vector",
          "qk_norm": "shared", "embed": "arc", "tie_k": "rotated", "mlp_down": "up_t_rot",
          "tie_gate": False}


def shape(params: dict) -> str:
    """The trial's searched model keys where they differ from the 36's."""
    model = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith("model.")}
    diff = [f"{k} {model.get(k)}" for k, v in THE_36.items()
            if k in model and model[k] != v]
    return ", ".join(diff) or "the 36's own shape"


def levels(row: dict) -> str:
    seeds = [float(v) for k, v in row.items() if k.startswith("em_seed") and v not in ("", None)]
    counts = " / ".join(str(sum(e > lv for e in seeds)) for lv in LEVELS)
    return f"{counts} of {len(seeds)}, best {max(seeds):.1%}" if seeds else "-"


def trial_row(folder: Path) -> tuple[int, str] | None:
    params = json.loads((folder / "params.json").read_text())
    rows = [r for r in csv.DictReader((folder / "progress.csv").open()) if r.get("em_seed0")]
    if not rows:
        return None
    stop = _stop_reason(folder)
    ended = [r for r in rows if int(r["step"]) == PHASE_END]
    last = rows[-1]
    size = int(float(last["params"]))
    at_end = levels(ended[-1]) if ended else "-"
    number = int(params.get("trial_number", 0))
    return number, (f"| {number} | {size} | {shape(params)} | {int(last['step']):,} | "
                    f"{at_end} | {levels(last)} | {stop} |")


def _stop_reason(folder: Path) -> str:
    """Why the trial stopped: its last reported reason in Tune's result.json, or, where that
    file is not kept (over 2 MB, a finished trial's), the search's summary.json."""
    if (folder / "result.json").is_file():
        results = [json.loads(ln) for ln in (folder / "result.json").open() if ln.strip()]
        return next((r["stop_reason"] for r in reversed(results) if r.get("stop_reason")),
                    "running or cut (resumes)")
    summary = json.loads((folder.parents[1] / "summary.json").read_text())
    trial = folder.name.removeprefix("trial_")
    return next(t["stop_reason"] for t in summary["trials"] if t["trial_id"] == trial)


def main() -> None:
    tune = Path(sys.argv[1]) / "tune" if len(sys.argv) > 1 else TUNE  # another search folder
    print("| # | params | shape against the 36's | steps | at 200K: seeds > 10/50/90/99% | "
          "at its last evaluation | stopped |")
    print("|---:|---:|---|---:|---|---|---|")
    rows = [r for r in (trial_row(d) for d in sorted(tune.glob("trial_*"))) if r]
    for _, line in sorted(rows):
        print(line)


if __name__ == "__main__":
    main()
