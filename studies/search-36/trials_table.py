"""The table of every shape the search below the 36 trained: from each Tune trial's own files.

For each trial of `searches/add10-path36/tune` (in the order Optuna proposed them): its unique
parameters, how its shape differs from tbukic's 36 (entry 60), the steps it trained, and at
the end of the path's first phase (200,000 steps, where it got there) and at its last
evaluation, how many of its seeds were above 10 / 50 / 90 / 99% held-out exact match, its
best seed, and why it stopped; a trial that bought a second ticket (the whole path again with
new seeds) has a line per ticket, its steps counted from the ticket's start. The per-seed
figures are the `em_seed<i>` columns Tune wrote to each trial's progress.csv (one row per
evaluation). A proposal cut by a sitting's deadline is replayed by the next sitting's resume as
a new Tune trial (`seeds_of`: its number, `resume_from`: its kept state) whose progress.csv
holds the cut ticket's evaluations again and goes on from there: its lines stand in for the cut
ticket's, under the proposal's number.

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
EVAL_EVERY = 2_000  # its evaluations: a ticket's first row is this many steps in
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


def tickets(rows: list[dict]) -> list[list[dict]]:
    """A trial's evaluations split into its tickets (`near_miss_round: ticket`: the whole
    path again with new seeds, its steps counted on): where the learning rate jumps back up
    to the path's peak (a path's phases only ever start at or below the last one's lr)."""
    out: list[list[dict]] = [[]]
    last_lr = None
    for r in rows:
        lr = float(r["lr"]) if r.get("lr") else None
        if out[-1] and lr and last_lr and lr > 3 * last_lr:
            out.append([])
        out[-1].append(r)
        last_lr = lr or last_lr
    return out


def evaluations(folder: Path) -> list[dict]:
    return [r for r in csv.DictReader((folder / "progress.csv").open()) if r.get("em_seed0")]


def trial_row(folder: Path, params: dict, rows: list[dict],
              cut: dict[int, int]) -> tuple[tuple[int, int], str] | None:
    """The trial's lines from its params.json and `evaluations`, keyed by (proposal, first
    ticket). `cut` maps a proposal whose last ticket a deadline cut to how many tickets it
    had: the replay's lines stand in for that one, labelled with the proposal's number."""
    if not rows:
        return None
    stop = _stop_reason(folder)
    number = int(params.get("trial_number", 0))
    of = params.get("seeds_of")
    size = int(float(rows[-1]["params"]))
    lines, base, first = [], 0, 0
    parts = tickets(rows)
    whole = len(parts)
    if of is not None:  # its rows begin with the cut ticket's, replayed from its start
        first, base = cut[int(of)] - 1, int(rows[0]["step"]) - EVAL_EVERY
    elif number in cut:  # the replay's lines say its cut ticket whole
        parts = parts[:-1]
    for i, part in enumerate(parts):
        ended = [r for r in part if int(r["step"]) - base == PHASE_END]
        at_end = levels(ended[-1]) if ended else "-"
        label = f"{number}" + (f" (ticket {i + 1})" if whole > 1 else "")
        if of is not None:
            label = f"{of} (ticket {first + i + 1}, resumed as #{number})"
        last = part[-1]
        lines.append(f"| {label} | {size} | {shape(params)} | {int(last['step']) - base:,} | "
                     f"{at_end} | {levels(last)} | "
                     f"{stop if i == whole - 1 else 'a near miss: next ticket'} |")
        base = int(parts[i + 1][0]["step"]) - EVAL_EVERY if i + 1 < len(parts) else base
    return (int(of) if of is not None else number, first), "\n".join(lines)


def _stop_reason(folder: Path) -> str:
    """Why the trial stopped: its last reported reason in Tune's result.json, else (that file
    not kept, over 2 MB; or a trial the deadline cut, which reported none) the search's
    summary.json, else it is running."""
    if (folder / "result.json").is_file():
        results = [json.loads(ln) for ln in (folder / "result.json").open() if ln.strip()]
        reason = next((r["stop_reason"] for r in reversed(results) if r.get("stop_reason")), None)
        if reason:
            return reason
    summary = json.loads((folder.parents[1] / "summary.json").read_text())
    trial = folder.name.removeprefix("trial_")
    return next((t["stop_reason"] for t in summary["trials"] if t["trial_id"] == trial),
                "running")


def main() -> None:
    tune = Path(sys.argv[1]) / "tune" if len(sys.argv) > 1 else TUNE  # another search folder
    print("| # | params | shape against the 36's | steps | at 200K: seeds > 10/50/90/99% | "
          "at its last evaluation | stopped |")
    print("|---:|---:|---|---:|---|---|---|")
    folders = sorted(tune.glob("trial_*"))
    params = {d: json.loads((d / "params.json").read_text()) for d in folders}
    rows = {d: evaluations(d) for d in folders}
    number = {int(p.get("trial_number", 0)): d for d, p in params.items()}
    cut = {int(p["seeds_of"]): len(tickets(rows[number[int(p["seeds_of"])]]))
           for p in params.values() if p.get("seeds_of") is not None}
    lines = [r for r in (trial_row(d, params[d], rows[d], cut) for d in folders) if r]
    for _, line in sorted(lines):
        print(line)


if __name__ == "__main__":
    main()
