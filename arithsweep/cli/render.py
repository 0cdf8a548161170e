"""Render leaderboard rows (the dicts `Leaderboard.query`/`get` return) for people and tools.

`to_json`, `to_csv` and `to_markdown` return strings (the markdown is a GitHub table, as in the
published leaderboard/LEADERBOARD.md); `rich_table` and `entry_detail` return Rich renderables
for `arithsweep leaderboard` and `arithsweep show`. No torch: this sits on the fast path.

    python -c "from arithsweep.leaderboard.board import open_db; from arithsweep.cli.render import \\
        to_markdown; print(to_markdown(open_db(create=False).query()))"
"""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import ROUND_DOWN, Decimal
from typing import Any

# Columns of every human-facing table (markdown, Rich); `_cells` renders one row.
COLUMNS = ("rank", "task", "params", "exact match", "nines", "problems checked",
           "architecture", "date", "entry id")  # fmt: skip

# Flat columns for CSV (spreadsheets); the nested failures and breakdown live in the JSON.
CSV_FIELDS = (
    "rank", "id", "task", "format", "params", "exact_match", "nines", "wilson_lower",
    "n_problems", "n_failures", "target", "architecture", "suite", "suite_seed", "suite_size",
    "sha256", "checkpoint_path", "mlflow_run_id", "search_name", "trial_id", "seed", "steps",
    "wall_time", "device", "version", "created_at", "verified_at", "reproduce",
    "model_config", "train_config",
)  # fmt: skip


def percent(x: float | None) -> str:
    """Exact match as a percentage with 4 decimals, rounded down: 0.9999999 -> "99.9999%".

    Rounded down so that a model with failures never shows as 100.0000%; via Decimal(repr)
    so that 0.99 stays 99.0000% and does not become 98.9999%.
    """
    if x is None:
        return ""
    return f"{(Decimal(repr(float(x))) * 100).quantize(Decimal('0.0001'), ROUND_DOWN)}%"


def _date(row: dict[str, Any]) -> str:
    return str(row.get("created_at") or "")[:10]  # ISO-8601: the date is the first 10 chars


def _cells(row: dict[str, Any]) -> list[str]:
    n = row.get("n_problems")
    return [
        "" if row.get("rank") is None else str(row["rank"]),
        str(row.get("task", "")),
        str(row.get("params", "")),
        percent(row.get("exact_match")),
        str(row.get("nines", "")),
        f"{n:,}" if isinstance(n, int) else "",
        str(row.get("architecture") or ""),
        _date(row),
        str(row.get("id", "")),
    ]


def to_json(rows: list[dict[str, Any]]) -> str:
    """All fields of every row (nested configs and breakdowns included), indented JSON."""
    return json.dumps(list(rows), indent=2, default=str)


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat = {k: row.get(k) for k in CSV_FIELDS}
        for k in ("model_config", "train_config"):
            flat[k] = json.dumps(row.get(k) or {}, sort_keys=True)
        writer.writerow(flat)
    return buf.getvalue()


def _md_escape(cell: str) -> str:
    return cell.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(rows: list[dict[str, Any]], title: str | None = None) -> str:
    """A GitHub-flavoured markdown table (right-aligned numbers), optionally under a heading."""
    out = [f"## {title}", ""] if title else []
    if not rows:
        return "\n".join([*out, "_No verified entries yet._", ""])
    right = {"rank", "params", "exact match", "nines", "problems checked", "entry id"}
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "|".join("---:" if c in right else "---" for c in COLUMNS) + "|")
    for row in rows:
        out.append("| " + " | ".join(_md_escape(c) for c in _cells(row)) + " |")
    return "\n".join(out) + "\n"


def rich_table(rows: list[dict[str, Any]], title: str | None = None) -> Any:
    """The same columns as `to_markdown`, as a `rich.table.Table`."""
    from rich.table import Table  # lazy: --json/--csv output never needs Rich

    table = Table(title=title)
    right = {"rank", "params", "exact match", "nines", "problems checked", "entry id"}
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in right else "left",
                         no_wrap=col != "architecture")  # fmt: skip
    for row in rows:
        table.add_row(*_cells(row))
    return table


def _natural(key: str) -> list[Any]:
    # "S10" after "S9", "10x3" after "9x3": compare the digit runs as numbers.
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(key))]


def _bucket_table(title: str, label: str, buckets: dict[str, dict[str, int]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column(label)
    for col in ("problems", "correct", "failures", "exact match"):
        table.add_column(col, justify="right")
    for key in sorted(buckets, key=_natural):
        n, correct = int(buckets[key]["n"]), int(buckets[key]["correct"])
        em = percent(correct / n) if n else ""
        table.add_row(str(key), f"{n:,}", f"{correct:,}", f"{n - correct:,}", em)
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
    for key, title, label in (
        ("by_carry", "By carry class", "class"),
        ("by_lengths", "By operand lengths", "lengths"),
        ("by_answer_len", "By answer length", "digits"),
    ):
        if breakdown.get(key):
            parts.append(_bucket_table(title, label, breakdown[key]))
    failures = row.get("failures") or []
    if failures:
        lines = [f"{f.get('problem')} = {f.get('expected')}, got {f.get('got')}" for f in failures]
        parts.append(Panel(Text("\n".join(lines)), title="First failures",
                           title_align="left", expand=False))
    if row.get("reproduce"):
        parts.append(Panel(Text(row["reproduce"]), title="Reproduce",
                           title_align="left", expand=False))
    return Group(*parts)


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
    parts: list[Any] = [_kv_table("Verification", head),
                        _bucket_table("By carry class", "class", d["by_carry"])]
    lengths = d["by_lengths"]
    if len(lengths) > 25:  # add10 has 100 length pairs: show the worst ten
        worst = sorted(lengths, key=lambda k: lengths[k]["correct"] / max(1, lengths[k]["n"]))
        lengths = {k: lengths[k] for k in worst[:10]}
        title = "By operand lengths (10 worst)"
    else:
        title = "By operand lengths"
    parts.append(_bucket_table(title, "lengths", lengths))
    if d["failures"]:
        lines = [f"{f['problem']} = {f['expected']}, got {f['got']}" for f in d["failures"]]
        parts.append(Panel(Text("\n".join(lines)), title="First failures",
                           title_align="left", expand=False))
    return Group(*parts)
