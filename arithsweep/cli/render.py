"""Rich renderables for people at a terminal: leaderboard rows, reports, a running search.

`rich_table` (`arithsweep leaderboard`), `entry_detail` (`arithsweep show`), `report_detail`
(`arithsweep verify`) and `LiveSearch` (the header line and trials table `arithsweep search`
keeps redrawing while it runs). The string formats (JSON, CSV, markdown) and the published
LEADERBOARD.md live in `arithsweep.leaderboard.publish`, whose columns and cells this reuses so
that the terminal and the markdown tables agree. No torch: this sits on the fast path.

    python -c "from rich import print; from arithsweep.leaderboard.board import open_db; \\
        from arithsweep.cli.render import rich_table; \\
        print(rich_table(open_db(create=False).query()))"
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from arithsweep.core.evaluation.stats import (
    class_health,
    outside_protocols,
    per_operation,
    percent,
)
from arithsweep.leaderboard.report import nines
from arithsweep.leaderboard.tables import COLUMNS, RIGHT_ALIGNED, cells


def rich_table(rows: list[dict[str, Any]], title: str | None = None) -> Any:
    """The same columns as `to_markdown`, as a `rich.table.Table`."""
    from rich.table import Table  # lazy: --json/--csv output never needs Rich

    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in RIGHT_ALIGNED else "left",
                         no_wrap=col != "architecture")  # fmt: skip
    for row in rows:
        table.add_row(*cells(row))
    return table


def _natural(key: str) -> list[Any]:
    # "S10" after "S9", "10x3" after "9x3": compare the digit runs as numbers.
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(key))]


def _bucket_table(title: str, label: str, buckets: dict[str, dict[str, int]],
                  ordered: bool = False, prefix: str = "") -> Any:
    """One row per bucket; `ordered` keeps the given order (Quirke's S.., M.., N.. classes)
    and adds each bucket's own nines. `prefix` renames the stored "S<k>" keys for display."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column(label)
    for col in ("problems", "correct", "failures", "exact match") + ("nines",) * ordered:
        table.add_column(col, justify="right")
    for key in buckets if ordered else sorted(buckets, key=_natural):
        n, correct = int(buckets[key]["n"]), int(buckets[key]["correct"])
        em = percent(correct / n) if n else ""
        extra = [str(nines(n - correct, n))] if ordered else []
        shown = f"{prefix}{str(key)[1:]}" if prefix and str(key)[:1] == "S" else str(key)
        table.add_row(shown, f"{n:,}", f"{correct:,}", f"{n - correct:,}", em, *extra)
    return table


def _kv_table(title: str, items: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for k, v in items.items():
        text = json.dumps(v) if isinstance(v, dict | list) else str(v)
        table.add_row(str(k), text)
    return table


def entry_detail(row: dict[str, Any]) -> Any:
    """Everything about one entry for `arithsweep show`, as one Rich renderable group."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    summary = {
        "entry": f"{row.get('id')}  (rank {row.get('rank')} for {row.get('task')})",
        "task / format": f"{row.get('task')} / {row.get('format')}",
        "parameters": row.get("params"),
        "architecture": row.get("architecture") or "",
        "exact match": f"{percent(row.get('exact_match'))}  (target {row.get('target')})",
        "problems": f"{row.get('n_problems', 0):,}  ({row.get('n_failures', 0):,} failed)",
        "nines": row.get("nines"),
        **per_operation((row.get("breakdown") or {}).get("by_op"), row.get("target")),
        **outside_protocols((row.get("breakdown") or {}).get("by_protocol")),
        "Wilson 95% lower": f"{row.get('wilson_lower', 0.0):.6f}",
        "suite": f"{row.get('suite')}  (seed {row.get('suite_seed')}, "
        f"size {row.get('suite_size') or '?'})",
        "checkpoint": row.get("checkpoint_path"),
        "sha256": row.get("sha256"),
        "MLflow run": row.get("mlflow_run_id") or "-",
        "search / trial": f"{row.get('search_name') or '-'} / {row.get('trial_id') or '-'}",
        "seed / steps": f"{_dash(row.get('seed'))} / {_dash(row.get('steps'))}",
        "wall time / device": f"{_seconds(row.get('wall_time'))} / {row.get('device') or '-'}",
        "recorded / verified": f"{row.get('created_at')} / {row.get('verified_at')}",
        "arithsweep": row.get("version"),
    }
    parts: list[Any] = [_kv_table(f"Leaderboard entry {row.get('id')}", summary)]
    for key, title in (("model_config", "Model config"), ("train_config", "Train config")):
        if row.get(key):
            parts.append(_kv_table(title, row[key]))
    breakdown = row.get("breakdown") or {}
    heads = {**_titles(row.get("task")), "by_answer_len": ("By answer length", "digits")}
    for key, (title, label, *prefix) in heads.items():
        if breakdown.get(key):
            parts.append(_bucket_table(title, label, breakdown[key], prefix="".join(prefix)))
    if breakdown.get("by_class"):
        parts.append(_bucket_table("By Quirke class", "class", breakdown["by_class"],
                                   ordered=True))
    if breakdown.get("by_op"):  # a mixed task: addition and subtraction each with its nines
        parts.append(_bucket_table("By operation", "operation", breakdown["by_op"], ordered=True))
    failures = row.get("failures") or []
    if failures:
        lines = [f"{f.get('problem')} = {f.get('expected')}, got {f.get('got')}" for f in failures]
        parts.append(Panel(Text("\n".join(lines)), title="First failures",
                           title_align="left", expand=False))
    if row.get("reproduce"):
        parts.append(Panel(Text(row["reproduce"]), title="Reproduce",
                           title_align="left", expand=False))
    return Group(*parts)


def _titles(task: str | None) -> dict[str, tuple[str, ...]]:
    """Breakdown headings: sorting reuses the carry/lengths buckets for inversions (S0 = already
    sorted, see core/data/sort_task.py) and the digit counts of its smallest and largest values."""
    if str(task or "").startswith("sort"):
        return {"by_carry": ("By inversions (0 = already sorted)", "inversions", "inv "),
                "by_lengths": ("By value lengths (smallest x largest)", "digits")}
    # the longest run of carries (borrows), not Quirke's S0..S5 classes shown beside it
    return {"by_carry": ("By longest carry chain (chain k: k carries in a row)", "chain",
                         "chain "),
            "by_lengths": ("By operand lengths", "lengths")}


def _dash(x: Any) -> str:
    return "-" if x is None else str(x)


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def report_detail(report: Any) -> Any:
    """A VerificationReport for `arithsweep verify`: headline, breakdowns, first failures."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    d = report.to_dict()
    head = {
        "checkpoint": d["checkpoint_path"],
        "sha256": d["sha256"],
        "task / format": f"{d['task']} / {d['format']}",
        "parameters (from weights)": d["params"],
        "architecture": d["architecture"],
        "suite": f"{d['suite']} (seed {d['suite_seed']}, {d['suite_size']:,} problems)",
        "exact match": f"{percent(d['exact_match'])}  ({d['n_failures']:,} failures)",
        "nines": d["nines"],
        **per_operation(d.get("by_op"), d["target"]),
        **outside_protocols(d.get("by_protocol")),
        "Wilson 95% lower": f"{d['wilson_lower']:.6f}",
    }
    heads = _titles(d["task"])
    title, label, prefix = heads["by_carry"]
    parts: list[Any] = [_kv_table("Verification", head),
                        _bucket_table(title, label, d["by_carry"], prefix=prefix)]
    health = class_health({k: d.get(k) or {} for k in ("by_lengths", "by_answer_len",
                                                        "by_class", "by_special")})
    weak = [h for h in health if h[2] < 0.5]
    if weak:  # a natural class the headline figure hides
        lines = [f"{name}: {em:.2%} of {n:,} ({'fails entirely' if em == 0 else 'fails mostly'})"
                 for name, n, em in weak]
        parts.append(Panel(Text("\n".join(lines)), title="Classes that fail",
                           title_align="left", expand=False, border_style="red"))
    elif health and health[0][2] < 1.0:
        name, n, em = health[0]
        parts.append(Text(f"worst class: {name}, {percent(em)} of {n:,}"))
    if d.get("by_class"):  # Quirke's classes, each with its own nines (add, sub, mix)
        parts.append(_bucket_table("By Quirke class", "class", d["by_class"], ordered=True))
    if d.get("by_op"):  # a mixed task: addition and subtraction each with its nines
        parts.append(_bucket_table("By operation", "operation", d["by_op"], ordered=True))
    lengths = d["by_lengths"]
    if len(lengths) > 25:  # add10 has 100 length pairs: show the worst ten
        worst = sorted(lengths, key=lambda k: lengths[k]["correct"] / max(1, lengths[k]["n"]))
        lengths = {k: lengths[k] for k in worst[:10]}
    title, label = heads["by_lengths"]
    if len(lengths) != len(d["by_lengths"]):
        title += " (10 worst)"
    parts.append(_bucket_table(title, label, lengths))
    if d["failures"]:
        lines = [f"{f['problem']} = {f['expected']}, got {f['got']}" for f in d["failures"]]
        parts.append(Panel(Text("\n".join(lines)), title="First failures",
                           title_align="left", expand=False))
    return Group(*parts)


# The live view of `arithsweep search`. Its rows are the driver's events merged per proposal
# (arithsweep.search.report.live); `progress` is the driver's SearchProgress as a dict.

FINISHED = ("done", "error", "verified", "rejected")  # proposals whose training has ended
_STATUS_STYLE = {"running": "cyan", "verified": "green", "rejected": "red", "error": "red",
                 "skipped": "dim"}
_HEADS = ("trial", "status", "params", "best em", "step", "seeds")
# Used only when the full summary does not fit: the position encodings are its longest words.
_SHORT_WORDS = {"learned": "lpos", "sinusoidal": "sin", "digit_index": "digit-ix",
                "abacus_bias": "abacus-b", "abacus_rope": "abacus-r",
                "places-learned": "places-l"}


def short_architecture(summary: str, width: int) -> str:
    """`ModelConfig.summary()` in at most `width` characters: as it is if it fits, else with
    shorter words, else cut after the last whole word that fits, with an ellipsis (never
    inside a word: "d32" cut to "d3" would name another model)."""
    if len(summary) <= width:
        return summary
    words = [_SHORT_WORDS.get(w, w) for w in summary.split()]
    short = " ".join(words)
    if len(short) <= width:
        return short
    kept = ""
    for w in words:
        if len(f"{kept} {w}".lstrip()) + 1 > width:
            break
        kept = f"{kept} {w}".lstrip()
    return (kept + "…") if kept else "…"[:width]


def proposal_counts(rows: dict[str, dict]) -> dict[str, int]:
    """Proposals trained (to the end, errors included), skipped untrained, and running."""
    statuses = [r.get("status") for r in rows.values()]
    return {"trained": sum(s in FINISHED for s in statuses),
            "skipped": statuses.count("skipped"), "running": statuses.count("running")}


def proposals_per_cpu_hour(rows: dict[str, dict], cpus_per_trial: float) -> float | None:
    """Finished proposals per CPU-hour of the Tune trials that trained them (a pack's proposals
    share one trial's time), counted as the search summary counts them; None before any."""
    done = {pid: r for pid, r in rows.items() if r.get("status") in FINISHED}
    seconds: dict[str, float] = {}
    for pid, r in done.items():
        key = str(r.get("tune_trial_id") or pid)
        seconds[key] = max(seconds.get(key, 0.0), float(r.get("time_total_s") or 0.0))
    hours = cpus_per_trial * sum(seconds.values()) / 3600
    return len(done) / hours if hours > 0 else None


def _clock(seconds: float) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h}h{rest // 60:02d}m{rest % 60:02d}s" if h else f"{rest // 60}m{rest % 60:02d}s"


def _span(seconds: float) -> str:
    h, rest = divmod(int(round(seconds)), 3600)
    parts = [f"{h}h" * bool(h), f"{rest // 60}m" * bool(rest // 60), f"{rest % 60}s" * bool(rest % 60)]
    return "".join(parts) or "0s"


def _em(x: Any, decimals: int = 4) -> str:
    if not isinstance(x, int | float):
        return "?"
    # percent() rounds down (a model with failures never shows 100%), so cutting digits off
    # its text still rounds down; trailing zeros only take room
    text = percent(float(x))[:-1]
    return text[:text.index(".") + 1 + decimals].rstrip("0").rstrip(".") + "%"


def search_header(progress: dict | None, rows: dict[str, dict], now: float, width: int) -> str:
    """One line: elapsed time of the budget, the verified incumbent, proposals trained /
    skipped / running, proposals per CPU-hour. Each part has shorter forms, taken one step at
    a time (the rate first, the time last) until the line fits `width`; then it is cut."""
    if progress is None:
        return "starting the search…"
    spent = _clock(max(0.0, now - float(progress["started"])))
    budget = float(progress.get("time_budget") or 0)
    times = ((f"{spent} of {_span(budget)}", f"{spent}/{_span(budget)}") if budget
             else (f"{spent}, no budget",))
    inc = progress.get("incumbent")
    if inc:
        p, entry = inc.get("params"), inc.get("entry_id")
        em, em2 = _em(inc.get("exact_match")), _em(inc.get("exact_match"), 2)
        incs = tuple(f"{head}{'' if entry is None else tail + str(entry)}" for head, tail in (
            (f"incumbent {p} p, {em} verified", ", entry "), (f"best {p}p {em2}", " entry "),
            (f"best {p}p {em2}", " e")))
    else:
        incs = ("incumbent: none yet", "best: none yet")
    n = proposal_counts(rows)
    t, s, r = n["trained"], int(progress.get("skipped", n["skipped"])), n["running"]
    counts = (f"{t} trained, {s} skipped, {r} running", f"{t} trained {s} skipped {r} running",
              f"{t} trained {s} skip {r} run")
    rate = proposals_per_cpu_hour(rows, float(progress.get("cpus_per_trial") or 1.0))
    rates = ((f"{rate:.1f} proposals/CPU-hour", f"{rate:.{0 if rate >= 10 else 1}f}/CPU-h")
             if rate else ("- proposals/CPU-hour", "-/CPU-h"))
    parts, level = (times, incs, counts, rates), [0, 0, 0, 0]
    for step in (None, 3, 2, 1, 2, 0, 1):
        if step is not None:
            level[step] = min(level[step] + 1, len(parts[step]) - 1)
        line = " · ".join(forms[i] for forms, i in zip(parts, level))
        if len(line) <= width:
            return line
    return line[:width - 1] + "…"


def _latest(rows: dict[str, dict], limit: int) -> list[str]:
    """Up to `limit` proposal ids in the order they appeared: every running one, then the
    most recent others."""
    ids = list(rows)
    if len(ids) <= limit:
        return ids
    running = {t for t in ids if rows[t].get("status") == "running"}
    if len(running) >= limit:
        return [t for t in ids if t in running][-limit:]
    others = [t for t in ids if t not in running]
    keep = running | set(others[len(others) - (limit - len(running)):])
    return [t for t in ids if t in keep]


def _trial_cells(tid: str, r: dict) -> list[str]:
    em, step = r.get("best_em"), r.get("step")
    # seeds that reached the target of those trained once it has ended, else seeds training
    reached, trained = r.get("seeds_reached"), r.get("seeds_trained")
    seeds = str(r.get("seeds") or "")
    if reached is not None and trained is not None:
        seeds = f"{reached}/{trained}"
    # steps run to hundreds of thousands at the frontier: thousands keep the column narrow
    steps = "" if step is None else f"{int(step)}" if step < 10_000 else f"{int(step) // 1000}k"
    return [tid, str(r.get("status", "")), str(r.get("params") or ""),
            f"{em:.4f}" if isinstance(em, float) else "", steps, seeds]


def trials_table(rows: dict[str, dict], width: int, limit: int = 30) -> Any:
    """The latest proposals, one line each at any `width`: the architecture gets the room the
    other columns leave (`short_architecture`); nothing in the table wraps."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    shown = _latest(rows, limit)
    cells = [_trial_cells(t, rows[t]) for t in shown]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(_HEADS)]
    arch_w = max(4, width - sum(widths) - len(_HEADS))  # one space between columns
    hidden = len(rows) - len(shown)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0),
                  caption=f"{hidden} earlier proposals not shown" if hidden else None,
                  caption_justify="left")
    for head, w in zip(_HEADS, widths):
        table.add_column(head, no_wrap=True, min_width=w,
                         justify="left" if head in ("trial", "status") else "right")
    table.add_column("architecture", no_wrap=True, overflow="ellipsis", max_width=arch_w)
    for t, row in zip(shown, cells):
        status = Text(row[1], style=_STATUS_STYLE.get(row[1], ""))
        arch = short_architecture(str(rows[t].get("architecture") or ""), arch_w)
        table.add_row(row[0], status, *row[2:], arch)
    return table


class LiveSearch:
    """What `arithsweep search` shows while it runs: `search_header` over `trials_table`.
    `update` takes the driver's events; Rich renders this object afresh at each refresh, so
    the clock moves between events."""

    def __init__(self, limit: int = 30, clock: Callable[[], float] = time.time) -> None:
        self.limit, self._clock = limit, clock
        self.rows: dict[str, dict] = {}  # proposal id -> its events merged, in first-seen order
        self.progress: dict | None = None
        self._lock = threading.Lock()  # events come on the driver's thread, redraws on Rich's

    def update(self, event: dict) -> None:
        with self._lock:
            if isinstance(event.get("search"), dict):
                self.progress = event["search"]
            if event.get("trial_id") is not None:
                self.rows.setdefault(str(event["trial_id"]), {}).update(
                    {k: v for k, v in event.items() if v is not None and k != "search"})

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        with self._lock:
            rows = {t: dict(r) for t, r in self.rows.items()}
            progress = self.progress
        width = options.max_width
        # the header, the table's head and rule, a caption and the prompt's line stay visible
        limit = max(3, min(self.limit, console.size.height - 5))
        yield Text(search_header(progress, rows, self._clock(), width), no_wrap=True,
                   overflow="ellipsis")
        yield trials_table(rows, width, limit)
