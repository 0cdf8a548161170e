"""Rich renderables for leaderboard rows and verification reports, for people at a terminal.

`rich_table` (`arithsweep leaderboard`), `entry_detail` (`arithsweep show`) and `report_detail`
(`arithsweep verify`). The string formats (JSON, CSV, markdown) and the published
LEADERBOARD.md live in `arithsweep.leaderboard.publish`, whose columns and cells this reuses so
that the terminal and the markdown tables agree. No torch: this sits on the fast path.

    python -c "from rich import print; from arithsweep.leaderboard.board import open_db; \\
        from arithsweep.cli.render import rich_table; \\
        print(rich_table(open_db(create=False).query()))"
"""

from __future__ import annotations

import json
import re
from typing import Any

from arithsweep.core.evaluation.stats import class_health, percent
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
